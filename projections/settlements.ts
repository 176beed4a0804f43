// Projects settlements into `settlements`, which the settlement endpoints and
// the operator's attention list read.
import { formatUnits } from '../domain/money.ts';
import { requestedSettlement, settlementDecider, type Settlement } from '../domain/settlement.ts';
import { dateOrNull, rowPerStreamProjector, streamTable } from './batch.ts';
import type { SettlementsTable } from './schema.ts';
import { streams } from '../domain/streams.ts';

export const settlementsProjector = rowPerStreamProjector(
  'settlements',
  streamTable(
    'settlements',
    streams.settlement.holds,
    settlementDecider,
    // A stream with only refund holds (the settlement not yet requested) has no row.
    (state) => {
      const settlement = requestedSettlement(state);
      return settlement && settlementRowOf(settlement);
    },
  ),
);

export function settlementRowOf(s: Settlement): SettlementsTable {
  const shown = (units: bigint) => formatUnits(units, s.tokenDecimals, s.tokenDecimals);
  return {
    id: s.id,
    invoice_id: s.invoiceId,
    merchant_id: s.merchantId,
    chain: s.chain,
    currency: s.token,
    amount: shown(s.netAmount),
    gross_amount: shown(s.grossAmount),
    platform_fee: shown(s.platformFee),
    network_fee: shown(s.networkFee),
    from_address: s.fromAddress,
    merchant_wallet: s.merchantWallet,
    status: s.status,
    attempt: s.attempt,
    transaction_hash: s.txHash ?? s.prepared?.txHash ?? null,
    failure_reason: s.failureReason,
    failure_code: s.failureCode,
    attempts: s.attempts,
    attention: s.attention.at(-1)?.reason ?? null,
    next_attempt_at: dateOrNull(s.retryAt),
    initiated_at: dateOrNull(s.initiatedAt),
    completed_at: dateOrNull(s.completedAt),
    failed_at: dateOrNull(s.failedAt),
    created_at: new Date(s.createdAt),
    updated_at: new Date(s.updatedAt),
  };
}
