// The operator API over real HTTP: merchants, webhook secrets and API keys.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startTestService, type RunningService } from './support/service.ts';

describe('operator API', () => {
  let svc: RunningService;
  let admin: string;
  before(async () => {
    svc = await startTestService();
    admin = svc.adminToken;
  });
  after(() => svc.close());

  it('refuses a missing or wrong admin token with 401 in the error envelope', async () => {
    const missing = await svc.call('GET', '/admin/v1/merchants/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10');
    assert.equal(missing.status, 401);
    const wrong = await svc.call('POST', '/admin/v1/merchants', {
      body: { name: 'x' },
      token: 'adm_wrong_token_123456',
    });
    assert.equal(wrong.status, 401);
    assert.deepEqual(Object.keys(wrong.body).sort(), ['correlationId', 'error', 'message']);
    assert.equal(wrong.body.error, 'Unauthorized');
    assert.equal(wrong.body.message, 'Invalid admin token');
    assert.equal(wrong.headers.get('x-correlation-id'), wrong.body.correlationId);
  });

  it('creates a merchant with its webhook secret shown once, then reads and patches it', async () => {
    const created = await svc.call('POST', '/admin/v1/merchants', {
      token: admin,
      body: {
        name: 'Acme',
        tier: 'pro',
        webhookUrl: 'https://hooks.example.com/crypto',
        settlementWallets: { ethereum: '0x9858EfFD232B4033E47d90003D41EC34EcaEda94' },
      },
    });
    assert.equal(created.status, 201);
    const m = created.body.data;
    assert.match(m.id, /^[0-9a-f-]{36}$/);
    assert.equal(m.status, 'active');
    assert.equal(m.tier, 'pro');
    assert.match(m.webhookSecret, /^whsec_[0-9A-Za-z]{40,}$/);
    assert.match(m.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

    const read = await svc.call('GET', `/admin/v1/merchants/${m.id}`, { token: admin });
    assert.equal(read.status, 200);
    assert.equal(read.body.data.webhookSecret, undefined);
    assert.deepEqual(read.body.data.settlementWallets, { ethereum: '0x9858EfFD232B4033E47d90003D41EC34EcaEda94' });

    const patched = await svc.call('PATCH', `/admin/v1/merchants/${m.id}`, {
      token: admin,
      body: { name: 'Acme Ltd', status: 'suspended' },
    });
    assert.equal(patched.status, 200);
    assert.equal(patched.body.data.name, 'Acme Ltd');
    assert.equal(patched.body.data.status, 'suspended');
    assert.equal(patched.body.data.tier, 'pro');

    const rotated = await svc.call('POST', `/admin/v1/merchants/${m.id}/webhook-secret/rotate`, { token: admin });
    assert.equal(rotated.status, 200);
    assert.notEqual(rotated.body.data.webhookSecret, m.webhookSecret);
  });

  it('answers 404 for an unknown merchant and 400 for a malformed id or body', async () => {
    const unknown = await svc.call('GET', '/admin/v1/merchants/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10', { token: admin });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.message, 'Merchant not found');
    const malformed = await svc.call('GET', '/admin/v1/merchants/not-a-uuid', { token: admin });
    assert.equal(malformed.status, 400);
    assert.equal(malformed.body.message, 'id must be a UUID');
    const noName = await svc.call('POST', '/admin/v1/merchants', { token: admin, body: {} });
    assert.equal(noName.status, 400);
    assert.equal(noName.body.message, 'name is required');
    const badTier = await svc.call('POST', '/admin/v1/merchants', { token: admin, body: { name: 'a', tier: 'gold' } });
    assert.equal(badTier.body.message, 'Tier must be free or pro');
    const badChain = await svc.call('POST', '/admin/v1/merchants', {
      token: admin,
      body: { name: 'a', settlementWallets: { dogecoin: 'D123' } },
    });
    assert.equal(badChain.status, 400);
    assert.equal(badChain.body.message, 'Unknown chain in settlementWallets: dogecoin');
  });

  it('refuses a settlement wallet that is not an address of its chain, on create and on update', async () => {
    const cases: [Record<string, string>, string][] = [
      [{ ethereum: '0x123' }, 'settlementWallets.ethereum: "0x123" is not a ethereum address'],
      // A mixed-case EVM address is a checksum, and this one's is wrong.
      [
        { bsc: '0x9858EfFD232B4033E47d90003D41EC34EcaEda95' },
        'settlementWallets.bsc: "0x9858EfFD232B4033E47d90003D41EC34EcaEda95" is not a bsc address',
      ],
      [
        { tron: 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdX' },
        'settlementWallets.tron: "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdX" is not a tron address',
      ],
      [
        { bitcoin: '0x9858EfFD232B4033E47d90003D41EC34EcaEda94' },
        'settlementWallets.bitcoin: "0x9858EfFD232B4033E47d90003D41EC34EcaEda94" is not a bitcoin address',
      ],
    ];
    const created = await svc.call('POST', '/admin/v1/merchants', { token: admin, body: { name: 'Wallets' } });
    for (const [settlementWallets, message] of cases) {
      const create = await svc.call('POST', '/admin/v1/merchants', {
        token: admin,
        body: { name: 'w', settlementWallets },
      });
      assert.deepEqual([create.status, create.body.message], [400, message]);
      const update = await svc.call('PATCH', `/admin/v1/merchants/${created.body.data.id}`, {
        token: admin,
        body: { settlementWallets },
      });
      assert.deepEqual([update.status, update.body.message], [400, message]);
    }
    const read = await svc.call('GET', `/admin/v1/merchants/${created.body.data.id}`, { token: admin });
    assert.deepEqual(read.body.data.settlementWallets, {});
  });

  it('checks webhook URLs with the messages of the contract', async () => {
    const cases: [string, string][] = [
      ['not a url', 'Invalid webhook URL format'],
      ['ftp://example.com/hook', 'Invalid webhook URL format'],
      ['https://localhost/hook', 'Webhook URL cannot point to localhost or loopback addresses'],
      ['https://127.0.0.1/hook', 'Webhook URL cannot point to localhost or loopback addresses'],
      ['https://2130706433/hook', 'Webhook URL cannot point to localhost or loopback addresses'],
      ['https://0x7f.1/hook', 'Webhook URL cannot point to localhost or loopback addresses'],
      ['https://[::1]/hook', 'Webhook URL cannot point to localhost or loopback addresses'],
      ['https://[::ffff:127.0.0.1]/hook', 'Webhook URL cannot point to localhost or loopback addresses'],
      ['https://10.1.2.3/hook', 'Webhook URL cannot point to private or internal IP addresses'],
      ['https://192.168.0.10/hook', 'Webhook URL cannot point to private or internal IP addresses'],
      ['https://169.254.169.254/latest/meta-data', 'Webhook URL cannot point to private or internal IP addresses'],
      ['https://0.0.0.0/hook', 'Webhook URL cannot point to private or internal IP addresses'],
      ['https://[fd00::1]/hook', 'Webhook URL cannot point to private or internal IP addresses'],
      ['https://012.0.0.1/hook', 'Webhook URL cannot point to private or internal IP addresses'],
    ];
    for (const [webhookUrl, message] of cases) {
      const res = await svc.call('POST', '/admin/v1/merchants', { token: admin, body: { name: 'a', webhookUrl } });
      assert.equal(res.status, 400, webhookUrl);
      assert.equal(res.body.message, message, webhookUrl);
    }
  });

  it('issues keys shown once, lists them without the key, and revokes them', async () => {
    const merchant = (await svc.call('POST', '/admin/v1/merchants', { token: admin, body: { name: 'Keys' } })).body
      .data;
    const issued = await svc.call('POST', `/admin/v1/merchants/${merchant.id}/api-keys`, {
      token: admin,
      body: { name: 'backend', permissions: ['invoices:read', 'subscriptions:write'] },
    });
    assert.equal(issued.status, 201);
    const key = issued.body.data;
    assert.match(key.key, /^pk_live_[0-9A-Za-z]{43}$/);
    assert.deepEqual(key.permissions, ['invoices:read', 'subscriptions:write']);
    assert.equal(key.expiresAt, null);

    const listed = await svc.call('GET', `/admin/v1/merchants/${merchant.id}/api-keys`, { token: admin });
    assert.equal(listed.status, 200);
    assert.equal(listed.body.data.length, 1);
    assert.equal(listed.body.data[0].id, key.id);
    assert.equal(JSON.stringify(listed.body).includes(key.key), false);
    assert.equal(listed.body.data[0].keyPrefix, key.key.slice(0, 12));

    const revoked = await svc.call('POST', `/admin/v1/api-keys/${key.id}/revoke`, { token: admin });
    assert.equal(revoked.status, 200);
    assert.match(revoked.body.data.revokedAt, /Z$/);
    const again = await svc.call('POST', `/admin/v1/api-keys/${key.id}/revoke`, { token: admin });
    assert.equal(again.body.data.revokedAt, revoked.body.data.revokedAt);

    const badPermission = await svc.call('POST', `/admin/v1/merchants/${merchant.id}/api-keys`, {
      token: admin,
      body: { permissions: ['invoices:delete'] },
    });
    assert.equal(badPermission.status, 400);
    assert.match(badPermission.body.message, /^Permissions must be a list of distinct values from: invoices:read/);
    const past = await svc.call('POST', `/admin/v1/merchants/${merchant.id}/api-keys`, {
      token: admin,
      body: { expiresAt: '2001-01-01T00:00:00Z' },
    });
    assert.equal(past.body.message, 'expiresAt must be in the future');
    const unknownMerchant = await svc.call(
      'POST',
      '/admin/v1/merchants/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10/api-keys',
      {
        token: admin,
        body: {},
      },
    );
    assert.equal(unknownMerchant.status, 404);
    const unknownKey = await svc.call('POST', '/admin/v1/api-keys/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10/revoke', {
      token: admin,
    });
    assert.equal(unknownKey.status, 404);
    assert.equal(unknownKey.body.message, 'API key not found');
  });

  it('issues a key with no body as unrestricted', async () => {
    const merchant = (await svc.call('POST', '/admin/v1/merchants', { token: admin, body: { name: 'NoBody' } })).body
      .data;
    const issued = await svc.call('POST', `/admin/v1/merchants/${merchant.id}/api-keys`, { token: admin });
    assert.equal(issued.status, 201);
    assert.equal(issued.body.data.permissions, null);
  });
});
