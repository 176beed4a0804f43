// Where a webhook may go. Checked twice, with the messages of interface.md:
// when a URL is saved (the literal checks of webhookUrlProblem) and again when
// a webhook is sent (checkWebhookTarget: the host name is resolved, every
// address it resolves to is judged, and the connection is pinned to the
// addresses that were judged, so a DNS answer that changes between the check and
// the connection, DNS rebinding, cannot reach an internal address).
import { promises as dns, type LookupAddress } from 'node:dns';
import { withDeadline } from '../deadline.ts';
import type { LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';

/** Resolves a host name to every address it has, like dns.promises.lookup with all: true. */
export type WebhookResolver = (hostname: string) => Promise<LookupAddress[]>;

export interface WebhookTargetPolicy {
  /** APP_ENV=production: only HTTPS targets. */
  production: boolean;
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS: loopback and private targets allowed (development and tests). */
  allowPrivateTargets: boolean;
  /** Injected by tests so that no DNS server is needed; the system resolver otherwise. */
  resolve?: WebhookResolver;
  /** How long a resolution may take before the attempt counts as unresolved (default 5 s). */
  resolveTimeoutMs?: number;
}

/**
 * The system resolver has no deadline of its own, and a name server that never
 * answers would hold a delivery (and the URL's queue behind it) for as long as
 * the operating system's resolver retries.
 */
const RESOLVE_TIMEOUT_MS = 5_000;

/** The name the URL checks had before they moved here; kept for existing callers. */
export type WebhookUrlPolicy = WebhookTargetPolicy;

export const INVALID_URL = 'Invalid webhook URL format';
export const HTTPS_REQUIRED = 'Webhook URL must use HTTPS in production';
export const LOOPBACK = 'Webhook URL cannot point to localhost or loopback addresses';
export const PRIVATE = 'Webhook URL cannot point to private or internal IP addresses';

/** The contract's message for a target that may not be used, or null when it may. */
export function webhookUrlProblem(raw: string, policy: WebhookTargetPolicy): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return INVALID_URL;
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return INVALID_URL;
  if (url.username || url.password) return INVALID_URL;
  if (policy.production && url.protocol !== 'https:') return HTTPS_REQUIRED;
  if (policy.allowPrivateTargets) return null;
  const host = hostOf(url);
  if (host === 'localhost' || host.endsWith('.localhost')) return LOOPBACK;
  // WHATWG URL parsing already turns decimal, octal and hex IPv4 spellings
  // into dotted form, so one check covers them all.
  return ipaddr.isValid(host) ? addressProblem(host) : null;
}

/** Why a resolved address may not receive webhooks, or null when it may. */
export function addressProblem(address: string): string | null {
  const parsed = embeddedIPv4(ipaddr.parse(address));
  const range = parsed.range();
  if (range === 'loopback') return LOOPBACK;
  // Everything that is not plain public unicast: private, link-local (and the
  // cloud metadata address 169.254.169.254), unspecified, carrier-grade NAT,
  // multicast, reserved, NAT64 and 6to4 prefixes that could wrap any of them.
  return range === 'unicast' ? null : PRIVATE;
}

/**
 * An IPv6 address that carries an IPv4 one (mapped ::ffff:a.b.c.d, or the
 * deprecated compatible ::a.b.c.d that ipaddr.js calls unicast) is judged as
 * that IPv4 address.
 */
function embeddedIPv4(parsed: ipaddr.IPv4 | ipaddr.IPv6): ipaddr.IPv4 | ipaddr.IPv6 {
  if (parsed.kind() === 'ipv4') return parsed;
  const v6 = parsed as ipaddr.IPv6;
  if (v6.isIPv4MappedAddress()) return v6.toIPv4Address();
  const parts = v6.parts;
  const compatible = parts.slice(0, 6).every((p) => p === 0) && (parts[6] ?? 0) !== 0;
  if (compatible) return ipaddr.fromByteArray(v6.toByteArray().slice(12));
  return v6;
}

/** The URL's host without IPv6 brackets or a trailing dot, lower-cased. */
function hostOf(url: URL): string {
  return url.hostname
    .replace(/^\[|\]$/g, '')
    .toLowerCase()
    .replace(/\.$/, '');
}

/** A target that passed every check, with the only addresses the request may connect to. */
export interface CheckedTarget {
  url: URL;
  /** The host name as written: kept for TLS SNI, certificate checks and the Host header. */
  hostname: string;
  /** Every address the name resolved to, all checked; the first is preferred. */
  addresses: { address: string; family: 4 | 6 }[];
}

export type TargetCheck =
  | { ok: true; target: CheckedTarget }
  /** `refused`: the contract's message, final; `unresolved`: DNS failed, worth retrying. */
  | { ok: false; kind: 'refused' | 'unresolved'; problem: string };

const systemResolver: WebhookResolver = (hostname) => dns.lookup(hostname, { all: true, verbatim: true });

/**
 * The check at send time: the literal checks, then the host name resolved and
 * refused when ANY of its addresses is loopback, private, link-local,
 * unspecified or metadata (an attacker controls which one a client would pick).
 */
export async function checkWebhookTarget(raw: string, policy: WebhookTargetPolicy): Promise<TargetCheck> {
  const literal = webhookUrlProblem(raw, policy);
  if (literal) return { ok: false, kind: 'refused', problem: literal };
  const url = new URL(raw);
  const host = hostOf(url);
  if (ipaddr.isValid(host)) {
    const family = ipaddr.IPv4.isValid(host) ? 4 : 6;
    return { ok: true, target: { url, hostname: host, addresses: [{ address: host, family }] } };
  }
  let addresses: LookupAddress[];
  try {
    const resolve = policy.resolve ?? systemResolver;
    addresses = await withDeadline(resolve(host), policy.resolveTimeoutMs ?? RESOLVE_TIMEOUT_MS, `resolving ${host}`);
  } catch (error) {
    return { ok: false, kind: 'unresolved', problem: `Could not resolve ${host}: ${errorCode(error)}` };
  }
  if (addresses.length === 0)
    return { ok: false, kind: 'unresolved', problem: `Could not resolve ${host}: no addresses` };
  if (!policy.allowPrivateTargets) {
    for (const { address } of addresses) {
      const problem = ipaddr.isValid(address) ? addressProblem(address) : PRIVATE;
      if (problem) return { ok: false, kind: 'refused', problem };
    }
  }
  return {
    ok: true,
    target: {
      url,
      hostname: url.hostname,
      addresses: addresses.map(({ address, family }) => ({ address, family: family === 6 ? 6 : 4 })),
    },
  };
}

/**
 * A `lookup` for node:http(s) request options that answers every question
 * with the checked addresses and never asks DNS again. Node 20 asks with
 * `all: true` when it races address families (autoSelectFamily): it gets
 * every checked address, so a name with both an IPv4 and an IPv6 address
 * still connects over either; a single question gets the first one.
 */
export function pinnedLookup(target: Pick<CheckedTarget, 'addresses'>): LookupFunction {
  const [first] = target.addresses;
  if (!first) throw new Error('A checked target has at least one address');
  return ((_hostname: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
    if (options?.all)
      callback(
        null,
        target.addresses.map((a) => ({ ...a })),
      );
    else callback(null, first.address, first.family);
  }) as LookupFunction;
}

function errorCode(error: unknown): string {
  return (error as { code?: string })?.code ?? (error instanceof Error ? error.message : String(error));
}
