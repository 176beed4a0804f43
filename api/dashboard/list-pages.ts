// The dashboard's lists and figures (dashboard.md, pages 1, 2 and 4): the
// Overview's volume per day and ledger totals, and the Invoices and Refunds
// lists with their filters, keyset pages and the CSV export of what is shown.
import { roleAllows } from '../../domain/merchant-user.ts';
import type { DayVolume } from '../../projections/overview.ts';
import type { RefundView } from '../../projections/contract/refund.ts';
import type { InvoicesTable } from '../../projections/schema.ts';
import { formatFiatAmount, markup } from '../routes/checkout.ts';
import { errorLine, page } from './pages.ts';
import { REFUND_STATUSES, refundsTable } from './refund-pages.ts';
import type { DashboardSession } from './sessions.ts';

type Html = ReturnType<typeof markup>;

const day = (value: Date | string) => new Date(value).toISOString().slice(0, 16).replace('T', ' ');

/** A chain and token's movements over the Overview's days, in the token's own decimals (the ledger's columns). */
export interface TotalsLine {
  chain: string;
  token: string;
  received: string;
  settled: string;
  fees: string;
  refunded: string;
}

/** The Overview's figures: volume per day for `volume` readers, the ledger totals for settlement readers. */
export function overviewFigures(figures: {
  days: number;
  since: string;
  volume: DayVolume[] | undefined;
  totals: TotalsLine[] | undefined;
}): Html {
  return markup`${
    figures.volume &&
    markup`<section aria-labelledby="volume-title">
      <h2 id="volume-title">Received per day, last ${figures.days} days</h2>
      ${
        figures.volume.length === 0
          ? markup`<p id="volume-empty">No payment confirmed since ${figures.since}.</p>`
          : markup`<div class="scroll"><table id="volume">
        <thead><tr><th scope="col">Day (UTC)</th><th scope="col">Chain</th><th scope="col">Token</th><th scope="col">Amount</th><th scope="col">Value</th></tr></thead>
        <tbody>${figures.volume.map(
          (v) => markup`<tr>
            <td>${v.day}</td><td>${v.chain}</td><td>${v.token}</td><td>${v.amount}</td>
            <td>${v.fiatValue === null ? markup`<span class="hint">no quote for this token</span>` : formatFiatAmount(v.fiatValue, v.fiatCurrency)}</td>
          </tr>`,
        )}</tbody>
      </table></div>`
      }
    </section>`
  }
  ${
    figures.totals &&
    markup`<section aria-labelledby="totals-title">
      <h2 id="totals-title">Since ${figures.since}</h2>
      <p class="hint">As the ledger report counts them: received at confirmation; settled (net), fees and refunds paid from the deposit, at completion.</p>
      ${
        figures.totals.length === 0
          ? markup`<p id="totals-empty">Nothing moved.</p>`
          : markup`<div class="scroll"><table id="totals">
        <thead><tr><th scope="col">Chain</th><th scope="col">Token</th><th scope="col">Received</th><th scope="col">Settled</th><th scope="col">Fees</th><th scope="col">Refunded</th></tr></thead>
        <tbody>${figures.totals.map(
          (t) =>
            markup`<tr><td>${t.chain}</td><td>${t.token}</td><td>${t.received}</td><td>${t.settled}</td><td>${t.fees}</td><td>${t.refunded}</td></tr>`,
        )}</tbody>
      </table></div>`
      }
    </section>`
  }`;
}

/** A select of `values` with `any` first, `chosen` selected. */
const choice = (id: string, name: string, label: string, values: readonly string[], chosen: string) =>
  markup`<span class="field"><label for="${id}">${label}</label>
    <select id="${id}" name="${name}">${['', ...values].map(
      (v) => markup`<option value="${v}"${v === chosen ? markup` selected` : ''}>${v || 'any'}</option>`,
    )}</select></span>`;

const dateField = (id: string, name: string, label: string, value: string) =>
  markup`<span class="field"><label for="${id}">${label}</label>
    <input id="${id}" name="${name}" type="date" value="${value}" /></span>`;

/** The address of `path` with the non-empty values of `query`. */
function withQuery(path: string, query: Record<string, string>): string {
  const params = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== ''));
  return params.size > 0 ? `${path}?${params}` : path;
}

/** The list's pages: the newest, the newer rows before the first one shown, the older after the last. */
function pageLinks(path: string, query: Record<string, string>, list: ListView<unknown, unknown>): Html {
  return markup`<nav aria-label="Pages" class="pages">
    ${list.paged && markup`<a href="${withQuery(path, query)}" id="newest">Newest</a>`}
    ${list.newer && markup`<a href="${withQuery(path, { ...query, before: list.newer })}" rel="prev" id="newer">Newer</a>`}
    ${list.older && markup`<a href="${withQuery(path, { ...query, after: list.older })}" rel="next" id="older">Older</a>`}
  </nav>`;
}

