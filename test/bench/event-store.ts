// Event-store benchmark: the SQL event store (and a projection rebuild on it)
// beside the same database doing the same writes and reads with plain SQL, in
// the same run, so that the ratio shows what the store's own work costs.
//
// Raw baselines use the same kysely instance (same connection or pool) with
// plain `sql` statements and a table with the event columns but none of the
// store's extra indexes, no stream table and no explicit BEGIN/COMMIT around
// one-statement transactions.
import { randomUUID } from 'node:crypto';
import { sql, type Kysely, type Migration } from 'kysely';
import type { EventStore, ExpectedRevision, NewEvent, RecordedEvent } from '../../adapters/event-store/port.ts';
import { SqlEventStore } from '../../adapters/event-store/sql.ts';
import type { SqlDatabase } from '../../adapters/sql/database.ts';
import { handleCommands } from '../../commands/handle.ts';
import { invoiceDecider, invoiceStreamName } from '../../domain/invoice.ts';
import { ProjectionEngine, type Projector } from '../../adapters/event-store/followers.ts';
import { invoicesProjector } from '../../projections/invoices.ts';
import { merchantsProjector } from '../../projections/merchants.ts';
import { settlementsProjector } from '../../projections/settlements.ts';
import { subscriptionsProjector } from '../../projections/subscriptions.ts';
import { readModelMigrations } from '../../projections/schema.ts';
import { lifeEvents, liveSideBySide, paidInvoiceLife, paymentCommands } from '../support/paid-invoice-life.ts';
import { percentile, scaled, timed, type BenchContext, type BenchSuite, type BenchTarget } from './support.ts';
import { formatMegabytes, formatRate, formatRatio, formatSeconds, markdownTable } from './table.ts';

// Sizes at BENCH_SCALE=1. Each measure alternates store and raw work in
// rounds (store, raw, raw, store, …) so that warm-up (PGlite's WebAssembly
// tiers up for seconds) and drift weigh on both sides alike.
const ROUNDS = 4;
const WARMUP_APPENDS = scaled(200, 10);
const SINGLE_APPENDS = roundUp(scaled(2_000, 20), ROUNDS);
const SINGLE_STREAMS = 50;
const WRITERS = 8;
const CONCURRENT_APPENDS = roundUp(scaled(2_000, 40), WRITERS * ROUNDS);
const STREAMS_PER_WRITER = 10;
const BATCH_SIZE = 100;
const BATCHES = roundUp(scaled(200, 4), ROUNDS);
const BATCH_STREAMS = 20;
const READ_PAGE = 500;
const READ_ROUNDS = 2;
const PROJECTION_BATCH = 500;
/** Payments (an invoice and its address: two events) in the log the invoices read model is rebuilt from. */
const INVOICES = scaled(5_000, 100);
const REBUILD_ROUNDS = 2;
/** Paid invoices in the log every read model is rebuilt from (LIFE_EVENTS events each). */
const LIVES = scaled(1_000, 40);
/** Confirmations a payment waits for in that log (Ethereum's 12): one event per new count. */
const LIFE_CONFIRMATIONS = 12;
const LIFE_EVENTS = lifeEvents({ confirmations: LIFE_CONFIRMATIONS });
/** Lives under way at once, their appends interleaved in the log as the service's are. */
const LIVES_AT_ONCE = 50;
/** Give up on a catch-up that stalls (a bug, not a slow machine). */
const SUBSCRIPTION_TIMEOUT_MS = 120_000;

function roundUp(value: number, multiple: number): number {
  return Math.ceil(value / multiple) * multiple;
}

type MeasureKey =
  'single' | 'concurrent' | 'batch' | 'subscribe' | 'rebuild' | 'rebuildBatched' | 'rebuildInvoices' | 'rebuildLives';

interface Pair {
  store: number;
  raw: number;
}

interface EngineReport {
  target: BenchTarget;
  version?: string;
  results: Partial<Record<MeasureKey, Pair>>;
  /** Events in the log when it was read back and projected. */
  storedEvents?: number;
  error?: string;
  ms?: number;
  rss?: { afterRuns: number; afterClose: number };
  /** Milliseconds per one-event append alone, and until the read model shows it. */
  visible?: { append: number[]; visible: number[] };
}

/**
 * Append → read model visible: one event at a time with a running projection
 * engine, the time until waitFor(position) resolves, beside the append alone
 * (its baseline in the same run). Issue 13's goal: p99 < 50 ms.
 */
