// What every real price source (CoinGecko, Kraken, Coinbase, Bitstamp) shares:
// answers are cached for a TTL so quoting rarely waits on the network; after
// a failure the source is not asked again for a while, so an outage does not
// cost every caller a timeout; and while it fails, its last answer is served
// only while younger than the staleness bound. After that the source has no
// rate (undefined), never a stale one.
//
// A source differs only in how a token/fiat pair becomes a request (one
// request may answer many pairs, as CoinGecko's does) and how the body is read.
// Prices become decimal strings at this boundary; no JS number travels further.
import type { Rate, RateProvider } from './port.ts';

export interface SourceOptions {
  /** The API's base URL (a test's fake, a proxy); each source has its public default. */
  baseUrl?: string;
  /** How long an answer is used without asking again. Default 60 s. */
  ttlMs?: number;
  /** How old an answer may get while the source fails before it counts as no answer. Default 10 min. */
  maxStaleMs?: number;
  /** Default 5 s. */
  timeoutMs?: number;
  /** After a failed request, the next one waits this long. Default 10 s. */
  retryAfterFailureMs?: number;
  now?: () => Date;
  fetch?: typeof fetch;
  /** Told about each failed request (the source itself answers undefined or a cached rate). */
  onError?: (error: unknown) => void;
}

/** Symbol -> fiat per token (decimal string), as one request answered. Pairs the source does not list are absent. */
export type Answer = ReadonlyMap<string, string>;

interface Cached {
  answer?: Answer;
  fetchedAt?: number;
  failedAt?: number;
  inFlight?: Promise<void>;
}

export abstract class CachedRateSource implements RateProvider {
  abstract readonly name: string;
  protected readonly baseUrl: string;
  protected readonly timeoutMs: number;
  protected readonly fetch: typeof fetch;
  private readonly ttlMs: number;
  private readonly maxStaleMs: number;
  private readonly retryAfterFailureMs: number;
  private readonly now: () => Date;
  private readonly caches = new Map<string, Cached>();

  constructor(
    defaultBaseUrl: string,
    private readonly options: SourceOptions = {},
  ) {
    this.baseUrl = (options.baseUrl ?? defaultBaseUrl).replace(/\/+$/, '');
    this.ttlMs = options.ttlMs ?? 60_000;
    this.maxStaleMs = options.maxStaleMs ?? 10 * 60_000;
    this.timeoutMs = options.timeoutMs ?? 5_000;
    this.retryAfterFailureMs = options.retryAfterFailureMs ?? 10_000;
    this.now = options.now ?? (() => new Date());
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /**
   * The request that answers `symbol` in `code` (both upper case), as a cache
   * key; undefined when the source does not list the pair (asked nothing).
   */
  protected abstract requestOf(symbol: string, code: string): string | undefined;

  /** Asks the API; throws when it fails or answers something unreadable. */
  protected abstract request(key: string): Promise<Answer>;

  async rate(token: string, fiat: string): Promise<Rate | undefined> {
    const symbol = token.toUpperCase();
    const code = fiat.toUpperCase();
    if (!/^[A-Z0-9]{2,10}$/.test(symbol) || !/^[A-Z]{3}$/.test(code)) return undefined;
    const key = this.requestOf(symbol, code);
    if (key === undefined) return undefined;
    const cache = this.cacheOf(key);
    if (this.due(cache)) {
      // Callers arriving while a request runs wait for that same request.
      cache.inFlight ??= this.refresh(key, cache).finally(() => {
        cache.inFlight = undefined;
      });
      await cache.inFlight;
    }
    if (!cache.answer || cache.fetchedAt === undefined) return undefined;
    if (this.now().getTime() - cache.fetchedAt > this.maxStaleMs) return undefined;
    const rate = cache.answer.get(symbol);
    return rate === undefined ? undefined : { rate, observedAt: new Date(cache.fetchedAt) };
  }

  private cacheOf(key: string): Cached {
    let cache = this.caches.get(key);
    if (!cache) this.caches.set(key, (cache = {}));
    return cache;
  }

  private due(cache: Cached): boolean {
    const now = this.now().getTime();
    if (cache.failedAt !== undefined && now - cache.failedAt < this.retryAfterFailureMs) return false;
    return cache.fetchedAt === undefined || now - cache.fetchedAt >= this.ttlMs;
  }

  private async refresh(key: string, cache: Cached): Promise<void> {
    try {
      cache.answer = await this.request(key);
      cache.fetchedAt = this.now().getTime();
      cache.failedAt = undefined;
    } catch (error) {
      // The previous answer stays; rate() decides whether it is still young enough.
      cache.failedAt = this.now().getTime();
      this.options.onError?.(error);
    }
  }

  /**
   * GET `path` with the deadline on the whole exchange (a server that stalls
   * mid-body times out too): the HTTP status and the body read as JSON
   * (undefined when an error answer is not JSON). Throws when a 200 is not JSON.
   */
  protected async getJson(path: string, headers: Record<string, string> = {}): Promise<HttpAnswer> {
    const response = await this.fetch(`${this.baseUrl}${path}`, {
      headers: { accept: 'application/json', 'user-agent': 'crypto-invoicing-rates/1', ...headers },
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const text = await response.text();
    try {
      return { status: response.status, body: JSON.parse(text) as unknown };
    } catch {
      // An error page (a 404's HTML, a proxy's 502) is read by its status; a 200 must be JSON.
      if (response.status !== 200) return { status: response.status, body: undefined };
      throw new Error(`${this.name} answered HTTP 200 with a body that is not JSON`);
    }
  }

  /** The error of an answer that is not a price: its status and what the API said, for the log. */
  protected failure(answer: HttpAnswer): Error {
    const said = apiMessage(answer.body);
    const limited = answer.status === 429 ? ' (rate limited)' : '';
    return new Error(`${this.name} answered HTTP ${answer.status}${limited}${said ? `: ${said}` : ''}`);
  }
}

export interface HttpAnswer {
  status: number;
  body: unknown;
}

/** The message of the error shapes these APIs use: {message}, {msg}, {reason}, {error: [..]}, {status: {error_message}}. */
export function apiMessage(body: unknown): string | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const b = body as Record<string, unknown>;
  const status = b['status'] as Record<string, unknown> | undefined;
  const candidates = [
    b['message'],
    b['msg'],
    b['reason'],
    b['error'],
    typeof status === 'object' && status !== null ? status['error_message'] : undefined,
  ];
  for (const c of candidates) {
    if (typeof c === 'string' && c) return c.slice(0, 200);
    if (Array.isArray(c) && c.length > 0) return c.map(String).join('; ').slice(0, 200);
  }
  return undefined;
}

/**
 * A price the API wrote as a decimal string ('97000.10000') in plain form,
 * trailing zeros cut ('97000.1'); undefined for anything else, and for zero:
 * a zero price is no price (it would quote an infinite amount).
 */
export function priceFromString(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > 60 || !/^\d+(\.\d+)?$/.test(value)) return undefined;
  if (!/[1-9]/.test(value)) return undefined;
  const [whole = '', fraction = ''] = value.split('.');
  const integer = whole.replace(/^0+(?=\d)/, '');
  const decimals = fraction.replace(/0+$/, '');
  return decimals ? `${integer}.${decimals}` : integer;
}
