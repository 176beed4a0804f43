// A sandbox setting kept as events on a stream of its own (the clock's
// advances, the fixed rates), so that a restart keeps what was set. Changes
// are appended without an expected revision: each one counts, whoever made
// it, and every process folds them all in stream order.
import { randomUUID } from 'node:crypto';
import type { EventStore, RecordedEvent } from './event-store/port.ts';

export class SandboxStream {
  private nextRevision = 0;
  /** This process's changes, one after another, each folded before the next is appended. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly store: EventStore,
    private readonly streamName: string,
    private readonly fold: (recorded: RecordedEvent) => void,
  ) {}

  /** Appends the change, then folds it and whatever any other process appended since the last look. */
  append(event: { type: string; data: unknown }): Promise<void> {
    const run = this.queue.then(async () => {
      await this.store.append(this.streamName, [{ id: randomUUID(), ...event }], 'any');
      await this.catchUp();
    });
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Folds the events past the last one folded. */
  async catchUp(): Promise<void> {
    for (const recorded of await this.store.readStream(this.streamName, this.nextRevision)) {
      if (recorded.revision < this.nextRevision) continue;
      this.fold(recorded);
      this.nextRevision = recorded.revision + 1;
    }
  }
}
