/// <reference lib="dom" />
// The checkout page's script, run in the customer's browser. Served by
// api/routes/checkout.ts, bundled from this file (and live.client.ts) when
// first asked for; type imports are erased, so the page is one self-contained module.
//
// It lets the customer pick a token on a network in one choice, asks for the
// deposit address, and follows the invoice live: WebSocket first, polling the
// public status endpoint every 5 s if the socket fails.
import type { CheckoutData, CheckoutPayment } from '../routes/checkout.ts';
import type { TokenListing } from '../../domain/catalogue.ts';
import type { InvoiceStatusView } from '../../projections/invoice-queries.ts';
import { CLOSE_FINAL, CLOSE_NOT_FOUND, invoiceSocket, polledStatus } from './live.client.ts';

const POLL_MS = 5_000;
/** Long enough to read "Payment complete" before leaving for the merchant's page. */
const RETURN_DELAY_MS = 2_500;
const COPY_FEEDBACK_MS = 3_000;

function element<T extends HTMLElement = HTMLElement>(id: string): T {
  const found = document.getElementById(id);
  if (!found) throw new Error(`#${id} is missing from the page`);
  return found as T;
}
const optional = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T | null;

const data = JSON.parse(element('checkout-data').textContent ?? '{}') as CheckoutData;
const invoiceId = data.invoiceId;
/** Business time minus wall time: the countdown follows the service's clock, which the sandbox can move. */
const clockOffset = new Date(data.serverNow).getTime() - Date.now();

let current: InvoiceStatusView = data.status;
let payment: CheckoutPayment | null = null;
/** The amount still owed that the shown QR code and wallet link ask for, once partly paid. */
let requestedRemainder: string | null = data.payment ? data.status.remainingAmount : null;
let tokens: TokenListing[] = [];
let leaving = false;

const isFinal = (s: InvoiceStatusView) => s.status === 'settled' || s.status === 'expired';
const isOpen = (s: InvoiceStatusView) => s.status === 'pending' || s.status === 'partial';

// ---- Status --------------------------------------------------------------

function statusMessage(s: InvoiceStatusView): string {
  const received = `${s.totalReceivedAmount} ${s.totalReceivedCurrency}`;
  switch (s.status) {
    case 'expired':
      return 'This invoice has expired. Please do not send a payment to it.';
    case 'settled':
      return 'Payment complete. Thank you!';
    case 'confirmed':
      return 'Payment confirmed. Finishing up…';
    case 'partial':
      return `Partial payment received: ${received}. Please send the remaining ${s.remainingAmount} ${s.totalReceivedCurrency} to the same address.`;
  }
  if (s.paymentStatus === 'detected') return 'Payment detected. Waiting for network confirmations…';
  return payment ? 'Waiting for your payment…' : 'Choose a token and network to pay.';
}

function notice(s: InvoiceStatusView): string {
  const m = s.mismatchPayment;
  if (s.paymentIssueType === 'wrong_token' && m) {
    return `We received ${m.amount} ${m.actualCurrency}, but this invoice is paid in ${m.currency}. That payment does not count towards it; please contact ${s.merchantName}.`;
  }
  if (s.paymentIssueType === 'overpaid') {
    return `You sent more than the amount due (${s.totalReceivedAmount} ${s.totalReceivedCurrency} received). Please contact ${s.merchantName} about the difference.`;
  }
  return '';
}

/** Sets text only when it changes, so the live regions announce changes, not repeats. */
function setText(target: HTMLElement, text: string) {
  if (target.textContent !== text) target.textContent = text;
}