async function measureVisibility(database: SqlDatabase, store: EventStore): Promise<EngineReport['visible']> {
  const engine = new ProjectionEngine(database, store, [benchProjector], { batchSize: PROJECTION_BATCH });
  engine.start();
  const append: number[] = [];
  const visible: number[] = [];
  try {
    const stream = `visible-${randomUUID()}`;
    for (let i = 0; i < scaled(300, 50); i++) {
      const started = performance.now();
      const { position } = await store.append(stream, [newEvent()], i === 0 ? 'no_stream' : i - 1);
      append.push(performance.now() - started);
      await engine.waitFor(position, 10_000);
      visible.push(performance.now() - started);
    }
  } finally {
    await engine.stop();
  }
  return { append, visible };
}

const MEASURES: readonly { key: MeasureKey; label: string }[] = [
  { key: 'single', label: `1. one-event appends, 1 writer (${n(SINGLE_APPENDS)} tx)` },
  { key: 'concurrent', label: `2. one-event appends, ${WRITERS} writers (${n(CONCURRENT_APPENDS)} tx)` },
  { key: 'batch', label: `3. events in ${BATCH_SIZE}-event appends (${n(BATCHES)} tx)` },
  { key: 'subscribe', label: `4. subscription catch-up, events (pages of ${READ_PAGE})` },
  {
    key: 'rebuild',
    label: `5. projection rebuild, events (${PROJECTION_BATCH}/tx, one upsert each) vs a row a statement`,
  },
  { key: 'rebuildBatched', label: `5b. same rebuild vs one ${PROJECTION_BATCH}-row upsert/tx` },
  { key: 'rebuildInvoices', label: `6. the invoices read model rebuilt, ${n(INVOICES)} payments' events, vs 5b raw` },
  {
    key: 'rebuildLives',
    label: `7. every read model rebuilt, ${n(LIVES)} paid invoices' lives (${LIFE_EVENTS} events each), vs 5b raw`,
  },
];

function n(value: number): string {
  return value.toLocaleString('en-US');
}

// ---------------------------------------------------------------------------
// Tables: the raw baseline's, and the bench projector's read model.

const RAW_EVENTS = 'bench_raw_events';
const RAW_PROJECTION = 'bench_raw_projection';
const PROJECTION = 'bench_projection';

async function createRawTables(db: Kysely<any>): Promise<void> {
  await sql`
    create table ${sql.table(RAW_EVENTS)} (
      global_position bigint generated always as identity primary key,
      stream_id text not null,
      stream_revision integer not null,
      event_id uuid not null,
      event_type text not null,
      data jsonb not null,
      metadata jsonb not null,
      recorded_at timestamptz not null default now()
    )`.execute(db);
  await createProjectionTable(db, RAW_PROJECTION);
}

async function createProjectionTable(db: Kysely<any>, table: string): Promise<void> {
  await sql`
    create table ${sql.table(table)} (
      event_id uuid primary key,
      stream_id text not null,
      revision integer not null,
      event_type text not null,
      amount text,
      recorded_at timestamptz not null
    )`.execute(db);
}

const benchReadModelMigrations: Record<string, Migration> = {
  '0001_bench_projection': { up: (db) => createProjectionTable(db, PROJECTION) },
};

interface ProjectedRow {
  event_id: string;
  stream_id: string;
  revision: number;
  event_type: string;
  amount: string | null;
  recorded_at: Date;
}

const amountOf = (data: unknown): string | null =>
  typeof data === 'object' && data !== null && 'amount' in data ? String(data.amount) : null;

/** One upserted row per event, as a read model keyed by event would be; a batch in one statement. */
const benchProjector: Projector = {
  name: 'bench_events',
  tables: [PROJECTION],
  async applyBatch(trx, batch) {
    const rows: ProjectedRow[] = batch.map((event) => ({
      event_id: event.id,
      stream_id: event.streamId,
      revision: event.revision,
      event_type: event.type,
      amount: amountOf(event.data),
      recorded_at: event.recordedAt,
    }));
    await trx
      .insertInto(PROJECTION)
      .values(rows)
      .onConflict((oc) =>
        oc.column('event_id').doUpdateSet((eb) => ({
          stream_id: eb.ref('excluded.stream_id'),
          revision: eb.ref('excluded.revision'),
          event_type: eb.ref('excluded.event_type'),
          amount: eb.ref('excluded.amount'),
          recorded_at: eb.ref('excluded.recorded_at'),
        })),
      )
      .execute();
  },
};

