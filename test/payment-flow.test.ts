// Payments end to end on the sandbox chains, over real HTTP: pay, mine,
// watch the status move, on every chain and for every kind of payment.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { defaultConfirmations } from '../api/config.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { assertRebuildGivesTheSameRows } from './support/rebuild.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('payment flow on the sandbox chains', () => {
  let svc: RunningService;
  let key: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
    key = (await merchantWithKey(svc)).key;
  });
  after(() => svc.close());

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const createPayment = async (body: Record<string, unknown>) => {
    const res = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', ...body },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data;
  };
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;
  const transfer = async (chain: string, to: string, amount: string, token?: string) => {
    const res = await admin('POST', `/dev/v1/chains/${chain}/transfers`, { to, amount, ...(token && { token }) });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data;
  };
  const mine = (chain: string, count: number) => admin('POST', `/dev/v1/chains/${chain}/blocks`, { count });

  for (const chain of ['ethereum', 'bsc', 'polygon', 'solana', 'tron', 'bitcoin'] as const) {
    it(`${chain}: pending → detected → confirmed after ${defaultConfirmations[chain]} confirmations`, async () => {
      const p = await createPayment({ chain });
      const sent = await transfer(chain, p.address, p.cryptoAmount);
      assert.equal(sent.to, p.address);
      const detected = await eventually(
        () => status(p.paymentId),
        (s) => s.hasDetectedPayment,
      );
      assert.equal(detected.status, 'pending');
      assert.equal(detected.paymentStatus, 'detected');
      assert.equal(detected.paymentStatusDetail, 'detected');
      assert.equal(detected.confirmations, 1);
      assert.equal(detected.requiredConfirmations, defaultConfirmations[chain]);
      assert.equal(detected.txHash, sent.txHash);
      assert.equal(detected.detectedPaymentAmount, p.cryptoAmount);
      assert.equal(detected.remainingAmount, '0.00000000');
      assert.equal(detected.paymentProgress, 100);

      if (defaultConfirmations[chain] > 2) {
        await mine(chain, defaultConfirmations[chain] - 2);
        const almost = await eventually(
          () => status(p.paymentId),
          (s) => s.confirmations === defaultConfirmations[chain] - 1,
        );
        assert.equal(almost.status, 'pending');
      }
      await mine(chain, 1);
      const confirmed = await eventually(
        () => status(p.paymentId),
        (s) => s.status === 'confirmed',
      );
      assert.equal(confirmed.paymentStatus, 'confirmed');
      assert.equal(confirmed.paymentStatusDetail, 'confirmed');
      assert.equal(confirmed.confirmations, defaultConfirmations[chain]);
      assert.equal(confirmed.totalReceivedAmount, p.cryptoAmount);
      assert.equal(confirmed.paymentIssueType, null);
    });
  }

  it('underpaid: a partial payment shows what remains, and the rest completes it', async () => {
    const p = await createPayment({ chain: 'tron', token: 'USDT', amount: '50' });
    assert.equal(p.cryptoAmount, '50.00000000');
    await transfer('tron', p.address, '20', 'USDT');
    const partial = await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'partial',
    );
    assert.equal(partial.paymentStatus, 'partial');
    assert.equal(partial.remainingAmount, '30.00000000');
    assert.equal(partial.totalReceivedAmount, '20.00000000');
    assert.equal(partial.totalReceivedCurrency, 'USDT');
    assert.equal(partial.paymentProgress, 40);
    assert.equal(partial.paymentIssueType, 'underpaid');
    await transfer('tron', p.address, '30', 'USDT');
    const full = await eventually(
      () => status(p.paymentId),
      (s) => s.remainingAmount === '0.00000000',
    );
    assert.equal(full.status, 'pending');
    assert.equal(full.paymentIssueType, null);
    await mine('tron', 19);
    const confirmed = await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'confirmed',
    );
    assert.equal(confirmed.totalReceivedAmount, '50.00000000');
  });

  it('a payment exactly 1% short counts as full; one base unit less does not', async () => {
    const exact = await createPayment({ chain: 'tron', token: 'USDT', amount: '100' });
    await transfer('tron', exact.address, '99', 'USDT');
    const short = await createPayment({ chain: 'tron', token: 'USDT', amount: '100' });
    await transfer('tron', short.address, '98.999999', 'USDT');
    await mine('tron', 19);
    assert.equal(
      (
        await eventually(
          () => status(exact.paymentId),
          (s) => s.status === 'confirmed',
        )
      ).paymentProgress,
      100,
    );
    const under = await eventually(
      () => status(short.paymentId),
      (s) => s.confirmations >= 19,
    );
    assert.equal(under.status, 'partial');
    assert.equal(under.remainingAmount, '1.00000100');
  });

  it('overpaid: confirmed, with the overpayment shown', async () => {
    const p = await createPayment({ chain: 'bitcoin' });
    await transfer('bitcoin', p.address, '1');
    await mine('bitcoin', 1);
    const confirmed = await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'confirmed',
    );
    assert.equal(confirmed.paymentIssueType, 'overpaid');
    assert.equal(confirmed.totalReceivedAmount, '1.00000000');
  });

  it('wrong token: recorded as a mismatch and never counted', async () => {
    const p = await createPayment({ chain: 'ethereum', token: 'USDT' });
    const sent = await transfer('ethereum', p.address, '0.5', 'ETH');
    const s = await eventually(
      () => status(p.paymentId),
      (v) => v.mismatchPayment !== null,
    );
    assert.equal(s.status, 'pending');
    assert.equal(s.paymentStatus, 'wrong_token');
    assert.equal(s.paymentIssueType, 'wrong_token');
    assert.deepEqual(s.mismatchPayment, {
      amount: '0.50000000',
      currency: 'USDT',
      actualCurrency: 'ETH',
      txHash: sent.txHash,
    });
    assert.equal(s.hasDetectedPayment, false);
    assert.equal(s.totalReceivedAmount, '0.00000000');
  });

  it('expired: a pending invoice expires on the business clock, and a late payment is still recorded', async () => {
    const p = await createPayment({ chain: 'solana', expiresInMinutes: 1 });
    await admin('POST', '/dev/v1/clock/advance', { seconds: 61 });
    const expired = await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'expired',
    );
    assert.equal(expired.paymentStatus, 'expired');
    const sent = await transfer('solana', p.address, p.cryptoAmount);
    const events = await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/events`, { token: key })).body.data,
      (list: any[]) => list.some((e) => e.type === 'PaymentApplied'),
    );
    const applied = events.find((e: any) => e.type === 'PaymentApplied');
    assert.equal(applied.data.late, true);
    assert.equal(applied.data.txHash, sent.txHash);
    assert.equal((await status(p.paymentId)).status, 'expired');
  });

  it('cancelled: expired at once, and no address can be added', async () => {
    const p = await createPayment({ chain: 'bsc' });
    await svc.call('POST', `/api/v1/invoices/${p.paymentId}/cancel`, { token: key });
    const s = await status(p.paymentId);
    assert.equal(s.status, 'expired');
    const res = await svc.call('POST', `/api/v1/invoices/${p.paymentId}/addresses`, { body: { chain: 'tron' } });
    assert.equal(res.status, 400);
  });

  it('reorg: a detected payment whose block is dropped is withdrawn', async () => {
    const p = await createPayment({ chain: 'bitcoin' });
    await transfer('bitcoin', p.address, p.cryptoAmount);
    await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment,
    );
    await admin('POST', '/dev/v1/chains/bitcoin/reorg', { depth: 1 });
    const after = await eventually(
      () => status(p.paymentId),
      (s) => !s.hasDetectedPayment,
    );
    assert.equal(after.status, 'pending');
    assert.equal(after.totalReceivedAmount, '0.00000000');
    await mine('bitcoin', 3);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal((await status(p.paymentId)).status, 'pending', 'a withdrawn payment never confirms');
    const events = (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/events`, { token: key })).body.data;
    assert.deepEqual(
      events.map((e: any) => e.type),
      ['InvoiceCreated', 'AddressAssigned', 'PaymentDetected', 'PaymentApplied', 'PaymentReorged', 'PaymentWithdrawn'],
    );
    for (const e of events) {
      assert.ok(e.eventId && e.streamId && e.position && e.recordedAt);
    }
  });

  it('rebuilds the invoices read model from zero into the rows it projected as the payments came', async () => {
    await assertRebuildGivesTheSameRows(svc.service, 'invoices');
  });
});
