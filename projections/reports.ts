// The finance reports (operations.md §3, columns in docs/reports.md): one row
// per invoice, payment, settlement, refund or fee of a merchant, read from the
// read models a page at a time so that a year of a large merchant is never in
// memory, and the ledger that ties them out per chain and token.
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { SqlDatabase, SqlEngine } from '../adapters/sql/database.ts';
import { findToken, isChainName } from '../domain/catalogue.ts';
import { fiatValueOf, formatUnits, parseUnits } from '../domain/money.ts';
import { invoiceMatches, type InvoiceFilter } from './invoice-queries.ts';
import type { InvoicesTable, PaymentsTable, ReadModelTables, RefundsTable, SettlementsTable } from './schema.ts';

export const reportKinds = ['invoices', 'payments', 'settlements', 'refunds', 'fees', 'ledger'] as const;
export type ReportKind = (typeof reportKinds)[number];
export type RecordKind = Exclude<ReportKind, 'ledger'>;

export const isReportKind = (value: string): value is ReportKind => (reportKinds as readonly string[]).includes(value);

/** Whose records, and between which instants: `from` inclusive, `to` exclusive; open ends when absent. */
export interface ReportScope {
  merchantId: string;
  from: Date | undefined;
  to: Date | undefined;
  /** The settlements report of a filtered list (the dashboard's Settlements page): only these. */
  settlements?: { status?: string; chain?: string; token?: string };
  /** The invoices report narrowed as the dashboard's invoice list is (its CSV export); all rows when absent. */
  invoices?: InvoiceFilter;
  /** The refunds report narrowed to one status (the dashboard's Refunds export). */
  refundStatus?: string;
}

/** A row of a report: its cells in column order, each a string or empty. */
export type ReportCell = string | null;

/**
 * Where a fiat value's rate comes from when its quote recorded no sources
 * (quotes from before they were kept): the invoice's quote, nothing more
 * known. Otherwise the sources the quote used (invoice_addresses.rate_source).
 */
const RATE_SOURCE = 'invoice_quote';

/** Rows per page: big enough that a page's round trip is small beside its rows, small enough to stay flat. */
export const REPORT_PAGE_ROWS = 5000;

/**
 * A report's column: its name and its cell from a row; in the invoices
 * report also the same cell as PostgreSQL writes it into the CSV
 * (invoiceCsvText). One table per report, which the CSV, the NDJSON and the
 * COPY all read, so that no format can name or order a column differently.
 */
type Column<Row> = TextField<Row> | readonly [name: string, cell: (row: Row) => ReportCell, text?: RawBuilder<unknown>];
type TextColumn<Row> = readonly [name: string, cell: (row: Row) => ReportCell, text: RawBuilder<unknown>];
/** A column that is the row's own text field of the same name, written as the name alone. */
type TextField<Row> = { [K in keyof Row]: Row[K] extends ReportCell ? K : never }[keyof Row] & string;

/** What every record report has: its fixed columns, one page of rows after a cursor. */
interface RecordReport<Row extends { cursor_at: string; cursor_id: string; metadata: unknown }> {
  columns: readonly Column<Row>[];
  /**
   * The rows of the scope, with `cursor_at` (the ordering time as PostgreSQL
   * text, so that the next page starts exactly after it whatever the
   * precision stored) and `cursor_id`; `page` limits it to one page.
   */
  query(scope: ReportScope, page: Paging): RawBuilder<Row>;
}

/** A row's cells, in the order of the report's columns. */
const cellsOf = <Row>(columns: readonly Column<Row>[], row: Row): ReportCell[] =>
  columns.map((column) => (typeof column === 'string' ? (row[column] as ReportCell) : column[1](row)));
const nameOf = <Row>(column: Column<Row>) => (typeof column === 'string' ? column : column[0]);

/** Where a page starts and how long it is; `all` for no paging (the metadata pre-pass). */
interface Paging {
  after: { at: string; id: string } | undefined;
  /** Rows of one page; undefined for all of them, in order when `ordered`. */
  rows: number | undefined;
  ordered?: boolean;
}
const all: Paging = { after: undefined, rows: undefined };
const allInOrder: Paging = { after: undefined, rows: undefined, ordered: true };

/**
 * The keyset condition and order of a page on the real columns (time, id), so
 * that PostgreSQL walks an index from the cursor instead of sorting the rest.
 */
function paged(page: Paging, time: RawBuilder<unknown>, id: RawBuilder<unknown>, idType: 'uuid' | 'text' = 'uuid') {
  const after = page.after;
  return {
    where:
      after === undefined
        ? sql`true`
        : sql`(${time}, ${id}) > (${after.at}::timestamptz, ${idType === 'uuid' ? sql`${after.id}::uuid` : sql`${after.id}::text`})`,
    tail:
      page.rows !== undefined
        ? sql`order by ${time}, ${id} limit ${page.rows}`
        : page.ordered
          ? sql`order by ${time}, ${id}`
          : sql``,
  };
}

