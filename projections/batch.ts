// What projectors that write a batch at a time share. A batch commits whole,
// so each row it touches is written once, as its stream stands after the
// batch's last event of it: the rows a batch leaves are those a row-by-row
// replay would leave, and replaying any prefix of the log gives the same rows.
import { sql, type Kysely } from 'kysely';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import type { ReadModelTables } from './schema.ts';

/** The part of a decider a projector folds with. */
export interface Fold<State, Event> {
  readonly initialState: State;
  evolve(state: State, event: Event): State;
}

/**
 * The streams of `batch` that `belongs` picks, each folded up to its last
 * event in the batch. A stream the batch begins is folded from the batch
 * alone; any other is read whole first (before the batch's transaction
 * opens, as `prepare` must).
 */
export async function foldStreamsOfBatch<State, Event>(
  batch: readonly RecordedEvent[],
  store: EventStore,
  belongs: (streamId: string) => boolean,
  fold: Fold<State, Event>,
): Promise<Map<string, State>> {
  const inBatch = new Map<string, RecordedEvent[]>();
  for (const event of batch) {
    if (!belongs(event.streamId)) continue;
    const events = inBatch.get(event.streamId);
    if (events) events.push(event);
    else inBatch.set(event.streamId, [event]);
  }
  const folded = new Map<string, State>();
  await Promise.all(
    [...inBatch].map(async ([streamId, events]) => {
      const last = events.at(-1)!.revision;
      const history =
        events[0]!.revision === 0 ? events : (await store.readStream(streamId)).filter((e) => e.revision <= last);
      folded.set(
        streamId,
        history.reduce((state, e) => fold.evolve(state, { type: e.type, data: e.data } as Event), fold.initialState),
      );
    }),
  );
  return folded;
}

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
