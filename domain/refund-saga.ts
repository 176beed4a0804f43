// The refund saga: keeps the invoice's refund ledger in step with each
// refund's life, from events alone (its manager, commands/refunds.ts, only
// sends what it returns). A refund created → its amount reserved on the
// invoice (refused there when another refund took it first: the refund is
// then canceled, saying why); a refund that will never be paid → released;
// a refund paid out → recorded as refunded. A refund paid from the deposit
// holds the invoice's settlement back; its end lets the settlement go on.
import type { InvoiceCommand } from './invoice.ts';
import type { Refund, RefundCommand, RefundEvent } from './refund.ts';
import { settlementIdOf, type RefundCoins, type SettlementCommand } from './settlement.ts';

export type RefundSagaAction =
  | { to: 'invoice'; invoiceId: string; command: InvoiceCommand }
  | { to: 'refund'; refundId: string; command: RefundCommand }
  | { to: 'settlement'; settlementId: string; command: SettlementCommand };

/** What is done when the invoice refuses to reserve a refund's amount. */
export const OVER_LIMIT = 'Refund exceeds the refundable amount';

export function reactToRefundEvent(refundId: string, event: RefundEvent): RefundSagaAction[] {
  const release = (invoiceId: string, now: string): RefundSagaAction[] => [
    { to: 'invoice', invoiceId, command: { type: 'ReleaseRefund', refundId, now } },
  ];
  const endHold = (invoiceId: string, paid: boolean, now: string, coins?: RefundCoins): RefundSagaAction => ({
    to: 'settlement',
    settlementId: settlementIdOf(invoiceId),
    command: { type: 'ReleaseRefund', refundId, paid, ...(coins && { coins }), now },
  });
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
      const recorded: RefundSagaAction = { to: 'invoice', invoiceId: d.invoiceId, command };
      // The settlement then pays out the refund's change instead of the coins it spent (a UTXO chain).
      return d.fundedFrom === 'deposit' ? [recorded, endHold(d.invoiceId, true, d.completedAt, d.coins)] : [recorded];
    }
    // Never to be paid: the amount is given back to what the invoice can refund.
    case 'RefundCanceled': {
      // A hold taken by an approval that crashed before it was recorded is given back too
      // (a settlement with no hold for this refund changes nothing).
      const { invoiceId, canceledAt } = event.data;
      return [...release(invoiceId, canceledAt), endHold(invoiceId, false, canceledAt)];
    }
    case 'RefundExpired':
      return release(event.data.invoiceId, event.data.expiredAt);
    case 'RefundFailed': {
      const d = event.data;
      if (d.retryAt !== null) return [];
      const released = release(d.invoiceId, d.failedAt);
      return d.fundedFrom === 'deposit' ? [...released, endHold(d.invoiceId, false, d.failedAt)] : released;
    }
    default:
      return [];
  }
}

/**
 * How long a hold may wait for its refund's approval: an approval takes the
 * hold first and records `Approve` a moment later (commands/refunds.ts
 * `approve`), so a younger one may be an approval still on its way; an older
 * one's approval stopped before it was recorded (a crash), or is stalled.
 */
export const UNRECORDED_APPROVAL_GRACE_MS = 5 * 60_000;

/**
 * What gives back a refund's hold on its deposit that nothing else will
 * (commands/refund-holds.ts), the refund standing as `refund` at `now`:
 * not approved (an approval that stopped after taking it), only once the
 * hold is older than the grace and no payout of the refund found it, which
 * the settlement's stream decides (ReleaseUnapprovedHold), so an approval
 * recorded meanwhile either finds its hold first or takes it again; canceled
 * or expired, given back as the saga does (whose release may have come
 * before the hold); paid from the refund wallet, given back whatever its
 * status (a hold left by a second approval that stopped after taking it).
 * Nothing for a refund paid from the deposit, or failed (a failure for
 * good is given back by the saga, after its hold).
 */
export function releaseOfHold(refundId: string, refund: Refund | null, now: Date): SettlementCommand | undefined {
  if (!refund) return undefined;
  const at = now.toISOString();
  if (refund.status === 'awaiting_approval' || refund.status === 'awaiting_destination') {
    const heldBefore = new Date(now.getTime() - UNRECORDED_APPROVAL_GRACE_MS).toISOString();
    return { type: 'ReleaseUnapprovedHold', refundId, heldBefore, now: at };
  }
  const neverPaid = refund.status === 'canceled' || refund.status === 'expired';
  // Paid from the refund wallet (another approval chose it, or its payout moved it there before any
  // transaction from the deposit): a hold on the deposit is no longer its own, whatever its status.
  const paidElsewhere = refund.payer?.fundedFrom === 'refund_wallet';
  return neverPaid || paidElsewhere ? { type: 'ReleaseRefund', refundId, paid: false, now: at } : undefined;
}

/** The saga's compensation: a refund whose reservation the invoice refused is canceled, saying why. */
export function cancelOverLimit(refundId: string, now: string): Extract<RefundSagaAction, { to: 'refund' }> {
  return { to: 'refund', refundId, command: { type: 'Cancel', now, reason: OVER_LIMIT } };
}
