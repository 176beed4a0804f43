// Projects settlements into `settlements`, which the settlement endpoints and
// the operator's attention list read.
import type { Kysely } from 'kysely';
import { newestFirst, type Page } from './paging.ts';
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

/** Which of a merchant's settlements a list shows: `from` and `to` bound their creation, both inclusive. */
export interface SettlementFilter {
  merchantId: string;
  status?: string;
  chain?: string;
  token?: string;
  from?: Date;
  to?: Date;
}

/** A page of a merchant's settlements, newest first: the query of GET /api/v1/settlements and the dashboard's list. */
export function listSettlements(db: Kysely<ReadModelTables>, filter: SettlementFilter, page: Page) {
  let query = db.selectFrom('settlements').where('merchant_id', '=', filter.merchantId);
  if (filter.status) query = query.where('status', '=', filter.status);
  if (filter.chain) query = query.where('chain', '=', filter.chain);
  if (filter.token) query = query.where('currency', '=', filter.token);
  if (filter.from) query = query.where('created_at', '>=', filter.from);
  if (filter.to) query = query.where('created_at', '<=', filter.to);
  return newestFirst(query, page);
}

/** Why a settlement is on the operator's attention list. */
export type SettlementAttentionKind = 'settlement_failed' | 'settlement_no_wallet' | 'settlement_changed_after_payout';

/**
 * The settlements that need a person (operations.md §2, GET /admin/v1/attention):
 * failed, waiting for the merchant's wallet, or whose receipts changed after
 * the payout was prepared. Oldest first: what has waited longest.
 */
export async function settlementsNeedingAttention(db: Kysely<ReadModelTables>, limit = 200, merchantId?: string) {
  let query = db.selectFrom('settlements').selectAll();
  // One merchant's (the dashboard's overview), or every merchant's (the operator's list).
  if (merchantId) query = query.where('merchant_id', '=', merchantId);
  const rows = await query
    .where((eb) =>
      eb.or([
        eb('status', '=', 'failed'),
        eb.and([eb('status', '=', 'pending'), eb('failure_code', '=', 'no_wallet')]),
        eb('attention', 'is not', null),
      ]),
    )
    .orderBy('updated_at')
    .limit(limit)
    .execute();
  return rows.map((row) => {
    const kind: SettlementAttentionKind =
      row.attention !== null
        ? 'settlement_changed_after_payout'
        : row.status === 'failed'
          ? 'settlement_failed'
          : 'settlement_no_wallet';
    return {
      kind,
      merchantId: row.merchant_id,
      subject: row.id,
      chain: row.chain,
      reason: kind === 'settlement_changed_after_payout' ? row.attention! : (row.failure_code ?? 'unknown'),
      detail: kind === 'settlement_failed' ? row.failure_reason : null,
      since: new Date(row.updated_at).toISOString(),
      settlement: settlementView(row),
    };
  });
}
