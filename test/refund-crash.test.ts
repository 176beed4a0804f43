// Crash tests of a refund payout (refunds.md: "never sent twice"): the real
// process is killed (SIGKILL) at each step of a refund, restarted, and the
// customer receives exactly one payout of exactly the refund's net amount.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { callService as call } from './support/process.ts';
import { crashHarness } from './support/crash.ts';
import { eventually as until } from './support/merchant.ts';

const WALLET = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';
const CUSTOMER = 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t';
const ADMIN = 'crash-test-admin-token';

describe('crashes during a refund payout', () => {
  // From the refund wallet: the transaction recorded, broadcast, marked submitted.
  for (const failpoint of ['refund:after-prepare', 'refund:after-broadcast', 'payout:after-submitted']) {
    it(`a kill at ${failpoint} and a restart pay the customer exactly once`, () =>
      killAndRestart(failpoint, 'refund_wallet'));
  }
  // From the deposit: the settlement's hold taken, the approval not yet recorded.
  it('a kill between the hold on the settlement and the approval, then approving again, pays once from the deposit', () =>
    killAndRestart('refund:after-payer', 'deposit'));
  it('a kill between the hold and the approval, then a cancel, gives the settlement its whole amount back', () =>
    killAndRestart('refund:after-payer', 'deposit', 'cancel'));
  // The same on an invoice still open: the hold is taken before any settlement is requested.
  it('a kill between the hold and the approval on an open invoice: the hold is given back after the grace; approving again pays once from the deposit', () =>
    killAndRestart('refund:after-payer', 'deposit', 'approve', 'open'));
  it('a kill between the hold and the approval on an open invoice: the hold is given back after the grace; a cancel lets the invoice settle whole', () =>
    killAndRestart('refund:after-payer', 'deposit', 'cancel', 'open'));
});

interface AttentionItem {
  kind: string;
  merchantId: string | null;
  subject: string;
  detail: string | null;
}

/** The operator's attention item of a refund holding its deposit without an approval, if listed. */
async function unapprovedHold(url: string, refundId: string): Promise<AttentionItem | undefined> {
  const items = (await call(url, 'GET', '/admin/v1/attention', ADMIN)).body.data as AttentionItem[];
  return items.find((i) => i.kind === 'refund_hold_unapproved' && i.subject === refundId);
}

