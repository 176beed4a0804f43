// The merchant dashboard in Debian's Chromium, driven by playwright-core
// (dashboard.md): the operator invites an owner, who accepts (password, TOTP
// enrolment with the key read from the page), signs in, creates an API key
// and uses it over HTTP, and finds an invoice by its deposit address; a
// viewer can change nothing; a disabled user's session ends; ten wrong
// passwords lock an address exactly as they "lock" an unknown one; an owner
// refunds an overpayment's excess and approves it. The
// screenshots go to test/artifacts/dashboard/ (docs/dashboard/ with UPDATE_SCREENSHOTS=1).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { totpCode } from '../api/dashboard/credentials.ts';
import { SIGN_IN_FAILED, SIGN_IN_LOCKED } from '../api/dashboard/routes.ts';
import { launchChromium, screenshot, withoutChromium } from './support/chromium.ts';
import { PASSWORD } from './support/dashboard.ts';
import { eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('dashboard in a browser', { skip: withoutChromium }, () => {
  let svc: RunningService;
  let browser: Browser;
  let merchantId: string;
  let shopKey: string;
  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });

  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
    const shop = await merchantWithKey(svc, { name: 'Fish & Chips' });
    merchantId = shop.merchant.id;
    shopKey = shop.key;
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await svc?.close();
  });

  /** The operator's invitation; its link's path. */
  async function invite(email: string, role: string) {
    const invited = await admin('POST', `/admin/v1/merchants/${merchantId}/users`, { email, role });
    assert.equal(invited.status, 201, JSON.stringify(invited.body));
    return { userId: invited.body.data.id as string, path: new URL(invited.body.data.inviteUrl as string).pathname };
  }

  /** Accepts an invitation in `page`; returns the TOTP key read from the page, where the role has one. */
  async function accept(page: Page, path: string, shoot?: string) {
    await page.goto(`${svc.url}${path}`);
    const secret = (await page.locator('#totp-secret').count()) > 0 ? await page.textContent('#totp-secret') : null;
    if (shoot) await screenshot(page, shoot);
    await page.fill('#password', PASSWORD);
    if (secret) await page.fill('#code', totpCode(secret));
    await Promise.all([page.waitForURL(/\/dashboard\/login\?welcome=1$/), page.click('#accept')]);
    return secret;
  }

  async function signIn(page: Page, email: string, secret: string | null, password = PASSWORD) {
    await page.goto(`${svc.url}/dashboard/login`);
    await page.fill('#email', email);
    await page.fill('#password', password);
    if (secret) await page.fill('#code', totpCode(secret));
    await Promise.all([page.waitForLoadState('load'), page.click('#sign-in')]);
  }

  it('the owner accepts, enrols TOTP, signs in, creates an API key and uses it, and finds an invoice by its address', async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    const { path } = await invite('owner@fish.example', 'owner');
    const secret = await accept(page, path, 'invite');
    assert.match(secret ?? '', /^[A-Z2-7]{32}$/);
    assert.ok(!(await page.content()).includes(secret!), 'once enrolled, the key is not shown again');

    await signIn(page, 'owner@fish.example', secret);
    assert.equal(new URL(page.url()).pathname, '/dashboard');
    assert.equal(await page.textContent('#merchant-name'), 'Fish & Chips');
    assert.equal(await page.textContent('#role'), 'owner');
    assert.ok(!(await page.content()).includes(secret!));

    // An invoice with its deposit address, made by the shop's own key.
    const payment = await svc.call('POST', '/api/v1/payments', {
      token: shopKey,
      body: { amount: '20', currency: 'USD', chain: 'tron', token: 'USDT', metadata: { orderId: 'A-1001' } },
    });
    assert.equal(payment.status, 201, JSON.stringify(payment.body));
    const { paymentId, address } = payment.body.data;
    await page.goto(`${svc.url}/dashboard`);
    await screenshot(page, 'overview');

    await page.click('text=Invoices');
    await page.fill('#q', address);
    await Promise.all([page.waitForLoadState('load'), page.click('#search')]);
    assert.equal(await page.textContent('#total'), '1 invoice');
    assert.equal(await page.textContent('.invoice-link'), paymentId);
    await screenshot(page, 'invoices-search');
    await page.fill('#q', 'A-1001');
    await Promise.all([page.waitForLoadState('load'), page.click('#search')]);
    assert.equal(await page.textContent('.invoice-link'), paymentId, 'found by the order id too');
    await Promise.all([page.waitForLoadState('load'), page.click('.invoice-link')]);
    assert.equal(await page.textContent('#invoice-id'), paymentId);
    assert.ok(((await page.textContent('#addresses')) ?? '').includes(address));
    await screenshot(page, 'invoice');

    await page.click('text=API keys');
    await page.fill('#key-name', 'shop backend');
    await page.check('input[value="invoices:read"]');
    await Promise.all([page.waitForLoadState('load'), page.click('#create-key-submit')]);
    const key = (await page.textContent('#new-key'))!;
    assert.match(key, /^pk_live_[0-9A-Za-z]{43}$/);
    await screenshot(page, 'api-key-created');
    const listed = await fetch(`${svc.url}/api/v1/invoices`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(listed.status, 200);
    const refused = await fetch(`${svc.url}/api/v1/invoices`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ amount: '1', currency: 'USD' }),
    });
    assert.equal(refused.status, 403, 'the key has only the permission chosen');
    // Shown once: the page reloaded does not have it.
    await page.goto(`${svc.url}/dashboard/developers/api-keys`);
    assert.ok(!(await page.content()).includes(key));

    // The team: the owner invites a developer, whose link is shown once.
    await page.click('text=Team');
    await page.fill('#invite-email-input', 'dev@fish.example');
    await page.selectOption('#invite-role-input', 'developer');
    await Promise.all([page.waitForLoadState('load'), page.click('#invite-submit')]);
    assert.match((await page.textContent('#invite-url')) ?? '', /\/dashboard\/invite\/[0-9A-Za-z]{43}$/);
    await screenshot(page, 'team');
    await page.close();
  });

  it('an owner refunds an overpayment’s excess from the invoice page, approves it, and sees it paid', async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    const { path } = await invite('refunds@fish.example', 'owner');
    const secret = await accept(page, path);
    await signIn(page, 'refunds@fish.example', secret);
    // 100 USD paid with 120 USDT on the sandbox Ethereum, confirmed: 20 USDT over.
    const payment = await svc.call('POST', '/api/v1/payments', {
      token: shopKey,
      body: { amount: '100', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(payment.status, 201, JSON.stringify(payment.body));
    const { paymentId, address } = payment.body.data;
    const mine = () => admin('POST', '/dev/v1/chains/ethereum/blocks', { count: 1 });
    assert.equal(
      (await admin('POST', '/dev/v1/chains/ethereum/transfers', { to: address, amount: '120', token: 'USDT' })).status,
      201,
    );
    await eventuallyMining(
      mine,
      async () => (await svc.call('GET', `/api/v1/invoices/${paymentId}/status`)).body.data.status,
      (status) => status === 'confirmed',
    );

    await page.goto(`${svc.url}/dashboard/invoices/${paymentId}`);
    await page.check('#refund-kind-excess');
    await page.fill('#refund-destination', '0x8ba1f109551bD432803012645Ac136ddd64DBA72');
    await page.fill('#refund-reason', 'paid 20 USDT too much');
    await screenshot(page, 'invoice-refund');
    await Promise.all([page.waitForURL(/\/dashboard\/refunds\/[0-9a-f-]{36}$/), page.click('#refund-submit')]);
    assert.equal(await page.textContent('#refund-status'), 'awaiting_approval');
    await Promise.all([page.waitForLoadState('load'), page.click('#approve-refund')]);
    const refundUrl = page.url();
    // The payout goes out on the sandbox chain as blocks are mined.
    await eventuallyMining(
      mine,
      async () => {
        await page.goto(refundUrl);
        return (await page.textContent('#refund-status')) ?? '';
      },
      (status) => status === 'sending' || status === 'completed',
    );
    await screenshot(page, 'refund');
    const refundId = refundUrl.split('/').at(-1)!;
    await Promise.all([page.waitForURL(/\/dashboard\/refunds$/), page.click('a[href="/dashboard/refunds"]')]);
    const row = page.locator(`tr[data-refund-id="${refundId}"] .refund-status`);
    assert.match((await row.textContent()) ?? '', /^(sending|completed)$/);
    await screenshot(page, 'refunds');
    await page.close();
  });

  it('a viewer sees no API keys and the server refuses their changes', async () => {
    const page = await browser.newPage({ viewport: { width: 375, height: 812 } });
    const { path } = await invite('viewer@fish.example', 'viewer');
    assert.equal(await accept(page, path), null, 'no authenticator for a viewer');
    await signIn(page, 'viewer@fish.example', null);
    assert.equal(await page.textContent('#role'), 'viewer');
    assert.equal(await page.locator('text=API keys').count(), 0, 'the page offers no API keys');
    const response = await page.goto(`${svc.url}/dashboard/developers/api-keys`);
    assert.equal(response?.status(), 403);
    await screenshot(page, 'viewer-refused');
    // A form made by hand, with the session's CSRF token: the server still refuses.
    await page.goto(`${svc.url}/dashboard`);
    const status = await page.evaluate(async () => {
      const csrf = (document.querySelector('input[name=_csrf]') as HTMLInputElement).value;
      const body = new URLSearchParams({ _csrf: csrf, permissions: 'invoices:write' });
      return (await fetch('/dashboard/developers/api-keys', { method: 'POST', body })).status;
    });
    assert.equal(status, 403);
    await page.close();
  });

  it('disabling a user ends their session at once', async () => {
    const page = await browser.newPage();
    const { path, userId } = await invite('support@fish.example', 'support');
    await accept(page, path);
    await signIn(page, 'support@fish.example', null);
    assert.equal(new URL(page.url()).pathname, '/dashboard');
    assert.equal((await admin('POST', `/admin/v1/users/${userId}/disable`)).status, 200);
    await page.goto(`${svc.url}/dashboard/invoices`);
    assert.equal(new URL(page.url()).pathname, '/dashboard/login');
    await page.close();
  });

  it('ten wrong passwords lock an address, and an unknown one gets the same answers', async () => {
    const page = await browser.newPage({ viewport: { width: 375, height: 812 } });
    const { path } = await invite('finance@fish.example', 'finance');
    const secret = await accept(page, path);
    const answers = async (email: string) => {
      const seen: string[] = [];
      for (let i = 0; i < 11; i++) {
        await signIn(page, email, secret, `not the password ${i}`);
        seen.push((await page.textContent('#form-error')) ?? '');
      }
      return seen;
    };
    const known = await answers('finance@fish.example');
    await screenshot(page, 'sign-in-locked');
    const unknown = await answers('nobody@fish.example');
    assert.deepEqual(known, unknown);
    assert.deepEqual(known, [...Array(10).fill(SIGN_IN_FAILED), SIGN_IN_LOCKED]);
    await signIn(page, 'finance@fish.example', secret);
    assert.equal(await page.textContent('#form-error'), SIGN_IN_LOCKED, 'even the right password, while locked');
    await page.goto(`${svc.url}/dashboard/login`);
    await screenshot(page, 'sign-in');
    await page.close();
  });
});
