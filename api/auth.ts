// Who is calling: a merchant's API key or the operator's admin token.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Kysely } from 'kysely';
import { hashApiKey } from '../adapters/secrets.ts';
import type { KeyUsage } from './key-usage.ts';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import type { Actor } from '../commands/handle.ts';
import { API_KEY_PREFIX } from '../commands/merchants.ts';
import { keyAllows, keyRejection, type Permission } from '../domain/api-key.ts';
import type { MerchantTier } from '../domain/merchant.ts';
import type { ReadModelTables } from '../projections/schema.ts';
import { forbidden, HttpError, unauthorized } from './errors.ts';
import { requestKind, type RateDecision, type RateLimiter } from './rate-limit.ts';

const MISSING_HEADER = 'Missing or invalid Authorization header. Use: Bearer <api_key>';

export interface Caller {
  merchantId: string;
  merchantName: string;
  tier: MerchantTier;
  keyId: string;
  permissions: Permission[] | null;
}

declare module 'fastify' {
  interface FastifyRequest {
    caller?: Caller;
  }
}

/** The API key that called, as the actor of the commands it asks for. */
export const keyActor = (request: FastifyRequest): Actor => ({ type: 'api_key', keyId: request.caller!.keyId });

function bearerToken(request: FastifyRequest): string | undefined {
  const match = /^Bearer ([^\s]+)$/.exec(request.headers.authorization ?? '');
  return match?.[1];
}

/** Equal-length digests compared in constant time, so no timing tells how much of a secret matched. */
function secretsEqual(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}

export function setRateHeaders(reply: FastifyReply, decision: RateDecision) {
  reply.header('X-RateLimit-Limit', decision.limit);
  reply.header('X-RateLimit-Remaining', decision.remaining);
  reply.header('X-RateLimit-Reset', decision.resetAt);
}

export function rateLimited(decision: RateDecision) {
  return new HttpError(429, 'Rate limit exceeded', { retryAfter: decision.retryAfter });
}

export interface AuthDeps {
  database: SqlDatabase;
  rateLimiter: RateLimiter | undefined;
  adminToken: string;
  /** Where each key's last use is noted, for the dashboard. */
  keyUsage?: KeyUsage;
}

export function authentication({ database, rateLimiter, adminToken, keyUsage }: AuthDeps) {
  const db = database.db as Kysely<ReadModelTables>;
  /** A preHandler for merchant endpoints; `permission` undefined means any valid key. */
  const merchant = (permission?: Permission) =>
    async function requireApiKey(request: FastifyRequest, reply: FastifyReply) {
      const key = bearerToken(request);
      if (!key) throw unauthorized(MISSING_HEADER);
      if (!key.startsWith(API_KEY_PREFIX)) throw unauthorized('Invalid API key');
      const keyHash = hashApiKey(key);
      // Every merchant request asks it: planned once per connection.
      const [row] = await database.prepared(
        'api-key',
        (hash) =>
          db
            .selectFrom('api_keys')
            .innerJoin('merchants', 'merchants.id', 'api_keys.merchant_id')
            .select([
              'api_keys.id as keyId',
              'api_keys.key_hash as keyHash',
              'api_keys.permissions',
              'api_keys.revoked_at as revokedAt',
              'api_keys.expires_at as expiresAt',
              'merchants.id as merchantId',
              'merchants.name as merchantName',
              'merchants.tier',
              'merchants.status',
            ])
            .where('api_keys.key_hash', '=', hash),
        keyHash,
      );
      if (!row || !secretsEqual(row.keyHash, keyHash)) throw unauthorized('Invalid API key');
      const rejection = keyRejection(
        {
          revokedAt: row.revokedAt && new Date(row.revokedAt).toISOString(),
          expiresAt: row.expiresAt && new Date(row.expiresAt).toISOString(),
        },
        new Date(),
      );
      if (rejection) throw unauthorized(rejection);
      if (row.status !== 'active') throw forbidden('Merchant account is not active');
      request.caller = {
        merchantId: row.merchantId,
        merchantName: row.merchantName,
        tier: row.tier as MerchantTier,
        keyId: row.keyId,
        permissions: row.permissions as Permission[] | null,
      };
      await keyUsage?.used(row.keyId, new Date());
      if (rateLimiter) {
        const decision = await rateLimiter.consumeMerchant(
          row.merchantId,
          request.caller.tier,
          requestKind(request.method),
        );
        setRateHeaders(reply, decision);
        if (!decision.allowed) {
          reply.header('Retry-After', decision.retryAfter);
          throw rateLimited(decision);
        }
      }
      if (permission && !keyAllows(request.caller, permission)) {
        throw forbidden(`API key does not have the required permission: ${permission}`);
      }
    };

  async function admin(request: FastifyRequest) {
    const token = bearerToken(request);
    if (!token) throw unauthorized('Missing or invalid Authorization header. Use: Bearer <admin_token>');
    if (!secretsEqual(token, adminToken)) throw unauthorized('Invalid admin token');
  }

  async function publicEndpoint(request: FastifyRequest, reply: FastifyReply) {
    if (!rateLimiter) return;
    const decision = await rateLimiter.consumePublic(request.ip);
    setRateHeaders(reply, decision);
    if (!decision.allowed) {
      reply.header('Retry-After', decision.retryAfter);
      throw rateLimited(decision);
    }
  }

  return { merchant, admin, public: publicEndpoint };
}

export type Authentication = ReturnType<typeof authentication>;
