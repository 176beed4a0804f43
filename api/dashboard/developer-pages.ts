// The dashboard's Developers → Webhooks HTML (dashboard.md, page 5): the
// webhook URL, rotating the signing secret (the new one shown once), a test
// event and the delivery log with redelivery; and the invoice page's own
// deliveries and timeline. Offered to the roles with webhooks:write; the
// server checks again whatever the page offered.
import type { WebhookDeliveryView } from '../../commands/webhook-delivery.ts';
import { DELIVERY_STATUSES } from '../../commands/webhook-delivery.ts';
import { WEBHOOK_EVENT_TYPES } from '../../projections/contract/webhooks.ts';
import { markup } from '../routes/checkout.ts';
import { csrfField, errorLine, page, reauthenticationFields } from './pages.ts';
import type { DashboardSession } from './sessions.ts';

type Html = ReturnType<typeof markup>;

const when = (value: string) => value.slice(0, 19).replace('T', ' ');

/** Which form an error belongs to, so it is shown beside that form. */
export type WebhooksForm = 'url' | 'secret' | 'test';

export interface WebhooksPageData {
  url: string | null;
  deliveries: WebhookDeliveryView[];
  total: number;
  page: number;
  pages: number;
  status: string;
  reauthenticate: boolean;
  /** The secret just made: shown this once. */
  newSecret?: string;
  test?: { delivered: boolean; statusCode: number | null; error: string | null; url: string; event: string };
  error?: { form: WebhooksForm; message: string };
}

/** The deliveries with a Redeliver button each; `back` is where the button returns to. */
export function deliveriesTable(
  session: DashboardSession,
  deliveries: WebhookDeliveryView[],
  id: string,
  back: string,
): Html {
  return markup`<div class="scroll"><table id="${id}">
    <thead><tr><th scope="col">Created</th><th scope="col">Event</th><th scope="col">URL</th><th scope="col">Status</th><th scope="col">Attempts</th><th scope="col">Last answer</th><th scope="col"></th></tr></thead>
    <tbody>${deliveries.map(
      (d) => markup`<tr data-delivery-id="${d.id}">
        <td>${when(d.createdAt)}</td>
        <td>${d.event}</td>
        <td><code>${d.url}</code></td>
        <td class="delivery-status">${d.status}${d.nextAttemptAt && markup` <span class="hint">next ${when(d.nextAttemptAt)}</span>`}</td>
        <td class="delivery-attempts">${d.attempts}</td>
        <td>${d.lastStatusCode !== null ? `HTTP ${d.lastStatusCode}` : (d.lastError ?? '')}</td>
        <td><form method="post" action="/dashboard/developers/webhooks/deliveries/${d.id}/redeliver" class="inline">
          ${csrfField(session)}<input type="hidden" name="back" value="${back}" />
          <button type="submit" class="redeliver" aria-label="Redeliver ${d.event} of ${when(d.createdAt)}">Redeliver</button>
        </form></td>
      </tr>`,
    )}</tbody>
  </table></div>`;
}