async function killAndRestart(
  failpoint: string,
  funding: 'deposit' | 'refund_wallet',
  then: 'approve' | 'cancel' = 'approve',
  /** open: underpaid, so no settlement is requested, and the hold is taken before one (PendingHolds). */
  invoice: 'confirmed' | 'open' = 'confirmed',
): Promise<void> {
  const open = invoice === 'open';
  const service = crashHarness('refund-crash', () => ({
    CHAIN_TRON_CONFIRMATIONS: '3',
    ADMIN_TOKEN: ADMIN,
    PLATFORM_FEE_BPS: '100',
  }));
  await service.withDataDir(async () => {
    let url = await service.start();
    const mine = (count: number) => call(url, 'POST', '/dev/v1/chains/tron/blocks', ADMIN, { count });
    const pay = (to: string, amount: string) =>
      call(url, 'POST', '/dev/v1/chains/tron/transfers', ADMIN, { to, amount, token: 'USDT' });
    // With a wallet the invoice settles first and the refund is paid from the refund wallet;
    // without one the settlement waits, unprepared, and the deposit pays the refund. An open
    // invoice has no settlement yet, wallet or not: the deposit pays.
    const merchant = (
      await call(url, 'POST', '/admin/v1/merchants', ADMIN, {
        name: 'Crash',
        ...((funding === 'refund_wallet' || open) && { settlementWallets: { tron: WALLET } }),
      })
    ).body.data;
    const key = (await call(url, 'POST', `/admin/v1/merchants/${merchant.id}/api-keys`, ADMIN, {})).body.data.key;
    const payment = (
      await call(url, 'POST', '/api/v1/payments', key, { amount: '50', currency: 'USD', chain: 'tron', token: 'USDT' })
    ).body.data;
    await pay(payment.address, open ? '20' : '60'); // 20 of 50 leaves the invoice open
    await mine(4);
    await until(
      async () =>
        open
          ? (await call(url, 'GET', `/api/v1/invoices/${payment.paymentId}/refundable`, key)).body.data?.[0]
          : (await call(url, 'GET', `/api/v1/invoices/${payment.paymentId}/settlement`, key)).body.data,
      (s) =>
        open
          ? s?.refundable === '20.000000'
          : funding === 'deposit'
            ? s?.status === 'pending'
            : s?.status === 'submitted',
    );
    if (funding === 'refund_wallet') {
      await mine(3);
      await until(
        async () => (await call(url, 'GET', `/api/v1/invoices/${payment.paymentId}/status`)).body.data,
        (s) => s.status === 'settled',
      );
    }
    const refund = (
      await call(url, 'POST', `/api/v1/invoices/${payment.paymentId}/refunds`, key, {
        ...(open ? { amount: '20' } : { kind: 'excess' }),
        destination: CUSTOMER,
      })
    ).body.data;
    assert.equal(refund.status, 'awaiting_approval', JSON.stringify(refund));
    if (funding === 'refund_wallet') {
      const wallets = (await call(url, 'GET', '/api/v1/refund-wallets', key)).body.data;
      await pay(wallets.find((w: { chain: string }) => w.chain === 'tron').address, refund.amount);
    }

    // The same data directory, now armed: the approval leads to the step where the process dies.
    await service.stop();
    url = await service.start({ FAILPOINTS: failpoint });
    await call(url, 'POST', `/api/v1/refunds/${refund.id}/approve`, key).catch(() => undefined);
    await service.killedWithin(20_000);

    url = await service.start();
    if (open) {
      // Within the grace the hold may be an approval still on its way; after it, it is given back by itself,
      // before anyone is told (the attention is for a release that does not happen).
      const history = async () =>
        (await call(url, 'GET', `/api/v1/invoices/${payment.paymentId}/events`, key)).body.data as {
          type: string;
        }[];
      const releases = (events: { type: string }[]) => events.filter((e) => e.type === 'SettlementRefundReleased');
      assert.deepEqual(releases(await history()), [], 'kept within the grace');
      await call(url, 'POST', '/dev/v1/clock/advance', ADMIN, { seconds: 5 * 60 + 1 });
      await until(history, (events) => releases(events).length === 1);
      assert.equal(await unapprovedHold(url, refund.id), undefined, 'given back: nothing to tell a person');
    }
    if (then === 'cancel') {
      const canceled = await call(url, 'POST', `/api/v1/refunds/${refund.id}/cancel`, key);
      assert.equal(canceled.body.data?.status, 'canceled', JSON.stringify(canceled.body));
      if (open) {
        await until(
          () => unapprovedHold(url, refund.id),
          (i) => i === undefined,
        );
        await pay(payment.address, '30'); // the rest of the quote: the invoice confirms and settles
      } else {
        await call(url, 'PATCH', `/admin/v1/merchants/${merchant.id}`, ADMIN, { settlementWallets: { tron: WALLET } });
      }
      const settlement = await until(
        async () => {
          await mine(1);
          return (await call(url, 'GET', `/api/v1/invoices/${payment.paymentId}/settlement`, key)).body.data;
        },
        (s) => s?.status === 'completed',
        60_000,
      );
      // What was received (50 or 60), less the 1% platform fee: the hold the crashed approval took was given back.
      assert.equal(settlement.amount, open ? '49.500000' : '59.400000');
      const customer = (await call(url, 'GET', `/dev/v1/chains/tron/addresses/${CUSTOMER}`, ADMIN)).body.data;
      assert.equal(customer.transfers.length, 0, 'nothing to the customer');
      return;
    }
    // Approving again is harmless, and where the kill came before the approval, it is the approval.
    const approved = await call(url, 'POST', `/api/v1/refunds/${refund.id}/approve`, key);
    assert.equal(approved.status, 200, JSON.stringify(approved.body));
    assert.equal(approved.body.data.fundedFrom, funding);
    if (open) {
      await until(
        () => unapprovedHold(url, refund.id),
        (i) => i === undefined,
      );
    }
    const completed = await until(
      async () => {
        await mine(1);
        return (await call(url, 'GET', `/api/v1/refunds/${refund.id}`, key)).body.data;
      },
      (r) => r.status === 'completed',
      60_000,
    );
    const customer = (await call(url, 'GET', `/dev/v1/chains/tron/addresses/${CUSTOMER}`, ADMIN)).body.data;
    assert.equal(customer.transfers.length, 1, 'exactly one payout to the customer');
    assert.equal(customer.transfers[0].txHash, completed.transactionHash);
    assert.equal(customer.transfers[0].amount, open ? '20.000000' : '10.000000');
    assert.equal(customer.transfers[0].token, 'USDT');
  });
}
