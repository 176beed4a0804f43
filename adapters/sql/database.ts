// One SQL database per process, shared by the event store and the read models:
// embedded PGlite (the default, one connection) or PostgreSQL through a pool.
import { Kysely, PostgresDialect, type Compilable } from 'kysely';
import pg from 'pg';

export type SqlEngine = 'pglite' | 'postgres';

export interface SqlDatabase {
  readonly engine: SqlEngine;
  // Each module narrows this to its own tables (`as Kysely<TheirTables>`).
  readonly db: Kysely<any>;
  /** LISTEN on a channel; the returned function stops listening. */
  listen(channel: string, onNotify: () => void): Promise<() => Promise<void>>;
  /**
   * Runs `work` while holding a session-level advisory lock, if it can be taken
   * now; returns false without running it otherwise. The lock lives on a
   * connection of its own, so it holds for as long as `work` runs.
   */
  withAdvisoryLock(key: string, work: (signal: AbortSignal) => Promise<void>): Promise<boolean>;
  /**
   * A query of fixed text that PostgreSQL parses and plans once per
   * connection (a named prepared statement) instead of on every call: for
   * the few hot reads, such as the public status, where planning the join
   * cost the server three times what running it did (pgbench: 8,600 calls/s
   * planned each time, 44,000/s prepared). `name` must always come with the
   * same text. On PGlite, an ordinary query.
   */
  prepared<Row>(name: string, query: Compilable<Row>): Promise<Row[]>;
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
  return {
    engine: 'pglite',
    db,
    async listen(channel, onNotify) {
      const unlisten = await pglite.listen(channel, onNotify);
      return unlisten;
    },
    // One process owns an embedded database, so the lock is only a guard
    // against the same projector being started twice in this process.
    withAdvisoryLock: inProcessLock(),
    async prepared(_name, query) {
      return (await db.executeQuery(query.compile())).rows;
    },
    async close() {
      await db.destroy();
    },
  };
}

export async function openPostgres(url: string, poolSize = 10): Promise<SqlDatabase> {
  const pool = new pg.Pool({ connectionString: url, max: poolSize });
  pool.on('error', () => {
    // An idle client lost its connection; the pool replaces it on next use.
  });
  const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) });
  const listeners = new Set<pg.Client>();
  return {
    engine: 'postgres',
    db,
    async listen(channel, onNotify) {
      let client: pg.Client | undefined;
      let closed = false;
      const connect = async () => {
        if (closed) return;
        const next = new pg.Client({ connectionString: url });
        next.on('notification', onNotify);
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
    async withAdvisoryLock(key, work) {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      const controller = new AbortController();
      client.on('error', () => controller.abort());
      try {
        const { rows } = await client.query('select pg_try_advisory_lock(hashtextextended($1, 0)) as locked', [key]);
        if (!rows[0]?.locked) return false;
        await work(controller.signal);
        return true;
      } finally {
        // Ending the session releases the lock.
        await client.end().catch(() => undefined);
      }
    },
    async prepared(name, query) {
      const { sql, parameters } = query.compile();
      return (await pool.query({ name, text: sql, values: [...parameters] })).rows;
    },
    async close() {
      await Promise.all([...listeners].map((c) => c.end().catch(() => undefined)));
      await db.destroy();
    },
  };
}

function inProcessLock(): SqlDatabase['withAdvisoryLock'] {
  const held = new Set<string>();
  return async (key, work) => {
    if (held.has(key)) return false;
    held.add(key);
    try {
      await work(new AbortController().signal);
      return true;
    } finally {
      held.delete(key);
    }
  };
}
