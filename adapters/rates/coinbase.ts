// Exchange rates from Coinbase Exchange's public market data:
//   GET {baseUrl}/products/<BASE>-<QUOTE>/ticker   (e.g. BTC-USD)
// A product Coinbase does not list answers 404 {"message":"NotFound"}: no
// answer, not a failure. Other errors ({"message": ...}, 429 "Public rate
// limit exceeded") are failures. Prices are strings already.
import { CachedRateSource, priceFromString, type Answer, type SourceOptions } from './source.ts';

export class CoinbaseRateProvider extends CachedRateSource {
  readonly name = 'coinbase';

  constructor(options: SourceOptions = {}) {
    super('https://api.exchange.coinbase.com', options);
  }

  protected requestOf(symbol: string, code: string): string {
    return `${symbol}-${code}`;
  }

  protected async request(product: string): Promise<Answer> {
    const answer = await this.getJson(`/products/${product}/ticker`);
    if (answer.status === 404) return new Map();
    if (answer.status !== 200) throw this.failure(answer);
    const price = priceFromString((answer.body as { price?: unknown } | null)?.price);
    const symbol = product.split('-')[0] ?? '';
    return new Map(price === undefined ? [] : [[symbol, price]]);
  }
}
