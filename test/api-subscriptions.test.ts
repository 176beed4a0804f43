// The subscription endpoints over real HTTP: plans (operations.md §3),
// enrollment with every message of interface.md, listing, reading and
// cancelling subscribers, and the invoices they are billed with.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HOUR = 3600_000;
const UNKNOWN_ID = '6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10';

describe('subscription API', () => {
  let svc: RunningService;
  let key: string;
  let merchantId: string;
  let otherKey: string;
  let readOnly: string;
  let invoicesOnly: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', PUBLIC_BASE_URL: 'https://pay.example.com' });
    const main = await merchantWithKey(svc, { name: 'Main Shop' });
    key = main.key;
    merchantId = main.merchant.id;
    otherKey = (await merchantWithKey(svc, { name: 'Other' })).key;
    readOnly = (await merchantWithKey(svc, { permissions: ['subscriptions:read'] })).key;
    invoicesOnly = (await merchantWithKey(svc, { permissions: ['invoices:read', 'invoices:write'] })).key;
  });
  after(() => svc.close());

  const call = (method: string, path: string, body?: unknown, token = key, headers?: Record<string, string>) =>
    svc.call(method, path, { token, body, ...(headers && { headers }) });
  const createPlan = async (body: Record<string, unknown> = {}, token = key) => {
    const res = await call(
      'POST',
      '/api/v1/subscriptions/plans',
      { name: 'Pro', amount: '19.99', currency: 'USD', interval: 'month', ...body },
      token,
    );
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data;
  };
  const enroll = (body: Record<string, unknown>, token = key, headers?: Record<string, string>) =>
    call('POST', '/api/v1/subscriptions/subscribers', body, token, headers);
  let emails = 0;
  const email = () => `customer${++emails}@example.com`;

  describe('plans', () => {
    it('creates a plan with the defaults of operations.md: one interval, 72 hours of grace', async () => {
      const res = await call('POST', '/api/v1/subscriptions/plans', {
        name: 'Basic',
        amount: '9.50',
        currency: 'eur',
        interval: 'week',
      });
      assert.equal(res.status, 201);
      const plan = res.body.data;
      assert.deepEqual(Object.keys(plan).sort(), [
        'amount',
        'archivedAt',
        'createdAt',
        'currency',
        'description',
        'gracePeriodHours',
        'id',
        'interval',
        'intervalCount',
        'merchantId',
        'name',
        'status',
        'updatedAt',
      ]);
      assert.match(plan.id, UUID);
      assert.equal(plan.merchantId, merchantId);
      assert.equal(plan.amount, '9.50');
      assert.equal(plan.currency, 'EUR');
      assert.equal(plan.interval, 'week');
      assert.equal(plan.intervalCount, 1);
      assert.equal(plan.gracePeriodHours, 72);
      assert.equal(plan.description, null);
      assert.equal(plan.status, 'active');
      assert.equal(plan.archivedAt, null);
      assert.match(plan.createdAt, ISO);
      const read = await call('GET', `/api/v1/subscriptions/plans/${plan.id}`);
      assert.equal(read.status, 200);
      assert.deepEqual(read.body.data, plan);
    });

    it('answers every 400 of plan creation with a clear message', async () => {
      const base = { name: 'Pro', amount: '10', currency: 'USD', interval: 'month' };
      const cases: [Record<string, unknown>, string][] = [
        [{ amount: 10 }, 'Amount must be greater than 0'],
        [{ amount: '0' }, 'Amount must be greater than 0'],
        [{ amount: undefined }, 'Amount must be greater than 0'],
        [{ currency: '' }, 'Currency is required'],
        [{ currency: 'EURO' }, 'Currency must be a 3-letter ISO 4217 code'],
        [{ name: '' }, 'Name is required'],
        [{ name: 42 }, 'Name must be a string'],
        [{ interval: 'fortnight' }, 'Interval must be one of day, week, month, year'],
        [{ interval: undefined }, 'Interval must be one of day, week, month, year'],
        [{ intervalCount: 0 }, 'Interval count must be a whole number from 1 to 365'],
        [{ intervalCount: '2' }, 'Interval count must be a whole number from 1 to 365'],
        [{ gracePeriodHours: 0 }, 'Grace period hours must be a whole number from 1 to 8760'],
        [{ gracePeriodHours: 1.5 }, 'Grace period hours must be a whole number from 1 to 8760'],
        [{ description: 'x'.repeat(1001) }, 'Description must be at most 1000 characters'],
        [{ description: 5 }, 'Description must be a string'],
      ];
      for (const [change, message] of cases) {
        const res = await call('POST', '/api/v1/subscriptions/plans', { ...base, ...change });
        assert.equal(res.status, 400, `${JSON.stringify(change)} → ${JSON.stringify(res.body)}`);
        assert.deepEqual(Object.keys(res.body).sort(), ['correlationId', 'error', 'message']);
        assert.equal(res.body.error, 'Bad Request');
        assert.equal(res.body.message, message, JSON.stringify(change));
      }
    });

    it('lists the merchant’s plans newest first, by status, paginated; archives once', async () => {
      const { key: own } = await merchantWithKey(svc);
      const a = await createPlan({ name: 'A' }, own);
      const b = await createPlan({ name: 'B', interval: 'year', intervalCount: 2, gracePeriodHours: 24 }, own);
      const c = await createPlan({ name: 'C', description: 'Third' }, own);
      const archived = await call('POST', `/api/v1/subscriptions/plans/${b.id}/archive`, undefined, own);
      assert.equal(archived.status, 200);
      assert.equal(archived.body.data.status, 'archived');
      assert.match(archived.body.data.archivedAt, ISO);
      const again = await call('POST', `/api/v1/subscriptions/plans/${b.id}/archive`, undefined, own);
      assert.equal(again.status, 200);
      assert.equal(again.body.data.archivedAt, archived.body.data.archivedAt);

      const all = await call('GET', '/api/v1/subscriptions/plans', undefined, own);
      assert.deepEqual(
        all.body.data.map((p: any) => p.name),
        ['C', 'B', 'A'],
      );
      assert.deepEqual(all.body.pagination, { total: 3, page: 1, limit: 20, totalPages: 1 });
      const active = await call('GET', '/api/v1/subscriptions/plans?status=active', undefined, own);
      assert.deepEqual(
        active.body.data.map((p: any) => p.id),
        [c.id, a.id],
      );
      const page2 = await call('GET', '/api/v1/subscriptions/plans?limit=2&page=2', undefined, own);
      assert.deepEqual(
        page2.body.data.map((p: any) => p.id),
        [a.id],
      );
      assert.deepEqual(page2.body.pagination, { total: 3, page: 2, limit: 2, totalPages: 2 });
      const bad = await call('GET', '/api/v1/subscriptions/plans?status=gone', undefined, own);
      assert.equal(bad.status, 400);
      assert.equal(bad.body.message, 'Status must be one of active, archived');
      const badLimit = await call('GET', '/api/v1/subscriptions/plans?limit=101', undefined, own);
      assert.equal(badLimit.body.message, 'Limit must be a whole number from 1 to 100');
    });

    it('reports unknown plans and other merchants’ plans as not found', async () => {
      const plan = await createPlan();
      for (const [path, token] of [
        [`/api/v1/subscriptions/plans/${UNKNOWN_ID}`, key],
        ['/api/v1/subscriptions/plans/not-a-uuid', key],
        [`/api/v1/subscriptions/plans/${plan.id}`, otherKey],
      ] as const) {
        const res = await call('GET', path, undefined, token);
        assert.equal(res.status, 404);
        assert.equal(res.body.message, 'Subscription plan not found');
      }
      const archive = await call('POST', `/api/v1/subscriptions/plans/${plan.id}/archive`, undefined, otherKey);
      assert.equal(archive.status, 404);
      assert.equal(archive.body.message, 'Subscription plan not found');
      assert.equal(
        (await call('GET', '/api/v1/subscriptions/plans', undefined, otherKey)).body.data.some(
          (p: any) => p.id === plan.id,
        ),
        false,
      );
    });

    it('needs subscriptions:write to change and subscriptions:read to read', async () => {
      const write = await call(
        'POST',
        '/api/v1/subscriptions/plans',
        { name: 'X', amount: '1', currency: 'USD', interval: 'day' },
        readOnly,
      );
      assert.equal(write.status, 403);
      assert.equal(write.body.message, 'API key does not have the required permission: subscriptions:write');
      assert.equal((await call('GET', '/api/v1/subscriptions/plans', undefined, readOnly)).status, 200);
      const read = await call('GET', '/api/v1/subscriptions/plans', undefined, invoicesOnly);
      assert.equal(read.status, 403);
      assert.equal(read.body.message, 'API key does not have the required permission: subscriptions:read');
      const enrolling = await enroll({ planId: UNKNOWN_ID, email: email() }, readOnly);
      assert.equal(enrolling.status, 403);
      assert.equal(enrolling.body.message, 'API key does not have the required permission: subscriptions:write');
      const noKey = await svc.call('GET', '/api/v1/subscriptions/subscribers');
      assert.equal(noKey.status, 401);
    });
  });

  describe('enrollment', () => {
    it('enrolls a pending subscriber with its first invoice, due at the end of the grace period', async () => {
      const plan = await createPlan({ gracePeriodHours: 48, amount: '25.00' });
      const res = await enroll({
        planId: plan.id,
        email: 'Ann@Example.com',
        externalId: 'cus_1',
        metadata: { seat: 3 },
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      const s = res.body.data;
      assert.deepEqual(Object.keys(s).sort(), [
        'cancelAtEnd',
        'createdAt',
        'currentPeriodEnd',
        'currentPeriodStart',
        'email',
        'externalId',
        'gracePeriodEndsAt',
        'id',
        'merchantId',
        'metadata',
        'planId',
        'status',
      ]);
      assert.match(s.id, UUID);
      assert.equal(s.merchantId, merchantId);
      assert.equal(s.planId, plan.id);
      assert.equal(s.email, 'Ann@Example.com');
      assert.equal(s.externalId, 'cus_1');
      assert.deepEqual(s.metadata, { seat: 3 });
      assert.equal(s.status, 'pending');
      assert.equal(s.cancelAtEnd, false);
      for (const field of ['currentPeriodStart', 'currentPeriodEnd', 'gracePeriodEndsAt', 'createdAt']) {
        assert.match(s[field], ISO);
      }
      assert.equal(s.currentPeriodStart, s.createdAt);
      assert.equal(Date.parse(s.gracePeriodEndsAt) - Date.parse(s.createdAt), 48 * HOUR);
      const start = new Date(s.currentPeriodStart);
      const end = new Date(s.currentPeriodEnd);
      assert.equal(end.getUTCDate(), Math.min(start.getUTCDate(), end.getUTCDate()));
      assert.equal((end.getUTCMonth() - start.getUTCMonth() + 12) % 12, 1);

      // Read back, and its invoice: the plan's price, expiring exactly at the end of the grace period.
      const read = await call('GET', `/api/v1/subscriptions/subscribers/${s.id}`);
      assert.equal(read.status, 200);
      assert.deepEqual(read.body.data, s);
      const invoices = await call('GET', `/api/v1/subscriptions/subscribers/${s.id}/invoices`);
      assert.equal(invoices.status, 200);
      assert.equal(invoices.body.data.length, 1);
      const [invoice] = invoices.body.data;
      assert.equal(invoice.amount, '25.00');
      assert.equal(invoice.currency, 'USD');
      assert.equal(invoice.status, 'pending');
      assert.equal(invoice.expiresAt, s.gracePeriodEndsAt);
      assert.equal(invoice.createdAt, s.createdAt);
      assert.equal(invoice.paymentUrl, `https://pay.example.com/checkout/${invoice.id}`);
      assert.match(invoice.description, /^Pro: \d{4}-\d\d-\d\d to \d{4}-\d\d-\d\d$/);
      assert.deepEqual(invoices.body.pagination, { total: 1, page: 1, limit: 20, totalPages: 1 });
      const asInvoice = await call('GET', `/api/v1/invoices/${invoice.id}`);
      assert.equal(asInvoice.status, 200);
      assert.deepEqual(asInvoice.body.data.addresses, []);
    });

    it('gives the subscription invoice a deposit address through the public addresses endpoint', async () => {
      const plan = await createPlan({ amount: '30' });
      const s = (await enroll({ planId: plan.id, email: email() })).body.data;
      const [invoice] = (await call('GET', `/api/v1/subscriptions/subscribers/${s.id}/invoices`)).body.data;
      const res = await svc.call('POST', `/api/v1/invoices/${invoice.id}/addresses`, {
        body: { chain: 'tron', token: 'USDT' },
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      assert.equal(res.body.data.paymentId, invoice.id);
      assert.equal(res.body.data.cryptoCurrency, 'USDT');
      assert.equal(res.body.data.fiatAmount, '30.00000000');
      assert.equal(res.body.data.expiresAt, s.gracePeriodEndsAt);
      const again = await svc.call('POST', `/api/v1/invoices/${invoice.id}/addresses`, {
        body: { chain: 'tron', token: 'USDT' },
      });
      assert.equal(again.status, 200);
      assert.equal(again.body.data.address, res.body.data.address);
      const status = await svc.call('GET', `/api/v1/invoices/${invoice.id}/status`);
      assert.equal(status.body.data.status, 'pending');
    });

    it('answers 404, 400 and 409 in the words of interface.md', async () => {
      const plan = await createPlan();
      const otherPlan = await createPlan({}, otherKey);
      for (const planId of [UNKNOWN_ID, 'plan_123', otherPlan.id]) {
        const res = await enroll({ planId, email: email() });
        assert.equal(res.status, 404, planId);
        assert.equal(res.body.error, 'Not Found');
        assert.equal(res.body.message, 'Subscription plan not found');
      }
      // A bad body is a 400 whatever the plan id looks like.
      for (const planId of [UNKNOWN_ID, 'plan_123']) {
        const res = await enroll({ planId, email: email(), externalId: 'x'.repeat(256) });
        assert.equal(res.status, 400, planId);
        assert.equal(res.body.message, 'External ID must be at most 255 characters');
      }
      const archivedPlan = await createPlan();
      await call('POST', `/api/v1/subscriptions/plans/${archivedPlan.id}/archive`);
      const archived = await enroll({ planId: archivedPlan.id, email: email() });
      assert.equal(archived.status, 400);
      assert.equal(archived.body.message, 'Cannot enroll into an archived plan');

      const first = await enroll({ planId: plan.id, email: 'dup@example.com' });
      assert.equal(first.status, 201);
      const dup = await enroll({ planId: plan.id, email: ' DUP@example.COM ' });
      assert.equal(dup.status, 409);
      assert.equal(dup.body.error, 'Conflict');
      assert.equal(dup.body.message, 'Subscriber is already enrolled in this plan (status: pending)');
      // The same address in another plan is another enrollment.
      const elsewhere = await enroll({ planId: (await createPlan()).id, email: 'dup@example.com' });
      assert.equal(elsewhere.status, 201);
    });

    it('checks the request body', async () => {
      const plan = await createPlan();
      const cases: [Record<string, unknown>, string][] = [
        [{ email: email() }, 'Plan ID is required'],
        [{ planId: 5, email: email() }, 'Plan ID is required'],
        [{ planId: plan.id }, 'Email is required'],
        [{ planId: plan.id, email: '  ' }, 'Email is required'],
        [{ planId: plan.id, email: 'nobody' }, 'Email must be a valid e-mail address'],
        [{ planId: plan.id, email: email(), externalId: 7 }, 'External ID must be a string'],
        [
          { planId: plan.id, email: email(), externalId: 'x'.repeat(256) },
          'External ID must be at most 255 characters',
        ],
        [{ planId: plan.id, email: email(), metadata: 'gold' }, 'Metadata must be an object of key-value pairs'],
        [{ planId: plan.id, email: email(), metadata: [1] }, 'Metadata must be an object of key-value pairs'],
      ];
      for (const [body, message] of cases) {
        const res = await enroll(body);
        assert.equal(res.status, 400, `${JSON.stringify(body).slice(0, 80)} → ${JSON.stringify(res.body)}`);
        assert.equal(res.body.message, message);
      }
      const longest = await enroll({ planId: plan.id, email: email(), externalId: 'x'.repeat(255) });
      assert.equal(longest.status, 201);
      assert.equal(longest.body.data.externalId.length, 255);
    });

    it('enrolls one of many concurrent enrollments of the same address; the others get 409', async () => {
      const plan = await createPlan();
      const results = await Promise.all(
        Array.from({ length: 6 }, () => enroll({ planId: plan.id, email: 'race@example.com' })),
      );
      const statuses = results.map((r) => r.status).sort();
      assert.deepEqual(statuses, [201, 409, 409, 409, 409, 409], JSON.stringify(results.map((r) => r.body)));
      for (const r of results.filter((r) => r.status === 409)) {
        assert.equal(r.body.message, 'Subscriber is already enrolled in this plan (status: pending)');
      }
      const listed = await call('GET', `/api/v1/subscriptions/subscribers?planId=${plan.id}`);
      assert.equal(listed.body.pagination.total, 1);
    });

    it('replays an enrollment retried with the same Idempotency-Key', async () => {
      const plan = await createPlan();
      const body = { planId: plan.id, email: email() };
      const first = await enroll(body, key, { 'idempotency-key': 'enroll-1' });
      const retry = await enroll(body, key, { 'idempotency-key': 'enroll-1' });
      assert.equal(first.status, 201);
      assert.equal(retry.status, 201);
      assert.deepEqual(retry.body.data, first.body.data);
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    });
  });

  describe('subscribers', () => {
    it('lists by plan and status, newest first, paginated, only the merchant’s own', async () => {
      const { key: own } = await merchantWithKey(svc);
      const p1 = await createPlan({ name: 'One' }, own);
      const p2 = await createPlan({ name: 'Two' }, own);
      const a = (await enroll({ planId: p1.id, email: 'a@example.com' }, own)).body.data;
      const b = (await enroll({ planId: p1.id, email: 'b@example.com' }, own)).body.data;
      const c = (await enroll({ planId: p2.id, email: 'c@example.com' }, own)).body.data;
      await call('POST', `/api/v1/subscriptions/subscribers/${b.id}/cancel`, {}, own);

      const list = async (query: string) =>
        (await call('GET', `/api/v1/subscriptions/subscribers${query}`, undefined, own)).body;
      assert.deepEqual(
        (await list('')).data.map((s: any) => s.id),
        [c.id, b.id, a.id],
      );
      assert.deepEqual(
        (await list(`?planId=${p1.id}`)).data.map((s: any) => s.id),
        [b.id, a.id],
      );
      assert.deepEqual(
        (await list(`?planId=${p1.id}&status=pending`)).data.map((s: any) => s.id),
        [a.id],
      );
      assert.deepEqual(
        (await list('?status=cancelled')).data.map((s: any) => s.id),
        [b.id],
      );
      const paged = await list('?limit=1&page=3');
      assert.deepEqual(
        paged.data.map((s: any) => s.id),
        [a.id],
      );
      assert.deepEqual(paged.pagination, { total: 3, page: 3, limit: 1, totalPages: 3 });
      assert.equal(
        (await list('?status=paused')).message,
        'Status must be one of pending, active, past_due, cancelled',
      );
      assert.equal((await list('?planId=abc')).message, 'planId must be a UUID');
      const theirs = await call('GET', '/api/v1/subscriptions/subscribers', undefined, otherKey);
      assert.equal(
        theirs.body.data.some((s: any) => [a.id, b.id, c.id].includes(s.id)),
        false,
      );
    });

    it('reports unknown subscribers and other merchants’ subscribers as not found', async () => {
      const plan = await createPlan();
      const s = (await enroll({ planId: plan.id, email: email() })).body.data;
      for (const [method, path, token] of [
        ['GET', `/api/v1/subscriptions/subscribers/${UNKNOWN_ID}`, key],
        ['GET', '/api/v1/subscriptions/subscribers/nope', key],
        ['GET', `/api/v1/subscriptions/subscribers/${s.id}`, otherKey],
        ['GET', `/api/v1/subscriptions/subscribers/${s.id}/invoices`, otherKey],
        ['POST', `/api/v1/subscriptions/subscribers/${s.id}/cancel`, otherKey],
        ['POST', `/api/v1/subscriptions/subscribers/${UNKNOWN_ID}/cancel`, key],
      ] as const) {
        const res = await call(method, path, method === 'POST' ? {} : undefined, token);
        assert.equal(res.status, 404, `${method} ${path}`);
        assert.equal(res.body.message, 'Subscriber not found');
      }
    });

    it('cancels at period end (cancelAtEnd) or now; the open invoice is closed; a cancelled one cannot be cancelled', async () => {
      const plan = await createPlan();
      const s = (await enroll({ planId: plan.id, email: email() })).body.data;
      const later = await call('POST', `/api/v1/subscriptions/subscribers/${s.id}/cancel`, { atPeriodEnd: true });
      assert.equal(later.status, 200);
      assert.equal(later.body.data.cancelAtEnd, true);
      assert.equal(later.body.data.status, 'pending');
      assert.equal((await call('GET', `/api/v1/subscriptions/subscribers/${s.id}`)).body.data.cancelAtEnd, true);

      const bad = await call('POST', `/api/v1/subscriptions/subscribers/${s.id}/cancel`, { atPeriodEnd: 'yes' });
      assert.equal(bad.status, 400);
      assert.equal(bad.body.message, 'atPeriodEnd must be true or false');

      // No body at all: cancel now.
      const now = await svc.call('POST', `/api/v1/subscriptions/subscribers/${s.id}/cancel`, { token: key });
      assert.equal(now.status, 200, JSON.stringify(now.body));
      assert.equal(now.body.data.status, 'cancelled');
      const [invoice] = (await call('GET', `/api/v1/subscriptions/subscribers/${s.id}/invoices`)).body.data;
      assert.equal(invoice.status, 'expired');

      const again = await call('POST', `/api/v1/subscriptions/subscribers/${s.id}/cancel`, { atPeriodEnd: false });
      assert.equal(again.status, 400);
      assert.equal(again.body.message, 'Subscriber cannot be cancelled in its current status: cancelled');
    });

    it('enrolls the same address again after its subscriber was cancelled', async () => {
      const plan = await createPlan();
      const first = (await enroll({ planId: plan.id, email: 'back@example.com' })).body.data;
      await call('POST', `/api/v1/subscriptions/subscribers/${first.id}/cancel`, { atPeriodEnd: false });
      const second = await enroll({ planId: plan.id, email: 'back@example.com' });
      assert.equal(second.status, 201);
      assert.notEqual(second.body.data.id, first.id);
      const third = await enroll({ planId: plan.id, email: 'back@example.com' });
      assert.equal(third.status, 409);
      assert.equal(third.body.message, 'Subscriber is already enrolled in this plan (status: pending)');
    });
  });

  it('documents the subscription endpoints in the OpenAPI document', async () => {
    const doc = (await svc.call('GET', '/openapi.json')).body;
    for (const path of [
      '/api/v1/subscriptions/plans',
      '/api/v1/subscriptions/plans/{id}',
      '/api/v1/subscriptions/plans/{id}/archive',
      '/api/v1/subscriptions/subscribers',
      '/api/v1/subscriptions/subscribers/{id}',
      '/api/v1/subscriptions/subscribers/{id}/cancel',
      '/api/v1/subscriptions/subscribers/{id}/invoices',
    ]) {
      assert.ok(doc.paths[path], path);
    }
    const enrollment = doc.paths['/api/v1/subscriptions/subscribers'].post;
    assert.ok(enrollment.responses['201']);
    assert.ok(enrollment.requestBody.content['application/json'].schema.properties.externalId);
  });
});
