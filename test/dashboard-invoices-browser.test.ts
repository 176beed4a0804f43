// The dashboard's lists in Debian's Chromium, driven by playwright-core
// (dashboard.md pages 1, 2 and 4): a finance user sees the Overview's
// figures, filters the invoices to the overpaid ones on Ethereum and exports
// them, then the refunds waiting for approval, each export downloaded and
// read back. The screenshots go to test/artifacts/dashboard/ (docs/dashboard/ with UPDATE_SCREENSHOTS=1).
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { SESSION_COOKIE } from '../api/dashboard/routes.ts';
import { parseCsv } from './support/csv.ts';
import { dashboardClient, paidOnEthereum } from './support/dashboard.ts';
import { launchChromium, screenshot, withoutChromium } from './support/chromium.ts';
import { merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('dashboard lists in a browser', { skip: withoutChromium }, () => {
  let svc: RunningService;
  let browser: Browser;
  let merchantId: string;
  let shopKey: string;

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

  const paidInvoice = (amount: string, token: string, paid: string, orderId: string) =>
    paidOnEthereum(svc, shopKey, { amount, token, paid, metadata: { orderId } });

  /** The downloaded CSV of clicking the export link, as rows of cells (the header first). */
  async function exported(page: Page) {
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export-csv')]);
    return { name: download.suggestedFilename(), rows: parseCsv(await readFile((await download.path())!, 'utf8')) };
  }

  it('finance reads the Overview, filters the invoices, exports them, then the refunds waiting for approval', async () => {
    const overpaid = await paidInvoice('100', 'USDT', '120', 'A-1001');
    await paidInvoice('50', 'USDC', '50', 'A-1002');
    for (let n = 0; n < 3; n++) {
      await svc.call('POST', '/api/v1/invoices', {
        token: shopKey,
        body: { amount: `${10 + n}`, currency: 'USD', metadata: { orderId: `A-20${n}` } },
      });
    }
    const refund = await svc.call('POST', `/api/v1/invoices/${overpaid}/refunds`, {
      token: shopKey,
      body: { kind: 'excess', destination: '0x8ba1f109551bD432803012645Ac136ddd64DBA72', reason: 'paid too much' },
    });
    assert.equal(refund.status, 201, JSON.stringify(refund.body));

    // Signed in over HTTP (password and TOTP, test/support/dashboard.ts); the browser gets the session.
    const finance = await dashboardClient(svc, merchantId, 'finance@fish.example', 'finance');
    const session = /^dashboard_session=([^;]+)/.exec(finance.setCookie!)![1]!;
    const context = await browser.newContext({ viewport: { width: 1100, height: 800 }, acceptDownloads: true });
    await context.addCookies([{ name: SESSION_COOKIE, value: session, url: `${svc.url}/dashboard` }]);
    const page = await context.newPage();

    await page.goto(`${svc.url}/dashboard`);
    assert.equal(await page.textContent('#role'), 'finance');
    const volume = await page.innerText('#volume');
    assert.match(volume, /ethereum\s+USDT\s+120\.000000\s+\$120\.00/);
    assert.match(volume, /ethereum\s+USDC\s+50\.000000\s+\$50\.00/);
    assert.match(await page.innerText('#totals'), /ethereum\s+USDT\s+120\.000000/);
    await screenshot(page, 'overview-figures');

    await page.click('nav >> text=Invoices');
    assert.equal(await page.textContent('#total'), '5 invoices');
    await page.selectOption('#issue', 'overpaid');
    await page.selectOption('#chain', 'ethereum');
    await Promise.all([page.waitForLoadState('load'), page.click('#search')]);
    assert.equal(await page.textContent('#total'), '1 invoice');
    assert.equal(await page.textContent('.invoice-link'), overpaid);
    await screenshot(page, 'invoices-filtered');
    const invoices = await exported(page);
    assert.equal(invoices.name, 'invoices-all-all.csv');
    const [header, ...rows] = invoices.rows;
    assert.equal(header![0], 'invoice_id');
    assert.deepEqual(
      rows.map((r) => r[0]),
      [overpaid],
      'the export has what the list shows',
    );
    assert.equal(rows[0]![header!.indexOf('metadata.orderId')], 'A-1001');

    await page.click('nav >> text=Refunds');
    await page.selectOption('#refund-status-filter', 'awaiting_approval');
    const today = new Date().toISOString().slice(0, 10);
    await page.fill('#from', today);
    await Promise.all([page.waitForLoadState('load'), page.click('#filter')]);
    assert.equal(await page.textContent('#total'), '1 refund');
    await screenshot(page, 'refunds-filtered');
    const refunds = await exported(page);
    assert.equal(refunds.name, `refunds-${today}-all.csv`);
    assert.equal(refunds.rows.length, 2);
    assert.equal(refunds.rows[1]![0], refund.body.data.id);
    assert.equal(refunds.rows[1]![refunds.rows[0]!.indexOf('amount')], '20.000000');
    await context.close();
  });
});
