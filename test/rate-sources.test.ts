// The price sources against recorded answers of their real APIs
// (test/fixtures/rates/README.md), and the median of several sources.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { BitstampRateProvider } from '../adapters/rates/bitstamp.ts';
import { CoinbaseRateProvider } from '../adapters/rates/coinbase.ts';
import { CoinGeckoRateProvider } from '../adapters/rates/coingecko.ts';
import { KrakenRateProvider } from '../adapters/rates/kraken.ts';
import { aggregate, beyondSpread, MedianRateProvider, medianOf } from '../adapters/rates/median.ts';
import type { Rate, RateProvider } from '../adapters/rates/port.ts';
import type { SourceOptions } from '../adapters/rates/source.ts';

const T0 = Date.parse('2026-11-28T04:00:00Z');
const fixture = (name: string) => readFile(new URL(`./fixtures/rates/${name}`, import.meta.url), 'utf8');

/** A fetch that answers each path from a recorded answer, and notes what was asked. */
function recorded(answers: Record<string, { status: number; file?: string; body?: string }>) {
  const asked: string[] = [];
  const fetch = (async (input: string | URL | Request) => {
    const url = new URL(String(input));
    const path = url.pathname + url.search;
    asked.push(path);
    const answer = answers[path];
    if (!answer) return new Response('{"message":"NotFound"}', { status: 404 });
    const body = answer.body ?? (await fixture(answer.file!));
    return new Response(body, { status: answer.status });
  }) as typeof globalThis.fetch;
  return { fetch, asked };
}

interface SourceCase {
  name: string;
  make: (options: SourceOptions) => RateProvider;
  btcUsdPath: string;
  success: { status: number; file: string };
  btcUsd: string;
  /** An unlisted pair: the path asked (undefined: asked nothing) and the recorded answer. */
  unlisted: { token: string; fiat: string; path?: string; answer?: { status: number; file: string } };
  rateLimited: { status: number; file: string };
  /** What the logged error says of a rate limit. */
  rateLimitWords: RegExp;
}

const cases: SourceCase[] = [
  {
    name: 'kraken',
    make: (o) => new KrakenRateProvider(o),
    btcUsdPath: '/0/public/Ticker?pair=XBTUSD',
    success: { status: 200, file: 'kraken/ticker-xbtusd.json' },
    btcUsd: '97012.3',
    unlisted: {
      token: 'BNB',
      fiat: 'GBP',
      path: '/0/public/Ticker?pair=BNBGBP',
      answer: { status: 200, file: 'kraken/unknown-pair.json' },
    },
    rateLimited: { status: 200, file: 'kraken/rate-limit.json' },
    rateLimitWords: /EAPI:Rate limit exceeded/,
  },
  {
    name: 'coinbase',
    make: (o) => new CoinbaseRateProvider(o),
    btcUsdPath: '/products/BTC-USD/ticker',
    success: { status: 200, file: 'coinbase/ticker-btc-usd.json' },
    btcUsd: '97015',
    unlisted: {
      token: 'TRX',
      fiat: 'USD',
      path: '/products/TRX-USD/ticker',
      answer: { status: 404, file: 'coinbase/not-found.json' },
    },
    rateLimited: { status: 429, file: 'coinbase/rate-limit.json' },
    rateLimitWords: /HTTP 429 \(rate limited\): Public rate limit exceeded/,
  },
  {
    name: 'bitstamp',
    make: (o) => new BitstampRateProvider(o),
    btcUsdPath: '/api/v2/ticker/btcusd/',
    success: { status: 200, file: 'bitstamp/ticker-btcusd.json' },
    btcUsd: '97020',
    unlisted: { token: 'TRX', fiat: 'USD' },
    rateLimited: { status: 429, file: 'bitstamp/rate-limit.json' },
    rateLimitWords: /HTTP 429 \(rate limited\): Request rejected due to exceeded rate limit/,
  },
  {
    name: 'coingecko',
    make: (o) => new CoinGeckoRateProvider(o),
    btcUsdPath:
      '/api/v3/simple/price?ids=bitcoin%2Cethereum%2Cbinancecoin%2Cpolygon-ecosystem-token%2Csolana%2Ctron%2Ctether%2Cusd-coin&vs_currencies=usd&precision=full',
    success: { status: 200, file: '../coingecko/simple-price-usd.json' },
    btcUsd: '97123.45',
    unlisted: { token: 'DOGE', fiat: 'USD' },
    rateLimited: { status: 429, file: 'coingecko/rate-limit.json' },
    rateLimitWords: /HTTP 429 \(rate limited\): You've exceeded the Rate Limit/,
  },
];

