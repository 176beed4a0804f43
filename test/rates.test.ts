import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { CoinGeckoRateProvider, decimalFromNumber, type CoinGeckoOptions } from '../adapters/rates/coingecko.ts';
import { FixedRateProvider, sandboxRatesStreamName } from '../adapters/rates/fixed.ts';
import { DomainError } from '../domain/decider.ts';

const T0 = Date.parse('2025-01-01T00:00:00.000Z');

const badRequest = (message: string) => (error: unknown) =>
  error instanceof DomainError && error.kind === 'bad_request' && error.message === message;

describe('FixedRateProvider', () => {
  const clock = { now: () => new Date(T0) };

  it('answers the built-in table, whatever the case of the codes', async () => {
    const rates = await FixedRateProvider.open(new MemoryEventStore(), clock);
    assert.deepEqual(await rates.rate('BTC', 'USD'), { rate: '97000', observedAt: new Date(T0) });
    assert.equal((await rates.rate('usdt', 'usd'))?.rate, '1');
    assert.equal((await rates.rate('USDC', 'USD'))?.rate, '1');
    assert.equal((await rates.rate('ETH', 'EUR'))?.rate, '3145');
    assert.equal((await rates.rate('SOL', 'GBP'))?.rate, '142.2');
    for (const token of ['BTC', 'ETH', 'BNB', 'POL', 'SOL', 'TRX', 'USDT', 'USDC']) {
      for (const fiat of ['USD', 'EUR', 'GBP']) assert.ok(await rates.rate(token, fiat), `${token}/${fiat}`);
    }
    assert.equal(await rates.rate('BTC', 'JPY'), undefined);
    assert.equal(await rates.rate('DOGE', 'USD'), undefined);
  });

  it('uses a rate once it is set, and keeps it across a restart', async () => {
    const store = new MemoryEventStore();
    const rates = await FixedRateProvider.open(store, clock);
    await rates.setRate('btc', 'usd', '50000.12345678');
    await rates.setRate('TRX', 'JPY', '38.5');
    assert.equal((await rates.rate('BTC', 'USD'))?.rate, '50000.12345678');
    assert.equal((await rates.rate('TRX', 'JPY'))?.rate, '38.5');
    assert.equal((await rates.rate('BTC', 'EUR'))?.rate, '89725', 'other rates stay as they were');

    await rates.setRate('BTC', 'USD', '60000');
    const reopened = await FixedRateProvider.open(store, clock);
    assert.equal((await reopened.rate('BTC', 'USD'))?.rate, '60000');
    assert.equal((await reopened.rate('TRX', 'JPY'))?.rate, '38.5');
    assert.deepEqual((await store.readStream(sandboxRatesStreamName))[0]?.data, {
      token: 'BTC',
      fiat: 'USD',
      rate: '50000.12345678',
      at: '2025-01-01T00:00:00.000Z',
    });
  });

  it('refuses unknown tokens, malformed fiat codes and rates that are not positive decimals', async () => {
    const store = new MemoryEventStore();
    const rates = await FixedRateProvider.open(store, clock);
    await assert.rejects(
      rates.setRate('DOGE', 'USD', '1'),
      badRequest('Token DOGE is not in the catalogue (known: ETH, USDT, USDC, BNB, POL, SOL, TRX, BTC)'),
    );
    for (const fiat of ['US', 'USDX', 'U$D', '']) {
      await assert.rejects(
        rates.setRate('BTC', fiat, '1'),
        badRequest(`Fiat currency must be a 3-letter code such as USD, got '${fiat}'`),
      );
    }
    for (const rate of ['0', '0.000', '-1', '1e5', 'abc', '', ' 1', '.5', '0.0000000000000000001']) {
      await assert.rejects(
        rates.setRate('BTC', 'USD', rate),
        badRequest(`Rate must be a positive decimal string with at most 18 decimals, got '${rate}'`),
        `rate '${rate}'`,
      );
    }
    await rates.setRate('ETH', 'USD', '0.000000000000000001');
    assert.equal((await rates.rate('ETH', 'USD'))?.rate, '0.000000000000000001');
    assert.equal((await store.readStream(sandboxRatesStreamName)).length, 1, 'nothing refused was stored');
  });
});

describe('decimalFromNumber', () => {
  it('writes JSON numbers as plain decimals, without exponent or float noise', () => {
    const cases: [number, string][] = [
      [97123.45, '97123.45'],
      [1.0002, '1.0002'],
      [1.2e-7, '0.00000012'],
      [1e-7, '0.0000001'],
      [2.609e-6, '0.000002609'],
      [1.23456789e-12, '0.00000000000123456789'],
      [1e21, '1000000000000000000000'],
      [1.5e22, '15000000000000000000000'],
      [0.1 + 0.2, '0.30000000000000004'], // the number itself, not noise added by the conversion
      [42, '42'],
      [0, '0'],
    ];
    for (const [value, expected] of cases) assert.equal(decimalFromNumber(value), expected, String(value));
    for (const value of [Number.NaN, Number.POSITIVE_INFINITY, -1, '1', null])
      assert.equal(decimalFromNumber(value), undefined);
  });
});

