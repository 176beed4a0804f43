// Projects merchants, their API keys and their dashboard users into
// `merchants`, `api_keys` and `merchant_users`, which authentication, the
// operator API and the dashboard read.
import type { Kysely } from 'kysely';
import { apiKeyDecider, type ApiKey } from '../domain/api-key.ts';
import { merchantDecider, type Merchant } from '../domain/merchant.ts';
import { merchantUserDecider, type MerchantUser } from '../domain/merchant-user.ts';
import { dateOrNull, foldsOf, rowsOf, StreamFolds, upsertRows, type Folded } from './batch.ts';
import type { Projector } from '../adapters/event-store/followers.ts';
import type { ReadModelTables } from './schema.ts';
import { streams } from '../domain/streams.ts';

/** The merchants, API keys and users a batch touches, each as of the batch's last event of it. */
const folds = {
  merchants: new StreamFolds(streams.merchant.holds, merchantDecider),
  apiKeys: new StreamFolds(streams.apiKey.holds, apiKeyDecider),
  users: new StreamFolds(streams.merchantUser.holds, merchantUserDecider),
};

export const merchantsProjector: Projector<Folded<typeof folds>> = {
  name: 'merchants',
  tables: ['merchants', 'api_keys', 'merchant_users'],
  prepare: foldsOf(folds),

  // Each merchant's and key's row once, as of its last event in the batch (see batch.ts).
  async applyBatch(trx: Kysely<ReadModelTables>, _batch, { merchants, apiKeys, users }) {
    await upsertRows(trx, 'merchants', ['id'], rowsOf(merchants.values(), merchantRowOf));
    await upsertRows(trx, 'api_keys', ['id'], rowsOf(apiKeys.values(), apiKeyRowOf));
    await upsertRows(trx, 'merchant_users', ['id'], rowsOf(users.values(), userRowOf));
  },
};

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
