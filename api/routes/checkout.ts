// The hosted checkout page (interface.md, "Hosted checkout"): GET /checkout/{id}
// renders the invoice on the server; a small script served from the same
// origin lets the customer pick token and chain, shows the deposit address and
// follows the payment live. Nothing is loaded from another host, so the page
// can run under a strict Content-Security-Policy.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ChainName } from '../../domain/catalogue.ts';
import { parseUnits } from '../../domain/money.ts';
import { notFound } from '../errors.ts';
import { paymentRequests } from '../payment-request.ts';
import {
  invoiceAddresses,
  invoiceRow,
  invoiceStatus,
  type InvoiceStatusView,
} from '../../projections/invoice-queries.ts';
import type { Clock } from '../../adapters/clock.ts';
import type { SqlDatabase } from '../../adapters/sql/database.ts';
import type { Authentication } from '../auth.ts';
import type { Config } from '../config.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import type { ReadModels } from '../../projections/schema.ts';

export const CHECKOUT_CSP =
  "default-src 'self'; img-src 'self' data:; connect-src 'self' ws: wss:; style-src 'self'; script-src 'self'; " +
  "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** What the client script starts from, embedded in the page as JSON. */
export interface CheckoutData {
  invoiceId: string;
  /** The business clock's now: in the sandbox it can run ahead of wall time, and the countdown must follow it. */
  serverNow: string;
  status: InvoiceStatusView;
  /** The address being paid, once a payment has locked the invoice to one chain and token. */
  payment: CheckoutPayment | null;
}

export interface CheckoutPayment {
  address: string;
  qrCode: string;
  /** The payment request a wallet opens (the QR code holds it too). */
  paymentUri: string;
  /** Confirmations the chain needs before the payment counts. */
  requiredConfirmations: number;
  cryptoAmount: string;
  cryptoCurrency: string;
  chain: string;
  /** The quote's rate (fiat per token) and when it was observed; absent once partly paid (the remainder is shown). */
  exchangeRate?: string;
  fiatCurrency?: string;
  exchangeRateObservedAt?: string | null;
}

// ---- HTML, escaped by default ----------------------------------------------