// ---------------------------------------------------------------------------
// Events: the same shapes for the store and the raw table.

let sequence = 0;

function newEvent(): NewEvent {
  sequence += 1;
  const invoiceId = randomUUID();
  return {
    id: randomUUID(),
    type: 'PaymentDetected',
    data: {
      invoiceId,
      chain: 'ethereum',
      token: 'USDC',
      amount: `${sequence}.250000`,
      toAddress: '0x9858EfFD232B4033E47d90003D41EC34EcaEda94',
      txHash: `0x${sequence.toString(16).padStart(64, '0')}`,
      blockNumber: 19_000_000 + sequence,
    },
    metadata: { correlationId: invoiceId, causationId: randomUUID() },
  };
}

/** Streams with their exact revisions, so every append states what it expects. */
class Streams {
  private readonly revisions: number[];
  private turn = 0;

  constructor(
    private readonly prefix: string,
    count: number,
  ) {
    this.revisions = Array.from({ length: count }, () => -1);
  }

  /** The next stream in turn, its expected revision, and a way to record the append. */
  next(): { streamId: string; expected: ExpectedRevision; revision: number; advance(by: number): void } {
    const index = this.turn++ % this.revisions.length;
    const current = this.revisions[index]!;
    return {
      streamId: `${this.prefix}-${index}`,
      expected: current === -1 ? 'no_stream' : current,
      revision: current + 1,
      advance: (by) => {
        this.revisions[index] = current + by;
      },
    };
  }
}

async function storeAppends(store: EventStore, streams: Streams, count: number, size = 1): Promise<void> {
  for (let i = 0; i < count; i++) {
    const slot = streams.next();
    const events = Array.from({ length: size }, newEvent);
    const result = await store.append(slot.streamId, events, slot.expected);
    if (!result.written || result.nextRevision !== slot.revision + size - 1) {
      throw new Error(`append to ${slot.streamId} did not write as expected: ${JSON.stringify(result)}`);
    }
    slot.advance(size);
  }
}

function rawRow(streamId: string, revision: number, event: NewEvent) {
  return sql`(${streamId}, ${revision}, ${event.id}, ${event.type}, ${JSON.stringify(event.data)}::jsonb, ${JSON.stringify(event.metadata ?? {})}::jsonb)`;
}

/** One autocommit INSERT per `count`, `size` rows each (multi-VALUES when size > 1). */
async function rawInserts(db: Kysely<any>, streams: Streams, count: number, size = 1): Promise<void> {
  for (let i = 0; i < count; i++) {
    const slot = streams.next();
    const rows = Array.from({ length: size }, (_, j) => rawRow(slot.streamId, slot.revision + j, newEvent()));
    await sql`
      insert into ${sql.table(RAW_EVENTS)} (stream_id, stream_revision, event_id, event_type, data, metadata)
      values ${sql.join(rows)}`.execute(db);
    slot.advance(size);
  }
}

// ---------------------------------------------------------------------------
// The measures.

/**
 * Runs `store` and `raw` `rounds` times each, alternating who goes first
 * (store, raw, raw, store, …); each returns how many operations it did.
 */
async function alternate(
  rounds: number,
  store: (round: number) => Promise<number>,
  raw: (round: number) => Promise<number>,
): Promise<Pair> {
  const total = { store: { ops: 0, ms: 0 }, raw: { ops: 0, ms: 0 } };
  const run = async (side: 'store' | 'raw', round: number) => {
    let ops = 0;
    total[side].ms += await timed(async () => {
      ops = await (side === 'store' ? store : raw)(round);
    });
    total[side].ops += ops;
  };
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? (['store', 'raw'] as const) : (['raw', 'store'] as const);
    for (const side of order) await run(side, round);
  }
  return {
    store: (total.store.ops * 1000) / total.store.ms,
    raw: (total.raw.ops * 1000) / total.raw.ms,
  };
}

