// Projects refunds into `refunds`, which the refund endpoints and the
// customer's claim page read.
import type { Kysely } from 'kysely';
import { formatUnits } from '../domain/money.ts';
import { refundDecider, type Refund } from '../domain/refund.ts';
import { dateOrNull, rowPerStreamProjector, streamTable } from './batch.ts';
import { newestFirst, type Page } from './paging.ts';
import type { ReadModelTables, RefundsTable } from './schema.ts';
import { streams } from '../domain/streams.ts';

export const refundsProjector = rowPerStreamProjector(
  'refunds',
  streamTable('refunds', streams.refund.holds, refundDecider, refundRowOf),
);

export function refundRowOf(r: Refund): RefundsTable {
  // Exact, in the token's own decimals: a refund is never shown rounded.
  const shown = (units: bigint) => formatUnits(units, r.tokenDecimals, r.tokenDecimals);
  return {
    id: r.id,
    invoice_id: r.invoiceId,
    merchant_id: r.merchantId,
    chain: r.chain,
    token: r.token,
    amount: shown(r.amount),
    network_fee: shown(r.networkFee),
    net_amount: shown(r.netAmount),
    fiat_amount: r.fiatAmount,
    fiat_currency: r.fiatCurrency,
    reason: r.reason,
    destination: r.destination,
    claim_token: r.claimToken,
    claim_expires_at: new Date(r.claimExpiresAt),
    status: r.status,
    funded_from: r.payer?.fundedFrom ?? null,
    transaction_hash: r.txHash ?? r.prepared?.txHash ?? null,
    failure_code: r.failureCode,
    failure_reason: r.failureReason,
    created_at: new Date(r.createdAt),
    updated_at: new Date(r.updatedAt),
    approved_at: dateOrNull(r.approvedAt),
    completed_at: dateOrNull(r.completedAt),
  };
}

/**
 * A merchant's refunds, newest first: the API's list and the dashboard's
 * Refunds page; created from `from` (inclusive) to `to` (exclusive), as the
 * refunds report counts them.
 */
export function listRefunds(
  db: Kysely<ReadModelTables>,
  filter: { merchantId: string; status?: string; invoiceId?: string; from?: Date; to?: Date },
  page: Page,
) {
  let query = db.selectFrom('refunds').where('merchant_id', '=', filter.merchantId);
  if (filter.status) query = query.where('status', '=', filter.status);
  if (filter.invoiceId !== undefined) query = query.where('invoice_id', '=', filter.invoiceId);
  if (filter.from) query = query.where('created_at', '>=', filter.from);
  if (filter.to) query = query.where('created_at', '<', filter.to);
  return newestFirst(query, page);
}

/** Refunds waiting on the merchant: for an approval, or for funds in the refund wallet; oldest first. */
export const refundsWaiting = (db: Kysely<ReadModelTables>, merchantId: string, limit: number) =>
  db
    .selectFrom('refunds')
    .selectAll()
    .where('merchant_id', '=', merchantId)
    .where('status', 'in', ['awaiting_approval', 'awaiting_funds'])
    .orderBy('created_at')
    .limit(limit)
    .execute();

/**
 * Every merchant's refunds in `status`, for the operator's attention list: waiting for funds in their refund
 * wallet, or failed (retried or not); longest there first.
 */
export const refundsInStatus = (db: Kysely<ReadModelTables>, status: 'awaiting_funds' | 'failed', limit: number) =>
  db.selectFrom('refunds').selectAll().where('status', '=', status).orderBy('updated_at').limit(limit).execute();

export const refundById = (db: Kysely<ReadModelTables>, id: string) =>
  db.selectFrom('refunds').selectAll().where('id', '=', id).executeTakeFirst();

export const refundByClaimToken = (db: Kysely<ReadModelTables>, claimToken: string) =>
  db
    .selectFrom('refunds')
    .innerJoin('merchants', 'merchants.id', 'refunds.merchant_id')
    .selectAll('refunds')
    .select('merchants.name as merchant_name')
    .where('refunds.claim_token', '=', claimToken)
    .executeTakeFirst();
