// The finance reports over real HTTP (operations.md §3): each kind as CSV and
// NDJSON, its permission, its 400s, one merchant's rows only, metadata
// columns, time zones, formula-safe cells and the ledger identity.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Kysely } from 'kysely';
import pg from 'pg';
import type { ReadModelTables } from '../projections/schema.ts';
import { parseUnits } from '../domain/money.ts';
import { parseCsv } from './support/csv.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { freshPostgres } from './support/postgres.ts';
import { generateHistory, insertHistory, seedInvoices, type History } from './support/report-history.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('reports API', () => {
  let svc: RunningService;
  let key: string;
  let otherKey: string;
  let noReports: string;
  let reportsOnly: string;
  let mine: History;
  let theirs: History;

  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
    const main = await merchantWithKey(svc, { name: 'Main Shop' });
    const other = await merchantWithKey(svc, { name: 'Other Shop' });
    key = main.key;
    otherKey = other.key;
    noReports = (await merchantWithKey(svc, { permissions: ['invoices:read', 'settlements:read'] })).key;
    reportsOnly = (await merchantWithKey(svc, { permissions: ['reports:read'] })).key;
    // The read models as the projectors would have written them for two merchants' histories.
    const db = svc.service.database.db as Kysely<ReadModelTables>;
    mine = generateHistory(11, main.merchant.id, 80);
    theirs = generateHistory(12, other.merchant.id, 40);
    await insertHistory(db, mine);
    await insertHistory(db, theirs);
  });
  after(() => svc.close());

  const get = (path: string, token = key, headers: Record<string, string> = {}) =>
    fetch(svc.url + path, { headers: { authorization: `Bearer ${token}`, ...headers } });
  const csvOf = async (path: string, token = key) => {
    const res = await get(path, token);
    assert.equal(res.status, 200, await res.clone().text());
    assert.match(res.headers.get('content-type')!, /^text\/csv; charset=utf-8/);
    const [header, ...rows] = parseCsv(await res.text());
    return { header: header!, rows, cell: (row: string[], column: string) => row[header!.indexOf(column)]! };
  };
  const ndjsonOf = async (path: string, token = key) => {
    const res = await get(path, token);
    assert.equal(res.status, 200, await res.clone().text());
    assert.match(res.headers.get('content-type')!, /^application\/x-ndjson/);
    const text = await res.text();
    return text === ''
      ? []
      : text
          .trimEnd()
          .split('\n')
          .map((line) => JSON.parse(line));
  };

  const expectedIds = (h: History) => ({
    invoices: h.invoices.map((r) => r.id),
    payments: h.payments.map((r) => r.payment_id),
    settlements: h.settlements.map((r) => r.id),
    refunds: h.refunds.map((r) => r.id),
  });

  it('streams each record kind as CSV and NDJSON, the merchant’s rows only, every one once', async () => {
    const mineIds = expectedIds(mine);
    const theirIds = new Set(Object.values(expectedIds(theirs)).flat());
    for (const kind of ['invoices', 'payments', 'settlements', 'refunds'] as const) {
      const csv = await csvOf(`/api/v1/reports/${kind}`);
      const ndjson = await ndjsonOf(`/api/v1/reports/${kind}?format=ndjson`);
      const idColumn = csv.header[0]!;
      const csvIds = csv.rows.map((r) => r[0]!);
      assert.deepEqual(csvIds.slice().sort(), mineIds[kind].slice().sort(), kind);
      assert.deepEqual(
        ndjson.map((r) => r[idColumn]),
        csvIds,
        `${kind}: NDJSON has the same rows in the same order`,
      );
      assert.ok(!csvIds.some((id) => theirIds.has(id)), `${kind}: no other merchant's row`);
      for (const row of csv.rows) assert.equal(row.length, csv.header.length, `${kind}: every row has every column`);
    }
    // The other merchant sees its own invoices and none of ours.
    const theirInvoices = await csvOf('/api/v1/reports/invoices', otherKey);
    assert.deepEqual(theirInvoices.rows.map((r) => r[0]).sort(), theirs.invoices.map((i) => i.id).sort());
  });

  it('writes the invoices CSV (PostgreSQL writes its lines) with the same cells as its NDJSON (written here)', async () => {
    const path = '/api/v1/reports/invoices?timezone=Asia/Kathmandu';
    const csv = await csvOf(path);
    const ndjson = await ndjsonOf(`${path}&format=ndjson`);
    const raw = await (await get(path)).text();
    assert.ok(raw.endsWith('\r\n') && !/[^\r]\n/.test(raw), 'CRLF line ends only');
    assert.ok(raw.includes(`"'-1.5 discount"`), 'a description that starts with - is made text');
    const shown = (value: string | null | undefined) =>
      value === null || value === undefined ? '' : /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
    assert.equal(csv.rows.length, ndjson.length);
    csv.rows.forEach((row, n) => {
      for (const column of csv.header) {
        const expected = column.startsWith('metadata.')
          ? (ndjson[n].metadata[column.slice('metadata.'.length)] as string | undefined)
          : ndjson[n][column];
        assert.equal(csv.cell(row, column), shown(expected), `row ${n}, ${column}`);
      }
    });
  });

  it('flattens metadata into metadata.<key> columns in CSV and keeps it an object in NDJSON', async () => {
    const csv = await csvOf('/api/v1/reports/invoices');
    assert.deepEqual(
      csv.header.filter((c) => c.startsWith('metadata.')),
      ['metadata.orderId', 'metadata.region'],
    );
    for (const row of csv.rows) {
      const invoice = mine.invoices.find((i) => i.id === row[0])!;
      assert.equal(csv.cell(row, 'metadata.orderId'), (invoice.metadata?.orderId as string | undefined) ?? '');
      assert.equal(csv.cell(row, 'metadata.region'), (invoice.metadata?.region as string | undefined) ?? '');
    }
    const ndjson = await ndjsonOf('/api/v1/reports/invoices?format=ndjson');
    const withRegion = ndjson.find((r) => r.metadata.region);
    assert.ok(withRegion);
    assert.deepEqual(withRegion.metadata, mine.invoices.find((i) => i.id === withRegion.invoice_id)!.metadata);
    // Payments carry their invoice's metadata too.
    const payments = await csvOf('/api/v1/reports/payments');
    assert.ok(payments.header.includes('metadata.orderId'));
  });

  it('gives every fiat value its rate and source, amounts exact in the token’s decimals', async () => {
    const csv = await csvOf('/api/v1/reports/payments');
    const eth = csv.rows.find((r) => csv.cell(r, 'token') === 'ETH')!;
    assert.match(csv.cell(eth, 'amount'), /^\d+\.\d{18}$/);
    assert.equal(csv.cell(eth, 'rate'), '3012.55');
    assert.equal(csv.cell(eth, 'rate_source'), 'kraken+coinbase');
    assert.match(csv.cell(eth, 'fiat_value'), /^\d+\.\d{8}$/);
    assert.equal(csv.cell(eth, 'fiat_currency'), 'USD');
    const units = parseUnits(csv.cell(eth, 'amount'), 18)!;
    const payment = mine.payments.find((p) => p.payment_id === eth[0])!;
    assert.equal(units, BigInt(payment.amount));
    // A wrong-token payment has no quote in its token: no fiat value is made up for it.
    const wrong = csv.rows.find((r) => csv.cell(r, 'wrong_token') === 'true');
    if (wrong) assert.deepEqual([csv.cell(wrong, 'fiat_value'), csv.cell(wrong, 'rate')], ['', '']);
    const settlements = await csvOf('/api/v1/reports/settlements');
    for (const row of settlements.rows) {
      assert.equal(settlements.cell(row, 'rate_source'), 'kraken+coinbase');
      assert.notEqual(settlements.cell(row, 'gross_fiat_value'), '');
    }
  });

  it('writes dates in the requested time zone and filters from (inclusive) to (exclusive)', async () => {
    const berlin = await ndjsonOf('/api/v1/reports/invoices?format=ndjson&timezone=Europe/Berlin');
    for (const row of berlin) assert.match(row.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+0[12]:00$/);
    // The same instant, on Berlin's clock: winter +01:00, summer +02:00.
    for (const row of berlin) {
      const invoice = mine.invoices.find((i) => i.id === row.invoice_id)!;
      assert.equal(new Date(row.created_at).getTime(), invoice.created_at.getTime());
      const summer =
        invoice.created_at >= new Date('2026-03-29T01:00:00Z') && invoice.created_at < new Date('2026-10-25T01:00:00Z');
      assert.ok(row.created_at.endsWith(summer ? '+02:00' : '+01:00'), row.created_at);
    }
    const kathmandu = await ndjsonOf('/api/v1/reports/invoices?format=ndjson&timezone=Asia/Kathmandu');
    for (const row of kathmandu) assert.match(row.created_at, /\+05:45$/);
    const utc = await ndjsonOf('/api/v1/reports/invoices?format=ndjson');
    for (const row of utc) assert.match(row.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$/);
    const sorted = mine.invoices.map((i) => i.created_at.getTime()).sort((a, b) => a - b);
    const from = new Date(sorted[10]!).toISOString();
    const to = new Date(sorted[30]!).toISOString();
    const window = await ndjsonOf(`/api/v1/reports/invoices?format=ndjson&from=${from}&to=${to}`);
    assert.equal(window.length, 20);
    assert.equal(window[0].created_at, from.replace('Z', '+00:00'));
  });

  it('makes formula-like text safe in CSV and leaves it as it is in NDJSON', async () => {
    const res = await get('/api/v1/reports/refunds');
    const text = await res.text();
    assert.ok(mine.refunds.some((r) => r.reason?.startsWith('=')));
    assert.ok(text.includes(`"'=HYPERLINK(""http://evil.example"")"`));
    assert.ok(!/(^|,)"?=/m.test(text), 'no cell begins with =');
    const ndjson = await ndjsonOf('/api/v1/reports/refunds?format=ndjson');
    assert.ok(ndjson.some((r) => r.reason === '=HYPERLINK("http://evil.example")'));
  });

  it('gives a ledger per chain and token that ties out, and fees with where they were paid from', async () => {
    for (const query of ['', '?from=2026-03-01&to=2026-08-01&timezone=Europe/Berlin']) {
      const ledger = await ndjsonOf(`/api/v1/reports/ledger${query}${query ? '&' : '?'}format=ndjson`);
      assert.ok(ledger.length >= 3);
      for (const row of ledger) {
        const decimals = { ETH: 18, USDT: 6, BTC: 8 }[row.token as string]!;
        const u = (column: string) => {
          const text = row[column] as string;
          return text.startsWith('-') ? -parseUnits(text.slice(1), decimals)! : parseUnits(text, decimals)!;
        };
        assert.equal(u('opening') + u('received') - u('settled') - u('refunded') - u('fees'), u('closing'));
      }
    }
    const csv = await csvOf('/api/v1/reports/ledger');
    assert.deepEqual(csv.header, ['chain', 'token', 'opening', 'received', 'settled', 'refunded', 'fees', 'closing']);
    const fees = await csvOf('/api/v1/reports/fees');
    assert.ok(fees.rows.length > 0);
    for (const row of fees.rows) {
      assert.match(fees.cell(row, 'paid_from'), /^(deposit|refund_wallet)$/);
      assert.ok(mine.invoices.some((i) => i.id === fees.cell(row, 'invoice_id')));
    }
  });

  it('answers 401 without a key and 403 without reports:read; reports:read alone is enough', async () => {
    const anonymous = await fetch(`${svc.url}/api/v1/reports/invoices`);
    assert.equal(anonymous.status, 401);
    const forbidden = await get('/api/v1/reports/invoices', noReports);
    assert.equal(forbidden.status, 403);
    assert.equal((await forbidden.json()).error, 'Forbidden');
    assert.equal((await get('/api/v1/reports/ledger', reportsOnly)).status, 200);
    assert.equal((await get('/api/v1/reports/invoices', key, { accept: 'text/csv' })).status, 200);
  });

  it('answers 400 with a clear message for a bad kind, format, time zone or dates', async () => {
    const cases: [string, string][] = [
      [
        '/api/v1/reports/customers',
        'Report kind must be one of invoices, payments, settlements, refunds, fees, ledger',
      ],
      ['/api/v1/reports/invoices?format=xlsx', 'Format must be csv or ndjson'],
      [
        '/api/v1/reports/invoices?timezone=Mars/Olympus',
        'Timezone must be an IANA time zone such as UTC or Europe/Berlin',
      ],
      ['/api/v1/reports/invoices?from=yesterday', 'from must be an ISO 8601 date or date-time'],
      ['/api/v1/reports/invoices?to=2026-02-30', 'to must be an ISO 8601 date or date-time'],
      ['/api/v1/reports/ledger?from=2026-02-01&to=2026-01-01', 'to must be after from'],
      ['/api/v1/reports/ledger?from=2026-02-01&to=2026-02-01', 'to must be after from'],
    ];
    for (const [path, message] of cases) {
      const res = await get(path);
      assert.equal(res.status, 400, path);
      const body = await res.json();
      assert.equal(body.error, 'Bad Request', path);
      assert.equal(body.message, message, path);
    }
  });

  it('names the sources a quote used as the rate source of an invoice quoted through the service', async () => {
    const fresh = await merchantWithKey(svc, { name: 'Fresh Shop' });
    const created = await svc.call('POST', '/api/v1/payments', {
      token: fresh.key,
      body: { amount: '10', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const [row] = await ndjsonOf('/api/v1/reports/invoices?format=ndjson', fresh.key);
    // The development table records itself as the source `fixed` (docs/rates.md).
    assert.equal(row.rate_source, 'fixed');
    assert.equal(row.rate, created.body.data.exchangeRate);
  });
});

describe('reports API on PostgreSQL (COPY)', () => {
  it('holds PostgreSQL back while a client does not read, and frees the connection when it goes away', async (t) => {
    const fresh = await freshPostgres();
    if (!fresh) return t.skip('TEST_DATABASE_URL is not set or does not answer');
    const svc = await startTestService({ RATE_LIMITS: 'off', DATABASE_URL: fresh.url });
    const watcher = new pg.Client({ connectionString: fresh.url });
    try {
      await watcher.connect();
      const { merchant, key } = await merchantWithKey(svc);
      // About 80 MB of CSV, more than every buffer between PostgreSQL and the client.
      await seedInvoices(svc.service.database.db as Kysely<ReadModelTables>, merchant.id, 40_000, {
        descriptionBytes: 2000,
      });
      const path = `${svc.url}/api/v1/reports/invoices`;
      const headers = { authorization: `Bearer ${key}` };
      const copies = async () =>
        (
          await watcher.query<{ wait_event: string | null }>(
            `select wait_event from pg_stat_activity where query like 'copy (%' and pid <> pg_backend_pid()`,
          )
        ).rows;
      // More clients that go away than the service's pool has connections (10).
      for (let n = 0; n < 12; n++) {
        const going = new AbortController();
        const res = await fetch(path, { headers, signal: going.signal });
        assert.equal(res.status, 200);
        const reader = res.body!.getReader();
        assert.ok(!(await reader.read()).done);
        if (n === 0) {
          // The client reads no more: PostgreSQL waits to write to the service,
          // which does not read the report into memory meanwhile.
          await eventually(copies, (rows) => rows.some((r) => r.wait_event === 'ClientWrite'));
        }
        going.abort();
        await reader.cancel().catch(() => undefined);
        // The COPY's connection is closed under it, and PostgreSQL ends it.
        await eventually(copies, (rows) => rows.length === 0);
      }
      // No connection of the pool was kept: a report still streams to its end (the first 100 invoices).
      const [{ to }] = (
        await watcher.query<{ to: Date }>(
          'select created_at as to from invoices order by created_at offset 100 limit 1',
        )
      ).rows as [{ to: Date }];
      const first = await fetch(`${path}?to=${to.toISOString()}`, { headers });
      assert.equal(first.status, 200);
      assert.equal(parseCsv(await first.text()).length, 1 + 100);
    } finally {
      await watcher.end().catch(() => undefined);
      await svc.close();
      await fresh.drop();
    }
  });
});
