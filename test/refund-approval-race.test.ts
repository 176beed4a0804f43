// A refund's approval racing another request on the same refund. The
// approval checks the refund is awaiting approval, asks the chain whether the
// deposit can pay, takes the hold on the settlement's stream, then records
// Approve. Whatever comes between must not leave a hold the refund will never
// use, or the settlement waits for ever:
// - a cancel: its saga releases a hold not there yet; the approval, its
//   Approve refused, gives back the hold it took (commands/refunds.ts,
//   giveBackUnusedHold);
// - a second approval that takes the hold and stops (a crash) while the first
//   records the refund wallet: the release gives it back (RefundHoldRelease,
//   releaseOfHold).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { defaultConfirmations } from '../api/config.ts';
import { handleCommand, loadState } from '../commands/handle.ts';
import { loadSettlement } from '../commands/settlements.ts';
import { refundDecider, refundStreamName } from '../domain/refund.ts';
import { settlementDecider, settlementIdOf, settlementStreamOf, waitsForRefund } from '../domain/settlement.ts';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

const MERCHANT_WALLET = '0x71C7656EC7ab88b098defB751B7401B5f6d8976F';
const CUSTOMER = '0x8ba1f109551bD432803012645Ac136ddd64DBA72';

describe('a refund approval racing another request', () => {
  let svc: RunningService;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', PLATFORM_FEE_BPS: '100' });
  });
  after(() => svc.close());

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const mine = (count = 1) => admin('POST', '/dev/v1/chains/ethereum/blocks', { count });

  /**
   * A 100 USD invoice paid 120 USDT, its settlement requested and waiting for
   * the merchant's wallet (nothing prepared: a refund is paid from the
   * deposit), and a refund of the excess to the customer awaiting approval.
   */
  async function excessAwaitingApproval() {
    const { key, merchant } = await merchantWithKey(svc);
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const invoiceId = created.body.data.paymentId as string;
    const deposit = created.body.data.address as string;
    const paid = await admin('POST', '/dev/v1/chains/ethereum/transfers', {
      to: deposit,
      amount: '120',
      token: 'USDT',
    });
    assert.equal(paid.status, 201, JSON.stringify(paid.body));
    await mine(defaultConfirmations.ethereum);
    await eventually(
      async () => (await svc.call('GET', `/api/v1/settlements?invoiceId=${invoiceId}`, { token: key })).body.data?.[0],
      (s) => s?.status === 'pending',
    );
    const refund = await svc.call('POST', `/api/v1/invoices/${invoiceId}/refunds`, {
      token: key,
      body: { kind: 'excess', destination: CUSTOMER },
    });
    assert.equal(refund.status, 201, JSON.stringify(refund.body));
    return { key, merchant, invoiceId, deposit, refundId: refund.body.data.id as string };
  }

  /** Runs `meanwhile` when the approval asks the chain whether the deposit can pay, answering `canPay`. */
  function whileApprovalAsks(meanwhile: () => Promise<unknown>, canPay: boolean) {
    const ledger = svc.service.sandbox!.ledgers.get('ethereum')! as unknown as {
      canPay?: (address: string, token: string, amount: bigint) => Promise<boolean>;
    };
    ledger.canPay = async () => {
      delete ledger.canPay;
      await meanwhile();
      return canPay;
    };
  }

  async function unpaidHolds(invoiceId: string) {
    await svc.service.projections.caughtUp();
    const settlement = await loadSettlement(svc.service.store, settlementIdOf(invoiceId));
    assert.equal(waitsForRefund(settlement!), false, 'the settlement waits for a refund');
    return settlement!.refundHolds.filter((h) => !h.paid).map((h) => h.refundId);
  }

  it('a refund canceled while its approval is on its way leaves no hold on the settlement', async () => {
    const { key, merchant, invoiceId, refundId } = await excessAwaitingApproval();
    // The merchant cancels (another tab, the API) while the approval asks the chain.
    whileApprovalAsks(async () => {
      const canceled = await svc.call('POST', `/api/v1/refunds/${refundId}/cancel`, { token: key });
      assert.equal(canceled.status, 200, JSON.stringify(canceled.body));
    }, true);
    const approved = await svc.call('POST', `/api/v1/refunds/${refundId}/approve`, { token: key });
    assert.equal(approved.status, 409, JSON.stringify(approved.body));
    assert.equal((await svc.call('GET', `/api/v1/refunds/${refundId}`, { token: key })).body.data.status, 'canceled');
    assert.deepEqual(await unpaidHolds(invoiceId), [], 'a hold for a canceled refund stays on the settlement');

    // The settlement pays out all of it once the merchant has a wallet.
    await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { ethereum: MERCHANT_WALLET } });
    await eventuallyMining(
      () => mine(),
      async () => (await svc.call('GET', `/api/v1/settlements?invoiceId=${invoiceId}`, { token: key })).body.data?.[0],
      (s) => s?.status === 'completed',
    );
  });

  it('a hold taken by a second approval that stopped, the refund paid from its wallet, is given back', async () => {
    const { key, invoiceId, deposit, refundId } = await excessAwaitingApproval();
    const { store } = svc.service;
    await svc.service.projections.caughtUp();
    const amount = (await loadState(store, refundDecider, refundStreamName(refundId)))!.amount;
    // This approval is told the deposit cannot pay; meanwhile another, told it can, takes the hold and dies.
    whileApprovalAsks(
      () =>
        handleCommand(store, settlementDecider, settlementStreamOf(invoiceId), {
          type: 'HoldForRefund',
          refundId,
          token: 'USDT',
          fromAddress: deposit,
          amount,
          now: new Date().toISOString(),
        }),
      false,
    );
    const approved = await svc.call('POST', `/api/v1/refunds/${refundId}/approve`, { token: key });
    assert.equal(approved.status, 200, JSON.stringify(approved.body));
    assert.equal(
      (await loadState(store, refundDecider, refundStreamName(refundId)))!.payer?.fundedFrom,
      'refund_wallet',
    );

    // Long past the grace, the release has had its pass.
    await admin('POST', '/dev/v1/clock/advance', { seconds: 3600 });
    await svc.service.projections.caughtUp();
    await svc.service.holdRelease.releaseDue();
    assert.deepEqual(await unpaidHolds(invoiceId), [], 'the deposit still holds a refund the refund wallet pays');
  });
});
