// The dashboard's HTML, built on the server with the checkout page's
// escaping `markup` tag: every form works without script, and the pages run
// under the checkout page's strict Content-Security-Policy (no inline
// script or style, nothing from another host).
import { permissions as apiKeyPermissions } from '../../domain/api-key.ts';
import { roleAllows, userRoles } from '../../domain/merchant-user.ts';
import type {
  ApiKeysTable,
  InvoiceAddressesTable,
  InvoicesTable,
  MerchantUsersTable,
  PaymentsTable,
} from '../../projections/schema.ts';
import { formatFiatAmount, markup, pageHead } from '../routes/checkout.ts';
import type { DashboardSession } from './sessions.ts';

type Html = ReturnType<typeof markup>;

const iso = (value: Date | string | null) => (value === null ? '' : new Date(value).toISOString());
const day = (value: Date | string) => iso(value).slice(0, 16).replace('T', ' ');

function nav(session: DashboardSession): Html {
  const links: [string, string, boolean][] = [
    ['/dashboard', 'Overview', true],
    ['/dashboard/invoices', 'Invoices', roleAllows(session.role, 'invoices:read')],
    ['/dashboard/refunds', 'Refunds', roleAllows(session.role, 'refunds:read')],
    ['/dashboard/settlements', 'Settlements', roleAllows(session.role, 'settlements:read')],
    ['/dashboard/activity', 'Activity', roleAllows(session.role, 'activity:read')],
    ['/dashboard/developers/api-keys', 'API keys', roleAllows(session.role, 'api_keys:write')],
    ['/dashboard/developers/webhooks', 'Webhooks', roleAllows(session.role, 'webhooks:write')],
    ['/dashboard/team', 'Team', roleAllows(session.role, 'users:write')],
    ['/dashboard/settings', 'Settings', true],
  ];
  return markup`<header class="bar">
    <p class="who"><strong id="merchant-name">${session.merchantName}</strong> · <span id="signed-in-as">${session.email}</span> (<span id="role">${session.role}</span>)</p>
    <nav aria-label="Dashboard">
      <ul>${links.filter(([, , shown]) => shown).map(([href, text]) => markup`<li><a href="${href}">${text}</a></li>`)}</ul>
    </nav>
    <form method="post" action="/dashboard/logout" class="inline">
      ${csrfField(session)}
      <button type="submit" id="sign-out">Sign out</button>
    </form>
  </header>`;
}

export const csrfField = (session: DashboardSession) =>
  markup`<input type="hidden" name="_csrf" value="${session.csrfToken}" />`;

export function page(title: string, body: Html, session?: DashboardSession): string {
  return markup`<!doctype html>
    <html lang="en">
      <head>
        ${pageHead(`${title} · Dashboard`, '/dashboard/assets/dashboard.css')}
      </head>
      <body>
        ${session && nav(session)}
        <main id="main">
          <h1>${title}</h1>
          ${body}
        </main>
      </body>
    </html>
`.value;
}

/** The first facts of a refund's or a settlement's page, by the ids the tests find them by. */
export const payoutFacts = (kind: 'refund' | 'settlement', id: string, status: string, invoiceId: string) =>
  markup`<dt>Id</dt><dd id="${kind}-id">${id}</dd>
      <dt>Status</dt><dd id="${kind}-status">${status}</dd>
      <dt>Invoice</dt><dd><a href="/dashboard/invoices/${invoiceId}">${invoiceId}</a></dd>`;

export const errorLine = (error: string | undefined) =>
  error && markup`<p class="error" id="form-error" role="alert">${error}</p>`;

export function loginPage(options: { error?: string; email?: string; notice?: string; csrfToken: string }): string {
  return page(
    'Sign in',
    markup`${options.notice && markup`<p class="notice" role="status">${options.notice}</p>`}
    <form method="post" action="/dashboard/login" class="stack" id="login-form">
      <input type="hidden" name="_csrf" value="${options.csrfToken}" />
      <label for="email">E-mail</label>
      <input id="email" name="email" type="email" autocomplete="username" required maxlength="254" value="${options.email ?? ''}" />
      <label for="password">Password</label>
      <input id="password" name="password" type="password" autocomplete="current-password" required maxlength="200" />
      <label for="code">Authenticator code <span class="hint">(if you enrolled one)</span></label>
      <input id="code" name="code" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" maxlength="6" />
      ${errorLine(options.error)}
      <button type="submit" id="sign-in">Sign in</button>
    </form>`,
  );
}

