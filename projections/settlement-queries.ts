// Reads of the settlements read model: the settlement endpoints' list and the
// operator's attention list.
import type { Kysely } from 'kysely';
import type { ChainName } from '../domain/catalogue.ts';
import { overdueAfterMs } from '../domain/payout-attempt.ts';
import { settlementView } from './contract/settlement.ts';
import { newestFirst, type Page } from './paging.ts';
import type { ReadModelTables } from './schema.ts';

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
export type SettlementAttentionKind =
  'settlement_failed' | 'settlement_no_wallet' | 'settlement_changed_after_payout' | 'platform_fee_uncollected';

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
      row.attention === 'platform_fee_uncollected'
        ? 'platform_fee_uncollected'
        : row.attention !== null
          ? 'settlement_changed_after_payout'
          : row.status === 'failed'
            ? 'settlement_failed'
            : 'settlement_no_wallet';
    return {
      kind,
      merchantId: row.merchant_id,
      subject: row.id,
      chain: row.chain,
      reason: row.attention ?? row.failure_code ?? 'unknown',
      detail:
        kind === 'settlement_failed'
          ? row.failure_reason
          : kind === 'platform_fee_uncollected'
            ? `the payout completed; its platform and network fees (${row.platform_fee} + ${row.network_fee} ${row.currency}) did not reach the treasury and stay on ${row.from_address} (the settlement's SettlementAttentionRaised says why)`
            : null,
      since: new Date(row.updated_at).toISOString(),
      settlement: settlementView(row),
    };
  });
}

/**
 * Payouts on their way and not completed long after (overdueAfterMs), for
 * the operator's attention list: settlements `submitted`, refunds `sending`
 * (approved, with a transaction or still waiting to make one: behind another
 * refund from its payer, say); oldest first, by their last change.
 */
export async function payoutsOverdue(
  db: Kysely<ReadModelTables>,
  now: Date,
  confirmations: Record<ChainName, number>,
  limit = 200,
) {
  const overdue = <Row extends { chain: string; updated_at: Date }>(rows: Row[]) =>
    rows.filter(
      (row) =>
        now.getTime() - new Date(row.updated_at).getTime() >
        overdueAfterMs(row.chain as ChainName, confirmations[row.chain as ChainName]),
    );
  const [settlements, refunds] = await Promise.all([
    db
      .selectFrom('settlements')
      .selectAll()
      .where('status', '=', 'submitted')
      .orderBy('updated_at')
      .limit(limit)
      .execute(),
    db.selectFrom('refunds').selectAll().where('status', '=', 'sending').orderBy('updated_at').limit(limit).execute(),
  ]);
  return { settlements: overdue(settlements), refunds: overdue(refunds) };
}
