// One webhook request: signed, sent to the checked addresses only, never
// redirected, at most 30 s, and classified as delivered, worth retrying or
// final. The signing secret goes into the HMAC and nowhere else: it is never
// logged and never part of an error.
import { createHmac, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { checkWebhookTarget, pinnedLookup, type CheckedTarget, type WebhookTargetPolicy } from './target.ts';

export const SIGNATURE_HEADER = 'X-Webhook-Signature';
export const USER_AGENT = 'crypto-invoicing-webhooks/1.0';
export const DEFAULT_TIMEOUT_MS = 30_000;
/** How much of a receiver's answer is read before it is thrown away: enough for a status page, no more. */
const MAX_RESPONSE_BYTES = 4096;

export interface WebhookSendResult {
  ok: boolean;
  statusCode: number | null;
  error: string | null;
  /** Network errors, timeouts, 408, 429 and 5xx are retried; 3xx, other 4xx and refused targets are final. */
  retryable: boolean;
  durationMs: number;
}

export interface SendWebhookInput {
  url: string;
  /** The exact bytes that are signed and sent. */
  rawBody: string;
  secret: string;
  policy: WebhookTargetPolicy;
  timeoutMs?: number;
  /** Wall-clock milliseconds for the signature's timestamp. */
  now?: () => number;
}

const hmacHex = (rawBody: string, secret: string, unixSeconds: number) =>
  createHmac('sha256', secret).update(`${unixSeconds}.${rawBody}`).digest('hex');

/** The X-Webhook-Signature value: `t=<unix seconds>,v1=<hex HMAC-SHA-256 of "<t>.<rawBody>">`. */
export function signWebhook(rawBody: string, secret: string, unixSeconds: number): string {
  return `t=${unixSeconds},v1=${hmacHex(rawBody, secret, unixSeconds)}`;
}

/**
 * The receiver's check (interface.md, "Signature"): some `v1` equals the
 * expected HMAC, compared in constant time, and `t` is within the tolerance
 * of now. `v1` may occur several times, e.g. while a secret is rotated.
 */
export function verifyWebhookSignature(
  header: string | undefined,
  rawBody: string,
  secret: string,
  nowSeconds: number,
  toleranceSeconds = 300,
): boolean {
  if (!header) return false;
  let t: number | undefined;
  const signatures: string[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === 't') {
      if (t !== undefined || !/^\d+$/.test(value)) return false;
      t = Number(value);
    } else if (key === 'v1') signatures.push(value);
  }
  if (t === undefined || Math.abs(nowSeconds - t) > toleranceSeconds) return false;
  const expected = Buffer.from(hmacHex(rawBody, secret, t), 'hex');
  return signatures.some((candidate) => {
    if (!/^[0-9a-f]{64}$/i.test(candidate)) return false;
    return timingSafeEqual(Buffer.from(candidate, 'hex'), expected);
  });
}

/** Whether an HTTP status is delivered, worth retrying (408, 429, 5xx) or final (3xx and other 4xx). */
export function classifyStatus(statusCode: number): Pick<WebhookSendResult, 'ok' | 'retryable' | 'error'> {
  if (statusCode >= 200 && statusCode < 300) return { ok: true, retryable: false, error: null };
  if (statusCode === 408 || statusCode === 429 || statusCode >= 500) {
    return { ok: false, retryable: true, error: `HTTP ${statusCode}` };
  }
  // A redirect is never followed: it could lead anywhere, including inside
  // our network, and the signature was made for this URL. The merchant fixes
  // the URL; retrying the same one would only get the same redirect.
  if (statusCode >= 300 && statusCode < 400) {
    return { ok: false, retryable: false, error: `HTTP ${statusCode}: redirects are not followed` };
  }
  return { ok: false, retryable: false, error: `HTTP ${statusCode}` };
}

/** Signs and POSTs one webhook; never throws. */
export async function sendWebhook({
  url,
  rawBody,
  secret,
  policy,
  timeoutMs = DEFAULT_TIMEOUT_MS,
  now = () => Date.now(),
}: SendWebhookInput): Promise<WebhookSendResult> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const check = await checkWebhookTarget(url, policy);
  if (!check.ok) {
    return {
      ok: false,
      statusCode: null,
      error: check.problem,
      retryable: check.kind === 'unresolved',
      durationMs: elapsed(),
    };
  }
  const signature = signWebhook(rawBody, secret, Math.floor(now() / 1000));
  const outcome = await post(check.target, rawBody, signature, timeoutMs);
  if ('statusCode' in outcome)
    return { ...classifyStatus(outcome.statusCode), statusCode: outcome.statusCode, durationMs: elapsed() };
  return { ok: false, statusCode: null, error: outcome.error, retryable: true, durationMs: elapsed() };
}

type PostOutcome = { statusCode: number } | { error: string };

/**
 * The request itself, pinned to the checked addresses. The timeout covers the
 * whole exchange (connect, TLS, headers); the body is read only up to a few KB
 * and only while time is left, since the status alone decides the outcome.
 */
function post(target: CheckedTarget, rawBody: string, signature: string, timeoutMs: number): Promise<PostOutcome> {
  const { url } = target;
  const client = url.protocol === 'https:' ? https : http;
  return new Promise((resolve) => {
    let settled: PostOutcome | undefined;
    let answered: number | undefined;
    const finish = (outcome: PostOutcome) => {
      if (settled) return;
      settled = outcome;
      clearTimeout(timer);
      request.destroy();
      resolve(outcome);
    };
    const request = client.request({
      method: 'POST',
      protocol: url.protocol,
      hostname: target.hostname,
      port: url.port || undefined,
      path: `${url.pathname}${url.search}`,
      // Host header and TLS SNI / certificate name stay the URL's host name
      // (node derives them from `hostname`); only the addresses are fixed.
      lookup: pinnedLookup(target),
      // A fresh connection each time: a pooled socket would skip the check.
      agent: false,
      headers: {
        'Content-Type': 'application/json',
        'Content-Length': Buffer.byteLength(rawBody),
        'User-Agent': USER_AGENT,
        [SIGNATURE_HEADER]: signature,
      },
    });
    // Once the status is known, running out of time while reading the body changes nothing.
    const timer = setTimeout(
      () => finish(answered === undefined ? { error: `Timed out after ${timeoutMs} ms` } : { statusCode: answered }),
      timeoutMs,
    );
    request.on('error', (error) => finish({ error: networkError(error) }));
    request.on('response', (response) => {
      const statusCode = response.statusCode ?? 0;
      answered = statusCode;
      let read = 0;
      response.on('data', (chunk: Buffer) => {
        read += chunk.length;
        if (read >= MAX_RESPONSE_BYTES) finish({ statusCode });
      });
      response.on('end', () => finish({ statusCode }));
      response.on('error', () => finish({ statusCode }));
      response.on('close', () => finish({ statusCode }));
    });
    request.end(rawBody);
  });
}

function networkError(error: Error & { code?: string }): string {
  return error.code ? `${error.code}: ${error.message}` : error.message;
}
