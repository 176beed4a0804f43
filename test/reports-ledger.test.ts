// The ledger report ties out: over seeded random histories of payments
// (partial, late, wrong-token, unconfirmed, reorged), settlements and refunds
// (from the deposit and from the refund wallet), for random windows,
// opening + received − settled − refunded − fees = closing per chain and
// token, every column equals an independent fold of the same history, and the
// fees report's deposit rows add up to the ledger's fees.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { sql, type Kysely } from 'kysely';
import { openPglite, type SqlDatabase, type SqlEngine } from '../adapters/sql/database.ts';
import { parseUnits } from '../domain/money.ts';
import { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { columnsOf, invoiceCsvText, ledgerOf, reportPages } from '../projections/reports.ts';
import { readModelMigrations, type ReadModelTables } from '../projections/schema.ts';
import { freshPostgres } from './support/postgres.ts';
import {
  foldLedger,
  generateHistory,
  HISTORY_START,
  insertHistory,
  seededRandom,
  type History,
} from './support/report-history.ts';

const DAY = 86_400_000;

describe('ledger report', () => {
  let database: SqlDatabase;
  let db: Kysely<ReadModelTables>;
  const merchantId = randomUUID();
  const otherMerchant = randomUUID();
  let history: ReturnType<typeof generateHistory>;

  before(async () => {
    database = await openPglite('memory://');
    await ProjectionEngine.migrate(database, readModelMigrations);
    db = database.db as Kysely<ReadModelTables>;
    history = generateHistory(31, merchantId, 400);
    await insertHistory(db, history);
    // Another merchant's money on the same chains must never reach this ledger.
    await insertHistory(db, generateHistory(32, otherMerchant, 100));
  });
  after(() => database.close());

  it('the generated history has every kind of movement the ledger counts', () => {
    const columns = new Set(history.movements.map((m) => m.column));
    assert.deepEqual([...columns].sort(), ['fees', 'received', 'refunded', 'settled']);
    assert.ok(
      history.payments.some((p) => p.wrong_token && p.status === 'confirmed'),
      'a wrong-token payment',
    );
    assert.ok(
      history.invoices.some((i) => i.paid_late),
      'a late payment',
    );
    assert.ok(history.refunds.some((r) => r.status === 'completed' && r.funded_from === 'refund_wallet'));
    assert.ok(history.payments.some((p) => p.status === 'reorged'));
  });

  it('ties out and matches an independent fold, over the whole history and random windows', async () => {
    const rnd = seededRandom(7);
    const windows: [Date | undefined, Date | undefined][] = [[undefined, undefined]];
    for (let i = 0; i < 12; i++) {
      const a = HISTORY_START + rnd.next() * 330 * DAY;
      const b = a + 1 + rnd.next() * 120 * DAY;
      windows.push([new Date(a), new Date(b)]);
    }
    windows.push([new Date(HISTORY_START + 100 * DAY), undefined], [undefined, new Date(HISTORY_START + 200 * DAY)]);
    // A window bounded exactly at a movement's instant: `from` counts it in the window, `to` leaves it out.
    const edge = history.movements[5]!.at;
    windows.push([edge, new Date(edge.getTime() + DAY)], [new Date(edge.getTime() - DAY), edge]);

    for (const [from, to] of windows) {
      const ledger = await ledgerOf(db, { merchantId, from, to });
      const expected = foldLedger(history.movements, from, to);
      assert.deepEqual(
        ledger.map((r) => `${r.chain}/${r.token}`).sort(),
        [...expected.keys()].sort(),
        'one row per chain and token that moved',
      );
      for (const row of ledger) {
        const { decimals: _, chain, token, ...columns } = row;
        assert.equal(
          row.opening + row.received - row.settled - row.refunded - row.fees,
          row.closing,
          `identity for ${chain}/${token} in ${from?.toISOString()}..${to?.toISOString()}`,
        );
        assert.deepEqual(columns, expected.get(`${chain}/${token}`), `columns of ${chain}/${token}`);
      }
    }
  });

  it("the fees report's deposit rows add up to the ledger's fees", async () => {
    const scope = { merchantId, from: new Date(HISTORY_START + 30 * DAY), to: new Date(HISTORY_START + 250 * DAY) };
    const columns = columnsOf('fees');
    const at = (name: string) => columns.indexOf(name);
    const sums = new Map<string, bigint>();
    const decimals: Record<string, number> = { ETH: 18, USDT: 6, BTC: 8 };
    for await (const page of reportPages(db, 'fees', scope, 'UTC', { pageRows: 7 })) {
      for (const { cells } of page) {
        if (cells[at('paid_from')] !== 'deposit') continue;
        const key = `${cells[at('chain')]}/${cells[at('token')]}`;
        const units = parseUnits(cells[at('amount')]!, decimals[cells[at('token')]!]!)!;
        sums.set(key, (sums.get(key) ?? 0n) + units);
      }
    }
    const ledger = await ledgerOf(db, scope);
    assert.ok(ledger.some((r) => r.fees > 0n));
    for (const row of ledger) assert.equal(sums.get(`${row.chain}/${row.token}`) ?? 0n, row.fees, row.token);
  });

  it('pages through every row exactly once, in time order, whatever the page size', async () => {
    await assertPagesThroughEveryRow(db, 'pglite', history);
  });
});

describe('report paging on PostgreSQL (a cursor in one transaction)', () => {
  it('reads every row exactly once, in time order, whatever the page size, and stops cleanly', async (t) => {
    const fresh = await freshPostgres();
    if (!fresh) return t.skip('TEST_DATABASE_URL is not set or does not answer');
    const database = await fresh.open();
    try {
      await ProjectionEngine.migrate(database, readModelMigrations);
      const db = database.db as Kysely<ReadModelTables>;
      const merchantId = randomUUID();
      const history = generateHistory(41, merchantId, 150);
      await insertHistory(db, history);
      await assertPagesThroughEveryRow(db, 'postgres', history);
      // The invoices CSV PostgreSQL writes is the same byte for byte through COPY as through keyset pages,
      // a metadata key that needs escaping as a literal (COPY takes no parameters) included.
      const oddKey = `it's \\ "odd"`;
      await sql`update invoices set metadata = coalesce(metadata, '{}') || jsonb_build_object(${oddKey}::text, 'x')
        where id = ${history.invoices[0]!.id}`.execute(db);
      const scope = { merchantId, from: undefined, to: undefined };
      const csvThrough = async (copy: SqlDatabase['copyText']) => {
        const chunks: Buffer[] = [];
        for await (const page of invoiceCsvText(db, scope, 'Europe/Berlin', ['orderId', 'region', oddKey], {
          copy,
          pageRows: 9,
        })) {
          chunks.push(Buffer.from(page));
        }
        return Buffer.concat(chunks).toString();
      };
      const copied = await csvThrough(database.copyText);
      assert.equal(copied.split('\r\n').length - 1, history.invoices.length);
      assert.ok(copied.includes(`${history.invoices[0]!.id}"`) && copied.includes(',"x"\r\n'));
      assert.equal(copied, await csvThrough(undefined));
      // A reader that stops after the first page leaves no transaction or connection behind.
      for (let i = 0; i < 15; i++) {
        for await (const page of reportPages(db, 'payments', { merchantId, from: undefined, to: undefined }, 'UTC', {
          engine: 'postgres',
          pageRows: 3,
        })) {
          assert.equal(page.length, 3);
          break;
        }
      }
      const ledger = await ledgerOf(db, { merchantId, from: undefined, to: undefined });
      assert.deepEqual(
        ledger.map((r) => r.closing),
        [...foldLedger(history.movements, undefined, undefined).entries()]
          .sort(([a], [b]) => (a < b ? -1 : 1))
          .map(([, row]) => row.closing),
      );
    } finally {
      await database.close();
      await fresh.drop();
    }
  });
});

async function assertPagesThroughEveryRow(db: Kysely<ReadModelTables>, engine: SqlEngine, history: History) {
  const merchantId = history.invoices[0]!.merchant_id;
  for (const pageRows of [1, 7, 5000]) {
    const ids: string[] = [];
    const scope = { merchantId, from: undefined, to: undefined };
    for await (const page of reportPages(db, 'payments', scope, 'UTC', { engine, pageRows })) {
      ids.push(...page.map((r) => r.cells[0]!));
    }
    const expected = history.payments
      .slice()
      .sort((a, b) => a.detected_at.getTime() - b.detected_at.getTime() || (a.payment_id < b.payment_id ? -1 : 1))
      .map((p) => p.payment_id);
    assert.deepEqual(ids, expected, `${engine}, page size ${pageRows}`);
  }
}
