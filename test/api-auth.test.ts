// API-key authentication, permissions and rate limits over real HTTP. A small
// fastify app puts the service's own authentication in front of probe routes,
// since every merchant endpoint uses it the same way.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { authentication } from '../api/auth.ts';
import { handleError } from '../api/errors.ts';
import { createRateLimiter, type RateLimiter } from '../api/rate-limit.ts';
import { startTestService, type RunningService } from './support/service.ts';

async function probeApp(svc: RunningService, rateLimiter: RateLimiter | undefined) {
  const app = Fastify({ genReqId: () => randomUUID() });
  app.setErrorHandler(handleError);
  const auth = authentication({ database: svc.service.database, rateLimiter, adminToken: svc.adminToken });
  app.get('/any', { preHandler: auth.merchant() }, async (request) => ({ data: request.caller }));
  app.get('/invoices', { preHandler: auth.merchant('invoices:read') }, async () => ({ data: [] }));
  app.post('/invoices', { preHandler: auth.merchant('invoices:write') }, async () => ({ data: {} }));
  app.get('/public', { preHandler: auth.public }, async () => ({ data: 'ok' }));
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    url,
    close: () => app.close(),
    async call(method: string, path: string, key?: string, authorization?: string) {
      const res = await fetch(url + path, {
        method,
        headers: { ...((key || authorization) && { authorization: authorization ?? `Bearer ${key}` }) },
      });
      return { status: res.status, headers: res.headers, body: (await res.json()) as any };
    },
  };
}

async function merchantWithKey(svc: RunningService, tier: 'free' | 'pro', permissions?: string[], expiresAt?: string) {
  const merchant = (
    await svc.call('POST', '/admin/v1/merchants', { token: svc.adminToken, body: { name: `M-${tier}`, tier } })
  ).body.data;
  const key = (
    await svc.call('POST', `/admin/v1/merchants/${merchant.id}/api-keys`, {
      token: svc.adminToken,
      body: { ...(permissions && { permissions }), ...(expiresAt && { expiresAt }) },
    })
  ).body.data;
  return { merchant, key };
}

describe('merchant authentication', () => {
  let svc: RunningService;
  let probe: Awaited<ReturnType<typeof probeApp>>;
  before(async () => {
    svc = await startTestService();
    probe = await probeApp(svc, undefined);
  });
  after(async () => {
    await probe.close();
    await svc.close();
  });

  it('answers every 401 of the contract to the letter', async () => {
    const missing = await probe.call('GET', '/any');
    assert.equal(missing.status, 401);
    assert.equal(missing.body.error, 'Unauthorized');
    assert.equal(missing.body.message, 'Missing or invalid Authorization header. Use: Bearer <api_key>');
    assert.ok(missing.body.correlationId);
    const basic = await probe.call('GET', '/any', undefined, 'Basic dXNlcjpwYXNz');
    assert.equal(basic.body.message, 'Missing or invalid Authorization header. Use: Bearer <api_key>');
    const unknown = await probe.call('GET', '/any', 'pk_live_' + 'x'.repeat(43));
    assert.equal(unknown.body.message, 'Invalid API key');
    const wrongPrefix = await probe.call('GET', '/any', 'sk_test_abc');
    assert.equal(wrongPrefix.body.message, 'Invalid API key');

    const { key } = await merchantWithKey(svc, 'free');
    assert.equal((await probe.call('GET', '/any', key.key)).status, 200);
    await svc.call('POST', `/admin/v1/api-keys/${key.id}/revoke`, { token: svc.adminToken });
    const revoked = await probe.call('GET', '/any', key.key);
    assert.equal(revoked.status, 401);
    assert.equal(revoked.body.message, 'API key has been revoked');
  });

  it('rejects an expired key at once', async () => {
    const { key } = await merchantWithKey(svc, 'free', undefined, new Date(Date.now() + 1500).toISOString());
    assert.equal((await probe.call('GET', '/any', key.key)).status, 200);
    await new Promise((r) => setTimeout(r, 1600));
    const expired = await probe.call('GET', '/any', key.key);
    assert.equal(expired.status, 401);
    assert.equal(expired.body.message, 'API key has expired');
  });

  it('gives 403 to suspended and pending-review merchants, and back to 200 when active', async () => {
    const { merchant, key } = await merchantWithKey(svc, 'free');
    for (const status of ['suspended', 'pending_review']) {
      await svc.call('PATCH', `/admin/v1/merchants/${merchant.id}`, { token: svc.adminToken, body: { status } });
      const res = await probe.call('GET', '/any', key.key);
      assert.equal(res.status, 403);
      assert.equal(res.body.error, 'Forbidden');
      assert.equal(res.body.message, 'Merchant account is not active');
    }
    await svc.call('PATCH', `/admin/v1/merchants/${merchant.id}`, {
      token: svc.adminToken,
      body: { status: 'active' },
    });
    assert.equal((await probe.call('GET', '/any', key.key)).status, 200);
  });

  it('enforces permissions, and lets an unrestricted key call anything', async () => {
    const { key: readOnly } = await merchantWithKey(svc, 'free', ['invoices:read']);
    assert.equal((await probe.call('GET', '/invoices', readOnly.key)).status, 200);
    const denied = await probe.call('POST', '/invoices', readOnly.key);
    assert.equal(denied.status, 403);
    assert.equal(denied.body.message, 'API key does not have the required permission: invoices:write');
    assert.equal((await probe.call('GET', '/any', readOnly.key)).status, 200);
    const { key: unrestricted } = await merchantWithKey(svc, 'free');
    assert.equal((await probe.call('POST', '/invoices', unrestricted.key)).status, 200);
  });

  it('identifies the merchant behind the key', async () => {
    const { merchant, key } = await merchantWithKey(svc, 'pro');
    const res = await probe.call('GET', '/any', key.key);
    assert.equal(res.body.data.merchantId, merchant.id);
    assert.equal(res.body.data.tier, 'pro');
    assert.equal(res.body.data.keyId, key.id);
  });
});

