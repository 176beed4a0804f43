// The API key aggregate (stream apikey-<id>). Only the key's SHA-256 hash is
// ever recorded; the key itself is shown once, when it is issued.
import { DomainError, type Decider, type DomainEvent } from './decider.ts';
import { streams } from './streams.ts';

/**
 * The permissions of interface.md plus the subscription and report ones of
 * operations.md and the refund ones of refunds.md.
 */
export const permissions = [
  'invoices:read',
  'invoices:write',
  'settlements:read',
  'webhooks:write',
  'subscriptions:read',
  'subscriptions:write',
  'refunds:read',
  'refunds:write',
  'refunds:approve',
  'reports:read',
] as const;
export type Permission = (typeof permissions)[number];

export interface ApiKey {
  id: string;
  merchantId: string;
  name: string | null;
  keyHash: string;
  /** The first characters of the key, so an operator can tell keys apart. */
  keyPrefix: string;
  /** null: unrestricted, every endpoint. */
  permissions: Permission[] | null;
  expiresAt: string | null;
  revokedAt: string | null;
  createdAt: string;
}

export type ApiKeyEvent =
  | DomainEvent<'ApiKeyIssued', Omit<ApiKey, 'revokedAt' | 'createdAt'> & { issuedAt: string }>
  | DomainEvent<'ApiKeyRevoked', { revokedAt: string }>;

export type ApiKeyCommand =
  | ({ type: 'IssueApiKey'; now: string } & Omit<ApiKey, 'revokedAt' | 'createdAt'>)
  | { type: 'RevokeApiKey'; now: string };

export const apiKeyDecider: Decider<ApiKeyCommand, ApiKey | null, ApiKeyEvent> = {
  initialState: null,

  decide(command, state) {
    switch (command.type) {
      case 'IssueApiKey': {
        if (state) throw new DomainError('conflict', 'API key already exists');
        const { type, now, ...key } = command;
        return [{ type: 'ApiKeyIssued', data: { ...key, issuedAt: now } }];
      }
      case 'RevokeApiKey':
        if (!state) throw new DomainError('not_found', 'API key not found');
        if (state.revokedAt) return []; // revoking twice changes nothing
        return [{ type: 'ApiKeyRevoked', data: { revokedAt: command.now } }];
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'ApiKeyIssued': {
        const { issuedAt, ...key } = event.data;
        return { ...key, revokedAt: null, createdAt: issuedAt };
      }
      case 'ApiKeyRevoked':
        return state && { ...state, revokedAt: event.data.revokedAt };
    }
  },
};

export const apiKeyStream = streams.apiKey.name;

export type KeyRejection = 'API key has been revoked' | 'API key has expired';

/** Why a known key may not be used at `now`, or null when it may. */
export function keyRejection(key: Pick<ApiKey, 'revokedAt' | 'expiresAt'>, now: Date): KeyRejection | null {
  if (key.revokedAt) return 'API key has been revoked';
  if (key.expiresAt && new Date(key.expiresAt).getTime() <= now.getTime()) return 'API key has expired';
  return null;
}

/** Unrestricted keys (null) may call anything. */
export function keyAllows(key: Pick<ApiKey, 'permissions'>, needed: Permission): boolean {
  return key.permissions === null || key.permissions.includes(needed);
}
