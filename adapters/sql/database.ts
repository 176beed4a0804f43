// One SQL database per process, shared by the event store and the read models:
// embedded PGlite (the default, one connection) or PostgreSQL through a pool.
import type { Readable } from 'node:stream';
import { CompiledQuery, Kysely, PostgresDialect, type Compilable } from 'kysely';
import pg from 'pg';
import { copyTextOut } from './copy-out.ts';

export type SqlEngine = 'pglite' | 'postgres';

/** A session-level advisory lock held until released, or until its session is lost. */
export interface AdvisoryLock {
  readonly lost: AbortSignal;
  release(): Promise<void>;
}

export interface SqlDatabase {
  readonly engine: SqlEngine;
  // Each module narrows this to its own tables (`as Kysely<TheirTables>`).
  readonly db: Kysely<any>;
  /** LISTEN on a channel, each notification's payload to `onNotify`; the returned function stops listening. */
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  /**
   * Runs `work` while holding a session-level advisory lock, if it can be taken
   * now; returns false without running it otherwise. The lock lives on a
   * connection of its own, so it holds for as long as `work` runs.
   */
  withAdvisoryLock(key: string, work: (signal: AbortSignal) => Promise<void>): Promise<boolean>;
  /**
   * Takes the session-level advisory lock `key` if it can be taken now, and
   * keeps it until `release()`; undefined when another session holds it.
   * `lost` aborts when the lock's session ended, or stopped answering: then
   * at least 15 s before PostgreSQL lets another session take the lock (see
   * LOCK_SESSION), so a holder that checks it before each step has stopped
   * by then, but for a step already under way.
   */
  tryAdvisoryLock(key: string): Promise<AdvisoryLock | undefined>;
  /**
   * Who holds the advisory lock `key` now, in words (on PostgreSQL the
   * holder's application_name, which names a service instance, and its
   * backend pid), or undefined when nobody does.
   */
  advisoryLockHolder(key: string): Promise<string | undefined>;
  /**
   * A query of fixed text that PostgreSQL parses and plans once per
   * connection (a named prepared statement) instead of on every call: for
   * the few hot reads, such as the public status, where planning the join
   * cost the server three times what running it did (pgbench: 8,600 calls/s
   * planned each time, 44,000/s prepared). The query is built and compiled
   * once too, on the first call, from `build` given a placeholder for its
   * one parameter; later calls bind `value` in its place (building the
   * status query with kysely on every call was a sixth of that route's CPU).
   * `name` must always come with the same `build`. On PGlite, an ordinary
   * query.
   */
  prepared<Row>(name: string, build: (parameter: string) => Compilable<Row>, value: string): Promise<Row[]>;
  /**
   * PostgreSQL only (PGlite's COPY writes a whole file before it returns):
   * the text of each row of `query`, whose rows are one text column, back to
   * back as a byte stream read as it is consumed, in a transaction of its own
   * after `settings` (adapters/sql/copy-out.ts).
   */
  copyText?(query: CompiledQuery, settings: Readonly<Record<string, string>>): Readable;
  close(): Promise<void>;
}

/** `memory://` keeps everything in memory; anything else is a directory. */
export async function openPglite(dataDir: string): Promise<SqlDatabase> {
  // Loaded only when used: PGlite's WebAssembly Postgres is ~45 MB resident.
  const [{ PGlite }, { PGliteDialect }] = await Promise.all([
    import('@electric-sql/pglite'),
    import('kysely-pglite-dialect'),
  ]);
  const pglite = await PGlite.create(dataDir === 'memory://' ? undefined : dataDir);
  const db = new Kysely<any>({ dialect: new PGliteDialect(pglite) });
  const statements = new CompiledStatements();
  return {
    engine: 'pglite',
    db,
    async listen(channel, onNotify) {
      const unlisten = await pglite.listen(channel, onNotify);
      return unlisten;
    },
    // One process owns an embedded database, so the lock is only a guard
    // against the same projector being started twice in this process.
    ...inProcessLock(),
    async prepared<Row>(name: string, build: (parameter: string) => Compilable<Row>, value: string) {
      const { sql, values } = statements.bind(name, build, value);
      return (await db.executeQuery(CompiledQuery.raw(sql, values) as CompiledQuery<Row>)).rows;
    },
    async close() {
      await db.destroy();
    },
  };
}

