// `Idempotency-Key` on every POST (operations.md §3): a retried request with
// the same key and body gets the first response and creates nothing new; the
// same key with another body gets 409. The first request claims the key
// before it runs, so two concurrent retries cannot both run.
import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { v5 as uuidv5 } from 'uuid';
import type { Kysely, Migration } from 'kysely';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { ddl, migrate } from '../adapters/sql/migrate.ts';
import { HttpError } from './errors.ts';

interface IdempotencyTables {
  idempotency_keys: {
    scope: string;
    key: string;
    request_hash: string;
    status_code: number | null;
    response_body: string | null;
    created_at: Date;
  };
}

export const idempotencyMigrations: Record<string, Migration> = {
  '0001_idempotency_keys': ddl(
    `create table idempotency_keys (
      scope text not null,
      key text not null,
      request_hash text not null,
      status_code integer,
      response_body text,
      created_at timestamptz not null,
      constraint idempotency_keys_pk primary key (scope, key)
    )`,
  ),
};

declare module 'fastify' {
  interface FastifyRequest {
    idempotencyClaim?: { scope: string; key: string };
  }
}

const MAX_KEY_LENGTH = 255;
/** UUIDv5 namespace of the ids that follow from an Idempotency-Key. */
const KEYED_ID_NAMESPACE = '3f0c7d8e-5b1a-4c2e-9d7f-6a4b2c1e0f93';

/**
 * The id of the `what` a keyed request creates, following from its scope
 * (the merchant) and key; undefined without a key. A request retried after
 * its reply was lost (applied, then a 5xx) creates the same id again, so
 * it finds what the first one created instead of making a second.
 */
export function keyedId(request: FastifyRequest, what: string): string | undefined {
  const claim = request.idempotencyClaim;
  return claim && uuidv5(`${claim.scope}\n${claim.key}\n${what}`, KEYED_ID_NAMESPACE);
}
const ABANDONED_CLAIM_MS = 60_000;

export async function idempotency(database: SqlDatabase) {
  await migrate(database.db, 'idempotency_migrations', idempotencyMigrations);
  const db = database.db as Kysely<IdempotencyTables>;

  /** Whose keys these are: a merchant's, the operator's, or a public client's. */
  const scopeOf = (request: FastifyRequest) =>
    request.caller
      ? `merchant:${request.caller.merchantId}`
      : /^\/(admin|dev)\//.test(request.url)
        ? 'operator'
        : `client:${request.ip}`;

  async function claim(request: FastifyRequest, reply: FastifyReply) {
    const key = request.headers['idempotency-key'];
    if (request.method !== 'POST' || key === undefined) return;
    if (typeof key !== 'string' || key.length === 0 || key.length > MAX_KEY_LENGTH) {
      throw new HttpError(400, `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} characters`);
    }
    const scope = scopeOf(request);
    const requestHash = createHash('sha256')
      .update(`${request.method} ${request.url}\n${JSON.stringify(request.body ?? null)}`)
      .digest('hex');
    const claimed = await db
      .insertInto('idempotency_keys')
      .values({ scope, key, request_hash: requestHash, status_code: null, response_body: null, created_at: new Date() })
      .onConflict((oc) => oc.columns(['scope', 'key']).doNothing())
      .returning('key')
      .executeTakeFirst();
    if (claimed) {
      request.idempotencyClaim = { scope, key };
      return;
    }
    const first = await db
      .selectFrom('idempotency_keys')
      .selectAll()
      .where('scope', '=', scope)
      .where('key', '=', key)
      .executeTakeFirstOrThrow();
    if (first.request_hash !== requestHash) {
      throw new HttpError(409, 'Idempotency-Key has already been used with a different request');
    }
    if (first.status_code === null) {
      // A claim whose request never finished (the process died) is released after a while.
      if (Date.now() - new Date(first.created_at).getTime() > ABANDONED_CLAIM_MS) {
        await db
          .deleteFrom('idempotency_keys')
          .where('scope', '=', scope)
          .where('key', '=', key)
          .where('status_code', 'is', null)
          .execute();
        return claim(request, reply);
      }
      throw new HttpError(409, 'A request with this Idempotency-Key is still in progress');
    }
    reply.header('Idempotent-Replayed', 'true');
    reply.header('content-type', 'application/json; charset=utf-8');
    return reply.code(first.status_code).send(first.response_body);
  }

  /**
   * Keeps the answer for replays. A failure (5xx) may come after the request
   * wrote something, so its claim is not released at once: it is treated like
   * a request whose process died, and freed for a retry after a minute.
   */
  async function record(request: FastifyRequest, reply: FastifyReply, payload: unknown) {
    const claim = request.idempotencyClaim;
    if (!claim) return payload;
    request.idempotencyClaim = undefined;
    if (reply.statusCode < 500) {
      await db
        .updateTable('idempotency_keys')
        .where('scope', '=', claim.scope)
        .where('key', '=', claim.key)
        .set({ status_code: reply.statusCode, response_body: String(payload) })
        .execute();
    }
    return payload;
  }

  return { claim, record };
}
