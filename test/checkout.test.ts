// The hosted checkout page: over plain HTTP (markup, headers, escaping), then
// in a real browser (Debian's Chromium driven by playwright-core) on a
// phone-sized screen, paying an invoice on the sandbox chain from the picker
// to the merchant's return page.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { CHECKOUT_CSP } from '../api/routes/checkout.ts';
import { findToken } from '../domain/catalogue.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { baseUnits } from './support/evm-flow.ts';
import { qrText, readPaymentUri } from './support/payment-uri.ts';
import { startTestService, type RunningService } from './support/service.ts';

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = new URL('./artifacts/', import.meta.url);
const TRON_WALLET = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';
const UNKNOWN_INVOICE = '6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10';
const PHONE = { width: 375, height: 812 };
const USDT_ON_TRON = findToken('tron', 'USDT')!.contractAddress;

describe('checkout page over HTTP', () => {
  let svc: RunningService;
  let key: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
    key = (await merchantWithKey(svc, { name: 'Fish & <b>Chips</b>' })).key;
  });
  after(() => svc.close());

  const invoice = async (body: Record<string, unknown>) =>
    (await svc.call('POST', '/api/v1/invoices', { token: key, body: { currency: 'USD', ...body } })).body.data;

  it('renders the invoice with merchant name and amount, under a strict CSP', async () => {
    const inv = await invoice({ amount: '1234.5', description: 'Order 42' });
    const response = await fetch(`${svc.url}/checkout/${inv.id}`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type')!, /^text\/html/);
    assert.equal(response.headers.get('content-security-policy'), CHECKOUT_CSP);
    assert.equal(
      CHECKOUT_CSP,
      "default-src 'self'; img-src 'self' data:; connect-src 'self' ws: wss:; style-src 'self'; script-src 'self'; " +
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    );
    const page = await response.text();
    assert.ok(page.includes('Fish &amp; &lt;b&gt;Chips&lt;/b&gt;'), 'merchant name, escaped');
    assert.ok(page.includes('$1,234.50'), 'amount formatted for an English reader');
    assert.ok(page.includes('Order 42'));
    assert.ok(page.includes('src="/checkout/assets/checkout.js"'));
    assert.ok(page.includes('href="/checkout/assets/checkout.css"'));
  });

  it('refers to no other host', async () => {
    const inv = await invoice({ amount: '10' });
    const page = await (await fetch(`${svc.url}/checkout/${inv.id}`)).text();
    const own = new URL(svc.url).host;
    const foreign = [...page.matchAll(/https?:\/\/[^\s"'<>)]+/gi)]
      .map((m) => m[0])
      .filter((u) => new URL(u).host !== own);
    assert.deepEqual(foreign, []);
  });

  it('escapes merchant-controlled text', async () => {
    const inv = await invoice({ amount: '10', description: '<script>alert("x")</script> & more' });
    const page = await (await fetch(`${svc.url}/checkout/${inv.id}`)).text();
    assert.ok(page.includes('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more'));
    assert.ok(!page.includes('<script>alert'), 'no live script from the description');
    assert.ok(!page.includes('<b>Chips'), 'no live markup from the merchant name');
  });

  it('answers an unknown or malformed invoice with a 404 HTML page', async () => {
    for (const id of [UNKNOWN_INVOICE, 'not-an-invoice']) {
      const response = await fetch(`${svc.url}/checkout/${id}`);
      assert.equal(response.status, 404);
      assert.match(response.headers.get('content-type')!, /^text\/html/);
      assert.equal(response.headers.get('content-security-policy'), CHECKOUT_CSP);
      assert.match(await response.text(), /<h1>Invoice not found<\/h1>/);
    }
  });

  it('serves its script and stylesheet from the same origin', async () => {
    const script = await fetch(`${svc.url}/checkout/assets/checkout.js`);
    assert.equal(script.status, 200);
    assert.match(script.headers.get('content-type')!, /^text\/javascript/);
    const source = await script.text();
    assert.ok(source.includes('/ws/invoices/'), 'the transpiled client');
    assert.ok(!/^import /m.test(source), 'type imports are erased: the module stands alone');
    const style = await fetch(`${svc.url}/checkout/assets/checkout.css`);
    assert.equal(style.status, 200);
    assert.match(style.headers.get('content-type')!, /^text\/css/);
  });
});

// ---- In a browser ------------------------------------------------------------

async function whyNoBrowser(): Promise<string | undefined> {
  if (!existsSync(CHROMIUM)) return `${CHROMIUM} does not exist`;
  try {
    await import('playwright-core');
  } catch (error) {
    return `playwright-core cannot be imported (${(error as Error).message})`;
  }
  return undefined;
}

const noBrowser = await whyNoBrowser();
if (noBrowser) console.log(`# skipped browser tests: ${noBrowser}`);

/** The merchant's own page the customer returns to. */
function thanksPage(): Promise<{ server: Server; url: string }> {
  const server = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    response.end('<!doctype html><title>Thanks</title><h1>Thanks</h1>');
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/thanks` }),
    ),
  );
}

/** Half of a decimal amount, cut to the token's decimals so that it can be sent. */
function halfOf(amount: string, decimals: number): { half: string; rest: string } {
  const [whole = '0', fraction = ''] = amount.split('.');
  const units = BigInt(whole + fraction.padEnd(decimals, '0').slice(0, decimals));
  const show = (n: bigint) => {
    const digits = n.toString().padStart(decimals + 1, '0');
    return `${digits.slice(0, -decimals)}.${digits.slice(-decimals)}`;
  };
  return { half: show(units / 2n), rest: show(units - units / 2n) };
}

describe('checkout page in a browser', { skip: noBrowser }, () => {
  let svc: RunningService;
  let browser: Browser;
  let thanks: { server: Server; url: string };
  let merchantKey: string;

  before(async () => {
    const { chromium } = await import('playwright-core');
    await mkdir(ARTIFACTS, { recursive: true });
    [svc, browser, thanks] = await Promise.all([
      startTestService({ RATE_LIMITS: 'off', CHAIN_TRON_CONFIRMATIONS: '3' }),
      chromium.launch({
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
      }),
      thanksPage(),
    ]);
    const { key, merchant } = await merchantWithKey(svc, { name: 'Corner Café' });
    merchantKey = key;
    await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { tron: TRON_WALLET } });
  });
  after(async () => {
    await browser?.close();
    thanks?.server.close();
    await svc?.close();
  });

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;
  const createInvoice = async (body: Record<string, unknown>) =>
    (await svc.call('POST', '/api/v1/invoices', { token: merchantKey, body: { currency: 'USD', ...body } })).body.data;

  /** A phone-sized page that records every script error and CSP violation. */
  async function phone(): Promise<{ context: BrowserContext; page: Page; problems: string[] }> {
    const context = await browser.newContext({ viewport: PHONE, deviceScaleFactor: 2, hasTouch: true });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: svc.url });
    const page = await context.newPage();
    const problems: string[] = [];
    page.on('pageerror', (error) => problems.push(error.message));
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(`${message.text()} ${message.location().url}`);
    });
    return { context, page, problems };
  }

  const screenshot = (page: Page, name: string) =>
    page.screenshot({ path: new URL(`${name}.png`, ARTIFACTS).pathname, fullPage: true });

  /** Waits until the element's text contains `text`; fails with what it showed instead. */
  async function shows(page: Page, selector: string, text: string, timeout = 15_000) {
    try {
      await page.waitForFunction(
        ([s, t]) => document.querySelector(s!)?.textContent?.includes(t!) ?? false,
        [selector, text],
        { timeout },
      );
    } catch {
      const actual = await page.locator(selector).textContent();
      assert.fail(`${selector} should show "${text}" but shows "${actual}"`);
    }
  }

  it('takes a customer from the picker through a partial payment to settlement and back to the shop', async () => {
    const inv = await createInvoice({
      amount: '20',
      description: 'Two flat whites',
      metadata: { returnUrl: thanks.url },
    });
    const { context, page, problems } = await phone();
    await page.goto(`${svc.url}/checkout/${inv.id}`);
    assert.equal(await page.locator('#merchant-name').textContent(), 'Corner Café');
    assert.equal(await page.locator('#fiat-amount').textContent(), '$20.00');
    await shows(page, '#status-text', 'Choose a token and network to pay.');
    assert.match((await page.locator('#countdown').textContent())!, /Time left to pay: 1[45]:\d\d/);

    // Keyboard only: pick the token on its network in one choice, then Enter on the button.
    await page.getByLabel('Pay with').focus();
    await page.getByLabel('Pay with').selectOption('tron/USDT');
    await screenshot(page, 'checkout-1-picker');
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'picker-submit');
    await page.keyboard.press('Enter');

    await page.locator('#payment').waitFor({ state: 'visible' });
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'payment-title', 'focus moves to the details');
    const address = (await page.locator('#address').textContent())!;
    const amount = (await page.locator('#crypto-amount').textContent())!;
    assert.match(address, /^T[1-9A-HJ-NP-Za-km-z]{33}$/);
    assert.match(amount, /^\d+\.\d{8}$/);
    assert.equal(await page.locator('#crypto-currency').textContent(), 'USDT');
    assert.equal(await page.locator('#network-name').textContent(), 'Tron');
    assert.equal(
      await page.locator('#required-confirmations').textContent(),
      'Tron needs 3 confirmations before the payment is complete.',
    );
    // The fixed table's USDT rate, observed at the quote.
    assert.match(
      (await page.locator('#rate-note').textContent())!,
      /^Rate: 1 USDT = 1 USD, as of \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\.$/,
    );
    const request = async () => {
      const uri = (await page.locator('#wallet-link').getAttribute('href'))!;
      assert.equal(qrText((await page.locator('#qr').getAttribute('src'))!), uri, 'the QR code holds the wallet link');
      return readPaymentUri(uri, 'tron', 6);
    };
    assert.deepEqual(await request(), { address, amount: baseUnits(amount, 6), contract: USDT_ON_TRON });
    await page.getByRole('button', { name: 'Copy address' }).click();
    await shows(page, '#copy-feedback', 'Address copied');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), address);
    await screenshot(page, 'checkout-2-address');

    const { half, rest } = halfOf(amount, 6);
    await admin('POST', '/dev/v1/chains/tron/transfers', { to: address, amount: half, token: 'USDT' });
    await shows(page, '#status-text', `Partial payment received: ${Number(half).toFixed(8)} USDT`);
    await shows(page, '#crypto-amount', Number(rest).toFixed(8));
    assert.equal(await page.locator('#address').textContent(), address, 'the same address takes the rest');
    await page.waitForFunction((uri) => document.querySelector('#wallet-link')?.getAttribute('href') !== uri, null);
    await eventually(request, (r) => r.amount === baseUnits(rest, 6), 10_000);
    assert.equal(await page.locator('#wallet-link').isVisible(), true, 'the wallet link asks for the rest only');
    await shows(page, '#confirmations-label', 'Confirmations: 1 of 3');
    await screenshot(page, 'checkout-3-partial');

    await admin('POST', '/dev/v1/chains/tron/transfers', { to: address, amount: rest, token: 'USDT' });
    await shows(page, '#status-text', 'Payment detected');
    assert.equal(await page.locator('#payment').isHidden(), true, 'paid in full: no address to pay again');
    await admin('POST', '/dev/v1/chains/tron/blocks', { count: 2 });
    await shows(page, '#status-text', 'Payment confirmed');

    await eventually(
      async () =>
        (await svc.call('GET', `/api/v1/invoices/${inv.id}/settlement`, { token: merchantKey })).body.data?.status,
      (s) => s === 'submitted',
    );
    await admin('POST', '/dev/v1/chains/tron/blocks', { count: 3 });
    await shows(page, '#status-text', 'Payment complete. Thank you!');
    assert.equal(await page.locator('#return-link').getAttribute('href'), thanks.url);
    await screenshot(page, 'checkout-4-settled');

    await page.waitForURL(thanks.url, { timeout: 10_000 });
    assert.equal(await page.locator('h1').textContent(), 'Thanks');
    assert.deepEqual(problems, [], 'no script errors or CSP violations');
    await context.close();
  });

  it('offers each token on each network as one choice, each with a wallet link that reads back exactly', async () => {
    const inv = await createInvoice({ amount: '42.5' });
    const { context, page, problems } = await phone();
    await page.goto(`${svc.url}/checkout/${inv.id}`);
    const picker = page.getByLabel('Pay with');
    await page.waitForFunction(() => document.querySelectorAll('#method option').length > 1);
    assert.equal(await page.locator('#picker select').count(), 1, 'one choice, not a token then a network');
    // A token on one network only is one option; one on several is a group naming both.
    assert.equal(await page.locator('#method > option[value="bitcoin/BTC"]').textContent(), 'BTC on Bitcoin');
    const usdt = await page.locator('#method optgroup[label^="USDT"] option').allTextContents();
    assert.ok(usdt.includes('USDT on Tron') && usdt.includes('USDT on Ethereum'), usdt.join(', '));

    const values = await page
      .locator('#method option')
      .evaluateAll((options) => options.map((o) => (o as HTMLOptionElement).value).filter((v) => v !== ''));
    const tokens = (await svc.call('GET', '/api/v1/tokens')).body.data as {
      symbol: string;
      chains: { chain: string; chainName: string; decimals: number; contractAddress: string | null }[];
    }[];
    assert.equal(values.length, tokens.flatMap((t) => t.chains).length, 'every token on every enabled network');
    for (const value of values) {
      const [chain, symbol] = value.split('/') as [string, string];
      const listed = tokens.find((t) => t.symbol === symbol)!.chains.find((c) => c.chain === chain)!;
      await picker.selectOption(value);
      await page.getByRole('button', { name: 'Show payment details' }).click();
      await page.waitForFunction(
        ([c, s]) =>
          document.querySelector('#crypto-currency')?.textContent === s &&
          document.querySelector('#network-name')?.textContent === c,
        [listed.chainName, symbol],
      );
      const address = (await page.locator('#address').textContent())!;
      const amount = (await page.locator('#crypto-amount').textContent())!;
      const uri = (await page.locator('#wallet-link').getAttribute('href'))!;
      assert.equal(await page.locator('#wallet-link').textContent(), 'Open in wallet');
      const read = readPaymentUri(uri, chain, listed.decimals);
      assert.equal(read.address, address, `${value}: ${uri}`);
      assert.equal(read.amount, baseUnits(amount, listed.decimals), `${value}: ${uri}`);
      assert.equal(read.contract?.toLowerCase() ?? null, listed.contractAddress?.toLowerCase() ?? null);
      assert.equal(qrText((await page.locator('#qr').getAttribute('src'))!), uri);
      assert.match(
        (await page.locator('#required-confirmations').textContent())!,
        new RegExp(`^${listed.chainName} needs \\d+ confirmations?`),
      );
    }
    await screenshot(page, 'checkout-7-wallet-link');
    assert.deepEqual(problems, []);
    await context.close();
  });

  it('shows an expired invoice as expired and offers no payment', async () => {
    const inv = await createInvoice({ amount: '5', expiresInMinutes: 1 });
    await admin('POST', '/dev/v1/clock/advance', { seconds: 61 });
    await eventually(
      () => status(inv.id),
      (s) => s.status === 'expired',
    );
    const { context, page, problems } = await phone();
    await page.goto(`${svc.url}/checkout/${inv.id}`);
    await page.waitForLoadState('networkidle');
    await shows(page, '#status-text', 'This invoice has expired');
    assert.equal(await page.locator('#picker, #payment, select, #countdown').count(), 0, 'nothing to pay with');
    await screenshot(page, 'checkout-5-expired');
    assert.deepEqual(problems, []);
    await context.close();
  });

  it('counts down, and follows the status by polling when the WebSocket is unavailable', async () => {
    const inv = await createInvoice({ amount: '5' });
    const { context, page, problems } = await phone();
    // The socket is refused as a broken proxy would: the page must fall back to GET …/status.
    await page.routeWebSocket(/\/ws\/invoices\//, (socket) => socket.close({ code: 1011, reason: 'unavailable' }));
    await page.goto(`${svc.url}/checkout/${inv.id}`);
    await shows(page, '#status-text', 'Choose a token and network to pay.');
    const start = await page.locator('#countdown-time').textContent();
    await page.waitForFunction((shown) => document.querySelector('#countdown-time')?.textContent !== shown, start);
    await svc.call('POST', `/api/v1/invoices/${inv.id}/cancel`, { token: merchantKey });
    await shows(page, '#status-text', 'This invoice has expired', 12_000);
    assert.equal(await page.locator('#picker').isHidden(), true);
    assert.deepEqual(problems, []);
    await context.close();
  });

  it('shows a 404 page for an unknown invoice', async () => {
    const { context, page } = await phone();
    const response = await page.goto(`${svc.url}/checkout/${UNKNOWN_INVOICE}`);
    assert.equal(response?.status(), 404);
    assert.equal(await page.locator('h1').textContent(), 'Invoice not found');
    await screenshot(page, 'checkout-6-not-found');
    await context.close();
  });
});
