// The dashboard's Settlements, Settings and Activity pages over plain HTTP
// (dashboard.md pages 4 and 6, the activity page): roles refused on the
// server, CSRF, re-authentication for a settlement wallet, the operator
// API's wallet checks as 4xx on the form, another merchant's settlement 404,
// the list's filters and its CSV, and who did what. In Chromium:
// test/dashboard-settings-browser.test.ts.
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { after, before, describe, it } from 'node:test';
import { totpCode } from '../api/dashboard/credentials.ts';
import { defaultConfirmations } from '../api/config.ts';
import { parseCsv } from './support/csv.ts';
import { dashboardClient, PASSWORD } from './support/dashboard.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { assertRebuildGivesTheSameRows } from './support/rebuild.ts';
import { startTestService, type RunningService } from './support/service.ts';

const ETH_WALLET = '0x9858EfFD232B4033E47d90003D41EC34EcaEda94';

describe('dashboard settlements, settings and activity over HTTP', () => {
  let svc: RunningService;
  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });

  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
  });
  after(() => svc.close());

  /** Moves a user's sessions' last authentication `minutes` into the past. */
  const ageAuthentication = (userId: string, minutes: number) =>
    sql`update dashboard_sessions set authenticated_at = authenticated_at - make_interval(mins => ${minutes})
        where user_id = ${userId}`.execute(svc.service.database.db);

  /** A 100 USD invoice of `key` paid in full with USDT on `chain`, confirmed. */
  async function paidInvoice(key: string, chain: 'ethereum' | 'tron') {
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', chain, token: 'USDT' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const p = created.body.data;
    await admin('POST', `/dev/v1/chains/${chain}/transfers`, { to: p.address, amount: p.cryptoAmount, token: 'USDT' });
    await admin('POST', `/dev/v1/chains/${chain}/blocks`, { count: defaultConfirmations[chain] });
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/status`)).body.data,
      (s) => s.status !== 'pending',
    );
    return p.paymentId as string;
  }

  it('settings: finance sets a settlement wallet, checked as the operator API checks it; name is for owners and admins', async () => {
    const { merchant } = await merchantWithKey(svc, { name: 'Wallet shop' });
    const finance = await dashboardClient(svc, merchant.id, 'fin-w@example.com', 'finance');
    const viewer = await dashboardClient(svc, merchant.id, 'viewer-w@example.com', 'viewer');
    const adminUser = await dashboardClient(svc, merchant.id, 'admin-w@example.com', 'admin');

    const page = await finance.get('/dashboard/settings');
    assert.equal(page.status, 200);
    assert.ok(page.text.includes('id="wallet-form"') && !page.text.includes('id="name-form"'));
    const viewerPage = await viewer.get('/dashboard/settings');
    assert.ok(!viewerPage.text.includes('id="wallet-form"') && !viewerPage.text.includes('id="name-form"'));

    // The operator API's checks, each a 400 on the form with its words, never a 500.
    const notAnAddress = await finance.post('/dashboard/settings/wallets', { chain: 'ethereum', address: '0x123' });
    assert.equal(notAnAddress.status, 400);
    assert.ok(notAnAddress.text.includes('&quot;0x123&quot; is not a ethereum address'), notAnAddress.text);
    const wrongChain = await finance.post('/dashboard/settings/wallets', { chain: 'tron', address: ETH_WALLET });
    assert.equal(wrongChain.status, 400);
    assert.ok(wrongChain.text.includes('is not a tron address'));
    const unknownChain = await finance.post('/dashboard/settings/wallets', { chain: 'dogecoin', address: 'D1' });
    assert.equal(unknownChain.status, 400);
    const tooLong = await finance.post('/dashboard/settings/wallets', { chain: 'ethereum', address: 'x'.repeat(129) });
    assert.equal(tooLong.status, 400);

    // Refused on the server to a viewer, and without the session's CSRF token.
    const wallet = { chain: 'ethereum', address: ETH_WALLET };
    assert.equal((await viewer.post('/dashboard/settings/wallets', wallet)).status, 403);
    assert.equal((await finance.post('/dashboard/settings/wallets', wallet, { csrf: false })).status, 403);
    assert.deepEqual((await admin('GET', `/admin/v1/merchants/${merchant.id}`)).body.data.settlementWallets, {});

    const saved = await finance.post('/dashboard/settings/wallets', wallet);
    assert.equal(saved.status, 303, saved.text);
    assert.equal(saved.location, '/dashboard/settings?saved=wallet');
    assert.deepEqual((await admin('GET', `/admin/v1/merchants/${merchant.id}`)).body.data.settlementWallets, {
      ethereum: ETH_WALLET,
    });
    // The operator's command, with the user as its actor.
    const events = await svc.service.store.readStream(`merchant-${merchant.id}`);
    assert.deepEqual(events.at(-1)!.metadata.actor, {
      type: 'user',
      userId: finance.userId,
      email: 'fin-w@example.com',
    });
    assert.deepEqual(events[0]!.metadata.actor, { type: 'operator' }, 'the operator registered it');

    // Five minutes on, the password and code are asked for again.
    await ageAuthentication(finance.userId, 6);
    assert.ok((await finance.get('/dashboard/settings')).text.includes('id="reauth-password"'));
    const removal = { chain: 'ethereum', address: '' };
    const without = await finance.post('/dashboard/settings/wallets', removal);
    assert.equal(without.status, 403);
    assert.ok(without.text.includes('Your password or code is not right.'));
    const again = await finance.post('/dashboard/settings/wallets', {
      ...removal,
      password: PASSWORD,
      code: totpCode(finance.totpSecret!, Date.now() + 30_000),
    });
    assert.equal(again.status, 303, again.text);
    assert.deepEqual((await admin('GET', `/admin/v1/merchants/${merchant.id}`)).body.data.settlementWallets, {});

    // The name: finance may not, an admin may; 1 to 200 characters as the operator API says.
    assert.equal((await finance.post('/dashboard/settings/name', { name: 'Finance shop' })).status, 403);
    assert.equal((await adminUser.post('/dashboard/settings/name', { name: '  ' })).status, 400);
    assert.equal((await adminUser.post('/dashboard/settings/name', { name: 'x'.repeat(201) })).status, 400);
    assert.equal((await adminUser.post('/dashboard/settings/name', { name: 'Renamed shop' })).status, 303);
    assert.equal((await admin('GET', `/admin/v1/merchants/${merchant.id}`)).body.data.name, 'Renamed shop');
    assert.ok((await adminUser.get('/dashboard/settings?saved=name')).text.includes('Renamed shop'));
  });

  it('settlements: filters, paging, one settlement, its CSV; refused to roles without them; another merchant’s is 404', async () => {
    const { merchant, key } = await merchantWithKey(svc, { name: 'Settled shop' });
    const owner = await dashboardClient(svc, merchant.id, 'owner-s@example.com', 'owner');
    const support = await dashboardClient(svc, merchant.id, 'support-s@example.com', 'support');
    const developer = await dashboardClient(svc, merchant.id, 'dev-s@example.com', 'developer');
    assert.equal(
      (await owner.post('/dashboard/settings/wallets', { chain: 'ethereum', address: ETH_WALLET })).status,
      303,
    );
    const paidOut = await paidInvoice(key, 'ethereum');
    // No Tron wallet: that settlement waits for one.
    const waiting = await paidInvoice(key, 'tron');
    await eventually(
      async () => (await svc.call('GET', '/api/v1/settlements', { token: key })).body.data,
      (rows: { status: string }[]) => rows.length === 2 && rows.some((r) => r.status === 'submitted'),
    );

    const all = await owner.get('/dashboard/settlements');
    assert.equal(all.status, 200);
    assert.ok(all.text.includes('id="total">2 settlements<'), all.text);
    const tron = await owner.get('/dashboard/settlements?chain=tron');
    assert.ok(tron.text.includes('id="total">1 settlement<'));
    assert.ok(tron.text.includes('pending · no_wallet'));
    assert.ok((await owner.get('/dashboard/settlements?status=submitted&token=USDT')).text.includes('1 settlement<'));
    assert.ok((await owner.get('/dashboard/settlements?token=USDC')).text.includes('0 settlements<'));
    const today = new Date().toISOString().slice(0, 10);
    assert.ok((await owner.get(`/dashboard/settlements?from=${today}&to=${today}`)).text.includes('2 settlements<'));
    assert.ok((await owner.get('/dashboard/settlements?to=2020-01-01')).text.includes('0 settlements<'));
    // Bad filters are a 400 saying why.
    for (const query of [
      'status=lost',
      'chain=dogecoin',
      'from=2026-02-30',
      'from=2026-03-02&to=2026-03-01',
      'page=0',
    ]) {
      const bad = await owner.get(`/dashboard/settlements?${query}`);
      assert.equal(bad.status, 400, query);
      assert.match(bad.text, /role="alert">[^<]+</, query);
    }

    // Support reads settlements; a developer may not, whatever the link.
    assert.equal((await support.get('/dashboard/settlements')).status, 200);
    assert.equal((await developer.get('/dashboard/settlements')).status, 403);

    // One settlement: its amounts, fees, transaction; the waiting one says why.
    const list = (await svc.call('GET', '/api/v1/settlements', { token: key })).body.data as {
      id: string;
      invoiceId: string;
    }[];
    const paid = list.find((s) => s.invoiceId === paidOut)!;
    const stuck = list.find((s) => s.invoiceId === waiting)!;
    const one = await owner.get(`/dashboard/settlements/${paid.id}`);
    assert.equal(one.status, 200);
    assert.ok(one.text.includes('100.000000 USDT on ethereum') && one.text.includes('id="settlement-net">99.000000'));
    assert.match(one.text, /id="settlement-tx">0x[0-9a-f]{64}</);
    assert.ok(
      (await owner.get(`/dashboard/settlements/${stuck.id}`)).text.includes('id="settlement-failure">no_wallet'),
    );
    const other = await merchantWithKey(svc, { name: 'Nosy shop' });
    const nosy = await dashboardClient(svc, other.merchant.id, 'nosy-s@example.com', 'owner');
    assert.equal((await nosy.get(`/dashboard/settlements/${paid.id}`)).status, 404);
    assert.equal((await nosy.get('/dashboard/settlements/not-an-id')).status, 404);
    assert.ok((await nosy.get('/dashboard/settlements')).text.includes('0 settlements<'));

    // The CSV is the finance report of the list's filters; support may read but not export.
    assert.ok(all.text.includes('id="export-csv"'));
    assert.ok(!(await support.get('/dashboard/settlements')).text.includes('id="export-csv"'));
    assert.equal((await support.get('/dashboard/settlements/export.csv')).status, 403);
    const csv = await owner.get('/dashboard/settlements/export.csv?chain=ethereum');
    assert.equal(csv.status, 200);
    assert.match(csv.headers.get('content-type')!, /^text\/csv/);
    const [header, ...rows] = parseCsv(csv.text);
    assert.equal(header![0], 'settlement_id');
    assert.deepEqual(
      rows.map((r) => r[0]),
      [paid.id],
    );
    assert.equal(rows[0]![header!.indexOf('net_amount')], '99.000000');
    const everything = parseCsv((await owner.get('/dashboard/settlements/export.csv')).text);
    assert.equal(everything.length, 3);
    assert.equal((await owner.get('/dashboard/settlements/export.csv?status=lost')).status, 400);
  });

  it('activity: who did what, the operator, API keys and people, for owners, admins and finance only', async () => {
    const { merchant, key, keyId } = await merchantWithKey(svc, { name: 'Busy shop' });
    const owner = await dashboardClient(svc, merchant.id, 'owner-a@example.com', 'owner');
    const viewer = await dashboardClient(svc, merchant.id, 'viewer-a@example.com', 'viewer');
    const created = await svc.call('POST', '/api/v1/invoices', {
      token: key,
      body: { amount: '5', currency: 'USD' },
    });
    assert.equal(created.status, 201);
    const invoiceId = created.body.data.id as string;
    // Invoice creation names its key, as cancelling does.
    const history = (await svc.call('GET', `/api/v1/invoices/${invoiceId}/events`, { token: key })).body.data;
    assert.deepEqual(history[0].actor, { type: 'api_key', keyId });
    assert.equal((await owner.post(`/dashboard/invoices/${invoiceId}/cancel`, {})).status, 303);
    assert.equal((await owner.post('/dashboard/settings/name', { name: 'Busier shop' })).status, 303);
    const other = await merchantWithKey(svc, { name: 'Quiet shop' });
    await dashboardClient(svc, other.merchant.id, 'quiet-a@example.com', 'owner');

    assert.equal((await viewer.get('/dashboard/activity')).status, 403);
    assert.ok(!(await viewer.get('/dashboard')).text.includes('href="/dashboard/activity"'));
    const page = await owner.get('/dashboard/activity');
    assert.equal(page.status, 200);
    const rows = [...page.text.matchAll(/<td class="actor">([^<]*)<\/td>\s*<td class="what">([^<]*)</g)].map(
      ([, who, what]) => `${who}: ${what}`,
    );
    const prefix = (await admin('GET', `/admin/v1/merchants/${merchant.id}/api-keys`)).body.data[0].keyPrefix;
    for (const line of [
      'owner-a@example.com: merchant updated: name',
      'owner-a@example.com: invoice cancelled',
      `API key ${prefix}…: invoice created`,
      'the operator: user invited',
      'the operator: api key issued',
      'the operator: merchant registered',
      'owner-a@example.com: invitation accepted',
    ]) {
      assert.ok(rows.includes(line), `${line} in ${rows.join('; ')}`);
    }
    assert.equal(rows[0], 'owner-a@example.com: merchant updated: name', 'newest first');
    assert.ok(!page.text.includes('quiet-a@example.com'), "another merchant's actions are not here");
    assert.ok(page.text.includes(`href="/dashboard/invoices/${invoiceId}"`));
    assert.equal((await owner.get('/dashboard/activity?page=x')).status, 400);

    await assertRebuildGivesTheSameRows(svc.service, 'activity');
  });
});
