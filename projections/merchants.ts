// Projects merchants and their API keys into `merchants` and `api_keys`,
// which authentication and the operator API read.
import { sql, type Kysely } from 'kysely';
import type { RecordedEvent } from '../adapters/event-store/port.ts';
import type { ApiKeyEvent } from '../domain/api-key.ts';
import type { MerchantEvent } from '../domain/merchant.ts';
import type { Projector } from './engine.ts';
import type { ReadModelTables } from './schema.ts';

const json = <T>(value: T) => sql<T>`${JSON.stringify(value)}::jsonb`;

export const merchantsProjector: Projector = {
  name: 'merchants',
  tables: ['merchants', 'api_keys'],

  async apply(trx: Kysely<ReadModelTables>, recorded: RecordedEvent) {
    const event = { type: recorded.type, data: recorded.data } as MerchantEvent | ApiKeyEvent;
    const id = recorded.streamId.slice(recorded.streamId.indexOf('-') + 1);
    switch (event.type) {
      case 'MerchantRegistered': {
        const d = event.data;
        const row = {
          id: d.merchantId,
          name: d.name,
          tier: d.tier,
          status: d.status,
          webhook_url: d.webhookUrl,
          settlement_wallets: json(d.settlementWallets),
          webhook_secret: d.webhookSecret,
          created_at: new Date(d.registeredAt),
          updated_at: new Date(d.registeredAt),
        };
        await trx
          .insertInto('merchants')
          .values(row)
          .onConflict((oc) => oc.column('id').doUpdateSet(row))
          .execute();
        return;
      }
      case 'MerchantUpdated': {
        const c = event.data.changes;
        await trx
          .updateTable('merchants')
          .set({
            ...(c.name !== undefined && { name: c.name }),
            ...(c.tier !== undefined && { tier: c.tier }),
            ...(c.status !== undefined && { status: c.status }),
            ...(c.webhookUrl !== undefined && { webhook_url: c.webhookUrl }),
            ...(c.settlementWallets !== undefined && { settlement_wallets: json(c.settlementWallets) }),
            updated_at: new Date(event.data.updatedAt),
          })
          .where('id', '=', id)
          .execute();
        return;
      }
      case 'WebhookSecretRotated':
        await trx
          .updateTable('merchants')
          .set({ webhook_secret: event.data.webhookSecret, updated_at: new Date(event.data.rotatedAt) })
          .where('id', '=', id)
          .execute();
        return;
      case 'ApiKeyIssued': {
        const d = event.data;
        const row = {
          id: d.id,
          merchant_id: d.merchantId,
          name: d.name,
          key_hash: d.keyHash,
          key_prefix: d.keyPrefix,
          permissions: d.permissions === null ? null : json(d.permissions),
          expires_at: d.expiresAt ? new Date(d.expiresAt) : null,
          revoked_at: null,
          created_at: new Date(d.issuedAt),
        };
        await trx
          .insertInto('api_keys')
          .values(row)
          .onConflict((oc) => oc.column('id').doUpdateSet(row))
          .execute();
        return;
      }
      case 'ApiKeyRevoked':
        await trx
          .updateTable('api_keys')
          .set({ revoked_at: new Date(event.data.revokedAt) })
          .where('id', '=', id)
          .execute();
        return;
    }
  },
};
