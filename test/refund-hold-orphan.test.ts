// A hold on the deposit whose refund was then approved from the refund
// wallet. Approval B takes the hold and stops (a crash: failpoint
// refund:after-payer) while approval A, which found the deposit unable to
// pay a moment before, records Approve with the refund wallet. The saga never
// ends that hold (the refund is not paid from the deposit), so the release
// (RefundHoldRelease, releaseOfHold) gives it back, or the settlement waits.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { defaultConfirmations } from '../api/config.ts';
import { handleCommand, loadState } from '../commands/handle.ts';
import { loadSettlement } from '../commands/settlements.ts';
import { refundDecider, refundStreamName } from '../domain/refund.ts';
import { settlementDecider, settlementIdOf, settlementStreamName, waitsForRefund } from '../domain/settlement.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

const CUSTOMER = '0x8ba1f109551bD432803012645Ac136ddd64DBA72';

describe('a hold left by an approval that lost to one from the refund wallet', () => {
  let svc: RunningService;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', PLATFORM_FEE_BPS: '100' });
  });
  after(() => svc.close());

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });

  it('is given back by the release', async () => {
    const { key } = await merchantWithKey(svc);
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const invoiceId = created.body.data.paymentId as string;
    const deposit = created.body.data.address as string;
    await admin('POST', '/dev/v1/chains/ethereum/transfers', { to: deposit, amount: '120', token: 'USDT' });
    await admin('POST', '/dev/v1/chains/ethereum/blocks', { count: defaultConfirmations.ethereum });
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
    await svc.service.projections.caughtUp();
    const { store } = svc.service;
    const amount = (await loadState(store, refundDecider, refundStreamName(refundId)))!.amount;

    // A asks whether the deposit can pay: no. Meanwhile B, told yes, takes the hold and dies before Approve.
    const ledger = svc.service.sandbox!.ledgers.get('ethereum')! as unknown as {
      canPay?: (address: string, token: string, amount: bigint) => Promise<boolean>;
    };
    ledger.canPay = async () => {
      delete ledger.canPay;
      await handleCommand(store, settlementDecider, settlementStreamName(settlementIdOf(invoiceId)), {
        type: 'HoldForRefund',
        refundId,
        token: 'USDT',
        fromAddress: deposit,
        amount,
        now: new Date().toISOString(),
      });
      return false;
    };
    const approved = await svc.call('POST', `/api/v1/refunds/${refundId}/approve`, { token: key });
    assert.equal(approved.status, 200, JSON.stringify(approved.body));
    const approvedRefund = await loadState(store, refundDecider, refundStreamName(refundId));
    assert.equal(approvedRefund!.payer?.fundedFrom, 'refund_wallet');

    // Long past the grace, the release has had its passes.
    await admin('POST', '/dev/v1/clock/advance', { seconds: 3600 });
    await svc.service.projections.caughtUp();
    await svc.service.holdRelease.releaseDue();

    const settlement = await loadSettlement(store, settlementIdOf(invoiceId));
    assert.deepEqual(
      settlement!.refundHolds.filter((h) => !h.paid).map((h) => h.refundId),
      [],
      'the deposit still holds a refund the refund wallet pays: the settlement waits for ever',
    );
    assert.equal(waitsForRefund(settlement!), false);
  });
});
