// The dashboard's Webhooks page and the live invoice page in Debian's
// Chromium, driven by playwright-core (dashboard.md, pages 3 and 5): a
// developer sets the webhook URL, makes a new signing secret (shown once)
// and sends a test event, which the delivery log shows; an owner watches an
// invoice page while a sandbox payment arrives, and the page follows it
// without being reloaded. The screenshots go to test/artifacts/dashboard/ (docs/dashboard/ with UPDATE_SCREENSHOTS=1).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { totpCode } from '../api/dashboard/credentials.ts';
import { launchChromium, screenshot, withoutChromium } from './support/chromium.ts';
import { PASSWORD } from './support/dashboard.ts';
import { eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';
import { signatureVerifies, startWebhookReceiver, type WebhookReceiver } from './support/webhook-receiver.ts';

describe('dashboard webhooks and live invoice in a browser', { skip: withoutChromium }, () => {
  let svc: RunningService;
  let browser: Browser;
  let receiver: WebhookReceiver;
  let merchantId: string;
  let shopKey: string;
  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });

  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' });
    receiver = await startWebhookReceiver();
    const shop = await merchantWithKey(svc, { name: 'Fish & Chips' });
    merchantId = shop.merchant.id;
    shopKey = shop.key;
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await svc?.close();
    await receiver?.close();
  });

  /** Invited by the operator, accepted and signed in, in `page`. */
  async function signedIn(page: Page, email: string, role: string) {
    const invited = await admin('POST', `/admin/v1/merchants/${merchantId}/users`, { email, role });
    assert.equal(invited.status, 201, JSON.stringify(invited.body));
    await page.goto(invited.body.data.inviteUrl.replace(/^https?:\/\/[^/]+/, svc.url));
    const secret = (await page.locator('#totp-secret').count()) > 0 ? await page.textContent('#totp-secret') : null;
    await page.fill('#password', PASSWORD);
    if (secret) await page.fill('#code', totpCode(secret));
    await Promise.all([page.waitForURL(/\/dashboard\/login\?welcome=1$/), page.click('#accept')]);
    await page.fill('#email', email);
    await page.fill('#password', PASSWORD);
    // The next step's code: the current one was just used to enrol.
    if (secret) await page.fill('#code', totpCode(secret, Date.now() + 30_000));
    await Promise.all([page.waitForURL(/\/dashboard$/), page.click('#sign-in')]);
  }

  it('a developer sets the webhook URL, makes a new secret shown once, and sends a test event the log shows', async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    await signedIn(page, 'dev@fish.example', 'developer');
    await Promise.all([
      page.waitForURL(/\/developers\/webhooks$/),
      page.click('a[href="/dashboard/developers/webhooks"]'),
    ]);
    await page.fill('#webhook-url', `${receiver.url}/hooks`);
    await Promise.all([page.waitForLoadState('load'), page.click('#save-webhook-url')]);
    assert.equal(await page.inputValue('#webhook-url'), `${receiver.url}/hooks`);

    await Promise.all([page.waitForLoadState('load'), page.click('#rotate-secret')]);
    const secret = (await page.textContent('#new-secret'))!;
    assert.match(secret, /^whsec_/);
    await screenshot(page, 'webhook-secret');

    await page.selectOption('#test-event', 'invoice.overpaid');
    await Promise.all([page.waitForLoadState('load'), page.click('#send-test-event')]);
    assert.match((await page.textContent('#test-result')) ?? '', /invoice.overpaid delivered to .*: HTTP 200\./);
    const got = receiver.received.at(-1)!;
    assert.ok(signatureVerifies(got.signature, got.rawBody, secret));
    assert.ok(!(await page.content()).includes(secret), 'shown once: not on the next page');
    assert.equal(await page.locator('#deliveries tbody tr').count(), 1);
    await screenshot(page, 'webhooks');
    await page.close();
  });

  it('an owner’s invoice page follows a sandbox payment live, and copies the checkout link', async () => {
    const context = await browser.newContext({
      viewport: { width: 1100, height: 800 },
      permissions: ['clipboard-read', 'clipboard-write'],
    });
    const page = await context.newPage();
    await signedIn(page, 'owner@fish.example', 'owner');
    const payment = await svc.call('POST', '/api/v1/payments', {
      token: shopKey,
      body: { amount: '25', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(payment.status, 201, JSON.stringify(payment.body));
    const { paymentId, address } = payment.body.data;
    await page.goto(`${svc.url}/dashboard/invoices/${paymentId}`);
    await page.waitForFunction(() => document.getElementById('live-status')?.textContent?.startsWith('Following live'));
    assert.equal(await page.getAttribute('#invoice', 'data-status'), 'pending');
    // Marks this document: a reload would lose the mark.
    await page.evaluate(() => document.body.setAttribute('data-not-reloaded', 'yes'));

    await page.click('#copy-checkout-link');
    const link = await page.getAttribute('#checkout-link', 'href');
    assert.match(link ?? '', new RegExp(`/checkout/${paymentId}$`));
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), link);

    assert.equal(
      (await admin('POST', '/dev/v1/chains/ethereum/transfers', { to: address, amount: '25', token: 'USDT' })).status,
      201,
    );
    const status = () => page.getAttribute('#invoice', 'data-status');
    await eventuallyMining(
      () => admin('POST', '/dev/v1/chains/ethereum/blocks', { count: 1 }),
      status,
      (s) => s === 'confirmed' || s === 'settled',
    );
    assert.equal(await page.getAttribute('body', 'data-not-reloaded'), 'yes', 'followed without a reload');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'copy-checkout-link', 'the focus stays');
    assert.match((await page.textContent('#payments')) ?? '', /ethereum USDT/);
    const timeline = (await page.textContent('#timeline')) ?? '';
    assert.match(timeline, /Payment detected: 25\.0+ USDT on ethereum/);
    assert.match(timeline, /Invoice confirmed/);
    await screenshot(page, 'invoice-live');
    await context.close();
  });
});