export interface InviteForm {
  email: string;
  role: string;
  /** The authenticator secret offered, for the roles that need one. */
  totp: { secret: string; qrCode: string } | null;
  error?: string;
}

export function invitePage(form: InviteForm): string {
  return page(
    'Welcome',
    markup`<p>You are invited as <strong id="invite-role">${form.role}</strong> with <strong id="invite-email">${form.email}</strong>. Choose a password${form.totp ? ' and set up an authenticator app' : ''}.</p>
    <form method="post" class="stack" id="invite-form">
      <label for="password">Password <span class="hint">(at least 12 characters, not a common one)</span></label>
      <input id="password" name="password" type="password" autocomplete="new-password" required minlength="12" maxlength="200" />
      ${
        form.totp &&
        markup`<fieldset>
          <legend>Authenticator (required for your role)</legend>
          <p>Scan this code with an authenticator app, or type the key in.</p>
          <img src="${form.totp.qrCode}" alt="QR code of the authenticator key" width="200" height="200" id="totp-qr" />
          <p>Key: <code id="totp-secret">${form.totp.secret}</code></p>
          <input type="hidden" name="totpSecret" value="${form.totp.secret}" />
          <label for="code">The 6-digit code the app shows</label>
          <input id="code" name="code" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" maxlength="6" required />
        </fieldset>`
      }
      ${errorLine(form.error)}
      <button type="submit" id="accept">Create my account</button>
    </form>`,
  );
}

export function messagePage(title: string, text: string, session?: DashboardSession): string {
  return page(title, markup`<p id="message">${text}</p>`, session);
}

export interface Overview {
  counts: { status: string; n: number }[];
  attention: { invoiceId: string; what: string; since: Date }[];
  settlementsAttention: { id: string; invoiceId: string; what: string }[];
  /** Refunds waiting for the merchant's approval or for funds in the refund wallet. */
  refundsAttention: { id: string; what: string }[];
  /** Webhook URLs whose deliveries keep failing (for the roles that may change the URL). */
  webhooksAttention: { what: string; since: string }[];
  /** Volume per day and the ledger's totals (list-pages.ts `overviewFigures`). */
  figures?: Html;
}

export function overviewPage(session: DashboardSession, overview: Overview): string {
  return page(
    'Overview',
    markup`<section aria-labelledby="counts-title">
      <h2 id="counts-title">Invoices</h2>
      <ul class="counts" id="counts">${overview.counts.map((c) => markup`<li><span>${c.status}</span> <strong>${c.n}</strong></li>`)}</ul>
    </section>
    ${overview.figures}
    <section aria-labelledby="attention-title">
      <h2 id="attention-title">Needs attention</h2>
      ${
        overview.attention.length +
          overview.settlementsAttention.length +
          overview.refundsAttention.length +
          overview.webhooksAttention.length ===
        0
          ? markup`<p id="attention-empty">Nothing needs attention.</p>`
          : markup`<ul id="attention">
            ${overview.attention.map((a) => markup`<li><a href="/dashboard/invoices/${a.invoiceId}">${a.what}</a> <span class="hint">since ${day(a.since)}</span></li>`)}
            ${overview.settlementsAttention.map((s) => markup`<li><a href="/dashboard/invoices/${s.invoiceId}">${s.what}</a></li>`)}
            ${overview.refundsAttention.map((r) => markup`<li><a href="/dashboard/refunds/${r.id}" class="refund-attention">${r.what}</a></li>`)}
            ${overview.webhooksAttention.map((w) => markup`<li><a href="/dashboard/developers/webhooks?status=failed" class="webhook-attention">${w.what}</a> <span class="hint">since ${day(w.since)}</span></li>`)}
          </ul>`
      }
    </section>`,
    session,
  );
}