async function measureSingle(store: EventStore, db: Kysely<any>): Promise<Pair> {
  const storeStreams = new Streams('single', SINGLE_STREAMS);
  const rawStreams = new Streams('single', SINGLE_STREAMS);
  await storeAppends(store, storeStreams, WARMUP_APPENDS);
  await rawInserts(db, rawStreams, WARMUP_APPENDS);
  const perRound = SINGLE_APPENDS / ROUNDS;
  return alternate(
    ROUNDS,
    async () => (await storeAppends(store, storeStreams, perRound), perRound),
    async () => (await rawInserts(db, rawStreams, perRound), perRound),
  );
}

async function measureConcurrent(store: EventStore, db: Kysely<any>): Promise<Pair> {
  const perWriter = CONCURRENT_APPENDS / WRITERS / ROUNDS;
  const writers = Array.from({ length: WRITERS }, (_, w) => w);
  const storeStreams = writers.map((w) => new Streams(`writer${w}`, STREAMS_PER_WRITER));
  const rawStreams = writers.map((w) => new Streams(`writer${w}`, STREAMS_PER_WRITER));
  return alternate(
    ROUNDS,
    async () => {
      await Promise.all(writers.map((w) => storeAppends(store, storeStreams[w]!, perWriter)));
      return perWriter * WRITERS;
    },
    async () => {
      await Promise.all(writers.map((w) => rawInserts(db, rawStreams[w]!, perWriter)));
      return perWriter * WRITERS;
    },
  );
}

async function measureBatches(store: EventStore, db: Kysely<any>): Promise<Pair> {
  const perRound = BATCHES / ROUNDS;
  const storeStreams = new Streams('batch', BATCH_STREAMS);
  const rawStreams = new Streams('batch', BATCH_STREAMS);
  return alternate(
    ROUNDS,
    async () => (await storeAppends(store, storeStreams, perRound, BATCH_SIZE), perRound * BATCH_SIZE),
    async () => (await rawInserts(db, rawStreams, perRound, BATCH_SIZE), perRound * BATCH_SIZE),
  );
}

/** Time for a new subscription's handler to receive every stored event. */
async function subscriptionCatchUp(store: EventStore, expected: number): Promise<number> {
  let received = 0;
  let last: string | undefined;
  let failure: unknown;
  let subscription: { stop(): Promise<void> } | undefined;
  const ms = await timed(
    () =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`catch-up stalled at ${received} of ${expected} events (${String(failure ?? '')})`)),
          SUBSCRIPTION_TIMEOUT_MS,
        );
        subscription = store.subscribe({
          handler: (event) => {
            if (last !== undefined && store.comparePositions(last, event.position) >= 0) {
              throw new Error(`out of order: ${event.position} after ${last}`);
            }
            last = event.position;
            received += 1;
            if (received === expected) {
              clearTimeout(timer);
              resolve();
            }
          },
          onError: (error) => {
            failure = error;
          },
        });
      }),
  ).finally(() => subscription?.stop());
  return ms;
}

/** Keyset pages over the raw table, like a catch-up reader without the store. */
async function rawPagedRead(db: Kysely<any>, onPage?: (rows: RawEventRow[]) => Promise<void>): Promise<number> {
  let after = '0';
  let total = 0;
  for (;;) {
    const { rows } = await sql<RawEventRow>`
      select global_position, stream_id, stream_revision, event_id, event_type, data, metadata, recorded_at
        from ${sql.table(RAW_EVENTS)}
       where global_position > ${after}::bigint
       order by global_position
       limit ${READ_PAGE}`.execute(db);
    total += rows.length;
    if (rows.length > 0) {
      after = String(rows.at(-1)!.global_position);
      await onPage?.(rows);
    }
    if (rows.length < READ_PAGE) return total;
  }
}

interface RawEventRow {
  global_position: string | number | bigint;
  stream_id: string;
  stream_revision: number;
  event_id: string;
  event_type: string;
  data: unknown;
  metadata: unknown;
  recorded_at: Date | string;
}

async function measureSubscription(store: EventStore, db: Kysely<any>, storedEvents: number): Promise<Pair> {
  return alternate(
    READ_ROUNDS,
    async () => (await subscriptionCatchUp(store, storedEvents), storedEvents),
    () => rawPagedRead(db),
  );
}

async function countRows(db: Kysely<any>, table: string): Promise<number> {
  const { rows } = await sql<{ count: number }>`select count(*)::int as count from ${sql.table(table)}`.execute(db);
  return rows[0]!.count;
}

const upsertColumns = sql`
  on conflict (event_id) do update set
    stream_id = excluded.stream_id, revision = excluded.revision, event_type = excluded.event_type,
    amount = excluded.amount, recorded_at = excluded.recorded_at`;

