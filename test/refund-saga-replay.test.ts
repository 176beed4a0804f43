// The refund saga's manager reacting again to a batch of refund events (a
// crash, or a failover of the reactor's lock, before its checkpoint moved).
// The request runs the saga's first step (ReserveRefund) itself, then the
// manager runs it again: both must derive the same event id from the
// recorded RefundCreated. Were the request's reservation stored under another
// id, the manager's first run would store nothing for it (the claim is
// there), and its repeat, after the batch's cancel or expiry released the
// claim, would reserve it again for good while the release, a repeat, is
// dropped: a canceled refund holding its amount on the invoice for ever.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it, type TestContext } from 'node:test';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { SqlEventStore } from '../adapters/event-store/sql.ts';
import { openPglite, type SqlDatabase } from '../adapters/sql/database.ts';
import { handleCommands, loadState } from '../commands/handle.ts';
import { refundCommands, refundManager } from '../commands/refunds.ts';
import { paymentCommands } from './support/paid-invoice-life.ts';
import { invoiceDecider, invoiceStreamName, refundableOf, type InvoiceCommand } from '../domain/invoice.ts';
import { OVER_LIMIT } from '../domain/refund-saga.ts';
import { refundDecider, refundStreamName } from '../domain/refund.ts';

const MERCHANT_ID = '0a1b2c3d-4e5f-4a6b-8c7d-8e9f00112233';

/** A new store of this kind, closed when the test ends. */
const stores: Record<string, (t: TestContext) => Promise<EventStore>> = {
  async memory() {
    return new MemoryEventStore();
  },
  // The SQL store of the service (PostgreSQL's, on PGlite).
  async pglite(t) {
    const database = await openPglite('memory://');
    const store = await SqlEventStore.open(database);
    t.after(async () => {
      await store.close();
      await database.close();
    });
    return store;
  },
};

/** `store` holding an invoice for 10 USD, paid 10 USDT on Tron (1 USD a USDT) and confirmed. */
async function paidInvoice(store: EventStore) {
  const invoiceId = randomUUID();
  const [created, assigned] = paymentCommands(invoiceId, MERCHANT_ID, 3);
  const { address } = assigned as Extract<InvoiceCommand, { type: 'AssignAddress' }>;
  const detectedAt = new Date().toISOString();
  const commands: InvoiceCommand[] = [
    created!,
    assigned!,
    {
      type: 'ApplyPayment',
      paymentId: 'p1',
      chain: 'tron',
      token: 'USDT',
      tokenDecimals: 6,
      address,
      amount: 10_000_000n,
      txHash: '0x1',
      detectedAt,
    },
    { type: 'ConfirmInvoicePayment', paymentId: 'p1', confirmedAt: detectedAt },
  ];
  await handleCommands(store, invoiceDecider, invoiceStreamName(invoiceId), commands);
  let now = Date.now();
  const clock = { now: () => new Date(now) };
  const refunds = refundCommands({
    store,
    clock,
    chains: new Map(),
    addresses: { deriveDepositAddress: async () => address } as never,
    database: {} as SqlDatabase,
    networkFee: () => 0n,
    destinationProblem: async () => undefined,
  });
  const invoice = async () => (await loadState(store, invoiceDecider, invoiceStreamName(invoiceId)))!;
  return {
    store,
    invoiceId,
    refunds,
    invoice,
    refundable: async () => refundableOf(await invoice())[0]!.refundable,
    later: (ms: number) => (now += ms),
  };
}

/** The manager reacting to every refund event so far, in their order, as a reactor's batch. */
async function reactToBatch(store: EventStore) {
  const manager = refundManager(store, (error) => assert.fail(`refused: ${error.message}`));
  const batch = (await store.readAll(undefined, 1_000)).filter((e) => e.streamId.startsWith('refund-'));
  for (const event of batch) await manager.react(event);
}

for (const [kind, open] of Object.entries(stores)) {
  describe(`the refund saga's manager reacting again to a batch after a crash (${kind})`, () => {
    for (const ending of ['canceled', 'expired'] as const) {
      it(`gives back the amount of a refund ${ending} in that batch for good`, async (t) => {
        const { store, invoiceId, refunds, refundable, invoice, later } = await paidInvoice(await open(t));
        const { refundId } = await refunds.create(MERCHANT_ID, invoiceId, { amount: '4', claimExpiresInDays: 1 });
        assert.equal(await refundable(), 6_000_000n, 'the request reserves the amount');
        if (ending === 'canceled') await refunds.cancel(refundId);
        else {
          later(2 * 86_400_000);
          await refunds.expire(refundId);
        }
        assert.equal((await loadState(store, refundDecider, refundStreamName(refundId)))!.status, ending);

        await reactToBatch(store); // RefundCreated and its end, in one batch
        assert.equal(await refundable(), 10_000_000n, `the ${ending} refund gives its amount back`);
        await reactToBatch(store); // the checkpoint did not move: the same batch again
        assert.equal(await refundable(), 10_000_000n, `the ${ending} refund is reserved again`);
        assert.deepEqual((await invoice()).refunds, []);
      });
    }

    it('keeps a refund over the limit refused, and the amount the others give back, through the repeat', async (t) => {
      const { store, invoiceId, refunds, refundable, invoice } = await paidInvoice(await open(t));
      const first = await refunds.create(MERCHANT_ID, invoiceId, { amount: '10' });
      await assert.rejects(refunds.create(MERCHANT_ID, invoiceId, { amount: '1' }), { message: OVER_LIMIT });
      await refunds.cancel(first.refundId);
      await reactToBatch(store);
      await reactToBatch(store);
      assert.equal(await refundable(), 10_000_000n);
      assert.deepEqual((await invoice()).refunds, []);
    });

    it('keeps the claim of a refund that goes on, once, through the repeat', async (t) => {
      const { store, invoiceId, refunds, refundable, invoice } = await paidInvoice(await open(t));
      const { refundId } = await refunds.create(MERCHANT_ID, invoiceId, { amount: '4' });
      await reactToBatch(store);
      await reactToBatch(store);
      assert.equal(await refundable(), 6_000_000n);
      assert.deepEqual(
        (await invoice()).refunds.map((r) => r.refundId),
        [refundId],
      );
      const reserved = (await store.readStream(invoiceStreamName(invoiceId))).filter(
        (e) => e.type === 'RefundReserved',
      );
      assert.equal(reserved.length, 1, 'the reservation is stored once');
    });
  });
}
