// Reads of the invoice read models, shaped as the contract shows them.
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import type { ReadModelTables } from './schema.ts';
import { newestFirst, type Page } from './paging.ts';

const iso = (value: Date | string) => new Date(value).toISOString();

/** Only http(s) URLs are ever handed back: anything else (javascript:, data:) is ignored. */
export function returnUrlOf(metadata: Record<string, unknown> | null): string | null {
  for (const key of ['returnUrl', 'successUrl', 'return_url', 'success_url']) {
    const value = metadata?.[key];
    if (typeof value !== 'string') continue;
    try {
      const url = new URL(value);
      if (url.protocol === 'https:' || url.protocol === 'http:') return url.toString();
    } catch {
      // not a URL: ignored
    }
  }
  return null;
}

/**
 * The invoices a merchant's person narrows a list to: the dashboard's invoice
 * filters, shared by the invoice list and the invoices report (its CSV), so
 * that the export holds exactly the rows the list shows.
 */
export interface InvoiceFilter {
  /** A status as the contract names it: pending includes partly paid. */
  status?: string;
  /** A payment issue (underpaid, overpaid, wrong_token), or `late` for one paid after it expired. */
  issueType?: string;
  chain?: string;
  token?: string;
  /**
   * One value the invoice is known by: its id, the order id in its metadata
   * (`orderId` or `order_id`), one of its deposit addresses or the hash of a
   * transaction paid to it (the dashboard's search box).
   */
  search?: string;
}

export const invoiceIssueTypes = ['underpaid', 'overpaid', 'wrong_token', 'late'] as const;

/** A filter and a page: `page`, or keyset from `after` or `before` (the dashboard's). */
export interface ListFilter extends InvoiceFilter, Page {
  merchantId: string;
  currency?: string;
  from?: Date;
  to?: Date;
}

/** EVM addresses and hashes are hex, typed in any case (checksummed or not); base58 and bech32 are as they are. */
const hexOrExact = (column: string, value: string) =>
  /^0x[0-9a-f]+$/i.test(value)
    ? sql<boolean>`lower(${sql.ref(column)}) = ${value.toLowerCase()}`
    : sql<boolean>`${sql.ref(column)} = ${value}`;

const UUID_SHAPE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The condition of `filter` on the invoices table under the name `table`; true for no filter. */
export function invoiceMatches(table: string, filter: InvoiceFilter): RawBuilder<boolean> {
  const column = (name: string) => sql.ref(`${table}.${name}`);
  const conditions: RawBuilder<unknown>[] = [];
  if (filter.status) {
    const statuses = filter.status === 'pending' ? ['pending', 'partial'] : [filter.status];
    conditions.push(sql`${column('status')} in (${sql.join(statuses)})`);
  }
  if (filter.issueType === 'late') conditions.push(sql`${column('paid_late')}`);
  else if (filter.issueType) conditions.push(sql`${column('payment_issue_type')} = ${filter.issueType}`);
  if (filter.chain) conditions.push(sql`${column('chain')} = ${filter.chain}`);
  if (filter.token) conditions.push(sql`${column('token')} = ${filter.token.toUpperCase()}`);
  const search = filter.search?.trim();
  if (search) {
    conditions.push(sql`(
      ${UUID_SHAPE.test(search) ? sql`${column('id')} = ${search.toLowerCase()} or` : sql``}
      ${column('metadata')}->>'orderId' = ${search} or ${column('metadata')}->>'order_id' = ${search}
      or exists (select 1 from invoice_addresses a where a.invoice_id = ${column('id')} and ${hexOrExact('a.address', search)})
      or exists (select 1 from payments p where p.invoice_id = ${column('id')} and ${hexOrExact('p.tx_hash', search)})
    )`);
  }
  return conditions.length === 0 ? sql<boolean>`true` : sql<boolean>`(${sql.join(conditions, sql` and `)})`;
}