const inRange = (column: RawBuilder<unknown>, { from, to }: ReportScope) =>
  sql`${from === undefined ? sql`true` : sql`${column} >= ${from.toISOString()}::timestamptz`} and ${
    to === undefined ? sql`true` : sql`${column} < ${to.toISOString()}::timestamptz`
  }`;

/** A token amount held as base units (numeric text) written in the token's decimals. */
const unitsShown = (units: string | number | bigint, decimals: number) =>
  formatUnits(BigInt(units), decimals, decimals);

/** The fiat value of a token amount (decimal text) at a rate, or empty when there is no rate to value it at. */
function fiatOf(amount: string | null, decimals: number | null, rate: string | null): ReportCell {
  if (amount === null || decimals === null || rate === null) return null;
  const units = parseUnits(amount, decimals);
  return units === undefined ? null : fiatValueOf(units, decimals, rate);
}

const bool = (value: boolean | null) => (value === null ? null : value ? 'true' : 'false');

/**
 * The quote of an invoice for a chain and token, the rate a fiat value is
 * computed at: a plain join, there being one at most (the unique index of
 * migration 0013), which PostgreSQL can make a hash join over a whole report.
 */
const quoteOf = (invoiceId: RawBuilder<unknown>, chain: RawBuilder<unknown>, token: RawBuilder<unknown>) => sql`
  left join invoice_addresses q on q.invoice_id = ${invoiceId} and q.chain = ${chain} and q.token = ${token}`;

/** The condition and order every record report ends with: the merchant's rows, in the range, on the page. */
function ofMerchantInRangeOnPage(
  merchant: RawBuilder<unknown>,
  time: RawBuilder<unknown>,
  id: RawBuilder<unknown>,
  scope: ReportScope,
  page: Paging,
  narrowed: RawBuilder<unknown> = sql`true`,
) {
  const p = paged(page, time, id);
  return sql`where ${merchant} = ${scope.merchantId} and ${inRange(time, scope)} and ${narrowed} and ${p.where} ${p.tail}`;
}

/** The settlements of the scope's filter: each given field must match. */
function settlementFilterOf({ settlements: filter = {} }: ReportScope) {
  const is = (column: string, value: string | undefined) =>
    value === undefined ? sql`true` : sql`${sql.ref(column)} = ${value}`;
  return sql`${is('s.status', filter.status)} and ${is('s.chain', filter.chain)} and ${is('s.currency', filter.token)}`;
}

/** The invoice list's filter on the invoices report's rows (alias `i`). */
const invoicesNarrowed = (scope: ReportScope) => invoiceMatches('i', scope.invoices ?? {});

/** A table's row with its dates as text (`zoned`): what a report query gives. */
type AsText<Row> = {
  [K in keyof Row]: Row[K] extends Date ? string : Row[K] extends Date | null ? string | null : Row[K];
};

/**
 * A timestamp written by PostgreSQL as ISO 8601 in the session's time zone,
 * which each page's transaction sets to the report's (`reportPages`): the
 * database writes dates faster than this process parses them into Dates and
 * formats them again.
 */
const zoned = (column: string) => sql`to_char(${sql.ref(column)}, 'YYYY-MM-DD"T"HH24:MI:SS.MSTZH:TZM')`;

/** What every record row has beside its table's columns: the cursor, the invoice's metadata, the quote's rate. */
interface ReportExtras {
  cursor_at: string;
  cursor_id: string;
  metadata: Record<string, unknown> | null;
  rate: string | null;
  /** The sources whose answers made the rate (kraken+coinbase, fixed), where the quote recorded them. */
  rate_source: string | null;
  quoted_at: string | null;
}

/** The quote's columns, from the quote joined as `quote`: empty all three where there is no rate. */
const rateColumns = (quote: string): TextColumn<Pick<ReportExtras, 'rate' | 'rate_source' | 'quoted_at'>>[] => [
  ['rate', (r) => r.rate, sql.ref(`${quote}.rate`)],
  [
    'rate_source',
    (r) => (r.rate === null ? null : (r.rate_source ?? RATE_SOURCE)),
    sql`case when ${sql.ref(`${quote}.rate`)} is null then null else coalesce(${sql.ref(`${quote}.rate_source`)}, ${RATE_SOURCE}) end`,
  ],
  ['rate_quoted_at', (r) => (r.rate === null ? null : r.quoted_at), zoned(`${quote}.quoted_at`)],
];

