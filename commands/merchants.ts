// Operator commands on merchants and their API keys.
import { randomUUID } from 'node:crypto';
import type { EventStore } from '../adapters/event-store/port.ts';
import { hashApiKey, randomSecret } from '../adapters/secrets.ts';
import { apiKeyDecider, apiKeyStream, type ApiKey, type Permission } from '../domain/api-key.ts';
import { DomainError } from '../domain/decider.ts';
import {
  merchantDecider,
  merchantStream,
  type Merchant,
  type MerchantChanges,
  type MerchantCommand,
  type MerchantProfile,
} from '../domain/merchant.ts';
import { handleCommand, handleWritten, loadState, type Actor, type Written } from './handle.ts';

export const API_KEY_PREFIX = 'pk_live_';
const WEBHOOK_SECRET_PREFIX = 'whsec_';

export function merchantCommands(store: EventStore, now = () => new Date()) {
  async function existingMerchant(merchantId: string): Promise<Merchant> {
    const merchant = await loadState(store, merchantDecider, merchantStream(merchantId));
    if (!merchant) throw new DomainError('not_found', 'Merchant not found');
    return merchant;
  }

  /** `command` decided on the merchant's stream: the merchant as it stands after it. */
  async function decide(
    merchantId: string,
    command: MerchantCommand,
    correlationId?: string,
    actor?: Actor,
  ): Promise<Written<Merchant>> {
    return handleWritten(store, merchantDecider, merchantStream(merchantId), command, {
      correlationId,
      actor,
    });
  }

  return {
    existingMerchant,

    async register(
      profile: Omit<MerchantProfile, 'status'>,
      correlationId?: string,
      actor?: Actor,
    ): Promise<Written<Merchant>> {
      const merchantId = randomUUID();
      return handleWritten(
        store,
        merchantDecider,
        merchantStream(merchantId),
        {
          type: 'RegisterMerchant',
          merchantId,
          profile,
          webhookSecret: randomSecret(WEBHOOK_SECRET_PREFIX),
          now: now().toISOString(),
        },
        { correlationId, actor },
      );
    },

    update: (merchantId: string, changes: MerchantChanges, correlationId?: string, actor?: Actor) =>
      decide(merchantId, { type: 'UpdateMerchant', changes, now: now().toISOString() }, correlationId, actor),

    /** One chain's settlement wallet set, or removed with null; the other chains' stay as they are then. */
    setSettlementWallet: (
      merchantId: string,
      chain: string,
      address: string | null,
      correlationId?: string,
      actor?: Actor,
    ) =>
      decide(
        merchantId,
        { type: 'SetSettlementWallet', chain, address, now: now().toISOString() },
        correlationId,
        actor,
      ),

    async rotateWebhookSecret(merchantId: string, correlationId?: string, actor?: Actor): Promise<Written<string>> {
      const webhookSecret = randomSecret(WEBHOOK_SECRET_PREFIX);
      const { position } = await handleCommand(
        store,
        merchantDecider,
        merchantStream(merchantId),
        { type: 'RotateWebhookSecret', webhookSecret, now: now().toISOString() },
        { correlationId, actor },
      );
      return { value: webhookSecret, position };
    },

    /** Issues a key; the key itself is in the result and nowhere else, ever. */
    async issueApiKey(
      merchantId: string,
      request: { name: string | null; permissions: Permission[] | null; expiresAt: string | null },
      correlationId?: string,
      actor?: Actor,
    ): Promise<Written<{ record: ApiKey; key: string }>> {
      await existingMerchant(merchantId);
      const keyId = randomUUID();
      const key = randomSecret(API_KEY_PREFIX);
      const { state, position } = await handleCommand(
        store,
        apiKeyDecider,
        apiKeyStream(keyId),
        {
          type: 'IssueApiKey',
          id: keyId,
          merchantId,
          name: request.name,
          keyHash: hashApiKey(key),
          keyPrefix: key.slice(0, API_KEY_PREFIX.length + 4),
          permissions: request.permissions,
          expiresAt: request.expiresAt,
          now: now().toISOString(),
        },
        { correlationId, actor },
      );
      return { value: { record: state!, key }, position };
    },

    async revokeApiKey(keyId: string, correlationId?: string, actor?: Actor): Promise<Written<ApiKey>> {
      return handleWritten(
        store,
        apiKeyDecider,
        apiKeyStream(keyId),
        { type: 'RevokeApiKey', now: now().toISOString() },
        { correlationId, actor },
      );
    },
  };
}

export type MerchantCommands = ReturnType<typeof merchantCommands>;
