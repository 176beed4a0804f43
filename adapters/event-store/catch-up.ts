// How readers follow the event log: do a step (read a batch after the last
// position and handle it), and when caught up wait for an append signal, with
// polling as the safety net. Shared by subscriptions and projectors.
import type { EventStore, SubscribeOptions, Subscription } from './port.ts';

export interface FollowOptions {
  batchSize: number;
  /** Longest wait without a signal before reading again. */
  pollMs: number;
  signal: AbortSignal;
  onError?: (error: unknown) => void;
}

/**
 * Calls `step` until `signal` aborts. `step` returns how many events it
 * handled; a full batch means more may be waiting, so it runs again at once.
 */
export async function followAppends(
  store: Pick<EventStore, 'onAppended'>,
  step: () => Promise<number>,
  { batchSize, pollMs, signal, onError }: FollowOptions,
): Promise<void> {
  let signalled = true;
  let wake: (() => void) | undefined;
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        wake = undefined;
        resolve();
      }
      wake = done;
    });
  const unlisten = store.onAppended(() => {
    signalled = true;
    wake?.();
  });
  const onAbort = () => wake?.();
  signal.addEventListener('abort', onAbort);
  try {
    // After a signal that found nothing, an older transaction may still hold
    // the new events back (see the SQL store): look again soon, a few times.
    let emptyAfterSignal = 0;
    while (!signal.aborted) {
      const wasSignalled = signalled;
      signalled = false;
      let handled: number;
      try {
        handled = await step();
      } catch (error) {
        onError?.(error);
        if (!signal.aborted) await pause(pollMs);
        continue;
      }
      if (signal.aborted) return;
      if (handled >= batchSize) continue;
      if (handled === 0 && wasSignalled && emptyAfterSignal < 4) {
        emptyAfterSignal += 1;
        await pause(5 * 4 ** emptyAfterSignal);
        signalled = true;
        continue;
      }
      emptyAfterSignal = 0;
      if (!signalled) await pause(pollMs);
    }
  } finally {
    unlisten();
    signal.removeEventListener('abort', onAbort);
  }
}

/** A subscription for any store that can `readAll` in global order. An event is delivered again only if its handler failed. */
export function catchUpSubscription(
  store: Pick<EventStore, 'readAll' | 'onAppended'>,
  { after, handler, onError }: SubscribeOptions,
  { batchSize = 500, pollMs = 1000 }: { batchSize?: number; pollMs?: number } = {},
): Subscription {
  let position = after;
  const stopping = new AbortController();
  const step = async () => {
    const batch = await store.readAll(position, batchSize);
    for (const event of batch) {
      if (stopping.signal.aborted) break;
      await handler(event);
      position = event.position;
    }
    return batch.length;
  };
  const loop = followAppends(store, step, { batchSize, pollMs, signal: stopping.signal, onError });
  return {
    async stop() {
      stopping.abort();
      await loop;
    },
  };
}
