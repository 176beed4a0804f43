// The settlement saga: given an event, then the commands it issues. It reads
// nothing, so each case is the event alone.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { InvoiceEvent } from '../domain/invoice.ts';
import { reactToSettlementEvent, type SettlementPolicy } from '../domain/settlement-saga.ts';
import { settlementIdOf, type SettlementEvent } from '../domain/settlement.ts';

const INVOICE_ID = '6f1d3c9e-8a2b-4c5d-9e0f-112233445566';
const MERCHANT_ID = '0a1b2c3d-4e5f-4a6b-8c7d-8e9f00112233';
const T = '2026-11-25T10:00:00.000Z';
const policy: SettlementPolicy = {
  platformFeeBps: 100,
  networkFeeEstimate: (chain, token) => (token === 'BTC' ? 2_000n : 0n),
};
const receipts = {
  merchantId: MERCHANT_ID,
  address: 'bc1qdeposit',
  derivationIndex: 41,
  tokenDecimals: 8,
  payments: [
    { paymentId: 'p1', txHash: 'aa', index: 1, amount: '60000' },
    { paymentId: 'p2', txHash: 'bb', index: 0, amount: '40000' },
  ],
};
const sources = [
  { txHash: 'aa', index: 1, amount: '60000' },
  { txHash: 'bb', index: 0, amount: '40000' },
];
const react = (event: InvoiceEvent) => reactToSettlementEvent({ invoiceId: INVOICE_ID, event: event as never }, policy);

describe('settlement saga', () => {
  it('asks for a settlement of the confirmed payments when the invoice is confirmed', () => {
    const settlementId = settlementIdOf(INVOICE_ID);
    assert.deepEqual(
      react({
        type: 'InvoiceConfirmed',
        data: { confirmedAt: T, chain: 'bitcoin', token: 'BTC', totalReceived: '100000', ...receipts },
      }),
      [
        {
          to: 'settlement',
          settlementId,
          command: {
            type: 'RequestSettlement',
            settlementId,
            invoiceId: INVOICE_ID,
            merchantId: MERCHANT_ID,
            chain: 'bitcoin',
            token: 'BTC',
            tokenDecimals: 8,
            fromAddress: 'bc1qdeposit',
            derivationIndex: 41,
            grossAmount: 100_000n,
            networkFee: 2_000n,
            platformFeeBps: 100,
            merchantWallet: null,
            sources,
            now: T,
          },
        },
      ],
    );
  });

  it('re-prices the settlement when the receipts change after confirmation', () => {
    assert.deepEqual(
      react({
        type: 'InvoiceReceiptsChanged',
        data: { changedAt: T, chain: 'bitcoin', token: 'BTC', totalReceived: '100000', ...receipts },
      }),
      [
        {
          to: 'settlement',
          settlementId: settlementIdOf(INVOICE_ID),
          command: { type: 'RepriceForReceipts', grossAmount: 100_000n, fromAddress: 'bc1qdeposit', sources, now: T },
        },
      ],
    );
  });

  it('settles the invoice with what reached the merchant when the payout completes', () => {
    const completed: SettlementEvent = {
      type: 'SettlementCompleted',
      data: {
        txHash: 'cc',
        blockNumber: 7,
        confirmations: 2,
        completedAt: T,
        invoiceId: INVOICE_ID,
        netAmount: '97000',
        token: 'BTC',
        tokenDecimals: 8,
      },
    };
    assert.deepEqual(reactToSettlementEvent({ event: completed as never }, policy), [
      {
        to: 'invoice',
        invoiceId: INVOICE_ID,
        command: {
          type: 'SettleInvoice',
          settlementId: settlementIdOf(INVOICE_ID),
          settledAmount: '0.00097000',
          settledCurrency: 'BTC',
          txHash: 'cc',
          settledAt: T,
        },
      },
    ]);
  });

  it('asks nothing of an event recorded before it carried what the saga needs (its manager completes it)', () => {
    assert.deepEqual(
      react({ type: 'InvoiceConfirmed', data: { confirmedAt: T, chain: 'bitcoin', token: 'BTC', totalReceived: '1' } }),
      [],
    );
  });
});