type InvoiceRow = AsText<
  Pick<
    InvoicesTable,
    | 'id'
    | 'created_at'
    | 'updated_at'
    | 'expires_at'
    | 'status'
    | 'cancelled'
    | 'amount'
    | 'currency'
    | 'description'
    | 'chain'
    | 'token'
    | 'crypto_amount'
    | 'payment_status'
    | 'paid_late'
    | 'total_received_amount'
    | 'total_received_currency'
    | 'settled_amount'
    | 'refund_status'
    | 'subscriber_id'
  >
> &
  ReportExtras;

/**
 * The invoices report's columns, each also as PostgreSQL writes its CSV cell
 * (invoiceCsvText): a column named alone is the invoice's text column as it is.
 */
const invoiceColumns: readonly (TextField<InvoiceRow> | TextColumn<InvoiceRow>)[] = [
  ['invoice_id', (r) => r.id, sql`i.id::text`],
  ['created_at', (r) => r.created_at, zoned('i.created_at')],
  'status',
  ['cancelled', (r) => bool(r.cancelled), sql`i.cancelled::text`],
  ['fiat_amount', (r) => r.amount, sql`i.amount`],
  ['fiat_currency', (r) => r.currency, sql`i.currency`],
  'chain',
  'token',
  'crypto_amount',
  ...rateColumns('q'),
  'payment_status',
  ['paid_late', (r) => bool(r.paid_late), sql`i.paid_late::text`],
  'total_received_amount',
  'total_received_currency',
  'settled_amount',
  'refund_status',
  'description',
  ['subscriber_id', (r) => r.subscriber_id, sql`i.subscriber_id::text`],
  ['expires_at', (r) => r.expires_at, zoned('i.expires_at')],
  ['updated_at', (r) => r.updated_at, zoned('i.updated_at')],
];

const invoicesReport: RecordReport<InvoiceRow> = {
  columns: invoiceColumns,
  query: (scope, page) => sql<InvoiceRow>`
    select i.created_at::text as cursor_at, i.id::text as cursor_id, i.id, ${zoned('i.created_at')} as created_at,
      ${zoned('i.updated_at')} as updated_at, ${zoned('i.expires_at')} as expires_at, i.status, i.cancelled, i.amount, i.currency, i.description, i.chain, i.token,
      i.crypto_amount, i.payment_status, i.paid_late, i.total_received_amount, i.total_received_currency,
      i.settled_amount, i.refund_status, i.subscriber_id, i.metadata, q.rate, q.rate_source, ${zoned('q.quoted_at')} as quoted_at
    from invoices i ${quoteOf(sql.ref('i.id'), sql.ref('i.chain'), sql.ref('i.token'))}
    ${ofMerchantInRangeOnPage(sql.ref('i.merchant_id'), sql.ref('i.created_at'), sql.ref('i.id'), scope, page, invoicesNarrowed(scope))}`,
};

type PaymentRow = AsText<
  Pick<
    PaymentsTable,
    | 'payment_id'
    | 'invoice_id'
    | 'chain'
    | 'token'
    | 'token_decimals'
    | 'amount'
    | 'to_address'
    | 'tx_hash'
    | 'output_index'
    | 'block_number'
    | 'wrong_token'
    | 'status'
    | 'confirmations'
    | 'detected_at'
    | 'confirmed_at'
  >
> &
  ReportExtras & {
    currency: string;
  };

/** A payment's amount in the token's decimals (the payments table keeps base units). */
const paidAmount = (r: PaymentRow) => unitsShown(r.amount, r.token_decimals);

const paymentsReport: RecordReport<PaymentRow> = {
  columns: [
    'payment_id',
    'invoice_id',
    'detected_at',
    'confirmed_at',
    'status',
    'chain',
    'token',
    ['amount', (r) => paidAmount(r)],
    ['fiat_value', (r) => fiatOf(paidAmount(r), r.token_decimals, r.rate)],
    ['fiat_currency', (r) => (r.rate === null ? null : r.currency)],
    ...rateColumns('a'),
    ['wrong_token', (r) => bool(r.wrong_token)],
    ['confirmations', (r) => String(r.confirmations)],
    'to_address',
    ['transaction_hash', (r) => r.tx_hash],
    ['output_index', (r) => String(r.output_index)],
    ['block_number', (r) => String(r.block_number)],
  ],
  // The rate is the one of the quote the payment was made against (its address), in the token paid.
  query: (scope, page) => sql<PaymentRow>`
    select p.detected_at::text as cursor_at, p.payment_id::text as cursor_id, p.payment_id, p.invoice_id,
      p.chain, p.token, p.token_decimals, p.amount::text as amount, p.to_address, p.tx_hash, p.output_index,
      p.block_number, p.wrong_token, p.status, p.confirmations, ${zoned('p.detected_at')} as detected_at,
      ${zoned('p.confirmed_at')} as confirmed_at, i.currency, i.metadata, a.rate, a.rate_source, ${zoned('a.quoted_at')} as quoted_at
    from payments p
    join invoices i on i.id = p.invoice_id
    left join invoice_addresses a on a.chain = p.chain and a.address = p.to_address and a.token = p.token
    ${ofMerchantInRangeOnPage(sql.ref('i.merchant_id'), sql.ref('p.detected_at'), sql.ref('p.payment_id'), scope, page)}`,
};