export function webhooksPage(session: DashboardSession, data: WebhooksPageData): string {
  const errorOf = (form: WebhooksForm) => errorLine(data.error?.form === form ? data.error.message : undefined);
  const pageLink = (n: number) =>
    `/dashboard/developers/webhooks?${new URLSearchParams({ status: data.status, page: String(n) })}`;
  return page(
    'Webhooks',
    markup`${
      data.newSecret &&
      markup`<section class="once" aria-labelledby="secret-title">
        <h2 id="secret-title">Your new signing secret</h2>
        <p>Copy it to your webhook receiver now: it is shown this once and never again. Webhooks are signed with it from now on.</p>
        <p><code id="new-secret">${data.newSecret}</code></p>
      </section>`
    }
    <section aria-labelledby="url-title">
      <h2 id="url-title">Webhook URL</h2>
      <p>Where the service sends this merchant's webhooks (an invoice's own URL, given when it was created, comes first).</p>
      <form method="post" action="/dashboard/developers/webhooks/url" class="stack" id="webhook-url-form">
        ${csrfField(session)}
        <label for="webhook-url">URL <span class="hint">(empty: no webhooks)</span></label>
        <input id="webhook-url" name="url" type="url" maxlength="2048" spellcheck="false" value="${data.url ?? ''}" />
        ${reauthenticationFields(session, data.reauthenticate, 'url-reauth')}
        ${errorOf('url')}
        <button type="submit" id="save-webhook-url">Save URL</button>
      </form>
    </section>
    <section aria-labelledby="secret-rotate-title">
      <h2 id="secret-rotate-title">Signing secret</h2>
      <p>Every webhook is signed with the merchant's secret (<code>X-Webhook-Signature</code>). A new one replaces the old at once, for every delivery still to be sent.</p>
      <form method="post" action="/dashboard/developers/webhooks/secret" class="stack" id="rotate-secret-form">
        ${csrfField(session)}
        ${reauthenticationFields(session, data.reauthenticate, 'secret-reauth')}
        ${errorOf('secret')}
        <button type="submit" id="rotate-secret">Make a new secret</button>
      </form>
    </section>
    <section aria-labelledby="test-title">
      <h2 id="test-title">Send a test event</h2>
      ${
        data.test &&
        markup`<p class="notice" role="status" id="test-result">${
          data.test.delivered
            ? `${data.test.event} delivered to ${data.test.url}: HTTP ${data.test.statusCode}.`
            : `${data.test.event} not delivered to ${data.test.url}: ${data.test.statusCode !== null ? `HTTP ${data.test.statusCode}` : data.test.error}.`
        }</p>`
      }
      <form method="post" action="/dashboard/developers/webhooks/test" class="stack" id="test-event-form">
        ${csrfField(session)}
        <label for="test-event">Event</label>
        <select id="test-event" name="eventType">${WEBHOOK_EVENT_TYPES.map(
          (e) => markup`<option value="${e}"${e === data.test?.event ? markup` selected` : ''}>${e}</option>`,
        )}</select>
        <label for="test-url">To</label>
        <input id="test-url" name="url" type="url" maxlength="2048" spellcheck="false" required value="${data.test?.url ?? data.url ?? ''}" />
        ${errorOf('test')}
        <button type="submit" id="send-test-event">Send</button>
      </form>
    </section>
    <section aria-labelledby="deliveries-title">
      <h2 id="deliveries-title">Deliveries</h2>
      <form method="get" action="/dashboard/developers/webhooks" class="filters">
        <label for="delivery-status-filter">Status</label>
        <select id="delivery-status-filter" name="status">${['', ...DELIVERY_STATUSES].map(
          (s) => markup`<option value="${s}"${s === data.status ? markup` selected` : ''}>${s || 'any'}</option>`,
        )}</select>
        <button type="submit" id="filter-deliveries">Show</button>
      </form>
      <p id="deliveries-total">${data.total} deliver${data.total === 1 ? 'y' : 'ies'}</p>
      ${deliveriesTable(session, data.deliveries, 'deliveries', '/dashboard/developers/webhooks')}
      <nav aria-label="Pages" class="pages">
        ${data.page > 1 && markup`<a href="${pageLink(data.page - 1)}" rel="prev">Newer</a>`}
        <span>Page ${data.page} of ${Math.max(data.pages, 1)}</span>
        ${data.page < data.pages && markup`<a href="${pageLink(data.page + 1)}" rel="next">Older</a>`}
      </nav>
    </section>`,
    session,
  );
}

/** One line of an invoice's history: when, what happened, and who asked for it where the event names them. */
export interface TimelineEntry {
  at: string;
  what: string;
  by: string | null;
}

/**
 * The invoice page's own sections: its history as a timeline, and for
 * webhooks:write its webhook deliveries; the live-following script.
 */
export function invoiceHistorySections(
  session: DashboardSession,
  invoiceId: string,
  timeline: TimelineEntry[],
  deliveries: WebhookDeliveryView[] | undefined,
): Html {
  return markup`${
    deliveries &&
    markup`<section id="invoice-deliveries-section" data-live aria-labelledby="invoice-deliveries-title">
      <h2 id="invoice-deliveries-title">Webhook deliveries</h2>
      ${
        deliveries.length === 0
          ? markup`<p>No webhook sent for this invoice.</p>`
          : deliveriesTable(session, deliveries, 'invoice-deliveries', `/dashboard/invoices/${invoiceId}`)
      }
    </section>`
  }
  <section id="timeline-section" data-live aria-labelledby="timeline-title">
    <h2 id="timeline-title">History</h2>
    <ol id="timeline" class="timeline">${timeline.map(
      (t) =>
        markup`<li><time datetime="${t.at}">${when(t.at)}</time> <span class="what">${t.what}</span>${t.by && markup` <span class="by">by ${t.by}</span>`}</li>`,
    )}</ol>
  </section>
  <p id="live-status" class="hint" role="status" aria-live="polite"></p>
  <script type="module" src="/dashboard/assets/invoice.js"></script>`;
}
