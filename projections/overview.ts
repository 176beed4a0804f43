// The dashboard's Overview figures (dashboard.md, page 1): what a merchant
// received per day, by chain and token, with its value in the invoices'
// fiat currency. The settled, fees and refunded totals beside it are the
// ledger report's (ledgerOf), read for the same days.
import { sql, type Kysely } from 'kysely';
import { formatUnits } from '../domain/money.ts';
import type { ReadModelTables } from './schema.ts';

/** What arrived on one day (UTC) in one chain and token, for invoices of one fiat currency. */
export interface DayVolume {
  /** YYYY-MM-DD, UTC */
  day: string;
  chain: string;
  token: string;
  /** The token amount, in the token's own decimals. */
  amount: string;
  fiatCurrency: string;
  /** Its value at the invoices' quotes, rounded down to the cent; null when a payment had no quote to value it at. */
  fiatValue: string | null;
}

/**
 * Payments confirmed since `since` (and not reorged since), the way the
 * ledger counts money received: wrong-token and late ones included, at their
 * confirmation. Each is valued at its invoice's quote for that chain and
 * token (as the reports value it); a wrong token the invoice never quoted has
 * no value, and makes its day's value unknown rather than short. Newest day
 * first.
 */
export async function dailyVolume(db: Kysely<ReadModelTables>, merchantId: string, since: Date): Promise<DayVolume[]> {
  const { rows } = await sql<{
    day: string;
    chain: string;
    token: string;
    decimals: number;
    units: string;
    currency: string;
    cents: string | null;
    unpriced: string | number;
  }>`
    select to_char(p.confirmed_at at time zone 'UTC', 'YYYY-MM-DD') as day, p.chain, p.token,
      max(p.token_decimals) as decimals, sum(p.amount::numeric)::text as units, i.currency,
      div(sum(p.amount::numeric * q.rate::numeric) * 100, power(10::numeric, max(p.token_decimals)))::text as cents,
      count(*) filter (where q.rate is null) as unpriced
    from payments p
    join invoices i on i.id = p.invoice_id
    left join lateral (
      select a.rate from invoice_addresses a
      where a.invoice_id = p.invoice_id and a.chain = p.chain and a.token = p.token
      order by a.quoted_at desc limit 1
    ) q on true
    where i.merchant_id = ${merchantId} and p.status = 'confirmed' and p.confirmed_at >= ${since.toISOString()}::timestamptz
    group by 1, p.chain, p.token, i.currency
    order by 1 desc, p.chain, p.token, i.currency`.execute(db);
  return rows.map((r) => ({
    day: r.day,
    chain: r.chain,
    token: r.token,
    amount: formatUnits(BigInt(r.units), r.decimals, r.decimals),
    fiatCurrency: r.currency,
    fiatValue: Number(r.unpriced) > 0 || r.cents === null ? null : formatUnits(BigInt(r.cents), 2, 2),
  }));
}

/** The first instant of the UTC day `days - 1` days before `now`'s: the start of a `days`-day window ending today. */
export function daysBack(now: Date, days: number): Date {
  const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
  start.setUTCDate(start.getUTCDate() - (days - 1));
  return start;
}

/** How many of the merchant's invoices are in each status. */
export async function invoiceCounts(db: Kysely<ReadModelTables>, merchantId: string) {
  const rows = await db
    .selectFrom('invoices')
    .select(['status', db.fn.countAll<string>().as('n')])
    .where('merchant_id', '=', merchantId)
    .groupBy('status')
    .orderBy('status')
    .execute();
  return rows.map((c) => ({ status: c.status, n: Number(c.n) }));
}

/** The merchant's invoices paid wrongly (under, over, in the wrong token) or late: newest change first. */
export function invoicesNeedingAttention(db: Kysely<ReadModelTables>, merchantId: string, limit: number) {
  return db
    .selectFrom('invoices')
    .select(['id', 'payment_issue_type', 'paid_late', 'updated_at'])
    .where('merchant_id', '=', merchantId)
    .where((eb) => eb.or([eb('payment_issue_type', 'is not', null), eb('paid_late', '=', true)]))
    .orderBy('updated_at', 'desc')
    .limit(limit)
    .execute();
}