export interface PostgresOptions {
  poolSize?: number;
  /**
   * Names this process on each of its connections (pg_stat_activity), so
   * that another process can tell who holds a lock; PostgreSQL keeps 63 bytes.
   */
  applicationName?: string;
}

export async function openPostgres(
  url: string,
  { poolSize = 10, applicationName }: PostgresOptions = {},
): Promise<SqlDatabase> {
  const connection = { connectionString: url, ...(applicationName && { application_name: applicationName }) };
  const pool = new pg.Pool({ ...connection, max: poolSize });
  pool.on('error', () => {
    // An idle client lost its connection; the pool replaces it on next use.
  });
  // A client in use that loses its connection fails its query, and pg emits
  // 'error' on it too, which nothing would catch (a crash); the pool drops it
  // when it is released, being no longer queryable.
  pool.on('connect', (client) => void client.on('error', () => undefined));
  const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) });
  const listeners = new Set<pg.Client>();
  const statements = new CompiledStatements();
  /** On a session of its own, so that the lock holds for as long as that session lives. */
  const tryAdvisoryLock = async (key: string): Promise<AdvisoryLock | undefined> => {
    const client = new pg.Client({ ...connection, ...LOCK_SESSION.client });
    const lost = new AbortController();
    client.on('error', () => lost.abort());
    let heartbeat: NodeJS.Timeout | undefined;
    const release = async () => {
      clearInterval(heartbeat);
      lost.abort();
      // Ending the session releases the lock.
      await client.end().catch(() => undefined);
    };
    try {
      await client.connect();
      await client.query(LOCK_SESSION.server);
      const { rows } = await client.query('select pg_try_advisory_lock(hashtextextended($1, 0)) as locked', [key]);
      if (!rows[0]?.locked) {
        await release();
        return undefined;
      }
    } catch (error) {
      await release();
      throw error;
    }
    // A session that stops answering counts as lost at once: PostgreSQL ends
    // it, and frees the lock for another, only once its keepalives fail, later.
    heartbeat = setInterval(() => {
      const late = setTimeout(() => void release(), LOCK_SESSION.answerWithinMs).unref();
      client.query('select 1').then(
        () => clearTimeout(late),
        () => void release(),
      );
    }, LOCK_SESSION.heartbeatMs);
    heartbeat.unref();
    return { lost: lost.signal, release };
  };
  return {
    engine: 'postgres',
    db,
    async listen(channel, onNotify) {
      let client: pg.Client | undefined;
      let closed = false;
      const connect = async () => {
        if (closed) return;
        const next = new pg.Client(connection);
        next.on('notification', (message) => onNotify(message.payload ?? ''));
        next.on('error', () => {
          listeners.delete(next);
          next.end().catch(() => undefined);
          // Notifications are only a wake-up: pollers still run while we reconnect.
          setTimeout(() => void connect().catch(() => undefined), 1000).unref();
        });
        await next.connect();
        await next.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
        client = next;
        listeners.add(next);
      };
      await connect();
      return async () => {
        closed = true;
        if (client) {
          listeners.delete(client);
          await client.end().catch(() => undefined);
        }
      };
    },
    tryAdvisoryLock,
    withAdvisoryLock: (key, work) => holdingLock(tryAdvisoryLock, key, work),
    async advisoryLockHolder(key) {
      // pg_locks shows a one-bigint advisory lock as its high and low 32 bits.
      const { rows } = await pool.query<{ application_name: string; pid: number; client_addr: string | null }>(
        `select a.application_name, a.pid, host(a.client_addr) as client_addr
           from pg_locks l join pg_stat_activity a on a.pid = l.pid
          where l.locktype = 'advisory' and l.granted and l.objsubid = 1
            and l.database = (select oid from pg_database where datname = current_database())
            and l.classid::bigint = (hashtextextended($1, 0) >> 32) & 4294967295
            and l.objid::bigint = hashtextextended($1, 0) & 4294967295`,
        [key],
      );
      const holder = rows[0];
      if (!holder) return undefined;
      const from = holder.client_addr ? ` from ${holder.client_addr}` : '';
      return `${holder.application_name || 'a client without an application_name'} (PostgreSQL backend ${holder.pid}${from})`;
    },
    async prepared(name, build, value) {
      const { sql, values } = statements.bind(name, build, value);
      return (await pool.query({ name, text: sql, values })).rows;
    },
    copyText: (query, settings) => copyTextOut(pool, query, settings),
    async close() {
      await Promise.all([...listeners].map((c) => c.end().catch(() => undefined)));
      await db.destroy();
    },
  };
}

