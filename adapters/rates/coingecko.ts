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
import { CachedRateSource, type Answer, type SourceOptions } from './source.ts';

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

export interface CoinGeckoOptions extends SourceOptions {
  /** Default https://api.coingecko.com (a Pro key goes with https://pro-api.coingecko.com). */
  baseUrl?: string;
  apiKey?: string;
  /** Default x-cg-demo-api-key; Pro keys use x-cg-pro-api-key. */
  apiKeyHeader?: string;
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

export class CoinGeckoRateProvider extends CachedRateSource {
  readonly name = 'coingecko';

  constructor(private readonly coinGecko: CoinGeckoOptions = {}) {
    super('https://api.coingecko.com', coinGecko);
  }

  /** One request per fiat currency answers every catalogue token. */
  protected requestOf(symbol: string, code: string): string | undefined {
    return coinGeckoIds[symbol] ? code.toLowerCase() : undefined;
  }

  protected async request(vs: string): Promise<Answer> {
    const query = new URLSearchParams({
      ids: Object.values(coinGeckoIds).join(','),
      vs_currencies: vs,
      precision: 'full',
    });
    const headers: Record<string, string> = {};
    if (this.coinGecko.apiKey) headers[this.coinGecko.apiKeyHeader ?? 'x-cg-demo-api-key'] = this.coinGecko.apiKey;
    const answer = await this.getJson(`/api/v3/simple/price?${query}`, headers);
    if (answer.status !== 200) throw this.failure(answer);
    return ratesFromSimplePrice(answer.body, vs);
  }
}
