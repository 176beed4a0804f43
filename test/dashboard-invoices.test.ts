// The dashboard's Overview figures, Invoices and Refunds lists over HTTP
// (dashboard.md pages 1, 2 and 4): filters, keyset pages through more than
// two pages, the CSV export of the filtered list (the finance report of the
// same kind), who may export, and that another merchant's rows never show;
// then, on a generated history, that the list's pages and the export hold
// exactly the rows a filter means, on PGlite and PostgreSQL.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import { after, before, describe, it } from 'node:test';
import { cursorOf, cursorText, daysOf, invoiceListOf, LIST_PAGE_ROWS } from '../api/dashboard/list-routes.ts';
import { openPglite, type SqlDatabase } from '../adapters/sql/database.ts';
import { reportChunks } from '../api/report-stream.ts';
import { parseUnits } from '../domain/money.ts';
import { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { listInvoices, type InvoiceFilter } from '../projections/invoice-queries.ts';
import type { Cursor } from '../projections/paging.ts';
import { listRefunds } from '../projections/refunds.ts';
import { columnsOf, ledgerOf } from '../projections/reports.ts';
import { readModelMigrations, type ReadModelTables } from '../projections/schema.ts';
import { dailyVolume, daysBack } from '../projections/overview.ts';
import { parseCsv } from './support/csv.ts';
import { dashboardClient, paidOnEthereum } from './support/dashboard.ts';
import { merchantWithKey } from './support/merchant.ts';
import { freshPostgres } from './support/postgres.ts';
import { generateHistory, HISTORY_START, insertHistory } from './support/report-history.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('dashboard list rules (pure)', () => {
  it('dates are UTC days, the last one inclusive; a page cursor round-trips; unknown filter values are refused', () => {
    assert.deepEqual(daysOf('2026-11-01', '2026-11-01'), {
      from: new Date('2026-11-01T00:00:00Z'),
      to: new Date('2026-11-02T00:00:00Z'),
    });
    assert.deepEqual(daysOf('', ''), { from: undefined, to: undefined });
    assert.match(daysOf('2026-02-30', '') as string, /Dates are days/);
    assert.match(daysOf('yesterday', '') as string, /Dates are days/);
    assert.match(daysOf('2026-11-02', '2026-11-01') as string, /before the first/);

    const row = { created_at: new Date('2026-11-28T07:40:15.123Z'), id: '0b7c3a56-7f6a-4d0e-9d43-2f0e3c1b2a10' };
    assert.deepEqual(cursorOf(cursorText(row)), { at: row.created_at, id: row.id });
    assert.equal(cursorOf('2026-11-28_x'), undefined);

    const options = { chains: ['ethereum'], tokens: ['ETH', 'USDT'] };
    assert.match((invoiceListOf({ chain: 'tron' }, options) as { error: string }).error, /Unknown chain: tron/);
    assert.match((invoiceListOf({ status: 'partial' }, options) as { error: string }).error, /Unknown status/);
    assert.match((invoiceListOf({ issue: 'lost' }, options) as { error: string }).error, /Unknown issue/);
    const parsed = invoiceListOf({ token: 'usdt', issue: 'late', q: ' A-1 ' }, options);
    assert.ok('filter' in parsed);
    assert.deepEqual(parsed.filter, { search: 'A-1', issueType: 'late', token: 'USDT' });

    assert.deepEqual(daysBack(new Date('2026-11-28T07:40:00Z'), 30), new Date('2026-10-30T00:00:00Z'));
  });
});

