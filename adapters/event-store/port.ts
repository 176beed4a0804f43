// The event-store port: what commands, projectors and process managers may ask
// of any event store (SQL on PGlite or PostgreSQL, EventStoreDB, memory).
// Positions are opaque strings so that every back end can encode its own order.

export type ExpectedRevision =
  | number // the stream's last revision must be exactly this (0-based)
  | 'no_stream'
  | 'stream_exists'
  | 'any';

export interface EventMetadata {
  /** The event (or request) that caused this one. */
  causationId?: string;
  correlationId?: string;
  [key: string]: unknown;
}

export interface NewEvent {
  /** UUID. Derive it deterministically wherever a retry could write the same fact twice. */
  id: string;
  type: string;
  data: unknown;
  metadata?: EventMetadata;
}

export interface RecordedEvent {
  id: string;
  type: string;
  streamId: string;
  /** 0-based position within the stream. */
  revision: number;
  /** Opaque global position; compare with `comparePositions`. */
  position: string;
  recordedAt: Date;
  data: unknown;
  metadata: EventMetadata;
}

export interface AppendResult {
  /** The stream's last revision after the append. */
  nextRevision: number;
  /** Global position of the last event of the stream after the append. */
  position: string;
  /** False when every event id was already stored (an idempotent repeat). */
  written: boolean;
}

export interface AppendOptions {
  /**
   * Runs inside the append's transaction after the rows are written and before
   * commit. Only tests use it, to hold a transaction open (slow writer) or to
   * crash between write and commit.
   */
  beforeCommit?: () => Promise<void>;
}

export interface Subscription {
  /** Stops delivery; resolves once the handler is no longer running. */
  stop(): Promise<void>;
}

export interface SubscribeOptions {
  /** Deliver events after this position; undefined means from the beginning. */
  after?: string;
  /** Called with each event in global order; the next one waits for its promise. */
  handler: (event: RecordedEvent) => Promise<void> | void;
  /** Called when reading fails; the subscription retries after a pause. */
  onError?: (error: unknown) => void;
}

export interface EventStore {
  readonly name: string;
  append(
    streamId: string,
    events: readonly NewEvent[],
    expected: ExpectedRevision,
    options?: AppendOptions,
  ): Promise<AppendResult>;
  /** The stream's events from `fromRevision` (inclusive), in revision order; [] for no stream. */
  readStream(streamId: string, fromRevision?: number): Promise<RecordedEvent[]>;
  /** The stream's last revision, -1 when it has no events; without reading them. */
  lastRevision(streamId: string): Promise<number>;
  /** Up to `limit` committed events after `after`, in global order. */
  readAll(after: string | undefined, limit: number): Promise<RecordedEvent[]>;
  /**
   * The position of the last committed event, undefined for an empty store.
   * Unlike readAll, it counts an append that an older transaction, still
   * open, holds back: a reader that waits for its consumers to pass it has
   * seen every append committed before it asked.
   */
  headPosition(): Promise<string | undefined>;
  /** How many committed events lie after `after`, counting at most `cap`. */
  countAfter(after: string | undefined, cap: number): Promise<number>;
  /** Negative, zero or positive, like a sort comparator. */
  comparePositions(a: string, b: string): number;
  /** Calls `listener` (without arguments) whenever new events may have been committed. */
  onAppended(listener: () => void): () => void;
  subscribe(options: SubscribeOptions): Subscription;
  close(): Promise<void>;
}

export class ConcurrencyError extends Error {
  constructor(
    readonly streamId: string,
    readonly expected: ExpectedRevision,
    readonly actual: number | 'no_stream',
  ) {
    super(`Concurrency conflict on stream ${streamId}: expected ${describe(expected)}, found ${describe(actual)}`);
    this.name = 'ConcurrencyError';
  }
}

function describe(revision: ExpectedRevision): string {
  return typeof revision === 'number' ? `revision ${revision}` : revision.replace('_', ' ');
}

/** Checks an expected revision against the stream's current one (-1 when the stream does not exist). */
export function checkExpected(streamId: string, expected: ExpectedRevision, current: number): void {
  const ok =
    expected === 'any' ||
    (expected === 'no_stream' && current === -1) ||
    (expected === 'stream_exists' && current >= 0) ||
    expected === current;
  if (!ok) throw new ConcurrencyError(streamId, expected, current === -1 ? 'no_stream' : current);
}