for (const c of cases) {
  describe(`${c.name} rate source (recorded answers)`, () => {
    const make = (answers: Parameters<typeof recorded>[0], now = () => new Date(T0)) => {
      const api = recorded(answers);
      const errors: unknown[] = [];
      const source = c.make({ fetch: api.fetch, now, onError: (e) => errors.push(e) });
      return { source, api, errors };
    };

    it('reads the price of its ticker as an exact decimal string, observed when fetched', async () => {
      const { source, api, errors } = make({ [c.btcUsdPath]: c.success });
      assert.equal(source.name, c.name);
      assert.deepEqual(await source.rate('btc', 'usd'), { rate: c.btcUsd, observedAt: new Date(T0) });
      assert.deepEqual(api.asked, [c.btcUsdPath]);
      assert.deepEqual(errors, []);
    });

    it('has no answer for a pair it does not list, and that is no error', async () => {
      const { token, fiat, path, answer } = c.unlisted;
      const { source, api, errors } = make(path && answer ? { [path]: answer } : {});
      assert.equal(await source.rate(token, fiat), undefined);
      assert.deepEqual(api.asked, path ? [path] : []);
      assert.deepEqual(errors, []);
    });

    it('fails on a rate-limit answer, saying so in the log, and answers no rate', async () => {
      const { source, errors } = make({ [c.btcUsdPath]: c.rateLimited });
      assert.equal(await source.rate('BTC', 'USD'), undefined);
      assert.equal(errors.length, 1);
      assert.match(String(errors[0]), c.rateLimitWords);
    });

    it('fails on an error page or a body that is no ticker, without crashing', async () => {
      for (const body of ['<html>502 Bad Gateway</html>', '[]', '{"unexpected":true}']) {
        const { source } = make({ [c.btcUsdPath]: { status: body.startsWith('<') ? 502 : 200, body } });
        assert.equal(await source.rate('BTC', 'USD'), undefined, body);
      }
    });

    it('serves its last answer while it fails, only within the staleness bound', async () => {
      let now = T0;
      const answers: Parameters<typeof recorded>[0] = { [c.btcUsdPath]: c.success };
      const api = recorded(answers);
      const source = c.make({ fetch: api.fetch, now: () => new Date(now), ttlMs: 1_000, maxStaleMs: 60_000 });
      assert.equal((await source.rate('BTC', 'USD'))?.rate, c.btcUsd);
      answers[c.btcUsdPath] = c.rateLimited;
      now += 60_000;
      assert.deepEqual(await source.rate('BTC', 'USD'), { rate: c.btcUsd, observedAt: new Date(T0) });
      now += 1;
      assert.equal(await source.rate('BTC', 'USD'), undefined, 'older than the bound');
    });
  });
}

describe('rate source specifics', () => {
  it('kraken: its newer rate-limit answer is a failure too', async () => {
    const api = recorded({ '/0/public/Ticker?pair=ETHUSD': { status: 200, file: 'kraken/too-many-requests.json' } });
    const errors: unknown[] = [];
    const kraken = new KrakenRateProvider({ fetch: api.fetch, onError: (e) => errors.push(e) });
    assert.equal(await kraken.rate('ETH', 'USD'), undefined);
    assert.match(String(errors[0]), /EGeneral:Too many requests/);
  });

  it('bitstamp: a listed pair answering a 404 page (delisted since) is no answer, and no error', async () => {
    const api = recorded({ '/api/v2/ticker/solgbp/': { status: 404, file: 'bitstamp/not-found.html' } });
    const errors: unknown[] = [];
    const bitstamp = new BitstampRateProvider({ fetch: api.fetch, onError: (e) => errors.push(e) });
    assert.equal(await bitstamp.rate('SOL', 'GBP'), undefined);
    assert.deepEqual(api.asked, ['/api/v2/ticker/solgbp/']);
    assert.deepEqual(errors, []);
  });
});