type Behaviour = 'replay' | 'error' | 'slow' | 'not-json' | 'array';

/** A stand-in for api.coingecko.com replaying recorded answers of /api/v3/simple/price. */
class FakeCoinGecko {
  behaviour: Behaviour = 'replay';
  /** Fixture name per vs currency, when not simple-price-<vs>.json. */
  fixtureFor = new Map<string, string>();
  requests: { url: URL; headers: IncomingHttpHeaders }[] = [];
  private server: Server | undefined;
  baseUrl = '';

  async start(): Promise<void> {
    this.server = createServer((request, response) => {
      const url = new URL(request.url ?? '/', 'http://127.0.0.1');
      this.requests.push({ url, headers: request.headers });
      void this.answer(url, response);
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.baseUrl = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private async answer(url: URL, response: import('node:http').ServerResponse): Promise<void> {
    const json = (status: number, body: string) =>
      response.writeHead(status, { 'content-type': 'application/json' }).end(body);
    switch (this.behaviour) {
      case 'error':
        return void json(500, '{"status":{"error_code":500,"error_message":"Internal Server Error"}}');
      case 'slow':
        return void setTimeout(() => json(200, '{}'), 2_000).unref();
      case 'not-json':
        return void response
          .writeHead(200, { 'content-type': 'text/html' })
          .end('<html><body>Just a moment...</body></html>');
      case 'array':
        return void json(200, '[{"bitcoin":{"usd":1}}]');
      case 'replay': {
        const vs = url.searchParams.get('vs_currencies') ?? '';
        const name = this.fixtureFor.get(vs) ?? `simple-price-${vs}.json`;
        try {
          json(200, await readFile(new URL(`./fixtures/coingecko/${name}`, import.meta.url), 'utf8'));
        } catch {
          json(200, '{}');
        }
      }
    }
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }
}

describe('CoinGeckoRateProvider', () => {
  const api = new FakeCoinGecko();
  let now = T0;
  before(() => api.start());
  after(() => api.stop());
  beforeEach(() => {
    api.behaviour = 'replay';
    api.fixtureFor.clear();
    api.requests = [];
    now = T0;
  });
  const provider = (options: CoinGeckoOptions = {}) =>
    new CoinGeckoRateProvider({ baseUrl: api.baseUrl, now: () => new Date(now), ...options });

  it('asks /simple/price for every token in the asked currency, and answers exact decimal strings', async () => {
    const rates = provider({ apiKey: 'CG-demo-key' });
    assert.deepEqual(await rates.rate('BTC', 'USD'), { rate: '97123.45', observedAt: new Date(T0) });
    assert.equal((await rates.rate('usdt', 'usd'))?.rate, '1.0002');
    assert.equal((await rates.rate('TRX', 'USD'))?.rate, '0.2534');
    assert.equal((await rates.rate('ETH', 'USD'))?.rate, '3412.8712345');
    assert.equal((await rates.rate('POL', 'USD'))?.rate, '0.45217');

    assert.equal(api.requests.length, 1);
    const [{ url, headers }] = api.requests as [(typeof api.requests)[number]];
    assert.equal(url.pathname, '/api/v3/simple/price');
    assert.deepEqual(url.searchParams.get('ids')?.split(',').sort(), [
      'binancecoin',
      'bitcoin',
      'ethereum',
      'polygon-ecosystem-token',
      'solana',
      'tether',
      'tron',
      'usd-coin',
    ]);
    assert.equal(url.searchParams.get('vs_currencies'), 'usd');
    assert.equal(url.searchParams.get('precision'), 'full');
    assert.equal(headers['x-cg-demo-api-key'], 'CG-demo-key');
  });

  it('converts small prices written with an exponent into plain decimals', async () => {
    const rates = provider();
    assert.equal((await rates.rate('TRX', 'BTC'))?.rate, '0.000002609');
    assert.equal((await rates.rate('POL', 'BTC'))?.rate, '0.00000465564');
    assert.equal((await rates.rate('BTC', 'BTC'))?.rate, '1');
    api.fixtureFor.set('usd', 'simple-price-usd-tiny.json');
    assert.equal((await rates.rate('POL', 'USD'))?.rate, '0.00000012');
  });

  it('sends one request for many calls within the TTL, concurrent ones included, and asks again after it', async () => {
    const rates = provider({ ttlMs: 60_000 });
    const answers = await Promise.all(
      ['BTC', 'ETH', 'SOL', 'BTC', 'USDC', 'TRX', 'BNB', 'POL'].map((t) => rates.rate(t, 'USD')),
    );
    assert.ok(answers.every((a) => a !== undefined));
    now += 59_999;
    await rates.rate('BTC', 'USD');
    assert.equal(api.requests.length, 1);

    now += 1;
    assert.deepEqual(await rates.rate('BTC', 'USD'), { rate: '97123.45', observedAt: new Date(now) });
    assert.equal(api.requests.length, 2);

    // Another currency is its own request.
    assert.equal((await rates.rate('BTC', 'EUR'))?.rate, '89851.2');
    assert.equal(api.requests.length, 3);
    assert.equal(api.requests[2]?.url.searchParams.get('vs_currencies'), 'eur');
  });

  it('serves the cached rate while CoinGecko fails (HTTP 500) within the staleness limit, then nothing', async () => {
    const errors: unknown[] = [];
    const rates = provider({
      ttlMs: 60_000,
      maxStaleMs: 600_000,
      retryAfterFailureMs: 0,
      onError: (e) => errors.push(e),
    });
    assert.equal((await rates.rate('BTC', 'USD'))?.rate, '97123.45');
    api.behaviour = 'error';
    now = T0 + 300_000;
    assert.deepEqual(await rates.rate('BTC', 'USD'), { rate: '97123.45', observedAt: new Date(T0) });
    now = T0 + 600_000;
    assert.equal((await rates.rate('BTC', 'USD'))?.rate, '97123.45');
    now = T0 + 600_001;
    assert.equal(await rates.rate('BTC', 'USD'), undefined);
    assert.equal(api.requests.length, 4);
    assert.match(String(errors[0]), /HTTP 500/);

    // CoinGecko back: fresh rates again.
    api.behaviour = 'replay';
    assert.deepEqual(await rates.rate('BTC', 'USD'), { rate: '97123.45', observedAt: new Date(now) });
  });

  it('gives up a request after the timeout and serves the cached rate', async () => {
    const rates = provider({ ttlMs: 60_000, timeoutMs: 100 });
    await rates.rate('BTC', 'USD');
    api.behaviour = 'slow';
    now = T0 + 61_000;
    const started = performance.now();
    assert.deepEqual(await rates.rate('BTC', 'USD'), { rate: '97123.45', observedAt: new Date(T0) });
    assert.ok(performance.now() - started < 1_500, 'did not wait for the slow answer');
    assert.equal(api.requests.length, 2);
  });

  it('waits before asking again after a failure, so an outage does not cost every caller a timeout', async () => {
    const rates = provider({ ttlMs: 60_000, retryAfterFailureMs: 10_000 });
    api.behaviour = 'error';
    assert.equal(await rates.rate('BTC', 'USD'), undefined);
    now += 9_999;
    assert.equal(await rates.rate('BTC', 'USD'), undefined);
    assert.equal(api.requests.length, 1);
    api.behaviour = 'replay';
    now += 1;
    assert.equal((await rates.rate('BTC', 'USD'))?.rate, '97123.45');
    assert.equal(api.requests.length, 2);
  });

  it('treats a malformed body as a failure, not a crash', async () => {
    for (const behaviour of ['not-json', 'array'] as const) {
      api.behaviour = behaviour;
      const errors: unknown[] = [];
      const rates = provider({ onError: (e) => errors.push(e) });
      assert.equal(await rates.rate('BTC', 'USD'), undefined, behaviour);
      assert.equal(errors.length, 1, behaviour);
    }
    // A failed refresh keeps the previous good answer.
    api.behaviour = 'replay';
    const rates = provider({ ttlMs: 1_000, retryAfterFailureMs: 0 });
    await rates.rate('BTC', 'USD');
    api.behaviour = 'not-json';
    now += 5_000;
    assert.deepEqual(await rates.rate('BTC', 'USD'), { rate: '97123.45', observedAt: new Date(T0) });
  });

  it('answers undefined for entries that are missing or not positive numbers', async () => {
    const body =
      '{"bitcoin":{"usd":"97000"},"ethereum":{"usd":-3},"tron":{"usd":0},"solana":{},"tether":null,"usd-coin":{"usd":1}}';
    const rates = provider({ fetch: async () => new Response(body, { status: 200 }) });
    for (const token of ['BTC', 'ETH', 'TRX', 'SOL', 'USDT', 'BNB'])
      assert.equal(await rates.rate(token, 'USD'), undefined, token);
    assert.equal((await rates.rate('USDC', 'USD'))?.rate, '1');
  });

  it('answers undefined for a token it does not know, without asking CoinGecko', async () => {
    const rates = provider();
    assert.equal(await rates.rate('DOGE', 'USD'), undefined);
    assert.equal(await rates.rate('BTC', 'US'), undefined);
    assert.equal(api.requests.length, 0);
    assert.equal(await rates.rate('BTC', 'XYZ'), undefined, 'a currency CoinGecko does not quote');
  });
});
