// The sandbox's business clock (operations.md §4, POST /dev/v1/clock/advance):
// wall time plus an offset that only grows, so expiry and billing periods can
// be tried without waiting. Each advance is an event on stream `sandbox-clock`,
// so a restart keeps the time it had reached.
//
// Advances add up, so they are appended without an expected revision
// (sandbox-stream.ts): two processes advancing at once both count, in either order.
import { DomainError } from '../domain/decider.ts';
import type { Clock } from './clock.ts';
import type { EventStore, RecordedEvent } from './event-store/port.ts';
import { SandboxStream } from './sandbox-stream.ts';

export const sandboxClockStreamName = 'sandbox-clock';

/** One advance moves time forward at most ten years (of 365 days). */
export const MAX_ADVANCE_SECONDS = 10 * 365 * 24 * 60 * 60;

export interface ClockAdvanced {
  type: 'ClockAdvanced';
  data: { seconds: number };
}

export function validAdvance(seconds: number): number {
  if (!Number.isInteger(seconds) || seconds < 1 || seconds > MAX_ADVANCE_SECONDS) {
    throw new DomainError('bad_request', `seconds must be a whole number from 1 to ${MAX_ADVANCE_SECONDS} (10 years)`);
  }
  return seconds;
}

export class SandboxClock implements Clock {
  private offsetSeconds = 0;
  private readonly stream: SandboxStream;

  private constructor(
    store: EventStore,
    private readonly wallTime: () => number,
  ) {
    this.stream = new SandboxStream(store, sandboxClockStreamName, (recorded) => this.fold(recorded));
  }

  /** The clock as its stream left it; `wallTime` (milliseconds) is for tests. */
  static async open(store: EventStore, wallTime: () => number = Date.now): Promise<SandboxClock> {
    const clock = new SandboxClock(store, wallTime);
    await clock.stream.catchUp();
    return clock;
  }

  now(): Date {
    return new Date(this.wallTime() + this.offsetSeconds * 1000);
  }

  /** How far business time runs ahead of wall time. */
  get offset(): number {
    return this.offsetSeconds;
  }

  /** Moves business time forward by `seconds`; returns the new business time. */
  async advance(seconds: number): Promise<Date> {
    validAdvance(seconds);
    const event: ClockAdvanced = { type: 'ClockAdvanced', data: { seconds } };
    await this.stream.append(event);
    return this.now();
  }

  private fold(recorded: RecordedEvent): void {
    const { seconds } = (recorded.data ?? {}) as Partial<ClockAdvanced['data']>;
    // Only valid advances count: time never runs backwards, whatever the stream holds.
    if (recorded.type === 'ClockAdvanced' && typeof seconds === 'number' && Number.isInteger(seconds) && seconds > 0)
      this.offsetSeconds += seconds;
  }
}
