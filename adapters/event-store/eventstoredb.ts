// The event store on EventStoreDB (or KurrentDB, its successor: same gRPC
// protocol), through @eventstore/db-client. Read models and checkpoints stay
// in SQL; a checkpoint is this store's position string, so nothing above the
// port knows which store it is.
//
// Positions are "<commit>/<prepare>" of the $all log. EventStoreDB has one
// writer, so $all is in commit order and a reader never meets the gap of a
// slower writer (the SQL store's transaction-id ordering is not needed here).
//
// Appends. `any` and `stream_exists` go to EventStoreDB as they are: its own
// check (IndexWriter.CheckCommit) serialises them and makes a repeated batch
// idempotent while its committed-event cache remembers the ids; every `any`
// append of this service carries fresh random ids. An exact revision (or
// no_stream) first reads the stream's newest events, the batch's count and
// REPEAT_WINDOW more: at that revision with none of the batch's ids among
// them is the ordinary case (appended at exactly that revision). EventStoreDB
// itself writes a batch at the current revision whatever ids came before it,
// and a process manager's replayed step, decided again on a stream that
// moved on, repeats ids a few events back. Otherwise, and when EventStoreDB
// refuses (another writer, or a batch that repeats some of its events), the
// append is decided again on the stream's last DEDUPE_WINDOW events: ids
// already there are dropped, the caller's expectation is checked, the rest
// appended at the revision read. So an id is never stored twice in a stream
// whose repeats come within its newest REPEAT_WINDOW events (an append at
// the stream's current revision: a step replayed after its stream moved on
// by more than that is stored again) or DEDUPE_WINDOW events (any other).
//
// Every call asks for the leader (requires-leader): a follower answers
// NotLeader with the leader's endpoint, the client moves there, and the call
// is made once more. Every call has a deadline that cancels it. A client that
// keeps failing (a features check that failed or hangs is cached by the
// client until a reconnect) is replaced by a fresh one.
import { EventEmitter } from 'node:events';
import {
  AccessDeniedError,
  ANY,
  BACKWARDS,
  CancelledError,
  DeadlineExceededError,
  END,
  EventStoreDBClient,
  excludeSystemEvents,
  FORWARDS,
  jsonEvent,
  MaxAppendSizeExceededError,
  NO_STREAM,
  NotLeaderError,
  START,
  STREAM_EXISTS,
  StreamDeletedError,
  StreamNotFoundError,
  TimeoutError,
  UnavailableError,
  WrongExpectedVersionError,
  convertToCommandError,
  type AllStreamResolvedEvent,
  type AllStreamSubscription,
  type Position,
  type ResolvedEvent,
} from '@eventstore/db-client';
import { withDeadline } from '../deadline.ts';

type AppendExpectedRevision = bigint | typeof ANY | typeof NO_STREAM | typeof STREAM_EXISTS;
import {
  checkExpected,
  ConcurrencyError,
  type AppendOptions,
  type AppendResult,
  type EventMetadata,
  type EventStore,
  type ExpectedRevision,
  type NewEvent,
  type RecordedEvent,
  type SubscribeOptions,
  type Subscription,
} from './port.ts';

/** How many of a stream's last events an append refused by EventStoreDB looks at for ids already stored. */
export const DEDUPE_WINDOW = 1000;
/**
 * How many events before an exact-revision append's expectation it looks at for its ids first: a replayed
 * process manager's step comes back after the few events its batch appended to the stream.
 */
export const REPEAT_WINDOW = 64;
/** Every call has this long; a read past it is cancelled, a subscription not confirmed by then is started again. */
export const DEFAULT_DEADLINE_MS = 10_000;
/** Failures in a row, none of them a conflict, after which the client is replaced by a fresh one. */
export const FAILURES_BEFORE_NEW_CLIENT = 3;
/** Calls made again after a follower answered NotLeader, the client having moved to the leader. */
const NOT_LEADER_ATTEMPTS = 5;
/** Appends decided again after another writer got in between, before giving up. */
const APPEND_ATTEMPTS = 50;
/** The pause before a failed or dropped subscription starts again from its checkpoint. */
const RESUBSCRIBE_MS = 1000;
/** Most events read per call when scanning $all. */
const PAGE = 500;