function rateLimitSuite(name: string, redisUrl: string | undefined) {
  describe(`rate limits (${name})`, () => {
    let svc: RunningService;
    let probe: Awaited<ReturnType<typeof probeApp>>;
    let limiter: RateLimiter;
    before(async () => {
      svc = await startTestService({ RATE_LIMITS: 'off' });
      // A namespace of its own: other test runs may share this Redis at the same time.
      limiter = await createRateLimiter({ publicLimit: 5, redisUrl, namespace: `ratelimit-test-${randomUUID()}` });
      probe = await probeApp(svc, limiter);
    });
    after(async () => {
      await probe.close();
      await limiter.close();
      await svc.close();
    });

    it('gives a free merchant 30 writes and 60 reads a minute, counted apart, with headers on every response', async () => {
      const { key } = await merchantWithKey(svc, 'free');
      for (let i = 1; i <= 30; i++) {
        const res = await probe.call('POST', '/invoices', key.key);
        assert.equal(res.status, 200, `write ${i}`);
        assert.equal(res.headers.get('x-ratelimit-limit'), '30');
        assert.equal(res.headers.get('x-ratelimit-remaining'), String(30 - i));
      }
      const limited = await probe.call('POST', '/invoices', key.key);
      assert.equal(limited.status, 429);
      assert.deepEqual(Object.keys(limited.body).sort(), ['correlationId', 'error', 'message', 'retryAfter']);
      assert.equal(limited.body.error, 'Too Many Requests');
      assert.equal(limited.body.message, 'Rate limit exceeded');
      assert.ok(limited.body.retryAfter >= 1 && limited.body.retryAfter <= 60);
      const reset = Number(limited.headers.get('x-ratelimit-reset'));
      const now = Date.now() / 1000;
      assert.ok(reset > now && reset <= now + 61, `reset ${reset} is a Unix time within the minute`);
      assert.equal(limited.headers.get('x-ratelimit-remaining'), '0');

      const read = await probe.call('GET', '/invoices', key.key);
      assert.equal(read.status, 200);
      assert.equal(read.headers.get('x-ratelimit-limit'), '60');
      assert.equal(read.headers.get('x-ratelimit-remaining'), '59');
    });

    it('gives a pro merchant 150 writes and 300 reads, and limits merchants apart', async () => {
      const { key: pro } = await merchantWithKey(svc, 'pro');
      const { key: other } = await merchantWithKey(svc, 'free');
      const write = await probe.call('POST', '/invoices', pro.key);
      assert.equal(write.headers.get('x-ratelimit-limit'), '150');
      assert.equal((await probe.call('GET', '/invoices', pro.key)).headers.get('x-ratelimit-limit'), '300');
      assert.equal((await probe.call('POST', '/invoices', other.key)).headers.get('x-ratelimit-remaining'), '29');
    });

    it('limits public endpoints per client address', async () => {
      const statuses = [];
      for (let i = 0; i < 6; i++) statuses.push((await probe.call('GET', '/public')).status);
      assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429]);
    });
  });
}

rateLimitSuite('in-process', undefined);

const redisUrl = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const redisAnswers = await (async () => {
  const client = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.ping();
    return true;
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
})();
if (redisAnswers) rateLimitSuite('Redis', redisUrl);
else console.log(`# skipped Redis rate-limit tests: no Redis answers at ${redisUrl}`);