describe('exact decimal median and spread', () => {
  it('takes the middle answer of an odd count, the exact mean of the middle two of an even one', () => {
    assert.equal(medianOf(['3', '1', '2']), '2');
    assert.equal(medianOf(['97000.1', '97000.2']), '97000.15');
    assert.equal(medianOf(['1', '2']), '1.5');
    assert.equal(medianOf(['0.00000001', '0.00000002', '5', '0.00000003']), '0.000000025');
    assert.equal(medianOf(['0.1', '0.2']), '0.15', 'no float noise');
  });

  it('compares a difference with a percentage of the reference, exactly', () => {
    assert.equal(beyondSpread('102', '100', '2'), false);
    assert.equal(beyondSpread('102.0001', '100', '2'), true);
    assert.equal(beyondSpread('98', '100', '2'), false);
    assert.equal(beyondSpread('97.99', '100', '2'), true);
    assert.equal(beyondSpread('100.5', '100', '0.5'), false);
    assert.equal(beyondSpread('100.51', '100', '0.5'), true);
  });
});

describe('the rule of the median', () => {
  const at = new Date(T0);
  const answer = (name: string, rate: string, observedAt = at) => ({ name, rate, observedAt });

  it('takes the median of three and records every answer', () => {
    const result = aggregate(
      [answer('kraken', '97010'), answer('coinbase', '97000'), answer('coingecko', '97030')],
      '2',
    );
    assert.ok(result.ok);
    assert.equal(result.rate, '97010');
    assert.deepEqual(
      result.sources.map((s) => [s.name, s.rate, s.used]),
      [
        ['kraken', '97010', true],
        ['coinbase', '97000', true],
        ['coingecko', '97030', true],
      ],
    );
  });

  it('leaves out a price 100x off, and the rate is the median of the others', () => {
    const result = aggregate(
      [answer('kraken', '9701000'), answer('coinbase', '97000'), answer('coingecko', '97020')],
      '2',
    );
    assert.ok(result.ok);
    assert.equal(result.rate, '97010');
    assert.deepEqual(
      result.outliers.map((o) => o.name),
      ['kraken'],
    );
    assert.equal(result.sources.find((s) => s.name === 'kraken')?.used, false);
  });

  it('drops a zero, a negative or a non-number answer as no answer', () => {
    const result = aggregate(
      [answer('kraken', '0'), answer('coinbase', '-97000'), answer('bitstamp', 'NaN'), answer('coingecko', '97000')],
      '2',
    );
    assert.ok(result.ok);
    assert.equal(result.rate, '97000');
    assert.deepEqual(
      result.sources.map((s) => s.name),
      ['coingecko'],
    );
  });

  it('with two answers takes their mean when they agree, and refuses when they do not', () => {
    const agree = aggregate([answer('kraken', '97000'), answer('coinbase', '97100')], '2');
    assert.ok(agree.ok);
    assert.equal(agree.rate, '97050');
    const apart = aggregate([answer('kraken', '9700000'), answer('coinbase', '97000')], '2');
    assert.equal(apart.ok, false);
    assert.match(!apart.ok ? apart.reason : '', /kraken \(9700000\) and coinbase \(97000\) differ by more than 2%/);
  });

  it('refuses when fewer than half of the answers agree with the median', () => {
    const result = aggregate([answer('kraken', '100'), answer('coinbase', '200'), answer('coingecko', '400')], '2');
    assert.equal(result.ok, false);
  });

  it('dates a rate by the oldest answer it used', () => {
    const result = aggregate(
      [answer('kraken', '97000', new Date(T0 - 30_000)), answer('coinbase', '97001'), answer('coingecko', '1')],
      '2',
    );
    assert.ok(result.ok);
    assert.deepEqual(result.observedAt, new Date(T0 - 30_000));
  });
});

