import { sql, type Kysely } from 'kysely';

/**
 * Leaves `table` with `rows` under their keys and no row under the `gone`
 * keys, in the caller's transaction: a to-do table as its follower's batch
 * leaves it (each row written whole, as the batch's last event of it says).
 */
export async function replaceRows<Row extends Record<string, unknown>>(
  db: Kysely<any>,
  table: string,
  key: keyof Row & string,
  rows: readonly Row[],
  gone: readonly string[] = [],
): Promise<void> {
  const keys = [...gone, ...rows.map((row) => String(row[key]))];
  // The table is named at run time: its rows are checked by the caller's own types.
  const trx = db as Kysely<Record<string, Record<string, unknown>>>;
  if (keys.length > 0) await trx.deleteFrom(table).where(sql.ref(key), 'in', keys).execute();
  if (rows.length > 0) await trx.insertInto(table).values(rows).execute();
}
