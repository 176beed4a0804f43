import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { periodEnd, planDecider, type PlanCommand, type PlanEvent } from '../domain/plan.ts';
import { given as givenFor } from './support/decider.ts';

const given = (events: PlanEvent[]) => givenFor(planDecider, events);

const PLAN_ID = '9b2f7c1e-3d4a-4b5c-8d6e-7f8091a2b3c4';
const MERCHANT_ID = '0a1b2c3d-4e5f-4a6b-8c7d-8e9f00112233';
const NOW = '2025-01-31T10:00:00.000Z';

const create: Extract<PlanCommand, { type: 'CreatePlan' }> = {
  type: 'CreatePlan',
  id: PLAN_ID,
  merchantId: MERCHANT_ID,
  name: 'Pro',
  description: 'Everything',
  amount: '19.99',
  currency: 'USD',
  interval: 'month',
  intervalCount: 1,
  gracePeriodHours: 72,
  now: NOW,
};

const created: PlanEvent = {
  type: 'PlanCreated',
  data: {
    id: PLAN_ID,
    merchantId: MERCHANT_ID,
    name: 'Pro',
    description: 'Everything',
    amount: '19.99',
    currency: 'USD',
    interval: 'month',
    intervalCount: 1,
    gracePeriodHours: 72,
    createdAt: NOW,
  },
};

describe('plan decider', () => {
  it('creates a plan, active', () => {
    given([]).when(create).then([created]);
    const plan = given([created]).state!;
    assert.equal(plan.status, 'active');
    assert.equal(plan.archivedAt, null);
    assert.equal(plan.updatedAt, NOW);
  });

  it('refuses a plan that exists already', () => {
    given([created]).when(create).thenError('conflict', `Subscription plan ${PLAN_ID} already exists`);
  });

  it('checks every term, with a clear message each', () => {
    const cases: [Partial<typeof create>, string][] = [
      [{ name: '' }, 'Name is required'],
      [{ name: '   ' }, 'Name is required'],
      [{ name: 'x'.repeat(201) }, 'Name must be at most 200 characters'],
      [{ amount: '0' }, 'Amount must be greater than 0'],
      [{ amount: '-1' }, 'Amount must be greater than 0'],
      [{ amount: '1e3' }, 'Amount must be greater than 0'],
      [{ amount: 10 as unknown as string }, 'Amount must be greater than 0'],
      [{ currency: '' }, 'Currency is required'],
      [{ currency: 'DOLLARS' }, 'Currency must be a 3-letter ISO 4217 code'],
      [{ interval: 'fortnight' as 'day' }, 'Interval must be one of day, week, month, year'],
      [{ intervalCount: 0 }, 'Interval count must be a whole number from 1 to 365'],
      [{ intervalCount: 1.5 }, 'Interval count must be a whole number from 1 to 365'],
      [{ intervalCount: 366 }, 'Interval count must be a whole number from 1 to 365'],
      [{ interval: 'month', intervalCount: 121 }, 'A billing period cannot be longer than 10 years'],
      [{ interval: 'year', intervalCount: 11 }, 'A billing period cannot be longer than 10 years'],
      [{ gracePeriodHours: 0 }, 'Grace period hours must be a whole number from 1 to 8760'],
      [{ gracePeriodHours: 8761 }, 'Grace period hours must be a whole number from 1 to 8760'],
      [{ description: 'x'.repeat(1001) }, 'Description must be at most 1000 characters'],
    ];
    for (const [change, message] of cases) {
      given([])
        .when({ ...create, ...change })
        .thenError('bad_request', message);
    }
    // The limits themselves are allowed.
    given([])
      .when({ ...create, name: 'x'.repeat(200), interval: 'year', intervalCount: 10, gracePeriodHours: 8760 })
      .then([
        {
          type: 'PlanCreated',
          data: {
            ...created.data,
            name: 'x'.repeat(200),
            interval: 'year',
            intervalCount: 10,
            gracePeriodHours: 8760,
          },
        },
      ]);
  });

  it('archives a plan once; archiving again changes nothing', () => {
    const archived: PlanEvent = { type: 'PlanArchived', data: { archivedAt: '2025-02-01T00:00:00.000Z' } };
    given([created]).when({ type: 'ArchivePlan', now: '2025-02-01T00:00:00.000Z' }).then([archived]);
    given([created, archived]).when({ type: 'ArchivePlan', now: '2025-02-02T00:00:00.000Z' }).then([]);
    const plan = given([created, archived]).state!;
    assert.equal(plan.status, 'archived');
    assert.equal(plan.archivedAt, '2025-02-01T00:00:00.000Z');
  });

  it('cannot archive a plan that does not exist', () => {
    given([]).when({ type: 'ArchivePlan', now: NOW }).thenError('not_found', 'Subscription plan not found');
  });
});

describe('billing periods', () => {
  const month = { interval: 'month', intervalCount: 1 } as const;

  it('counts days and weeks exactly', () => {
    assert.equal(periodEnd(NOW, { interval: 'day', intervalCount: 1 }, 0), '2025-02-01T10:00:00.000Z');
    assert.equal(periodEnd(NOW, { interval: 'day', intervalCount: 3 }, 1), '2025-02-06T10:00:00.000Z');
    assert.equal(periodEnd(NOW, { interval: 'week', intervalCount: 2 }, 0), '2025-02-14T10:00:00.000Z');
  });

  it('keeps the day of the month, on the last day when a month is shorter, without drifting', () => {
    assert.equal(periodEnd(NOW, month, 0), '2025-02-28T10:00:00.000Z');
    assert.equal(periodEnd(NOW, month, 1), '2025-03-31T10:00:00.000Z');
    assert.equal(periodEnd(NOW, month, 2), '2025-04-30T10:00:00.000Z');
    assert.equal(periodEnd(NOW, month, 11), '2026-01-31T10:00:00.000Z');
    assert.equal(periodEnd('2024-01-31T00:00:00.000Z', month, 0), '2024-02-29T00:00:00.000Z');
    assert.equal(
      periodEnd('2025-11-15T08:30:00.000Z', { interval: 'month', intervalCount: 3 }, 0),
      '2026-02-15T08:30:00.000Z',
    );
  });

  it('counts years, 29 February becoming 28 February', () => {
    assert.equal(
      periodEnd('2024-02-29T12:00:00.000Z', { interval: 'year', intervalCount: 1 }, 0),
      '2025-02-28T12:00:00.000Z',
    );
    assert.equal(
      periodEnd('2024-02-29T12:00:00.000Z', { interval: 'year', intervalCount: 1 }, 3),
      '2028-02-29T12:00:00.000Z',
    );
  });
});
