// Random secrets the service hands out: API keys, webhook signing secrets and
// the development admin token, in base62 so they survive any copy and paste.
import { createHash, randomBytes } from 'node:crypto';
import baseX from 'base-x';

const base62 = baseX('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz');

/** `prefix` followed by 32 random bytes (256 bits) in base62. */
export function randomSecret(prefix = ''): string {
  return prefix + base62.encode(randomBytes(32));
}

/** API keys are stored only as this SHA-256 hash: a 256-bit random key needs no salt or stretching. */
export const hashApiKey = (key: string) => createHash('sha256').update(key).digest('hex');
