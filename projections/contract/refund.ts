// The refund as the contract shows it (refunds.md): the Refund object the
// refund endpoints answer with and the `refund.*` webhooks carry, the
// customer's view through the claim link, the webhooks a refund sends and the
// test event's sample. Under projections/ beside the outbox that sends it (see
// contract/invoice.ts).
import { randomUUID } from 'node:crypto';
import type { Refund, RefundEvent } from '../../domain/refund.ts';
import { refundRowOf } from '../refunds.ts';
import type { RefundsTable } from '../schema.ts';

/** The refunds.md webhook each refund event causes. */
export const REFUND_WEBHOOKS = {
  RefundCreated: 'refund.created',
  RefundClaimed: 'refund.claimed',
  RefundApproved: 'refund.approved',
  RefundCompleted: 'refund.completed',
  RefundFailed: 'refund.failed',
  RefundCanceled: 'refund.canceled',
  RefundExpired: 'refund.expired',
} as const satisfies Partial<Record<RefundEvent['type'], `refund.${string}`>>;
export type RefundWebhook = (typeof REFUND_WEBHOOKS)[keyof typeof REFUND_WEBHOOKS];

/** The webhook a recorded event of this type sends, if it is a refund event that sends one. */
export const refundWebhookOf = (eventType: string): RefundWebhook | undefined =>
  Object.hasOwn(REFUND_WEBHOOKS, eventType) ? REFUND_WEBHOOKS[eventType as keyof typeof REFUND_WEBHOOKS] : undefined;

const iso = (value: Date | string | null) => (value === null ? null : new Date(value).toISOString());

/** The claim link's address: `{PUBLIC_BASE_URL}/refunds/{claimToken}`. */
export const claimUrlOf = (baseUrl: string, claimToken: string) => `${baseUrl}/refunds/${claimToken}`;

/** The Refund object of refunds.md, from its row. */
export function refundView(row: RefundsTable, baseUrl: string) {
  return {
    id: row.id,
    invoiceId: row.invoice_id,
    status: row.status,
    chain: row.chain,
    token: row.token,
    amount: row.amount,
    networkFee: row.network_fee,
    netAmount: row.net_amount,
    fiatAmount: row.fiat_amount,
    fiatCurrency: row.fiat_currency,
    reason: row.reason,
    destination: row.destination,
    // The link is for giving the address; once the merchant approved, there is nothing left to give.
    claimUrl: row.approved_at === null ? claimUrlOf(baseUrl, row.claim_token) : null,
    claimExpiresAt: iso(row.claim_expires_at)!,
    fundedFrom: row.funded_from,
    transactionHash: row.transaction_hash,
    createdAt: iso(row.created_at)!,
    updatedAt: iso(row.updated_at)!,
    approvedAt: iso(row.approved_at),
    completedAt: iso(row.completed_at),
  };
}

export type RefundView = ReturnType<typeof refundView>;

/** The customer's view through the claim link: no ids, nothing of the merchant's but its name. */
export function publicRefundView(row: RefundsTable, merchantName: string) {
  return {
    status: row.status,
    merchantName,
    chain: row.chain,
    token: row.token,
    amount: row.amount,
    netAmount: row.net_amount,
    destination: row.destination,
    claimExpiresAt: iso(row.claim_expires_at)!,
  };
}

/** `data` of a `refund.*` webhook: the Refund as `refund` leaves it. */
export const refundPayload = (refund: Refund, baseUrl: string) => refundView(refundRowOf(refund), baseUrl);

/** A Refund as the `refund.*` webhooks carry it, in the state the event leaves it. */
export function sampleRefund(event: RefundWebhook, now: Date): RefundView {
  const status: Record<RefundWebhook, string> = {
    'refund.created': 'awaiting_destination',
    'refund.claimed': 'awaiting_approval',
    'refund.approved': 'sending',
    'refund.completed': 'completed',
    'refund.failed': 'failed',
    'refund.canceled': 'canceled',
    'refund.expired': 'expired',
  };
  const approved = event === 'refund.approved' || event === 'refund.completed' || event === 'refund.failed';
  const claimed = approved || event === 'refund.claimed';
  const sent = event === 'refund.completed' || event === 'refund.failed';
  const createdAt = new Date(now.getTime() - 60 * 60_000);
  return {
    id: randomUUID(),
    invoiceId: randomUUID(),
    status: status[event],
    chain: 'tron',
    token: 'USDT',
    amount: '5.000000',
    networkFee: '0.000000',
    netAmount: '5.000000',
    fiatAmount: '5.00000000',
    fiatCurrency: 'USD',
    reason: 'Overpaid',
    destination: claimed ? 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH' : null,
    claimUrl: approved ? null : `https://pay.example.com/refunds/test_${randomUUID().replace(/-/g, '')}`,
    claimExpiresAt: new Date(createdAt.getTime() + 30 * 86_400_000).toISOString(),
    fundedFrom: approved ? 'refund_wallet' : null,
    transactionHash: sent ? `test_${randomUUID().replace(/-/g, '')}` : null,
    createdAt: createdAt.toISOString(),
    updatedAt: now.toISOString(),
    approvedAt: approved ? now.toISOString() : null,
    completedAt: event === 'refund.completed' ? now.toISOString() : null,
  };
}