/** The CSV of the list as filtered, for the roles that export. */
const exportLink = (session: DashboardSession, path: string, query: Record<string, string>) =>
  roleAllows(session.role, 'reports:export') &&
  markup`<p><a href="${withQuery(path, query)}" id="export-csv" download>Export these as CSV</a></p>`;

export interface ListView<Row, Query> {
  rows: Row[];
  total: number;
  /** The filters as given, to show them again and carry them to the other pages and the export. */
  query: Query;
  /** The cursor of the older page (its `after`), when there is one. */
  older?: string;
  /** The cursor of the newer page (its `before`), when this is not the newest. */
  newer?: string;
  /** Whether this is not the first page (so the newest is a link away). */
  paged: boolean;
  error?: string;
}

/** The days a list's rows were created in, both inclusive (UTC). */
const createdBetween = (q: { from: string; to: string }) =>
  markup`${dateField('from', 'from', 'Created from', q.from)}
      ${dateField('to', 'to', 'to (UTC, inclusive)', q.to)}`;

/** Above a list's table: what is wrong with its filters, how many rows match them, and their CSV. */
const listSummary = (
  session: DashboardSession,
  list: ListView<unknown, unknown>,
  noun: string,
  csv: { path: string; query: Record<string, string> },
) => markup`${errorLine(list.error)}
    <p id="total">${list.total} ${noun}${list.total === 1 ? '' : 's'}</p>
    ${exportLink(session, csv.path, csv.query)}`;

export interface InvoiceListQuery {
  q: string;
  status: string;
  issue: string;
  chain: string;
  token: string;
  from: string;
  to: string;
}

export function invoicesPage(
  session: DashboardSession,
  list: ListView<InvoicesTable, InvoiceListQuery>,
  options: {
    statuses: readonly string[];
    issues: readonly string[];
    chains: readonly string[];
    tokens: readonly string[];
  },
): string {
  const q = list.query;
  return page(
    'Invoices',
    markup`<form method="get" action="/dashboard/invoices" class="filters" role="search">
      <span class="field wide"><label for="q">Invoice id, order id, deposit address or transaction hash</label>
      <input id="q" name="q" value="${q.q}" maxlength="200" spellcheck="false" /></span>
      ${choice('status', 'status', 'Status', options.statuses, q.status)}
      ${choice('issue', 'issue', 'Issue', options.issues, q.issue)}
      ${choice('chain', 'chain', 'Chain', options.chains, q.chain)}
      ${choice('token', 'token', 'Token', options.tokens, q.token)}
      ${createdBetween(q)}
      <button type="submit" id="search">Search</button>
    </form>
    ${listSummary(session, list, 'invoice', { path: '/dashboard/invoices.csv', query: { ...q } })}
    <div class="scroll"><table id="invoices">
      <thead><tr><th scope="col">Created</th><th scope="col">Invoice</th><th scope="col">Amount</th><th scope="col">Status</th><th scope="col">Paid with</th></tr></thead>
      <tbody>${list.rows.map(
        (r) => markup`<tr>
          <td>${day(r.created_at)}</td>
          <td><a href="/dashboard/invoices/${r.id}" class="invoice-link">${r.id}</a></td>
          <td>${formatFiatAmount(r.amount, r.currency)}</td>
          <td>${r.status}${r.payment_issue_type && markup` · ${r.payment_issue_type}`}${r.paid_late && markup` · late`}</td>
          <td>${r.chain && markup`${r.crypto_amount} ${r.token} on ${r.chain}`}</td>
        </tr>`,
      )}</tbody>
    </table></div>
    ${pageLinks('/dashboard/invoices', { ...q }, list)}`,
    session,
  );
}

export interface RefundListQuery {
  status: string;
  from: string;
  to: string;
}

export function refundsPage(session: DashboardSession, list: ListView<RefundView, RefundListQuery>): string {
  const q = list.query;
  return page(
    'Refunds',
    markup`<form method="get" action="/dashboard/refunds" class="filters">
      ${choice('refund-status-filter', 'status', 'Status', REFUND_STATUSES, q.status)}
      ${createdBetween(q)}
      <button type="submit" id="filter">Show</button>
    </form>
    ${listSummary(session, list, 'refund', { path: '/dashboard/refunds.csv', query: { ...q } })}
    ${refundsTable(list.rows, 'refunds')}
    ${pageLinks('/dashboard/refunds', { ...q }, list)}`,
    session,
  );
}