export function invoicePage(
  session: DashboardSession,
  invoice: InvoicesTable,
  addresses: InvoiceAddressesTable[],
  payments: PaymentsTable[],
  checkoutUrl: string,
  /** The sections after the payments: refunds, the timeline, webhook deliveries, each for the roles that may see it. */
  sections?: Html,
): string {
  return page(
    `Invoice ${formatFiatAmount(invoice.amount, invoice.currency)}`,
    markup`<dl class="facts" id="invoice" data-live data-status="${invoice.status}">
      <dt>Id</dt><dd id="invoice-id">${invoice.id}</dd>
      <dt>Status</dt><dd id="invoice-status">${invoice.status}${invoice.cancelled ? ' (cancelled)' : ''}</dd>
      ${invoice.payment_issue_type && markup`<dt>Issue</dt><dd>${invoice.payment_issue_type}</dd>`}
      <dt>Received</dt><dd>${invoice.total_received_amount} ${invoice.total_received_currency}</dd>
      <dt>Description</dt><dd>${invoice.description ?? ''}</dd>
      <dt>Created</dt><dd>${day(invoice.created_at)}</dd>
      <dt>Expires</dt><dd>${day(invoice.expires_at)}</dd>
      <dt>Checkout link</dt><dd><a href="${checkoutUrl}" id="checkout-link">${checkoutUrl}</a> <button type="button" id="copy-checkout-link" hidden>Copy</button></dd>
      ${invoice.metadata && markup`<dt>Metadata</dt><dd><code>${JSON.stringify(invoice.metadata)}</code></dd>`}
    </dl>
    ${
      roleAllows(session.role, 'invoices:write') &&
      !invoice.cancelled &&
      (invoice.status === 'pending' || invoice.status === 'partial') &&
      markup`<form method="post" action="/dashboard/invoices/${invoice.id}/cancel" class="inline">
        ${csrfField(session)}<button type="submit" id="cancel-invoice">Cancel this invoice</button>
      </form>`
    }
    <h2>Deposit addresses</h2>
    <div class="scroll"><table id="addresses">
      <thead><tr><th scope="col">Chain</th><th scope="col">Token</th><th scope="col">Address</th><th scope="col">Rate</th><th scope="col">Quoted</th></tr></thead>
      <tbody>${addresses.map((a) => markup`<tr><td>${a.chain}</td><td>${a.token}</td><td><code>${a.address}</code></td><td>${a.rate}</td><td>${day(a.quoted_at)}</td></tr>`)}</tbody>
    </table></div>
    <section id="payments-section" data-live aria-labelledby="payments-title">
    <h2 id="payments-title">Payments</h2>
    ${
      payments.length === 0
        ? markup`<p>No payment yet.</p>`
        : markup`<div class="scroll"><table id="payments">
      <thead><tr><th scope="col">Transaction</th><th scope="col">Chain</th><th scope="col">Confirmations</th><th scope="col">Status</th></tr></thead>
      <tbody>${payments.map((p) => markup`<tr><td><code>${p.tx_hash}</code></td><td>${p.chain} ${p.token}</td><td>${p.confirmations} of ${p.required_confirmations}</td><td>${p.status}${p.wrong_token ? ' (wrong token)' : ''}</td></tr>`)}</tbody>
    </table></div>`
    }
    </section>
    ${sections}`,
    session,
  );
}

/**
 * Fields asking for the password (and code) again, when the last time was
 * too long ago; `prefix` keeps their ids apart where a page has two such forms.
 */