type SettlementRow = AsText<
  Pick<
    SettlementsTable,
    | 'id'
    | 'invoice_id'
    | 'created_at'
    | 'status'
    | 'chain'
    | 'currency'
    | 'gross_amount'
    | 'platform_fee'
    | 'network_fee'
    | 'amount'
    | 'merchant_wallet'
    | 'transaction_hash'
    | 'completed_at'
    | 'failure_code'
  >
> &
  ReportExtras & {
    fiat_currency: string;
    token_decimals: number | null;
  };

const settlementsReport: RecordReport<SettlementRow> = {
  columns: [
    ['settlement_id', (r) => r.id],
    'invoice_id',
    'created_at',
    'completed_at',
    'status',
    'chain',
    ['token', (r) => r.currency],
    'gross_amount',
    'platform_fee',
    'network_fee',
    ['net_amount', (r) => r.amount],
    ['gross_fiat_value', (r) => fiatOf(r.gross_amount, r.token_decimals, r.rate)],
    ['fiat_currency', (r) => (r.rate === null ? null : r.fiat_currency)],
    ...rateColumns('q'),
    'merchant_wallet',
    'transaction_hash',
    ['failure_reason', (r) => r.failure_code],
  ],
  query: (scope, page) => sql<SettlementRow>`
    select s.created_at::text as cursor_at, s.id::text as cursor_id, s.id, s.invoice_id,
      ${zoned('s.created_at')} as created_at, s.status, s.chain, s.currency, s.gross_amount, s.platform_fee,
      s.network_fee, s.amount, s.merchant_wallet, s.transaction_hash, ${zoned('s.completed_at')} as completed_at,
      s.failure_code, i.currency as fiat_currency, i.metadata, q.rate, q.rate_source, q.token_decimals,
      ${zoned('q.quoted_at')} as quoted_at
    from settlements s
    join invoices i on i.id = s.invoice_id
    ${quoteOf(sql.ref('s.invoice_id'), sql.ref('s.chain'), sql.ref('s.currency'))}
    ${ofMerchantInRangeOnPage(sql.ref('s.merchant_id'), sql.ref('s.created_at'), sql.ref('s.id'), scope, page, settlementFilterOf(scope))}`,
};

type RefundRow = AsText<
  Pick<
    RefundsTable,
    | 'id'
    | 'invoice_id'
    | 'created_at'
    | 'status'
    | 'chain'
    | 'token'
    | 'amount'
    | 'network_fee'
    | 'net_amount'
    | 'fiat_amount'
    | 'fiat_currency'
    | 'reason'
    | 'destination'
    | 'funded_from'
    | 'transaction_hash'
    | 'approved_at'
    | 'completed_at'
  >
> &
  ReportExtras;

const refundsReport: RecordReport<RefundRow> = {
  columns: [
    ['refund_id', (r) => r.id],
    'invoice_id',
    'created_at',
    'approved_at',
    'completed_at',
    'status',
    'chain',
    'token',
    'amount',
    'network_fee',
    'net_amount',
    'fiat_amount',
    'fiat_currency',
    ...rateColumns('q'),
    'funded_from',
    'destination',
    'transaction_hash',
    'reason',
  ],
  query: (scope, page) => sql<RefundRow>`
    select r.created_at::text as cursor_at, r.id::text as cursor_id, r.id, r.invoice_id,
      ${zoned('r.created_at')} as created_at, r.status, r.chain, r.token, r.amount, r.network_fee, r.net_amount,
      r.fiat_amount, r.fiat_currency, r.reason, r.destination, r.funded_from, r.transaction_hash,
      ${zoned('r.approved_at')} as approved_at, ${zoned('r.completed_at')} as completed_at, i.metadata, q.rate, q.rate_source,
      ${zoned('q.quoted_at')} as quoted_at
    from refunds r
    join invoices i on i.id = r.invoice_id
    ${quoteOf(sql.ref('r.invoice_id'), sql.ref('r.chain'), sql.ref('r.token'))}
    ${ofMerchantInRangeOnPage(sql.ref('r.merchant_id'), sql.ref('r.created_at'), sql.ref('r.id'), scope, page, scope.refundStatus === undefined ? sql`true` : sql`r.status = ${scope.refundStatus}`)}`,
};

