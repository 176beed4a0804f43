// Projects merchants, their API keys and their dashboard users into
// `merchants`, `api_keys` and `merchant_users`, which authentication, the
// operator API and the dashboard read.
import type { Kysely } from 'kysely';
import { apiKeyDecider, type ApiKey } from '../domain/api-key.ts';
import { merchantDecider, type Merchant } from '../domain/merchant.ts';
import { merchantUserDecider, type MerchantUser } from '../domain/merchant-user.ts';
import { dateOrNull, rowPerStreamProjector, streamTable } from './batch.ts';
import type { ReadModelTables } from './schema.ts';
import { streams } from '../domain/streams.ts';

// Each merchant's, key's and user's row once, as of its last event in the batch (see batch.ts).
export const merchantsProjector = rowPerStreamProjector(
  'merchants',
  streamTable('merchants', streams.merchant.holds, merchantDecider, merchantRowOf),
  streamTable('api_keys', streams.apiKey.holds, apiKeyDecider, apiKeyRowOf),
  streamTable('merchant_users', streams.merchantUser.holds, merchantUserDecider, userRowOf),
);

function merchantRowOf(m: Merchant) {
  return {
    id: m.id,
    name: m.name,
    tier: m.tier,
    status: m.status,
    webhook_url: m.webhookUrl,
    settlement_wallets: m.settlementWallets,
    webhook_secret: m.webhookSecret,
    created_at: new Date(m.createdAt),
    updated_at: new Date(m.updatedAt),
  };
}

function apiKeyRowOf(k: ApiKey) {
  return {
    id: k.id,
    merchant_id: k.merchantId,
    name: k.name,
    key_hash: k.keyHash,
    key_prefix: k.keyPrefix,
    permissions: k.permissions,
    expires_at: dateOrNull(k.expiresAt),
    revoked_at: dateOrNull(k.revokedAt),
    created_at: new Date(k.createdAt),
  };
}

/** The secrets stay in the events: sign-in reads the user's own stream. */
function userRowOf(u: MerchantUser) {
  return {
    id: u.id,
    merchant_id: u.merchantId,
    email: u.email,
    role: u.role,
    status: u.status,
    invite_token_hash: u.inviteTokenHash,
    invite_expires_at: new Date(u.inviteExpiresAt),
    totp_enrolled: u.totpSecret !== null,
    invited_at: new Date(u.invitedAt),
    accepted_at: dateOrNull(u.acceptedAt),
    disabled_at: dateOrNull(u.disabledAt),
    updated_at: new Date(u.updatedAt),
  };
}

/** A merchant's API keys, oldest first: the operator's list and the dashboard's. */
export const merchantApiKeys = (db: Kysely<ReadModelTables>, merchantId: string) =>
  db.selectFrom('api_keys').selectAll().where('merchant_id', '=', merchantId).orderBy('created_at').execute();

/** A merchant's people, in the order they were invited: the operator's list and the dashboard's team page. */
export const merchantUsers = (db: Kysely<ReadModelTables>, merchantId: string) =>
  db.selectFrom('merchant_users').selectAll().where('merchant_id', '=', merchantId).orderBy('invited_at').execute();
