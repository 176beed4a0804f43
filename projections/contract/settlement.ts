// The settlement as the contract shows it (interface.md, operations.md §3):
// the Settlement object the settlement endpoints answer with and
// `settlement.failed` carries, and the test event's sample. Under projections/
// beside the outbox that sends it (see contract/invoice.ts).
import { randomUUID } from 'node:crypto';
import type { Settlement } from '../../domain/settlement.ts';
import { settlementRowOf } from '../settlements.ts';
import type { SettlementsTable } from '../schema.ts';

/** The one webhook a settlement sends: the merchant's money did not arrive. */
export const SETTLEMENT_WEBHOOKS = ['settlement.failed'] as const;

const iso = (value: Date | string | null) => (value === null ? null : new Date(value).toISOString());

/** The Settlement object of interface.md (with operations.md §3's additions), from its row. */
export function settlementView(row: SettlementsTable) {
  return {
    id: row.id,
    invoiceId: row.invoice_id,
    amount: row.amount,
    grossAmount: row.gross_amount,
    currency: row.currency,
    chain: row.chain,
    transactionHash: row.transaction_hash,
    // A settlement waiting for the merchant to set a wallet shows an empty one.
    merchantWallet: row.merchant_wallet ?? '',
    status: row.status,
    initiatedAt: iso(row.initiated_at),
    completedAt: iso(row.completed_at),
    failedAt: iso(row.failed_at),
    createdAt: iso(row.created_at)!,
    updatedAt: iso(row.updated_at)!,
    failureReason: row.failure_code,
    attempts: row.attempts,
    nextAttemptAt: row.status === 'failed' ? iso(row.next_attempt_at) : null,
  };
}

export type SettlementView = ReturnType<typeof settlementView>;

/** `data` of `settlement.failed`: the Settlement as the failure leaves it. */
export const settlementPayload = (settlement: Settlement) => settlementView(settlementRowOf(settlement));

/** A Settlement that failed, as `settlement.failed` carries it. */
export function sampleFailedSettlement(now: Date): SettlementView {
  return {
    id: randomUUID(),
    invoiceId: randomUUID(),
    amount: '24.75000000',
    grossAmount: '25.00000000',
    currency: 'USDT',
    chain: 'tron',
    transactionHash: null,
    merchantWallet: 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH',
    status: 'failed',
    initiatedAt: null,
    completedAt: null,
    failedAt: now.toISOString(),
    createdAt: new Date(now.getTime() - 60_000).toISOString(),
    updatedAt: now.toISOString(),
    failureReason: 'node_unavailable',
    attempts: 1,
    nextAttemptAt: new Date(now.getTime() + 10_000).toISOString(),
  };
}
