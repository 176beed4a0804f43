// The dashboard's Settlements, Settings and Activity HTML (dashboard.md,
// pages 4 and 6, and the activity page). Forms are offered only to the roles
// that may use them; the server checks again whatever the page offered.
import { roleAllows } from '../../domain/merchant-user.ts';
import type { ActivityTable, SettlementsTable } from '../../projections/schema.ts';
import { markup } from '../routes/checkout.ts';
import { csrfField, errorLine, page, payoutFacts, reauthenticationFields } from './pages.ts';
import type { DashboardSession } from './sessions.ts';

type Html = ReturnType<typeof markup>;

export const SETTLEMENT_STATUSES = ['pending', 'submitted', 'completed', 'failed'] as const;

const when = (value: Date | string | null) =>
  value === null ? '' : new Date(value).toISOString().slice(0, 16).replace('T', ' ');

const options = (values: readonly string[], selected: string, any = 'any') =>
  ['', ...values].map(
    (v) => markup`<option value="${v}"${v === selected ? markup` selected` : ''}>${v || any}</option>`,
  );

/** The pages of a list, keeping its filters. */
function pager(path: string, query: Record<string, string>, at: number, pages: number): Html {
  const link = (n: number) => `${path}?${new URLSearchParams({ ...query, page: String(n) })}`;
  return markup`<nav aria-label="Pages" class="pages">
    ${at > 1 && markup`<a href="${link(at - 1)}" rel="prev">Newer</a>`}
    <span>Page ${at} of ${Math.max(pages, 1)}</span>
    ${at < pages && markup`<a href="${link(at + 1)}" rel="next">Older</a>`}
  </nav>`;
}

/** The Settlements list's filters, as the form and the links keep them. */
export interface SettlementListFilter {
  status: string;
  chain: string;
  token: string;
  /** YYYY-MM-DD, inclusive, UTC. */
  from: string;
  to: string;
}

export function settlementsPage(
  session: DashboardSession,
  list: {
    rows: SettlementsTable[];
    total: number;
    page: number;
    pages: number;
    filter: SettlementListFilter;
    chains: readonly string[];
    tokens: readonly string[];
    error?: string;
  },
): string {
  const { filter } = list;
  const query = { ...filter };
  return page(
    'Settlements',
    markup`<form method="get" action="/dashboard/settlements" class="filters">
      <label for="settlement-status">Status</label>
      <select id="settlement-status" name="status">${options(SETTLEMENT_STATUSES, filter.status)}</select>
      <label for="settlement-chain">Chain</label>
      <select id="settlement-chain" name="chain">${options(list.chains, filter.chain)}</select>
      <label for="settlement-token">Token</label>
      <select id="settlement-token" name="token">${options(list.tokens, filter.token)}</select>
      <label for="settlement-from">From</label>
      <input id="settlement-from" name="from" type="date" value="${filter.from}" />
      <label for="settlement-to">To</label>
      <input id="settlement-to" name="to" type="date" value="${filter.to}" />
      <button type="submit" id="filter">Show</button>
    </form>
    ${errorLine(list.error)}
    <p><span id="total">${list.total} settlement${list.total === 1 ? '' : 's'}</span>${
      roleAllows(session.role, 'reports:export') &&
      markup` · <a href="/dashboard/settlements/export.csv?${new URLSearchParams(query).toString()}" id="export-csv" download>Export these as CSV</a>`
    }</p>
    <div class="scroll"><table id="settlements">
      <thead><tr><th scope="col">Created</th><th scope="col">Settlement</th><th scope="col">Paid out</th><th scope="col">Fees</th><th scope="col">Status</th></tr></thead>
      <tbody>${list.rows.map(
        (s) => markup`<tr data-settlement-id="${s.id}">
          <td>${when(s.created_at)}</td>
          <td><a href="/dashboard/settlements/${s.id}" class="settlement-link">${s.id.slice(0, 8)}</a></td>
          <td>${s.amount} ${s.currency} on ${s.chain}</td>
          <td>${s.platform_fee} + ${s.network_fee} ${s.currency}</td>
          <td class="settlement-status">${s.status}${s.failure_code && markup` · ${s.failure_code}`}</td>
        </tr>`,
      )}</tbody>
    </table></div>
    ${pager('/dashboard/settlements', query, list.page, list.pages)}`,
    session,
  );
}

export function settlementPage(session: DashboardSession, s: SettlementsTable): string {
  return page(
    `Settlement ${s.amount} ${s.currency}`,
    markup`<dl class="facts" id="settlement">
      ${payoutFacts('settlement', s.id, s.status, s.invoice_id)}
      <dt>Received</dt><dd>${s.gross_amount} ${s.currency} on ${s.chain}</dd>
      <dt>Platform fee</dt><dd>${s.platform_fee} ${s.currency}</dd>
      <dt>Network fee</dt><dd>${s.network_fee} ${s.currency}</dd>
      <dt>Paid to you</dt><dd id="settlement-net">${s.amount} ${s.currency}</dd>
      <dt>Your wallet</dt><dd><code>${s.merchant_wallet ?? 'not set: add one in Settings'}</code></dd>
      ${s.transaction_hash && markup`<dt>Transaction</dt><dd><code id="settlement-tx">${s.transaction_hash}</code></dd>`}
      ${
        s.failure_code &&
        markup`<dt>Why not paid</dt><dd id="settlement-failure">${s.failure_code}${s.failure_reason && markup`: ${s.failure_reason}`}</dd>`
      }
      ${s.status === 'failed' && s.next_attempt_at && markup`<dt>Next attempt</dt><dd>${when(s.next_attempt_at)}</dd>`}
      <dt>Attempts</dt><dd>${s.attempts}</dd>
      <dt>Created</dt><dd>${when(s.created_at)}</dd>
      ${s.completed_at && markup`<dt>Completed</dt><dd>${when(s.completed_at)}</dd>`}
    </dl>`,
    session,
  );
}

