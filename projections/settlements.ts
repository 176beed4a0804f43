// Projects settlements into `settlements`, which the settlement endpoints and
// the operator's attention list read.
import type { Kysely } from 'kysely';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import { formatUnits } from '../domain/money.ts';
import { settlementDecider, type Settlement, type SettlementEvent } from '../domain/settlement.ts';
import { dateOrNull, rowsOf, StreamFolds, upsertRows } from './batch.ts';
import type { Projector } from '../adapters/event-store/followers.ts';
import type { ReadModelTables, SettlementsTable } from './schema.ts';
import { streams } from '../domain/streams.ts';

const isSettlementStream = streams.settlement.holds;

const settlementFolds = new StreamFolds<Settlement | null, SettlementEvent>(isSettlementStream, settlementDecider);

export const settlementsProjector: Projector<Map<string, Settlement | null>> = {
  name: 'settlements',
  tables: ['settlements'],

  prepare: (batch: readonly RecordedEvent[], store: EventStore) => settlementFolds.ofBatch(batch, store),

  // Each settlement's row once, as of its last event in the batch (see batch.ts).
  async applyBatch(trx: Kysely<ReadModelTables>, _batch, settlements: Map<string, Settlement | null>) {
    await upsertRows(trx, 'settlements', ['id'], rowsOf(settlements.values(), settlementRowOf));
  },
};

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
