// Subscriptions end to end over real HTTP, on the sandbox chains and the
// business clock: enroll, pay the first invoice through the public addresses
// endpoint, activation, renewals, a renewal paid late, lapsing to past due and
// to cancelled, cancellation at period end, each with its signed webhook.
// The last suite runs the real process, the way `npm start` does.
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { verifyWebhookSignature } from '../adapters/webhooks/sender.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startProcess } from './support/process.ts';
import { assertRebuildGivesTheSameRows } from './support/rebuild.ts';
import { startTestService, type RunningService } from './support/service.ts';

const HOUR = 3600;
const DAY = 24 * HOUR;

interface Hook {
  raw: string;
  signature: string;
  body: { eventId: string; event: string; createdAt: string; data: any };
}

async function receiver() {
  const received: Hook[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      received.push({ raw, signature: String(req.headers['x-webhook-signature']), body: JSON.parse(raw) });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    received,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe('subscription flow on the sandbox chains and the business clock', () => {
  let svc: RunningService;
  let hooks: Awaited<ReturnType<typeof receiver>>;
  let key: string;
  let secret: string;
  before(async () => {
    svc = await startTestService({
      RATE_LIMITS: 'off',
      WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
      CHAIN_TRON_CONFIRMATIONS: '3',
      PUBLIC_BASE_URL: 'https://pay.example.com',
    });
    hooks = await receiver();
    const m = await merchantWithKey(svc);
    key = m.key;
    secret = m.merchant.webhookSecret;
    const patched = await svc.call('PATCH', `/admin/v1/merchants/${m.merchant.id}`, {
      token: svc.adminToken,
      body: { webhookUrl: hooks.url },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
  });
  after(async () => {
    await svc.close();
    await hooks.close();
  });

  const call = (method: string, path: string, body?: unknown) => svc.call(method, path, { token: key, body });
  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const advance = async (seconds: number) => {
    const res = await admin('POST', '/dev/v1/clock/advance', { seconds });
    assert.equal(res.status, 200);
  };
  const subscriber = async (id: string) => (await call('GET', `/api/v1/subscriptions/subscribers/${id}`)).body.data;
  const invoicesOf = async (id: string) =>
    (await call('GET', `/api/v1/subscriptions/subscribers/${id}/invoices`)).body.data as any[];
  const until = (id: string, done: (s: any) => boolean) => eventually(() => subscriber(id), done);
  const hooksFor = (subscriberId: string) =>
    hooks.received.filter((h) => h.body.data.subscriber?.id === subscriberId).map((h) => h.body);
  const hookOf = (subscriberId: string, event: string) =>
    eventually(
      async () => hooksFor(subscriberId).find((h) => h.event === event),
      (h) => h !== undefined,
    ) as Promise<Hook['body']>;

  /** Pays an invoice the way a customer does: an address from the checkout endpoint, a transfer, blocks. */
  async function pay(invoiceId: string) {
    const address = await svc.call('POST', `/api/v1/invoices/${invoiceId}/addresses`, {
      body: { chain: 'tron', token: 'USDT' },
    });
    // 201 for a new address, 200 for the one the invoice already has.
    assert.ok([200, 201].includes(address.status), JSON.stringify(address.body));
    const sent = await admin('POST', '/dev/v1/chains/tron/transfers', {
      to: address.body.data.address,
      amount: address.body.data.cryptoAmount,
      token: 'USDT',
    });
    assert.equal(sent.status, 201);
    await admin('POST', '/dev/v1/chains/tron/blocks', { count: 2 });
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${invoiceId}/status`)).body.data,
      (s) => s.status === 'confirmed',
    );
  }

  async function dailyPlan(graceHours: number) {
    const res = await call('POST', '/api/v1/subscriptions/plans', {
      name: 'Daily',
      amount: '10',
      currency: 'USD',
      interval: 'day',
      gracePeriodHours: graceHours,
    });
    assert.equal(res.status, 201);
    return res.body.data;
  }

  it('enroll → paid → active → renewed → past due → paid late → renewed → past due → cancelled', async () => {
    const plan = await dailyPlan(2);
    const enrolled = await call('POST', '/api/v1/subscriptions/subscribers', {
      planId: plan.id,
      email: 'life@example.com',
      externalId: 'cus_life',
      metadata: { crm: 'L-1' },
    });
    assert.equal(enrolled.status, 201);
    const s0 = enrolled.body.data;
    assert.equal(s0.status, 'pending');

    // subscriber.enrolled: signed, with the subscriber, its externalId and metadata, and the first invoice.
    const enrolledHook = await hookOf(s0.id, 'subscriber.enrolled');
    const raw = hooks.received.find((h) => h.body.eventId === enrolledHook.eventId)!;
    assert.equal(verifyWebhookSignature(raw.signature, raw.raw, secret, Math.floor(Date.now() / 1000)), true);
    assert.deepEqual(enrolledHook.data.subscriber, s0);
    assert.equal(enrolledHook.data.externalId, 'cus_life');
    assert.deepEqual(enrolledHook.data.metadata, { crm: 'L-1' });
    const [first] = await invoicesOf(s0.id);
    assert.equal(enrolledHook.data.invoice.id, first.id);
    assert.equal(enrolledHook.data.invoice.paymentUrl, `https://pay.example.com/checkout/${first.id}`);
    assert.equal(enrolledHook.data.invoice.status, 'pending');
    assert.equal(enrolledHook.data.invoice.metadata.subscriberId, s0.id);
    assert.equal(enrolledHook.data.invoice.metadata.crm, 'L-1');

    // The first payment confirmed on-chain: active.
    await pay(first.id);
    const s1 = await until(s0.id, (s) => s.status === 'active');
    assert.equal(s1.currentPeriodEnd, s0.currentPeriodEnd);
    const activatedHook = await hookOf(s0.id, 'subscriber.activated');
    assert.equal(activatedHook.data.subscriber.status, 'active');
    assert.equal(activatedHook.data.invoice.status, 'confirmed');
    assert.equal(activatedHook.data.externalId, 'cus_life');

    // A day later the period ends: the next period's invoice is created.
    await advance(DAY);
    const s2 = await until(s0.id, (s) => s.currentPeriodStart === s0.currentPeriodEnd);
    assert.equal(s2.status, 'active');
    assert.equal(Date.parse(s2.currentPeriodEnd) - Date.parse(s2.currentPeriodStart), DAY * 1000);
    const [renewal, firstAgain] = await eventually(
      () => invoicesOf(s0.id),
      (list) => list.length === 2,
    );
    assert.equal(firstAgain.id, first.id);
    assert.equal(renewal.amount, '10');
    assert.equal(renewal.status, 'pending');
    // Payable for the grace period, then as long again while past due.
    assert.equal(Date.parse(renewal.expiresAt) - Date.parse(s2.gracePeriodEndsAt), 2 * HOUR * 1000);
    const renewalHook = await hookOf(s0.id, 'subscriber.renewal_invoice_created');
    assert.equal(renewalHook.data.invoice.id, renewal.id);

    // Unpaid at the end of the grace period: past due.
    await advance(2 * HOUR + 60);
    await until(s0.id, (s) => s.status === 'past_due');
    const pastDueHook = await hookOf(s0.id, 'subscriber.past_due');
    assert.equal(pastDueHook.data.invoice.id, renewal.id);
    assert.deepEqual(pastDueHook.data.metadata, { crm: 'L-1' });

    // Paid late, while past due: active again.
    await pay(renewal.id);
    await until(s0.id, (s) => s.status === 'active');
    const renewedHook = await hookOf(s0.id, 'subscriber.renewed');
    assert.equal(renewedHook.data.paidLate, true);
    assert.equal(renewedHook.data.invoice.id, renewal.id);

    // The next period: renewed, left unpaid, past due, then cancelled when its invoice expires.
    await advance(DAY - 2 * HOUR);
    const s3 = await until(s0.id, (s) => s.currentPeriodStart === s2.currentPeriodEnd);
    assert.equal(s3.status, 'active');
    await advance(2 * HOUR + 60);
    await until(s0.id, (s) => s.status === 'past_due');
    await advance(2 * HOUR);
    const cancelled = await until(s0.id, (s) => s.status === 'cancelled');
    assert.equal(cancelled.currentPeriodStart, s3.currentPeriodStart);
    const cancelledHook = await hookOf(s0.id, 'subscriber.cancelled');
    assert.equal(cancelledHook.data.reason, 'unpaid');
    assert.equal(cancelledHook.data.invoice.status, 'expired');
    const invoices = await invoicesOf(s0.id);
    assert.deepEqual(
      invoices.map((i) => i.status),
      ['expired', 'confirmed', 'confirmed'],
    );

    // Every webhook of this subscriber, once each, in order.
    assert.deepEqual(
      hooksFor(s0.id).map((h) => h.event),
      [
        'subscriber.enrolled',
        'subscriber.activated',
        'subscriber.renewal_invoice_created',
        'subscriber.past_due',
        'subscriber.renewed',
        'subscriber.renewal_invoice_created',
        'subscriber.past_due',
        'subscriber.cancelled',
      ],
    );
    // And the address may be enrolled again.
    const again = await call('POST', '/api/v1/subscriptions/subscribers', {
      planId: plan.id,
      email: 'life@example.com',
    });
    assert.equal(again.status, 201);
  });

  it('honours cancelAtEnd: active until the period ends, then cancelled without a renewal', async () => {
    const plan = await dailyPlan(1);
    const s0 = (await call('POST', '/api/v1/subscriptions/subscribers', { planId: plan.id, email: 'end@example.com' }))
      .body.data;
    const [first] = await invoicesOf(s0.id);
    await pay(first.id);
    await until(s0.id, (s) => s.status === 'active');
    const scheduled = await call('POST', `/api/v1/subscriptions/subscribers/${s0.id}/cancel`, { atPeriodEnd: true });
    assert.equal(scheduled.status, 200);
    assert.equal(scheduled.body.data.cancelAtEnd, true);
    assert.equal(scheduled.body.data.status, 'active');
    await hookOf(s0.id, 'subscriber.cancellation_scheduled');

    await advance(DAY);
    const cancelled = await until(s0.id, (s) => s.status === 'cancelled');
    assert.equal(cancelled.currentPeriodEnd, s0.currentPeriodEnd);
    const hook = await hookOf(s0.id, 'subscriber.cancelled');
    assert.equal(hook.data.reason, 'period_end');
    assert.equal((await invoicesOf(s0.id)).length, 1, 'no renewal after a cancellation at period end');
  });

  it('follows a reorg that takes the first payment back: pending again, with its webhook, and active once paid again', async () => {
    const plan = await dailyPlan(2);
    const s0 = (
      await call('POST', '/api/v1/subscriptions/subscribers', { planId: plan.id, email: 'reorg@example.com' })
    ).body.data;
    const [first] = await invoicesOf(s0.id);
    await pay(first.id);
    await until(s0.id, (s) => s.status === 'active');

    // Deeper than the 3 confirmations: the block with the payment leaves the chain.
    assert.equal((await admin('POST', '/dev/v1/chains/tron/reorg', { depth: 3 })).status, 201);
    const back = await until(s0.id, (s) => s.status === 'pending');
    assert.deepEqual(
      [back.currentPeriodStart, back.currentPeriodEnd, back.gracePeriodEndsAt],
      [s0.currentPeriodStart, s0.currentPeriodEnd, s0.gracePeriodEndsAt],
    );
    const reversed = await hookOf(s0.id, 'subscriber.payment_reversed');
    assert.equal(reversed.data.subscriber.status, 'pending');
    assert.equal(reversed.data.invoice.id, first.id);
    assert.equal(reversed.data.invoice.status, 'pending');
    assert.equal((await svc.call('GET', `/api/v1/invoices/${first.id}/status`)).body.data.status, 'pending');

    // Still within its grace period, the first invoice is payable again: active again.
    await pay(first.id);
    await until(s0.id, (s) => s.status === 'active');
    const activations = await eventually(
      async () => hooksFor(s0.id).filter((h) => h.event === 'subscriber.activated'),
      (list) => list.length === 2,
    );
    assert.notEqual(activations[0]!.eventId, activations[1]!.eventId);
  });

  it('cancels a pending subscriber whose first invoice expires unpaid', async () => {
    const plan = await dailyPlan(1);
    const s0 = (await call('POST', '/api/v1/subscriptions/subscribers', { planId: plan.id, email: 'late@example.com' }))
      .body.data;
    await advance(HOUR + 1);
    await until(s0.id, (s) => s.status === 'cancelled');
    const [invoice] = await invoicesOf(s0.id);
    assert.equal(invoice.status, 'expired');
    const hook = await hookOf(s0.id, 'subscriber.cancelled');
    assert.equal(hook.data.reason, 'unpaid');
    const again = await call('POST', '/api/v1/subscriptions/subscribers', {
      planId: plan.id,
      email: 'late@example.com',
    });
    assert.equal(again.status, 201);
  });

  it('rebuilds plans and subscribers from zero into the rows it projected as the events came', async () => {
    await assertRebuildGivesTheSameRows(svc.service, 'subscriptions');
  });
});

describe('subscriptions in the service process', () => {
  it('enrolls, pays, activates, renews and lapses over real HTTP against `npm start`', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'invoicing-subscriptions-'));
    const proc = await startProcess({ DATA_DIR: dir, CHAIN_TRON_CONFIRMATIONS: '2' });
    const adminToken = /admin token:\s+(\S+)/.exec(proc.output())?.[1];
    const key = /demo API key:\s+(pk_live_\S+)/.exec(proc.output())?.[1];
    assert.ok(adminToken && key, proc.output());
    const call = async (method: string, path: string, body?: unknown, token: string | undefined = key) => {
      const res = await fetch(proc.url + path, {
        method,
        headers: {
          ...(token && { authorization: `Bearer ${token}` }),
          ...(body !== undefined && { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as any };
    };
    try {
      const plan = await call('POST', '/api/v1/subscriptions/plans', {
        name: 'Monthly',
        amount: '15',
        currency: 'USD',
        interval: 'month',
        gracePeriodHours: 24,
      });
      assert.equal(plan.status, 201, JSON.stringify(plan.body));
      const enrolled = await call('POST', '/api/v1/subscriptions/subscribers', {
        planId: plan.body.data.id,
        email: 'process@example.com',
      });
      assert.equal(enrolled.status, 201);
      const id = enrolled.body.data.id;
      const subscriber = async () => (await call('GET', `/api/v1/subscriptions/subscribers/${id}`)).body.data;
      const [invoice] = (await call('GET', `/api/v1/subscriptions/subscribers/${id}/invoices`)).body.data;

      const address = await call(
        'POST',
        `/api/v1/invoices/${invoice.id}/addresses`,
        { chain: 'tron', token: 'USDT' },
        undefined,
      );
      assert.equal(address.status, 201);
      await call(
        'POST',
        '/dev/v1/chains/tron/transfers',
        { to: address.body.data.address, amount: address.body.data.cryptoAmount, token: 'USDT' },
        adminToken,
      );
      await call('POST', '/dev/v1/chains/tron/blocks', { count: 1 }, adminToken);
      await eventually(subscriber, (s) => s.status === 'active');

      const periodEnd = Date.parse(enrolled.body.data.currentPeriodEnd);
      const seconds = Math.ceil((periodEnd - Date.parse(enrolled.body.data.createdAt)) / 1000) + 60;
      await call('POST', '/dev/v1/clock/advance', { seconds }, adminToken);
      const renewed = await eventually(subscriber, (s) => s.currentPeriodStart === enrolled.body.data.currentPeriodEnd);
      assert.equal(renewed.status, 'active');
      const invoices = (await call('GET', `/api/v1/subscriptions/subscribers/${id}/invoices`)).body.data;
      assert.equal(invoices.length, 2);

      await call('POST', '/dev/v1/clock/advance', { seconds: 24 * HOUR + 60 }, adminToken);
      await eventually(subscriber, (s) => s.status === 'past_due');
    } finally {
      assert.equal(await proc.stop(), 0);
      await rm(dir, { recursive: true, force: true });
    }
  });
});
