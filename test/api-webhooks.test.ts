// The webhook endpoints over real HTTP: the service's own authentication and
// error handling in front of webhookRoutes on a small fastify app (the
// service's app registers them the same way), merchants and keys made through
// the operator API of a running test service, and real receivers on 127.0.0.1.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import Fastify from 'fastify';
import { authentication } from '../api/auth.ts';
import type { ReadModels } from '../projections/schema.ts';
import { handleError } from '../api/errors.ts';
import { webhookRoutes } from '../api/routes/webhooks.ts';
import { WEBHOOK_EVENT_TYPES } from '../projections/contract/webhooks.ts';
import { verifyWebhookSignature } from '../adapters/webhooks/sender.ts';
import type { WebhookTargetPolicy } from '../adapters/webhooks/target.ts';
import { migrateWebhookDeliveries, WebhookDeliveryWorker } from '../commands/webhook-delivery.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

async function webhookApp(svc: RunningService, policy: WebhookTargetPolicy) {
  const app = Fastify({
    genReqId: () => randomUUID(),
    // The service's validation options: `errorMessage` carries a field's own wording.
    ajv: { customOptions: { keywords: ['errorMessage'], verbose: true, removeAdditional: false, coerceTypes: false } },
  });
  app.setErrorHandler(handleError);
  const db = svc.service.database.db;
  const auth = authentication({ database: svc.service.database, rateLimiter: undefined, adminToken: svc.adminToken });
  const worker = new WebhookDeliveryWorker(svc.service.database, { policy, schedule: [60_000] });
  await app.register(webhookRoutes, { auth, db: db as ReadModels, webhooks: { worker, policy } });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    worker,
    close: () => app.close(),
    async call(method: string, path: string, key: string | undefined, body?: unknown) {
      const res = await fetch(url + path, {
        method,
        headers: {
          ...(key && { authorization: `Bearer ${key}` }),
          ...(body !== undefined && { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as any };
    },
  };
}

async function receiver(answer: () => number) {
  const received: { body: string; signature: string }[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({
        body: Buffer.concat(chunks).toString('utf8'),
        signature: String(req.headers['x-webhook-signature']),
      });
      res.writeHead(answer()).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    received,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe('webhook API', () => {
  let svc: RunningService;
  let dev: Awaited<ReturnType<typeof webhookApp>>;
  let prod: Awaited<ReturnType<typeof webhookApp>>;
  let receiverStatus = 200;
  let hooks: Awaited<ReturnType<typeof receiver>>;
  let key: string;
  let merchant: { id: string; webhookSecret: string };
  let otherKey: string;
  let invoicesOnly: string;

  /**
   * Sends what is due and waits until `to` has received `count` in all: the
   * service's own delivery worker polls the same table every second and may
   * be the one that sends it.
   */
  const sendDue = async (to: { received: unknown[] }, count: number) => {
    await dev.worker.deliverDue();
    await eventually(
      () => to.received.length,
      (n) => n >= count,
    );
    assert.equal(to.received.length, count);
  };

  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' });
    await migrateWebhookDeliveries(svc.service.database);
    dev = await webhookApp(svc, { production: false, allowPrivateTargets: true });
    // Production rules, with a resolver table instead of DNS.
    prod = await webhookApp(svc, {
      production: true,
      allowPrivateTargets: false,
      resolve: async (host) => {
        const table: Record<string, string> = { 'intranet.example': '10.20.30.40', 'shop.example': '93.184.216.34' };
        const address = table[host];
        if (!address) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
        return [{ address, family: 4 }];
      },
    });
    hooks = await receiver(() => receiverStatus);
    const main = await merchantWithKey(svc, { name: 'Hook Shop' });
    key = main.key;
    merchant = main.merchant;
    otherKey = (await merchantWithKey(svc, { name: 'Other Shop' })).key;
    invoicesOnly = (await merchantWithKey(svc, { permissions: ['invoices:read'] })).key;
  });
  after(async () => {
    await dev.close();
    await prod.close();
    await hooks.close();
    await svc.close();
  });

  const sendTest = (body: unknown, app = dev, token = key) => app.call('POST', '/api/v1/webhooks/test', token, body);

  it('needs a valid key with permission webhooks:write on every endpoint', async () => {
    const endpoints: [string, string][] = [
      ['POST', '/api/v1/webhooks/test'],
      ['GET', '/api/v1/webhooks/deliveries'],
      ['GET', `/api/v1/webhooks/deliveries/${randomUUID()}`],
      ['POST', `/api/v1/webhooks/deliveries/${randomUUID()}/redeliver`],
    ];
    for (const [method, path] of endpoints) {
      const missing = await dev.call(method, path, undefined);
      assert.equal(missing.status, 401, path);
      assert.equal(missing.body.message, 'Missing or invalid Authorization header. Use: Bearer <api_key>');
      const denied = await dev.call(method, path, invoicesOnly);
      assert.equal(denied.status, 403, path);
      assert.equal(denied.body.error, 'Forbidden');
      assert.equal(denied.body.message, 'API key does not have the required permission: webhooks:write');
    }
  });

  it('checks the URL with the messages of the contract, after resolving it too', async () => {
    const cases: [string, string][] = [
      ['not a url', 'Invalid webhook URL format'],
      ['http://shop.example/hooks', 'Webhook URL must use HTTPS in production'],
      ['https://localhost/hooks', 'Webhook URL cannot point to localhost or loopback addresses'],
      ['https://[::1]/hooks', 'Webhook URL cannot point to localhost or loopback addresses'],
      ['https://10.0.0.1/hooks', 'Webhook URL cannot point to private or internal IP addresses'],
      ['https://169.254.169.254/latest', 'Webhook URL cannot point to private or internal IP addresses'],
      ['https://intranet.example/hooks', 'Webhook URL cannot point to private or internal IP addresses'],
    ];
    for (const [webhookUrl, message] of cases) {
      const res = await sendTest({ webhookUrl, eventType: 'invoice.settled' }, prod);
      assert.equal(res.status, 400, webhookUrl);
      assert.equal(res.body.error, 'Bad Request');
      assert.equal(res.body.message, message, webhookUrl);
    }
    const missing = await sendTest({ eventType: 'invoice.settled' });
    assert.equal(missing.body.message, 'Invalid webhook URL format');
  });

  it('refuses an unknown event type with the list of known ones', async () => {
    for (const eventType of ['invoice.paid', undefined, 42]) {
      const res = await sendTest({ webhookUrl: hooks.url, eventType });
      assert.equal(res.status, 400);
      assert.equal(res.body.message, `eventType must be one of ${WEBHOOK_EVENT_TYPES.join(', ')}`);
    }
  });

  it('sends a simulated invoice event with a genuine signature and logs it', async () => {
    receiverStatus = 200;
    const before = hooks.received.length;
    const res = await sendTest({ webhookUrl: hooks.url, eventType: 'invoice.settled' });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const result = res.body.data;
    assert.deepEqual(Object.keys(result).sort(), ['delivered', 'deliveryId', 'error', 'eventId', 'statusCode']);
    assert.equal(result.delivered, true);
    assert.equal(result.statusCode, 200);
    assert.equal(result.error, null);
    assert.match(result.eventId, UUID);
    assert.match(result.deliveryId, UUID);

    assert.equal(hooks.received.length, before + 1);
    const got = hooks.received.at(-1)!;
    assert.equal(
      verifyWebhookSignature(got.signature, got.body, merchant.webhookSecret, Math.floor(Date.now() / 1000)),
      true,
    );
    const event = JSON.parse(got.body);
    assert.equal(event.eventId, result.eventId);
    assert.equal(event.event, 'invoice.settled');
    assert.equal(event.test, true);
    assert.ok(!Number.isNaN(Date.parse(event.createdAt)));
    assert.equal(event.data.invoice.merchantId, merchant.id);
    assert.equal(event.data.invoice.status, 'settled');
    assert.deepEqual(event.data.invoice.metadata, { orderId: 'test_order_123' });

    const logged = await dev.call('GET', `/api/v1/webhooks/deliveries/${result.deliveryId}`, key);
    assert.equal(logged.status, 200);
    assert.equal(logged.body.data.status, 'succeeded');
    assert.equal(logged.body.data.eventId, result.eventId);
    assert.deepEqual(
      logged.body.data.attemptLog.map((a: any) => [a.attempt, a.statusCode, a.error]),
      [[1, 200, null]],
    );
  });

  it('sends subscriber events with the subscriber under data', async () => {
    const res = await sendTest({ webhookUrl: hooks.url, eventType: 'subscriber.activated' });
    assert.equal(res.body.data.delivered, true);
    const event = JSON.parse(hooks.received.at(-1)!.body);
    assert.equal(event.event, 'subscriber.activated');
    assert.equal(event.data.subscriber.status, 'active');
    assert.equal(event.data.subscriber.externalId, 'test_customer_123');
    assert.ok('metadata' in event.data.subscriber);
    assert.equal(event.data.externalId, 'test_customer_123');
    assert.deepEqual(event.data.metadata, event.data.subscriber.metadata);
    const pastDue = await sendTest({ webhookUrl: hooks.url, eventType: 'subscriber.past_due' });
    assert.equal(pastDue.status, 200);
  });

  it('signs test events with the secret as rotated', async () => {
    const rotated = await svc.call('POST', `/admin/v1/merchants/${merchant.id}/webhook-secret/rotate`, {
      token: svc.adminToken,
    });
    assert.equal(rotated.status, 200);
    const secret = rotated.body.data.webhookSecret as string;
    await sendTest({ webhookUrl: hooks.url, eventType: 'invoice.confirmed' });
    const got = hooks.received.at(-1)!;
    const now = Math.floor(Date.now() / 1000);
    assert.equal(verifyWebhookSignature(got.signature, got.body, secret, now), true);
    assert.equal(verifyWebhookSignature(got.signature, got.body, merchant.webhookSecret, now), false);
  });

  it('reports a receiver failure, lists it, and redelivers it', async () => {
    receiverStatus = 500;
    const res = await sendTest({ webhookUrl: hooks.url, eventType: 'invoice.expired' });
    assert.equal(res.status, 200);
    assert.deepEqual(
      { delivered: res.body.data.delivered, statusCode: res.body.data.statusCode, error: res.body.data.error },
      { delivered: false, statusCode: 500, error: 'HTTP 500' },
    );
    const { deliveryId, eventId } = res.body.data;

    const list = await dev.call('GET', '/api/v1/webhooks/deliveries?limit=2', key);
    assert.equal(list.status, 200);
    assert.equal(list.body.data.length, 2);
    assert.deepEqual(list.body.pagination, {
      total: list.body.pagination.total,
      page: 1,
      limit: 2,
      totalPages: Math.ceil(list.body.pagination.total / 2),
    });
    assert.ok(list.body.pagination.total >= 4);
    const newest = list.body.data[0];
    assert.deepEqual(Object.keys(newest).sort(), [
      'attempts',
      'createdAt',
      'event',
      'eventId',
      'id',
      'lastError',
      'lastStatusCode',
      'nextAttemptAt',
      'status',
      'updatedAt',
      'url',
    ]);
    assert.deepEqual(
      [newest.id, newest.eventId, newest.event, newest.url, newest.status, newest.attempts, newest.lastStatusCode],
      [deliveryId, eventId, 'invoice.expired', hooks.url, 'failed', 1, 500],
    );
    const failed = await dev.call('GET', '/api/v1/webhooks/deliveries?status=failed', key);
    assert.deepEqual(
      failed.body.data.map((d: any) => d.id),
      [deliveryId],
    );
    const subscribers = await dev.call('GET', '/api/v1/webhooks/deliveries?event=subscriber.activated', key);
    assert.deepEqual(
      subscribers.body.data.map((d: any) => d.event),
      ['subscriber.activated'],
    );
    const others = await dev.call('GET', '/api/v1/webhooks/deliveries', otherKey);
    assert.deepEqual(others.body.data, []);
    assert.equal(others.body.pagination.total, 0);

    receiverStatus = 200;
    const received = hooks.received.length;
    const again = await dev.call('POST', `/api/v1/webhooks/deliveries/${deliveryId}/redeliver`, key);
    assert.equal(again.status, 200);
    assert.equal(again.body.data.id, deliveryId);
    assert.equal(again.body.data.status, 'pending');
    assert.ok(again.body.data.nextAttemptAt);
    await sendDue(hooks, received + 1);
    assert.equal(JSON.parse(hooks.received.at(-1)!.body).eventId, eventId);
    const done = await dev.call('GET', `/api/v1/webhooks/deliveries/${deliveryId}`, key);
    assert.equal(done.body.data.status, 'succeeded');
    assert.deepEqual(
      done.body.data.attemptLog.map((a: any) => a.statusCode),
      [500, 200],
    );
  });

  it("redelivers to the recorded URL by default, and to the merchant's current URL only when asked", async () => {
    receiverStatus = 500;
    const sent = (await sendTest({ webhookUrl: hooks.url, eventType: 'invoice.confirmed' })).body.data;
    const moved = await receiver(() => 200);
    after(() => moved.close());
    const setUrl = (webhookUrl: string | null) =>
      svc.call('PATCH', `/admin/v1/merchants/${merchant.id}`, { token: svc.adminToken, body: { webhookUrl } });
    assert.equal((await setUrl(moved.url)).status, 200);
    const { webhookSecret } = (
      await svc.call('POST', `/admin/v1/merchants/${merchant.id}/webhook-secret/rotate`, { token: svc.adminToken })
    ).body.data;
    const redeliver = (body?: unknown) =>
      dev.call('POST', `/api/v1/webhooks/deliveries/${sent.deliveryId}/redeliver`, key, body);

    const bad = await redeliver({ to: 'elsewhere' });
    assert.deepEqual([bad.status, bad.body.message], [400, 'to must be one of recorded, current']);

    const oldReceived = hooks.received.length;
    for (const body of [undefined, {}, { to: 'recorded' }]) {
      const same = await redeliver(body);
      assert.deepEqual([same.status, same.body.data.id, same.body.data.url], [200, sent.deliveryId, hooks.url]);
    }
    await sendDue(hooks, oldReceived + 1);
    assert.equal(moved.received.length, 0);

    const copy = await redeliver({ to: 'current' });
    assert.equal(copy.status, 200);
    assert.notEqual(copy.body.data.id, sent.deliveryId);
    assert.deepEqual(
      [
        copy.body.data.eventId,
        copy.body.data.event,
        copy.body.data.url,
        copy.body.data.status,
        copy.body.data.attempts,
      ],
      [sent.eventId, 'invoice.confirmed', moved.url, 'pending', 0],
    );
    await sendDue(moved, 1);
    // The very bytes recorded for the event, signed with the merchant's secret.
    assert.equal(moved.received[0]!.body, hooks.received.at(-1)!.body);
    const now = Math.floor(Date.now() / 1000);
    assert.equal(
      verifyWebhookSignature(moved.received[0]!.signature, moved.received[0]!.body, webhookSecret, now),
      true,
    );
    const original = await dev.call('GET', `/api/v1/webhooks/deliveries/${sent.deliveryId}`, key);
    // Untouched by the copy: its own URL, its own two attempts (the redelivery above failed again).
    assert.deepEqual([original.body.data.url, original.body.data.attempts], [hooks.url, 2]);

    // One delivery per event and URL: asking again starts that one again.
    const again = await redeliver({ to: 'current' });
    assert.deepEqual([again.body.data.id, again.body.data.status], [copy.body.data.id, 'pending']);
    await sendDue(moved, 2);
    const both = await dev.call('GET', `/api/v1/webhooks/deliveries/${copy.body.data.id}`, key);
    assert.deepEqual([both.body.data.attempts, both.body.data.status], [2, 'succeeded']);

    assert.equal((await setUrl(null)).status, 200);
    const nowhere = await redeliver({ to: 'current' });
    assert.deepEqual([nowhere.status, nowhere.body.message], [400, 'The merchant has no webhook URL to redeliver to']);
    receiverStatus = 200;
  });

  it("answers 404 for an unknown or another merchant's delivery", async () => {
    const mine = (await sendTest({ webhookUrl: hooks.url, eventType: 'invoice.underpaid' })).body.data.deliveryId;
    for (const [id, token] of [
      [randomUUID(), key],
      ['not-a-uuid', key],
      [mine, otherKey],
    ] as const) {
      for (const [method, path] of [
        ['GET', `/api/v1/webhooks/deliveries/${id}`],
        ['POST', `/api/v1/webhooks/deliveries/${id}/redeliver`],
      ] as const) {
        const res = await dev.call(method, path, token);
        assert.equal(res.status, 404, `${method} ${path}`);
        assert.equal(res.body.error, 'Not Found');
        assert.equal(res.body.message, 'Webhook delivery not found');
      }
    }
  });

  it('checks the list query', async () => {
    const status = await dev.call('GET', '/api/v1/webhooks/deliveries?status=done', key);
    assert.equal(status.status, 400);
    assert.equal(status.body.message, 'Status must be one of pending, succeeded, failed');
    const limit = await dev.call('GET', '/api/v1/webhooks/deliveries?limit=101', key);
    assert.equal(limit.status, 400);
    assert.equal(limit.body.message, 'Limit must be a whole number from 1 to 100');
  });
});
