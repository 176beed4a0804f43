// Random secrets the service hands out: API keys, webhook signing secrets and
// the development admin token, in base62 so they survive any copy and paste;
// and the sealing of secrets the service must read back (a dashboard user's
// TOTP key), so that a copy of the event log does not hold them in clear.
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
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

const SEALED = 'sealed:v1:';
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** Seals and opens short secrets with AES-256-GCM under one 32-byte key. */
export interface SecretSealer {
  /** `sealed:v1:` and base64url of IV, ciphertext and tag: a new IV each time. */
  seal(secret: string): string;
  /** The secret of a sealed value; a value recorded before sealing began is returned as it is. Throws on a forged one. */
  open(value: string): string;
}

export function secretSealer(key: Uint8Array): SecretSealer {
  if (key.length !== 32) throw new Error('a sealing key is 32 bytes');
  return {
    seal(secret) {
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const body = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
      return SEALED + Buffer.concat([iv, body, cipher.getAuthTag()]).toString('base64url');
    },
    open(value) {
      if (!value.startsWith(SEALED)) return value;
      const raw = Buffer.from(value.slice(SEALED.length), 'base64url');
      if (raw.length < IV_BYTES + TAG_BYTES) throw new Error('a sealed value is too short');
      // The tag's length is fixed, so a forged value cannot pass with a shorter one.
      const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, IV_BYTES), { authTagLength: TAG_BYTES });
      decipher.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
      return Buffer.concat([
        decipher.update(raw.subarray(IV_BYTES, raw.length - TAG_BYTES)),
        decipher.final(),
      ]).toString('utf8');
    },
  };
}
