// What every chain adapter's node connection shares, whatever the node speaks
// (ethers JSON-RPC, Core's JSON-RPC, Solana's, java-tron's HTTP API): a call
// given a deadline, asked again after a failure with growing jittered delays
// (rate limits, dropped connections, a lagging node) until it answers, the
// error is an answer in itself, the node asked to be left alone, or the
// attempts run out; errors without the node's URL; and start-up's one line
// naming the variable when the node does not answer or is of another network.
import { withDeadline } from '../deadline.ts';

export interface RetryPolicy {
  attempts: number;
  baseDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 6, baseDelayMs: 250 };

/** A node that never answers (a dead socket, a stuck proxy) must not stall the watcher or the sweeper. */
export const RPC_TIMEOUT_MS = 30_000;

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
  const e = error as { shortMessage?: string; message?: string; code?: string; error?: { message?: string } };
  // ethers' short message of a JSON-RPC error ("could not coalesce error") leaves out the node's own words.
  const answer = e?.shortMessage && e.error?.message;
  const text = String(e?.shortMessage ?? e?.message ?? error) + (answer ? `: ${answer}` : '');
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

export interface NodeOptions {
  /** The node's URLs: none of them shows in an error (they may hold an API key). */
  urls: readonly string[];
  retry?: RetryPolicy | undefined;
  /** An error that is the node's answer (a JSON-RPC error object): thrown at once, as it is. */
  answered?: (error: unknown) => boolean;
}

/** One node's calls, as every adapter makes them. */
export class ChainNode {
  protected closed = false;
  /** No request before this time: the node answered that we ask too often. */
  private pausedUntil = 0;

  constructor(private readonly options: NodeOptions) {}

  /**
   * `request` until it answers: each attempt given `deadlineMs` (its
   * signal aborts then, and a request that ignores the signal is given up
   * all the same), retried unless the node answered, we are closing, or the
   * node asked for a pause; a failure comes out without the node's URLs.
   */
  async call<T>(what: string, request: (signal: AbortSignal) => Promise<T>, deadlineMs = RPC_TIMEOUT_MS): Promise<T> {
    const answered = this.options.answered ?? (() => false);
    try {
      return await retried(
        () => {
          this.refuseWhilePaused(what);
          return withDeadline(request(AbortSignal.timeout(deadlineMs)), deadlineMs, what);
        },
        this.options.retry ?? DEFAULT_RETRY,
        (error) => answered(error) || this.closed || Date.now() < this.pausedUntil,
      );
    } catch (error) {
      throw answered(error) ? error : this.redacted(error);
    }
  }

  /** The error without any of the node's URLs. */
  redacted(error: unknown): Error {
    const [first, ...others] = this.options.urls;
    return others.reduce((e, url) => withoutRpcUrl(e, url), withoutRpcUrl(error, first!));
  }

  /**
   * The node answered that we ask too often (TronGrid's 403, 429 or 503 to a
   * key over its rate, which suspends the key and is prolonged by every
   * request meanwhile): no request for `ms`, and the error to throw.
   */
  rateLimited(what: string, status: number, ms: number): Error {
    this.pausedUntil = Date.now() + ms;
    return new Error(`${what}: HTTP ${status}, rate limited; no request for ${ms / 1000} s`);
  }

  private refuseWhilePaused(what: string): void {
    if (Date.now() < this.pausedUntil) {
      throw new Error(
        `${what}: the node asked for fewer requests; none before ${new Date(this.pausedUntil).toISOString()}`,
      );
    }
  }

  /** Start-up's line for a node that did not answer: the variable to look at, and why (without the URL). */
  unanswered(variable: string, error: unknown, who = 'the node'): Error {
    const reason = this.redacted(error).message.split('\n')[0]!;
    return new Error(`${variable}: ${who} did not answer (${reason.slice(0, 200)})`);
  }

  close(): void {
    this.closed = true;
  }
}

/**
 * `adapter` once `check` passed (the node answers, is of the network
 * configured, takes the configured treasury); on any failure the adapter is
 * closed (its poller and sockets stopped) and the failure thrown.
 */
export async function checkedOpen<A extends { close(): void }>(adapter: A, check: () => Promise<void>): Promise<A> {
  try {
    await check();
    return adapter;
  } catch (error) {
    adapter.close();
    throw error;
  }
}
