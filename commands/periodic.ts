// The base of the background workers that look for due work (invoice and
// claim expiry, payouts, renewals): a pass every `pollMs`, and at once when
// poked (a new block, the sandbox clock moved). One pass at a time; a failed
// pass is reported and the next one runs as usual.

export interface PeriodicOptions {
  pollMs?: number;
  onError?: (error: unknown) => void;
}

export abstract class Periodic {
  private stopping = new AbortController();
  private running?: Promise<void>;
  private wake?: () => void;

  constructor(private readonly loopOptions: PeriodicOptions = {}) {}

  /** One look for due work. */
  abstract pass(): Promise<unknown>;

  start(): void {
    this.stopping = new AbortController();
    this.running = this.loop(this.stopping.signal);
  }

  /** Stops after the pass under way, if any. */
  async stop(): Promise<void> {
    this.stopping.abort();
    this.wake?.();
    await this.running;
  }

  /** Runs a pass now rather than at the next poll. */
  poke(): void {
    this.wake?.();
  }

  private async loop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.pass();
      } catch (error) {
        this.loopOptions.onError?.(error);
      }
      if (signal.aborted) return;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => this.wake?.(), this.loopOptions.pollMs ?? 1000);
        this.wake = () => {
          clearTimeout(timer);
          this.wake = undefined;
          resolve();
        };
      });
    }
  }
}