export function settingsPage(
  session: DashboardSession,
  settings: {
    name: string;
    wallets: Record<string, string>;
    chains: readonly string[];
    reauthenticate: boolean;
    /** Why the name or the wallet was not saved, shown at its form; the wallet form keeps what was typed. */
    nameError?: string;
    walletError?: string;
    entered?: { chain: string; address: string };
    saved?: string;
  },
): string {
  const mayName = roleAllows(session.role, 'merchant:write');
  const mayWallets = roleAllows(session.role, 'wallets:write');
  return page(
    'Settings',
    markup`${settings.saved && markup`<p class="notice" role="status" id="saved">${settings.saved}</p>`}
    <section aria-labelledby="name-title">
      <h2 id="name-title">Name</h2>
      ${
        mayName
          ? markup`<form method="post" action="/dashboard/settings/name" class="stack" id="name-form">
              ${csrfField(session)}
              <label for="merchant-name-input">The name your customers see at checkout</label>
              <input id="merchant-name-input" name="name" required maxlength="200" value="${settings.name}" />
              ${errorLine(settings.nameError)}
              <button type="submit" id="save-name">Save name</button>
            </form>`
          : markup`<p>${settings.name}</p>`
      }
    </section>
    <section aria-labelledby="wallets-title">
      <h2 id="wallets-title">Settlement wallets</h2>
      <p>Where each chain's payments are paid out to you. Each address is checked before it is saved.</p>
      <div class="scroll"><table id="wallets">
        <thead><tr><th scope="col">Chain</th><th scope="col">Wallet</th></tr></thead>
        <tbody>${settings.chains.map(
          (chain) =>
            markup`<tr data-chain="${chain}"><td>${chain}</td><td><code>${settings.wallets[chain] ?? 'none'}</code></td></tr>`,
        )}</tbody>
      </table></div>
      ${
        mayWallets &&
        markup`<form method="post" action="/dashboard/settings/wallets" class="stack" id="wallet-form">
          ${csrfField(session)}
          <label for="wallet-chain">Chain</label>
          <select id="wallet-chain" name="chain">${settings.chains.map(
            (c) => markup`<option value="${c}"${c === settings.entered?.chain ? markup` selected` : ''}>${c}</option>`,
          )}</select>
          <label for="wallet-address">Address <span class="hint">(empty to remove the chain's wallet)</span></label>
          <input id="wallet-address" name="address" maxlength="128" spellcheck="false" autocomplete="off" value="${settings.entered?.address ?? ''}" />
          ${reauthenticationFields(session, settings.reauthenticate)}
          ${errorLine(settings.walletError)}
          <button type="submit" id="save-wallet">Save wallet</button>
        </form>`
      }
    </section>`,
    session,
  );
}

/** Who an activity row's actor is, as people know them. */
function actorText(row: ActivityRow): string {
  if (row.actor_type === 'user') return row.actor_email ?? 'a user';
  if (row.actor_type === 'operator') return 'the operator';
  return row.key ? `API key ${row.key.key_prefix}…${row.key.name ? ` (${row.key.name})` : ''}` : 'an API key';
}

/** What an event was about, linked where the dashboard has a page for it. */
function subjectOf(streamId: string): Html {
  const [, kind, id] = /^([a-z]+)-(.+)$/.exec(streamId) ?? [];
  if (kind === 'invoice') return markup`<a href="/dashboard/invoices/${id}">invoice ${id!.slice(0, 8)}</a>`;
  if (kind === 'refund') return markup`<a href="/dashboard/refunds/${id}">refund ${id!.slice(0, 8)}</a>`;
  if (kind === 'settlement') return markup`<a href="/dashboard/settlements/${id}">settlement ${id!.slice(0, 8)}</a>`;
  const names: Record<string, string> = { merchant: 'settings', merchantuser: 'user', apikey: 'API key' };
  return markup`${names[kind ?? ''] ?? kind ?? streamId}${kind === 'merchantuser' || kind === 'apikey' ? ` ${id!.slice(0, 8)}` : ''}`;
}

/** An event's type as words: "InvoiceCancelled" → "invoice cancelled". */
const inWords = (type: string) => type.replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase();

export type ActivityRow = ActivityTable & { key?: { key_prefix: string; name: string | null } };

export function activityPage(
  session: DashboardSession,
  list: { rows: ActivityRow[]; total: number; page: number; pages: number },
): string {
  return page(
    'Activity',
    markup`<p id="total">${list.total} action${list.total === 1 ? '' : 's'} by people, the operator and API keys</p>
    <div class="scroll"><table id="activity">
      <thead><tr><th scope="col">When</th><th scope="col">Who</th><th scope="col">What</th><th scope="col">Of</th></tr></thead>
      <tbody>${list.rows.map(
        (r) => markup`<tr>
          <td>${when(r.created_at)}</td>
          <td class="actor">${actorText(r)}</td>
          <td class="what">${inWords(r.event_type)}${r.detail && markup`: ${r.detail}`}</td>
          <td>${subjectOf(r.stream_id)}</td>
        </tr>`,
      )}</tbody>
    </table></div>
    ${pager('/dashboard/activity', {}, list.page, list.pages)}`,
    session,
  );
}
