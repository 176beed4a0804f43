// Refunds paid out (refunds.md, "Where the money comes from") over real HTTP
// on the sandbox chains: from the merchant's refund wallet once the invoice
// is settled, waiting for funds when it holds too little; from the deposit
// while the settlement is not prepared, the settlement re-priced to what is
// left. Each payout is checked on the ledger to the base unit.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Wallet } from 'ethers';
import type { Kysely } from 'kysely';
import { SandboxLedger } from '../adapters/chains/sandbox/ledger.ts';
import { defaultConfirmations } from '../api/config.ts';
import { catalogue } from '../domain/catalogue.ts';
import { formatUnits, parseUnits } from '../domain/money.ts';
import { settlementDecider, settlementIdOf, settlementStreamName } from '../domain/settlement.ts';
import { handleCommand, loadState } from '../commands/handle.ts';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { runCli } from './support/process.ts';
import { startTestService, type RunningService } from './support/service.ts';

const MERCHANT_WALLET = '0x71C7656EC7ab88b098defB751B7401B5f6d8976F';
const CUSTOMER = '0x8ba1f109551bD432803012645Ac136ddd64DBA72';

describe('refund payouts', () => {
  let svc: RunningService;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', PLATFORM_FEE_BPS: '100' });
  });
  after(() => svc.close());

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const transfer = async (to: string, amount: string, token: string) => {
    const res = await admin('POST', '/dev/v1/chains/ethereum/transfers', { to, amount, token });
    assert.equal(res.status, 201, JSON.stringify(res.body));
  };
  const mine = (count = 1) => admin('POST', '/dev/v1/chains/ethereum/blocks', { count });
  /** What the sandbox chain holds as sent to `address`, from the service's own store. */
  const ledgerTransfersTo = async (address: string) =>
    (await SandboxLedger.open(svc.service.store, 'ethereum')).transfersTo(address);

  async function merchant(wallet?: string) {
    const m = await merchantWithKey(svc);
    if (wallet)
      await admin('PATCH', `/admin/v1/merchants/${m.merchant.id}`, { settlementWallets: { ethereum: wallet } });
    return m;
  }

  /** A 100 USD invoice paid 120 USDT, confirmed. */
  async function overpaid(key: string) {
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    await transfer(created.body.data.address, '120', 'USDT');
    await mine(defaultConfirmations.ethereum);
    return { id: created.body.data.paymentId as string, deposit: created.body.data.address as string };
  }

  const refundOf = (key: string, id: string) => svc.call('GET', `/api/v1/refunds/${id}`, { token: key });
  const approve = (key: string, id: string) => svc.call('POST', `/api/v1/refunds/${id}/approve`, { token: key });
  const settlementOf = async (key: string, invoiceId: string) =>
    (await svc.call('GET', `/api/v1/settlements?invoiceId=${invoiceId}`, { token: key })).body.data?.[0];

  it('after settlement: waits for the refund wallet to be funded, then pays once, to the base unit', async () => {
    const { key } = await merchant(MERCHANT_WALLET);
    const { id } = await overpaid(key);
    await eventuallyMining(
      () => mine(),
      async () => (await svc.call('GET', `/api/v1/invoices/${id}`, { token: key })).body.data.status,
      (status) => status === 'settled',
    );
    const created = await svc.call('POST', `/api/v1/invoices/${id}/refunds`, {
      token: key,
      body: { kind: 'excess', destination: CUSTOMER },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const refundId = created.body.data.id as string;
    assert.equal(created.body.data.status, 'awaiting_approval');

    const approved = await approve(key, refundId);
    assert.equal(approved.status, 200, JSON.stringify(approved.body));
    assert.equal(approved.body.data.status, 'awaiting_funds');
    assert.equal(approved.body.data.fundedFrom, 'refund_wallet');
    assert.equal(approved.body.data.claimUrl, null, 'no claim link once approved');
    // The operator sees it waiting (operations.md: the attention list names refunds waiting for funds).
    const unfunded = async () => {
      await svc.service.projections.caughtUp();
      const items = (await admin('GET', '/admin/v1/attention')).body.data as { kind: string; subject: string }[];
      return items.filter((i) => i.kind === 'refund_awaiting_funds' && i.subject === refundId);
    };
    const [waiting] = await unfunded();
    assert.match(
      (waiting as unknown as { detail: string }).detail,
      /refund wallet on ethereum holds too little to pay 20/,
    );

    const wallets = await svc.call('GET', '/api/v1/refund-wallets', { token: key });
    assert.equal(wallets.status, 200);
    const ethereum = wallets.body.data.find((w: { chain: string }) => w.chain === 'ethereum');
    assert.match(ethereum.address, /^0x[0-9a-fA-F]{40}$/);
    assert.equal(ethereum.balances.USDT, '0.000000');
    // The same wallet each time.
    const again = await svc.call('GET', '/api/v1/refund-wallets', { token: key });
    assert.deepEqual(again.body.data, wallets.body.data);

    await transfer(ethereum.address, '19.999999', 'USDT'); // one base unit short
    // Its next look, due now on the business clock, finds one base unit too little.
    await admin('POST', '/dev/v1/clock/advance', { seconds: 10 });
    await svc.service.payouts.pass();
    assert.equal((await refundOf(key, refundId)).body.data.status, 'awaiting_funds');
    await transfer(ethereum.address, '0.000001', 'USDT');

    const completed = await eventuallyMining(
      () => mine(),
      async () => (await refundOf(key, refundId)).body.data,
      (r) => r.status === 'completed',
    );
    assert.equal(completed.netAmount, '20.000000');
    assert.deepEqual(await unfunded(), [], 'paid: off the list');
    const paid = await ledgerTransfersTo(CUSTOMER);
    const ours = paid.filter((t) => t.txHash === completed.transactionHash);
    assert.deepEqual(
      ours.map((t) => [t.token, t.amount]),
      [['USDT', 20_000_000n]],
    );
    const balance = (await svc.call('GET', '/api/v1/refund-wallets', { token: key })).body.data;
    assert.equal(balance.find((w: { chain: string }) => w.chain === 'ethereum').balances.USDT, '0.000000');

    // Approving again is harmless: the same refund, no second payout.
    const repeat = await approve(key, refundId);
    assert.equal(repeat.status, 200);
    assert.equal(repeat.body.data.transactionHash, completed.transactionHash);
    assert.equal((await ledgerTransfersTo(CUSTOMER)).filter((t) => t.txHash === completed.transactionHash).length, 1);
    const invoice = (await svc.call('GET', `/api/v1/invoices/${id}`, { token: key })).body.data;
    assert.equal(invoice.refundStatus, 'partial');
  });

  /** An overpaid invoice of a merchant with no wallet yet: its settlement waits, unprepared. */
  async function unsettled() {
    const { key, merchant: m } = await merchant();
    const invoice = await overpaid(key);
    await eventually(
      () => settlementOf(key, invoice.id),
      (s) => s?.status === 'pending',
    );
    return { key, merchantId: m.id, ...invoice };
  }

  /** A refund to the customer created and approved: paid from the deposit. */
  async function fromTheDeposit(key: string, invoiceId: string, body: Record<string, unknown>) {
    const created = await svc.call('POST', `/api/v1/invoices/${invoiceId}/refunds`, {
      token: key,
      body: { ...body, destination: CUSTOMER },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const approved = await approve(key, created.body.data.id);
    assert.equal(approved.status, 200, JSON.stringify(approved.body));
    assert.equal(approved.body.data.fundedFrom, 'deposit');
    assert.equal(approved.body.data.status, 'sending');
    return created.body.data.id as string;
  }

  const completedRefund = (key: string, refundId: string) =>
    eventuallyMining(
      () => mine(),
      async () => (await refundOf(key, refundId)).body.data,
      (r) => r.status === 'completed',
    );

  /** What one transaction paid `to`, token and base units. */
  const paidBy = async (to: string, txHash: string) =>
    (await ledgerTransfersTo(to)).filter((t) => t.txHash === txHash).map((t) => [t.token, t.amount]);

  /** The merchant's wallet set, and what its settlement then paid it. */
  async function settledToWallet(key: string, merchantId: string, invoiceId: string) {
    await admin('PATCH', `/admin/v1/merchants/${merchantId}`, { settlementWallets: { ethereum: MERCHANT_WALLET } });
    const settled = await eventuallyMining(
      () => mine(),
      () => settlementOf(key, invoiceId),
      (s) => s?.status === 'completed',
    );
    return paidBy(MERCHANT_WALLET, settled.transactionHash);
  }

  it('before settlement: paid from the deposit, and the settlement re-priced to what is left', async () => {
    const { key, merchantId, id } = await unsettled();
    const completed = await completedRefund(key, await fromTheDeposit(key, id, { amount: '20' }));
    // The merchant gets 120 less the refund's 20 less the platform fee on all 120 (not given back).
    const platformFee = 1_200_000n; // 1% of 120 USDT
    const net = 120_000_000n - 20_000_000n - platformFee;
    assert.deepEqual(await settledToWallet(key, merchantId, id), [['USDT', net]]);
    assert.deepEqual(await paidBy(CUSTOMER, completed.transactionHash), [['USDT', 20_000_000n]]);
  });

  /**
   * A refund of 20 approved from the deposit, its hold then given back before its payout looks: as an approval
   * stalled past the release of the hold it took (a slow process) records it after that release. The payouts
   * must be held back (stopped) by the caller, so that the refund's payout does not look first.
   */
  async function approvedThenGivenBack(key: string, invoiceId: string) {
    const created = await svc.call('POST', `/api/v1/invoices/${invoiceId}/refunds`, {
      token: key,
      body: { amount: '20', destination: CUSTOMER },
    });
    const refundId = created.body.data.id as string;
    const approved = await approve(key, refundId);
    assert.equal(approved.body.data.fundedFrom, 'deposit', JSON.stringify(approved.body));
    // On the business clock, the hold's: the sandbox's runs ahead of the wall clock.
    const now = svc.service.sandbox!.clock.now().toISOString();
    const stream = settlementStreamName(settlementIdOf(invoiceId));
    await handleCommand(svc.service.store, settlementDecider, stream, {
      type: 'ReleaseUnapprovedHold',
      refundId,
      heldBefore: now,
      now,
    });
    const released = await loadState(svc.service.store, settlementDecider, stream);
    assert.deepEqual(released?.refundHolds, [], 'released: the settlement waits for nothing and is not re-priced');
    return refundId;
  }

  it('a refund whose hold was given back between its approval and its payout takes it again before paying from the deposit', async () => {
    const { key, merchantId, id } = await unsettled();
    await svc.service.payouts.stop();
    let refundId: string;
    try {
      refundId = await approvedThenGivenBack(key, id);
    } finally {
      svc.service.payouts.start();
    }
    const completed = await completedRefund(key, refundId);
    assert.deepEqual(await paidBy(CUSTOMER, completed.transactionHash), [['USDT', 20_000_000n]]);
    // Held again before it was paid: the settlement pays what is left, not the deposit's 120 a second time.
    assert.equal((await settlementOf(key, id)).amount, '98.800000');
    const net = 120_000_000n - 20_000_000n - 1_200_000n;
    assert.deepEqual(await settledToWallet(key, merchantId, id), [['USDT', net]]);
  });

  it('a refund whose hold was given back and whose settlement was prepared meanwhile is paid from the refund wallet, never the deposit', async () => {
    const { key, merchantId, id } = await unsettled();
    const queue = svc.service.database.db as Kysely<{ payout_queue: { payout_id: string; due_at: Date } }>;
    const refundDue = (refundId: string, at: Date) =>
      queue.updateTable('payout_queue').set({ due_at: at }).where('payout_id', '=', refundId).execute();
    await svc.service.payouts.stop();
    let refundId: string;
    try {
      refundId = await approvedThenGivenBack(key, id);
      // The settlement, no longer waiting, is prepared and sent before the refund's payout looks.
      await admin('PATCH', `/admin/v1/merchants/${merchantId}`, { settlementWallets: { ethereum: MERCHANT_WALLET } });
      await svc.service.projections.caughtUp();
      await refundDue(refundId, new Date(Date.now() + 3_600_000));
      await svc.service.payouts.pass();
      assert.notEqual((await settlementOf(key, id)).transactionHash, null);
      await refundDue(refundId, new Date(0));
      await svc.service.payouts.pass();
    } finally {
      svc.service.payouts.start();
    }
    const moved = (await refundOf(key, refundId)).body.data;
    assert.deepEqual([moved.fundedFrom, moved.status], ['refund_wallet', 'awaiting_funds']);
    const settled = await eventuallyMining(
      () => mine(),
      () => settlementOf(key, id),
      (s) => s?.status === 'completed',
    );
    // The whole deposit, less the platform fee: the refund took none of it.
    assert.deepEqual(await paidBy(MERCHANT_WALLET, settled.transactionHash), [['USDT', 118_800_000n]]);
  });

  it('a full refund before settlement: the settlement ends completed with nothing to pay, never failed', async () => {
    const { key, merchantId, id } = await unsettled();
    const refundId = await fromTheDeposit(key, id, { kind: 'full' });
    // While the refund is on its way the settlement waits (for a wallet too): it does not fail for its fees.
    const waiting = await settlementOf(key, id);
    assert.equal(waiting.status, 'pending');
    assert.equal(waiting.failureReason, 'no_wallet');
    const completed = await completedRefund(key, refundId);
    assert.deepEqual(await paidBy(CUSTOMER, completed.transactionHash), [['USDT', 120_000_000n]]);
    const ended = await eventually(
      () => settlementOf(key, id),
      (s) => s?.status === 'completed',
    );
    assert.equal(ended.amount, '0.000000');
    assert.equal(ended.transactionHash, null);
    assert.equal(ended.failureReason, null);
    assert.equal(ended.failedAt, null);
    // A wallet set later pays nothing: there is nothing left.
    await admin('PATCH', `/admin/v1/merchants/${merchantId}`, { settlementWallets: { ethereum: MERCHANT_WALLET } });
    await mine();
    await svc.service.payouts.pass();
    assert.equal((await settlementOf(key, id)).status, 'completed');
    const invoice = (await svc.call('GET', `/api/v1/invoices/${id}`, { token: key })).body.data;
    assert.equal(invoice.refundStatus, 'full');
    assert.equal(invoice.status, 'confirmed', 'nothing reached the merchant: the invoice is not settled');
  });

  it('a wrong-token payment on a deposit whose settlement is unprepared is refunded from that deposit; the settlement then pays its own token whole', async () => {
    const { key, merchantId, id, deposit } = await unsettled();
    await transfer(deposit, '0.5', 'ETH'); // the wrong token
    await mine(defaultConfirmations.ethereum);
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: key })).body.data,
      (assets) => assets?.length === 2,
    );
    const refundId = await fromTheDeposit(key, id, { chain: 'ethereum', token: 'ETH', kind: 'excess' });
    const completed = await completedRefund(key, refundId);
    assert.deepEqual(await paidBy(CUSTOMER, completed.transactionHash), [
      ['ETH', 500_000_000_000_000_000n - parseUnits(completed.networkFee, 18)!],
    ]);
    // The USDT settlement is not re-priced by the ETH refund: 120 less the 1% platform fee.
    assert.deepEqual(await settledToWallet(key, merchantId, id), [['USDT', 120_000_000n - 1_200_000n]]);
  });

  it('a wrong-token payment on an invoice that expired unconfirmed (no settlement, ever) is refunded from its deposit; two refunds racing stay within what it received', async () => {
    const { key } = await merchant(MERCHANT_WALLET);
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', chain: 'ethereum', token: 'USDT', expiresInMinutes: 1 },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const { paymentId: id, address: deposit } = created.body.data as { paymentId: string; address: string };
    await transfer(deposit, '5', 'USDC'); // the wrong token
    await mine(defaultConfirmations.ethereum);
    await admin('POST', '/dev/v1/clock/advance', { seconds: 61 });
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: key })).body.data,
      (assets) => assets?.[0]?.refundable === '5.000000',
    );
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data.status,
      (status) => status === 'expired',
    );
    assert.equal(await settlementOf(key, id), undefined, 'never confirmed: no settlement');

    const customer = Wallet.createRandom().address;
    const refund = (amount: string) =>
      svc.call('POST', `/api/v1/invoices/${id}/refunds`, {
        token: key,
        body: { chain: 'ethereum', token: 'USDC', amount, destination: customer },
      });
    const [first, second] = await Promise.all([refund('3'), refund('2')]);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    assert.equal(second.status, 201, JSON.stringify(second.body));
    const third = await refund('0.000001');
    assert.equal(third.status, 400);
    assert.equal(third.body.message, 'Refund exceeds the refundable amount');
    // Approved at once, both from the one deposit: the coins leave the way they came.
    const approved = await Promise.all([approve(key, first.body.data.id), approve(key, second.body.data.id)]);
    for (const a of approved) {
      assert.equal(a.status, 200, JSON.stringify(a.body));
      assert.equal(a.body.data.fundedFrom, 'deposit');
      assert.equal(a.body.data.status, 'sending');
    }
    const done = [await completedRefund(key, first.body.data.id), await completedRefund(key, second.body.data.id)];
    assert.deepEqual(await paidBy(customer, done[0].transactionHash), [['USDC', 3_000_000n]]);
    assert.deepEqual(await paidBy(customer, done[1].transactionHash), [['USDC', 2_000_000n]]);
    const ledger = await SandboxLedger.open(svc.service.store, 'ethereum');
    assert.equal(await ledger.balanceOf(deposit, 'USDC'), 0n, 'the deposit gave back all it received, no more');
    const invoice = (await svc.call('GET', `/api/v1/invoices/${id}`, { token: key })).body.data;
    assert.equal(invoice.refundStatus, 'full');
  });

  /** A 100 USD invoice, open, of a merchant with no wallet yet (its settlement, once requested, waits for one). */
  async function openInvoice() {
    const { key, merchant: m } = await merchant();
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const { paymentId: id, address: deposit } = created.body.data as { paymentId: string; address: string };
    return { key, merchantId: m.id as string, id, deposit };
  }

  /** The invoice's refundable amount of `token` once its payments are confirmed. */
  const refundableOnce = (key: string, id: string, token: string, amount: string) =>
    eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: key })).body.data,
      (assets) =>
        assets?.some((a: { token: string; refundable: string }) => a.token === token && a.refundable === amount),
    );

  it('a wrong-token payment on an invoice still open is refunded from its deposit; once paid and confirmed, the settlement pays its own token whole', async () => {
    const { key, merchantId, id, deposit } = await openInvoice();
    await transfer(deposit, '5', 'USDC'); // the wrong token
    await mine(defaultConfirmations.ethereum);
    await refundableOnce(key, id, 'USDC', '5.000000');
    const refundId = await fromTheDeposit(key, id, { chain: 'ethereum', token: 'USDC', kind: 'full' });
    // The hold on the settlement's stream is no settlement: none is listed while the invoice is open.
    assert.equal(await settlementOf(key, id), undefined);
    const completed = await completedRefund(key, refundId);
    assert.deepEqual(await paidBy(CUSTOMER, completed.transactionHash), [['USDC', 5_000_000n]]);
    await transfer(deposit, '100', 'USDT');
    await mine(defaultConfirmations.ethereum);
    // The USDT settlement is not re-priced by the USDC refund: 100 less the 1% platform fee.
    assert.deepEqual(await settledToWallet(key, merchantId, id), [['USDT', 100_000_000n - 1_000_000n]]);
    const ledger = await SandboxLedger.open(svc.service.store, 'ethereum');
    assert.equal(await ledger.balanceOf(deposit, 'USDC'), 0n);
    // What the deposit keeps is the platform fee (the sandbox's payout moves only the merchant's share).
    assert.equal(await ledger.balanceOf(deposit, 'USDT'), 1_000_000n);
  });

  it('an underpayment refunded from the deposit while the invoice is open pays nothing towards it; the whole quote then paid, the settlement pays received − refund − the platform fee, nothing twice', async () => {
    const { key, merchantId, id, deposit } = await openInvoice();
    await transfer(deposit, '40', 'USDT');
    await mine(defaultConfirmations.ethereum);
    await refundableOnce(key, id, 'USDT', '40.000000');
    const refundId = await fromTheDeposit(key, id, { amount: '40' });
    assert.equal(await settlementOf(key, id), undefined, 'open: no settlement yet');
    // The whole quote paid while the refund may still be on its way (the 40 given back pays nothing towards
    // it): the settlement, requested on confirmation, starts with the hold (waiting for it if it is not out yet).
    await transfer(deposit, '100', 'USDT');
    await mine(defaultConfirmations.ethereum);
    const requested = await eventually(
      () => settlementOf(key, id),
      (s) => s !== undefined,
    );
    assert.equal(requested.grossAmount, '140.000000');
    assert.equal(requested.amount, '98.600000', '140 received − 40 refunded − 1% of 140');
    const completed = await completedRefund(key, refundId);
    assert.deepEqual(await paidBy(CUSTOMER, completed.transactionHash), [['USDT', 40_000_000n]]);
    assert.deepEqual(await settledToWallet(key, merchantId, id), [['USDT', 98_600_000n]]);
    const ledger = await SandboxLedger.open(svc.service.store, 'ethereum');
    // 140 in, 40 to the customer, 98.6 to the merchant: the platform fee is what is left, nothing paid twice.
    assert.equal(await ledger.balanceOf(deposit, 'USDT'), 1_400_000n);
    assert.deepEqual(
      (await ledgerTransfersTo(CUSTOMER)).filter((t) => t.txHash === completed.transactionHash).length,
      1,
      'the refund paid once',
    );
  });

  it('a late payment refunded from the deposit comes out of what the deposit holds beyond the settlement, not out of the settlement', async () => {
    const { key, merchant: m } = await merchant();
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', chain: 'ethereum', token: 'USDT', expiresInMinutes: 1 },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const { paymentId: id, address: deposit } = created.body.data as { paymentId: string; address: string };
    // Paid in full in time, seen but not yet confirmed: running out of time does not expire it.
    await transfer(deposit, '100', 'USDT');
    await mine();
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data,
      (status) => status?.hasDetectedPayment === true,
    );
    await admin('POST', '/dev/v1/clock/advance', { seconds: 61 });
    // 10 more after the deadline: late, never counted, so not the settlement's (the merchant has no wallet yet).
    await transfer(deposit, '10', 'USDT');
    await mine(defaultConfirmations.ethereum);
    const requested = await eventually(
      () => settlementOf(key, id),
      (s) => s?.status === 'pending',
    );
    assert.equal(requested.grossAmount, '100.000000');
    await refundableOnce(key, id, 'USDT', '110.000000');
    const refundable = (await svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: key })).body.data;
    assert.equal(refundable[0].excess, '10.000000');
    const refundId = await fromTheDeposit(key, id, { kind: 'excess' });
    // The settlement is not re-priced: the refund gives back what the deposit holds beyond its payments.
    assert.equal((await settlementOf(key, id)).amount, '99.000000');
    const completed = await completedRefund(key, refundId);
    assert.equal(completed.fundedFrom, 'deposit');
    assert.deepEqual(await paidBy(CUSTOMER, completed.transactionHash), [['USDT', 10_000_000n]]);
    // 100 less the 1% platform fee to the merchant; the deposit keeps only the platform fee.
    assert.deepEqual(await settledToWallet(key, m.id, id), [['USDT', 99_000_000n]]);
    const ledger = await SandboxLedger.open(svc.service.store, 'ethereum');
    assert.equal(await ledger.balanceOf(deposit, 'USDT'), 1_000_000n);
  });

  it('needs refunds:approve to approve, and answers 404 for another merchant', async () => {
    const { key } = await merchant(MERCHANT_WALLET);
    const { id } = await overpaid(key);
    const created = await svc.call('POST', `/api/v1/invoices/${id}/refunds`, {
      token: key,
      body: { kind: 'excess', destination: CUSTOMER },
    });
    const support = (await merchantWithKey(svc, { permissions: ['refunds:read', 'refunds:write'] })).key;
    assert.equal((await approve(support, created.body.data.id)).status, 403);
    const other = (await merchantWithKey(svc)).key;
    const missing = await approve(other, created.body.data.id);
    assert.equal(missing.status, 404);
    assert.equal(missing.body.message, 'Refund not found');
    const waiting = await svc.call('POST', `/api/v1/invoices/${id}/refunds`, { token: key, body: { amount: '1' } });
    const early = await approve(key, waiting.body.data.id);
    assert.equal(early.status, 409);
    assert.equal(early.body.message, 'The customer has not given an address yet');
  });

  it('the CLI creates, lists and approves a refund for an operator helping a merchant', async () => {
    const { key } = await merchant(MERCHANT_WALLET);
    const { id } = await overpaid(key);
    const cli = async (...args: string[]) => {
      const run = await runCli([...args, '--url', svc.url, '--key', key], {});
      assert.equal(run.code, 0, run.output);
      return JSON.parse(run.output).data;
    };
    const created = await cli(
      'refund',
      'create',
      id,
      '--kind',
      'excess',
      '--destination',
      CUSTOMER,
      '--reason',
      'Overpaid',
    );
    assert.equal(created.amount, '20.000000');
    assert.equal(created.reason, 'Overpaid');
    const listed = await cli('refund', 'list', '--invoice', id);
    assert.deepEqual(
      listed.map((r: { id: string }) => r.id),
      [created.id],
    );
    const approved = await cli('refund', 'approve', created.id);
    assert.equal(approved.approvedAt !== null, true);
    const refused = await runCli(['refund', 'create', id, '--amount', '1000', '--url', svc.url, '--key', key], {});
    assert.equal(refused.code, 1);
    assert.match(refused.output, /Refund exceeds the refundable amount/);
  });

  it('a wrong-token payment after settlement is refunded in that token, from the refund wallet; a partial refund, a second up to the limit, a third refused', async () => {
    const { key } = await merchant(MERCHANT_WALLET);
    const { id, deposit } = await overpaid(key);
    // Settled first: the deposit's settlement is no longer the one to wait for.
    await eventuallyMining(
      () => mine(),
      async () => (await svc.call('GET', `/api/v1/invoices/${id}`, { token: key })).body.data.status,
      (status) => status === 'settled',
    );
    await transfer(deposit, '0.5', 'ETH'); // the wrong token
    await mine(defaultConfirmations.ethereum);
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: key })).body.data,
      (assets) => assets?.length === 2,
    );
    const wrong = await svc.call('POST', `/api/v1/invoices/${id}/refunds`, {
      token: key,
      body: { chain: 'ethereum', token: 'ETH', kind: 'excess', destination: CUSTOMER },
    });
    assert.equal(wrong.status, 201, JSON.stringify(wrong.body));
    assert.equal(wrong.body.data.token, 'ETH');
    const approved = await approve(key, wrong.body.data.id);
    // The settlement paid USDT out already: the ETH is paid from the refund wallet, once the merchant funds it.
    assert.equal(approved.body.data.fundedFrom, 'refund_wallet');
    assert.equal(approved.body.data.status, 'awaiting_funds');
    const wallet = (await svc.call('GET', '/api/v1/refund-wallets', { token: key })).body.data.find(
      (w: { chain: string }) => w.chain === 'ethereum',
    );
    await transfer(wallet.address, '0.5', 'ETH');
    const completed = await eventuallyMining(
      () => mine(),
      async () => (await refundOf(key, wrong.body.data.id)).body.data,
      (r) => r.status === 'completed',
    );
    const paid = (await ledgerTransfersTo(CUSTOMER)).filter((t) => t.txHash === completed.transactionHash);
    assert.deepEqual(
      paid.map((t) => [t.token, t.amount]),
      [['ETH', 500_000_000_000_000_000n - parseUnits(completed.networkFee, 18)!]],
    );

    // USDT: 120 received; 100 then 20 are refundable, a third of 0.000001 is not.
    const refund = (amount: string) =>
      svc.call('POST', `/api/v1/invoices/${id}/refunds`, {
        token: key,
        body: { chain: 'ethereum', token: 'USDT', amount, destination: CUSTOMER },
      });
    assert.equal((await refund('100')).status, 201);
    assert.equal((await refund('20')).status, 201);
    const third = await refund('0.000001');
    assert.equal(third.status, 400);
    assert.equal(third.body.message, 'Refund exceeds the refundable amount');
  });

  // On every chain's sandbox ledger: an overpayment in the native coin refunded from the deposit, the network fee out of it.
  for (const chain of catalogue) {
    it(`${chain.name}: the excess of an overpaid invoice goes back to the customer, to the base unit`, async () => {
      const { key } = await merchant();
      const decimals = chain.supportedTokens.find((t) => t.symbol === chain.nativeCurrency)!.decimals;
      const invoice = async () =>
        (
          await svc.call('POST', '/api/v1/payments', {
            token: key,
            body: { amount: '10', currency: 'USD', chain: chain.name, token: chain.nativeCurrency },
          })
        ).body.data;
      const paid = await invoice();
      // Another deposit address of the chain stands for the customer's: an address the chain's rules accept.
      const customer = (await invoice()).address as string;
      const quoted = parseUnits(paid.cryptoAmount, decimals)!;
      const sent = quoted * 2n;
      const res = await admin('POST', `/dev/v1/chains/${chain.name}/transfers`, {
        to: paid.address,
        amount: formatUnits(sent, decimals, decimals),
        token: chain.nativeCurrency,
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      await admin('POST', `/dev/v1/chains/${chain.name}/blocks`, { count: defaultConfirmations[chain.name] });
      await eventually(
        () => settlementOf(key, paid.paymentId),
        (s) => s?.status === 'pending',
      );
      const created = await svc.call('POST', `/api/v1/invoices/${paid.paymentId}/refunds`, {
        token: key,
        body: { kind: 'excess', destination: customer },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      assert.equal(parseUnits(created.body.data.amount, decimals), sent - quoted);
      const approved = await approve(key, created.body.data.id);
      assert.equal(approved.status, 200, JSON.stringify(approved.body));
      // Polygon wants 128 confirmations: a few blocks at each look, so a loaded machine still gets there in time.
      const perLook = Math.ceil(defaultConfirmations[chain.name] / 16);
      const completed = await eventuallyMining(
        () => admin('POST', `/dev/v1/chains/${chain.name}/blocks`, { count: perLook }),
        async () => (await refundOf(key, created.body.data.id)).body.data,
        (r) => r.status === 'completed',
      );
      const ledger = await SandboxLedger.open(svc.service.store, chain.name);
      const payout = ledger.transfersTo(customer).filter((t) => t.txHash === completed.transactionHash);
      assert.deepEqual(
        payout.map((t) => [t.token, t.amount]),
        [[chain.nativeCurrency, sent - quoted - parseUnits(completed.networkFee, decimals)!]],
      );
    });
  }
});
