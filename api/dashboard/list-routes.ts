// The dashboard's Invoices and Refunds lists (dashboard.md, pages 2 and 4):
// filters, keyset pages, and the CSV of the filtered list. The lists are the
// API's queries (listInvoices, listRefunds); the CSV is the finance report of
// the same kind (api/report-stream.ts) narrowed by the same filter, so there
// is one CSV writer and one set of columns (docs/reports.md).
import type { FastifyInstance } from 'fastify';
import { listTokens } from '../../domain/catalogue.ts';
import { roleAllows, type DashboardPermission } from '../../domain/merchant-user.ts';
import { invoiceIssueTypes, listInvoices, type InvoiceFilter } from '../../projections/invoice-queries.ts';
import type { Cursor } from '../../projections/paging.ts';
import { listRefunds } from '../../projections/refunds.ts';
import { refundView } from '../../projections/contract/refund.ts';
import { dailyVolume, daysBack } from '../../projections/overview.ts';
import { ledgerCells, ledgerOf, type ReportScope } from '../../projections/reports.ts';
import type { Clock } from '../../adapters/clock.ts';
import type { SqlDatabase } from '../../adapters/sql/database.ts';
import type { ReadModels } from '../../projections/schema.ts';
import type { Config } from '../config.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import { sendReport } from '../routes/reports.ts';
import {
  invoicesPage,
  overviewFigures,
  type ListView,
  refundsPage,
  type InvoiceListQuery,
  type RefundListQuery,
} from './list-pages.ts';
import { messagePage } from './pages.ts';
import { REFUND_STATUSES } from './refund-pages.ts';
import type { DashboardKit } from './kit.ts';
import type { DashboardSession } from './sessions.ts';

/** Rows a page shows. */
export const LIST_PAGE_ROWS = 50;

/** The statuses of the contract's invoice (a partly paid one is pending). */
export const INVOICE_STATUSES = ['pending', 'confirmed', 'settled', 'expired'] as const;

type Query = Record<string, string | string[] | undefined>;
/** A query parameter given once; a repeated one counts as not given. */
const text = (query: Query, name: string) => {
  const value = query[name];
  return typeof value === 'string' ? value.trim().slice(0, 200) : '';
};

const DAY = /^(\d{4})-(\d{2})-(\d{2})$/;
/** The first instant (UTC) of a YYYY-MM-DD day, or undefined for anything that is not a calendar day. */
export function dayStart(value: string): Date | undefined {
  if (!DAY.test(value)) return undefined;
  const at = new Date(`${value}T00:00:00.000Z`);
  return !Number.isNaN(at.getTime()) && at.toISOString().startsWith(value) ? at : undefined;
}

/** `from` and `to` days (UTC, both inclusive) as the report's instants: from inclusive, to exclusive. */
export function daysOf(from: string, to: string): { from?: Date; to?: Date } | string {
  const start = from ? dayStart(from) : undefined;
  const end = to ? dayStart(to) : undefined;
  if ((from && !start) || (to && !end)) return 'Dates are days, such as 2026-11-28.';
  const endExclusive = end && new Date(end.getTime() + 86_400_000);
  if (start && endExclusive && endExclusive <= start) return 'The last day is before the first.';
  return { from: start, to: endExclusive };
}

/** A page link's `after` or `before`: a row shown, as its creation time and id. */
export const cursorText = (row: { created_at: Date; id: string }) =>
  `${new Date(row.created_at).toISOString()}_${row.id}`;
