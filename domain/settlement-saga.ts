// The settlement saga: what must be paid, decided from events alone
// (react(event) → commands, as fmodel-ts separates a saga from the manager
// that runs it). The events carry what it needs — the merchant, the deposit
// address and its derivation index, the counted and confirmed payments — so
// it reads nothing; its manager (commands/settlements.ts) only sends the
// commands it returns.
import { formatUnits } from './money.ts';
import type { InvoiceCommand, InvoiceConfirmed, InvoiceReceiptsChanged, ReceivedPayment } from './invoice.ts';
import { settlementIdOf, type PayoutSource, type SettlementCommand, type SettlementCompleted } from './settlement.ts';

export type SettlementSagaAction =
  | { to: 'settlement'; settlementId: string; command: SettlementCommand }
  | { to: 'invoice'; invoiceId: string; command: InvoiceCommand };

export interface SettlementPolicy {
  platformFeeBps: number;
  /**
   * What sending `token` on `chain` is expected to cost, for the amount shown
   * while the settlement waits; the payout engine prices it again when it
   * prepares the transaction, so an estimate of 0 only shows a larger net.
   */
  networkFeeEstimate(chain: string, token: string): bigint;
}

/** The saga's inputs: the invoice events that change what is owed, and a completed payout. */
export type SettlementSagaEvent =
  | { invoiceId: string; event: InvoiceConfirmed | InvoiceReceiptsChanged }
  | { invoiceId?: undefined; event: SettlementCompleted };

const sourcesOf = (payments: ReceivedPayment[]): PayoutSource[] =>
  payments.map(({ txHash, index, amount }) => ({ txHash, index, amount }));
const totalOf = (payments: ReceivedPayment[]) => payments.reduce((total, p) => total + BigInt(p.amount), 0n);

export function reactToSettlementEvent(input: SettlementSagaEvent, policy: SettlementPolicy): SettlementSagaAction[] {
  const { event } = input;
  switch (event.type) {
    case 'InvoiceConfirmed': {
      const d = event.data;
      // Recorded before invoices carried their receipts: the manager completes it first.
      if (d.merchantId === undefined || d.payments === undefined) return [];
      const settlementId = settlementIdOf(input.invoiceId!);
      return [
        {
          to: 'settlement',
          settlementId,
          command: {
            type: 'RequestSettlement',
            settlementId,
            invoiceId: input.invoiceId!,
            merchantId: d.merchantId,
            chain: d.chain,
            token: d.token,
            tokenDecimals: d.tokenDecimals!,
            fromAddress: d.address!,
            derivationIndex: d.derivationIndex!,
            grossAmount: totalOf(d.payments),
            networkFee: policy.networkFeeEstimate(d.chain, d.token),
            platformFeeBps: policy.platformFeeBps,
            // The engine takes the merchant's wallet as it stands when it prepares the payout.
            merchantWallet: null,
            sources: sourcesOf(d.payments),
            now: d.confirmedAt,
          },
        },
      ];
    }
    case 'InvoiceReceiptsChanged': {
      const d = event.data;
      return [
        {
          to: 'settlement',
          settlementId: settlementIdOf(input.invoiceId!),
          command: {
            type: 'RepriceForReceipts',
            grossAmount: totalOf(d.payments),
            fromAddress: d.address,
            sources: sourcesOf(d.payments),
            now: d.changedAt,
          },
        },
      ];
    }
    case 'SettlementCompleted': {
      const d = event.data;
      if (d.invoiceId === undefined || d.netAmount === undefined) return [];
      return [
        {
          to: 'invoice',
          invoiceId: d.invoiceId,
          command: {
            type: 'SettleInvoice',
            settlementId: settlementIdOf(d.invoiceId),
            settledAmount: formatUnits(BigInt(d.netAmount), d.tokenDecimals!, d.tokenDecimals!),
            settledCurrency: d.token!,
            txHash: d.txHash,
            settledAt: d.completedAt,
          },
        },
      ];
    }
  }
}
