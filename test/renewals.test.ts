// The renewal scheduler's pass over its to-do table: every subscriber due is
// stepped, one step's failure is reported and the others still go, and the
// pass counts only the subscribers a step changed.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Kysely } from 'kysely';
import { openPglite } from '../adapters/sql/database.ts';
import { migrateRenewals, RenewalScheduler } from '../commands/renewals.ts';

const NOW = new Date('2026-01-10T00:00:00Z');
const EARLIER = new Date('2026-01-09T00:00:00Z');
const id = (n: number) => `00000000-0000-4000-8000-00000000000${n}`;

describe('RenewalScheduler.runDue', () => {
  it('steps every subscriber due, reports a failure and goes on, and counts those changed', async () => {
    const database = await openPglite('memory://');
    try {
      await migrateRenewals(database);
      const db = database.db as Kysely<any>;
      // Three periods ended; one unpaid renewal past its grace.
      await db
        .insertInto('renewals_due')
        .values([1, 2, 3].map((n) => ({ subscriber_id: id(n), period_ends_at: EARLIER, invoice_id: id(n + 4) })))
        .execute();
      await db
        .insertInto('renewals_due')
        .values({ subscriber_id: id(4), grace_ends_at: EARLIER, invoice_id: id(8) })
        .execute();
      await db
        .insertInto('unpaid_subscriber_invoices')
        .values({ invoice_id: id(8) })
        .execute();

      const renewed: string[] = [];
      const errors: unknown[] = [];
      const scheduler = new RenewalScheduler(
        db,
        {
          renew: async (subscriberId) => {
            if (subscriberId === id(1)) throw new Error('node down');
            renewed.push(subscriberId);
            return subscriberId === id(2); // id(3): nothing to do after all
          },
          markPastDue: async (subscriberId) => subscriberId === id(4),
        } as ConstructorParameters<typeof RenewalScheduler>[1],
        { now: () => NOW },
        { onError: (error) => errors.push(error) },
      );

      assert.equal(await scheduler.runDue(), 2, 'id(2) renewed and id(4) past due');
      assert.deepEqual(renewed.sort(), [id(2), id(3)]);
      assert.equal(errors.length, 1);
    } finally {
      await database.close();
    }
  });
});