function rawProjectedRow(r: RawEventRow) {
  return sql`(${r.event_id}, ${r.stream_id}, ${r.stream_revision}, ${r.event_type}, ${amountOf(r.data)}, ${new Date(r.recorded_at)})`;
}

/** The rebuild by hand: read a page, upsert its rows in one transaction, one statement each or one for all. */
async function rawRebuild(db: Kysely<any>, batched: boolean): Promise<number> {
  await sql`delete from ${sql.table(RAW_PROJECTION)}`.execute(db);
  const into = sql`insert into ${sql.table(RAW_PROJECTION)} (event_id, stream_id, revision, event_type, amount, recorded_at)`;
  const events = await rawPagedRead(db, async (rows) => {
    await db.transaction().execute(async (trx) => {
      if (batched) {
        await sql`${into} values ${sql.join(rows.map(rawProjectedRow))} ${upsertColumns}`.execute(trx);
      } else {
        for (const r of rows) await sql`${into} values ${rawProjectedRow(r)} ${upsertColumns}`.execute(trx);
      }
    });
  });
  const projected = await countRows(db, RAW_PROJECTION);
  if (projected !== events) throw new Error(`raw rebuild projected ${projected} rows of ${events} events`);
  return events;
}

async function measureRebuild(
  database: SqlDatabase,
  store: EventStore,
  db: Kysely<any>,
  storedEvents: number,
): Promise<{ rebuild: Pair; rebuildBatched: Pair }> {
  const engine = new ProjectionEngine(database, store, [benchProjector], { batchSize: PROJECTION_BATCH });
  const rebuild = alternate(
    REBUILD_ROUNDS,
    async () => {
      const { events } = await engine.rebuild();
      const projected = await countRows(db, PROJECTION);
      if (events !== storedEvents || projected !== storedEvents) {
        throw new Error(`rebuild applied ${events} events and projected ${projected} rows of ${storedEvents}`);
      }
      return events;
    },
    () => rawRebuild(db, false),
  );
  const perRow = await rebuild;
  const batchedMs = await timed(() => rawRebuild(db, true));
  return { rebuild: perRow, rebuildBatched: { store: perRow.store, raw: (storedEvents * 1000) / batchedMs } };
}

/**
 * The service's invoices projector rebuilding its tables from a log of
 * payments (InvoiceCreated and AddressAssigned, one append per invoice, as
 * the API writes them).
 */
function measureInvoicesRebuild(target: BenchTarget): Promise<number> {
  return rebuildRate(target, [invoicesProjector], INVOICES * 2, async (store) => {
    const merchantId = randomUUID();
    let next = 0;
    await Promise.all(
      Array.from({ length: WRITERS }, async () => {
        for (let i = next++; i < INVOICES; i = next++) {
          const id = randomUUID();
          await handleCommands(store, invoiceDecider, invoiceStreamName(id), paymentCommands(id, merchantId, i), {
            newStream: true,
          });
        }
      }),
    );
  });
}

/**
 * Every read model rebuilt from the log of paid invoices' whole lives, as
 * the service writes them: the invoice and its address, the payment detected
 * and confirmed block by block, the invoice paid and confirmed, the
 * settlement prepared, sent and completed, the invoice settled. Lives run
 * LIVES_AT_ONCE at a time, step by step, so that their appends interleave.
 */
function measureLivesRebuild(target: BenchTarget): Promise<number> {
  const projectors = [merchantsProjector, invoicesProjector, settlementsProjector, subscriptionsProjector];
  return rebuildRate(
    target,
    projectors,
    LIVES * LIFE_EVENTS,
    async (store) => {
      const merchantId = randomUUID();
      for (let first = 0; first < LIVES; first += LIVES_AT_ONCE) {
        const lives = Array.from({ length: Math.min(LIVES_AT_ONCE, LIVES - first) }, (_, i) =>
          paidInvoiceLife(store, merchantId, first + i, { confirmations: LIFE_CONFIRMATIONS }),
        );
        await liveSideBySide(lives, WRITERS);
      }
    },
    async (db) => {
      const [settled] = (
        await sql<{ n: string }>`select count(*) as n from invoices where settled_amount is not null`.execute(db)
      ).rows;
      if (Number(settled!.n) !== LIVES) throw new Error(`the rebuild shows ${settled!.n} settled invoices of ${LIVES}`);
    },
  );
}

