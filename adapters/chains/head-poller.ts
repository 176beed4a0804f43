// What every node adapter's onNewBlock is: the head's height polled while
// someone listens, and the listeners called when it moves (a new block, or
// a fork to another height).
export class HeadPoller {
  private readonly listeners = new Set<() => void>();
  private timer?: NodeJS.Timeout;
  private lastSeen = -1;
  private closed = false;

  constructor(
    /** The node's head height; a failure is skipped (the watcher polls on its own too). */
    private readonly readHeight: () => Promise<number>,
    private readonly pollMs = 1000,
  ) {}

  onNewBlock(listener: () => void): () => void {
    this.listeners.add(listener);
    if (!this.timer && !this.closed) {
      this.timer = setInterval(() => void this.poll(), this.pollMs);
      this.timer.unref();
    }
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) this.stop();
    };
  }

  close(): void {
    this.closed = true;
    this.stop();
  }

  private stop() {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private async poll() {
    try {
      const height = await this.readHeight();
      if (height === this.lastSeen) return;
      this.lastSeen = height;
      for (const listener of this.listeners) listener();
    } catch {
      // The next tick tries again.
    }
  }
}