/** A source answering what the test says: a rate, nothing, a failure, or never. */
class StubSource implements RateProvider {
  answer: 'never' | 'fail' | string | undefined;
  constructor(
    readonly name: string,
    answer: StubSource['answer'],
  ) {
    this.answer = answer;
  }
  async rate(): Promise<Rate | undefined> {
    if (this.answer === 'never') return new Promise(() => {});
    if (this.answer === 'fail') throw new Error(`${this.name} is down`);
    return this.answer === undefined ? undefined : { rate: this.answer, observedAt: new Date(T0) };
  }
}

describe('MedianRateProvider', () => {
  const three = (a: StubSource['answer'], b: StubSource['answer'], c: StubSource['answer']) =>
    new MedianRateProvider(
      [new StubSource('kraken', a), new StubSource('coinbase', b), new StubSource('coingecko', c)],
      { deadlineMs: 50, now: () => new Date(T0) },
    );

  it('quotes with one source down, one failing, or one never answering', async () => {
    for (const broken of [undefined, 'fail', 'never'] as const) {
      const rates = three(broken, '97000', '97100');
      const rate = await rates.rate('BTC', 'USD');
      assert.equal(rate?.rate, '97050', String(broken));
      assert.deepEqual(
        rate?.sources?.map((s) => s.name),
        ['coinbase', 'coingecko'],
      );
    }
  });

  it('quotes with one source answering zero or a price 100x off, and lists the disagreement', async () => {
    assert.equal((await three('0', '97000', '97100').rate('BTC', 'USD'))?.rate, '97050');
    const rates = three('9700000', '97000', '97100');
    assert.equal((await rates.rate('BTC', 'USD'))?.rate, '97050');
    const [item, ...rest] = rates.recentDisagreements();
    assert.deepEqual(rest, []);
    assert.equal(item?.pair, 'BTC/USD');
    assert.match(item?.reason ?? '', /kraken left out/);
    assert.match(item?.detail ?? '', /kraken 9700000 \(left out\), coinbase 97000, coingecko 97100/);
  });

  it('refuses with all sources down, naming them', async () => {
    const rates = three('fail', undefined, 'never');
    assert.equal(await rates.rate('ETH', 'USD'), undefined);
    assert.equal(rates.name, 'kraken, coinbase, coingecko');
    assert.equal(
      rates.whyNoRate('ETH', 'usd'),
      'No exchange rate for ETH in USD is available from kraken, coinbase, coingecko: no source answered a price in time',
    );
    assert.deepEqual(rates.recentDisagreements(), []);
  });

  it('refuses when the two sources left disagree, and says which', async () => {
    const rates = three('fail', '97000', '9700000');
    assert.equal(await rates.rate('BTC', 'USD'), undefined);
    assert.match(rates.whyNoRate('BTC', 'USD'), /coinbase \(97000\) and coingecko \(9700000\) differ by more than 2%/);
    assert.match(rates.recentDisagreements()[0]?.reason ?? '', /quote refused/);
  });

  it('uses a source’s stale answer within its bound and not beyond it', async () => {
    let now = T0;
    const answers: Record<string, { status: number; file: string }> = {
      '/products/BTC-USD/ticker': { status: 200, file: 'coinbase/ticker-btc-usd.json' },
    };
    const api = recorded(answers);
    const coinbase = new CoinbaseRateProvider({
      fetch: api.fetch,
      now: () => new Date(now),
      ttlMs: 1_000,
      maxStaleMs: 600_000,
    });
    const rates = new MedianRateProvider([new StubSource('kraken', 'fail'), coinbase], {
      deadlineMs: 1_000,
      now: () => new Date(now),
    });
    assert.equal((await rates.rate('BTC', 'USD'))?.rate, '97015');
    answers['/products/BTC-USD/ticker'] = { status: 429, file: 'coinbase/rate-limit.json' };
    now += 600_000;
    const stale = await rates.rate('BTC', 'USD');
    assert.equal(stale?.rate, '97015');
    assert.deepEqual(stale?.observedAt, new Date(T0), 'the rate says how old it is');
    now += 1;
    assert.equal(await rates.rate('BTC', 'USD'), undefined);
  });
});