/**
 * Events/s of the last of two rebuilds of `projectors` from the log
 * `writeLog` writes (`events` of them), on a database of its own; `check`
 * looks at what the rebuild left.
 */
async function rebuildRate(
  target: BenchTarget,
  projectors: readonly Projector[],
  events: number,
  writeLog: (store: EventStore) => Promise<void>,
  check?: (db: Kysely<any>) => Promise<void>,
): Promise<number> {
  const fresh = await target.open();
  const store = await SqlEventStore.open(fresh.database);
  try {
    await ProjectionEngine.migrate(fresh.database, readModelMigrations);
    await writeLog(store);
    const stored = await store.countAfter(undefined, Number.MAX_SAFE_INTEGER);
    if (stored !== events) throw new Error(`the log holds ${stored} events, not ${events}`);
    const engine = new ProjectionEngine(fresh.database, store, projectors, { batchSize: PROJECTION_BATCH });
    let rate = 0;
    for (let round = 0; round < REBUILD_ROUNDS; round++) {
      const rebuilt = await engine.rebuild();
      if (rebuilt.events !== events) throw new Error(`the rebuild applied ${rebuilt.events} of ${events} events`);
      rate = (events * 1000) / rebuilt.ms;
    }
    await check?.(fresh.database.db);
    return rate;
  } finally {
    await store.close();
    await fresh.dispose();
  }
}

// ---------------------------------------------------------------------------

function progress(target: BenchTarget, message: string): void {
  console.error(`  [${target.label}] ${message}`);
}

async function measureEngine(target: BenchTarget, report: EngineReport): Promise<void> {
  const started = performance.now();
  const fresh = await target.open();
  report.version = fresh.version;
  const { database } = fresh;
  const db = database.db;
  let store: SqlEventStore | undefined;
  try {
    await createRawTables(db);
    await ProjectionEngine.migrate(database, benchReadModelMigrations);
    store = await SqlEventStore.open(database);
    /** Runs one measure (or several measured together) and records its pairs. */
    const step = async (run: () => Promise<Partial<Record<MeasureKey, Pair>>>) => {
      let pairs: Partial<Record<MeasureKey, Pair>> = {};
      const ms = await timed(async () => {
        pairs = await run();
      });
      Object.assign(report.results, pairs);
      const lines = (Object.entries(pairs) as [MeasureKey, Pair][]).map(([key, { store: s, raw }]) => {
        const label = MEASURES.find((m) => m.key === key)!.label;
        return `${label}: store ${formatRate(s)}, raw ${formatRate(raw)}`;
      });
      lines.forEach((line, i) => progress(target, i === lines.length - 1 ? `${line} (${formatSeconds(ms)})` : line));
    };
    const open = store;
    await step(async () => ({ single: await measureSingle(open, db) }));
    await step(async () => ({ concurrent: await measureConcurrent(open, db) }));
    await step(async () => ({ batch: await measureBatches(open, db) }));
    const storedEvents = await open.countAfter(undefined, Number.MAX_SAFE_INTEGER);
    report.storedEvents = storedEvents;
    await step(async () => ({ subscribe: await measureSubscription(open, db, storedEvents) }));
    await step(() => measureRebuild(database, open, db, storedEvents));
    await step(async () => ({
      rebuildInvoices: { store: await measureInvoicesRebuild(target), raw: report.results.rebuildBatched!.raw },
    }));
    await step(async () => ({
      rebuildLives: { store: await measureLivesRebuild(target), raw: report.results.rebuildBatched!.raw },
    }));
    report.visible = await measureVisibility(database, open);
  } finally {
    const afterRuns = process.memoryUsage().rss;
    await store?.close();
    await fresh.dispose();
    report.rss = { afterRuns, afterClose: process.memoryUsage().rss };
    report.ms = performance.now() - started;
  }
}

