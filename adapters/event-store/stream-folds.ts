// Folds of the streams a batch of the log touches, for its followers:
// projectors (projections/) and the workers' to-do tables (commands/) alike.
import type { EventStore, RecordedEvent } from './port.ts';

/** The part of a decider a follower folds with. */
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

/** Of each kind of stream a follower folds, by the name of its folds: the streams of a batch, folded. */
export type Folded<Kinds extends Record<string, StreamFolds<unknown, unknown>>> = {
  [Kind in keyof Kinds]: Awaited<ReturnType<Kinds[Kind]['ofBatch']>>;
};

/** The `prepare` of a follower of several kinds of streams: each kind's streams of the batch, folded. */
export function foldsOf<Kinds extends Record<string, StreamFolds<any, any>>>(kinds: Kinds) {
  return async (batch: readonly RecordedEvent[], store: EventStore): Promise<Folded<Kinds>> => {
    const names = Object.keys(kinds);
    const folded = await Promise.all(names.map((name) => kinds[name]!.ofBatch(batch, store)));
    return Object.fromEntries(names.map((name, i) => [name, folded[i]])) as Folded<Kinds>;
  };
}

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