export async function listInvoices(db: Kysely<ReadModelTables>, filter: ListFilter) {
  let query = db
    .selectFrom('invoices')
    .where('merchant_id', '=', filter.merchantId)
    .where(invoiceMatches('invoices', filter));
  if (filter.currency) query = query.where('currency', '=', filter.currency.toUpperCase());
  if (filter.from) query = query.where('created_at', '>=', filter.from);
  if (filter.to) query = query.where('created_at', '<=', filter.to);
  return newestFirst(query, filter);
}

export async function invoiceRow(db: Kysely<ReadModelTables>, id: string) {
  return db.selectFrom('invoices').selectAll().where('id', '=', id).executeTakeFirst();
}

export async function invoiceAddresses(db: Kysely<ReadModelTables>, id: string) {
  return db.selectFrom('invoice_addresses').selectAll().where('invoice_id', '=', id).orderBy('quoted_at').execute();
}

/** The public status shape of interface.md ("Invoice status"), or undefined for an unknown invoice. */
export async function invoiceStatus(database: SqlDatabase, id: string) {
  // One round trip, planned once per connection: the status endpoint is what checkout pages poll.
  const db = database.db as Kysely<ReadModelTables>;
  const statusOf = (invoiceId: string) =>
    db
      .selectFrom('invoices')
      .innerJoin('merchants', 'merchants.id', 'invoices.merchant_id')
      .leftJoinLateral(
        (eb) =>
          eb
            .selectFrom('payments')
            .select(['confirmations', 'required_confirmations'])
            .whereRef('payments.invoice_id', '=', 'invoices.id')
            .where('payments.status', '!=', 'reorged')
            .orderBy('detected_at', 'desc')
            .limit(1)
            .as('latest'),
        (join) => join.onTrue(),
      )
      // Named columns, not invoices.*: a prepared statement whose result
      // changes shape fails, and a newer instance's migration may add a column
      // while this one runs.
      .select([
        'invoices.id',
        'invoices.status',
        'invoices.amount',
        'invoices.currency',
        'invoices.description',
        'invoices.metadata',
        'invoices.payment_status',
        'invoices.payment_status_detail',
        'invoices.payment_issue_type',
        'invoices.settled_amount',
        'invoices.tx_hash',
        'invoices.expires_at',
        'invoices.created_at',
        'invoices.total_received_amount',
        'invoices.total_received_currency',
        'invoices.remaining_amount',
        'invoices.payment_progress',
        'invoices.has_detected_payment',
        'invoices.detected_payment_amount',
        'invoices.detected_payment_currency',
        'invoices.mismatch_payment',
        'merchants.name as merchant_name',
        'latest.confirmations',
        'latest.required_confirmations',
      ])
      .where('invoices.id', '=', invoiceId);
  const [row] = await database.prepared('invoice-status', statusOf, id);
  if (!row) return undefined;
  return {
    id: row.id,
    status: row.status,
    amount: row.amount,
    currency: row.currency,
    description: row.description,
    merchantName: row.merchant_name,
    confirmations: row.confirmations ?? 0,
    requiredConfirmations: row.required_confirmations ?? 0,
    paymentStatus: row.payment_status,
    paymentStatusDetail: row.payment_status_detail,
    settledAmount: row.settled_amount,
    txHash: row.tx_hash,
    expiresAt: iso(row.expires_at),
    createdAt: iso(row.created_at),
    returnUrl: returnUrlOf(row.metadata),
    totalReceivedAmount: row.total_received_amount,
    totalReceivedCurrency: row.total_received_currency,
    remainingAmount: row.remaining_amount,
    paymentProgress: row.payment_progress,
    hasDetectedPayment: row.has_detected_payment,
    detectedPaymentAmount: row.detected_payment_amount,
    detectedPaymentCurrency: row.detected_payment_currency,
    paymentIssueType: row.payment_issue_type,
    mismatchPayment: row.mismatch_payment as {
      amount: string;
      currency: string;
      actualCurrency: string;
      txHash: string;
    } | null,
  };
}

export type InvoiceStatusView = NonNullable<Awaited<ReturnType<typeof invoiceStatus>>>;
