// Exchange rates from CoinGecko's public API:
//   GET {baseUrl}/api/v3/simple/price?ids=<ids>&vs_currencies=<code>&precision=full
// One request fetches every catalogue token in the asked fiat currency and is
// cached for a TTL, so quoting never waits on the network more than once a
// minute per currency. When CoinGecko fails, the last answer is served while
// it is younger than the staleness limit; after that the rate is unknown
// (undefined), never stale, and quoting refuses rather than misprices.
//
// CoinGecko answers JSON numbers; each becomes a decimal string right here,
// at the boundary, and no money value travels further as a JS number.
import type { Rate, RateProvider } from './port.ts';

/** CoinGecko's coin id of each catalogue symbol. */
export const coinGeckoIds: Readonly<Record<string, string>> = {
  BTC: 'bitcoin',
  ETH: 'ethereum',
  BNB: 'binancecoin',
  POL: 'polygon-ecosystem-token',
  SOL: 'solana',
  TRX: 'tron',
  USDT: 'tether',
  USDC: 'usd-coin',
};

export interface CoinGeckoOptions {
  /** Default https://api.coingecko.com (a Pro key goes with https://pro-api.coingecko.com). */
  baseUrl?: string;
  apiKey?: string;
  /** Default x-cg-demo-api-key; Pro keys use x-cg-pro-api-key. */
  apiKeyHeader?: string;
  /** How long an answer is used without asking again. Default 60 s. */
  ttlMs?: number;
  /** How old an answer may get while CoinGecko fails before the rate counts as unknown. Default 10 min. */
  maxStaleMs?: number;
  /** Default 5 s. */
  timeoutMs?: number;
  /** After a failed request, the next one waits this long, so an outage does not cost every caller a timeout. Default 10 s. */
  retryAfterFailureMs?: number;
  now?: () => Date;
  fetch?: typeof fetch;
  /** Told about each failed request (the provider itself answers undefined or a cached rate). */
  onError?: (error: unknown) => void;
}

interface Answer {
  /** Symbol -> fiat per token, decimal string. */
  rates: ReadonlyMap<string, string>;
  fetchedAt: number;
}

interface CurrencyCache {
  answer?: Answer;
  failedAt?: number;
  inFlight?: Promise<void>;
}

/**
 * A JSON number as a plain decimal string: the shortest text that reads back
 * as the same number (what CoinGecko sent, up to 17 significant digits),
 * without exponent notation (1.2e-7 -> '0.00000012'). Undefined for anything
 * that is not a finite non-negative number.
 */
export function decimalFromNumber(value: unknown): string | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return undefined;
  const match = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(value));
  if (!match) return undefined;
  const [, whole = '', fraction = '', exponent = '0'] = match;
  const digits = whole + fraction;
  const point = whole.length + Number(exponent);
  const text =
    point <= 0
      ? `0.${'0'.repeat(-point)}${digits}`
      : point >= digits.length
        ? digits + '0'.repeat(point - digits.length)
        : `${digits.slice(0, point)}.${digits.slice(point)}`;
  const [integer = '', decimals = ''] = text.split('.');
  const integerPart = integer.replace(/^0+(?=\d)/, '');
  const decimalPart = decimals.replace(/0+$/, '');
  return decimalPart ? `${integerPart}.${decimalPart}` : integerPart;
}

/** The positive rates of a /simple/price body in `vs` (lowercase code); throws when the body is not the expected shape. */
export function ratesFromSimplePrice(body: unknown, vs: string): Map<string, string> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new Error('CoinGecko answered something other than a JSON object');
  }
  const rates = new Map<string, string>();
  for (const [symbol, id] of Object.entries(coinGeckoIds)) {
    const prices: unknown = (body as Record<string, unknown>)[id];
    if (typeof prices !== 'object' || prices === null) continue;
    const rate = decimalFromNumber((prices as Record<string, unknown>)[vs]);
    // A zero price is no price: it would quote an infinite amount.
    if (rate !== undefined && /[1-9]/.test(rate)) rates.set(symbol, rate);
  }
  return rates;
}

export class CoinGeckoRateProvider implements RateProvider {
  readonly name = 'coingecko';
  private readonly baseUrl: string;
  private readonly ttlMs: number;
  private readonly maxStaleMs: number;
  private readonly timeoutMs: number;
  private readonly retryAfterFailureMs: number;
  private readonly now: () => Date;
  private readonly fetch: typeof fetch;
  private readonly caches = new Map<string, CurrencyCache>();

  constructor(private readonly options: CoinGeckoOptions = {}) {
    this.baseUrl = (options.baseUrl ?? 'https://api.coingecko.com').replace(/\/+$/, '');
    this.ttlMs = options.ttlMs ?? 60_000;
    this.maxStaleMs = options.maxStaleMs ?? 10 * 60_000;
    this.timeoutMs = options.timeoutMs ?? 5_000;
    this.retryAfterFailureMs = options.retryAfterFailureMs ?? 10_000;
    this.now = options.now ?? (() => new Date());
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  async rate(token: string, fiat: string): Promise<Rate | undefined> {
    const symbol = token.toUpperCase();
    const code = fiat.toUpperCase();
    if (!coinGeckoIds[symbol] || !/^[A-Z]{3}$/.test(code)) return undefined;
    const cache = this.cacheOf(code);
    if (this.due(cache)) {
      // Callers arriving while a request runs wait for that same request.
      cache.inFlight ??= this.refresh(code, cache).finally(() => {
        cache.inFlight = undefined;
      });
      await cache.inFlight;
    }
    const answer = cache.answer;
    if (!answer || this.now().getTime() - answer.fetchedAt > this.maxStaleMs) return undefined;
    const rate = answer.rates.get(symbol);
    return rate === undefined ? undefined : { rate, observedAt: new Date(answer.fetchedAt) };
  }

  private cacheOf(code: string): CurrencyCache {
    let cache = this.caches.get(code);
    if (!cache) this.caches.set(code, (cache = {}));
    return cache;
  }

  private due(cache: CurrencyCache): boolean {
    const now = this.now().getTime();
    if (cache.failedAt !== undefined && now - cache.failedAt < this.retryAfterFailureMs) return false;
    return !cache.answer || now - cache.answer.fetchedAt >= this.ttlMs;
  }

  private async refresh(code: string, cache: CurrencyCache): Promise<void> {
    try {
      const rates = await this.request(code.toLowerCase());
      cache.answer = { rates, fetchedAt: this.now().getTime() };
      cache.failedAt = undefined;
    } catch (error) {
      // The previous answer stays; rate() decides whether it is still young enough.
      cache.failedAt = this.now().getTime();
      this.options.onError?.(error);
    }
  }

  private async request(vs: string): Promise<Map<string, string>> {
    const query = new URLSearchParams({
      ids: Object.values(coinGeckoIds).join(','),
      vs_currencies: vs,
      precision: 'full',
    });
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.options.apiKey) headers[this.options.apiKeyHeader ?? 'x-cg-demo-api-key'] = this.options.apiKey;
    // One signal for the whole exchange: a server that stalls mid-body times out too.
    const response = await this.fetch(`${this.baseUrl}/api/v3/simple/price?${query}`, {
      headers,
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    if (!response.ok) throw new Error(`CoinGecko answered HTTP ${response.status}`);
    const text = await response.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new Error('CoinGecko answered a body that is not JSON');
    }
    return ratesFromSimplePrice(body, vs);
  }
}
