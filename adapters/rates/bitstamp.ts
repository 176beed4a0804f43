// Exchange rates from Bitstamp's public market data:
//   GET {baseUrl}/api/v2/ticker/<base><quote>/   (lower case, e.g. btcusd)
// Only the pairs below are asked: Bitstamp has answered another pair's ticker
// for a pair it does not list (knowm/XChange#1061), so an unlisted pair is
// never requested; a 404 for a listed one (delisted since) is no answer.
// Errors are {"status": "error", "reason": ..., "code": ...}; a rate limit is
// HTTP 429 or response code 400.002. Prices are strings already; `last` is
// the last trade.
import { CachedRateSource, priceFromString, type Answer, type SourceOptions } from './source.ts';

/** The catalogue symbols Bitstamp trades against USD, EUR and GBP. */
const listed: ReadonlySet<string> = new Set(['BTC', 'ETH', 'SOL', 'USDT', 'USDC']);
const fiats: ReadonlySet<string> = new Set(['USD', 'EUR', 'GBP']);

export class BitstampRateProvider extends CachedRateSource {
  readonly name = 'bitstamp';

  constructor(options: SourceOptions = {}) {
    super('https://www.bitstamp.net', options);
  }

  protected requestOf(symbol: string, code: string): string | undefined {
    return listed.has(symbol) && fiats.has(code) ? `${symbol}/${code}` : undefined;
  }

  protected async request(key: string): Promise<Answer> {
    const [symbol = '', code = ''] = key.split('/');
    const answer = await this.getJson(`/api/v2/ticker/${symbol.toLowerCase()}${code.toLowerCase()}/`);
    if (answer.status === 404) return new Map();
    const body = answer.body as { status?: unknown; last?: unknown } | null;
    if (answer.status !== 200 || body?.status === 'error') throw this.failure(answer);
    const price = priceFromString(body?.last);
    return new Map(price === undefined ? [] : [[symbol, price]]);
  }
}
