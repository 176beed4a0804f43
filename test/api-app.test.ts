// The application around the routes, over real HTTP: envelope, errors,
// catalogue, health, metrics and the OpenAPI document.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { BODY_LIMIT } from '../api/app.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('application', () => {
  let svc: RunningService;
  before(async () => {
    svc = await startTestService({ CHAINS: 'ethereum,tron,bitcoin,bsc,polygon,solana', PUBLIC_RATE_LIMIT: '1000' });
  });
  after(() => svc.close());

  it('lists the six chains with their native coins and real mainnet contracts', async () => {
    const res = await svc.call('GET', '/api/v1/chains');
    assert.equal(res.status, 200);
    assert.deepEqual(
      res.body.data.map((c: any) => [c.name, c.chainType, c.nativeCurrency]),
      [
        ['ethereum', 'evm', 'ETH'],
        ['bsc', 'evm', 'BNB'],
        ['polygon', 'evm', 'POL'],
        ['solana', 'solana', 'SOL'],
        ['tron', 'tron', 'TRX'],
        ['bitcoin', 'bitcoin', 'BTC'],
      ],
    );
    const ethereum = res.body.data[0];
    assert.deepEqual(ethereum.supportedTokens[1], {
      symbol: 'USDT',
      name: 'Tether USD',
      contractAddress: '0xdAC17F958D2ee523a2206206994597C13D831ec7',
      decimals: 6,
      standard: 'ERC20',
      iconUrl: null,
    });
    const bsc = res.body.data[1];
    assert.equal(bsc.supportedTokens.find((t: any) => t.symbol === 'USDT').decimals, 18);
    assert.equal(bsc.supportedTokens.find((t: any) => t.symbol === 'USDT').standard, 'BEP-20');
    const tron = res.body.data[4];
    assert.equal(
      tron.supportedTokens.find((t: any) => t.symbol === 'USDT').contractAddress,
      'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t',
    );
    assert.equal(res.body.data[3].supportedTokens[2].standard, 'SPL');
    assert.ok(res.headers.get('x-ratelimit-limit'), 'public endpoints carry rate-limit headers');
  });

  it('orders tokens BTC, ETH, USDT, USDC, then alphabetically', async () => {
    const res = await svc.call('GET', '/api/v1/tokens');
    assert.deepEqual(
      res.body.data.map((t: any) => t.symbol),
      ['BTC', 'ETH', 'USDT', 'USDC', 'BNB', 'POL', 'SOL', 'TRX'],
    );
    const usdt = res.body.data[2];
    assert.equal(usdt.icon, 'usdt');
    assert.deepEqual(
      usdt.chains.map((c: any) => c.chain),
      ['ethereum', 'bsc', 'polygon', 'solana', 'tron'],
    );
  });

  it('answers unknown routes with 404 and wrong methods with 405, in the envelope', async () => {
    const missing = await svc.call('GET', '/api/v1/nothing-here');
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error, 'Not Found');
    assert.equal(missing.headers.get('x-correlation-id'), missing.body.correlationId);
    const wrongMethod = await svc.call('DELETE', '/api/v1/chains');
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.body.error, 'Method Not Allowed');
    assert.match(wrongMethod.headers.get('allow') ?? '', /GET/);
    const wrongOnParam = await svc.call('DELETE', '/admin/v1/merchants/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10');
    assert.equal(wrongOnParam.status, 405);
  });

  it('refuses bodies that are too large (413), not JSON (400) or of another type (415)', async () => {
    const big = await svc.call('POST', '/admin/v1/merchants', {
      token: svc.adminToken,
      body: { name: 'x'.repeat(BODY_LIMIT + 1) },
    });
    assert.equal(big.status, 413);
    assert.equal(big.body.error, 'Payload Too Large');
    assert.ok(big.body.correlationId);
    const broken = await svc.call('POST', '/admin/v1/merchants', { token: svc.adminToken, body: '{"name":' });
    assert.equal(broken.status, 400);
    assert.equal(broken.body.message, 'Request body is not valid JSON');
    const text = await svc.call('POST', '/admin/v1/merchants', {
      token: svc.adminToken,
      body: 'name=x',
      headers: { 'content-type': 'text/csv' },
    });
    assert.equal(text.status, 415);
  });

  it('gives every response its own correlation id', async () => {
    const a = await svc.call('GET', '/healthz');
    const b = await svc.call('GET', '/healthz');
    assert.match(a.headers.get('x-correlation-id') ?? '', /^[0-9a-f-]{36}$/);
    assert.notEqual(a.headers.get('x-correlation-id'), b.headers.get('x-correlation-id'));
    assert.deepEqual(a.body, { data: { status: 'ok' } });
  });

  it('reports readiness with projection lag', async () => {
    const res = await svc.call('GET', '/readyz');
    assert.equal(res.status, 200);
    assert.equal(res.body.data.status, 'ready');
    const merchants = res.body.data.projections.find((p: any) => p.name === 'merchants');
    assert.equal(merchants.role, 'active');
    assert.equal(typeof merchants.eventsBehind, 'number');
    assert.equal(typeof merchants.msBehind, 'number');
  });

  it('exposes Prometheus metrics: requests, latency, projection lag, appends', async () => {
    await svc.call('POST', '/admin/v1/merchants', { token: svc.adminToken, body: { name: 'Metered' } });
    const res = await fetch(`${svc.url}/metrics`);
    assert.match(res.headers.get('content-type') ?? '', /text\/plain/);
    const text = await res.text();
    assert.match(text, /http_requests_total\{method="POST",route="\/admin\/v1\/merchants",status="201"\} \d+/);
    assert.match(text, /http_request_duration_seconds_bucket\{/);
    assert.match(text, /projection_lag_events\{projection="merchants"\} 0/);
    assert.match(text, /projection_lag_seconds\{projection="merchants"\}/);
    assert.match(text, /eventstore_appends_total [1-9]/);
  });

  it('serves an OpenAPI 3 document of the routes', async () => {
    const res = await svc.call('GET', '/openapi.json');
    assert.equal(res.status, 200);
    assert.match(res.body.openapi, /^3\./);
    for (const path of [
      '/api/v1/chains',
      '/api/v1/tokens',
      '/admin/v1/merchants',
      '/admin/v1/merchants/{id}/api-keys',
      '/admin/v1/api-keys/{keyId}/revoke',
    ]) {
      assert.ok(res.body.paths[path], `${path} documented`);
    }
  });
});

describe('application limits by configuration', () => {
  it('limits the public endpoints per client address with PUBLIC_RATE_LIMIT', async () => {
    const svc = await startTestService({ PUBLIC_RATE_LIMIT: '3' });
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await svc.call('GET', '/api/v1/tokens')).status);
      assert.deepEqual(statuses, [200, 200, 200, 429]);
    } finally {
      await svc.close();
    }
  });

  it('turns every limit off with RATE_LIMITS=off, and hides disabled chains', async () => {
    const svc = await startTestService({ PUBLIC_RATE_LIMIT: '1', RATE_LIMITS: 'off', CHAINS: 'tron,bitcoin' });
    try {
      for (let i = 0; i < 3; i++) {
        const res = await svc.call('GET', '/api/v1/chains');
        assert.equal(res.status, 200);
        assert.equal(res.headers.get('x-ratelimit-limit'), null);
        assert.deepEqual(
          res.body.data.map((c: any) => c.name),
          ['tron', 'bitcoin'],
        );
      }
      const tokens = await svc.call('GET', '/api/v1/tokens');
      assert.deepEqual(
        tokens.body.data.map((t: any) => t.symbol),
        ['BTC', 'USDT', 'TRX'],
      );
    } finally {
      await svc.close();
    }
  });
});