function showStatus(s: InvoiceStatusView) {
  current = s;
  const text = element('status-text');
  text.dataset['state'] = s.status;
  setText(text, statusMessage(s));

  const counting = isOpen(s) && s.hasDetectedPayment && s.requiredConfirmations > 0;
  element('confirmations').hidden = !counting;
  if (counting) {
    const progress = element<HTMLProgressElement>('confirmations-progress');
    progress.max = s.requiredConfirmations;
    progress.value = Math.min(s.confirmations, s.requiredConfirmations);
    setText(element('confirmations-label'), `Confirmations: ${s.confirmations} of ${s.requiredConfirmations}`);
  }

  const issue = notice(s);
  const noticeElement = element('notice');
  noticeElement.hidden = issue === '';
  setText(noticeElement, issue);

  // The same address takes the rest of a partial payment: show what is still
  // owed there, and ask again for the payment request, which holds the amount.
  if (s.status === 'partial' && payment) {
    showAmount(s.remainingAmount, s.totalReceivedCurrency);
    if (s.remainingAmount !== requestedRemainder) void refreshPayment(s.remainingAmount);
  }
  showSections(s);
  if (s.status === 'settled') returnToMerchant(s.returnUrl);
}

/** Money is still owed: nothing arrived yet, or only part of it (wrong-token payments do not count). */
const awaitingMoney = (s: InvoiceStatusView) =>
  s.status === 'partial' || (s.status === 'pending' && !s.hasDetectedPayment);

/**
 * The picker only while no payment has locked the invoice to a token; the
 * address only while money is owed, so that nobody pays twice.
 */
function showSections(s: InvoiceStatusView) {
  const picker = optional('picker');
  if (picker && !(s.status === 'pending' && !s.hasDetectedPayment)) picker.hidden = true;
  const details = optional('payment');
  if (details && payment) details.hidden = !awaitingMoney(s);
  const countdown = optional('countdown');
  if (countdown && !isOpen(s)) countdown.hidden = true;
}

/** Only http(s) URLs are followed, even though the server already filters them. */
function safeReturnUrl(url: string | null): string | null {
  if (!url) return null;
  try {
    const parsed = new URL(url);
    return parsed.protocol === 'https:' || parsed.protocol === 'http:' ? parsed.href : null;
  } catch {
    return null;
  }
}

/** A link back, and an automatic return when the payment completes while the customer watches. */
function returnToMerchant(url: string | null) {
  const target = safeReturnUrl(url);
  if (!target || leaving) return;
  leaving = true;
  element<HTMLAnchorElement>('return-link').href = target;
  element('return').hidden = false;
  // Someone opening the page of an invoice settled long ago just gets the link.
  if (data.status.status !== 'settled') setTimeout(() => window.location.assign(target), RETURN_DELAY_MS);
}

// ---- Following the invoice: WebSocket, then polling --------------------------

function follow() {
  const socket = invoiceSocket(invoiceId);
  if (!socket) return poll();
  socket.addEventListener('message', (event) => {
    const message = JSON.parse(String(event.data)) as { type?: string; data?: InvoiceStatusView };
    if (message.type === 'status' && message.data) showStatus(message.data);
  });
  // "error" is always followed by "close": the fallback is decided there, once.
  socket.addEventListener('close', (event) => {
    if (event.code === CLOSE_FINAL || event.code === CLOSE_NOT_FOUND || isFinal(current)) return;
    poll();
  });
}

function poll() {
  const timer = setInterval(async () => {
    try {
      const status = await polledStatus(invoiceId);
      if (!status) return;
      showStatus(status);
      if (isFinal(current)) clearInterval(timer);
    } catch {
      // offline for a moment: the next tick tries again
    }
  }, POLL_MS);
}

// ---- Countdown ---------------------------------------------------------------

function startCountdown() {
  const countdown = optional('countdown');
  const time = optional('countdown-time');
  if (!countdown || !time || !current.expiresAt) return;
  const expiresAt = new Date(current.expiresAt).getTime();
  countdown.hidden = false;
  const tick = () => {
    const left = Math.max(0, Math.floor((expiresAt - (Date.now() + clockOffset)) / 1000));
    const hours = Math.floor(left / 3600);
    const minutes = Math.floor((left % 3600) / 60);
    const seconds = String(left % 60).padStart(2, '0');
    time.textContent = hours > 0 ? `${hours} h ${String(minutes).padStart(2, '0')} min` : `${minutes}:${seconds}`;
    if (left === 0 || !isOpen(current)) clearInterval(timer);
  };
  const timer = setInterval(tick, 1000);
  tick();
}

