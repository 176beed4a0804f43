// An approval and a cancel of the same refund racing. The approval checks
// the refund is awaiting approval, then takes the hold on the settlement's
// stream, then records Approve. A cancel recorded between the check and the
// hold has its saga release a hold that is not there yet; the approval, its
// Approve refused, gives back the hold it took (commands/refunds.ts,
// giveBackUnusedHold), or the settlement would wait for a refund never paid.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { defaultConfirmations } from '../api/config.ts';
import { loadSettlement } from '../commands/settlements.ts';
import { settlementIdOf, waitsForRefund } from '../domain/settlement.ts';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

const MERCHANT_WALLET = '0x71C7656EC7ab88b098defB751B7401B5f6d8976F';
const CUSTOMER = '0x8ba1f109551bD432803012645Ac136ddd64DBA72';

describe('a refund approval racing its cancel', () => {
  let svc: RunningService;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', PLATFORM_FEE_BPS: '100' });
  });
  after(() => svc.close());

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const mine = (count = 1) => admin('POST', '/dev/v1/chains/ethereum/blocks', { count });

  it('a refund canceled while its approval is on its way leaves no hold on the settlement', async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const invoiceId = created.body.data.paymentId as string;
    const paid = await admin('POST', '/dev/v1/chains/ethereum/transfers', {
      to: created.body.data.address,
      amount: '120',
      token: 'USDT',
    });
    assert.equal(paid.status, 201, JSON.stringify(paid.body));
    await mine(defaultConfirmations.ethereum);
    // Requested, waiting for the merchant's wallet: unprepared, so a refund is paid from the deposit.
    await eventually(
      async () => (await svc.call('GET', `/api/v1/settlements?invoiceId=${invoiceId}`, { token: key })).body.data?.[0],
      (s) => s?.status === 'pending',
    );
    const refund = await svc.call('POST', `/api/v1/invoices/${invoiceId}/refunds`, {
      token: key,
      body: { kind: 'excess', destination: CUSTOMER },
    });
    assert.equal(refund.status, 201, JSON.stringify(refund.body));
    const refundId = refund.body.data.id as string;

    // The merchant cancels (another tab, the API) while the approval asks the chain whether the deposit can pay.
    const ledger = svc.service.sandbox!.ledgers.get('ethereum')! as unknown as {
      canPay?: (address: string, token: string, amount: bigint) => Promise<boolean>;
    };
    ledger.canPay = async () => {
      delete ledger.canPay;
      const canceled = await svc.call('POST', `/api/v1/refunds/${refundId}/cancel`, { token: key });
      assert.equal(canceled.status, 200, JSON.stringify(canceled.body));
      return true;
    };
    const approved = await svc.call('POST', `/api/v1/refunds/${refundId}/approve`, { token: key });
    assert.equal(approved.status, 409, JSON.stringify(approved.body));
    assert.equal((await svc.call('GET', `/api/v1/refunds/${refundId}`, { token: key })).body.data.status, 'canceled');
    await svc.service.projections.caughtUp();

    // The canceled refund must hold nothing back: the settlement pays out once the merchant has a wallet.
    const settlement = await loadSettlement(svc.service.store, settlementIdOf(invoiceId));
    assert.deepEqual(
      settlement!.refundHolds.filter((h) => !h.paid).map((h) => h.refundId),
      [],
      'a hold for a canceled refund stays on the settlement',
    );
    assert.equal(waitsForRefund(settlement!), false);
    await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { ethereum: MERCHANT_WALLET } });
    await eventuallyMining(
      () => mine(),
      async () => (await svc.call('GET', `/api/v1/settlements?invoiceId=${invoiceId}`, { token: key })).body.data?.[0],
      (s) => s?.status === 'completed',
    );
  });
});
