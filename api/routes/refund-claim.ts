// The customer's refund claim page (refunds.md): GET /refunds/{claimToken}
// shows who refunds what and where the refund stands, with a form for the
// address while one can still be given. The form posts to the same address
// and the answer redirects back (post/redirect/get), so the page needs no
// script and runs under the checkout page's strict Content-Security-Policy.
import type { FastifyInstance } from 'fastify';
import { DomainError } from '../../domain/decider.ts';
import { refundByClaimToken } from '../../projections/refunds.ts';
import type { RefundsTable } from '../../projections/schema.ts';
import type { Authentication } from '../auth.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import type { RefundCommands } from '../../commands/refunds.ts';
import type { ReadModels } from '../../projections/schema.ts';
import { HttpError } from '../errors.ts';
import { layout, markup, pageHeaders } from './checkout.ts';

/** What the customer is told at each state: where it stands, and what happens next. */
const NEXT: Record<string, string> = {
  awaiting_destination: 'Enter the address the refund should be sent to.',
  awaiting_approval:
    'Thank you. We are waiting for the merchant to approve the refund; you can still change the address until then.',
  awaiting_funds:
    'The merchant approved the refund. It will be sent as soon as the merchant’s refund wallet is funded.',
  sending: 'The refund is being sent.',
  completed: 'The refund was sent.',
  failed: 'Sending the refund failed; it will be tried again.',
  canceled: 'The merchant canceled this refund.',
};

const chainNames: Record<string, string> = {
  ethereum: 'Ethereum',
  bsc: 'BNB Smart Chain',
  polygon: 'Polygon',
  tron: 'Tron',
  solana: 'Solana',
  bitcoin: 'Bitcoin',
};

type ClaimRow = RefundsTable & { merchant_name: string };

function claimPage(row: ClaimRow, error?: string): string {
  const open = row.status === 'awaiting_destination' || row.status === 'awaiting_approval';
  const network = chainNames[row.chain] ?? row.chain;
  const body = markup`<main class="checkout claim" id="claim">
    <header class="summary">
      <p class="merchant" id="merchant-name">${row.merchant_name}</p>
      <h1 class="amount" id="refund-amount">${row.net_amount} ${row.token}</h1>
      <p class="description">Refund on ${network}${
        row.net_amount !== row.amount && markup` (${row.amount} ${row.token} less the network fee)`
      }</p>
    </header>
    <section class="status">
      <p class="status-text" id="status-text" role="status" data-state="${row.status}">${NEXT[row.status] ?? row.status}</p>
      ${row.destination && markup`<p class="hint">To: <code class="address" id="destination">${row.destination}</code></p>`}
      ${row.transaction_hash && row.status !== 'awaiting_funds' && markup`<p class="hint">Transaction: <code class="address" id="transaction">${row.transaction_hash}</code></p>`}
    </section>
    ${
      open &&
      markup`<form class="claim-form" method="post" id="claim-form">
        <label for="address">Your ${network} address for ${row.token}</label>
        <input id="address" name="address" autocomplete="off" spellcheck="false" required maxlength="128" value="${row.destination ?? ''}" />
        ${error && markup`<p class="error" id="claim-error" role="alert">${error}</p>`}
        <button type="submit" id="claim-submit">${row.destination ? 'Change address' : 'Send me the refund'}</button>
        <p class="hint">Send to an address of yours on ${network} that can receive ${row.token}, not an exchange deposit address that needs a memo.</p>
      </form>`
    }
  </main>`;
  return layout(`Refund from ${row.merchant_name}`, body, false);
}

function notFoundPage(): string {
  return layout(
    'Refund not found',
    markup`<main class="checkout">
      <h1>Refund not found</h1>
      <p>This refund link is unknown or has expired. Please ask the merchant for a new one.</p>
    </main>`,
    false,
  );
}

/** What these routes use of the service. */
export interface RefundClaimRouteDeps extends Pick<ReadYourWrites, 'settle'> {
  auth: Authentication;
  db: ReadModels;
  refunds: RefundCommands;
}

export async function refundClaimRoutes(scope: FastifyInstance, { auth, db, refunds, settle }: RefundClaimRouteDeps) {
  // The form's own encoding, parsed by the platform's URLSearchParams, in this scope only.
  scope.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) =>
    done(null, Object.fromEntries(new URLSearchParams(body as string))),
  );
  const claimed = async (token: string) => {
    const row = token.length <= 128 ? await refundByClaimToken(db, token) : undefined;
    return row && row.status !== 'expired' ? row : undefined;
  };

  scope.get<{ Params: { claimToken: string } }>(
    '/refunds/:claimToken',
    { onRequest: auth.public, schema: { hide: true } },
    async (request, reply) => {
      const row = await claimed(request.params.claimToken);
      if (!row) return pageHeaders(reply).code(404).send(notFoundPage());
      return pageHeaders(reply).send(claimPage(row));
    },
  );

  scope.post<{ Params: { claimToken: string }; Body: { address?: unknown } }>(
    '/refunds/:claimToken',
    { onRequest: auth.public, schema: { hide: true } },
    async (request, reply) => {
      const row = await claimed(request.params.claimToken);
      if (!row) return pageHeaders(reply).code(404).send(notFoundPage());
      const address = typeof request.body?.address === 'string' ? request.body.address.trim() : '';
      try {
        if (address === '') throw new HttpError(400, 'Please enter an address');
        await settle((await refunds.giveDestination(row.id, row.chain, address)).position);
      } catch (error) {
        // What is wrong with the address is shown beside the form, in the refusal's own words.
        if (!(error instanceof DomainError) && !(error instanceof HttpError)) throw error;
        if (error instanceof DomainError && error.kind === 'not_found') {
          return pageHeaders(reply).code(404).send(notFoundPage());
        }
        return pageHeaders(reply)
          .code(400)
          .send(claimPage({ ...row, destination: address || row.destination }, error.message));
      }
      return reply
        .code(303)
        .header('Location', `/refunds/${encodeURIComponent(request.params.claimToken)}`)
        .send();
    },
  );
}