// ---- Picking a token and chain -----------------------------------------------

function option(value: string, label: string): HTMLOptionElement {
  const o = document.createElement('option');
  o.value = value;
  o.textContent = label;
  return o;
}

async function loadTokens() {
  const response = await fetch('/api/v1/tokens', { headers: { accept: 'application/json' } });
  if (!response.ok) throw new Error('The list of tokens could not be loaded. Please reload the page.');
  tokens = ((await response.json()) as { data: TokenListing[] }).data;
}

const chainName = (chain: string) => tokens.flatMap((t) => t.chains).find((c) => c.chain === chain)?.chainName ?? chain;

/** A token on a network, as the picker's value: "tron/USDT". */
const methodValue = (chain: string, token: string) => `${chain}/${token}`;

/**
 * One choice of token and network together: a token on one network only is a
 * single option ("BTC on Bitcoin"); a token on several networks is a group of
 * options, each naming both ("USDT on Tron"), since screen readers do not
 * always announce the group.
 */
function showPicker() {
  const method = element<HTMLSelectElement>('method');
  const submit = element<HTMLButtonElement>('picker-submit');
  const choices = tokens.map((t) => {
    const options = t.chains.map((c) => option(methodValue(c.chain, t.symbol), `${t.symbol} on ${c.chainName}`));
    if (options.length === 1) return options[0]!;
    const group = document.createElement('optgroup');
    group.label = `${t.symbol} — ${t.name}`;
    group.append(...options);
    return group;
  });
  method.replaceChildren(option('', 'Choose a token and network'), ...choices);
  method.disabled = false;
  method.addEventListener('change', () => (submit.disabled = method.value === ''));
  element<HTMLFormElement>('picker-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const [chain, token] = method.value.split('/');
    if (chain && token) void requestAddress(chain, token);
  });
  element('picker').hidden = false;
}

function showPickerError(message: string) {
  const error = element('picker-error');
  error.textContent = message;
  error.hidden = false;
}

