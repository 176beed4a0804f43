// Checks that a read model rebuilt from zero is the one its projector wrote
// as the events came: the same rows, whatever batches they came in.
import assert from 'node:assert/strict';
import { sql, type Kysely } from 'kysely';
import type { Service } from '../../api/service.ts';

/** Every row of each table as JSON text, sorted: equal when the tables hold the same rows. */
export function tableRows(db: Kysely<any>, tables: readonly string[]): Promise<string[][]> {
  return Promise.all(
    tables.map(async (table) =>
      (await sql<{ row: string }>`select to_jsonb(t)::text as row from ${sql.table(table)} t`.execute(db)).rows
        .map((r) => r.row)
        .sort(),
    ),
  );
}

export async function assertRebuildGivesTheSameRows(service: Service, projector: string): Promise<void> {
  const { projections, database } = service;
  const tables = projections.projectors.find((p) => p.name === projector)!.tables;
  const snapshot = () => tableRows(database.db, tables);
  await projections.stop();
  try {
    const live = await snapshot();
    assert.ok(live[0]!.length > 0, `${tables[0]} has rows to compare`);
    await projections.rebuild([projector]);
    assert.deepEqual(await snapshot(), live);
  } finally {
    projections.start();
  }
}
