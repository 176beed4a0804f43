// What follows a payment, end to end on the sandbox chains over real HTTP:
// nothing waits in silence, and the settlement follows the invoice's receipts
// until its payout is prepared (operations.md §2–§3).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';
import { startWebhookReceiver, type WebhookReceiver } from './support/webhook-receiver.ts';

const TRON_WALLET = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';
const ETH_WALLET = '0x9858EfFD232B4033E47d90003D41EC34EcaEda94';

describe('the money path on the sandbox chains', () => {
  let svc: RunningService;
  let receiver: WebhookReceiver;
  before(async () => {
    receiver = await startWebhookReceiver();
    svc = await startTestService({
      RATE_LIMITS: 'off',
      CHAIN_TRON_CONFIRMATIONS: '3',
      CHAIN_ETHEREUM_CONFIRMATIONS: '2',
      WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
    });
  });
  after(async () => {
    await svc.close();
    await receiver.close();
  });

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;
  const settlementOf = async (id: string, key: string) =>
    (await svc.call('GET', `/api/v1/invoices/${id}/settlement`, { token: key })).body.data;
  const historyOf = async (id: string, key: string): Promise<string[]> =>
    (await svc.call('GET', `/api/v1/invoices/${id}/events`, { token: key })).body.data.map(
      (e: { type: string }) => e.type,
    );
  const mine = (chain: string, count: number) => admin('POST', `/dev/v1/chains/${chain}/blocks`, { count });

  async function merchant(wallets: Record<string, string>) {
    const m = await merchantWithKey(svc);
    await admin('PATCH', `/admin/v1/merchants/${m.merchant.id}`, {
      webhookUrl: `${receiver.url}/hooks`,
      ...(Object.keys(wallets).length > 0 && { settlementWallets: wallets }),
    });
    return m;
  }

  async function payment(key: string, chain: string, token: string | undefined, amount: string) {
    const res = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount, currency: 'USD', chain, ...(token && { token }) },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data;
  }

  const send = (chain: string, to: string, amount: string, token?: string) =>
    admin('POST', `/dev/v1/chains/${chain}/transfers`, { to, amount, ...(token && { token }) });

  it('fails a settlement the fees would eat with its reason, tells the merchant and the operator, and pays nothing', async () => {
    const { key, merchant: m } = await merchant({ ethereum: ETH_WALLET });
    // A dollar of ETH is less than the sandbox's 0.00042 ETH network fee.
    const p = await payment(key, 'ethereum', undefined, '1');
    await send('ethereum', p.address, p.cryptoAmount);
    await mine('ethereum', 1);
    const failed = await eventually(
      () => settlementOf(p.paymentId, key),
      (s) => s?.status === 'failed',
    );
    assert.equal(failed.failureReason, 'fees_exceed_amount');
    assert.equal(failed.nextAttemptAt, null, 'final: no attempt can change it');
    assert.equal(failed.attempts, 1);
    assert.equal(failed.merchantWallet, '', 'nothing was ever prepared');

    const hook = await eventually(
      () => receiver.received.find((r) => r.event === 'settlement.failed' && r.body.data.invoiceId === p.paymentId),
      (r) => r !== undefined,
    );
    assert.equal(hook!.body.data.id, failed.id);
    assert.equal(hook!.body.data.failureReason, 'fees_exceed_amount');

    const list = await admin('GET', '/admin/v1/settlements?status=failed');
    assert.equal(list.status, 200);
    assert.ok(list.body.data.some((s: { id: string }) => s.id === failed.id));
    const attention = (await admin('GET', '/admin/v1/attention')).body.data;
    const item = attention.find((a: { subject: string }) => a.subject === failed.id);
    assert.deepEqual(
      { kind: item.kind, merchantId: item.merchantId, reason: item.reason, chain: item.chain },
      { kind: 'settlement_failed', merchantId: m.id, reason: 'fees_exceed_amount', chain: 'ethereum' },
    );
    assert.equal(
      (await status(p.paymentId)).status,
      'confirmed',
      'the invoice stays confirmed: the money is on its address, and the merchant knows why',
    );
  });

  it('tells the merchant of a failed settlement whose stream began with a refund held before it was requested', async () => {
    const { key } = await merchant({ ethereum: ETH_WALLET });
    const p = await payment(key, 'ethereum', undefined, '1');
    // A wrong token first, refunded from the deposit while the invoice is open: the hold opens the stream.
    await send('ethereum', p.address, '5', 'USDT');
    await mine('ethereum', 2);
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/refundable`, { token: key })).body.data,
      (assets) => assets?.[0]?.refundable === '5.000000',
    );
    const refund = await svc.call('POST', `/api/v1/invoices/${p.paymentId}/refunds`, {
      token: key,
      body: { chain: 'ethereum', token: 'USDT', kind: 'full', destination: ETH_WALLET },
    });
    assert.equal(refund.status, 201, JSON.stringify(refund.body));
    const approved = await svc.call('POST', `/api/v1/refunds/${refund.body.data.id}/approve`, { token: key });
    assert.equal(approved.body.data.fundedFrom, 'deposit', JSON.stringify(approved.body));
    // Then paid: a dollar of ETH, which the fees eat.
    await send('ethereum', p.address, p.cryptoAmount);
    await eventuallyMining(
      () => mine('ethereum', 1),
      () => settlementOf(p.paymentId, key),
      (s) => s?.status === 'failed',
    );
    const hook = await eventually(
      () => receiver.received.find((r) => r.event === 'settlement.failed' && r.body.data.invoiceId === p.paymentId),
      (r) => r !== undefined,
    );
    assert.equal(hook!.body.data.failureReason, 'fees_exceed_amount');
  });

  it('takes a payment confirmed after the invoice into the settlement, while the payout waits for a wallet', async () => {
    const { key, merchant: m } = await merchant({});
    const p = await payment(key, 'tron', 'USDT', '10');
    await send('tron', p.address, '10', 'USDT');
    await mine('tron', 2);
    const waiting = await eventually(
      () => settlementOf(p.paymentId, key),
      (s) => s?.status === 'pending' && s.failureReason === 'no_wallet',
    );
    assert.equal(waiting.grossAmount, '10.000000');
    const attention = (await admin('GET', '/admin/v1/attention')).body.data;
    assert.ok(
      attention.some(
        (a: { subject: string; kind: string }) => a.subject === waiting.id && a.kind === 'settlement_no_wallet',
      ),
    );

    // The customer sends 5 more; once confirmed it is the merchant's too, not stranded on the address.
    await send('tron', p.address, '5', 'USDT');
    await mine('tron', 2);
    await eventually(
      () => settlementOf(p.paymentId, key),
      (s) => s.grossAmount === '15.000000',
    );
    await admin('PATCH', `/admin/v1/merchants/${m.id}`, { settlementWallets: { tron: TRON_WALLET } });
    const submitted = await eventually(
      () => settlementOf(p.paymentId, key),
      (s) => s.status === 'submitted',
    );
    assert.equal(submitted.amount, '14.850000');
    assert.equal(submitted.failureReason, null);
    await mine('tron', 3);
    const settled = await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    assert.equal(settled.settledAmount, '14.850000');
    const ledger = svc.service.sandbox!.ledgers.get('tron')!;
    assert.deepEqual(
      ledger
        .transfersTo(TRON_WALLET)
        .filter((t) => t.txHash === submitted.transactionHash)
        .map((t) => t.amount),
      [14_850_000n],
      'one payout, exact to the base unit',
    );
    assert.ok((await historyOf(p.paymentId, key)).includes('InvoiceReceiptsChanged'));
  });

  it('fails the settlement with payment_reversed when a reorg takes the payment before the payout', async () => {
    const { key } = await merchant({});
    const p = await payment(key, 'tron', 'USDT', '20');
    await send('tron', p.address, '20', 'USDT');
    await mine('tron', 2);
    await eventually(
      () => settlementOf(p.paymentId, key),
      (s) => s?.status === 'pending',
    );
    // The payment's block and the two after it are replaced by other blocks.
    await admin('POST', '/dev/v1/chains/tron/reorg', { depth: 3 });
    await mine('tron', 4);
    const reversed = await eventually(
      () => settlementOf(p.paymentId, key),
      (s) => s.status === 'failed',
    );
    assert.equal(reversed.failureReason, 'payment_reversed');
    assert.equal(reversed.grossAmount, '0.000000');
    assert.equal(reversed.nextAttemptAt, null);
    const history = await historyOf(p.paymentId, key);
    for (const type of ['PaymentWithdrawn', 'InvoiceReceiptsChanged', 'SettlementRepriced', 'SettlementFailed']) {
      assert.ok(history.includes(type), `${type} in ${history.join(', ')}`);
    }
  });

  it('raises a reorg after the payout for a person, and the invoice stays settled', async () => {
    const { key } = await merchant({ tron: TRON_WALLET });
    const p = await payment(key, 'tron', 'USDT', '30');
    await send('tron', p.address, '30', 'USDT');
    await mine('tron', 2);
    await eventually(
      () => settlementOf(p.paymentId, key),
      (s) => s?.status === 'submitted',
    );
    await mine('tron', 3);
    await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    const { height } = await svc.service.sandbox!.ledgers.get('tron')!.head();
    const detected = (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/events`, { token: key })).body.data.find(
      (e: { type: string }) => e.type === 'PaymentDetected',
    );
    // Deep enough to take the customer's payment (and the payout after it) off the chain.
    const depth = height - detected.data.blockNumber + 1;
    await admin('POST', '/dev/v1/chains/tron/reorg', { depth });
    await mine('tron', depth + 1);
    const attention = await eventually(
      async () => (await admin('GET', '/admin/v1/attention')).body.data,
      (items: { kind: string; subject: string; reason: string }[]) =>
        items.some((a) => a.kind === 'settlement_changed_after_payout'),
    );
    const settlement = await settlementOf(p.paymentId, key);
    const item = attention.find((a: { subject: string }) => a.subject === settlement.id);
    assert.equal(item?.reason, 'payment_reversed');
    assert.equal((await status(p.paymentId)).status, 'settled', 'only an operator takes it out of settled');

    // The operator deals with it and says how; it leaves the list, and the history keeps the note.
    const resolved = await admin('POST', `/admin/v1/settlements/${settlement.id}/resolve`, {
      note: 'customer refunded by hand',
    });
    assert.equal(resolved.status, 200);
    const after = (await admin('GET', '/admin/v1/attention')).body.data;
    assert.ok(!after.some((a: { subject: string }) => a.subject === settlement.id));
    const again = await admin('POST', `/admin/v1/settlements/${settlement.id}/resolve`, { note: 'again' });
    assert.equal(again.status, 409);
    assert.equal(again.body.message, 'Nothing about this settlement needs attention');
    assert.ok((await historyOf(p.paymentId, key)).includes('SettlementAttentionResolved'));
  });

  // Last in the file: it moves the sandbox clock on.
  it('lists a payout sent long ago and not confirmed for the operator, and not before', async () => {
    const { key } = await merchant({ tron: TRON_WALLET });
    const p = await payment(key, 'tron', 'USDT', '10');
    await send('tron', p.address, '10', 'USDT');
    await mine('tron', 3);
    // Sent, then no block: the payout is never confirmed.
    const sent = await eventually(
      () => settlementOf(p.paymentId, key),
      (s) => s?.status === 'submitted',
    );
    const unconfirmed = async () =>
      (
        (await admin('GET', '/admin/v1/attention')).body.data as { kind: string; subject: string; detail: string }[]
      ).find((a) => a.subject === sent.id);
    await admin('POST', '/dev/v1/clock/advance', { seconds: 29 * 60 });
    assert.equal(await unconfirmed(), undefined, 'not within its 30 minutes');
    await admin('POST', '/dev/v1/clock/advance', { seconds: 2 * 60 });
    const item = await unconfirmed();
    assert.equal(item?.kind, 'settlement_unconfirmed');
    assert.equal(
      item!.detail.startsWith(`its transaction ${sent.transactionHash} is not confirmed`),
      true,
      item!.detail,
    );
  });
});
