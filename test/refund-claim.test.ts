// The customer's refund claim page (refunds.md): over plain HTTP (markup,
// headers, escaping, the form's refusals), then in Debian's Chromium driven by
// playwright-core: the customer opens the link, enters an address, sees that
// the refund waits for the merchant, and once approved and paid, that it was
// sent, with its transaction.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { Browser } from 'playwright-core';
import { CHECKOUT_CSP } from '../api/routes/checkout.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

const CHROMIUM = '/usr/bin/chromium';
const CUSTOMER = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';

describe('refund claim page', () => {
  let svc: RunningService;
  let key: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', CHAIN_TRON_CONFIRMATIONS: '1' });
    key = (await merchantWithKey(svc, { name: 'Fish & <b>Chips</b>' })).key;
  });
  after(() => svc.close());

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });

  /** A refund of 5 of the 20 USDT an invoice received on Tron, waiting for the customer's address. */
  async function refund() {
    const p = (
      await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount: '20', currency: 'USD', chain: 'tron', token: 'USDT' },
      })
    ).body.data;
    await admin('POST', '/dev/v1/chains/tron/transfers', { to: p.address, amount: '20', token: 'USDT' });
    await admin('POST', '/dev/v1/chains/tron/blocks', { count: 1 });
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/status`)).body.data.status,
      (s) => s === 'confirmed' || s === 'settled',
    );
    const created = await svc.call('POST', `/api/v1/invoices/${p.paymentId}/refunds`, {
      token: key,
      body: { amount: '5' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    return created.body.data as { id: string; claimUrl: string };
  }
  const pathOf = (claimUrl: string) => new URL(claimUrl).pathname;
  const post = (path: string, form: Record<string, string>) =>
    fetch(`${svc.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(form).toString(),
      redirect: 'manual',
    });

  it('shows the merchant, the amount and what to do, under the checkout page’s strict CSP', async () => {
    const { claimUrl } = await refund();
    const response = await fetch(`${svc.url}${pathOf(claimUrl)}`);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('content-security-policy'), CHECKOUT_CSP);
    assert.equal(response.headers.get('cache-control'), 'no-store');
    const page = await response.text();
    assert.ok(page.includes('Fish &amp; &lt;b&gt;Chips&lt;/b&gt;'), 'merchant name, escaped');
    assert.ok(page.includes('5.000000 USDT'));
    assert.ok(page.includes('Enter the address the refund should be sent to.'));
    assert.ok(page.includes('<form'), 'a form for the address');
    assert.ok(!/<script/.test(page), 'no script at all');
  });

  it('refuses an address of another chain beside the form, and takes a good one', async () => {
    const { id, claimUrl } = await refund();
    const path = pathOf(claimUrl);
    const wrong = await post(path, { address: '0x8ba1f109551bD432803012645Ac136ddd64DBA72' });
    assert.equal(wrong.status, 400);
    assert.ok((await wrong.text()).includes('is not a tron address'));
    const empty = await post(path, { address: '  ' });
    assert.equal(empty.status, 400);
    assert.ok((await empty.text()).includes('Please enter an address'));

    const taken = await post(path, { address: CUSTOMER });
    assert.equal(taken.status, 303);
    assert.equal(taken.headers.get('location'), path);
    const page = await (await fetch(`${svc.url}${path}`)).text();
    assert.ok(page.includes('waiting for the merchant to approve'));
    assert.ok(page.includes(CUSTOMER));
    const merchantSees = (await svc.call('GET', `/api/v1/refunds/${id}`, { token: key })).body.data;
    assert.equal(merchantSees.destination, CUSTOMER);
  });

  it('answers an unknown or canceled link with a page that says so', async () => {
    const unknown = await fetch(`${svc.url}/refunds/${'x'.repeat(43)}`);
    assert.equal(unknown.status, 404);
    assert.ok((await unknown.text()).includes('Refund not found'));
    const { id, claimUrl } = await refund();
    await svc.call('POST', `/api/v1/refunds/${id}/cancel`, { token: key });
    const page = await (await fetch(`${svc.url}${pathOf(claimUrl)}`)).text();
    assert.ok(page.includes('The merchant canceled this refund.'));
    assert.ok(!page.includes('<form'), 'nothing left to give');
  });

  describe('in a browser', { skip: existsSync(CHROMIUM) ? false : `${CHROMIUM} does not exist` }, () => {
    let browser: Browser;
    before(async () => {
      const { chromium } = await import('playwright-core');
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        headless: true,
        args: [
          '--no-sandbox',
          '--disable-gpu',
          '--disable-background-networking',
          '--disable-quic',
          '--no-first-run',
          '--disable-component-update',
          '--disable-sync',
        ],
      });
    });
    after(() => browser?.close());

    it('the customer opens the link, enters an address, is told the refund waits for the merchant, then sees it sent with its transaction', async () => {
      const { id, claimUrl } = await refund();
      const page = await browser.newPage({ viewport: { width: 375, height: 812 } });
      const violations: string[] = [];
      page.on('console', (message) => {
        if (/Content.Security.Policy/i.test(message.text())) violations.push(message.text());
      });
      await page.goto(`${svc.url}${pathOf(claimUrl)}`);
      assert.equal(await page.textContent('#merchant-name'), 'Fish & <b>Chips</b>');
      await page.fill('#address', '0xnot-a-tron-address');
      await Promise.all([page.waitForLoadState('load'), page.click('#claim-submit')]);
      assert.match((await page.textContent('#claim-error')) ?? '', /is not a tron address/);
      await page.fill('#address', CUSTOMER);
      await Promise.all([page.waitForURL(`${svc.url}${pathOf(claimUrl)}`), page.click('#claim-submit')]);
      assert.match((await page.textContent('#status-text')) ?? '', /waiting for the merchant/);
      assert.equal(await page.textContent('#destination'), CUSTOMER);

      // The merchant approves; the refund is paid (from the deposit: this merchant's settlement waits for a wallet).
      const approved = await svc.call('POST', `/api/v1/refunds/${id}/approve`, { token: key });
      assert.equal(approved.status, 200, JSON.stringify(approved.body));
      const sent = await eventually(
        async () => {
          await admin('POST', '/dev/v1/chains/tron/blocks', { count: 1 });
          return (await svc.call('GET', `/api/v1/refunds/${id}`, { token: key })).body.data;
        },
        (r) => r.status === 'completed',
      );
      await page.reload();
      assert.equal(await page.textContent('#status-text'), 'The refund was sent.');
      assert.equal(await page.textContent('#transaction'), sent.transactionHash);
      assert.equal(await page.$('#claim-form'), null, 'no form once approved');
      assert.deepEqual(violations, []);
      await page.close();
    });
  });
});
