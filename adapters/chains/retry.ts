// How every node adapter calls its node: again after a failure, with growing
// jittered delays (rate limits, dropped connections, a lagging node), until
// it answers, the error is an answer in itself, or the attempts run out.

export interface RetryPolicy {
  attempts: number;
  baseDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 6, baseDelayMs: 250 };

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `work` until it succeeds; `final(error)` says an error is not to be retried (the node's answer, or shutting down). */
export async function retried<T>(
  work: () => Promise<T>,
  policy: RetryPolicy,
  final: (error: unknown) => boolean,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await work();
    } catch (error) {
      if (final(error) || attempt >= policy.attempts) throw error;
      await sleep(Math.min(policy.baseDelayMs * 2 ** (attempt - 1), 10_000) * (0.75 + Math.random() / 2));
    }
  }
}
