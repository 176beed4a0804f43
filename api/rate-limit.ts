// Request budgets per minute: per merchant (tier, read or write) and per
// client address on the public endpoints. Counters live in this process, or
// in Redis when several API instances must share them.
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { MerchantTier } from '../domain/merchant.ts';

export const tierLimits: Record<MerchantTier, { read: number; write: number }> = {
  free: { read: 60, write: 30 },
  pro: { read: 300, write: 150 },
};

export type RequestKind = 'read' | 'write';

/** Reads are GET and HEAD; everything else writes. */
export const requestKind = (method: string): RequestKind => (method === 'GET' || method === 'HEAD' ? 'read' : 'write');

export interface RateDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Unix time in seconds when the window resets. */
  resetAt: number;
  /** Seconds to wait before retrying (0 when allowed). */
  retryAfter: number;
}

export interface RateLimiter {
  consumeMerchant(merchantId: string, tier: MerchantTier, kind: RequestKind): Promise<RateDecision>;
  consumePublic(clientAddress: string): Promise<RateDecision>;
  close(): Promise<void>;
}

const WINDOW_SECONDS = 60;

/** ioredis is loaded only when a Redis is configured: an instance with in-process counters does not carry it. */
export async function createRateLimiter(options: {
  publicLimit: number;
  redisUrl?: string;
  /** Prefix of the Redis keys, so that deployments (or test runs) sharing a Redis keep apart. */
  namespace?: string;
}): Promise<RateLimiter> {
  const redis = options.redisUrl
    ? new (await import('ioredis')).Redis(options.redisUrl, {
        enableOfflineQueue: false,
        maxRetriesPerRequest: 1,
        lazyConnect: false,
      })
    : undefined;
  redis?.on('error', () => {
    // While Redis is away the in-process insurance limiter counts instead.
  });
  const limiter = (keyPrefix: string, points: number): RateLimiterAbstract => {
    const memory = new RateLimiterMemory({ keyPrefix, points, duration: WINDOW_SECONDS });
    return redis
      ? new RateLimiterRedis({
          storeClient: redis,
          keyPrefix: `${options.namespace ?? 'ratelimit'}:${keyPrefix}`,
          points,
          duration: WINDOW_SECONDS,
          insuranceLimiter: memory,
        })
      : memory;
  };
  const merchantLimiters = new Map<string, RateLimiterAbstract>();
  for (const [tier, limits] of Object.entries(tierLimits)) {
    for (const kind of ['read', 'write'] as const)
      merchantLimiters.set(`${tier}:${kind}`, limiter(`${tier}:${kind}`, limits[kind]));
  }
  const publicLimiter = limiter('public', options.publicLimit);

  return {
    consumeMerchant: (merchantId, tier, kind) => consume(merchantLimiters.get(`${tier}:${kind}`)!, merchantId),
    consumePublic: (clientAddress) => consume(publicLimiter, clientAddress),
    async close() {
      if (redis) await redis.quit().catch(() => redis.disconnect());
    },
  };
}

async function consume(limiter: RateLimiterAbstract, key: string): Promise<RateDecision> {
  const limit = limiter.points;
  try {
    const res = await limiter.consume(key);
    return decision(true, limit, res);
  } catch (rejection) {
    if (rejection instanceof RateLimiterRes) return decision(false, limit, rejection);
    throw rejection;
  }
}

function decision(allowed: boolean, limit: number, res: RateLimiterRes): RateDecision {
  const msLeft = Math.max(0, res.msBeforeNext);
  return {
    allowed,
    limit,
    remaining: Math.max(0, res.remainingPoints),
    resetAt: Math.ceil((Date.now() + msLeft) / 1000),
    retryAfter: allowed ? 0 : Math.max(1, Math.ceil(msLeft / 1000)),
  };
}