function printReport(context: BenchContext, reports: readonly EngineReport[]): void {
  const [lite, postgres] = reports;
  const cells = (report: EngineReport | undefined, key: MeasureKey): string[] => {
    if (!report || report.target.skipped) return ['skipped', 'skipped', '–'];
    const pair = report.results[key];
    if (!pair) return report.error ? ['error', 'error', '–'] : ['–', '–', '–'];
    return [formatRate(pair.store), formatRate(pair.raw), formatRatio(pair.store, pair.raw)];
  };
  console.log('\n## Event store (SqlEventStore) vs plain SQL on the same database\n');
  for (const report of reports) {
    const { target } = report;
    if (target.skipped) {
      console.log(`- ${target.label}: ${target.skipped}`);
      continue;
    }
    const events = report.storedEvents === undefined ? '' : `; ${n(report.storedEvents)} events stored`;
    const took = report.ms === undefined ? '' : `; took ${formatSeconds(report.ms)}`;
    console.log(`- ${target.label}: fresh database${events}${took}`);
    if (report.error) console.log(`  - error: ${report.error}`);
  }
  console.log('');
  console.log(
    markdownTable(
      ['measure', 'PGlite store', 'PGlite raw', 'ratio', 'PostgreSQL store', 'PostgreSQL raw', 'ratio'],
      MEASURES.map((m) => [m.label, ...cells(lite, m.key), ...cells(postgres, m.key)]),
    ),
  );
  console.log('\nAppend → read model visible (one event at a time, engine running in process):');
  for (const report of reports) {
    if (!report.visible) continue;
    const ms = (values: number[], p: number) => `${percentile(values, p)!.toFixed(1)} ms`;
    const { append, visible } = report.visible;
    console.log(
      `- ${report.target.label}: visible p50 ${ms(visible, 50)}, p99 ${ms(visible, 99)} (goal p99 < 50 ms); ` +
        `the append alone p50 ${ms(append, 50)}, p99 ${ms(append, 99)}`,
    );
  }
  if (lite?.rss) {
    console.log(
      `\nRSS after the PGlite runs: ${formatMegabytes(lite.rss.afterRuns)} ` +
        `(after closing PGlite: ${formatMegabytes(lite.rss.afterClose)})`,
    );
  }
  console.log(`
Rates are per second; ratio = store ÷ raw (below 1: the store is slower).
- store append = BEGIN; upsert es_streams (stream lock); select stored ids (idempotency, not for a new stream);
  one statement inserting the events, updating es_streams and calling pg_notify (PostgreSQL only); COMMIT.
  A stream's first append (no_stream) is one statement instead; here each stream takes many appends.
  raw = one autocommit INSERT into a table with the same columns and only a primary key.
- 4. store: store.subscribe handler from the start (readAll, ${READ_PAGE}/page, xid8 order);
  raw: select … where global_position > $1 order by global_position limit ${READ_PAGE}.
- 5. store: ProjectionEngine.rebuild(), the projector's applyBatch writing ${PROJECTION_BATCH} events in one
  kysely upsert, + checkpoint per tx; raw: the same pages with one upsert per event in plain SQL, no checkpoint.
  5b: the same store rebuild beside a raw rebuild doing one ${PROJECTION_BATCH}-row upsert statement per tx.
- 6. store: the service's invoices projector rebuilding invoices and invoice_addresses from ${n(INVOICES)} payments
  (InvoiceCreated + AddressAssigned, one append each) on a database of its own; raw: the 5b raw rebuild.
- 7. store: all four projectors rebuilt from ${n(LIVES)} paid invoices' lives, ${LIVES_AT_ONCE} interleaved at a time
  (the invoice, its payment confirmed over ${LIFE_CONFIRMATIONS} blocks, its settlement; ${n(LIVES * LIFE_EVENTS)} events),
  events in the log per second of rebuild; raw: the 5b raw rebuild.
- Scale ${context.scale}; one database per engine; measures 1–3 alternate store and raw in ${ROUNDS} rounds
  (${WARMUP_APPENDS} warm-up appends first), 4 and 5 in ${READ_ROUNDS} and ${REBUILD_ROUNDS}; 5b runs once.`);
}

export const eventStoreSuite: BenchSuite = {
  name: 'event store',
  async run(context) {
    const reports: EngineReport[] = [];
    for (const target of context.targets) {
      const report: EngineReport = { target, results: {} };
      reports.push(report);
      if (target.skipped) {
        console.error(`  [${target.label}] ${target.skipped}`);
        continue;
      }
      try {
        await measureEngine(target, report);
      } catch (error) {
        report.error = error instanceof Error ? error.message : String(error);
        progress(target, `failed: ${report.error}`);
      }
    }
    printReport(context, reports);
    if (reports.some((r) => r.error)) process.exitCode = 1;
  },
};