/** Markup that is already safe; anything else put into `markup` is escaped. */
class SafeHtml {
  constructor(readonly value: string) {}
  toString() {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);

type Part = SafeHtml | string | number | null | undefined | false | Part[];
const render = (part: Part): string =>
  Array.isArray(part)
    ? part.map(render).join('')
    : part instanceof SafeHtml
      ? part.value
      : part === null || part === undefined || part === false
        ? ''
        : escapeHtml(String(part));

/** Template tag: every interpolated value is escaped unless it is itself `markup`. */
export function markup(strings: TemplateStringsArray, ...values: Part[]): SafeHtml {
  return new SafeHtml(strings.reduce((out, s, i) => out + s + (i < values.length ? render(values[i]!) : ''), ''));
}

/** JSON inside <script type="application/json">: "<" escaped so no "</script>" can end it early. */
const jsonForScript = (value: unknown) =>
  new SafeHtml(
    JSON.stringify(value)
      .replace(/</g, '\\u003c')
      .replace(/\u2028/g, '\\u2028')
      .replace(/\u2029/g, '\\u2029'),
  );

/** The fiat amount for an English reader, e.g. "$1,234.50"; exact, never rounded to the currency's usual digits. */
export function formatFiatAmount(amount: string, currency: string): string {
  try {
    const format = new Intl.NumberFormat('en', { style: 'currency', currency, maximumFractionDigits: 8 });
    // Intl.NumberFormat takes decimal strings exactly (Node 20 and current
    // browsers); the ES2022 typings only admit numbers.
    return format.format(amount as unknown as number);
  } catch {
    return `${amount} ${currency}`;
  }
}

/** The head every page begins with (the dashboard's too): no referrer leaves it, no favicon is asked for. */
export const pageHead = (title: string, stylesheet: string) =>
  markup`<meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="referrer" content="no-referrer" />
        <title>${title}</title>
        <link rel="icon" href="data:," />
        <link rel="stylesheet" href="${stylesheet}" />`;

export function layout(title: string, body: SafeHtml, script: boolean): string {
  return markup`<!doctype html>
    <html lang="en">
      <head>
        ${pageHead(title, '/checkout/assets/checkout.css')}
        ${script && markup`<script type="module" src="/checkout/assets/checkout.js"></script>`}
      </head>
      <body>
        ${body}
      </body>
    </html>
`.value;
}

function checkoutPage(data: CheckoutData): string {
  const { status } = data;
  const amount = formatFiatAmount(status.amount, status.currency);
  const open = status.status === 'pending' || status.status === 'partial';
  const closedMessage =
    status.status === 'expired'
      ? 'This invoice has expired. Please do not send a payment to it.'
      : status.status === 'settled'
        ? 'This invoice is paid. Thank you!'
        : status.status === 'confirmed'
          ? 'Payment confirmed. Finishing up…'
          : '';
  const body = markup`<main class="checkout" id="checkout">
    <header class="summary">
      <p class="merchant" id="merchant-name">${status.merchantName}</p>
      <h1 class="amount" id="fiat-amount">${amount}</h1>
      ${status.description && markup`<p class="description">${status.description}</p>`}
      ${open && status.expiresAt && markup`<p class="countdown" id="countdown" hidden>Time left to pay: <time id="countdown-time" datetime="${status.expiresAt}"></time></p>`}
    </header>
    <section class="status" aria-labelledby="status-title">
      <h2 class="visually-hidden" id="status-title">Payment status</h2>
      <p class="status-text" id="status-text" role="status" aria-live="polite" data-state="${status.status}">${closedMessage}</p>
      <div class="confirmations" id="confirmations" hidden>
        <label for="confirmations-progress" id="confirmations-label">Confirmations</label>
        <progress id="confirmations-progress" max="1" value="0"></progress>
      </div>
      <p class="notice" id="notice" role="alert" hidden></p>
      <p class="return" id="return" hidden><a id="return-link" href="#">Return to ${status.merchantName}</a></p>
    </section>
    ${
      open &&
      markup`<section class="picker" id="picker" aria-labelledby="picker-title" hidden>
          <h2 id="picker-title">Choose how to pay</h2>
          <form id="picker-form" novalidate>
            <label for="method">Pay with</label>
            <select id="method" name="method" required disabled>
              <option value="">Loading tokens…</option>
            </select>
            <button type="submit" id="picker-submit" disabled>Show payment details</button>
            <p class="error" id="picker-error" role="alert" hidden></p>
          </form>
        </section>
        <section class="payment" id="payment" aria-labelledby="payment-title" hidden>
          <h2 id="payment-title" tabindex="-1">Send exactly</h2>
          <div class="copyable">
            <p class="crypto-amount"><span id="crypto-amount"></span> <span id="crypto-currency"></span></p>
            <button type="button" class="copy" data-copy="crypto-amount">Copy amount</button>
          </div>
          <p class="network">on <strong id="network-name"></strong> to this address:</p>
          <img class="qr" id="qr" alt="QR code of the payment request" width="200" height="200" />
          <p><a class="wallet-link" id="wallet-link" hidden>Open in wallet</a></p>
          <div class="copyable">
            <code class="address" id="address"></code>
            <button type="button" class="copy" data-copy="address">Copy address</button>
          </div>
          <p class="copy-feedback" id="copy-feedback" role="status" aria-live="polite"></p>
          <p class="hint" id="required-confirmations"></p>
          <p class="hint" id="rate-note"></p>
          <p class="hint">Send only <span id="hint-currency"></span> on this network. Other tokens are not counted.</p>
        </section>
        <noscript><p class="notice">This page needs JavaScript to choose a token and show the payment address.</p></noscript>`
    }
    <script type="application/json" id="checkout-data">${jsonForScript(data)}</script>
  </main>`;
  return layout(`Pay ${status.merchantName} — ${amount}`, body, true);
}

function notFoundPage(): string {
  return layout(
    'Invoice not found',
    markup`<main class="checkout">
      <h1>Invoice not found</h1>
      <p>
        There is no invoice at this address. Please check the link you were given, or ask the merchant for a new one.
      </p>
    </main>`,
    false,
  );
}

// ---- Assets ------------------------------------------------------------------

/**
 * The client script, bundled with what it imports (live.client.ts) and its
 * types stripped when it is first asked for: esbuild (tsx's own transpiler)
 * rather than the TypeScript compiler, which stayed resident at ~150 MB.
 * esbuild is loaded then, not at start (an instance that serves no checkout
 * page never holds it), and its helper process is stopped once done.
 */
async function clientScript(file: URL): Promise<string> {
  const esbuild = await import('esbuild');
  try {
    const { outputFiles } = await esbuild.build({
      entryPoints: [fileURLToPath(file)],
      bundle: true,
      write: false,
      format: 'esm',
      target: 'es2020',
      logLevel: 'silent',
    });
    return outputFiles[0]!.text;
  } finally {
    await esbuild.stop();
  }
}

/**
 * A route answering with the client script `file` (a path from one folder
 * below api/, so that the bundle finds it too), transpiled when first asked for.
 */
export function clientScriptRoute(file: URL) {
  let script: Promise<string> | undefined;
  return async (_request: FastifyRequest, reply: FastifyReply) => {
    script ??= clientScript(file).catch((error: unknown) => {
      script = undefined; // asked for again, it is tried again
      throw error;
    });
    return reply
      .type('text/javascript; charset=utf-8')
      .header('X-Content-Type-Options', 'nosniff')
      .header('Cache-Control', 'no-cache')
      .send(await script);
  };
}

export const pageHeaders = (reply: FastifyReply) =>
  reply
    .header('Content-Security-Policy', CHECKOUT_CSP)
    .header('X-Frame-Options', 'DENY')
    .header('X-Content-Type-Options', 'nosniff')
    .header('Referrer-Policy', 'no-referrer')
    // The page shows live state: a cached copy would show a stale one.
    .header('Cache-Control', 'no-store')
    .type('text/html; charset=utf-8');

// ---- Routes --------------------------------------------------------------------

/** What these routes use of the service. */
export interface CheckoutRouteDeps extends Pick<ReadYourWrites, 'readInvoice'> {
  auth: Authentication;
  db: ReadModels;
  database: SqlDatabase;
  clock: Clock;
  config: Config;
}

export async function checkoutRoutes(scope: FastifyInstance, ctx: CheckoutRouteDeps) {
  const { auth, db, database, clock, readInvoice } = ctx;
  const requests = paymentRequests(ctx.config);
  const stylesheet = await readFile(new URL('../checkout/checkout.css', import.meta.url), 'utf8');

  /**
   * The address a payment already went to: after the first payment the
   * invoice can only be paid there. Its payment request asks for what is
   * still owed, so that paying it again from a wallet never pays twice.
   */
  async function lockedPayment(id: string, status: InvoiceStatusView): Promise<CheckoutPayment | null> {
    if (status.status !== 'partial') return null;
    const row = await invoiceRow(db, id);
    if (!row?.chain || !row.token) return null;
    const address = (await invoiceAddresses(db, id)).find((a) => a.chain === row.chain && a.token === row.token);
    if (!address) return null;
    return {
      address: address.address,
      ...requests.withQr({
        invoiceId: id,
        merchantName: status.merchantName,
        chain: address.chain,
        token: address.token,
        address: address.address,
        amount: parseUnits(status.remainingAmount, address.token_decimals) ?? BigInt(address.crypto_amount),
        decimals: address.token_decimals,
      }),
      cryptoAmount: row.crypto_amount ?? status.remainingAmount,
      cryptoCurrency: address.token,
      chain: address.chain,
      requiredConfirmations: ctx.config.requiredConfirmations[address.chain as ChainName],
    };
  }

  scope.get<{ Params: { invoiceId: string } }>(
    '/checkout/:invoiceId',
    { onRequest: auth.public, schema: { hide: true } },
    async (request, reply) => {
      const id = request.params.invoiceId;
      const status = await readInvoice(id, () => invoiceStatus(database, id));
      if (!status) return pageHeaders(reply).code(404).send(notFoundPage());
      const data: CheckoutData = {
        invoiceId: status.id,
        serverNow: clock.now().toISOString(),
        status,
        payment: await lockedPayment(status.id, status),
      };
      return pageHeaders(reply).send(checkoutPage(data));
    },
  );

  // The page asks again when a partial payment arrives while it is open.
  scope.get<{ Params: { invoiceId: string } }>(
    '/checkout/:invoiceId/payment',
    { onRequest: auth.public, schema: { hide: true } },
    async (request) => {
      const id = request.params.invoiceId;
      const status = await readInvoice(id, () => invoiceStatus(database, id));
      const payment = status && (await lockedPayment(id, status));
      if (!payment) throw notFound('No partly paid invoice has this id');
      return { data: payment };
    },
  );

  scope.get(
    '/checkout/assets/checkout.js',
    { schema: { hide: true } },
    clientScriptRoute(new URL('../checkout/checkout.client.ts', import.meta.url)),
  );
  scope.get('/checkout/assets/checkout.css', { schema: { hide: true } }, async (_request, reply) =>
    reply
      .type('text/css; charset=utf-8')
      .header('X-Content-Type-Options', 'nosniff')
      .header('Cache-Control', 'no-cache')
      .send(stylesheet),
  );
}
