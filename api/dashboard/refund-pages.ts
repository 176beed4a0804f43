// The dashboard's refund HTML (dashboard.md, refunds.md): the refunds of an
// invoice with the form that asks for one, the Refunds list, and one refund
// with Approve and Cancel. Offered only to the roles that may; the server
// checks again whatever the page offered.
import { roleAllows } from '../../domain/merchant-user.ts';
import type { RefundView } from '../../projections/contract/refund.ts';
import { markup } from '../routes/checkout.ts';
import { csrfField, errorLine, page, payoutFacts, reauthenticationFields } from './pages.ts';
import type { DashboardSession } from './sessions.ts';

type Html = ReturnType<typeof markup>;

/** What an invoice can still give back of one chain and token, decimal text in the token's units. */
export interface RefundableLine {
  chain: string;
  token: string;
  refundable: string;
  excess: string;
}

export const REFUND_STATUSES = [
  'awaiting_destination',
  'awaiting_approval',
  'awaiting_funds',
  'sending',
  'completed',
  'canceled',
  'expired',
  'failed',
] as const;

/** A refund that can still be canceled: before anything is sent, or failed with nothing sent (refund.ts's mayCancel). */
const cancellable = (r: RefundView) =>
  ['awaiting_destination', 'awaiting_approval', 'awaiting_funds'].includes(r.status) ||
  (r.status === 'failed' && r.transactionHash === null);
/** The customer gives the address through the link; once they have, it is the merchant's turn. */
const awaitingCustomer = (r: RefundView) => r.status === 'awaiting_destination' && r.claimUrl !== null;

const when = (value: string | null) => (value === null ? '' : value.slice(0, 16).replace('T', ' '));

export function refundsTable(refunds: RefundView[], id: string): Html {
  return markup`<div class="scroll"><table id="${id}">
    <thead><tr><th scope="col">Created</th><th scope="col">Refund</th><th scope="col">Amount</th><th scope="col">Status</th><th scope="col">Reason</th></tr></thead>
    <tbody>${refunds.map(
      (r) => markup`<tr data-refund-id="${r.id}">
        <td>${when(r.createdAt)}</td>
        <td><a href="/dashboard/refunds/${r.id}" class="refund-link">${r.id.slice(0, 8)}</a></td>
        <td>${r.amount} ${r.token} on ${r.chain}</td>
        <td class="refund-status">${r.status}</td>
        <td>${r.reason ?? ''}</td>
      </tr>`,
    )}</tbody>
  </table></div>`;
}

/** The invoice page's Refunds section: its refunds, and for refunds:write the form asking for one. */
export function invoiceRefundsSection(
  session: DashboardSession,
  invoiceId: string,
  refunds: RefundView[],
  refundable: RefundableLine[],
  error?: string,
): Html {
  const open = refundable.filter((a) => a.refundable.replace(/[0.]/g, '') !== '');
  return markup`<section aria-labelledby="refunds-title">
    <h2 id="refunds-title">Refunds</h2>
    ${refunds.length === 0 ? markup`<p id="no-refunds">No refund yet.</p>` : refundsTable(refunds, 'invoice-refunds')}
    ${
      roleAllows(session.role, 'refunds:write') &&
      open.length > 0 &&
      markup`<form method="post" action="/dashboard/invoices/${invoiceId}/refunds" class="stack" id="refund-form">
        ${csrfField(session)}
        <label for="refund-asset">Of</label>
        <select id="refund-asset" name="asset">${open.map(
          (a) =>
            markup`<option value="${a.chain}:${a.token}">${a.token} on ${a.chain}: ${a.refundable} refundable, ${a.excess} excess</option>`,
        )}</select>
        <fieldset>
          <legend>How much</legend>
          <label class="check"><input type="radio" name="kind" value="amount" checked /> This amount</label>
          <label class="check"><input type="radio" name="kind" value="excess" id="refund-kind-excess" /> The excess (what was paid over, or in the wrong token)</label>
          <label class="check"><input type="radio" name="kind" value="full" id="refund-kind-full" /> All that is refundable</label>
        </fieldset>
        <label for="refund-amount">Amount <span class="hint">(in the token, for “this amount”)</span></label>
        <input id="refund-amount" name="amount" inputmode="decimal" maxlength="40" />
        <label for="refund-destination">Customer's address <span class="hint">(optional: without it the customer gets a link to give one)</span></label>
        <input id="refund-destination" name="destination" maxlength="128" spellcheck="false" />
        <label for="refund-reason">Reason <span class="hint">(optional)</span></label>
        <input id="refund-reason" name="reason" maxlength="500" />
        ${errorLine(error)}
        <button type="submit" id="refund-submit">Refund</button>
      </form>`
    }
  </section>`;
}

export function refundPage(
  session: DashboardSession,
  refund: RefundView,
  options: { reauthenticate: boolean; error?: string },
): string {
  return page(
    `Refund ${refund.amount} ${refund.token}`,
    markup`<dl class="facts" id="refund">
      ${payoutFacts('refund', refund.id, refund.status, refund.invoiceId)}
      <dt>Amount</dt><dd>${refund.amount} ${refund.token} on ${refund.chain} (${refund.fiatAmount} ${refund.fiatCurrency})</dd>
      <dt>Network fee</dt><dd>${refund.networkFee} ${refund.token}</dd>
      <dt>Customer receives</dt><dd id="refund-net">${refund.netAmount} ${refund.token}</dd>
      <dt>Destination</dt><dd><code>${refund.destination ?? 'not given yet'}</code></dd>
      ${refund.reason && markup`<dt>Reason</dt><dd>${refund.reason}</dd>`}
      ${
        awaitingCustomer(refund) &&
        markup`<dt>Claim link</dt><dd><a href="${refund.claimUrl}" id="claim-link">${refund.claimUrl}</a> <span class="hint">(pass it to the customer; valid until ${when(refund.claimExpiresAt)})</span></dd>`
      }
      ${refund.fundedFrom && markup`<dt>Paid from</dt><dd>${refund.fundedFrom}</dd>`}
      ${refund.transactionHash && markup`<dt>Transaction</dt><dd><code id="refund-tx">${refund.transactionHash}</code></dd>`}
      <dt>Created</dt><dd>${when(refund.createdAt)}</dd>
      ${refund.approvedAt && markup`<dt>Approved</dt><dd>${when(refund.approvedAt)}</dd>`}
      ${refund.completedAt && markup`<dt>Completed</dt><dd>${when(refund.completedAt)}</dd>`}
    </dl>
    ${errorLine(options.error)}
    ${
      roleAllows(session.role, 'refunds:approve') &&
      refund.status === 'awaiting_approval' &&
      markup`<form method="post" action="/dashboard/refunds/${refund.id}/approve" class="stack" id="approve-form">
        ${csrfField(session)}
        ${reauthenticationFields(session, options.reauthenticate)}
        <button type="submit" id="approve-refund">Approve and pay</button>
      </form>`
    }
    ${
      roleAllows(session.role, 'refunds:write') &&
      cancellable(refund) &&
      markup`<form method="post" action="/dashboard/refunds/${refund.id}/cancel" class="inline">
        ${csrfField(session)}<button type="submit" id="cancel-refund">Cancel this refund</button>
      </form>`
    }`,
    session,
  );
}
