// The timer that expires unused refund claim links (refunds.md), on its own
// to-do table, `refund_claims`: one row per claim link still waiting for the
// customer's address, with when it runs out. Its follower of the event log
// writes the rows in the same transaction as its checkpoint (a crash replays
// at most one batch), so the timer reads no read model and waits for no
// projector. The refund's decider has the last word: a claim given or
// expired in between is left as it is.
import type { Kysely, Migration } from 'kysely';
import type { Clock } from '../adapters/clock.ts';
import type { Projector } from '../adapters/event-store/followers.ts';
import type { RecordedEvent } from '../adapters/event-store/port.ts';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { ddl, migrate } from '../adapters/sql/migrate.ts';
import type { RefundCreated } from '../domain/refund.ts';
import { streams } from '../domain/streams.ts';
import { Periodic, type PeriodicOptions } from './periodic.ts';
import type { RefundCommands } from './refunds.ts';

interface ClaimTables {
  refund_claims: { refund_id: string; expires_at: Date };
}

export const claimMigrations: Record<string, Migration> = {
  '0001_refund_claims': ddl(
    'create table refund_claims (refund_id uuid primary key, expires_at timestamptz not null)',
    'create index refund_claims_expires_at on refund_claims (expires_at)',
  ),
};

export async function migrateRefundClaims(database: SqlDatabase): Promise<void> {
  await migrate(database.db, 'refund_claim_migrations', claimMigrations);
}

/**
 * A refund created without a destination waits for the customer's claim;
 * any later event of it (claimed, canceled, expired) ends the wait, as no
 * event takes a refund back to `awaiting_destination` (domain/refund.ts, evolve).
 */
export const refundClaimsProjector: Projector = {
  name: 'refund-claims',
  tables: ['refund_claims'],
  async apply(trx: Kysely<ClaimTables>, recorded: RecordedEvent) {
    if (!streams.refund.holds(recorded.streamId)) return;
    const refundId = streams.refund.idOf(recorded.streamId);
    if (recorded.type !== 'RefundCreated') {
      await trx.deleteFrom('refund_claims').where('refund_id', '=', refundId).execute();
      return;
    }
    const { destination, claimExpiresAt } = recorded.data as RefundCreated['data'];
    if (destination !== null) return;
    await trx
      .insertInto('refund_claims')
      .values({ refund_id: refundId, expires_at: new Date(claimExpiresAt) })
      .onConflict((oc) => oc.column('refund_id').doNothing())
      .execute();
  },
};

/** Expires claim links never used once their time is up on the business clock. */
export class RefundExpiry extends Periodic {
  constructor(
    private readonly db: Kysely<any>,
    private readonly refunds: Pick<RefundCommands, 'expire'>,
    private readonly clock: Clock,
    options: PeriodicOptions = {},
  ) {
    super(options);
  }

  pass = () => this.expireDue();

  async expireDue(): Promise<number> {
    const due = await (this.db as Kysely<ClaimTables>)
      .selectFrom('refund_claims')
      .select('refund_id')
      .where('expires_at', '<=', this.clock.now())
      .orderBy('expires_at')
      .limit(100)
      .execute();
    for (const { refund_id } of due) await this.refunds.expire(refund_id);
    return due.length;
  }
}