async function requestAddress(chain: string, token: string) {
  const submit = element<HTMLButtonElement>('picker-submit');
  submit.disabled = true;
  element('picker-error').hidden = true;
  try {
    const response = await fetch(`/api/v1/invoices/${encodeURIComponent(invoiceId)}/addresses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ chain, token }),
    });
    const body = (await response.json()) as { data?: CheckoutPayment; message?: string };
    if (!response.ok || !body.data) throw new Error(body.message ?? 'The payment address could not be created.');
    showPayment(body.data);
    element('payment-title').focus();
  } catch (error) {
    showPickerError(error instanceof Error ? error.message : String(error));
  } finally {
    submit.disabled = false;
  }
}

// ---- Payment details -----------------------------------------------------------

function showAmount(amount: string, currency: string) {
  setText(element('crypto-amount'), amount);
  setText(element('crypto-currency'), currency);
  setText(element('hint-currency'), currency);
}

function showPayment(chosen: CheckoutPayment) {
  payment = chosen;
  showAmount(chosen.cryptoAmount, chosen.cryptoCurrency);
  setText(element('network-name'), chainName(chosen.chain));
  const confirmations = chosen.requiredConfirmations;
  setText(
    element('required-confirmations'),
    confirmations > 0
      ? `${chainName(chosen.chain)} needs ${confirmations} confirmation${confirmations === 1 ? '' : 's'} before the payment is complete.`
      : '',
  );
  setText(element('rate-note'), rateNote(chosen));
  setText(element('address'), chosen.address);
  const qr = element<HTMLImageElement>('qr');
  if (chosen.qrCode.startsWith('data:image/png;base64,')) qr.src = chosen.qrCode;
  qr.hidden = false;
  // Only the payment schemes this service writes, never a URI that could run script.
  const link = element<HTMLAnchorElement>('wallet-link');
  const opens = /^(bitcoin|ethereum|solana|tron):/.test(chosen.paymentUri ?? '');
  if (opens) link.href = chosen.paymentUri;
  link.hidden = !opens;
  element('payment').hidden = false;
  showStatus(current);
}

/** The quote's rate and when it was observed, e.g. "Rate: 1 BTC = 97069.225 USD, as of 2026-11-28 04:20:15 UTC." */
function rateNote(chosen: CheckoutPayment): string {
  if (!chosen.exchangeRate || !chosen.fiatCurrency) return '';
  const rate = `Rate: 1 ${chosen.cryptoCurrency} = ${chosen.exchangeRate} ${chosen.fiatCurrency}`;
  const observed = chosen.exchangeRateObservedAt ? Date.parse(chosen.exchangeRateObservedAt) : Number.NaN;
  if (Number.isNaN(observed)) return `${rate}.`;
  // UTC and the ISO form: the same for every reader, and what an auditor reads in the invoice's history.
  return `${rate}, as of ${new Date(observed).toISOString().slice(0, 19).replace('T', ' ')} UTC.`;
}

/** The QR code and wallet link of a partly paid invoice, for the amount still owed. */
async function refreshPayment(remainder: string) {
  requestedRemainder = remainder;
  // Until the new request arrives, the old one would ask for too much.
  element('qr').hidden = true;
  element('wallet-link').hidden = true;
  try {
    const response = await fetch(`/checkout/${encodeURIComponent(invoiceId)}/payment`, {
      headers: { accept: 'application/json' },
    });
    if (!response.ok) return;
    const { data: fresh } = (await response.json()) as { data: CheckoutPayment };
    if (current.remainingAmount !== remainder) return; // a newer payment came in meanwhile: its refresh is on the way
    showPayment(fresh);
  } catch {
    // offline: the copyable amount and address still say what is owed
  }
}

async function copy(button: HTMLButtonElement) {
  const source = element(button.dataset['copy'] ?? '');
  const feedback = element('copy-feedback');
  const what = button.dataset['copy'] === 'address' ? 'Address' : 'Amount';
  try {
    if (!navigator.clipboard) throw new Error('no clipboard');
    await navigator.clipboard.writeText(source.textContent ?? '');
    feedback.textContent = `${what} copied`;
    button.textContent = 'Copied';
  } catch {
    // No clipboard (an insecure page, or permission refused): select the text
    // so that the customer can copy it by hand.
    const range = document.createRange();
    range.selectNodeContents(source);
    window.getSelection()?.removeAllRanges();
    window.getSelection()?.addRange(range);
    feedback.textContent = `${what} selected: copy it with your device's copy command`;
  }
  setTimeout(() => {
    feedback.textContent = '';
    button.textContent = `Copy ${what.toLowerCase()}`;
  }, COPY_FEEDBACK_MS);
}

// ---- Start -----------------------------------------------------------------

async function start() {
  showStatus(current);
  if (isFinal(current)) return;
  follow();
  if (!isOpen(current)) return;
  startCountdown();
  for (const button of document.querySelectorAll<HTMLButtonElement>('button.copy')) {
    button.addEventListener('click', () => void copy(button));
  }
  let problem: string | null = null;
  try {
    await loadTokens();
  } catch (error) {
    problem = error instanceof Error ? error.message : String(error);
  }
  // Without the token list a locked address is still shown, with the chain's identifier as its name.
  if (data.payment) return showPayment(data.payment);
  if (current.status !== 'pending' || current.hasDetectedPayment) return;
  showPicker();
  if (problem) showPickerError(problem);
}

void start();
