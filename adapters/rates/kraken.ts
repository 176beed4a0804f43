// Exchange rates from Kraken's public market data:
//   GET {baseUrl}/0/public/Ticker?pair=<base><quote>   (e.g. XBTUSD)
// Kraken answers HTTP 200 for its errors too, with {"error": [...]}:
// "EQuery:Unknown asset pair" means Kraken does not list the pair (no answer,
// not a failure); "EAPI:Rate limit exceeded" and the rest are failures.
// Prices are strings already; `c` is the last trade [price, lot volume].
import { CachedRateSource, priceFromString, type Answer, type SourceOptions } from './source.ts';

/** Kraken's name of a catalogue symbol where it differs (Bitcoin is XBT there). */
const krakenBase: Readonly<Record<string, string>> = { BTC: 'XBT' };

export class KrakenRateProvider extends CachedRateSource {
  readonly name = 'kraken';

  constructor(options: SourceOptions = {}) {
    super('https://api.kraken.com', options);
  }

  /** One pair per request: Kraken refuses a whole list when one pair in it is unknown. */
  protected requestOf(symbol: string, code: string): string {
    return `${symbol}/${code}`;
  }

  protected async request(key: string): Promise<Answer> {
    const [symbol = '', code = ''] = key.split('/');
    const answer = await this.getJson(`/0/public/Ticker?pair=${krakenBase[symbol] ?? symbol}${code}`);
    const body = answer.body as { error?: unknown; result?: unknown } | null;
    const errors = Array.isArray(body?.error) ? body.error.map(String) : [];
    if (errors.some((e) => e.startsWith('EQuery:Unknown asset pair'))) return new Map();
    if (answer.status !== 200 || errors.length > 0) throw this.failure(answer);
    return new Map(priceOf(body?.result, symbol));
  }
}

/** The last trade price of the one pair in a Ticker result (keyed by Kraken's own pair name, e.g. XXBTZUSD). */
function priceOf(result: unknown, symbol: string): [string, string][] {
  if (typeof result !== 'object' || result === null) throw new Error('kraken answered a Ticker without a result');
  const tickers = Object.values(result as Record<string, unknown>);
  if (tickers.length !== 1) throw new Error(`kraken answered ${tickers.length} tickers for one pair`);
  const last = (tickers[0] as { c?: unknown } | null)?.c;
  const price = priceFromString(Array.isArray(last) ? last[0] : undefined);
  return price === undefined ? [] : [[symbol, price]];
}
