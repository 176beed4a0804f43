// When each API key was last used, for the dashboard's API keys page
// (dashboard.md, Developers: "last used"). Not an event: a use changes no
// decision, and a request must not append to the log. A table of its own,
// written at most once a minute per key and process, so a busy key costs a
// write a minute, not one a request.
import type { Kysely, Migration } from 'kysely';
import type { FastifyBaseLogger } from 'fastify';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { ddl, migrate } from '../adapters/sql/migrate.ts';

interface KeyUsageTables {
  api_key_usage: { key_id: string; last_used_at: Date };
}

/** How stale a key's "last used" may be: one write per key and process in this time. */
const WRITE_EVERY_MS = 60_000;

export const keyUsageMigrations: Record<string, Migration> = {
  '0001_api_key_usage': ddl(
    `create table api_key_usage (
      key_id uuid primary key,
      last_used_at timestamptz not null
    )`,
  ),
};

export async function keyUsage(database: SqlDatabase, log?: FastifyBaseLogger) {
  await migrate(database.db, 'key_usage_migrations', keyUsageMigrations);
  const db = database.db as unknown as Kysely<KeyUsageTables>;
  const writtenAt = new Map<string, number>();

  return {
    /** Notes a use of `keyId` at `at`; never fails the request it is part of. */
    async used(keyId: string, at: Date): Promise<void> {
      const last = writtenAt.get(keyId);
      if (last !== undefined && at.getTime() - last < WRITE_EVERY_MS) return;
      writtenAt.set(keyId, at.getTime());
      try {
        await db
          .insertInto('api_key_usage')
          .values({ key_id: keyId, last_used_at: at })
          .onConflict((oc) =>
            oc
              .column('key_id')
              .doUpdateSet({ last_used_at: at })
              // Another process may have written a later use.
              .where('api_key_usage.last_used_at', '<', at),
          )
          .execute();
      } catch (error) {
        log?.warn({ err: error, keyId }, 'could not note an API key use');
      }
    },

    /** The last noted use of each of `keyIds` that was used. */
    async lastUsed(keyIds: readonly string[]): Promise<Map<string, Date>> {
      if (keyIds.length === 0) return new Map();
      const rows = await db
        .selectFrom('api_key_usage')
        .select(['key_id', 'last_used_at'])
        .where('key_id', 'in', keyIds)
        .execute();
      return new Map(rows.map((r) => [r.key_id, new Date(r.last_used_at)]));
    },
  };
}

export type KeyUsage = Awaited<ReturnType<typeof keyUsage>>;
