// How every node adapter calls its node: again after a failure, with growing
// jittered delays (rate limits, dropped connections, a lagging node), until
// it answers, the error is an answer in itself, or the attempts run out; and
// what of its errors may be shown.

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

/**
 * The error without the node's URL: an RPC provider's URL usually holds its
 * API key, and ethers puts it in HTTP error messages, which end up in logs and
 * in a settlement's failure reason.
 */
export function withoutRpcUrl(error: unknown, rpcUrl: string): Error {
  const e = error as { shortMessage?: string; message?: string; code?: string };
  const text = String(e?.shortMessage ?? e?.message ?? error);
  const hide = (secret: string, as: string, within: string) =>
    within.replace(new RegExp(secret.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'gi'), as);
  let redacted = hide(rpcUrl, '<rpc url>', text);
  try {
    const { host, pathname } = new URL(rpcUrl);
    redacted = hide(host, '<rpc host>', redacted);
    if (pathname.length > 1) redacted = hide(pathname, '/<rpc path>', redacted);
  } catch {
    // not a URL: nothing more to hide
  }
  const clean = new Error(redacted.slice(0, 500));
  if (e?.code) Object.assign(clean, { code: e.code });
  return clean;
}