describe('dashboard lists over HTTP', () => {
  let svc: RunningService;
  let merchantId: string;
  let key: string;
  let otherKey: string;
  /** The overpaid invoice of each merchant: 100 USD paid with 120 USDT on Ethereum. */
  let paid: string;
  let otherPaid: string;
  let refundWaiting: string;
  let otherRefund: string;
  const invoiceIds: string[] = [];
  const today = () => new Date().toISOString().slice(0, 10);
  const yesterday = () => new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
  const CUSTOMER = '0x8ba1f109551bD432803012645Ac136ddd64DBA72';
  const idsIn = (page: string) => [...page.matchAll(/class="invoice-link">([0-9a-f-]{36})</g)].map((m) => m[1]!);

  const overpaidInvoice = (apiKey: string, orderId: string) =>
    paidOnEthereum(svc, apiKey, { amount: '100', token: 'USDT', paid: '120', metadata: { orderId } });
  async function refund(apiKey: string, invoiceId: string, body: Record<string, string>) {
    const made = await svc.call('POST', `/api/v1/invoices/${invoiceId}/refunds`, { token: apiKey, body });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    return made.body.data as { id: string; status: string };
  }

  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
    const shop = await merchantWithKey(svc, { name: 'Many invoices' });
    merchantId = shop.merchant.id;
    key = shop.key;
    const other = await merchantWithKey(svc, { name: 'Other shop' });
    otherKey = other.key;
    paid = await overpaidInvoice(key, 'A-1');
    otherPaid = await overpaidInvoice(otherKey, 'A-1');
    // More than two pages of open invoices, each with an order id.
    for (let n = 0; n < 2 * LIST_PAGE_ROWS + 5; n++) {
      const created = await svc.call('POST', '/api/v1/invoices', {
        token: key,
        body: { amount: `${n + 1}.50`, currency: 'USD', metadata: { orderId: `B-${n}` } },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      invoiceIds.push(created.body.data.id);
    }
    refundWaiting = (await refund(key, paid, { amount: '5', destination: CUSTOMER, reason: 'one too many' })).id;
    await refund(key, paid, { amount: '3' });
    otherRefund = (await refund(otherKey, otherPaid, { amount: '5', destination: CUSTOMER })).id;
  });
  after(() => svc.close());

  it('filters by status, issue, chain, token, dates and order id; bad values are a 400, never a 500', async () => {
    const owner = await dashboardClient(svc, merchantId, 'owner@many.example', 'owner');
    const only = async (query: string) => idsIn((await owner.get(`/dashboard/invoices?${query}`)).text);
    assert.deepEqual(await only('status=confirmed'), [paid]);
    assert.deepEqual(await only('issue=overpaid'), [paid]);
    assert.deepEqual(await only('chain=ethereum&token=usdt'), [paid]);
    assert.deepEqual(await only('chain=tron'), []);
    assert.deepEqual(await only('token=BTC'), []);
    assert.deepEqual(await only('issue=late'), []);
    assert.deepEqual(await only('q=A-1'), [paid], "the order id, and never the other merchant's invoice");
    assert.deepEqual(await only(`q=${otherPaid}`), []);
    assert.deepEqual(await only(`to=${yesterday()}`), []);
    const fromToday = await owner.get(`/dashboard/invoices?from=${today()}&to=${today()}`);
    assert.match(fromToday.text, new RegExp(`id="total">${2 * LIST_PAGE_ROWS + 6} invoices<`));
    assert.equal((await only('status=pending&q=B-7')).length, 1);

    for (const bad of [
      'from=2026-13-01',
      'chain=nochain',
      'status=partial',
      'issue=x',
      'after=nonsense',
      `from=${today()}&to=${yesterday()}`,
    ]) {
      const answer = await owner.get(`/dashboard/invoices?${bad}`);
      assert.equal(answer.status, 400, bad);
      assert.match(answer.text, /id="form-error"/);
    }
  });

  it('pages through more than two pages by keyset and back: every invoice once, newest first', async () => {
    const owner = await dashboardClient(svc, merchantId, 'owner2@many.example', 'owner');
    const link = (text: string, id: string) =>
      new RegExp(`href="([^"]+)" rel="(?:next|prev)" id="${id}"`).exec(text)?.[1]?.replaceAll('&amp;', '&');
    const seen: string[] = [];
    const pagesSeen: string[][] = [];
    let path: string | undefined = '/dashboard/invoices';
    let last = '';
    while (path) {
      const page = await owner.get(path);
      assert.equal(page.status, 200);
      const ids = idsIn(page.text);
      assert.ok(ids.length <= LIST_PAGE_ROWS);
      if (pagesSeen.length > 0) assert.match(page.text, /id="newest"/);
      assert.equal(link(page.text, 'newer') === undefined, pagesSeen.length === 0, 'Newer on every page but the first');
      seen.push(...ids);
      pagesSeen.push(ids);
      last = page.text;
      path = link(page.text, 'older');
    }
    assert.equal(pagesSeen.length, 3);
    // And back from the last page to the first, through the same pages.
    const back: string[][] = [];
    for (path = link(last, 'newer'); path;) {
      const page = await owner.get(path);
      assert.equal(page.status, 200);
      back.push(idsIn(page.text));
      path = link(page.text, 'newer');
    }
    assert.deepEqual(back, pagesSeen.slice(0, -1).reverse());
    assert.equal(seen.length, 2 * LIST_PAGE_ROWS + 6);
    assert.equal(new Set(seen).size, seen.length, 'no invoice twice');
    assert.deepEqual(seen.slice(0, invoiceIds.length), [...invoiceIds].reverse(), 'newest first');
    assert.equal(seen.at(-1), paid);
    assert.ok(!seen.includes(otherPaid));
    // A filter goes along to the next page.
    const filtered = await owner.get('/dashboard/invoices?status=pending');
    assert.match(filtered.text, /href="\/dashboard\/invoices\?status=pending&amp;after=[^"]+" rel="next"/);
  });

  it('exports the filtered list as the invoices report CSV: its header, the row, nothing of another merchant', async () => {
    const finance = await dashboardClient(svc, merchantId, 'finance@many.example', 'finance');
    const list = await finance.get('/dashboard/invoices?issue=overpaid&chain=ethereum');
    assert.match(list.text, /href="\/dashboard\/invoices\.csv\?issue=overpaid&amp;chain=ethereum" id="export-csv"/);

    const csv = await finance.get('/dashboard/invoices.csv?issue=overpaid&chain=ethereum');
    assert.equal(csv.status, 200, csv.text);
    assert.match(csv.headers.get('content-type')!, /^text\/csv/);
    assert.match(csv.headers.get('content-disposition')!, /attachment; filename="invoices-all-all\.csv"/);
    const [header, ...rows] = parseCsv(csv.text);
    assert.deepEqual(header, [...columnsOf('invoices'), 'metadata.orderId']);
    assert.equal(rows.length, 1);
    const row = Object.fromEntries(header!.map((column, n) => [column, rows[0]![n]]));
    assert.equal(row.invoice_id, paid);
    assert.equal(row.status, 'confirmed');
    assert.equal(row.chain, 'ethereum');
    assert.equal(row.token, 'USDT');
    assert.equal(row.fiat_amount, '100');
    assert.equal(row.total_received_amount, '120.00000000');
    assert.equal(row['metadata.orderId'], 'A-1');

    // All of this merchant's invoices, and only those; a search narrows the export as it does the list.
    const all = parseCsv((await finance.get(`/dashboard/invoices.csv?from=${today()}`)).text).slice(1);
    assert.equal(all.length, 2 * LIST_PAGE_ROWS + 6);
    assert.ok(!all.some((r) => r[0] === otherPaid));
    const searched = parseCsv((await finance.get('/dashboard/invoices.csv?q=A-1')).text).slice(1);
    assert.deepEqual(
      searched.map((r) => r[0]),
      [paid],
    );
    assert.equal((await finance.get('/dashboard/invoices.csv?token=NOPE')).status, 400);
  });

  it('a viewer and support read the lists but may not export; a developer may not read refunds', async () => {
    const viewer = await dashboardClient(svc, merchantId, 'viewer@many.example', 'viewer');
    const support = await dashboardClient(svc, merchantId, 'support@many.example', 'support');
    const developer = await dashboardClient(svc, merchantId, 'dev@many.example', 'developer');
    for (const user of [viewer, support]) {
      const list = await user.get('/dashboard/invoices');
      assert.equal(list.status, 200);
      assert.doesNotMatch(list.text, /id="export-csv"/, 'not offered');
      assert.doesNotMatch((await user.get('/dashboard/refunds')).text, /id="export-csv"/);
      const csv = await user.get('/dashboard/invoices.csv');
      assert.equal(csv.status, 403, 'and refused by the server');
      assert.doesNotMatch(csv.text, /invoice_id/);
      assert.equal((await user.get('/dashboard/refunds.csv')).status, 403);
    }
    assert.equal((await developer.get('/dashboard/invoices')).status, 200);
    assert.equal((await developer.get('/dashboard/refunds')).status, 403);
    assert.equal((await developer.get('/dashboard/invoices.csv')).status, 403);
  });

  it('refunds: status and date filters, paging links, and the refunds report CSV of the filtered list', async () => {
    const finance = await dashboardClient(svc, merchantId, 'finance2@many.example', 'finance');
    const refundIds = (text: string) => [...text.matchAll(/data-refund-id="([0-9a-f-]{36})"/g)].map((m) => m[1]!);
    const all = await finance.get('/dashboard/refunds');
    assert.equal(refundIds(all.text).length, 2);
    assert.ok(!refundIds(all.text).includes(otherRefund));
    assert.doesNotMatch(all.text, /id="older"/);
    assert.deepEqual(refundIds((await finance.get('/dashboard/refunds?status=awaiting_approval')).text), [
      refundWaiting,
    ]);
    assert.deepEqual(refundIds((await finance.get(`/dashboard/refunds?to=${yesterday()}`)).text), []);
    assert.equal(refundIds((await finance.get(`/dashboard/refunds?from=${today()}`)).text).length, 2);
    assert.equal((await finance.get('/dashboard/refunds?status=lost')).status, 400);

    const csv = await finance.get(`/dashboard/refunds.csv?status=awaiting_approval&from=${today()}`);
    assert.equal(csv.status, 200, csv.text);
    const [header, ...rows] = parseCsv(csv.text);
    assert.deepEqual(header, [...columnsOf('refunds'), 'metadata.orderId']);
    assert.equal(rows.length, 1);
    const row = Object.fromEntries(header!.map((column, n) => [column, rows[0]![n]]));
    assert.equal(row.refund_id, refundWaiting);
    assert.equal(row.invoice_id, paid);
    assert.equal(row.status, 'awaiting_approval');
    assert.equal(row.amount, '5.000000');
    assert.equal(row.destination, CUSTOMER);
    assert.equal(row.reason, 'one too many');
    const everything = parseCsv((await finance.get('/dashboard/refunds.csv')).text).slice(1);
    assert.equal(everything.length, 2);
    assert.ok(!everything.some((r) => r[0] === otherRefund));
  });

  it("the Overview shows what arrived per day by chain and token with its value, and the ledger's totals", async () => {
    const owner = await dashboardClient(svc, merchantId, 'owner3@many.example', 'owner');
    const overview = (await owner.get('/dashboard')).text;
    const volume = /<table id="volume">([\s\S]*?)<\/table>/.exec(overview)?.[1];
    assert.ok(volume, overview);
    const cells = (html: string) =>
      [...html.matchAll(/<tr>([\s\S]*?)<\/tr>/g)]
        .slice(1)
        .map((r) => [...r[1]!.matchAll(/<td>([\s\S]*?)<\/td>/g)].map((c) => c[1]!.trim()));
    // Only this merchant's 120 USDT, at the invoice's quote (1 USD the USDT in the fixed table).
    assert.deepEqual(cells(volume), [[today(), 'ethereum', 'USDT', '120.000000', '$120.00']]);
    const totals = /<table id="totals">([\s\S]*?)<\/table>/.exec(overview)?.[1];
    assert.ok(totals);
    assert.deepEqual(cells(totals)[0]?.slice(0, 3), ['ethereum', 'USDT', '120.000000']);
    // The needs-attention list has the overpayment and the refund waiting for approval.
    assert.match(overview, new RegExp(`href="/dashboard/invoices/${paid}">Invoice ${paid.slice(0, 8)}: overpaid<`));
    assert.match(overview, new RegExp(`href="/dashboard/refunds/${refundWaiting}" class="refund-attention"`));

    // A developer reads invoices (the volume) but not settlements (the totals).
    const developer = await dashboardClient(svc, merchantId, 'dev2@many.example', 'developer');
    const seen = (await developer.get('/dashboard')).text;
    assert.match(seen, /id="volume"/);
    assert.doesNotMatch(seen, /id="totals"/);
  });
});

