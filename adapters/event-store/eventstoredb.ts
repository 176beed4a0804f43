// The event store on EventStoreDB (or KurrentDB, its successor: same gRPC
// protocol), through @eventstore/db-client. Read models and checkpoints stay
// in SQL; a checkpoint is this store's position string, so nothing above the
// port knows which store it is.
//
// Positions are "<commit>/<prepare>" of the $all log. EventStoreDB has one
// writer, so $all is in commit order and a reader never meets the gap of a
// slower writer (the SQL store's transaction-id ordering is not needed here).
//
// Idempotent event ids. EventStoreDB's own check only covers a batch that is
// repeated whole at the revision it was first written at (or with `any`,
// while the server still remembers it): a batch that repeats only some of its
// events, or a repeat with a stale expected revision, would be written again.
// So an append first reads the stream's last DEDUPE_WINDOW events, drops the
// events already there and checks the caller's expected revision itself, then
// appends the rest at exactly the revision it read. Any append in between
// makes EventStoreDB refuse it, and the append is decided again on the fresh
// stream: the same guarantees as the SQL store, for streams whose repeats
// come within their last DEDUPE_WINDOW events (every aggregate stream here;
// the derivation index stream, which is longer, never repeats an id).
import { EventEmitter } from 'node:events';
import {
  AccessDeniedError,
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

/** How many of a stream's last events an append looks at for ids already stored. */
export const DEDUPE_WINDOW = 1000;
/** Every call but a subscription's has this long (unless the connection string's `defaultDeadline` says otherwise). */
export const DEFAULT_DEADLINE_MS = 10_000;
/** Appends decided again after another writer got in between, before giving up. */
const APPEND_ATTEMPTS = 50;
/** The pause before a failed or dropped subscription starts again from its checkpoint. */
const RESUBSCRIBE_MS = 1000;
/** Events read per call of readAll when skipping system events. */
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
  if (!event.position) {
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
  /** Passed to the client, and enforced here too: the client waits without end for a channel that never gets ready. */
  private readonly deadlineMs: number;

  constructor(
    private readonly client: EventStoreDBClient,
    options: { deadlineMs?: number } = {},
  ) {
    this.deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
  }

  /** Connects and reads a stream once, so that a wrong URL or credentials stop start-up with one line. */
  static async open(url: string, options: { deadlineMs?: number } = {}): Promise<EventStoreDbStore> {
    const store = new EventStoreDbStore(EventStoreDBClient.connectionString(clientConnectionString(url)), options);
    try {
      await store.lastRevision('connection-check');
    } catch (error) {
      await store.close();
      throw new Error(`EVENTSTORE_URL: ${(error as Error).message}`);
    }
    return store;
  }

  async append(
    streamId: string,
    events: readonly NewEvent[],
    expected: ExpectedRevision,
    options: AppendOptions = {},
  ): Promise<AppendResult> {
    for (let attempt = 1; ; attempt++) {
      const tail = await this.readTail(streamId, Math.max(DEDUPE_WINDOW, events.length));
      const current = tail.at(-1)?.revision ?? -1;
      const stored = new Set(tail.map((e) => e.id));
      const fresh = events.filter((e) => !stored.has(e.id));
      if (fresh.length === 0 && events.length > 0) {
        const last = tail.at(-1)!;
        return { nextRevision: current, position: last.position, written: false };
      }
      checkExpected(streamId, expected, current);
      if (fresh.length === 0) return { nextRevision: current, position: '0/0', written: false };
      // There is no transaction to hold open here: a slow writer is slow before it appends.
      await options.beforeCommit?.();
      try {
        // An append that timed out may still land: the retry then finds its ids and writes nothing.
        const result = await withDeadline(
          this.client.appendToStream(
            streamId,
            fresh.map((e) =>
              jsonEvent({ id: e.id, type: e.type, data: (e.data ?? null) as never, metadata: e.metadata ?? {} }),
            ),
            { expectedRevision: current === -1 ? NO_STREAM : BigInt(current), deadline: this.deadlineMs },
          ),
          this.deadlineMs,
          `append to ${streamId}`,
        );
        this.appended.emit('appended');
        const position = result.position
          ? encodePosition(result.position)
          : (await this.readTail(streamId, 1)).at(-1)!.position;
        return { nextRevision: Number(result.nextExpectedRevision), position, written: true };
      } catch (error) {
        // Another writer got in between: decide again on the stream as it is now.
        if (error instanceof WrongExpectedVersionError && attempt < APPEND_ATTEMPTS) continue;
        if (error instanceof WrongExpectedVersionError) throw concurrencyError(error, expected);
        throw fromClientError(error, `append to ${streamId}`);
      }
    }
  }

  async readStream(streamId: string, fromRevision = 0): Promise<RecordedEvent[]> {
    return this.collect(
      () =>
        this.client.readStream(streamId, {
          fromRevision: fromRevision === 0 ? START : BigInt(fromRevision),
          direction: FORWARDS,
          deadline: this.deadlineMs,
        }),
      `read of ${streamId}`,
    );
  }

  async lastRevision(streamId: string): Promise<number> {
    return (await this.readTail(streamId, 1)).at(-1)?.revision ?? -1;
  }

  async readAll(after: string | undefined, limit: number): Promise<RecordedEvent[]> {
    const found: RecordedEvent[] = [];
    await this.scanAll(after, (event) => {
      found.push(event);
      return found.length < limit;
    });
    return found;
  }

  async headPosition(): Promise<string | undefined> {
    // $all backwards from its end, past the server's own (system) events.
    let before: string | undefined;
    for (;;) {
      const page = await this.collect(
        () =>
          this.client.readAll({
            fromPosition: before === undefined ? END : decodePosition(before),
            direction: BACKWARDS,
            maxCount: PAGE,
            deadline: this.deadlineMs,
          }),
        'read of $all',
      );
      // Backwards, fromPosition is inclusive too: the event at `before` comes again.
      const older = page.filter((event) => before === undefined || comparePositions(event.position, before) < 0);
      if (older.length === 0) return undefined;
      const newest = older.find((event) => !isSystem(event));
      if (newest) return newest.position;
      before = older.at(-1)!.position;
    }
  }

  async countAfter(after: string | undefined, cap: number): Promise<number> {
    let count = 0;
    await this.scanAll(after, () => ++count < cap);
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
      () =>
        this.client.readStream(streamId, {
          fromRevision: END,
          direction: BACKWARDS,
          maxCount: count,
          deadline: this.deadlineMs,
        }),
      `read of ${streamId}`,
    );
    return newestFirst.reverse();
  }

  /** Every event of one read, within the deadline. */
  private async collect(
    read: () => AsyncIterable<ResolvedEvent | AllStreamResolvedEvent>,
    call: string,
  ): Promise<RecordedEvent[]> {
    const consume = async () => {
      const events: RecordedEvent[] = [];
      for await (const resolved of read()) {
        const event = toRecorded(resolved);
        if (event) events.push(event);
      }
      return events;
    };
    try {
      return await withDeadline(consume(), this.deadlineMs, call);
    } catch (error) {
      if (error instanceof StreamNotFoundError) return [];
      throw fromClientError(error, call);
    }
  }

  /** Calls `take` with each non-system event after `after` in $all, while it returns true. */
  private async scanAll(after: string | undefined, take: (event: RecordedEvent) => boolean): Promise<void> {
    let from = after;
    for (;;) {
      // readAll's fromPosition is inclusive: the event at `from` comes again and is skipped.
      const page = (
        await this.collect(
          () =>
            this.client.readAll({
              fromPosition: from === undefined ? START : decodePosition(from),
              direction: FORWARDS,
              maxCount: PAGE,
              deadline: this.deadlineMs,
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
    const run = async () => {
      while (!stopped) {
        const start = from();
        current = this.client.subscribeToAll({
          fromPosition: start !== undefined ? decodePosition(start) : fromEnd ? END : START,
          filter: excludeSystemEvents(),
        });
        const subscription = current;
        try {
          // The client waits without end for a server that never answers: confirmed in time, or failed.
          await withDeadline(
            new Promise<void>((resolve, reject) => {
              subscription.once('confirmation', resolve);
              subscription.once('error', reject);
            }),
            this.deadlineMs,
            'subscription to $all',
          );
          for await (const resolved of subscription) {
            if (stopped) break;
            const event = toRecorded(resolved);
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
        await current?.unsubscribe().catch(() => undefined);
        await loop;
      },
    };
  }
}