/** Stands for a prepared query's parameter while it is compiled; no caller's value looks like it. */
const PLACEHOLDER = '\u0000prepared-parameter\u0000';

/** Each prepared query's SQL and parameters, compiled once by name, and where its parameter goes. */
class CompiledStatements {
  readonly #byName = new Map<string, { sql: string; parameters: readonly unknown[]; slot: number }>();

  bind(name: string, build: (parameter: string) => Compilable<unknown>, value: string) {
    let statement = this.#byName.get(name);
    if (!statement) {
      const { sql, parameters } = build(PLACEHOLDER).compile();
      const slot = parameters.indexOf(PLACEHOLDER);
      if (slot === -1 || parameters.lastIndexOf(PLACEHOLDER) !== slot) {
        throw new Error(`prepared query ${name} must use its parameter exactly once`);
      }
      statement = { sql, parameters, slot };
      this.#byName.set(name, statement);
    }
    const values = [...statement.parameters];
    values[statement.slot] = value;
    return { sql: statement.sql, values };
  }
}

function inProcessLock(): Pick<SqlDatabase, 'withAdvisoryLock' | 'tryAdvisoryLock' | 'advisoryLockHolder'> {
  const held = new Set<string>();
  const tryAdvisoryLock = async (key: string): Promise<AdvisoryLock | undefined> => {
    if (held.has(key)) return undefined;
    held.add(key);
    const lost = new AbortController();
    return {
      lost: lost.signal,
      async release() {
        if (lost.signal.aborted) return;
        lost.abort();
        held.delete(key);
      },
    };
  };
  return {
    tryAdvisoryLock,
    withAdvisoryLock: (key, work) => holdingLock(tryAdvisoryLock, key, work),
    advisoryLockHolder: async (key) => (held.has(key) ? `this process (${process.pid})` : undefined),
  };
}

/** Runs `work` holding the lock `key`, if it can be taken now; false otherwise. */
async function holdingLock(
  take: (key: string) => Promise<AdvisoryLock | undefined>,
  key: string,
  work: (lost: AbortSignal) => Promise<void>,
): Promise<boolean> {
  const lock = await take(key);
  if (!lock) return false;
  try {
    await work(lock.lost);
    return true;
  } finally {
    await lock.release();
  }
}

/**
 * The advisory lock's session. PostgreSQL frees a session's locks when the
 * session ends: at once when its process exits (the socket closes), and for
 * a holder cut off without a word (a network cut, a frozen machine) when the
 * server's keepalives fail: no answer for 10 s, then 3 probes 5 s apart, so
 * 25 s after the last word from it at the earliest. The holder asks for a
 * word every 5 s and counts the lock lost when none comes within 5 s: it
 * stops at most 10 s after the last word, 15 s before another can take over.
 */
const LOCK_SESSION = {
  client: { keepAlive: true, keepAliveInitialDelayMillis: 10_000 },
  server: 'set tcp_keepalives_idle = 10; set tcp_keepalives_interval = 5; set tcp_keepalives_count = 3',
  heartbeatMs: 5_000,
  answerWithinMs: 5_000,
};
