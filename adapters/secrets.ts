// Random secrets the service hands out: API keys, webhook signing secrets and
// the development admin token, in base62 so they survive any copy and paste.
import { createHash, randomBytes } from 'node:crypto';
import baseX from 'base-x';

const base62 = baseX('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz');

/** Base62 digits of any 256-bit number: 62^43 > 2^256. */
const SECRET_DIGITS = 43;

/**
 * `prefix` followed by 32 random bytes (256 bits) in base62, always 43
 * digits: a number that happens to be small (one in 60 needs only 42) is
 * written with leading zeros, so every key and secret has the one length.
 */
export function randomSecret(prefix = ''): string {
  return prefix + base62.encode(randomBytes(32)).padStart(SECRET_DIGITS, '0');
}

/** API keys are stored only as this SHA-256 hash: a 256-bit random key needs no salt or stretching. */
export const hashApiKey = (key: string) => createHash('sha256').update(key).digest('hex');
