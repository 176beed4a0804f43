// The webhook outbox and its worker against real HTTP receivers on 127.0.0.1
// and an in-memory PGlite: signatures, retries, final failures, order per
// target, secret rotation, idempotent enqueue, giving up and redelivery.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Kysely } from 'kysely';
import { openPglite, type SqlDatabase } from '../adapters/sql/database.ts';
import { verifyWebhookSignature } from '../adapters/webhooks/sender.ts';
import {
  ORDER_HOLD_ATTEMPTS,
  enqueueWebhook,
  findWebhookDelivery,
  migrateWebhookDeliveries,
  WebhookDeliveryWorker,
  type WebhookTables,
  type WebhookWorkerOptions,
} from '../commands/webhook-delivery.ts';
import { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { readModelMigrations } from '../projections/schema.ts';
import { freshPostgres } from './support/postgres.ts';

interface Received {
  path: string;
  body: string;
  signature: string | undefined;
  headers: http.IncomingHttpHeaders;
}

/** What a receiver answers to its n-th request (0-based): a status, or 'hang' to never answer. */
type Answer = number | 'hang' | { status: number; headers: Record<string, string> };

/** The order in which all receivers of a test got their requests. */
const arrivals: { url: string; eventId: string }[] = [];

async function receiver(answer: (n: number) => Answer = () => 200) {
  const received: Received[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const n = received.length;
      received.push({
        path: req.url ?? '',
        body,
        signature: req.headers['x-webhook-signature'] as string,
        headers: req.headers,
      });
      arrivals.push({ url, eventId: (JSON.parse(body) as { eventId: string }).eventId });
      const a = answer(n);
      if (a === 'hang') return;
      if (typeof a === 'number') res.writeHead(a).end('{"received":true}');
      else res.writeHead(a.status, a.headers).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  return {
    url,
    received,
    eventIds: () => received.map((r) => (JSON.parse(r.body) as { eventId: string }).eventId),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

describe('webhook delivery', () => {
  let database: SqlDatabase;
  let db: Kysely<WebhookTables & { merchants: any }>;
  const merchantId = randomUUID();
  const SECRET = 'whsec_first_secret';
  const closers: (() => Promise<void>)[] = [];

  before(async () => {
    database = await openPglite('memory://');
    await ProjectionEngine.migrate(database, readModelMigrations);
    await migrateWebhookDeliveries(database);
    db = database.db;
    await db
      .insertInto('merchants')
      .values({
        id: merchantId,
        name: 'Hook Shop',
        tier: 'pro',
        status: 'active',
        webhook_url: null,
        webhook_secret: SECRET,
        created_at: new Date(),
        updated_at: new Date(),
      })
      .execute();
  });
  beforeEach(async () => {
    // Each test starts with an empty outbox, so old deliveries to a URL cannot hold new ones back.
    await db.deleteFrom('webhook_deliveries').execute();
    await db.updateTable('merchants').set({ webhook_secret: SECRET }).where('id', '=', merchantId).execute();
    arrivals.length = 0;
  });
  after(async () => {
    for (const close of closers) await close();
    await database.close();
  });

  const open = async (answer?: (n: number) => Answer) => {
    const r = await receiver(answer);
    closers.push(r.close);
    return r;
  };
  const worker = (options: Partial<WebhookWorkerOptions> = {}) =>
    new WebhookDeliveryWorker(database, {
      policy: { production: false, allowPrivateTargets: true },
      schedule: [5, 5, 5],
      ...options,
    });
  const enqueue = async (url: string, event = 'invoice.confirmed', eventId = randomUUID()) => {
    const payload = {
      eventId,
      event,
      createdAt: new Date().toISOString(),
      data: { invoice: { id: randomUUID(), metadata: { orderId: 'A1' } } },
    };
    await database.db.transaction().execute((trx) => enqueueWebhook(trx, { eventId, event, merchantId, url, payload }));
    return { eventId, payload };
  };
  const deliveryOf = (eventId: string) =>
    db.selectFrom('webhook_deliveries').selectAll().where('event_id', '=', eventId).executeTakeFirstOrThrow();
  /** Runs rounds of the worker until these deliveries are no longer pending. */
  async function settle(w: WebhookDeliveryWorker, eventIds: string[]) {
    for (let round = 0; round < 500; round++) {
      const rows = await db
        .selectFrom('webhook_deliveries')
        .select('status')
        .where('event_id', 'in', eventIds)
        .execute();
      if (rows.every((r) => r.status !== 'pending')) return;
      await w.deliverDue();
      await new Promise((r) => setTimeout(r, 5));
    }
    throw new Error('deliveries still pending');
  }

  it('signs the exact enqueued body so that the receiver verifies it', async () => {
    const r = await open();
    const { eventId, payload } = await enqueue(r.url);
    assert.equal(await worker().deliverDue(), 1);
    const [got] = r.received;
    assert.ok(got);
    assert.equal(got.body, JSON.stringify(payload));
    assert.equal(got.headers['content-type'], 'application/json');
    assert.match(String(got.headers['user-agent']), /crypto-invoicing-webhooks/);
    assert.match(got.signature ?? '', /^t=\d+,v1=[0-9a-f]{64}$/);
    const now = Math.floor(Date.now() / 1000);
    assert.equal(verifyWebhookSignature(got.signature, got.body, SECRET, now), true);
    assert.equal(verifyWebhookSignature(got.signature, got.body + ' ', SECRET, now), false);
    assert.equal(verifyWebhookSignature(got.signature, got.body, 'whsec_other', now), false);
    assert.equal(verifyWebhookSignature(got.signature, got.body, SECRET, now + 301), false);
    const delivery = await deliveryOf(eventId);
    assert.equal(delivery.status, 'succeeded');
    assert.equal(delivery.attempts, 1);
    assert.equal(delivery.last_status_code, 200);
    assert.equal(delivery.next_attempt_at, null);
  });

  it('retries a 500 and delivers on the third attempt, the same bytes each time', async () => {
    const r = await open((n) => (n < 2 ? 500 : 200));
    const { eventId } = await enqueue(r.url);
    const w = worker({ pollMs: 5 });
    w.start();
    try {
      await settle(w, [eventId]);
    } finally {
      await w.stop();
    }
    assert.equal(r.received.length, 3);
    assert.equal(new Set(r.received.map((x) => x.body)).size, 1);
    const delivery = await findWebhookDelivery(db, (await deliveryOf(eventId)).id, merchantId);
    assert.equal(delivery?.status, 'succeeded');
    assert.equal(delivery?.attempts, 3);
    assert.deepEqual(
      delivery?.attemptLog.map((a) => [a.attempt, a.statusCode]),
      [
        [1, 500],
        [2, 500],
        [3, 200],
      ],
    );
  });

  it('keeps 408, 429, timeouts and refused connections for another attempt', async () => {
    // Long enough that a loaded machine still gets the quick answers in time.
    const w = worker({ schedule: [60_000], timeoutMs: 2_000 });
    const r408 = await open(() => 408);
    const r429 = await open(() => 429);
    const r503 = await open(() => 503);
    const slow = await open(() => 'hang');
    const cases = [
      { url: r408.url, status: 408 },
      { url: r429.url, status: 429 },
      { url: r503.url, status: 503 },
      { url: slow.url, status: null, error: /Timed out after 2000 ms/ },
      { url: `http://127.0.0.1:${await closedPort()}/hooks`, status: null, error: /ECONNREFUSED/ },
    ];
    const ids = [];
    for (const c of cases) ids.push((await enqueue(c.url)).eventId);
    assert.equal(await w.deliverDue(), cases.length);
    for (const [i, c] of cases.entries()) {
      const d = await deliveryOf(ids[i]!);
      assert.equal(d.status, 'pending', c.url);
      assert.equal(d.attempts, 1, c.url);
      assert.equal(d.last_status_code, c.status, c.url);
      if (c.error) assert.match(d.last_error ?? '', c.error);
      assert.ok(d.next_attempt_at && new Date(d.next_attempt_at).getTime() > Date.now() + 30_000, c.url);
    }
  });

  it('gives up at once on 400, 410 and a redirect, which is not followed', async () => {
    const elsewhere = await open();
    const r400 = await open(() => 400);
    const r410 = await open(() => 410);
    const redirect = await open(() => ({ status: 302, headers: { Location: elsewhere.url } }));
    const ids = [];
    for (const url of [r400.url, r410.url, redirect.url]) ids.push((await enqueue(url)).eventId);
    assert.equal(await worker().deliverDue(), 3);
    const rows = await Promise.all(ids.map(deliveryOf));
    assert.deepEqual(
      rows.map((d) => [d.status, d.attempts, d.last_status_code]),
      [
        ['failed', 1, 400],
        ['failed', 1, 410],
        ['failed', 1, 302],
      ],
    );
    assert.match(rows[2]!.last_error ?? '', /redirects are not followed/);
    assert.equal(redirect.received.length, 1);
    assert.equal(elsewhere.received.length, 0);
  });

  it('keeps the order of one target while its first delivery is retried, and does not hold up another', async () => {
    const a = await open((n) => (n < 2 ? 500 : 200));
    const b = await open();
    const first = await enqueue(a.url);
    const second = await enqueue(a.url);
    const other = await enqueue(b.url);
    await settle(worker(), [first.eventId, second.eventId, other.eventId]);
    assert.deepEqual(a.eventIds(), [first.eventId, first.eventId, first.eventId, second.eventId]);
    assert.deepEqual(b.eventIds(), [other.eventId]);
    const order = arrivals.map((x) => x.eventId);
    assert.ok(order.indexOf(other.eventId) < order.indexOf(second.eventId), JSON.stringify(order));
    assert.ok(order.indexOf(other.eventId) < order.lastIndexOf(first.eventId), 'b waited for a');
  });

  it('lets later deliveries past one that has failed ORDER_HOLD_ATTEMPTS times in a row', async () => {
    // The first event is refused with a 500 until much later; the others are taken at once.
    const a = await open((n) => (n < ORDER_HOLD_ATTEMPTS ? 500 : 200));
    const w = worker({ schedule: [1, 1, 60_000] });
    const stuck = await enqueue(a.url);
    const next = await enqueue(a.url);
    await settle(w, [next.eventId]);
    assert.deepEqual(a.eventIds(), [...Array(ORDER_HOLD_ATTEMPTS).fill(stuck.eventId), next.eventId]);
    const held = await deliveryOf(stuck.eventId);
    assert.equal(held.status, 'pending', 'the failing one waits for its next attempt, on its own');
    assert.equal(held.series_attempts, ORDER_HOLD_ATTEMPTS);
  });

  it('signs with the secret the merchant has when the webhook is sent', async () => {
    const r = await open();
    await enqueue(r.url);
    await db.updateTable('merchants').set({ webhook_secret: 'whsec_rotated' }).where('id', '=', merchantId).execute();
    await worker().deliverDue();
    const [got] = r.received;
    const now = Math.floor(Date.now() / 1000);
    assert.equal(verifyWebhookSignature(got?.signature, got?.body ?? '', 'whsec_rotated', now), true);
    assert.equal(verifyWebhookSignature(got?.signature, got?.body ?? '', SECRET, now), false);
  });

  it('makes one delivery of the same event to the same URL, however often it is enqueued', async () => {
    const r = await open();
    const { eventId } = await enqueue(r.url);
    await enqueue(r.url, 'invoice.confirmed', eventId);
    await enqueue('http://127.0.0.1:1/other', 'invoice.confirmed', eventId);
    const rows = await db.selectFrom('webhook_deliveries').select('url').where('event_id', '=', eventId).execute();
    assert.deepEqual(rows.map((x) => x.url).sort(), ['http://127.0.0.1:1/other', r.url].sort());
  });

  it('rolls an enqueue back with the transaction it is part of', async () => {
    const eventId = randomUUID();
    await assert.rejects(
      database.db.transaction().execute(async (trx) => {
        await enqueueWebhook(trx, {
          eventId,
          event: 'invoice.expired',
          merchantId,
          url: 'http://127.0.0.1:1/x',
          payload: {},
        });
        throw new Error('projector batch failed');
      }),
    );
    const rows = await db.selectFrom('webhook_deliveries').select('id').where('event_id', '=', eventId).execute();
    assert.equal(rows.length, 0);
  });

  it('fails a delivery after the last attempt of the schedule, and redelivery sends it again', async () => {
    let healthy = false;
    const r = await open(() => (healthy ? 200 : 503));
    const { eventId } = await enqueue(r.url);
    const w = worker({ schedule: [1, 1] });
    await settle(w, [eventId]);
    const failed = await deliveryOf(eventId);
    assert.equal(failed.status, 'failed');
    assert.equal(failed.attempts, 3);
    assert.equal(failed.last_status_code, 503);
    assert.equal(r.received.length, 3);

    await assert.rejects(w.redeliver(failed.id, randomUUID()), { message: 'Webhook delivery not found' });
    await assert.rejects(w.redeliver('not-a-uuid', merchantId), { message: 'Webhook delivery not found' });
    healthy = true;
    const again = await w.redeliver(failed.id, merchantId);
    assert.equal(again.status, 'pending');
    assert.ok(again.nextAttemptAt);
    await settle(w, [eventId]);
    const delivered = await findWebhookDelivery(db, failed.id, merchantId);
    assert.equal(delivered?.status, 'succeeded');
    assert.equal(delivered?.attempts, 4);
    assert.deepEqual(
      delivered?.attemptLog.map((a) => a.statusCode),
      [503, 503, 503, 200],
    );
    // A succeeded delivery can be sent again too.
    await w.redeliver(failed.id, merchantId);
    await settle(w, [eventId]);
    assert.equal(r.received.length, 5);
  });

  it('sends each delivery once when two workers claim at the same time', async () => {
    const targets = await Promise.all([1, 2, 3, 4, 5].map(() => open()));
    for (const t of targets) await enqueue(t.url);
    const [one, two] = [worker(), worker()];
    const sent = await Promise.all([one.deliverDue(), two.deliverDue(), one.deliverDue(), two.deliverDue()]);
    assert.equal(
      sent.reduce((x, y) => x + y, 0),
      5,
    );
    assert.deepEqual(
      targets.map((t) => t.received.length),
      [1, 1, 1, 1, 1],
    );
  });

  it('does not claim a delivery whose URL has one in flight', async () => {
    const r = await open();
    const first = await enqueue(r.url);
    await enqueue(r.url);
    // Another worker holds the first one (a lease in the future).
    await db
      .updateTable('webhook_deliveries')
      .set({ locked_until: new Date(Date.now() + 60_000) })
      .where('event_id', '=', first.eventId)
      .execute();
    assert.equal(await worker().deliverDue(), 0);
    assert.equal(r.received.length, 0);
  });
});

describe('webhook delivery on PostgreSQL, workers of two processes', () => {
  it('sends each delivery exactly once and keeps each target in order while they race', async (t) => {
    const postgres = await freshPostgres();
    if (!postgres) return t.skip('TEST_DATABASE_URL is not set');
    // Two pools, as two service instances sharing one database would have.
    const [first, second] = [await postgres.open(), await postgres.open()];
    const targets: Awaited<ReturnType<typeof receiver>>[] = [];
    try {
      await ProjectionEngine.migrate(first, readModelMigrations);
      await migrateWebhookDeliveries(first);
      const merchantId = randomUUID();
      await first.db
        .insertInto('merchants')
        .values({
          id: merchantId,
          name: 'PG',
          tier: 'pro',
          status: 'active',
          webhook_secret: 'whsec_pg',
          created_at: new Date(),
          updated_at: new Date(),
        })
        .execute();
      for (let i = 0; i < 4; i++) targets.push(await receiver((n) => (n % 3 === 0 ? 500 : 200)));
      const expected = new Map<string, string[]>();
      for (let i = 0; i < 5; i++) {
        for (const target of targets) {
          const eventId = randomUUID();
          expected.set(target.url, [...(expected.get(target.url) ?? []), eventId]);
          await first.db.transaction().execute((trx) =>
            enqueueWebhook(trx, {
              eventId,
              event: 'invoice.confirmed',
              merchantId,
              url: target.url,
              payload: { eventId },
            }),
          );
        }
      }
      const options = { policy: { production: false, allowPrivateTargets: true }, schedule: [1, 1, 1, 1] };
      const workers = [new WebhookDeliveryWorker(first, options), new WebhookDeliveryWorker(second, options)];
      for (let round = 0; round < 400; round++) {
        const { n } = await first.db
          .selectFrom('webhook_deliveries')
          .select((eb) => eb.fn.countAll<string>().as('n'))
          .where('status', '=', 'pending')
          .executeTakeFirstOrThrow();
        if (Number(n) === 0) break;
        await Promise.all(workers.flatMap((w) => [w.deliverDue(), w.deliverDue()]));
      }
      for (const target of targets) {
        // Every third request gets a 500; the others are answered 200, and
        // those must be each event exactly once, in enqueue order.
        const delivered = target.eventIds().filter((_, n) => n % 3 !== 0);
        assert.deepEqual(delivered, expected.get(target.url));
      }
    } finally {
      for (const target of targets) await target.close();
      await first.close();
      await second.close();
      await postgres.drop();
    }
  });
});
