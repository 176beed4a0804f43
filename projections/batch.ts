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
 * The streams of one kind a batch touches, each folded up to its last event
 * in the batch: from the batch alone when it holds the stream's first event,
 * else on from the state this remembers of an earlier batch, else (a
 * stream not seen lately) read whole first, before the batch's transaction
 * opens as `prepare` must. A remembered state is the fold of the stream's
 * events up to a revision, which never change, so it stays true whatever
 * became of that batch's transaction or whichever instance projects next;
 * it spares a read of the stream each time one comes back a batch later
 * (a payment's confirmations come one a block).
 */
export class StreamFolds<State, Event> {
  /**
   * By store (a process may open several), then stream, least recently folded
   * first; at most `capacity` streams a store (a paid invoice's state with its
   * payment's and settlement's is ~1.8 KB of heap: 10,000 of each, ~18 MB).
   */
  private readonly remembered = new WeakMap<EventStore, Map<string, { revision: number; state: State }>>();

  constructor(
    private readonly belongs: (streamId: string) => boolean,
    private readonly fold: Fold<State, Event>,
    private readonly capacity = 10_000,
  ) {}

  async ofBatch(batch: readonly RecordedEvent[], store: EventStore): Promise<Map<string, State>> {
    let remembered = this.remembered.get(store);
    if (!remembered) this.remembered.set(store, (remembered = new Map()));
    const folded = new Map<string, State>();
    await Promise.all(
      [...eventsByStream(batch, this.belongs)].map(async ([streamId, events]) => {
        const first = events[0]!.revision;
        const last = events.at(-1)!.revision;
        const known = remembered.get(streamId);
        let state = this.fold.initialState;
        let history = events;
        if (first > 0 && known?.revision === first - 1) state = known.state;
        else if (first > 0) history = (await store.readStream(streamId)).filter((e) => e.revision <= last);
        state = history.reduce((s, e) => this.fold.evolve(s, { type: e.type, data: e.data } as Event), state);
        folded.set(streamId, state);
        remembered.delete(streamId);
        remembered.set(streamId, { revision: last, state });
        if (remembered.size > this.capacity) remembered.delete(remembered.keys().next().value!);
      }),
    );
    return folded;
  }
}

/** The row of each state, skipping the streams that hold nothing to show yet (a null state). */
export function rowsOf<State, Row>(states: Iterable<State | null>, rowOf: (state: State) => Row): Row[] {
  const rows: Row[] = [];
  for (const state of states) if (state !== null) rows.push(rowOf(state));
  return rows;
}

/** An event's time as a column's value; none stays null. */
export const dateOrNull = (iso: string | null) => (iso === null ? null : new Date(iso));

/** The events of `batch` of each stream `belongs` picks, in the batch's order. */
export function eventsByStream(
  batch: readonly RecordedEvent[],
  belongs: (streamId: string) => boolean,
): Map<string, RecordedEvent[]> {
  const byStream = new Map<string, RecordedEvent[]>();
  for (const event of batch) {
    if (!belongs(event.streamId)) continue;
    const events = byStream.get(event.streamId);
    if (events) events.push(event);
    else byStream.set(event.streamId, [event]);
  }
  return byStream;
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
