// The refund saga: keeps the invoice's refund ledger in step with each
// refund's life, from events alone (its manager, commands/refunds.ts, only
// sends what it returns). A refund created → its amount reserved on the
// invoice (refused there when another refund took it first: the refund is
// then canceled, saying why); a refund that will never be paid → released;
// a refund paid out → recorded as refunded.
import type { InvoiceCommand } from './invoice.ts';
import type { RefundCommand, RefundEvent } from './refund.ts';

export type RefundSagaAction =
  | { to: 'invoice'; invoiceId: string; command: InvoiceCommand }
  | { to: 'refund'; refundId: string; command: RefundCommand };

/** What is done when the invoice refuses to reserve a refund's amount. */
export const OVER_LIMIT = 'Refund exceeds the refundable amount';

export function reactToRefundEvent(refundId: string, event: RefundEvent): RefundSagaAction[] {
  const release = (invoiceId: string, now: string): RefundSagaAction[] => [
    { to: 'invoice', invoiceId, command: { type: 'ReleaseRefund', refundId, now } },
  ];
  switch (event.type) {
    case 'RefundCreated': {
      const d = event.data;
      const amount = BigInt(d.amount);
      const command: InvoiceCommand = {
        type: 'ReserveRefund',
        refundId,
        chain: d.chain,
        token: d.token,
        amount,
        now: d.createdAt,
      };
      return [{ to: 'invoice', invoiceId: d.invoiceId, command }];
    }
    case 'RefundCompleted': {
      const d = event.data;
      const command: InvoiceCommand = { type: 'RecordRefund', refundId, txHash: d.txHash, now: d.completedAt };
      return [{ to: 'invoice', invoiceId: d.invoiceId, command }];
    }
    // Never to be paid: the amount is given back to what the invoice can refund.
    case 'RefundCanceled':
      return release(event.data.invoiceId, event.data.canceledAt);
    case 'RefundExpired':
      return release(event.data.invoiceId, event.data.expiredAt);
    case 'RefundFailed':
      return event.data.retryAt === null ? release(event.data.invoiceId, event.data.failedAt) : [];
    default:
      return [];
  }
}

/** The saga's compensation: a refund whose reservation the invoice refused is canceled, saying why. */
export function cancelOverLimit(refundId: string, now: string): Extract<RefundSagaAction, { to: 'refund' }> {
  return { to: 'refund', refundId, command: { type: 'Cancel', now, reason: OVER_LIMIT } };
}
