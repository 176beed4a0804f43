// The merchant aggregate (stream merchant-<id>): who may use the API, on which
// tier, where webhooks go and where settlements are paid.
import { DomainError, type Decider, type DomainEvent } from './decider.ts';
import { streams } from './streams.ts';

export const merchantTiers = ['free', 'pro'] as const;
export type MerchantTier = (typeof merchantTiers)[number];
export const merchantStatuses = ['active', 'suspended', 'pending_review'] as const;
export type MerchantStatus = (typeof merchantStatuses)[number];

/** Chain identifier → the merchant's wallet address on that chain. */
export type SettlementWallets = Record<string, string>;

export interface MerchantProfile {
  name: string;
  tier: MerchantTier;
  status: MerchantStatus;
  webhookUrl: string | null;
  settlementWallets: SettlementWallets;
}

export type MerchantChanges = Partial<MerchantProfile>;

export type MerchantEvent =
  | DomainEvent<
      'MerchantRegistered',
      MerchantProfile & { merchantId: string; webhookSecret: string; registeredAt: string }
    >
  | DomainEvent<'MerchantUpdated', { changes: MerchantChanges; updatedAt: string }>
  | DomainEvent<'WebhookSecretRotated', { webhookSecret: string; rotatedAt: string }>
  | DomainEvent<'RefundWalletAssigned', RefundWallet & { chain: string; assignedAt: string }>;

/**
 * The address the service derived for this merchant's refunds on a chain
 * (refunds.md, "the merchant's refund wallets"): the merchant funds it, and
 * refunds of invoices already settled are paid from it.
 */
export interface RefundWallet {
  address: string;
  derivationIndex: number;
  /** When it was assigned: no coin reached it before (a chain may look back for its coins from then). */
  assignedAt?: string;
}

export type MerchantCommand =
  | {
      type: 'RegisterMerchant';
      merchantId: string;
      profile: Omit<MerchantProfile, 'status'>;
      webhookSecret: string;
      now: string;
    }
  | { type: 'UpdateMerchant'; changes: MerchantChanges; now: string }
  /**
   * One chain's wallet set (or removed: null), the others kept as they stand
   * when it is decided: two people changing two chains at once both land.
   */
  | { type: 'SetSettlementWallet'; chain: string; address: string | null; now: string }
  | { type: 'RotateWebhookSecret'; webhookSecret: string; now: string }
  /** The first wallet assigned on a chain is the merchant's for good; a later one (a race) changes nothing. */
  | { type: 'AssignRefundWallet'; chain: string; wallet: RefundWallet; now: string };

export interface Merchant extends MerchantProfile {
  id: string;
  webhookSecret: string;
  /** Chain → its refund wallet, once one was asked for. */
  refundWallets: Record<string, RefundWallet>;
  createdAt: string;
  updatedAt: string;
}

export type MerchantState = Merchant | null;

export const merchantDecider: Decider<MerchantCommand, MerchantState, MerchantEvent> = {
  initialState: null,

  decide(command, state) {
    if (command.type === 'RegisterMerchant') {
      if (state) throw new DomainError('conflict', 'Merchant already exists');
      return [
        {
          type: 'MerchantRegistered',
          data: {
            merchantId: command.merchantId,
            ...command.profile,
            status: 'active',
            webhookSecret: command.webhookSecret,
            registeredAt: command.now,
          },
        },
      ];
    }
    if (!state) throw new DomainError('not_found', 'Merchant not found');
    switch (command.type) {
      case 'UpdateMerchant': {
        // Only what really changes is recorded, so the history stays readable.
        const changes = Object.fromEntries(
          Object.entries(command.changes).filter(
            ([key, value]) =>
              value !== undefined && JSON.stringify(state[key as keyof Merchant]) !== JSON.stringify(value),
          ),
        ) as MerchantChanges;
        if (Object.keys(changes).length === 0) return [];
        return [{ type: 'MerchantUpdated', data: { changes, updatedAt: command.now } }];
      }
      case 'SetSettlementWallet': {
        const { [command.chain]: before, ...others } = state.settlementWallets;
        if ((before ?? null) === command.address) return [];
        const settlementWallets = command.address ? { ...others, [command.chain]: command.address } : others;
        return [{ type: 'MerchantUpdated', data: { changes: { settlementWallets }, updatedAt: command.now } }];
      }
      case 'RotateWebhookSecret':
        return [
          { type: 'WebhookSecretRotated', data: { webhookSecret: command.webhookSecret, rotatedAt: command.now } },
        ];
      case 'AssignRefundWallet':
        if (state.refundWallets[command.chain]) return [];
        return [
          { type: 'RefundWalletAssigned', data: { chain: command.chain, ...command.wallet, assignedAt: command.now } },
        ];
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'MerchantRegistered': {
        const { merchantId, registeredAt, ...rest } = event.data;
        return { id: merchantId, ...rest, refundWallets: {}, createdAt: registeredAt, updatedAt: registeredAt };
      }
      case 'MerchantUpdated':
        return state && { ...state, ...event.data.changes, updatedAt: event.data.updatedAt };
      case 'WebhookSecretRotated':
        return state && { ...state, webhookSecret: event.data.webhookSecret, updatedAt: event.data.rotatedAt };
      case 'RefundWalletAssigned': {
        const { chain, address, derivationIndex, assignedAt } = event.data;
        return (
          state && {
            ...state,
            refundWallets: { ...state.refundWallets, [chain]: { address, derivationIndex, assignedAt } },
            updatedAt: assignedAt,
          }
        );
      }
    }
  },
};

export const merchantStream = streams.merchant.name;