interface FeeRow extends ReportExtras {
  fee_type: string;
  source: string;
  paid_from: string | null;
  source_id: string;
  invoice_id: string;
  occurred_at: string;
  chain: string;
  token: string;
  amount: string;
  fiat_currency: string;
  token_decimals: number | null;
}

/**
 * What went to fees, once it went: a completed settlement's platform fee and
 * network fee, and a completed refund's network fee, with `paid_from`:
 * `deposit` or `refund_wallet` (the ledger counts only the first, see
 * ledgerOf). Zero fees are left out. Ordered by when they were paid.
 */
const feesReport: RecordReport<FeeRow> = {
  columns: [
    'occurred_at',
    'fee_type',
    'source',
    'paid_from',
    'source_id',
    'invoice_id',
    'chain',
    'token',
    'amount',
    ['fiat_value', (r) => fiatOf(r.amount, r.token_decimals, r.rate)],
    ['fiat_currency', (r) => (r.rate === null ? null : r.fiat_currency)],
    ...rateColumns('q'),
  ],
  query: (scope, page) => {
    const p = paged(page, sql.ref('f.occurred_at'), sql`f.source_id::text || '/' || f.fee_type`, 'text');
    return sql<FeeRow>`
    select f.occurred_at::text as cursor_at, f.source_id::text || '/' || f.fee_type as cursor_id,
      f.fee_type, f.source, f.paid_from, f.source_id, f.invoice_id, ${zoned('f.occurred_at')} as occurred_at, f.chain,
      f.token, f.amount, i.currency as fiat_currency, i.metadata, q.rate, q.rate_source, q.token_decimals,
      ${zoned('q.quoted_at')} as quoted_at
    from (
      select 'platform_fee' as fee_type, 'settlement' as source, 'deposit' as paid_from, s.id as source_id, s.invoice_id,
        s.completed_at as occurred_at, s.chain, s.currency as token, s.platform_fee as amount
      from settlements s
      where s.merchant_id = ${scope.merchantId} and s.status = 'completed' and s.platform_fee::numeric > 0
      union all
      select 'network_fee', 'settlement', 'deposit', s.id, s.invoice_id, s.completed_at, s.chain, s.currency, s.network_fee
      from settlements s
      where s.merchant_id = ${scope.merchantId} and s.status = 'completed' and s.network_fee::numeric > 0
      union all
      select 'network_fee', 'refund', r.funded_from, r.id, r.invoice_id, r.completed_at, r.chain, r.token, r.network_fee
      from refunds r
      where r.merchant_id = ${scope.merchantId} and r.status = 'completed' and r.network_fee::numeric > 0
    ) f
    join invoices i on i.id = f.invoice_id
    ${quoteOf(sql.ref('f.invoice_id'), sql.ref('f.chain'), sql.ref('f.token'))}
    where ${inRange(sql.ref('f.occurred_at'), scope)} and ${p.where}
    ${p.tail}`;
  },
};

const recordReports: Record<RecordKind, RecordReport<any>> = {
  invoices: invoicesReport,
  payments: paymentsReport,
  settlements: settlementsReport,
  refunds: refundsReport,
  fees: feesReport,
};

export const columnsOf = (kind: RecordKind): readonly string[] => recordReports[kind].columns.map(nameOf);

/**
 * The metadata keys of the invoices behind a report's rows, sorted: the
 * `metadata.<key>` columns of its CSV. Keys differ from row to row and a
 * streamed CSV must name its columns first, so this is one pass over the
 * scope before the rows are read.
 */
export async function metadataKeysOf(db: Kysely<ReadModelTables>, kind: RecordKind, scope: ReportScope) {
  // The invoices' own rows, without the report's join to their quotes (most of a pass over a million).
  const rowsWithMetadata =
    kind === 'invoices'
      ? sql`select i.metadata from invoices i where i.merchant_id = ${scope.merchantId} and ${inRange(sql.ref('i.created_at'), scope)} and ${invoicesNarrowed(scope)}`
      : recordReports[kind].query(scope, all);
  // The keys as a lateral function scan grouped by a hash: a `distinct` of the
  // function in the select list sorts every key of every row (2,000,000 for
  // the bench's million invoices, spilled to disk: 1.3 s → 0.75 s).
  const rows = await sql<{ key: string }>`
    select k.key
    from (${rowsWithMetadata}) r cross join lateral jsonb_object_keys(r.metadata) k(key)
    where jsonb_typeof(r.metadata) = 'object'
    group by k.key
    order by k.key`.execute(db);
  return rows.rows.map((r) => r.key);
}

