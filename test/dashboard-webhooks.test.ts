// The dashboard's Developers → Webhooks and the invoice page's history over
// plain HTTP (dashboard.md, pages 3 and 5): the webhook URL checked as the
// operator API checks it, with re-authentication; the new signing secret
// shown once and never in a later answer, and webhooks signed with it; the
// test event, the delivery log and redelivery; who may do what, CSRF, and
// another merchant's delivery; the invoice's timeline with its actors and
// its own webhook deliveries. The browser flows:
// test/dashboard-webhooks-browser.test.ts.
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { after, before, describe, it } from 'node:test';
import { actorName, eventSentence } from '../api/dashboard/developer-routes.ts';
import { INVALID_URL } from '../api/webhook-url.ts';
import { failingWebhookTargets } from '../commands/webhook-delivery.ts';
import { dashboardClient, PASSWORD } from './support/dashboard.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';
import { signatureVerifies, startWebhookReceiver, type WebhookReceiver } from './support/webhook-receiver.ts';

describe('invoice timeline wording (pure)', () => {
  it('an event in words, with its amount, confirmations and transaction; the actor by name', () => {
    assert.equal(eventSentence('InvoiceCancelled', { cancelledAt: '2026-11-28T00:00:00Z' }), 'Invoice cancelled');
    assert.equal(
      eventSentence('PaymentDetected', {
        amount: '20500000',
        token: 'USDT',
        tokenDecimals: 6,
        chain: 'tron',
        confirmations: 1,
        txHash: 'abc',
      }),
      'Payment detected: 20.500000 USDT on tron, 1 confirmation, transaction abc',
    );
    assert.equal(eventSentence('InvoiceCreated', { amount: '20.00', currency: 'USD' }), 'Invoice created: 20.00 USD');
    assert.equal(actorName({ type: 'user', userId: 'u', email: 'ann@example.com' }), 'ann@example.com');
    assert.equal(actorName({ type: 'api_key', keyId: '0123456789abcdef' }), 'API key 01234567');
    assert.equal(actorName({ type: 'operator' }), 'the operator');
    assert.equal(actorName(undefined), null);
  });
});