export const reauthenticationFields = (session: DashboardSession, needed: boolean, prefix = 'reauth') =>
  needed &&
  markup`<fieldset>
    <legend>Confirm it is you</legend>
    <label for="${prefix}-password">Your password</label>
    <input id="${prefix}-password" name="password" type="password" autocomplete="current-password" required />
    ${
      session.totpEnrolled &&
      markup`<label for="${prefix}-code">Authenticator code</label>
      <input id="${prefix}-code" name="code" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" maxlength="6" required />`
    }
  </fieldset>`;

export function apiKeysPage(
  session: DashboardSession,
  /** With the key's last use where one was noted (api/key-usage.ts). */
  keys: (ApiKeysTable & { lastUsedAt?: Date })[],
  options: { reauthenticate: boolean; created?: { key: string; name: string | null }; error?: string },
): string {
  const active = (k: ApiKeysTable) => k.revoked_at === null;
  return page(
    'API keys',
    markup`${
      options.created &&
      markup`<section class="once" aria-labelledby="created-title">
        <h2 id="created-title">Your new key${options.created.name ? ` “${options.created.name}”` : ''}</h2>
        <p>Copy it now: it is shown this once and never again.</p>
        <p><code id="new-key">${options.created.key}</code></p>
      </section>`
    }
    <div class="scroll"><table id="api-keys">
      <thead><tr><th scope="col">Name</th><th scope="col">Key</th><th scope="col">Permissions</th><th scope="col">Expires</th><th scope="col">Created</th><th scope="col">Last used</th><th scope="col"></th></tr></thead>
      <tbody>${keys.map(
        (k) => markup`<tr data-key-id="${k.id}">
          <td>${k.name ?? ''}</td>
          <td><code>${k.key_prefix}…</code></td>
          <td>${k.permissions === null ? 'all' : k.permissions.join(', ')}</td>
          <td>${k.expires_at ? day(k.expires_at) : 'never'}</td>
          <td>${day(k.created_at)}</td>
          <td class="last-used">${k.lastUsedAt ? day(k.lastUsedAt) : 'never'}</td>
          <td>${
            active(k)
              ? markup`<form method="post" action="/dashboard/developers/api-keys/${k.id}/revoke" class="inline">
                  ${csrfField(session)}<button type="submit" class="revoke">Revoke</button>
                </form>`
              : markup`revoked ${day(k.revoked_at!)}`
          }</td>
        </tr>`,
      )}</tbody>
    </table></div>
    <h2>Create a key</h2>
    <form method="post" action="/dashboard/developers/api-keys" class="stack" id="create-key">
      ${csrfField(session)}
      <label for="key-name">Name</label>
      <input id="key-name" name="name" maxlength="200" />
      <fieldset>
        <legend>Permissions</legend>
        ${apiKeyPermissions.map(
          (p) => markup`<label class="check"><input type="checkbox" name="permissions" value="${p}" /> ${p}</label>`,
        )}
      </fieldset>
      <label for="key-expires">Expires on <span class="hint">(optional)</span></label>
      <input id="key-expires" name="expiresOn" type="date" />
      ${reauthenticationFields(session, options.reauthenticate)}
      ${errorLine(options.error)}
      <button type="submit" id="create-key-submit">Create key</button>
    </form>`,
    session,
  );
}

/** The roles `session` may give: only an owner makes owners. */
const grantableRoles = (session: DashboardSession) =>
  userRoles.filter((r) => r !== 'owner' || roleAllows(session.role, 'owners:write'));

export function teamPage(
  session: DashboardSession,
  users: MerchantUsersTable[],
  options: { reauthenticate: boolean; invited?: { email: string; url: string }; error?: string },
): string {
  const roleOptions = (selected: string) =>
    grantableRoles(session).map(
      (r) => markup`<option value="${r}"${r === selected ? markup` selected` : ''}>${r}</option>`,
    );
  const mayManage = (u: MerchantUsersTable) =>
    u.id !== session.userId &&
    u.status !== 'disabled' &&
    (u.role !== 'owner' || roleAllows(session.role, 'owners:write'));
  return page(
    'Team',
    markup`${
      options.invited &&
      markup`<section class="once" aria-labelledby="invited-title">
        <h2 id="invited-title">Invitation for ${options.invited.email}</h2>
        <p>Send this link to them; it works once, for 7 days, and is not shown again.</p>
        <p><code id="invite-url">${options.invited.url}</code></p>
      </section>`
    }
    <div class="scroll"><table id="team">
      <thead><tr><th scope="col">E-mail</th><th scope="col">Role</th><th scope="col">Status</th><th scope="col">Authenticator</th><th scope="col"></th></tr></thead>
      <tbody>${users.map(
        (u) => markup`<tr data-user-id="${u.id}">
          <td>${u.email}</td>
          <td>${
            mayManage(u)
              ? markup`<form method="post" action="/dashboard/team/${u.id}/role" class="inline">
                  ${csrfField(session)}
                  <label class="visually-hidden" for="role-${u.id}">Role of ${u.email}</label>
                  <select id="role-${u.id}" name="role">${roleOptions(u.role)}</select>
                  <button type="submit">Change</button>
                </form>`
              : u.role
          }</td>
          <td>${u.status}</td>
          <td>${u.totp_enrolled ? 'yes' : 'no'}</td>
          <td>${
            mayManage(u) &&
            markup`<form method="post" action="/dashboard/team/${u.id}/disable" class="inline">
              ${csrfField(session)}<button type="submit" class="disable">Disable</button>
            </form>`
          }</td>
        </tr>`,
      )}</tbody>
    </table></div>
    <h2>Invite someone</h2>
    <form method="post" action="/dashboard/team/invite" class="stack" id="invite-user">
      ${csrfField(session)}
      <label for="invite-email-input">E-mail</label>
      <input id="invite-email-input" name="email" type="email" required maxlength="254" />
      <label for="invite-role-input">Role</label>
      <select id="invite-role-input" name="role">${roleOptions('viewer')}</select>
      ${reauthenticationFields(session, options.reauthenticate)}
      ${errorLine(options.error)}
      <button type="submit" id="invite-submit">Invite</button>
    </form>`,
    session,
  );
}

export const DASHBOARD_CSS = `
:root { color-scheme: light; --ink: #1b1f24; --muted: #57606a; --line: #d0d7de; --accent: #0b57d0; --bad: #b3261e; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.5 system-ui, sans-serif; color: var(--ink); background: #f6f8fa; }
main { max-width: 72rem; margin: 0 auto; padding: 1rem; background: #fff; min-height: 100vh; }
h1 { font-size: 1.5rem; margin: 0.5rem 0 1rem; }
a { color: var(--accent); }
a:focus, button:focus, input:focus, select:focus { outline: 3px solid #f9ab00; outline-offset: 1px; }
.bar { display: flex; flex-wrap: wrap; gap: 0.5rem 1.5rem; align-items: center; padding: 0.5rem 1rem; background: #24292f; color: #fff; }
.bar a { color: #fff; }
.bar ul { display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; list-style: none; margin: 0; padding: 0; }
.who { margin: 0; }
.stack { display: grid; gap: 0.5rem; max-width: 28rem; }
.filters { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: end; }
.filters .field { display: grid; }
.filters .wide input { min-width: min(28rem, 100%); }
input, select, button { font: inherit; padding: 0.4rem 0.6rem; border: 1px solid var(--line); border-radius: 4px; }
button { background: var(--accent); color: #fff; border-color: var(--accent); cursor: pointer; }
.bar button { background: transparent; border-color: #fff; }
.inline { display: inline; }
.check { display: block; }
fieldset { border: 1px solid var(--line); border-radius: 4px; }
.hint { color: var(--muted); font-size: 0.9em; }
.error { color: var(--bad); font-weight: 600; }
.notice, .once { border-left: 4px solid var(--accent); padding: 0.5rem 1rem; background: #eef4ff; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 0.4rem 0.6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
code { word-break: break-all; }
.counts { display: flex; flex-wrap: wrap; gap: 1rem; list-style: none; padding: 0; }
.counts li { border: 1px solid var(--line); border-radius: 4px; padding: 0.5rem 1rem; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.25rem 1rem; }
.facts dd { margin: 0; word-break: break-all; }
.pages { display: flex; gap: 1rem; margin-top: 1rem; }
.timeline { padding-left: 1.25rem; }
.timeline li { margin: 0.25rem 0; }
.by { color: var(--muted); }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
`;
