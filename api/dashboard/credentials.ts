// Passwords and TOTP codes of dashboard users (dashboard.md, "Signing in").
import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { createRequire } from 'node:module';
import * as OTPAuth from 'otpauth';

/**
 * scrypt with N = 2^15, r = 8, p = 3: 32 MiB of memory and about 0.1 s of
 * one core a hash, one of the settings OWASP's Password Storage Cheat Sheet
 * lists as equivalent to its first choice (N = 2^17, p = 1), which would
 * hold 128 MiB per sign-in on a small instance. The parameters are stored
 * in each hash, so raising them later leaves old hashes readable.
 */
const SCRYPT = { N: 2 ** 15, r: 8, p: 3 } as const;
const KEY_LENGTH = 32;

function scryptAsync(password: string, salt: Buffer, options: ScryptOptions): Promise<Buffer> {
  // maxmem: scrypt needs 128 · N · r bytes; Node's default cap (32 MiB) is just too small for that.
  const maxmem = 256 * (options.N ?? 1) * (options.r ?? 1);
  return new Promise((resolve, reject) =>
    scrypt(password, salt, KEY_LENGTH, { ...options, maxmem }, (error, key) => (error ? reject(error) : resolve(key))),
  );
}

/** `scrypt$N$r$p$salt$hash`, salt and hash in base64. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scryptAsync(password, salt, SCRYPT);
  return ['scrypt', SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64'), key.toString('base64')].join('$');
}

export async function passwordMatches(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64');
  const key = await scryptAsync(password, Buffer.from(salt, 'base64'), { N: Number(n), r: Number(r), p: Number(p) });
  return key.length === expected.length && timingSafeEqual(key, expected);
}

let dummyHash: Promise<string> | undefined;
/**
 * Checks a password against a hash of nothing anyone has, for an address
 * that has no user: the answer then takes as long as for one that has.
 */
export async function spendPasswordCheck(password: string): Promise<void> {
  dummyHash ??= hashPassword(randomBytes(16).toString('hex'));
  await passwordMatches(password, await dummyHash);
}

export const MIN_PASSWORD_LENGTH = 12;
export const MAX_PASSWORD_LENGTH = 200;

// Mozilla's list (fxa-common-password-list, MPL-2.0): the 10 million
// passwords of the SecLists collection's top million, kept from 8 characters
// up. A CommonJS module with its own decoder.
const commonPasswords = createRequire(import.meta.url)('fxa-common-password-list') as {
  test(password: string): boolean;
};

/** What is wrong with a new password, in words for the form; undefined when it will do. */
export function passwordProblem(password: string, email: string): string | undefined {
  if (password.length < MIN_PASSWORD_LENGTH) return `The password must have at least ${MIN_PASSWORD_LENGTH} characters`;
  if (password.length > MAX_PASSWORD_LENGTH) return `The password must have at most ${MAX_PASSWORD_LENGTH} characters`;
  const lower = password.toLowerCase();
  if (commonPasswords.test(password) || commonPasswords.test(lower)) {
    return 'This password is among the most common ones; choose another';
  }
  if (lower.includes(email.toLowerCase().split('@')[0]!) && email.split('@')[0]!.length >= 4) {
    return 'The password must not contain your e-mail address';
  }
  return undefined;
}

// ---- TOTP (RFC 6238: HMAC-SHA-1, 30 s steps, 6 digits) ---------------------------

const TOTP_SHAPE = { algorithm: 'SHA1', digits: 6, period: 30 } as const;

/** A new authenticator secret, 160 bits as RFC 4226 recommends, in base32 as authenticator apps take it. */
export const newTotpSecret = () => new OTPAuth.Secret({ size: 20 }).base32;

const totpOf = (secret: string, label = '') =>
  new OTPAuth.TOTP({ issuer: 'Crypto invoicing', label, secret: OTPAuth.Secret.fromBase32(secret), ...TOTP_SHAPE });

/** The otpauth:// URI an authenticator app scans (from the QR code). */
export const totpUri = (secret: string, email: string) => totpOf(secret, email).toString();

/**
 * Whether `code` is the code of `secret` at `at` (the wall clock, never the
 * sandbox's business clock), or of the step before or after it: a phone's
 * clock a few seconds off, or a code typed as it changed.
 */
export function totpMatches(secret: string, code: string, at: number = Date.now()): boolean {
  return totpStep(secret, code, at) !== undefined;
}

/** The time step (RFC 6238's T) whose code `code` is, as `totpMatches` finds it; undefined when none. */
export function totpStep(secret: string, code: string, at: number = Date.now()): number | undefined {
  if (!/^\d{6}$/.test(code)) return undefined;
  const delta = totpOf(secret).validate({ token: code, timestamp: at, window: 1 });
  return delta === null ? undefined : Math.floor(at / 1000 / TOTP_SHAPE.period) + delta;
}

/** The code of `secret` at `at`: what an authenticator app shows (tests use it as the app). */
export const totpCode = (secret: string, at: number = Date.now()) => totpOf(secret).generate({ timestamp: at });
