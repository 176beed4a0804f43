// The release of refund holds nothing else gives back (refunds.md, "A hold
// whose approval was never recorded"): an approval that took its hold on the
// settlement's stream and stopped before recording `Approve` leaves the hold,
// and the settlement waits for it. Past the grace it is given back by itself.
// Safe against an approval that was only slow: the refund's payout finds (and
// marks) its hold on the same stream before it pays from the deposit, takes it
// again, or pays from the refund wallet (RefundPayouts.keepsItsHold); the
// settlement's decider takes only one of the two.
import type { Clock } from '../adapters/clock.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { DomainError } from '../domain/decider.ts';
import { refundDecider, refundStreamName } from '../domain/refund.ts';
import { releaseOfHold } from '../domain/refund-saga.ts';
import { settlementDecider, settlementStreamName } from '../domain/settlement.ts';
import { handleCommand, loadState } from './handle.ts';
import { Periodic, type PeriodicOptions } from './periodic.ts';

/** A hold on a settlement's stream, found by the read model (projections/refund-holds.ts holdsToRelease). */
export interface HeldRefund {
  refundId: string;
  settlementId: string;
}

/** Gives back, on the business clock, the holds of refunds not approved past the grace or ended unpaid. */
export class RefundHoldRelease extends Periodic {
  constructor(
    private readonly store: EventStore,
    private readonly candidates: (now: Date) => Promise<HeldRefund[]>,
    private readonly clock: Clock,
    options: PeriodicOptions = {},
  ) {
    super(options);
  }

  pass = () => this.releaseDue();

  /** How many holds this pass gave back. */
  async releaseDue(): Promise<number> {
    const now = this.clock.now();
    let released = 0;
    for (const { refundId, settlementId } of await this.candidates(now)) {
      const refund = await loadState(this.store, refundDecider, refundStreamName(refundId));
      const command = releaseOfHold(refundId, refund, now);
      if (!command) continue;
      try {
        const { events } = await handleCommand(
          this.store,
          settlementDecider,
          settlementStreamName(settlementId),
          command,
        );
        if (events.length > 0) released++;
      } catch (error) {
        // One settlement refusing does not stop the others; the next pass looks again.
        if (!(error instanceof DomainError)) throw error;
      }
    }
    return released;
  }
}
