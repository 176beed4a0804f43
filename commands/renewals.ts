// The renewal scheduler: bills each subscriber's next period, ends those
// cancelled at their period's end, and marks past due those whose renewal
// is unpaid when its grace runs out, on the business clock.
//
// It finds its work in its own to-do tables, kept by its follower of the
// event log in the same transaction as its checkpoint (a crash replays at
// most one batch), so it reads no read model and waits for no projector:
// - `renewals_due`, per subscriber with a step ahead: when its period ends
//   (to renew, or to end it) and when the grace of its unpaid renewal does;
// - `unpaid_subscriber_invoices`, the subscribers' invoices still open and
//   not paid in full: one paid in full only waits for its confirmations.
// The commands decide again on the streams: a step the tables show a
// moment late changes nothing.
import type { Kysely, Migration } from 'kysely';
import type { Clock } from '../adapters/clock.ts';
import type { Projector } from '../adapters/event-store/followers.ts';
import { foldsOf, StreamFolds, type Folded } from '../adapters/event-store/stream-folds.ts';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { ddl, migrate } from '../adapters/sql/migrate.ts';
import { replaceRows } from '../adapters/sql/rows.ts';
import { awaitsPayment, invoiceDecider, type Invoice } from '../domain/invoice.ts';
import { streams } from '../domain/streams.ts';
import { currentInvoice, subscriberDecider, subscriberIn, type Subscriber } from '../domain/subscriber.ts';
import { Periodic, type PeriodicOptions } from './periodic.ts';
import type { SubscriptionCommands } from './subscriptions.ts';

interface RenewalTables {
  renewals_due: {
    subscriber_id: string;
    /** The period's end, when it is then renewed or ended; else null. */
    period_ends_at: Date | null;
    /** The grace's end of the current period's unpaid renewal; else null. */
    grace_ends_at: Date | null;
    invoice_id: string;
  };
  unpaid_subscriber_invoices: { invoice_id: string };
}

export const renewalMigrations: Record<string, Migration> = {
  '0001_renewals_due': ddl(
    `create table renewals_due (
      subscriber_id uuid primary key,
      period_ends_at timestamptz,
      grace_ends_at timestamptz,
      invoice_id uuid not null
    )`,
    'create index renewals_due_period on renewals_due (period_ends_at)',
    'create index renewals_due_grace on renewals_due (grace_ends_at)',
    'create table unpaid_subscriber_invoices (invoice_id uuid primary key)',
  ),
};

export async function migrateRenewals(database: SqlDatabase): Promise<void> {
  await migrate(database.db, 'renewal_migrations', renewalMigrations);
}

const folds = {
  subscribers: new StreamFolds(streams.subscriber.holds, subscriberDecider),
  invoices: new StreamFolds(streams.invoice.holds, invoiceDecider),
};

/** A subscriber's steps ahead, as the scheduler's queries of the subscribers read model chose them before. */
function stepsOf(s: Subscriber): RenewalTables['renewals_due'] | undefined {
  const invoice = currentInvoice(s);
  const periodEnds = s.status !== 'cancelled' && (s.cancelAtEnd || (s.status === 'active' && invoice.paidAt !== null));
  const graceEnds = s.status === 'active' && s.period > 0 && invoice.paidAt === null;
  if (!periodEnds && !graceEnds) return undefined;
  return {
    subscriber_id: s.id,
    period_ends_at: periodEnds ? new Date(s.currentPeriodEnd) : null,
    grace_ends_at: graceEnds ? new Date(s.gracePeriodEndsAt) : null,
    invoice_id: invoice.invoiceId,
  };
}

export const renewalsProjector: Projector<Folded<typeof folds>> = {
  name: 'renewals-due',
  tables: ['renewals_due', 'unpaid_subscriber_invoices'],
  prepare: foldsOf(folds),

  async applyBatch(trx: Kysely<RenewalTables>, _batch, { subscribers, invoices }) {
    const enrolled = [...subscribers.values()].map(subscriberIn).filter((s) => s !== null);
    const steps = enrolled.map(stepsOf).filter((row) => row !== undefined);
    const none = enrolled.filter((s) => !steps.some((row) => row.subscriber_id === s.id)).map((s) => s.id);
    await replaceRows(trx, 'renewals_due', 'subscriber_id', steps, none);
    const ofSubscribers = [...invoices.values()].filter((i) => i !== null && i.subscriberId !== null) as Invoice[];
    const unpaid = ofSubscribers.filter(awaitsPayment).map((i) => ({ invoice_id: i.id }));
    const paid = ofSubscribers.filter((i) => !awaitsPayment(i)).map((i) => i.id);
    await replaceRows(trx, 'unpaid_subscriber_invoices', 'invoice_id', unpaid, paid);
  },
};

/**
 * Bills subscribers on the business clock: at the end of a paid period, the
 * next period's invoice (or the cancellation asked for at period end); at the
 * end of a renewal's grace period, past due. Expiry of the invoices themselves
 * is the expiry scheduler's; the subscription manager turns it into a
 * cancellation. Every step is decided again on the subscriber's stream.
 */
export class RenewalScheduler extends Periodic {
  constructor(
    private readonly db: Kysely<any>,
    private readonly subscriptions: Pick<SubscriptionCommands, 'renew' | 'markPastDue'>,
    private readonly clock: Clock,
    private readonly options: PeriodicOptions = {},
  ) {
    super(options);
  }

  pass = () => this.runDue();

  /** Does what is due; returns how many subscribers it changed. */
  async runDue(): Promise<number> {
    const db = this.db as Kysely<RenewalTables>;
    const now = this.clock.now();
    const periodsEnded = await db
      .selectFrom('renewals_due')
      .select('subscriber_id')
      .where('period_ends_at', '<=', now)
      .orderBy('period_ends_at')
      .limit(200)
      .execute();
    let changed = await this.eachStep(periodsEnded, (id) => this.subscriptions.renew(id));
    const gracesOver = await db
      .selectFrom('renewals_due')
      // Paid in full and waiting for confirmations: not past due.
      .innerJoin('unpaid_subscriber_invoices', 'unpaid_subscriber_invoices.invoice_id', 'renewals_due.invoice_id')
      .select('renewals_due.subscriber_id')
      .where('renewals_due.grace_ends_at', '<=', now)
      .orderBy('renewals_due.grace_ends_at')
      .limit(200)
      .execute();
    changed += await this.eachStep(gracesOver, (id) => this.subscriptions.markPastDue(id));
    return changed;
  }

  /** Each subscriber's step in turn, a failure reported and the others going on; how many it changed. */
  private async eachStep(due: { subscriber_id: string }[], step: (id: string) => Promise<boolean>): Promise<number> {
    let changed = 0;
    for (const { subscriber_id: id } of due) {
      try {
        if (await step(id)) changed++;
      } catch (error) {
        this.options.onError?.(error);
      }
    }
    return changed;
  }
}