/** A metadata value as a cell: text as it is, anything else as JSON. */
export function metadataCell(value: unknown): ReportCell {
  if (value === undefined || value === null) return null;
  return typeof value === 'string' ? value : JSON.stringify(value);
}

export interface ReportRecord {
  cells: ReportCell[];
  metadata: Record<string, unknown> | null;
}

/**
 * The records of a report, a page at a time in (time, id) order, each page
 * written in `timeZone` (set for the page's transaction, see `zoned`).
 *
 * On PostgreSQL, one query through a cursor in one transaction: the database
 * plans the whole report once (a hash join where pages would repeat index
 * lookups), the rows are one snapshot, and a connection of the pool is held
 * while the report streams. On PGlite, whose one connection everything
 * shares, keyset pages: each starts after the last row of the one before, in
 * its own short transaction. Either way the next page is read while the last
 * is written out, and memory holds two pages whatever the report's size.
 */
export function reportPages(
  db: Kysely<ReadModelTables>,
  kind: RecordKind,
  scope: ReportScope,
  timeZone: string,
  { engine = 'pglite', pageRows = REPORT_PAGE_ROWS }: { engine?: SqlEngine; pageRows?: number } = {},
): AsyncGenerator<ReportRecord[]> {
  const report = recordReports[kind];
  const records = (rows: ReportExtras[]) =>
    rows.map((row) => ({ cells: cellsOf(report.columns, row), metadata: row.metadata }));
  return engine === 'postgres'
    ? cursorPages(db, report.query(scope, allInOrder), timeZone, pageRows, records)
    : keysetPages(db, (after) => report.query(scope, { after, rows: pageRows }), timeZone, pageRows, records);
}

/**
 * The invoices report's CSV lines as PostgreSQL writes them: the biggest
 * report, where handing each row to this process as an object of 24 fields
 * was most of the cost (docs/benchmarks.md). The cells are those of
 * `invoiceColumns`' text followed by the metadata keys, each through
 * `report_csv_cell` (migrations 0010, 0013), the same rule as api/csv.ts;
 * test/api-reports.test.ts checks every cell against the NDJSON's.
 *
 * With `copy` (PostgreSQL) the whole report is one COPY whose bytes go out as
 * they come; without (PGlite) keyset pages of text, as `reportPages`.
 */
export function invoiceCsvText(
  db: Kysely<ReadModelTables>,
  scope: ReportScope,
  timeZone: string,
  metadataKeys: readonly string[],
  { copy, pageRows = REPORT_PAGE_ROWS }: { copy?: SqlDatabase['copyText']; pageRows?: number } = {},
): AsyncIterable<string | Uint8Array> {
  const cells = [
    ...invoiceColumns.map((column) => (typeof column === 'string' ? sql.ref(`i.${column}`) : column[2])),
    ...metadataKeys.map(
      (key) => sql`case jsonb_typeof(i.metadata -> ${key}) when 'string' then i.metadata ->> ${key}
        when 'null' then null else (i.metadata -> ${key})::text end`,
    ),
  ];
  // The cells are computed in a subquery that `offset 0` keeps whole: pulled
  // up, each to_char would run once for every use of its cell in
  // report_csv_cell (2.5 times the time on 50,000 rows). A COPY's rows are
  // the line alone.
  const query = (page: Paging, cursor: boolean) => sql<Cursor & { line: string }>`
    select ${cursor ? sql`s.cursor_at, s.cursor_id,` : sql``}
      concat_ws(',', ${sql.join(cells.map((_, n) => sql`report_csv_cell(${sql.ref(`s.c${n}`)})`))}) || chr(13) || chr(10) as line
    from (
      select i.created_at as sort_at, i.id as sort_id, i.created_at::text as cursor_at, i.id::text as cursor_id,
        ${sql.join(cells.map((cell, n) => sql`${cell} as ${sql.ref(`c${n}`)}`))}
      from invoices i ${quoteOf(sql.ref('i.id'), sql.ref('i.chain'), sql.ref('i.token'))}
      ${ofMerchantInRangeOnPage(sql.ref('i.merchant_id'), sql.ref('i.created_at'), sql.ref('i.id'), scope, page, invoicesNarrowed(scope))}
      offset 0
    ) s
    order by s.sort_at, s.sort_id`;
  if (copy) return copy(query(allInOrder, false).compile(db), { timezone: timeZone });
  return keysetPages(
    db,
    (after) => query({ after, rows: pageRows }, true),
    timeZone,
    pageRows,
    (rows) => rows.map((r) => r.line).join(''),
  );
}

const inZone = (trx: Kysely<ReadModelTables>, timeZone: string) =>
  sql`select set_config('timezone', ${timeZone}, true)`.execute(trx);

