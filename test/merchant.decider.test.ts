// The merchant aggregate, given events / when command / then events: one
// chain's settlement wallet set or removed without touching the others.
import { describe, it } from 'node:test';
import { merchantDecider, type MerchantEvent } from '../domain/merchant.ts';
import { given } from './support/decider.ts';

const registered: MerchantEvent = {
  type: 'MerchantRegistered',
  data: {
    merchantId: 'm-1',
    name: 'Shop',
    tier: 'free',
    status: 'active',
    webhookUrl: null,
    settlementWallets: { ethereum: '0x00000000000000000000000000000000000000E1' },
    webhookSecret: 'whsec_x',
    registeredAt: '2026-11-28T08:00:00.000Z',
  },
};
const now = '2026-11-28T09:00:00.000Z';
const updated = (settlementWallets: Record<string, string>): MerchantEvent => ({
  type: 'MerchantUpdated',
  data: { changes: { settlementWallets }, updatedAt: now },
});

describe('merchant: SetSettlementWallet', () => {
  it("sets one chain's wallet and keeps the others as they are when it is decided", () => {
    // Another chain's wallet was changed after the first person loaded the page: it stays.
    given(merchantDecider, [registered, updated({ ethereum: '0xE2', polygon: '0xP1' })])
      .when({ type: 'SetSettlementWallet', chain: 'tron', address: 'TX1', now })
      .then([updated({ ethereum: '0xE2', polygon: '0xP1', tron: 'TX1' })]);
  });

  it("removes one chain's wallet with null", () => {
    given(merchantDecider, [registered, updated({ ethereum: '0xE2', polygon: '0xP1' })])
      .when({ type: 'SetSettlementWallet', chain: 'ethereum', address: null, now })
      .then([updated({ polygon: '0xP1' })]);
  });

  it('records nothing when the wallet is already that one, or already absent', () => {
    given(merchantDecider, [registered])
      .when({
        type: 'SetSettlementWallet',
        chain: 'ethereum',
        address: '0x00000000000000000000000000000000000000E1',
        now,
      })
      .then([]);
    given(merchantDecider, [registered])
      .when({ type: 'SetSettlementWallet', chain: 'bitcoin', address: null, now })
      .then([]);
  });

  it('refuses a merchant that does not exist', () => {
    given(merchantDecider, [])
      .when({ type: 'SetSettlementWallet', chain: 'tron', address: 'TX1', now })
      .thenError('not_found', 'Merchant not found');
  });
});