describe('dashboard webhooks over HTTP', () => {
  let svc: RunningService;
  let receiver: WebhookReceiver;
  let merchantId: string;
  let shopKey: string;
  let otherMerchantId: string;
  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  /** Moves a user's sessions' last authentication `minutes` into the past. */
  const age = (userId: string, minutes: number) =>
    sql`update dashboard_sessions set authenticated_at = authenticated_at - make_interval(mins => ${minutes})
        where user_id = ${userId}`.execute(svc.service.database.db);
  const deliveryIds = (page: string) => [...page.matchAll(/data-delivery-id="([0-9a-f-]{36})"/g)].map((m) => m[1]!);

  before(async () => {
    // The receiver listens on 127.0.0.1, which only this setting lets webhooks reach.
    svc = await startTestService({ RATE_LIMITS: 'off', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' });
    receiver = await startWebhookReceiver();
    const shop = await merchantWithKey(svc, { name: 'Fish & Chips' });
    merchantId = shop.merchant.id;
    shopKey = shop.key;
    otherMerchantId = (await merchantWithKey(svc, { name: 'Other shop' })).merchant.id;
  });
  after(async () => {
    await svc?.close();
    await receiver?.close();
  });

  it('a developer sets the webhook URL, checked as the operator API checks it; after 5 minutes only with the password', async () => {
    const dev = await dashboardClient(svc, merchantId, 'dev@example.com', 'developer');
    const page = await dev.get('/dashboard/developers/webhooks');
    assert.equal(page.status, 200);
    assert.ok(page.text.includes('href="/dashboard/developers/webhooks"'), 'in the navigation');
    assert.ok(!page.text.includes('id="url-reauth-password"'), 'signed in just now: no password asked');

    for (const bad of ['not a url', 'ftp://example.com/hooks', 'https://user:pw@example.com/']) {
      const refused = await dev.post('/dashboard/developers/webhooks/url', { url: bad });
      assert.equal(refused.status, 400, bad);
      assert.ok(refused.text.includes(INVALID_URL), bad);
    }
    const tooLong = await dev.post('/dashboard/developers/webhooks/url', {
      url: `https://example.com/${'a'.repeat(2048)}`,
    });
    assert.equal(tooLong.status, 400);

    const set = await dev.post('/dashboard/developers/webhooks/url', { url: `${receiver.url}/hooks` });
    assert.equal(set.status, 303, set.text);
    assert.equal(
      (await admin('GET', `/admin/v1/merchants/${merchantId}`)).body.data.webhookUrl,
      `${receiver.url}/hooks`,
    );
    const events = await svc.service.store.readStream(`merchant-${merchantId}`);
    assert.deepEqual(events.at(-1)!.metadata.actor, { type: 'user', userId: dev.userId, email: 'dev@example.com' });
    assert.ok((await dev.get('/dashboard/developers/webhooks')).text.includes(`value="${receiver.url}/hooks"`));

    const noCsrf = await dev.post('/dashboard/developers/webhooks/url', { url: '' }, { csrf: false });
    assert.equal(noCsrf.status, 403);

    await age(dev.userId, 6);
    assert.ok((await dev.get('/dashboard/developers/webhooks')).text.includes('id="url-reauth-password"'));
    const without = await dev.post('/dashboard/developers/webhooks/url', { url: 'https://example.com/other' });
    assert.equal(without.status, 403);
    assert.ok(without.text.includes('Your password or code is not right.'));
    const secretWithout = await dev.post('/dashboard/developers/webhooks/secret', {});
    assert.equal(secretWithout.status, 403, 'a new secret too');
    assert.equal(
      (await admin('GET', `/admin/v1/merchants/${merchantId}`)).body.data.webhookUrl,
      `${receiver.url}/hooks`,
    );
    const withPassword = await dev.post('/dashboard/developers/webhooks/url', {
      url: `${receiver.url}/hooks`,
      password: PASSWORD,
    });
    assert.equal(withPassword.status, 303, withPassword.text);
  });

  it('a new secret is shown once, signs the webhooks from then on, and is in no later answer', async () => {
    const admin1 = await dashboardClient(svc, merchantId, 'admin@example.com', 'admin');
    const rotated = await admin1.post('/dashboard/developers/webhooks/secret', {});
    assert.equal(rotated.status, 201, rotated.text);
    const secret = /id="new-secret">(whsec_[^<]+)</.exec(rotated.text)?.[1];
    assert.ok(secret);
    const events = await svc.service.store.readStream(`merchant-${merchantId}`);
    assert.equal(events.at(-1)!.type, 'WebhookSecretRotated');
    assert.deepEqual(events.at(-1)!.metadata.actor, {
      type: 'user',
      userId: admin1.userId,
      email: 'admin@example.com',
    });

    // The test event: sent now, signed with the new secret, in the log.
    const url = `${receiver.url}/hooks`;
    const tested = await admin1.post('/dashboard/developers/webhooks/test', { eventType: 'invoice.confirmed', url });
    assert.equal(tested.status, 200, tested.text);
    assert.ok(tested.text.includes(`id="test-result">invoice.confirmed delivered to ${url}: HTTP 200.`));
    const got = receiver.received.at(-1)!;
    assert.equal(got.event, 'invoice.confirmed');
    assert.ok(signatureVerifies(got.signature, got.rawBody, secret), 'signed with the new secret');
    assert.ok(!tested.text.includes(secret));

    for (const path of ['/dashboard/developers/webhooks', '/dashboard', '/dashboard/developers/api-keys']) {
      assert.ok(!(await admin1.get(path)).text.includes(secret), path);
    }
    assert.ok(!JSON.stringify((await admin('GET', `/admin/v1/merchants/${merchantId}`)).body).includes(secret));
    const log = await svc.call('GET', '/api/v1/webhooks/deliveries', { token: shopKey });
    assert.ok(!JSON.stringify(log.body).includes(secret));

    // The log shows it; redelivery sends the same event again.
    const page = await admin1.get('/dashboard/developers/webhooks');
    const [deliveryId] = deliveryIds(page.text);
    assert.ok(deliveryId);
    assert.ok(page.text.includes('1 delivery'));
    const again = await admin1.post(`/dashboard/developers/webhooks/deliveries/${deliveryId}/redeliver`, {
      back: 'https://evil.example/',
    });
    assert.equal(again.status, 303);
    assert.equal(again.location, '/dashboard/developers/webhooks', 'back only to a dashboard page');
    await eventually(
      () => receiver.received.filter((r) => r.eventId === got.eventId).length,
      (n) => n === 2,
    );

    const wrongEvent = await admin1.post('/dashboard/developers/webhooks/test', { eventType: 'invoice.eaten', url });
    assert.equal(wrongEvent.status, 400);
    assert.ok(wrongEvent.text.includes('eventType must be one of'));
    const wrongUrl = await admin1.post('/dashboard/developers/webhooks/test', {
      eventType: 'invoice.confirmed',
      url: 'ftp://x',
    });
    assert.equal(wrongUrl.status, 400);
    assert.ok(wrongUrl.text.includes(INVALID_URL));
  });

  it('the delivery log pages through and filters by status', async () => {
    const dev = await dashboardClient(svc, merchantId, 'pager@example.com', 'developer');
    const url = `${receiver.url}/pages`;
    receiver.failFirst('/pages', 1000, 410);
    for (let i = 0; i < 21; i++) {
      await dev.post('/dashboard/developers/webhooks/test', { eventType: 'invoice.settled', url });
    }
    const failed = await dev.get('/dashboard/developers/webhooks?status=failed');
    assert.ok(failed.text.includes('21 deliveries'), 'a 410 is final: failed');
    assert.equal(deliveryIds(failed.text).length, 20);
    assert.ok(failed.text.includes('Page 1 of 2'));
    const second = await dev.get('/dashboard/developers/webhooks?status=failed&page=2');
    assert.equal(deliveryIds(second.text).length, 1);
    assert.ok(!deliveryIds(failed.text).includes(deliveryIds(second.text)[0]!));
    // The overview's needs-attention source: this merchant's failing URL, and no other merchant's.
    const failing = await failingWebhookTargets(svc.service.database.db, 3, merchantId);
    assert.deepEqual(
      failing.map((f) => [f.url, f.failing, f.lastStatusCode]),
      [[url, 21, 410]],
    );
    assert.deepEqual(await failingWebhookTargets(svc.service.database.db, 3, otherMerchantId), []);
    const overview = (await dev.get('/dashboard')).text;
    assert.ok(
      overview.includes(`Webhooks to ${url} failing: 21 deliveries, last answer 410`),
      'on the Overview\'s needs-attention list',
    );
  });

  it('only developers, admins and owners: a viewer and support are refused on the server; another merchant’s delivery is 404', async () => {
    const viewer = await dashboardClient(svc, merchantId, 'viewer@example.com', 'viewer');
    const support = await dashboardClient(svc, merchantId, 'support@example.com', 'support');
    for (const user of [viewer, support]) {
      assert.ok(!(await user.get('/dashboard')).text.includes('/dashboard/developers/webhooks'), 'not offered');
      assert.equal((await user.get('/dashboard/developers/webhooks')).status, 403);
      assert.equal((await user.post('/dashboard/developers/webhooks/url', { url: '' })).status, 403);
      assert.equal((await user.post('/dashboard/developers/webhooks/secret', {})).status, 403);
      assert.equal(
        (await user.post('/dashboard/developers/webhooks/test', { eventType: 'invoice.confirmed', url: receiver.url }))
          .status,
        403,
      );
    }
    assert.equal(
      (await admin('GET', `/admin/v1/merchants/${merchantId}`)).body.data.webhookUrl,
      `${receiver.url}/hooks`,
    );

    const otherDev = await dashboardClient(svc, otherMerchantId, 'dev@other.example', 'developer');
    await otherDev.post('/dashboard/developers/webhooks/test', { eventType: 'invoice.confirmed', url: receiver.url });
    const [theirs] = deliveryIds((await otherDev.get('/dashboard/developers/webhooks')).text);
    assert.ok(theirs);
    const dev = await dashboardClient(svc, merchantId, 'dev3@example.com', 'developer');
    assert.ok(!deliveryIds((await dev.get('/dashboard/developers/webhooks')).text).includes(theirs));
    const refused = await dev.post(`/dashboard/developers/webhooks/deliveries/${theirs}/redeliver`, {});
    assert.equal(refused.status, 404);
    assert.equal((await dev.post('/dashboard/developers/webhooks/deliveries/not-an-id/redeliver', {})).status, 404);
  });

  it('the invoice page: its history with who did what, and its own webhook deliveries with redeliver', async () => {
    const create = async () => {
      const created = await svc.call('POST', '/api/v1/invoices', {
        token: shopKey,
        body: { amount: '12.50', currency: 'USD' },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      return created.body.data.id as string;
    };
    const [invoiceId, otherInvoiceId] = [await create(), await create()];
    const support = await dashboardClient(svc, merchantId, 'canceller@example.com', 'support');
    for (const id of [invoiceId, otherInvoiceId]) {
      assert.equal((await support.post(`/dashboard/invoices/${id}/cancel`, {})).status, 303);
    }
    const dev = await dashboardClient(svc, merchantId, 'dev4@example.com', 'developer');
    // A cancelled invoice's webhook is invoice.expired, enqueued as the log is projected.
    const page = await eventually(
      () => dev.get(`/dashboard/invoices/${invoiceId}`),
      (p) => deliveryIds(p.text).length > 0,
    );
    assert.equal(page.status, 200);
    assert.match(page.text, /<span class="what">Invoice created: 12.50 USD<\/span>/);
    assert.match(
      page.text,
      /<span class="what">Invoice cancelled<\/span> <span class="by">by canceller@example.com<\/span>/,
    );
    const ids = deliveryIds(page.text);
    assert.equal(ids.length, 1, 'only this invoice’s webhook, not the other’s');
    assert.match(page.text, /<td>invoice.expired<\/td>/);
    assert.ok(page.text.includes('src="/dashboard/assets/invoice.js"'));
    const redelivered = await dev.post(`/dashboard/developers/webhooks/deliveries/${ids[0]}/redeliver`, {
      back: `/dashboard/invoices/${invoiceId}`,
    });
    assert.equal(redelivered.status, 303);
    assert.equal(redelivered.location, `/dashboard/invoices/${invoiceId}`);

    // A viewer reads the history but not the deliveries (webhooks:write).
    const viewer = await dashboardClient(svc, merchantId, 'viewer2@example.com', 'viewer');
    const seen = await viewer.get(`/dashboard/invoices/${invoiceId}`);
    assert.ok(seen.text.includes('by canceller@example.com'));
    assert.ok(!seen.text.includes('id="invoice-deliveries-section"'));
    // Another merchant's invoice is unknown, history and all.
    const otherDev = await dashboardClient(svc, otherMerchantId, 'dev5@other.example', 'developer');
    assert.equal((await otherDev.get(`/dashboard/invoices/${invoiceId}`)).status, 404);

    const script = await fetch(`${svc.url}/dashboard/assets/invoice.js`);
    assert.equal(script.status, 200);
    assert.match(script.headers.get('content-type') ?? '', /^text\/javascript/);
    assert.ok((await script.text()).includes('/ws/invoices/'));
  });
});
