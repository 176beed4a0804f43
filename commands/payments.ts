// From chain observations to payments, and from payments to invoices.
import type { Clock } from '../adapters/clock.ts';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import type { ChainBlock, ChainTransfer } from '../adapters/chains/port.ts';
import { findToken, type ChainName } from '../domain/catalogue.ts';
import {
  classifyPayment,
  invoiceDecider,
  invoiceStreamName,
  type Invoice,
  type InvoiceCommand,
} from '../domain/invoice.ts';
import {
  payoutSources,
  refundChangeOf,
  requestedSettlement,
  settlementDecider,
  settlementStreamOf,
} from '../domain/settlement.ts';
import { paymentDecider, paymentStreamName, type PaymentEvent } from '../domain/payment.ts';
import type { Reactor } from '../adapters/event-store/followers.ts';
import { handleCommand, loadState, unlessRefused } from './handle.ts';
import { streams } from '../domain/streams.ts';

export interface WatchedAddress {
  invoiceId: string;
  chain: ChainName;
  address: string;
}

/**
 * A transaction that spends one of the deposit's own coins (a payment it
 * received, or the change a refund paid back to it) is the service's payout:
 * only the deposit key can sign it. What it pays back to the deposit is a
 * refund's change, which the settlement pays out, not a payment.
 */
async function isChangeOfOwnPayout(store: EventStore, invoice: Invoice, spends: { txHash: string; index: number }[]) {
  const key = (c: { txHash: string; index: number }) => `${c.txHash}:${c.index}`;
  const state = await loadState(store, settlementDecider, settlementStreamOf(invoice.id));
  const settlement = requestedSettlement(state);
  const coins = new Set([
    ...invoice.payments.flatMap((p) => (p.outputIndex === undefined ? [] : [key({ ...p, index: p.outputIndex })])),
    // Before the request, the change of the refunds paid from the deposit meanwhile.
    ...(settlement ? (payoutSources(settlement) ?? []) : refundChangeOf(state)).map(key),
  ]);
  return spends.some((s) => coins.has(key(s)));
}

export function paymentCommands(store: EventStore, clock: Clock) {
  return {
    /** Records a transfer to an invoice's address; seeing the same transfer again changes nothing. */
    async detect(
      chain: ChainName,
      block: ChainBlock,
      transfer: ChainTransfer,
      watched: WatchedAddress,
      confirmations: number,
      requiredConfirmations: number,
    ): Promise<string | undefined> {
      const token = findToken(chain, transfer.token);
      if (!token) return undefined; // a token the catalogue does not know is not a payment we can value
      const invoice = await loadState(store, invoiceDecider, invoiceStreamName(watched.invoiceId));
      if (!invoice) return undefined;
      if (transfer.spends?.length && (await isChangeOfOwnPayout(store, invoice, transfer.spends))) return undefined;
      const detectedAt = clock.now().toISOString();
      const paidAt = block.timestamp.toISOString();
      const { wrongToken } = classifyPayment(invoice, {
        chain,
        token: token.symbol,
        address: watched.address,
        detectedAt,
        paidAt,
      });
      const { position } = await handleCommand(
        store,
        paymentDecider,
        paymentStreamName(chain, transfer.txHash, transfer.index),
        {
          type: 'DetectPayment',
          chain,
          token: token.symbol,
          tokenDecimals: token.decimals,
          amount: transfer.amount,
          toAddress: watched.address,
          txHash: transfer.txHash,
          outputIndex: transfer.index,
          blockNumber: block.height,
          blockHash: block.hash,
          invoiceId: watched.invoiceId,
          tokenMatchesInvoice: !wrongToken,
          confirmations,
          requiredConfirmations,
          detectedAt,
          paidAt,
        },
      );
      return position;
    },

    async updateConfirmations(
      chain: string,
      txHash: string,
      index: number,
      confirmations: number,
    ): Promise<string | undefined> {
      const { position } = await handleCommand(store, paymentDecider, paymentStreamName(chain, txHash, index), {
        type: 'UpdateConfirmations',
        confirmations,
        observedAt: clock.now().toISOString(),
      });
      return position;
    },

    async recordReorg(chain: string, txHash: string, index: number, blockHash: string): Promise<string | undefined> {
      const { position } = await handleCommand(store, paymentDecider, paymentStreamName(chain, txHash, index), {
        type: 'RecordReorg',
        blockHash,
        reorgedAt: clock.now().toISOString(),
      });
      return position;
    },
  };
}

export type PaymentCommands = ReturnType<typeof paymentCommands>;

/**
 * The process manager that carries payments onto their invoices: detected →
 * applied, confirmed → confirmed on the invoice, reorged → withdrawn. Its
 * commands derive their event ids from the payment event, so a repeat after
 * a crash appends nothing.
 */
export function paymentsToInvoices(store: EventStore): Reactor {
  return {
    name: 'payments-to-invoices',
    async react(recorded: RecordedEvent) {
      if (!streams.payment.holds(recorded.streamId)) return;
      const event = { type: recorded.type, data: recorded.data } as PaymentEvent;
      const options = { causationId: recorded.id, correlationId: recorded.metadata.correlationId };
      const carried = carriedToInvoice(event);
      if (!carried) return;
      await unlessRefused(() =>
        handleCommand(store, invoiceDecider, invoiceStreamName(carried.invoiceId), carried.command, options),
      );
    },
  };
}

/** What a payment event asks of its invoice: applied, confirmed, withdrawn; nothing for the others. */
function carriedToInvoice(event: PaymentEvent): { invoiceId: string; command: InvoiceCommand } | undefined {
  switch (event.type) {
    case 'PaymentDetected': {
      const d = event.data;
      const command: InvoiceCommand = {
        type: 'ApplyPayment',
        paymentId: d.paymentId,
        chain: d.chain,
        token: d.token,
        tokenDecimals: d.tokenDecimals,
        address: d.toAddress,
        amount: BigInt(d.amount),
        txHash: d.txHash,
        detectedAt: d.detectedAt,
        ...(d.paidAt !== undefined && { paidAt: d.paidAt }),
        outputIndex: d.outputIndex,
      };
      return { invoiceId: d.invoiceId, command };
    }
    case 'PaymentConfirmed': {
      const { invoiceId, paymentId, confirmedAt } = event.data;
      return { invoiceId, command: { type: 'ConfirmInvoicePayment', paymentId, confirmedAt } };
    }
    case 'PaymentReorged': {
      const { invoiceId, paymentId, reorgedAt } = event.data;
      return { invoiceId, command: { type: 'WithdrawPayment', paymentId, withdrawnAt: reorgedAt } };
    }
  }
  return undefined;
}