describe('lists and exports agree on a generated history (PGlite, and PostgreSQL when TEST_DATABASE_URL is set)', () => {
  const DAY = 86_400_000;
  const merchantId = randomUUID();
  const history = generateHistory(51, merchantId, 240);
  const other = generateHistory(52, randomUUID(), 60);
  const from = new Date(HISTORY_START + 60 * DAY);
  const to = new Date(HISTORY_START + 240 * DAY);
  const filters: { filter: InvoiceFilter; dated: boolean }[] = [
    { filter: {}, dated: false },
    { filter: { status: 'confirmed' }, dated: true },
    { filter: { status: 'pending' }, dated: false },
    { filter: { issueType: 'late' }, dated: false },
    { filter: { chain: 'ethereum' }, dated: true },
    { filter: { chain: 'tron', token: 'usdt', status: 'confirmed' }, dated: false },
    { filter: { search: 'A-7' }, dated: false },
  ];
  /** The independent fold: which invoices a filter means, from the generated rows alone. */
  const expected = ({ filter, dated }: (typeof filters)[number]) =>
    history.invoices
      .filter(
        (i) =>
          (!filter.status || i.status === filter.status) &&
          (filter.issueType !== 'late' || i.paid_late) &&
          (!filter.chain || i.chain === filter.chain) &&
          (!filter.token || i.token === filter.token.toUpperCase()) &&
          (!filter.search || i.metadata?.orderId === filter.search) &&
          (!dated || (i.created_at >= from && i.created_at < to)),
      )
      .sort((a, b) => a.created_at.getTime() - b.created_at.getTime() || (a.id < b.id ? -1 : 1))
      .map((i) => i.id);

  /** The cursor of a generated invoice. */
  const rowOf = (id: string): Cursor => ({ at: history.invoices.find((i) => i.id === id)!.created_at, id });

  async function check(database: SqlDatabase) {
    const db = database.db as Kysely<ReadModelTables>;
    const engine = database.engine;
    await insertHistory(db, history);
    await insertHistory(db, other);
    for (const f of filters) {
      const want = expected(f);
      assert.ok(f.filter.search || want.length > 3, `${JSON.stringify(f)} picks a few`);
      // The list, newest first, 7 rows a keyset page.
      const listed: string[] = [];
      for (let after: Cursor | undefined, n = 0; n === 0 || after; n++) {
        const { rows, total } = await listInvoices(db, {
          merchantId,
          ...f.filter,
          ...(f.dated && { from, to: new Date(to.getTime() - 1) }),
          limit: 7,
          page: 1,
          after,
        });
        assert.equal(total, want.length);
        listed.push(...rows.map((r) => r.id));
        after = rows.length === 7 ? { at: rows.at(-1)!.created_at, id: rows.at(-1)!.id } : undefined;
      }
      assert.deepEqual(listed, [...want].reverse(), `${engine} list ${JSON.stringify(f)}`);
      // And back, 5 rows a page before the first row of the last page read.
      const backwards: string[] = [];
      for (let before = want[0] && rowOf(want[0]); before;) {
        const { rows } = await listInvoices(db, {
          merchantId,
          ...f.filter,
          ...(f.dated && { from, to: new Date(to.getTime() - 1) }),
          limit: 5,
          page: 1,
          before,
        });
        backwards.unshift(...rows.map((r) => r.id));
        before = rows.length === 5 ? { at: rows[0]!.created_at, id: rows[0]!.id } : undefined;
      }
      assert.deepEqual(backwards, [...want].reverse().slice(0, -1), `${engine} back ${JSON.stringify(f)}`);
      // The export: the invoices report, narrowed the same way, oldest first.
      const scope = { merchantId, from: f.dated ? from : undefined, to: f.dated ? to : undefined, invoices: f.filter };
      let csv = '';
      for await (const chunk of await reportChunks(database, {
        kind: 'invoices',
        format: 'csv',
        scope,
        timeZone: 'UTC',
      }))
        csv += chunk;
      const [header, ...rows] = parseCsv(csv);
      assert.deepEqual(header!.slice(0, columnsOf('invoices').length), [...columnsOf('invoices')]);
      assert.deepEqual(
        rows.map((r) => r[0]),
        want,
        `${engine} export ${JSON.stringify(f)}`,
      );
    }
    // Refunds of one status, between two days: the list and the refunds report.
    const completed = history.refunds
      .filter((r) => r.status === 'completed' && r.created_at >= from && r.created_at < to)
      .sort((a, b) => a.created_at.getTime() - b.created_at.getTime() || (a.id < b.id ? -1 : 1))
      .map((r) => r.id);
    assert.ok(completed.length > 3);
    const { rows: refunds } = await listRefunds(
      db,
      { merchantId, status: 'completed', from, to },
      { limit: 1000, page: 1 },
    );
    assert.deepEqual(
      refunds.map((r) => r.id),
      [...completed].reverse(),
    );
    let csv = '';
    const scope = { merchantId, from, to, refundStatus: 'completed' };
    for await (const chunk of await reportChunks(database, { kind: 'refunds', format: 'csv', scope, timeZone: 'UTC' }))
      csv += chunk;
    assert.deepEqual(
      parseCsv(csv)
        .slice(1)
        .map((r) => r[0]),
      completed,
    );
    // The Overview's volume per day adds up to the ledger's received over the same days.
    const since = new Date(HISTORY_START + 150 * DAY);
    const received = new Map<string, bigint>();
    for (const v of await dailyVolume(db, merchantId, since)) {
      const key = `${v.chain}/${v.token}`;
      const decimals = v.amount.split('.')[1]?.length ?? 0;
      received.set(key, (received.get(key) ?? 0n) + parseUnits(v.amount, decimals)!);
    }
    const ledger = await ledgerOf(db, { merchantId, from: since, to: undefined });
    assert.deepEqual(
      Object.fromEntries(received),
      Object.fromEntries(ledger.filter((r) => r.received > 0n).map((r) => [`${r.chain}/${r.token}`, r.received])),
    );
  }

  it('on PGlite', async () => {
    const database = await openPglite('memory://');
    try {
      await ProjectionEngine.migrate(database, readModelMigrations);
      await check(database);
    } finally {
      await database.close();
    }
  });

  it('on PostgreSQL', async (t) => {
    const fresh = await freshPostgres();
    if (!fresh) return t.skip('TEST_DATABASE_URL is not set or does not answer');
    const database = await fresh.open();
    try {
      await ProjectionEngine.migrate(database, readModelMigrations);
      await check(database);
    } finally {
      await database.close();
      await fresh.drop();
    }
  });
});