/**
 * The connection string the client reads: `kurrentdb://` (KurrentDB's
 * scheme, same protocol) is given to it as `esdb://`. Throws the client's
 * parse error for anything it cannot read.
 */
export function clientConnectionString(url: string): string {
  const rewritten = url.replace(/^kurrentdb(\+discover)?:\/\//i, (_, discover = '') => `esdb${discover}://`);
  EventStoreDBClient.connectionString(rewritten).dispose();
  return rewritten;
}

/** The problem with EVENTSTORE_URL, or undefined when the client can read it. */
export function connectionStringProblem(url: string): string | undefined {
  try {
    clientConnectionString(url);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

export const encodePosition = ({ commit, prepare }: Position): string => `${commit}/${prepare}`;

export function decodePosition(position: string): Position {
  const match = /^(\d+)\/(\d+)$/.exec(position);
  if (!match) throw new Error(`Not a position of the EventStoreDB store: ${position}`);
  return { commit: BigInt(match[1]!), prepare: BigInt(match[2]!) };
}

export function comparePositions(a: string, b: string): number {
  const x = decodePosition(a);
  const y = decodePosition(b);
  if (x.commit !== y.commit) return x.commit < y.commit ? -1 : 1;
  return x.prepare === y.prepare ? 0 : x.prepare < y.prepare ? -1 : 1;
}

/** The store could not be reached in time, or the node cannot serve the call now: try again later. */
export class EventStoreUnavailableError extends Error {
  override name = 'EventStoreUnavailableError';
}

/**
 * Each error the client documents, as this service says it. Expected-revision
 * conflicts never get here: append decides them again or reports them as a
 * ConcurrencyError; a missing stream is an empty one.
 */
export function fromClientError(raw: unknown, call: string): Error {
  const error = raw instanceof Error ? convertToCommandError(raw) : new Error(String(raw));
  const detail = error.message.split('\n')[0];
  if (
    (error as { code?: unknown }).code === 'ETIMEOUT' ||
    error instanceof UnavailableError ||
    error instanceof DeadlineExceededError ||
    error instanceof TimeoutError ||
    error instanceof CancelledError
  ) {
    return new EventStoreUnavailableError(`EventStoreDB did not answer ${call}: ${detail}`, { cause: error });
  }
  if (error instanceof NotLeaderError) {
    return new EventStoreUnavailableError(
      `EventStoreDB: ${call} needs the leader, and this node is not it (leader: ${error.leader?.address}:${error.leader?.port}); add nodePreference=leader to EVENTSTORE_URL`,
      { cause: error },
    );
  }
  if (error instanceof AccessDeniedError) {
    return new Error(`EventStoreDB refused ${call}: EVENTSTORE_URL's user may not do it`, { cause: error });
  }
  if (error instanceof StreamDeletedError) {
    return new Error(`EventStoreDB: stream ${error.streamName} was deleted, and this service never deletes one`, {
      cause: error,
    });
  }
  if (error instanceof MaxAppendSizeExceededError) {
    return new Error(`EventStoreDB refused ${call}: over its maximum append size of ${error.maxAppendSize} bytes`, {
      cause: error,
    });
  }
  return new Error(`EventStoreDB ${call} failed: ${detail}`, { cause: error });
}

/** EventStoreDB's conflict as the port's, with the caller's own expectation. */
export function concurrencyError(error: WrongExpectedVersionError, expected: ExpectedRevision): ConcurrencyError {
  const actual = error.actualVersion;
  return new ConcurrencyError(error.streamName, expected, typeof actual === 'bigint' ? Number(actual) : 'no_stream');
}

const isSystem = (event: { type: string; streamId: string }) =>
  event.type.startsWith('$') || event.streamId.startsWith('$');

function toRecorded(resolved: ResolvedEvent | AllStreamResolvedEvent): RecordedEvent | undefined {
  const event = resolved.event;
  // A link to a deleted event resolves to nothing; this service writes no links.
  if (!event) return undefined;
  // Every reader here orders by position: an event without one cannot be used.
  // The client reads an unset position as 0/0, where no client event can be.
  if (!event.position || (event.position.commit === 0n && event.position.prepare === 0n)) {
    throw new Error(
      `EventStoreDB returned ${event.streamId}@${event.revision} without its $all position (a server older than 21.10?)`,
    );
  }
  return {
    id: event.id,
    type: event.type,
    streamId: event.streamId,
    revision: Number(event.revision),
    position: encodePosition(event.position),
    recordedAt: new Date(event.created),
    data: event.data,
    metadata: (event.metadata ?? {}) as EventMetadata,
  };
}

export class EventStoreDbStore implements EventStore {
  readonly name = 'eventstoredb';
  private readonly appended = new EventEmitter().setMaxListeners(0);
  /** A live subscription to the end of $all that only wakes the readers (onAppended); open while someone listens. */
  private waker?: Subscription;
  private readonly deadlineMs: number;
  private client: EventStoreDBClient;
  private readonly connect?: () => EventStoreDBClient;
  /**
   * Appends, and reads, failed in a row for another reason than a conflict
   * or a missing stream; apart, because reads that succeed say nothing of
   * appends stuck behind a failed features check.
   */
  private readonly failures = { append: 0, read: 0 };

  constructor(client: EventStoreDBClient | (() => EventStoreDBClient), options: { deadlineMs?: number } = {}) {
    this.deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
    if (typeof client === 'function') this.connect = client;
    this.client = typeof client === 'function' ? client() : client;
  }

  /** Connects and reads a stream once, so that a wrong URL or credentials stop start-up with one line. */
  static async open(url: string, options: { deadlineMs?: number } = {}): Promise<EventStoreDbStore> {
    const connectionString = clientConnectionString(url);
    const store = new EventStoreDbStore(() => EventStoreDBClient.connectionString(connectionString), options);
    try {
      await store.lastRevision('connection-check');
    } catch (error) {
      await store.close();
      throw new Error(`EVENTSTORE_URL: ${(error as Error).message}`);
    }
    return store;
  }

  append: EventStore['append'] = async (streamId, events, expected, options = {}) => {
    if (events.length === 0) {
      const current = await this.lastRevision(streamId);
      checkExpected(streamId, expected, current);
      return { nextRevision: current, position: '0/0', written: false };
    }
    if (typeof expected === 'number' || expected === 'no_stream') {
      // A decision on the stream as read, which a process manager may repeat after the stream moved on: its ids
      // are looked for among the stream's newest events first (EventStoreDB itself writes a batch at the current
      // revision whatever ids came before it: IndexWriter.CheckCommit).
      const revision = expected === 'no_stream' ? -1 : expected;
      const newest = await this.readTail(streamId, events.length + REPEAT_WINDOW);
      const stored = new Set(newest.map((event) => event.id));
      if ((newest.at(-1)?.revision ?? -1) === revision && !events.some((event) => stored.has(event.id))) {
        const written = await this.tryAppend(streamId, events, revision === -1 ? NO_STREAM : BigInt(revision), options);
        if (written) return written;
      }
    } else {
      const written = await this.tryAppend(streamId, events, expected === 'any' ? ANY : STREAM_EXISTS, options);
      if (written) return written;
    }
    return this.appendDeduplicated(streamId, events, expected, options);
  };

  /** The append as EventStoreDB decides it; undefined when it refuses with a conflict. */
  private async tryAppend(
    streamId: string,
    events: readonly NewEvent[],
    expectedRevision: AppendExpectedRevision,
    options: AppendOptions,
  ): Promise<AppendResult | undefined> {
    // There is no transaction to hold open here: a slow writer is slow before it appends.
    await options.beforeCommit?.();
    try {
      const result = await this.call(`append to ${streamId}`, (client) =>
        client.appendToStream(
          streamId,
          events.map((e) =>
            jsonEvent({ id: e.id, type: e.type, data: (e.data ?? null) as never, metadata: e.metadata ?? {} }),
          ),
          { expectedRevision, deadline: this.deadlineMs, requiresLeader: true },
        ),
      );
      this.appended.emit('appended');
      const position = result.position
        ? encodePosition(result.position)
        : (await this.readTail(streamId, 1)).at(-1)!.position;
      return { nextRevision: Number(result.nextExpectedRevision), position, written: true };
    } catch (error) {
      if (error instanceof WrongExpectedVersionError) return undefined;
      throw error;
    }
  }

  /**
   * After EventStoreDB refused: the append decided on the stream's last
   * DEDUPE_WINDOW events, at exactly the revision read, again while other
   * writers get in between.
   */
  private async appendDeduplicated(
    streamId: string,
    events: readonly NewEvent[],
    expected: ExpectedRevision,
    options: AppendOptions,
  ): Promise<AppendResult> {
    for (let attempt = 1; ; attempt++) {
      const tail = await this.readTail(streamId, Math.max(DEDUPE_WINDOW, events.length));
      const current = tail.at(-1)?.revision ?? -1;
      const stored = new Set(tail.map((e) => e.id));
      const fresh = events.filter((e) => !stored.has(e.id));
      if (fresh.length === 0) {
        const last = tail.at(-1)!;
        return { nextRevision: current, position: last.position, written: false };
      }
      checkExpected(streamId, expected, current);
      const written = await this.tryAppend(streamId, fresh, current === -1 ? NO_STREAM : BigInt(current), options);
      if (written) return written;
      if (attempt >= APPEND_ATTEMPTS)
        throw new ConcurrencyError(streamId, expected, current === -1 ? 'no_stream' : current);
    }
  }

  async readStream(streamId: string, fromRevision = 0): Promise<RecordedEvent[]> {
    return this.readFrom(streamId, fromRevision);
  }

  async lastRevision(streamId: string): Promise<number> {
    return (await this.readTail(streamId, 1)).at(-1)?.revision ?? -1;
  }

  async readAll(after: string | undefined, limit: number): Promise<RecordedEvent[]> {
    const found: RecordedEvent[] = [];
    await this.scanAll(after, limit, (event) => {
      found.push(event);
      return found.length < limit;
    });
    return found;
  }

  async headPosition(): Promise<string | undefined> {
    // $all backwards from its end, one event, then more while they are the server's own (system) events.
    let before: string | undefined;
    for (let count = 1; ; count = Math.min(count * 4, PAGE)) {
      const page = await this.collect(
        (client) =>
          client.readAll({
            fromPosition: before === undefined ? END : decodePosition(before),
            direction: BACKWARDS,
            maxCount: count,
            requiresLeader: true,
          }),
        'read of $all',
      );
      // Backwards, a server may hand over the event at `before` again: it is skipped.
      const older = page.filter((event) => before === undefined || comparePositions(event.position, before) < 0);
      if (older.length === 0) return undefined;
      const newest = older.find((event) => !isSystem(event));
      if (newest) return newest.position;
      before = older.at(-1)!.position;
    }
  }

  async countAfter(after: string | undefined, cap: number): Promise<number> {
    let count = 0;
    await this.scanAll(after, cap, () => ++count < cap);
    return count;
  }

  comparePositions(a: string, b: string): number {
    return comparePositions(a, b);
  }

  onAppended(listener: () => void): () => void {
    this.appended.on('appended', listener);
    // Appends of other processes arrive through a live subscription.
    this.waker ??= this.subscribeLive(() => void this.appended.emit('appended'));
    return () => {
      this.appended.off('appended', listener);
      if (this.appended.listenerCount('appended') === 0 && this.waker) {
        void this.waker.stop();
        this.waker = undefined;
      }
    };
  }

  /**
   * $all from `after`, system events left out by the server: the stored
   * events, then the new ones as they come, in order. A handler that fails,
   * or a subscription the server or network drops, starts again after a
   * pause from the last event handled, so nothing is skipped or repeated.
   */
  subscribe({ after, handler, onError }: SubscribeOptions): Subscription {
    let checkpoint = after;
    return this.follow(
      () => checkpoint,
      async (event) => {
        await handler(event);
        checkpoint = event.position;
      },
      onError,
    );
  }

  async close(): Promise<void> {
    await this.waker?.stop();
    this.waker = undefined;
    await this.client.dispose();
  }

  // -------------------------------------------------------------------------

  /** The stream's last `count` events, in revision order. */
  private async readTail(streamId: string, count: number): Promise<RecordedEvent[]> {
    const newestFirst = await this.collect(
      (client) =>
        client.readStream(streamId, { fromRevision: END, direction: BACKWARDS, maxCount: count, requiresLeader: true }),
      `read of ${streamId}`,
    );
    return newestFirst.reverse();
  }

  /** The stream's events from `revision` on, at most `count` of them. */
  private readFrom(streamId: string, revision: number, count?: number): Promise<RecordedEvent[]> {
    return this.collect(
      (client) =>
        client.readStream(streamId, {
          fromRevision: revision === 0 ? START : BigInt(revision),
          direction: FORWARDS,
          ...(count === undefined ? {} : { maxCount: count }),
          requiresLeader: true,
        }),
      `read of ${streamId}`,
    );
  }

  /**
   * One call through the client, within the deadline, made once more on the
   * leader after a follower's NotLeader (the client has moved to the leader
   * by then). Failures in a row other than a conflict or a missing stream
   * replace the client: it caches a failed (or hung) features check until
   * it reconnects, which those failures never make it do.
   */
  private async call<T>(
    what: string,
    run: (client: EventStoreDBClient) => Promise<T>,
    cancel?: () => void,
  ): Promise<T> {
    const kind = what.startsWith('append') ? 'append' : 'read';
    for (let attempt = 1; ; attempt++) {
      try {
        const result = await withDeadline(run(this.client), this.deadlineMs, what);
        this.failures[kind] = 0;
        return result;
      } catch (raw) {
        cancel?.();
        const error = raw instanceof Error ? convertToCommandError(raw) : raw;
        if (error instanceof WrongExpectedVersionError || error instanceof StreamNotFoundError) {
          this.failures[kind] = 0;
          throw error;
        }
        if (error instanceof NotLeaderError && attempt < NOT_LEADER_ATTEMPTS) {
          // The client moves to the leader named in the answer, once its channel is closed.
          await new Promise((resolve) => setTimeout(resolve, 10 * attempt));
          continue;
        }
        this.failed(kind);
        throw fromClientError(error, what);
      }
    }
  }

  private failed(kind: 'append' | 'read'): void {
    if (++this.failures[kind] < FAILURES_BEFORE_NEW_CLIENT || !this.connect) return;
    this.failures.append = this.failures.read = 0;
    const old = this.client;
    this.client = this.connect();
    // Its calls may hang: their own deadlines end them, not this.
    void old.dispose().catch(() => undefined);
  }

  /** Every event of one read; past the deadline the read is cancelled on the server too. */
  private async collect(
    read: (
      client: EventStoreDBClient,
    ) => AsyncIterable<ResolvedEvent | AllStreamResolvedEvent> & { cancel(): Promise<void> },
    what: string,
  ): Promise<RecordedEvent[]> {
    let stream: (AsyncIterable<ResolvedEvent | AllStreamResolvedEvent> & { cancel(): Promise<void> }) | undefined;
    const consume = async (client: EventStoreDBClient) => {
      stream = read(client);
      const events: RecordedEvent[] = [];
      for await (const resolved of stream) {
        const event = toRecorded(resolved);
        if (event) events.push(event);
      }
      return events;
    };
    try {
      return await this.call(what, consume, () => void stream?.cancel().catch(() => undefined));
    } catch (error) {
      if (error instanceof StreamNotFoundError) return [];
      throw error;
    }
  }

  /** Calls `take` with each non-system event after `after` in $all, while it returns true; `wanted` sizes the reads. */
  private async scanAll(
    after: string | undefined,
    wanted: number,
    take: (event: RecordedEvent) => boolean,
  ): Promise<void> {
    let from = after;
    // One more than wanted: a read from a position hands over the event there again.
    const count = Math.max(1, Math.min(PAGE, wanted + 1));
    for (;;) {
      const page = (
        await this.collect(
          (client) =>
            client.readAll({
              fromPosition: from === undefined ? START : decodePosition(from),
              direction: FORWARDS,
              maxCount: count,
              requiresLeader: true,
            }),
          'read of $all',
        )
      ).filter((event) => from === undefined || comparePositions(event.position, from) > 0);
      if (page.length === 0) return;
      for (const event of page) {
        if (!isSystem(event) && !take(event)) return;
      }
      from = page.at(-1)!.position;
    }
  }

  private subscribeLive(onEvent: () => void): Subscription {
    return this.follow(
      () => undefined,
      async () => onEvent(),
      undefined,
      true,
    );
  }

  /**
   * One subscription to $all that starts again from `from()` when it fails;
   * without a position, from the start of $all, or with `fromEnd` from its
   * end (only new events: the waker's).
   */
  private follow(
    from: () => string | undefined,
    handle: (event: RecordedEvent) => Promise<void>,
    onError: ((error: unknown) => void) | undefined,
    fromEnd = false,
  ): Subscription {
    let current: AllStreamSubscription | undefined;
    let stopped = false;
    let wake: (() => void) | undefined;
    /** Ends the wait for a confirmation at once when the subscription is stopped. */
    let interrupt: (() => void) | undefined;
    const run = async () => {
      while (!stopped) {
        const start = from();
        current = this.client.subscribeToAll({
          fromPosition: start !== undefined ? decodePosition(start) : fromEnd ? END : START,
          filter: excludeSystemEvents(),
          requiresLeader: true,
        });
        const subscription = current;
        try {
          // The client waits without end for a server that never answers: confirmed in time, or failed.
          await withDeadline(
            new Promise<void>((resolve, reject) => {
              subscription.once('confirmation', resolve);
              subscription.once('error', reject);
              interrupt = resolve;
            }),
            this.deadlineMs,
            'subscription to $all',
          );
          if (stopped) break;
          for await (const resolved of subscription) {
            if (stopped) break;
            const event = toRecorded(resolved);
            // The filter leaves out system event types; system streams are left out as readAll does.
            if (event && isSystem(event)) continue;
            // A subscription started again may hand over its checkpoint event once more.
            const last = from();
            if (!event || (last !== undefined && comparePositions(event.position, last) <= 0)) continue;
            await handle(event);
          }
        } catch (error) {
          if (!stopped) onError?.(fromClientError(error, 'subscription to $all'));
        } finally {
          await subscription.unsubscribe().catch(() => undefined);
        }
        if (!stopped) await new Promise<void>((resolve) => setTimeout((wake = resolve), RESUBSCRIBE_MS).unref());
      }
    };
    const loop = run();
    return {
      async stop() {
        stopped = true;
        wake?.();
        interrupt?.();
        await current?.unsubscribe().catch(() => undefined);
        await loop;
      },
    };
  }
}
