// A quote records where its rate came from: the event of the address's quote
// carries when the rate was observed and each source's answer, and a refusal
// names the sources asked.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { FixedRateProvider } from '../adapters/rates/fixed.ts';
import { MedianRateProvider } from '../adapters/rates/median.ts';
import type { Rate, RateProvider } from '../adapters/rates/port.ts';
import { invoiceCommands, RATE_WINDOW_MINUTES } from '../commands/invoices.ts';
import { DomainError, fold } from '../domain/decider.ts';
import { invoiceDecider, invoiceStreamName, type InvoiceEvent } from '../domain/invoice.ts';

const T0 = Date.parse('2026-11-28T04:00:00.000Z');
const MERCHANT = '0a1b2c3d-4e5f-4a6b-8c7d-8e9f00112233';

class Source implements RateProvider {
  constructor(
    readonly name: string,
    public answer: string | undefined,
    private readonly observedAt: number,
  ) {}
  async rate(): Promise<Rate | undefined> {
    return this.answer === undefined ? undefined : { rate: this.answer, observedAt: new Date(this.observedAt) };
  }
}

function setup(rates: RateProvider) {
  const store = new MemoryEventStore();
  let now = T0;
  let index = 0;
  const invoices = invoiceCommands({
    store,
    clock: { now: () => new Date(now) },
    rates,
    addresses: { deriveDepositAddress: async () => `T${String(++index).padStart(33, 'x')}` },
    enabledChains: ['tron'],
  });
  const events = async (id: string) =>
    (await store.readStream(invoiceStreamName(id))).map((e) => ({ type: e.type, data: e.data }) as InvoiceEvent);
  return { store, invoices, events, later: (ms: number) => (now += ms) };
}

const payment = {
  amount: '100',
  currency: 'USD',
  description: null,
  expiresInMinutes: 15,
  webhookUrl: null,
  metadata: null,
};

describe('quote provenance', () => {
  it('records the median, its oldest answer’s time and every answer on AddressAssigned', async () => {
    const kraken = new Source('kraken', '0.2534', T0 - 20_000);
    const coinbase = new Source('coinbase', '0.2536', T0 - 5_000);
    const coingecko = new Source('coingecko', '25.34', T0 - 1_000);
    const { invoices, events } = setup(new MedianRateProvider([kraken, coinbase, coingecko]));
    const { value } = await invoices.createPayment(MERCHANT, { ...payment, chain: 'tron', token: 'TRX' });
    const assigned = (await events(value.invoice.id)).find((e) => e.type === 'AddressAssigned');
    assert.ok(assigned?.type === 'AddressAssigned');
    assert.equal(assigned.data.rate, '0.2535');
    assert.equal(assigned.data.rateObservedAt, new Date(T0 - 20_000).toISOString());
    assert.deepEqual(assigned.data.rateSources, [
      { name: 'kraken', rate: '0.2534', observedAt: new Date(T0 - 20_000).toISOString(), used: true },
      { name: 'coinbase', rate: '0.2536', observedAt: new Date(T0 - 5_000).toISOString(), used: true },
      { name: 'coingecko', rate: '25.34', observedAt: new Date(T0 - 1_000).toISOString(), used: false },
    ]);
    assert.equal(value.address.rateObservedAt, new Date(T0 - 20_000).toISOString(), 'and on the state');
  });

  it('records a new provenance on AddressRequoted, replacing the old one', async () => {
    const kraken = new Source('kraken', '0.25', T0);
    const { invoices, events, later } = setup(new MedianRateProvider([kraken]));
    const created = await invoices.create(MERCHANT, { ...payment, expiresInMinutes: 60 });
    await invoices.assignAddress(created.value.id, 'tron', 'TRX');
    later(RATE_WINDOW_MINUTES * 60_000);
    kraken.answer = '0.3';
    const { value } = await invoices.assignAddress(created.value.id, 'tron', 'TRX');
    const requoted = (await events(created.value.id)).find((e) => e.type === 'AddressRequoted');
    assert.ok(requoted?.type === 'AddressRequoted');
    assert.deepEqual(requoted.data.rateSources, [
      { name: 'kraken', rate: '0.3', observedAt: new Date(T0).toISOString(), used: true },
    ]);
    assert.equal(value.address.rate, '0.3');
    assert.deepEqual(value.address.rateSources, requoted.data.rateSources);
  });

  it('records the fixed table as the source `fixed`', async () => {
    const store = new MemoryEventStore();
    const fixed = await FixedRateProvider.open(store, { now: () => new Date(T0) });
    const { invoices, events } = setup(fixed);
    const { value } = await invoices.createPayment(MERCHANT, { ...payment, chain: 'tron', token: 'TRX' });
    const assigned = (await events(value.invoice.id)).find((e) => e.type === 'AddressAssigned');
    assert.ok(assigned?.type === 'AddressAssigned');
    assert.deepEqual(assigned.data.rateSources, [
      { name: 'fixed', rate: '0.25', observedAt: new Date(T0).toISOString(), used: true },
    ]);
  });

  it('refuses with all sources down, naming them, and writes nothing', async () => {
    const sources = ['kraken', 'coinbase', 'coingecko'].map((name) => new Source(name, undefined, T0));
    const { invoices, store } = setup(new MedianRateProvider(sources));
    await assert.rejects(
      invoices.createPayment(MERCHANT, { ...payment, chain: 'tron', token: 'TRX' }),
      (error: unknown) =>
        error instanceof DomainError &&
        error.kind === 'bad_request' &&
        error.message ===
          'No exchange rate for TRX in USD is available from kraken, coinbase, coingecko: no source answered a price in time',
    );
    assert.equal(await store.headPosition(), undefined);
  });

  it('writes no provenance keys for a command that carries none, and folds such a quote as before', () => {
    const created: InvoiceEvent[] = invoiceDecider.decide(
      {
        type: 'CreateInvoice',
        id: 'i',
        merchantId: MERCHANT,
        amount: '100',
        currency: 'USD',
        description: null,
        expiresAt: new Date(T0 + 3_600_000).toISOString(),
        webhookUrl: null,
        metadata: null,
        createdAt: new Date(T0).toISOString(),
      },
      null,
    );
    const quoted = invoiceDecider.decide(
      {
        type: 'AssignAddress',
        chain: 'tron',
        token: 'TRX',
        tokenDecimals: 6,
        address: 'T1',
        derivationIndex: 1,
        rate: '0.25',
        quotedAt: new Date(T0).toISOString(),
        rateValidUntil: new Date(T0 + 900_000).toISOString(),
      },
      fold(invoiceDecider, created),
    );
    const assigned = quoted[0];
    assert.equal(assigned?.type, 'AddressAssigned');
    assert.ok(assigned && !('rateObservedAt' in assigned.data) && !('rateSources' in assigned.data));
    // Such an event is what every quote recorded before provenance was kept looks like.
    const state = fold(invoiceDecider, [...created, ...quoted]);
    assert.equal(state?.addresses[0]?.rate, '0.25');
    assert.equal(state?.addresses[0]?.cryptoAmount, 400_000_000n);
    assert.equal(state?.addresses[0]?.rateObservedAt, undefined);
    assert.equal(state?.addresses[0]?.rateSources, undefined);
  });
});
