// The dashboard's Settings, Settlements and Activity pages in Debian's
// Chromium, driven by playwright-core: finance sets a settlement wallet from
// the keyboard (a wrong one is refused on the form with the operator API's
// words), confirms it is them when asked, and the owner filters the
// settlements on a phone, opens one, exports the list as CSV and reads who
// did what. Users are invited, accepted and signed in over HTTP
// (test/support/dashboard.ts); the browser carries their session cookie.
// The screenshots go to test/artifacts/dashboard/ (docs/dashboard/ with UPDATE_SCREENSHOTS=1).
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { sql } from 'kysely';
import type { Browser } from 'playwright-core';
import { totpCode } from '../api/dashboard/credentials.ts';
import { defaultConfirmations } from '../api/config.ts';
import { parseCsv } from './support/csv.ts';
import { launchChromium, screenshot, withoutChromium } from './support/chromium.ts';
import { dashboardClient, PASSWORD } from './support/dashboard.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

const ETH_WALLET = '0x9858EfFD232B4033E47d90003D41EC34EcaEda94';

describe('dashboard settings in a browser', { skip: withoutChromium }, () => {
  let svc: RunningService;
  let browser: Browser;
  let shop: Awaited<ReturnType<typeof merchantWithKey>>;
  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });

  before(async () => {
    [svc, browser] = await Promise.all([startTestService({ RATE_LIMITS: 'off' }), launchChromium()]);
    shop = await merchantWithKey(svc, { name: 'Fish & Chips' });
  });
  after(() => Promise.all([browser?.close(), svc?.close()]));

  /** A signed-in user of the shop and a browser page carrying their session. */
  async function signedInPage(email: string, role: string, viewport = { width: 1100, height: 800 }) {
    const user = await dashboardClient(svc, shop.merchant.id, email, role);
    const context = await browser.newContext({ viewport, acceptDownloads: true });
    const [pair] = user.setCookie!.split(';');
    const [name, value] = pair!.split('=') as [string, string];
    await context.addCookies([{ name, value, url: `${svc.url}/dashboard` }]);
    return { user, page: await context.newPage() };
  }

  it('finance sets a settlement wallet from the keyboard; a wrong one is refused on the form; later it asks who they are', async () => {
    const { user, page } = await signedInPage('finance@fish.example', 'finance');
    await page.goto(`${svc.url}/dashboard`);
    await Promise.all([page.waitForURL(/\/dashboard\/settings$/), page.click('nav >> text=Settings')]);
    await page.getByLabel('Chain', { exact: true }).selectOption('ethereum');
    await page.getByLabel(/^Address/).focus();
    await page.keyboard.type('0x123');
    await Promise.all([page.waitForLoadState('load'), page.keyboard.press('Enter')]);
    assert.match((await page.textContent('#form-error'))!, /"0x123" is not a ethereum address/);
    await screenshot(page, 'settings-wallet-refused');

    await page.getByLabel('Chain', { exact: true }).selectOption('ethereum');
    await page.getByLabel(/^Address/).fill(ETH_WALLET);
    await Promise.all([page.waitForURL(/saved=wallet$/), page.click('#save-wallet')]);
    assert.equal(await page.textContent('#saved'), 'The settlement wallet is saved.');
    assert.equal(await page.textContent('tr[data-chain="ethereum"] code'), ETH_WALLET);
    assert.equal(await page.locator('#name-form').count(), 0, 'the name is not finance’s to change');
    await screenshot(page, 'settings');

    // Five minutes later, a wallet asks for the password and code again.
    await sql`update dashboard_sessions set authenticated_at = authenticated_at - interval '6 minutes'
      where user_id = ${user.userId}`.execute(svc.service.database.db);
    await page.reload();
    await page.getByLabel('Chain', { exact: true }).selectOption('tron');
    await page.getByLabel(/^Address/).fill('TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH');
    await page.getByLabel('Your password').fill(PASSWORD);
    await page.getByLabel('Authenticator code').fill(totpCode(user.totpSecret!, Date.now() + 30_000));
    await Promise.all([page.waitForURL(/saved=wallet$/), page.click('#save-wallet')]);
    assert.deepEqual((await admin('GET', `/admin/v1/merchants/${shop.merchant.id}`)).body.data.settlementWallets, {
      ethereum: ETH_WALLET,
      tron: 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH',
    });
  });

  it('the owner filters settlements on a phone, opens one, exports the list as CSV, and reads the activity', async () => {
    // Two paid invoices: one paid out to the Ethereum wallet, one on Polygon, which has no wallet.
    for (const chain of ['ethereum', 'polygon'] as const) {
      const p = (
        await svc.call('POST', '/api/v1/payments', {
          token: shop.key,
          body: { amount: '100', currency: 'USD', chain, token: 'USDT' },
        })
      ).body.data;
      await admin('POST', `/dev/v1/chains/${chain}/transfers`, {
        to: p.address,
        amount: p.cryptoAmount,
        token: 'USDT',
      });
      await admin('POST', `/dev/v1/chains/${chain}/blocks`, { count: defaultConfirmations[chain] });
    }
    await eventually(
      async () => (await svc.call('GET', '/api/v1/settlements', { token: shop.key })).body.data,
      (rows: { status: string }[]) => rows.length === 2 && rows.some((r) => r.status === 'submitted'),
    );

    const { page } = await signedInPage('owner@fish.example', 'owner', { width: 375, height: 812 });
    await page.goto(`${svc.url}/dashboard/settlements`);
    assert.equal(await page.textContent('#total'), '2 settlements');
    await page.getByLabel('Chain', { exact: true }).selectOption('ethereum');
    await Promise.all([page.waitForURL(/chain=ethereum/), page.click('#filter')]);
    assert.equal(await page.textContent('#total'), '1 settlement');
    await screenshot(page, 'settlements');

    const download = page.waitForEvent('download');
    await page.click('#export-csv');
    const csv = parseCsv(await readFile((await (await download).path())!, 'utf8'));
    assert.equal(csv.length, 2, 'the header and the one settlement shown');
    assert.equal(csv[1]![csv[0]!.indexOf('chain')], 'ethereum');

    await Promise.all([page.waitForURL(/\/dashboard\/settlements\/[0-9a-f-]{36}$/), page.click('.settlement-link')]);
    assert.equal(await page.textContent('#settlement-net'), '99.000000 USDT');
    assert.match((await page.textContent('#settlement-tx'))!, /^0x[0-9a-f]{64}$/);
    await screenshot(page, 'settlement');

    await page.goto(`${svc.url}/dashboard/activity`);
    const actors = await page.locator('td.actor').allTextContents();
    assert.ok(actors.includes('finance@fish.example') && actors.includes('the operator'), actors.join(', '));
    assert.ok(actors.some((a) => a.startsWith('API key pk_live_')));
    await page.setViewportSize({ width: 1100, height: 800 });
    await screenshot(page, 'activity');
  });
});
