// Projects the refund holds on settlement streams into `refund_holds`, and
// reads from it the holds the release gives back (commands/refund-holds.ts),
// and those whose approval was never recorded and that the release did not
// give back, for the operator's attention list and the merchant's "Needs
// attention".
//
// Why a read-time query rather than an event (as SettlementAttentionRaised
// is): a hold is stuck when its refund's approval did not follow it within a
// grace. Both facts are recorded already (SettlementRefundHeld, and the refund
// still awaiting_approval); "did not follow within" is only time passing, so
// an event would need a timer to notice it and a second event to take it back
// when the merchant approves or cancels. The query sees both at once and
// needs neither: the item is there exactly while the hold stays unapproved.
import type { Kysely } from 'kysely';
import type { Projector } from '../adapters/event-store/followers.ts';
import { settlementDecider, type SettlementEvent, type SettlementState } from '../domain/settlement.ts';
import { UNRECORDED_APPROVAL_GRACE_MS } from '../domain/refund-saga.ts';
import { streams } from '../domain/streams.ts';
import { StreamFolds, upsertRows } from './batch.ts';
import type { ReadModelTables, RefundHoldsTable } from './schema.ts';

const folds = new StreamFolds<SettlementState, SettlementEvent>(streams.settlement.holds, settlementDecider);

/** Each settlement stream of a batch: its rows replaced by its unpaid holds as it stands after the batch. */
export const refundHoldsProjector: Projector<Map<string, SettlementState>> = {
  name: 'refund_holds',
  tables: ['refund_holds'],
  prepare: (batch, store) => folds.ofBatch(batch, store),
  async applyBatch(trx: Kysely<ReadModelTables>, _batch, states) {
    if (states.size === 0) return;
    const rows: RefundHoldsTable[] = [];
    const settlementIds: string[] = [];
    for (const [streamId, state] of states) {
      const settlementId = streams.settlement.idOf(streamId);
      settlementIds.push(settlementId);
      for (const hold of state?.refundHolds ?? []) {
        if (hold.paid) continue;
        rows.push({ settlement_id: settlementId, refund_id: hold.refundId, held_at: new Date(hold.heldAt) });
      }
    }
    await trx.deleteFrom('refund_holds').where('settlement_id', 'in', settlementIds).execute();
    await upsertRows(trx, 'refund_holds', ['settlement_id', 'refund_id'], rows);
  },
};

/**
 * How long after the grace a hold still unapproved is reported: the release
 * (commands/refund-holds.ts) gives it back at the grace, within a pass; one
 * still there this much later is one the release is not giving back (not
 * running, or failing), and a person approves again or cancels.
 */
export const RELEASE_OVERDUE_MS = 5 * 60_000;

/**
 * The holds the release looks at (commands/refund-holds.ts): those of a
 * refund not approved and held longer than the grace, or of a refund
 * canceled or expired (its saga found no hold when it took the hold after
 * all), or of a refund paid from the refund wallet (another approval chose
 * it). Not a failed one: a failure for good gives its hold back by the saga
 * (RefundFailed), and those still to be retried would crowd the pass. The
 * refund's and the settlement's streams decide; this only finds them.
 * Oldest first.
 */
export function holdsToRelease(db: Kysely<ReadModelTables>, now: Date, limit: number) {
  const heldBefore = new Date(now.getTime() - UNRECORDED_APPROVAL_GRACE_MS);
  return db
    .selectFrom('refund_holds')
    .innerJoin('refunds', 'refunds.id', 'refund_holds.refund_id')
    .select(['refund_holds.refund_id as refundId', 'refund_holds.settlement_id as settlementId'])
    .where((eb) =>
      eb.or([
        eb.and([
          eb('refunds.status', 'in', ['awaiting_destination', 'awaiting_approval']),
          eb('refund_holds.held_at', '<=', heldBefore),
        ]),
        eb('refunds.status', 'in', ['canceled', 'expired']),
        eb('refunds.funded_from', '=', 'refund_wallet'),
      ]),
    )
    .orderBy('refund_holds.held_at')
    .limit(limit)
    .execute();
}

/**
 * The refunds holding a deposit (and so the invoice's settlement, which
 * prepares nothing while a refund from its deposit is unpaid) without an
 * approval for longer than the grace and the release's overdue time (the
 * release did not give it back): the merchant approves again (the refund
 * takes the hold it has) or cancels (the hold is given back).
 * Oldest first; one merchant's (the dashboard) or every merchant's (the operator).
 */
export function holdsWithoutApproval(db: Kysely<ReadModelTables>, now: Date, limit: number, merchantId?: string) {
  let query = db
    .selectFrom('refund_holds')
    .innerJoin('refunds', 'refunds.id', 'refund_holds.refund_id')
    .selectAll('refunds')
    .select(['refund_holds.settlement_id', 'refund_holds.held_at'])
    .where('refunds.status', '=', 'awaiting_approval')
    .where('refund_holds.held_at', '<=', new Date(now.getTime() - UNRECORDED_APPROVAL_GRACE_MS - RELEASE_OVERDUE_MS));
  if (merchantId) query = query.where('refunds.merchant_id', '=', merchantId);
  return query.orderBy('refund_holds.held_at').limit(limit).execute();
}

/** What a person is told of a refund holding its deposit without an approval. */
export const unapprovedHoldWhat = (r: {
  id: string;
  amount: string;
  token: string;
  chain: string;
  invoice_id: string;
}) =>
  `Refund ${r.id} of ${r.amount} ${r.token} on ${r.chain} holds the settlement of invoice ${r.invoice_id}, ` +
  `but its approval was never recorded: approve refund ${r.id} again, or cancel it`;
