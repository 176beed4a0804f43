// Webhooks end to end, black-box: the real process (`npm start`) on an
// embedded store, a merchant whose webhook endpoint is a local receiver, and
// payments made through the sandbox API. Every delivery's signature is checked
// the way a merchant would check it.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startProcess, type ServiceProcess } from './support/process.ts';
import { eventually as until } from './support/merchant.ts';
import { signatureVerifies, startWebhookReceiver, type WebhookReceiver } from './support/webhook-receiver.ts';

const ADMIN = 'webhook-flow-admin-token';
const WALLET = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';

describe('webhooks over real HTTP against the service process', () => {
  let dir: string;
  let service: ServiceProcess;
  let receiver: WebhookReceiver;
  let key: string;
  let secret: string;

  const call = async (method: string, path: string, token?: string, body?: unknown) => {
    const res = await fetch(service.url + path, {
      method,
      headers: {
        ...(token && { authorization: `Bearer ${token}` }),
        ...(body !== undefined && { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const status = async (id: string) => (await call('GET', `/api/v1/invoices/${id}/status`)).body.data;
  const mine = (count: number) => call('POST', '/dev/v1/chains/tron/blocks', ADMIN, { count });
  const payment = async (amount: string, extra: Record<string, unknown> = {}) => {
    const res = await call('POST', '/api/v1/payments', key, {
      amount,
      currency: 'USD',
      chain: 'tron',
      token: 'USDT',
      ...extra,
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data;
  };
  const send = (to: string, amount: string) =>
    call('POST', '/dev/v1/chains/tron/transfers', ADMIN, { to, amount, token: 'USDT' });
  const eventsFor = (invoiceId: string, accepted = true) =>
    (accepted ? receiver.accepted() : receiver.received).filter((r) => r.body?.data?.invoice?.id === invoiceId);

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'invoicing-webhooks-'));
    receiver = await startWebhookReceiver();
    service = await startProcess({
      DATA_DIR: dir,
      ADMIN_TOKEN: ADMIN,
      CHAIN_TRON_CONFIRMATIONS: '3',
      WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
      // Short waits between attempts, so the retry test runs in seconds.
      WEBHOOK_RETRY_DELAYS: '300ms,600ms,1s',
    });
    const merchant = await call('POST', '/admin/v1/merchants', ADMIN, {
      name: 'Hooked',
      webhookUrl: `${receiver.url}/hooks`,
      settlementWallets: { tron: WALLET },
    });
    assert.equal(merchant.status, 201);
    secret = merchant.body.data.webhookSecret;
    key = (await call('POST', `/admin/v1/merchants/${merchant.body.data.id}/api-keys`, ADMIN, {})).body.data.key;
  });
  after(async () => {
    await service?.stop();
    await receiver?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('sends invoice.confirmed and then invoice.settled, once each, signed, with the metadata and the exact net amount', async () => {
    const p = await payment('50', { metadata: { orderId: 'A-1001' } });
    await send(p.address, p.cryptoAmount);
    await mine(2);
    await until(
      () => status(p.paymentId),
      (s) => s.status === 'confirmed' || s.status === 'settled',
    );
    // The payout is broadcast on confirmation; three blocks complete it.
    await until(
      async () => (await call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, key)).body.data,
      (s) => s?.status === 'submitted',
    );
    await mine(3);
    await until(
      () => eventsFor(p.paymentId).map((r) => r.event),
      (events) => events.includes('invoice.settled'),
    );

    const delivered = eventsFor(p.paymentId);
    assert.deepEqual(
      delivered.map((r) => r.event),
      ['invoice.confirmed', 'invoice.settled'],
    );
    for (const r of delivered) {
      assert.ok(signatureVerifies(r.signature, r.rawBody, secret), `${r.event} is signed with the merchant's secret`);
      assert.equal(r.path, '/hooks');
      assert.deepEqual(r.body.data.invoice.metadata, { orderId: 'A-1001' });
    }
    assert.notEqual(delivered[0]!.eventId, delivered[1]!.eventId);
    const settled = delivered[1]!.body.data.invoice;
    assert.equal(settled.status, 'settled');
    // 50 USDT less the 1% platform fee; tron's USDT pays no network fee in the token.
    assert.equal(settled.settledAmount, '49.500000');
    const wallet = (await call('GET', `/dev/v1/chains/tron/addresses/${WALLET}`, ADMIN)).body.data;
    const payout = wallet.transfers.filter((t: any) => t.txHash === settled.txHash);
    assert.equal(payout.length, 1);
    assert.equal(payout[0].amount, '49.500000');
  });

  it('sends invoice.underpaid for a partial payment, and invoice.overpaid for too much', async () => {
    const under = await payment('20');
    assert.equal(under.cryptoAmount, '20.00000000', 'USDT is quoted at 1 USD in the sandbox');
    await send(under.address, '10');
    const underpaid = await until(
      () => eventsFor(under.paymentId),
      (events) => events.length > 0,
    );
    assert.equal(underpaid[0]!.event, 'invoice.underpaid');
    assert.equal(underpaid[0]!.body.data.invoice.remainingAmount, '10.00000000');
    assert.ok(signatureVerifies(underpaid[0]!.signature, underpaid[0]!.rawBody, secret));

    const over = await payment('20');
    await send(over.address, '30');
    const overpaid = await until(
      () => eventsFor(over.paymentId),
      (events) => events.length > 0,
    );
    assert.equal(overpaid[0]!.event, 'invoice.overpaid');
    assert.equal(overpaid[0]!.body.data.invoice.totalReceivedAmount, '30.00000000');
    assert.ok(signatureVerifies(overpaid[0]!.signature, overpaid[0]!.rawBody, secret));
  });

  it('sends invoice.expired when the business clock passes expiresAt', async () => {
    const p = await payment('5', { expiresInMinutes: 5, metadata: { cart: 7 } });
    await call('POST', '/dev/v1/clock/advance', ADMIN, { seconds: 6 * 60 });
    const expired = await until(
      () => eventsFor(p.paymentId),
      (events) => events.length > 0,
    );
    assert.equal(expired[0]!.event, 'invoice.expired');
    assert.equal(expired[0]!.body.data.invoice.status, 'expired');
    assert.deepEqual(expired[0]!.body.data.invoice.metadata, { cart: 7 });
  });

  it('delivers on the third try to a receiver that answers 500 twice, with one eventId and the log to show it', async () => {
    receiver.failFirst('/flaky', 2, 500);
    const p = await payment('12', { webhookUrl: `${receiver.url}/flaky` });
    await send(p.address, p.cryptoAmount);
    await mine(2);
    const accepted = await until(
      () => eventsFor(p.paymentId).filter((r) => r.event === 'invoice.confirmed'),
      (events) => events.length > 0,
    );
    const attempts = eventsFor(p.paymentId, false).filter((r) => r.event === 'invoice.confirmed');
    assert.deepEqual(
      attempts.map((r) => r.status),
      [500, 500, 200],
    );
    assert.equal(new Set(attempts.map((r) => r.eventId)).size, 1, 'every attempt carries the same eventId');
    assert.equal(new Set(attempts.map((r) => r.rawBody)).size, 1, 'and the very same body');
    for (const r of attempts) assert.ok(signatureVerifies(r.signature, r.rawBody, secret));
    assert.equal(accepted[0]!.path, '/flaky', "the invoice's own webhook URL wins over the merchant's");

    const log = await until(
      async () => (await call('GET', '/api/v1/webhooks/deliveries?event=invoice.confirmed', key)).body.data,
      (rows: any[]) => rows.some((d) => d.eventId === accepted[0]!.eventId && d.status === 'succeeded'),
    );
    const delivery = log.find((d: any) => d.eventId === accepted[0]!.eventId);
    assert.equal(delivery.attempts, 3);
    const metrics = await (await fetch(`${service.url}/metrics`)).text();
    assert.match(metrics, /^webhook_deliveries\{status="succeeded"\} [1-9]/m);
  });
});