interface Cursor {
  cursor_at: string;
  cursor_id: string;
}

async function* keysetPages<Row extends Cursor, Out>(
  db: Kysely<ReadModelTables>,
  pageAfter: (after: Paging['after']) => RawBuilder<Row>,
  timeZone: string,
  pageRows: number,
  records: (rows: Row[]) => Out,
): AsyncGenerator<Out> {
  const fetchPage = (after: Paging['after']): Promise<Row[]> => {
    const rows = db.transaction().execute(async (trx) => {
      await inZone(trx, timeZone);
      return (await pageAfter(after).execute(trx)).rows;
    });
    // A reader that stops early leaves the page in flight: its failure is nobody's to report.
    rows.catch(() => undefined);
    return rows;
  };
  let next: Promise<Row[]> | undefined = fetchPage(undefined);
  while (next) {
    const rows: Row[] = await next;
    const last: Row | undefined = rows[pageRows - 1];
    next = last === undefined ? undefined : fetchPage({ at: last.cursor_at, id: last.cursor_id });
    if (rows.length > 0) yield records(rows);
  }
}

async function* cursorPages<Row, Out>(
  db: Kysely<ReadModelTables>,
  query: RawBuilder<Row>,
  timeZone: string,
  pageRows: number,
  records: (rows: Row[]) => Out,
): AsyncGenerator<Out> {
  // One page may wait here while the reader writes out the one before.
  const waiting: { rows: Row[] | undefined; taken: () => void; arrived: () => void } = {
    rows: undefined,
    taken: () => undefined,
    arrived: () => undefined,
  };
  let finished = false;
  let stopped = false;
  const reading = db
    .transaction()
    .execute(async (trx) => {
      await inZone(trx, timeZone);
      await sql`declare report_rows no scroll cursor for ${query}`.execute(trx);
      for (;;) {
        const { rows } = await sql<Row>`fetch forward ${sql.raw(String(pageRows))} from report_rows`.execute(trx);
        if (stopped) return;
        if (rows.length > 0) {
          while (waiting.rows !== undefined) await new Promise<void>((resolve) => (waiting.taken = resolve));
          if (stopped) return;
          waiting.rows = rows;
          waiting.arrived();
        }
        if (rows.length < pageRows) return;
      }
    })
    .finally(() => {
      finished = true;
      waiting.arrived();
    });
  reading.catch(() => undefined);
  try {
    for (;;) {
      if (waiting.rows === undefined && !finished) {
        await new Promise<void>((resolve) => (waiting.arrived = resolve));
      }
      const rows = waiting.rows;
      if (rows === undefined) break;
      waiting.rows = undefined;
      waiting.taken();
      yield records(rows);
    }
    await reading;
  } finally {
    // A reader that stops early ends the transaction (and the cursor) at the next page.
    stopped = true;
    waiting.taken();
  }
}

/** One ledger row: what the service held for the merchant in a chain and token, and how it moved. */
export interface LedgerRow {
  chain: string;
  token: string;
  decimals: number;
  opening: bigint;
  received: bigint;
  settled: bigint;
  refunded: bigint;
  fees: bigint;
  closing: bigint;
}

export const ledgerColumns = [
  'chain',
  'token',
  'opening',
  'received',
  'settled',
  'refunded',
  'fees',
  'closing',
] as const;

/** Sums of one movement: before `from` (into the opening), within the scope, and before `to` (into the closing). */
interface MovementSums {
  chain: string;
  token: string;
  decimals: number | null;
  before: string | null;
  within: string | null;
  through: string | null;
}

const movementSums = (amount: RawBuilder<unknown>, at: RawBuilder<unknown>, { from, to }: ReportScope) => sql`
  sum(${amount}) filter (where ${from === undefined ? sql`false` : sql`${at} < ${from.toISOString()}::timestamptz`})::text as before,
  sum(${amount}) filter (where ${inRange(at, { merchantId: '', from, to })})::text as within,
  sum(${amount}) filter (where ${to === undefined ? sql`true` : sql`${at} < ${to.toISOString()}::timestamptz`})::text as through`;

/**
 * The ledger of a merchant between `from` and `to`, one row per chain and
 * token (docs/reports.md defines each column):
 * - received: payments confirmed (and not since reorged), at their
 *   confirmation, wrong-token and late ones included: money that arrived;
 * - settled: completed settlements' net amount, at completion;
 * - refunded: completed refunds paid from the deposit, their net amount (what
 *   reached the customer), at completion; a refund paid from the merchant's
 *   refund wallet never was money held from an invoice;
 * - fees: completed settlements' platform and network fees and those refunds'
 *   network fees;
 * - opening and closing: the same four summed over everything before `from`
 *   and before `to`.
 * Closing is summed on its own, not derived, so the identity
 * opening + received − settled − refunded − fees = closing is a check.
 */
