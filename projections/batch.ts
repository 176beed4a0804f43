// What projectors that write a batch at a time share. A batch commits whole,
// so each row it touches is written once, as its stream stands after the
// batch's last event of it: the rows a batch leaves are those a row-by-row
// replay would leave, and replaying any prefix of the log gives the same rows.
import { sql, type Kysely } from 'kysely';
import type { Projector } from '../adapters/event-store/followers.ts';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import { StreamFolds, type Fold } from '../adapters/event-store/stream-folds.ts';
// The stream folds sit with the log's followers, which the workers' to-do tables use too.
export { eventsByStream, foldsOf, StreamFolds, type Fold, type Folded } from '../adapters/event-store/stream-folds.ts';
import type { ReadModelTables } from './schema.ts';

/**
 * A table of a row a stream of one kind, keyed by `id`, for
 * rowPerStreamProjector: the streams it holds, their fold, and the row of a
 * stream's state.
 */
export interface StreamTable {
  readonly table: keyof ReadModelTables;
  /**
   * Folds the streams `batch` touches, each up to its last event in the
   * batch (a projector's `prepare`), and gives the write of their rows.
   */
  prepare(batch: readonly RecordedEvent[], store: EventStore): Promise<(trx: Kysely<ReadModelTables>) => Promise<void>>;
}

export function streamTable<State, Event, Table extends keyof ReadModelTables>(
  table: Table,
  holds: (streamId: string) => boolean,
  fold: Fold<State | null, Event>,
  /** null: the stream has no row (yet). */
  rowOf: (state: State) => ReadModelTables[Table] | null,
): StreamTable {
  const folds = new StreamFolds<State | null, Event>(holds, fold);
  return {
    table,
    async prepare(batch, store) {
      const states = await folds.ofBatch(batch, store);
      return (trx) =>
        upsertRows(trx, table, ['id' as keyof ReadModelTables[Table] & string], rowsOf(states.values(), rowOf));
    },
  };
}

/**
 * The projector of kinds of streams into tables of their own, a row a stream
 * keyed by `id` (streamTable): each stream's row once a batch, as of its last
 * event in the batch; the tables are written in the order given.
 */
export function rowPerStreamProjector(
  name: string,
  ...tables: StreamTable[]
): Projector<((trx: Kysely<ReadModelTables>) => Promise<void>)[]> {
  return {
    name,
    tables: tables.map((t) => t.table),
    prepare: (batch, store) => Promise.all(tables.map((t) => t.prepare(batch, store))),
    async applyBatch(trx: Kysely<ReadModelTables>, _batch, writes) {
      for (const write of writes) await write(trx);
    },
  };
}

/** The row of each state, skipping the streams that hold nothing to show yet (a null state, or no row of it). */
export function rowsOf<State, Row>(states: Iterable<State | null>, rowOf: (state: State) => Row | null): Row[] {
  const rows: Row[] = [];
  for (const state of states) {
    const row = state === null ? null : rowOf(state);
    if (row !== null) rows.push(row);
  }
  return rows;
}

/** An event's time as a column's value; none stays null. */
export const dateOrNull = (iso: string | null) => (iso === null ? null : new Date(iso));

/**
 * Writes `rows` (all with the same keys, the table's column names) in one
 * statement: a row whose `key` is already there replaces it, or, with
 * `keep`, leaves it as it is. The rows travel as one JSON parameter read back
 * with the table's own column types: a VALUES list would bind every cell
 * (30 columns × 500 rows is 15,000 parameters for PostgreSQL to parse and
 * plan). Dates become ISO strings and JSON values stay JSON for jsonb columns.
 */
export async function upsertRows<Table extends keyof ReadModelTables>(
  trx: Kysely<ReadModelTables>,
  table: Table,
  key: readonly (keyof ReadModelTables[Table] & string)[],
  rows: readonly Partial<Record<keyof ReadModelTables[Table], unknown>>[],
  onConflict: 'replace' | 'keep' = 'replace',
): Promise<void> {
  if (rows.length === 0) return;
  const columns = Object.keys(rows[0]!);
  const conflict = sql.join(key.map((c) => sql.ref(c)));
  const update =
    onConflict === 'keep'
      ? sql`do nothing`
      : sql`do update set ${sql.join(columns.map((c) => sql`${sql.ref(c)} = ${sql.ref(`excluded.${c}`)}`))}`;
  await sql`insert into ${sql.table(table)} (${sql.join(columns.map((c) => sql.ref(c)))})
    select ${sql.join(columns.map((c) => sql.ref(c)))}
      from jsonb_populate_recordset(null::${sql.table(table)}, ${JSON.stringify(rows)}::jsonb)
    on conflict (${conflict}) ${update}`.execute(trx);
}
