// The finance report of a large merchant (issue 31): 1,000,000 invoices (each
// with its quote and metadata) streamed as CSV from PostgreSQL into a sink,
// with rows/s and the process's RSS before, at its peak while streaming, and
// after; beside PostgreSQL's own COPY of the same rows and columns to CSV
// (psql, written to /dev/null) in the same run. Goal: ≥ 50,000 rows/s, flat
// memory.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { pipeline } from 'node:stream/promises';
import { sql, type Kysely } from 'kysely';
import { reportStream } from '../../api/report-stream.ts';
import { ProjectionEngine } from '../../adapters/event-store/followers.ts';
import { readModelMigrations, type ReadModelTables } from '../../projections/schema.ts';
import { seedInvoices } from '../support/report-history.ts';
import { count, progress, scaled, type BenchSuite } from './support.ts';
import { formatMegabytes, formatRate, formatRatio, markdownTable } from './table.ts';

/** Samples this process's RSS every 20 ms while `work` runs; the peak and the time taken. */
async function sampledRss(work: () => Promise<unknown>) {
  let peak = process.memoryUsage().rss;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
  const started = performance.now();
  try {
    await work();
  } finally {
    clearInterval(timer);
  }
  return { ms: performance.now() - started, peak: Math.max(peak, process.memoryUsage().rss) };
}

/**
 * A sink that counts the bytes and lines it was given, keeps none of them,
 * and notes the RSS as each quarter of `expected` lines goes by: flat memory
 * is the same RSS at a quarter and at the end, not only a bounded peak.
 */
function countingSink(expected: number) {
  const counted = { bytes: 0, lines: 0, rssAtQuarters: [] as number[] };
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      counted.bytes += chunk.length;
      for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) counted.lines++;
      if (counted.lines >= ((counted.rssAtQuarters.length + 1) * expected) / 4) {
        counted.rssAtQuarters.push(process.memoryUsage().rss);
      }
      done();
    },
  });
  return { sink, counted };
}

/** The heap in use once garbage is collected: what the process really holds. */
function heapHeld(): number {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
  return process.memoryUsage().heapUsed;
}

/** psql's \copy of the same columns to /dev/null: PostgreSQL's own CSV, the floor of what a report can cost. */
function copyBaseline(url: string, merchantId: string): Promise<void> {
  const query = `copy (select i.id, i.created_at, i.status, i.cancelled, i.amount, i.currency, i.chain, i.token,
      i.crypto_amount, q.rate, q.quoted_at, i.payment_status, i.paid_late, i.total_received_amount,
      i.total_received_currency, i.settled_amount, i.refund_status, i.description, i.subscriber_id, i.expires_at,
      i.updated_at, i.metadata->>'orderId', i.metadata->>'region'
    from invoices i left join invoice_addresses q on q.invoice_id = i.id and q.chain = i.chain and q.token = i.token
    where i.merchant_id = '${merchantId}' order by i.created_at, i.id) to stdout with (format csv, header)`;
  return new Promise((resolve, reject) => {
    const child = spawn('psql', [url, '-v', 'ON_ERROR_STOP=1', '-q', '-c', query], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let errors = '';
    child.stderr.on('data', (d) => (errors += d));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`psql exited ${code}: ${errors}`))));
  });
}

export const reportsSuite: BenchSuite = {
  name: 'reports',
  async run({ targets }) {
    console.log('\n## Reports: the invoices report of one merchant as CSV\n');
    const postgres = targets.find((t) => t.engine === 'postgres')!;
    if (postgres.skipped) {
      console.log(`PostgreSQL ${postgres.skipped}; the goal is stated for PostgreSQL, so nothing is measured.`);
      return;
    }
    const rows = scaled(1_000_000, 1000);
    const fresh = await postgres.open();
    try {
      const db = fresh.database.db as Kysely<ReadModelTables>;
      await ProjectionEngine.migrate(fresh.database, readModelMigrations);
      const merchantId = randomUUID();
      progress('reports', `writing ${count(rows)} invoices and their quotes`);
      await seedInvoices(db, merchantId, rows);

      // psql connects to this bench's database: the admin URL with its name.
      const name = (await sql<{ name: string }>`select current_database() as name`.execute(db)).rows[0]!.name;
      const benchUrl = new URL(process.env.TEST_DATABASE_URL!);
      benchUrl.pathname = `/${name}`;

      progress('reports', 'COPY baseline');
      const copy = await sampledRss(() => copyBaseline(benchUrl.toString(), merchantId));

      const heapBefore = heapHeld();
      const before = process.memoryUsage().rss;
      progress('reports', 'streaming the report');
      const { sink, counted } = countingSink(rows);
      const report = await sampledRss(async () =>
        pipeline(
          await reportStream(fresh.database, {
            kind: 'invoices',
            format: 'csv',
            timeZone: 'Europe/Berlin',
            scope: { merchantId, from: undefined, to: undefined },
          }),
          sink,
        ),
      );
      const afterRss = process.memoryUsage().rss;
      const heapAfter = heapHeld();
      if (counted.lines !== rows + 1) throw new Error(`the report wrote ${counted.lines} lines for ${rows} invoices`);
      const perSecond = (rows * 1000) / report.ms;
      const copyPerSecond = (rows * 1000) / copy.ms;
      console.log(
        markdownTable(
          ['What', 'Rows/s', 'Time', 'RSS before', 'RSS peak while streaming', 'RSS after', 'Bytes'],
          [
            [
              `invoices report, CSV, Europe/Berlin dates, ${count(rows)} rows (2 metadata columns)`,
              formatRate(perSecond),
              `${(report.ms / 1000).toFixed(1)} s`,
              formatMegabytes(before),
              formatMegabytes(report.peak),
              formatMegabytes(afterRss),
              formatMegabytes(counted.bytes),
            ],
            [
              "baseline: PostgreSQL's COPY of the same rows to CSV (psql \\copy to /dev/null)",
              formatRate(copyPerSecond),
              `${(copy.ms / 1000).toFixed(1)} s`,
              '',
              '',
              '',
              '',
            ],
          ],
        ),
      );
      console.log(
        `\nRSS at each quarter of the rows: ${counted.rssAtQuarters.map(formatMegabytes).join(', ')}; ` +
          `heap in use after a full GC: ${formatMegabytes(heapBefore)} before, ${formatMegabytes(heapAfter)} after`,
      );
      console.log(
        `ratio report / COPY: ${formatRatio(perSecond, copyPerSecond)}; goal ≥ 50,000 rows/s: ${perSecond >= 50_000 ? 'met' : 'NOT met'}`,
      );
    } finally {
      await fresh.dispose();
    }
  },
};
