// In-memory event store for unit tests: the same contract as the SQL store,
// with commit order as global order.
import { EventEmitter } from 'node:events';
import { catchUpSubscription } from './catch-up.ts';
import { checkExpected, type EventStore, type RecordedEvent, type SubscribeOptions } from './port.ts';

export class MemoryEventStore implements EventStore {
  readonly name = 'memory';
  private readonly all: RecordedEvent[] = [];
  private readonly streams = new Map<string, RecordedEvent[]>();
  private readonly appended = new EventEmitter().setMaxListeners(0);
  /** Appends to one stream run one after another, as a row lock would make them. */
  private readonly streamLocks = new Map<string, Promise<unknown>>();

  append: EventStore['append'] = (streamId, events, expected, options) => {
    const previous = this.streamLocks.get(streamId) ?? Promise.resolve();
    const result = previous.then(() => this.appendNow(streamId, events, expected, options));
    this.streamLocks.set(
      streamId,
      result.catch(() => undefined),
    );
    return result;
  };

  private appendNow: EventStore['append'] = async (streamId, events, expected, options = {}) => {
    const stream = this.streams.get(streamId) ?? [];
    const stored = new Set(stream.map((e) => e.id));
    const fresh = events.filter((e) => !stored.has(e.id));
    const current = stream.length - 1;
    if (fresh.length === 0 && events.length > 0) {
      return { nextRevision: current, position: stream.at(-1)!.position, written: false };
    }
    checkExpected(streamId, expected, current);
    await options.beforeCommit?.();
    const recordedAt = new Date();
    const recorded = fresh.map((event, i) => ({
      id: event.id,
      type: event.type,
      streamId,
      revision: current + 1 + i,
      position: String(this.all.length + 1 + i),
      recordedAt,
      data: structuredClone(event.data),
      metadata: { ...event.metadata },
    }));
    this.all.push(...recorded);
    this.streams.set(streamId, [...stream, ...recorded]);
    if (recorded.length > 0) this.appended.emit('appended');
    const last = recorded.at(-1) ?? stream.at(-1);
    return { nextRevision: current + recorded.length, position: last?.position ?? '0', written: recorded.length > 0 };
  };

  async readStream(streamId: string, fromRevision = 0): Promise<RecordedEvent[]> {
    return (this.streams.get(streamId) ?? []).slice(fromRevision);
  }

  async lastRevision(streamId: string): Promise<number> {
    return (this.streams.get(streamId)?.length ?? 0) - 1;
  }

  async readAll(after: string | undefined, limit: number): Promise<RecordedEvent[]> {
    const start = after === undefined ? 0 : Number(after);
    return this.all.slice(start, start + limit);
  }

  async headPosition(): Promise<string | undefined> {
    return this.all.at(-1)?.position;
  }

  async countAfter(after: string | undefined, cap: number): Promise<number> {
    return Math.min(cap, this.all.length - (after === undefined ? 0 : Number(after)));
  }

  comparePositions(a: string, b: string): number {
    return Number(a) - Number(b);
  }

  onAppended(listener: () => void): () => void {
    this.appended.on('appended', listener);
    return () => this.appended.off('appended', listener);
  }

  subscribe(options: SubscribeOptions) {
    return catchUpSubscription(this, options, { pollMs: 1000 });
  }

  async close(): Promise<void> {}
}
