/// <reference lib="dom" />
// The dashboard invoice page's script, run in the merchant's browser: it
// follows the invoice live as the checkout page does (api/checkout/
// checkout.client.ts), through the same WebSocket (/ws/invoices/{id}), and
// polls the public status endpoint if the socket fails. On each change it
// fetches the page again and swaps in the parts marked data-live (the
// facts, payments, webhook deliveries and history), leaving the forms alone
// and the keyboard focus where it was.
// It also offers to copy the checkout link. Served by
// api/dashboard/developer-routes.ts, bundled as the checkout's is.
import { CLOSE_FINAL, CLOSE_NOT_FOUND, invoiceSocket, polledStatus } from '../checkout/live.client.ts';

const POLL_MS = 10_000;
const COPY_FEEDBACK_MS = 3_000;

const invoiceId = document.getElementById('invoice-id')?.textContent ?? '';
const isFinal = (status: string | undefined) => status === 'settled' || status === 'expired';
const shownStatus = () => document.getElementById('invoice')?.dataset.status;
const say = (text: string) => {
  const line = document.getElementById('live-status');
  if (line) line.textContent = text;
};

// ---- Swapping in the page's live parts ----------------------------------------

let refreshing = false;
let wanted = false;

const FOCUSABLE = 'a, button, input, select, textarea';

/** The part swapped for `fresh`, the keyboard focus kept on the same control of it. */
function swap(part: HTMLElement, fresh: HTMLElement) {
  const controls = [...part.querySelectorAll<HTMLElement>(FOCUSABLE)];
  const focused = controls.indexOf(document.activeElement as HTMLElement);
  const replacement = document.importNode(fresh, true);
  part.replaceWith(replacement);
  offerCopy();
  if (focused >= 0) replacement.querySelectorAll<HTMLElement>(FOCUSABLE)[focused]?.focus();
}

/** The page again, its live parts swapped in. */
async function refresh(): Promise<void> {
  if (refreshing) {
    wanted = true;
    return;
  }
  refreshing = true;
  try {
    const response = await fetch(window.location.href, { headers: { accept: 'text/html' } });
    if (!response.ok) return;
    const next = new DOMParser().parseFromString(await response.text(), 'text/html');
    for (const part of document.querySelectorAll<HTMLElement>('[data-live]')) {
      const fresh = next.getElementById(part.id);
      if (fresh) swap(part, fresh);
    }
    say(`Following live: ${shownStatus()}.`);
  } catch {
    // offline for a moment: the next change tries again
  } finally {
    refreshing = false;
  }
  if (wanted) {
    wanted = false;
    await refresh();
  }
}

// ---- Following the invoice: WebSocket, then polling ----------------------------

function follow() {
  const socket = invoiceSocket(invoiceId);
  if (!socket) return poll();
  socket.addEventListener('open', () => say(`Following live: ${shownStatus()}.`));
  // The first message is the status on connect: the page may be older than it.
  socket.addEventListener('message', () => void refresh());
  socket.addEventListener('close', (event) => {
    if (event.code === CLOSE_FINAL || isFinal(shownStatus())) return say(`This invoice is ${shownStatus()}.`);
    if (event.code !== CLOSE_NOT_FOUND) poll();
  });
}

function poll() {
  let last: string | undefined;
  const timer = setInterval(async () => {
    try {
      const status = await polledStatus(invoiceId);
      if (!status) return;
      const seen = JSON.stringify(status);
      if (seen !== last) await refresh();
      last = seen;
      if (isFinal(status.status)) clearInterval(timer);
    } catch {
      // offline for a moment: the next tick tries again
    }
  }, POLL_MS);
}

// ---- Copying the checkout link ------------------------------------------------

/** The Copy button, shown only where the browser can copy (it is hidden without script). */
function offerCopy() {
  const button = document.getElementById('copy-checkout-link');
  if (button && navigator.clipboard) button.hidden = false;
}

// Listened for on the document: the button is swapped with its part.
document.addEventListener('click', async (event) => {
  const button = (event.target as Element | null)?.closest<HTMLButtonElement>('#copy-checkout-link');
  const link = document.getElementById('checkout-link') as HTMLAnchorElement | null;
  if (!button || !link) return;
  try {
    await navigator.clipboard.writeText(link.href);
    button.textContent = 'Copied';
  } catch {
    button.textContent = 'Could not copy: select the link';
  }
  setTimeout(() => (button.textContent = 'Copy'), COPY_FEEDBACK_MS);
});

offerCopy();
if (invoiceId && !isFinal(shownStatus())) follow();