export async function ledgerOf(db: Kysely<ReadModelTables>, scope: ReportScope): Promise<LedgerRow[]> {
  const { merchantId } = scope;
  const [received, settled, settlementFees, refunded, refundFees] = await Promise.all([
    sql<MovementSums>`
      select p.chain, p.token, max(p.token_decimals) as decimals,
        ${movementSums(sql`p.amount`, sql.ref('p.confirmed_at'), scope)}
      from payments p join invoices i on i.id = p.invoice_id
      where i.merchant_id = ${merchantId} and p.status = 'confirmed' and p.confirmed_at is not null
      group by p.chain, p.token`.execute(db),
    completedSums(db, 'settlements', sql`s.amount::numeric`, scope),
    completedSums(db, 'settlements', sql`s.platform_fee::numeric + s.network_fee::numeric`, scope),
    completedSums(db, 'refunds', sql`s.net_amount::numeric`, scope),
    completedSums(db, 'refunds', sql`s.network_fee::numeric`, scope),
  ]);
  const rows = new Map<string, LedgerRow & { through: Record<'received' | 'settled' | 'refunded' | 'fees', bigint> }>();
  const add = (
    sums: readonly MovementSums[],
    column: 'received' | 'settled' | 'refunded' | 'fees',
    sign: 1n | -1n,
    inBaseUnits: boolean,
  ) => {
    for (const s of sums) {
      const decimals = decimalsOf(s.chain, s.token, s.decimals);
      const key = `${s.chain}/${s.token}`;
      let row = rows.get(key);
      if (!row) {
        row = {
          chain: s.chain,
          token: s.token,
          decimals,
          opening: 0n,
          received: 0n,
          settled: 0n,
          refunded: 0n,
          fees: 0n,
          closing: 0n,
          through: { received: 0n, settled: 0n, refunded: 0n, fees: 0n },
        };
        rows.set(key, row);
      }
      const units = (text: string | null) => (text === null ? 0n : unitsOfSum(text, decimals, inBaseUnits));
      row.opening += sign * units(s.before);
      row[column] += units(s.within);
      row.closing += sign * units(s.through);
    }
  };
  add(received.rows, 'received', 1n, true);
  add(settled, 'settled', -1n, false);
  add(settlementFees, 'fees', -1n, false);
  add(refunded, 'refunded', -1n, false);
  add(refundFees, 'fees', -1n, false);
  return [...rows.values()]
    .map(({ through: _, ...row }) => row)
    .sort((a, b) => (a.chain === b.chain ? (a.token < b.token ? -1 : 1) : a.chain < b.chain ? -1 : 1));
}

async function completedSums(
  db: Kysely<ReadModelTables>,
  table: 'settlements' | 'refunds',
  amount: RawBuilder<unknown>,
  scope: ReportScope,
): Promise<MovementSums[]> {
  const token = table === 'settlements' ? sql.ref('s.currency') : sql.ref('s.token');
  const fromDeposit = table === 'refunds' ? sql`and s.funded_from = 'deposit'` : sql``;
  const result = await sql<MovementSums>`
    select s.chain, ${token} as token, null::integer as decimals,
      ${movementSums(amount, sql.ref('s.completed_at'), scope)}
    from ${sql.table(table)} s
    where s.merchant_id = ${scope.merchantId} and s.status = 'completed' and s.completed_at is not null ${fromDeposit}
    group by s.chain, ${token}`.execute(db);
  return result.rows;
}

/** The token's decimals from the catalogue, else as the payments recorded them, else 8. */
function decimalsOf(chain: string, token: string, recorded: number | null): number {
  const known = isChainName(chain) ? findToken(chain, token) : undefined;
  return known?.decimals ?? recorded ?? 8;
}

/** A SQL sum as base units: base units already, or a decimal in the token's units. */
function unitsOfSum(text: string, decimals: number, inBaseUnits: boolean): bigint {
  if (inBaseUnits) return BigInt(text);
  const units = parseUnits(text, decimals);
  if (units === undefined) throw new RangeError(`A ledger sum ${text} is not an amount of ${decimals} decimals`);
  return units;
}

/** A ledger row's cells, amounts in the token's own decimals. */
export function ledgerCells(row: LedgerRow): ReportCell[] {
  const shown = (units: bigint) =>
    units < 0n ? `-${unitsShown(-units, row.decimals)}` : unitsShown(units, row.decimals);
  return [
    row.chain,
    row.token,
    shown(row.opening),
    shown(row.received),
    shown(row.settled),
    shown(row.refunded),
    shown(row.fees),
    shown(row.closing),
  ];
}
