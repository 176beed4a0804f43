// What every benchmark suite shares: the scale, the database engines to
// measure (each hands out fresh, throw-away databases) and a timer.
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import pg from 'pg';
import { openPglite, type SqlDatabase, type SqlEngine } from '../../adapters/sql/database.ts';
import { freshPostgres } from '../support/postgres.ts';

/** Used when TEST_DATABASE_URL is not set, if it answers. */
export const FALLBACK_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

/** BENCH_SCALE=0.1 runs every suite at a tenth of its sizes, for a quick check. */
export function benchScale(): number {
  const raw = process.env.BENCH_SCALE;
  if (raw === undefined || raw === '') return 1;
  const scale = Number(raw);
  if (!(scale > 0) || !Number.isFinite(scale)) throw new Error(`BENCH_SCALE must be a positive number, not "${raw}"`);
  return scale;
}

/** `n` times the scale, rounded, at least `min`. */
export function scaled(n: number, min = 1): number {
  return Math.max(min, Math.round(n * benchScale()));
}

export interface FreshDatabase {
  readonly database: SqlDatabase;
  /** `select version()` of this database. */
  readonly version: string;
  /** Closes the connections and, for PostgreSQL, drops the database. */
  dispose(): Promise<void>;
}

export interface BenchTarget {
  readonly engine: SqlEngine;
  readonly label: string;
  /** `select version()`, when the engine is available. */
  readonly version?: string;
  /** Settings that explain the numbers (e.g. synchronous_commit). */
  readonly settings?: string;
  /** Why this engine is not measured ("skipped: …"); undefined when it is. */
  readonly skipped?: string;
  /** A fresh, empty database of this engine. */
  open(): Promise<FreshDatabase>;
}

export interface BenchContext {
  readonly scale: number;
  readonly targets: readonly BenchTarget[];
}

export interface BenchSuite {
  readonly name: string;
  /** Measures and prints its report; throws only when the suite itself cannot run. */
  run(context: BenchContext): Promise<void>;
}

/** Milliseconds taken by `work`. */
export async function timed(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return performance.now() - started;
}

/** Operations per second for `count` operations done by `work`. */
export async function ratePerSecond(count: number, work: () => Promise<unknown>): Promise<number> {
  const ms = await timed(work);
  return (count * 1000) / ms;
}

// Databases still to drop if the run is interrupted (Ctrl-C).
const pending = new Set<() => Promise<void>>();
let interrupted = false;
process.once('SIGINT', () => {
  interrupted = true;
  console.error('\ninterrupted: dropping the benchmark databases');
  void Promise.allSettled([...pending].map((dispose) => dispose())).then(() => process.exit(130));
});

function track(dispose: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | undefined;
  const once = () => (done ??= dispose().finally(() => pending.delete(once)));
  pending.add(once);
  return once;
}

export function wasInterrupted(): boolean {
  return interrupted;
}

async function selectVersion(database: SqlDatabase): Promise<string> {
  const { rows } = await sql<{ version: string }>`select version() as version`.execute(database.db);
  return rows[0]!.version;
}

/**
 * PGlite's version needs a running instance, so one is started up front for
 * the header and handed, still empty, to the first suite that opens one.
 */
async function pgliteTarget(): Promise<BenchTarget & { closeSpare(): Promise<void> }> {
  let spare: SqlDatabase | undefined = await openPglite('memory://');
  const version = await selectVersion(spare);
  const wrap = (database: SqlDatabase): FreshDatabase => ({
    database,
    version,
    dispose: track(() => database.close()),
  });
  return {
    engine: 'pglite',
    label: 'PGlite',
    version,
    settings: 'memory://, one connection',
    async open() {
      const database = spare ?? (await openPglite('memory://'));
      spare = undefined;
      return wrap(database);
    },
    async closeSpare() {
      const unused = spare;
      spare = undefined;
      await unused?.close();
    },
  };
}

/** Shows a URL without its password. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparsable URL)';
  }
}

async function postgresTarget(): Promise<BenchTarget> {
  const fromEnv = process.env.TEST_DATABASE_URL;
  const adminUrl = fromEnv || FALLBACK_POSTGRES_URL;
  const skipped = (reason: string): BenchTarget => ({
    engine: 'postgres',
    label: 'PostgreSQL',
    skipped: `skipped: ${reason}`,
    open: () => Promise.reject(new Error(reason)),
  });
  const admin = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 3000 });
  let version: string;
  let settings: string;
  try {
    await admin.connect();
    version = (await admin.query<{ version: string }>('select version() as version')).rows[0]!.version;
    const { rows } = await admin.query<{ name: string; setting: string }>(
      `select name, setting from pg_settings
        where name in ('synchronous_commit', 'fsync', 'shared_buffers', 'max_connections') order by name`,
    );
    settings = rows.map((r) => `${r.name}=${r.setting}`).join(', ');
  } catch (error) {
    const why = `${redact(adminUrl)} does not answer (${(error as Error).message})`;
    return skipped(fromEnv ? `TEST_DATABASE_URL ${why}` : `TEST_DATABASE_URL is not set and ${why}`);
  } finally {
    await admin.end().catch(() => undefined);
  }
  // freshPostgres() reads the admin URL from the environment.
  if (!fromEnv) process.env.TEST_DATABASE_URL = adminUrl;
  return {
    engine: 'postgres',
    label: 'PostgreSQL',
    version,
    settings: `${fromEnv ? 'TEST_DATABASE_URL' : 'fallback'} ${redact(adminUrl)}; ${settings}`,
    async open() {
      const fresh = await freshPostgres();
      if (!fresh) throw new Error(`could not create a database on ${redact(adminUrl)}`);
      const drop = track(() => fresh.drop());
      let database: SqlDatabase;
      try {
        database = await fresh.open();
      } catch (error) {
        await drop();
        throw error;
      }
      const dispose = track(async () => {
        try {
          await database.close();
        } finally {
          await drop();
        }
      });
      return { database, version: await selectVersion(database), dispose };
    },
  };
}

export interface BenchTargets {
  readonly targets: readonly BenchTarget[];
  /** Closes what the targets hold between suites (e.g. an unused PGlite). */
  close(): Promise<void>;
}

/**
 * The engines to measure: PGlite always; PostgreSQL from TEST_DATABASE_URL or
 * the local fallback, else skipped with the reason.
 */
export async function resolveTargets(): Promise<BenchTargets> {
  const [lite, postgres] = await Promise.all([pgliteTarget(), postgresTarget()]);
  return { targets: [lite, postgres], close: () => lite.closeSpare() };
}

export const count = (n: number) => n.toLocaleString('en-US');
export const formatMs = (ms: number | undefined) =>
  ms === undefined || !Number.isFinite(ms) ? '–' : `${ms.toFixed(ms < 100 ? 1 : 0)} ms`;

export function percentile(values: readonly number[], p: number): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}
export const median = (values: readonly number[]) => percentile(values, 50);

export function progress(label: string, message: string): void {
  console.error(`  [${label}] ${message}`);
}