const CURSOR =
  /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)_([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;
export function cursorOf(value: string): Cursor | undefined {
  const match = CURSOR.exec(value);
  const at = match && new Date(match[1]!);
  return at && !Number.isNaN(at.getTime()) ? { at, id: match[2]! } : undefined;
}

/** A filter's value: one of `allowed` or nothing; else what is wrong. */
function oneOf(value: string, allowed: readonly string[], what: string): string | Error {
  return value === '' || allowed.includes(value) ? value : new Error(`Unknown ${what}: ${value}`);
}

/** Where a keyset page starts: after a row (going older) or before one (going newer); the newest when neither. */
export interface PageStart {
  after?: Cursor;
  before?: Cursor;
}

interface Parsed<Q> {
  query: Q;
  from?: Date;
  to?: Date;
  start: PageStart;
}

/** The invoice list's filters from the address's query, or what is wrong with them. */
export function invoiceListOf(
  raw: Query,
  options: { chains: readonly string[]; tokens: readonly string[] },
): (Parsed<InvoiceListQuery> & { filter: InvoiceFilter }) | { query: InvoiceListQuery; error: string } {
  const query: InvoiceListQuery = {
    q: text(raw, 'q'),
    status: text(raw, 'status'),
    issue: text(raw, 'issue'),
    chain: text(raw, 'chain'),
    token: text(raw, 'token').toUpperCase(),
    from: text(raw, 'from'),
    to: text(raw, 'to'),
  };
  const checked = [
    oneOf(query.status, INVOICE_STATUSES, 'status'),
    oneOf(query.issue, invoiceIssueTypes, 'issue'),
    oneOf(query.chain, options.chains, 'chain'),
    oneOf(query.token, options.tokens, 'token'),
  ].find((v) => v instanceof Error);
  if (checked) return { query, error: checked.message };
  const common = commonOf(raw, query);
  if (typeof common === 'string') return { query, error: common };
  const filter: InvoiceFilter = {
    ...(query.q && { search: query.q }),
    ...(query.status && { status: query.status }),
    ...(query.issue && { issueType: query.issue }),
    ...(query.chain && { chain: query.chain }),
    ...(query.token && { token: query.token }),
  };
  return { ...common, filter };
}

/** The dates and the page, which every list has. */
function commonOf<Q extends { from: string; to: string }>(raw: Query, query: Q): Parsed<Q> | string {
  const days = daysOf(query.from, query.to);
  if (typeof days === 'string') return days;
  const [afterText, beforeText] = [text(raw, 'after'), text(raw, 'before')];
  const [after, before] = [afterText, beforeText].map((t) => (t ? cursorOf(t) : undefined));
  if ((afterText && !after) || (beforeText && !before) || (after && before)) {
    return 'This page link is not valid; start again from the newest.';
  }
  return { query, ...days, start: { after, before } };
}

export function refundListOf(raw: Query): Parsed<RefundListQuery> | { query: RefundListQuery; error: string } {
  const query: RefundListQuery = { status: text(raw, 'status'), from: text(raw, 'from'), to: text(raw, 'to') };
  const status = oneOf(query.status, REFUND_STATUSES, 'status');
  if (status instanceof Error) return { query, error: status.message };
  const common = commonOf(raw, query);
  return typeof common === 'string' ? { query, error: common } : common;
}

/**
 * A page of rows read one beyond what it shows, in the direction it was read
 * (so that the extra row tells whether there is a page beyond): the rows
 * shown, and the cursors of the pages next to it.
 */
export function onePage<Row extends { created_at: Date; id: string }>(rows: Row[], start: PageStart) {
  const more = rows.length > LIST_PAGE_ROWS;
  const shown = start.before ? rows.slice(-LIST_PAGE_ROWS) : rows.slice(0, LIST_PAGE_ROWS);
  const [first, last] = [shown[0], shown.at(-1)];
  const hasOlder = start.before ? true : more;
  const hasNewer = start.before ? more : start.after !== undefined;
  return {
    shown,
    older: hasOlder && last ? cursorText(last) : undefined,
    newer: hasNewer && first ? cursorText(first) : undefined,
    paged: start.after !== undefined || start.before !== undefined,
  };
}

/** Days the Overview's figures cover. */
export const OVERVIEW_DAYS = 30;

/**
 * The Overview's figures, for the roles that read them: the volume per day
 * (invoices:read) and the ledger report's totals over the same days
 * (settlements:read), from today (the service's clock) back.
 */
export async function overviewFiguresOf(ctx: Pick<ListRouteDeps, 'clock' | 'db'>, session: DashboardSession) {
  const since = daysBack(ctx.clock.now(), OVERVIEW_DAYS);
  const [volume, ledger] = await Promise.all([
    roleAllows(session.role, 'invoices:read') ? dailyVolume(ctx.db, session.merchantId, since) : undefined,
    roleAllows(session.role, 'settlements:read')
      ? ledgerOf(ctx.db, { merchantId: session.merchantId, from: since, to: undefined })
      : undefined,
  ]);
  const totals = ledger?.map((row) => {
    const [chain, token, , received, settled, refunded, fees] = ledgerCells(row) as string[];
    return { chain: chain!, token: token!, received: received!, settled: settled!, fees: fees!, refunded: refunded! };
  });
  return overviewFigures({ days: OVERVIEW_DAYS, since: since.toISOString().slice(0, 10), volume, totals });
}

/** What these pages use of the service. */
export interface ListRouteDeps extends Pick<ReadYourWrites, 'caughtUp'> {
  db: ReadModels;
  database: SqlDatabase;
  config: Config;
  clock: Clock;
}

export async function listRoutes(scope: FastifyInstance, ctx: ListRouteDeps, { page, html }: DashboardKit) {
  const { db, config, database } = ctx;
  const chains = config.chains;
  const tokens = listTokens(config.chains).map((t) => t.symbol);
  const pageOptions = { statuses: INVOICE_STATUSES, issues: invoiceIssueTypes, chains, tokens };

  /**
   * A list page's route: its filters from the query (wrong ones: the page, 400, with what is wrong and no
   * rows); then, like the API's list, caught up with what was written before this request, the keyset page
   * of the rows `read` finds, each shown by `show`.
   */
  const listRoute = <Q, P extends Parsed<Q>, Row extends { created_at: Date; id: string }, Shown>(
    permission: DashboardPermission,
    parse: (query: Query) => P | { query: Q; error: string },
    read: (
      session: DashboardSession,
      parsed: P,
      paging: PageStart & { limit: number; page: 1 },
    ) => Promise<{ rows: Row[]; total: number }>,
    show: (row: Row) => Shown,
    render: (session: DashboardSession, list: ListView<Shown, Q>) => string,
  ) =>
    page<{ Querystring: Query }>(permission, async (request, reply, session) => {
      const parsed = parse(request.query);
      if ('error' in parsed) {
        return html(
          reply,
          400,
          render(session, { rows: [], total: 0, query: parsed.query, paged: false, error: parsed.error }),
        );
      }
      await ctx.caughtUp();
      const { rows, total } = await read(session, parsed, { limit: LIST_PAGE_ROWS + 1, page: 1, ...parsed.start });
      const { shown, ...pages } = onePage(rows, parsed.start);
      return html(reply, 200, render(session, { rows: shown.map(show), total, query: parsed.query, ...pages }));
    });

  /**
   * A list's CSV route: the finance report of `kind` narrowed to the list's filters (`narrowed`), as CSV:
   * what GET /api/v1/reports/{kind} sends; wrong filters, a 400 page saying what is wrong.
   */
  const csvRoute = <Q, P extends Parsed<Q>>(
    kind: 'invoices' | 'refunds',
    parse: (query: Query) => P | { query: Q; error: string },
    narrowed: (parsed: P) => Pick<ReportScope, 'invoices' | 'refundStatus'>,
  ) =>
    page<{ Querystring: Query }>('reports:export', async (request, reply, session) => {
      const parsed = parse(request.query);
      if ('error' in parsed) return html(reply, 400, messagePage('Not exported', parsed.error, session));
      await ctx.caughtUp();
      const scope = { merchantId: session.merchantId, from: parsed.from, to: parsed.to, ...narrowed(parsed) };
      return sendReport(reply, database, { kind, format: 'csv', timeZone: 'UTC', scope });
    });

  const invoiceList = (query: Query) => invoiceListOf(query, { chains, tokens });
  scope.get(
    '/dashboard/invoices',
    listRoute(
      'invoices:read',
      invoiceList,
      (session, parsed, paging) =>
        listInvoices(db, {
          merchantId: session.merchantId,
          ...parsed.filter,
          from: parsed.from,
          // The list's `to` is inclusive, the day's end is not: its last millisecond (times are kept in ms).
          to: parsed.to && new Date(parsed.to.getTime() - 1),
          ...paging,
        }),
      (row) => row,
      (session, list) => invoicesPage(session, list, pageOptions),
    ),
  );
  scope.get(
    '/dashboard/invoices.csv',
    csvRoute('invoices', invoiceList, (parsed) => ({ invoices: parsed.filter })),
  );

  scope.get(
    '/dashboard/refunds',
    listRoute(
      'refunds:read',
      refundListOf,
      (session, parsed, paging) =>
        listRefunds(
          db,
          {
            merchantId: session.merchantId,
            status: parsed.query.status || undefined,
            from: parsed.from,
            to: parsed.to,
          },
          paging,
        ),
      (row) => refundView(row, config.publicBaseUrl),
      refundsPage,
    ),
  );
  scope.get(
    '/dashboard/refunds.csv',
    csvRoute('refunds', refundListOf, (parsed) => ({
      ...(parsed.query.status && { refundStatus: parsed.query.status }),
    })),
  );
}
