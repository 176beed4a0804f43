// Every transition of the subscriber, and the enrollment reservation that
// keeps one e-mail address to one live subscriber per plan.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Plan } from '../domain/plan.ts';
import {
  enrollmentDecider,
  enrollmentStreamName,
  isPastDueDue,
  isPeriodEndCancellationDue,
  isRenewalDue,
  subscriberDecider,
  subscriberIn,
  type EnrollmentEvent,
  type SubscriberCommand,
  type SubscriberEvent,
} from '../domain/subscriber.ts';
import { subscriberViewOf } from '../projections/subscriptions.ts';
import { given as givenFor, stateAfter } from './support/decider.ts';

const given = (events: SubscriberEvent[]) => givenFor(subscriberDecider, events);
/** The subscriber the events leave; they must leave one. */
const subscriberAfter = (events: SubscriberEvent[]) => subscriberIn(given(events).state)!;
const currentInvoicePaidAt = (s: ReturnType<typeof subscriberAfter>) => s.invoices.at(-1)!.paidAt;

const SUBSCRIBER_ID = '5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b';
const MERCHANT_ID = '0a1b2c3d-4e5f-4a6b-8c7d-8e9f00112233';
const PLAN_ID = '9b2f7c1e-3d4a-4b5c-8d6e-7f8091a2b3c4';
const FIRST_INVOICE = '11111111-1111-4111-8111-111111111111';
const RENEWAL_INVOICE = '22222222-2222-4222-8222-222222222222';
const OTHER_INVOICE = '33333333-3333-4333-8333-333333333333';

// Enrolled on 31 January at 10:00, monthly, 72 hours of grace.
const ENROLLED_AT = '2025-01-31T10:00:00.000Z';
const FIRST_PERIOD_END = '2025-02-28T10:00:00.000Z';
const FIRST_GRACE_END = '2025-02-03T10:00:00.000Z';
// The renewal is issued five seconds after the period ended.
const RENEWED_AT = '2025-02-28T10:00:05.000Z';
const SECOND_PERIOD_END = '2025-03-31T10:00:00.000Z';
const RENEWAL_GRACE_END = '2025-03-03T10:00:05.000Z';

const plan: Plan = {
  id: PLAN_ID,
  merchantId: MERCHANT_ID,
  name: 'Pro',
  description: null,
  amount: '19.99',
  currency: 'USD',
  interval: 'month',
  intervalCount: 1,
  gracePeriodHours: 72,
  status: 'active',
  archivedAt: null,
  createdAt: '2025-01-01T00:00:00.000Z',
  updatedAt: '2025-01-01T00:00:00.000Z',
};

const enroll: Extract<SubscriberCommand, { type: 'EnrollSubscriber' }> = {
  type: 'EnrollSubscriber',
  id: SUBSCRIBER_ID,
  merchantId: MERCHANT_ID,
  plan,
  email: ' Alice@Example.com ',
  externalId: 'cus_42',
  metadata: { tier: 'gold' },
  invoiceId: FIRST_INVOICE,
  now: ENROLLED_AT,
};

const terms = {
  name: 'Pro',
  amount: '19.99',
  currency: 'USD',
  interval: 'month',
  intervalCount: 1,
  gracePeriodHours: 72,
} as const;

const enrolled: SubscriberEvent = {
  type: 'SubscriberEnrolled',
  data: {
    id: SUBSCRIBER_ID,
    merchantId: MERCHANT_ID,
    planId: PLAN_ID,
    email: 'Alice@Example.com',
    externalId: 'cus_42',
    metadata: { tier: 'gold' },
    terms,
    invoiceId: FIRST_INVOICE,
    periodStart: ENROLLED_AT,
    periodEnd: FIRST_PERIOD_END,
    gracePeriodEndsAt: FIRST_GRACE_END,
    enrolledAt: ENROLLED_AT,
  },
};
const activated: SubscriberEvent = {
  type: 'SubscriberActivated',
  data: { invoiceId: FIRST_INVOICE, activatedAt: '2025-02-01T09:00:00.000Z' },
};
const renewed: SubscriberEvent = {
  type: 'RenewalInvoiceIssued',
  data: {
    invoiceId: RENEWAL_INVOICE,
    period: 1,
    periodStart: FIRST_PERIOD_END,
    periodEnd: SECOND_PERIOD_END,
    gracePeriodEndsAt: RENEWAL_GRACE_END,
    issuedAt: RENEWED_AT,
  },
};
const pastDue: SubscriberEvent = {
  type: 'SubscriberPastDue',
  data: { invoiceId: RENEWAL_INVOICE, pastDueAt: '2025-03-03T10:00:06.000Z' },
};
const scheduled: SubscriberEvent = {
  type: 'CancellationScheduled',
  data: { scheduledAt: '2025-02-10T00:00:00.000Z' },
};

const active = [enrolled, activated];
const inGrace = [enrolled, activated, renewed];

describe('subscriber decider: enrollment', () => {
  it('enrolls pending, with the first period and its grace period counted from the first invoice', () => {
    given([]).when(enroll).then([enrolled]);
    const s = subscriberAfter([enrolled]);
    assert.deepEqual(subscriberViewOf(s), {
      id: SUBSCRIBER_ID,
      merchantId: MERCHANT_ID,
      planId: PLAN_ID,
      email: 'Alice@Example.com',
      externalId: 'cus_42',
      status: 'pending',
      currentPeriodStart: ENROLLED_AT,
      currentPeriodEnd: FIRST_PERIOD_END,
      gracePeriodEndsAt: FIRST_GRACE_END,
      cancelAtEnd: false,
      metadata: { tier: 'gold' },
      createdAt: ENROLLED_AT,
    });
  });

  it('refuses a missing plan, another merchant’s plan and an archived plan, in the contract’s words', () => {
    given([])
      .when({ ...enroll, plan: null })
      .thenError('not_found', 'Subscription plan not found');
    given([])
      .when({ ...enroll, plan: { ...plan, merchantId: '7a7a7a7a-7a7a-4a7a-8a7a-7a7a7a7a7a7a' } })
      .thenError('not_found', 'Subscription plan not found');
    given([])
      .when({ ...enroll, plan: { ...plan, status: 'archived', archivedAt: ENROLLED_AT } })
      .thenError('bad_request', 'Cannot enroll into an archived plan');
  });

  it('takes an externalId of 255 characters and refuses one of 256', () => {
    const longest = 'x'.repeat(255);
    given([])
      .when({ ...enroll, externalId: longest })
      .then([{ ...enrolled, data: { ...enrolled.data, externalId: longest } } as SubscriberEvent]);
    given([])
      .when({ ...enroll, externalId: 'x'.repeat(256) })
      .thenError('bad_request', 'External ID must be at most 255 characters');
    given([])
      .when({ ...enroll, externalId: null })
      .then([{ ...enrolled, data: { ...enrolled.data, externalId: null } } as SubscriberEvent]);
    // Characters, not UTF-16 units: 255 emoji (510 units) are 255 characters.
    const emoji = '🦊'.repeat(255);
    given([])
      .when({ ...enroll, externalId: emoji })
      .then([{ ...enrolled, data: { ...enrolled.data, externalId: emoji } } as SubscriberEvent]);
    given([])
      .when({ ...enroll, externalId: '🦊'.repeat(256) })
      .thenError('bad_request', 'External ID must be at most 255 characters');
  });

  it('checks the e-mail address and the metadata', () => {
    given([])
      .when({ ...enroll, email: '' })
      .thenError('bad_request', 'Email is required');
    given([])
      .when({ ...enroll, email: 'not-an-address' })
      .thenError('bad_request', 'Email must be a valid e-mail address');
    given([])
      .when({ ...enroll, email: `${'a'.repeat(250)}@b.co` })
      .thenError('bad_request', 'Email must be a valid e-mail address');
    given([])
      .when({ ...enroll, metadata: [1, 2] as unknown as Record<string, unknown> })
      .thenError('bad_request', 'Metadata must be an object of key-value pairs');
    given([])
      .when({ ...enroll, metadata: { blob: 'x'.repeat(16_384) } })
      .thenError('bad_request', 'Metadata must be at most 16 KB as JSON');
  });

  it('refuses to enroll the same subscriber twice', () => {
    given([enrolled]).when(enroll).thenError('conflict', `Subscriber ${SUBSCRIBER_ID} already exists`);
  });

  it('knows no command before enrollment', () => {
    given([])
      .when({ type: 'CancelSubscriber', atPeriodEnd: false, now: ENROLLED_AT })
      .thenError('not_found', 'Subscriber not found');
  });
});

describe('subscriber decider: the first invoice', () => {
  it('pending → active when the first invoice is confirmed', () => {
    given([enrolled])
      .when({ type: 'RecordInvoicePaid', invoiceId: FIRST_INVOICE, paidAt: '2025-02-01T09:00:00.000Z' })
      .then([activated]);
    const s = subscriberAfter(active);
    assert.equal(s.status, 'active');
    assert.equal(s.activatedAt, '2025-02-01T09:00:00.000Z');
    assert.equal(s.invoices[0]!.paidAt, '2025-02-01T09:00:00.000Z');
  });

  it('starts the subscription at payment when the first period ran out before it (grace longer than the period)', () => {
    // A daily plan with the default 72 h grace, enrolled 31 Jan 10:00, paid two days later.
    const daily = { ...terms, interval: 'day' } as const;
    const enrolledDaily = {
      ...enrolled,
      data: {
        ...enrolled.data,
        terms: daily,
        periodEnd: '2025-02-01T10:00:00.000Z',
        gracePeriodEndsAt: '2025-02-03T10:00:00.000Z',
      },
    } as SubscriberEvent;
    const paidAt = '2025-02-02T10:00:00.000Z';
    const restarted: SubscriberEvent = {
      type: 'SubscriberActivated',
      data: {
        invoiceId: FIRST_INVOICE,
        activatedAt: paidAt,
        periodStart: paidAt,
        periodEnd: '2025-02-03T10:00:00.000Z',
      },
    };
    given([enrolledDaily]).when({ type: 'RecordInvoicePaid', invoiceId: FIRST_INVOICE, paidAt }).then([restarted]);
    const s = subscriberAfter([enrolledDaily, restarted]);
    assert.equal(s.currentPeriodStart, paidAt);
    assert.equal(s.currentPeriodEnd, '2025-02-03T10:00:00.000Z');
    assert.equal(isRenewalDue(s, paidAt), false, 'no period the customer never had is billed');
    assert.equal(isRenewalDue(s, '2025-02-03T10:00:00.000Z'), true);
  });

  it('ignores a repeat, and an invoice that is not the current one', () => {
    given(active)
      .when({ type: 'RecordInvoicePaid', invoiceId: FIRST_INVOICE, paidAt: '2025-02-01T09:05:00.000Z' })
      .then([]);
    given([enrolled])
      .when({ type: 'RecordInvoicePaid', invoiceId: OTHER_INVOICE, paidAt: '2025-02-01T09:00:00.000Z' })
      .then([]);
  });

  it('pending → cancelled (unpaid) when the first invoice expires or is cancelled', () => {
    const cancelled: SubscriberEvent = {
      type: 'SubscriberCancelled',
      data: { reason: 'unpaid', invoiceId: FIRST_INVOICE, cancelledAt: FIRST_GRACE_END },
    };
    given([enrolled])
      .when({ type: 'RecordInvoiceClosed', invoiceId: FIRST_INVOICE, closedAt: FIRST_GRACE_END })
      .then([cancelled]);
    const s = subscriberAfter([enrolled, cancelled]);
    assert.equal(s.status, 'cancelled');
    assert.equal(s.cancellationReason, 'unpaid');
    assert.equal(s.invoices[0]!.closedAt, FIRST_GRACE_END);
    // A paid invoice that closes afterwards (it cannot) or another invoice changes nothing.
    given(active).when({ type: 'RecordInvoiceClosed', invoiceId: FIRST_INVOICE, closedAt: FIRST_GRACE_END }).then([]);
    given([enrolled])
      .when({ type: 'RecordInvoiceClosed', invoiceId: OTHER_INVOICE, closedAt: FIRST_GRACE_END })
      .then([]);
  });

  it('a payment confirmed after cancellation stays on its invoice: the subscriber stays cancelled', () => {
    const cancelled: SubscriberEvent = {
      type: 'SubscriberCancelled',
      data: { reason: 'merchant', invoiceId: FIRST_INVOICE, cancelledAt: '2025-02-01T00:00:00.000Z' },
    };
    given([enrolled, cancelled])
      .when({ type: 'RecordInvoicePaid', invoiceId: FIRST_INVOICE, paidAt: '2025-02-01T09:00:00.000Z' })
      .then([]);
  });
});

describe('subscriber decider: renewal', () => {
  it('is due at the end of a paid period, not before, not unpaid, not when cancelling at period end', () => {
    assert.equal(isRenewalDue(subscriberAfter(active), '2025-02-28T09:59:59.999Z'), false);
    assert.equal(isRenewalDue(subscriberAfter(active), FIRST_PERIOD_END), true);
    assert.equal(isRenewalDue(subscriberAfter([enrolled]), FIRST_PERIOD_END), false);
    assert.equal(isRenewalDue(subscriberAfter([...active, scheduled]), FIRST_PERIOD_END), false);
  });

  it('active → active with the next period and its invoice', () => {
    given(active)
      .when({ type: 'RecordRenewal', invoiceId: RENEWAL_INVOICE, period: 1, now: RENEWED_AT })
      .then([renewed]);
    const s = subscriberAfter(inGrace);
    assert.equal(s.status, 'active');
    assert.equal(s.period, 1);
    assert.equal(s.currentPeriodStart, FIRST_PERIOD_END);
    assert.equal(s.currentPeriodEnd, SECOND_PERIOD_END);
    assert.equal(s.gracePeriodEndsAt, RENEWAL_GRACE_END);
    assert.deepEqual(
      s.invoices.map((i) => i.invoiceId),
      [FIRST_INVOICE, RENEWAL_INVOICE],
    );
  });

  it('counts periods from the enrollment: the third one ends on 30 April, not on 28', () => {
    const paid: SubscriberEvent = {
      type: 'RenewalPaid',
      data: { invoiceId: RENEWAL_INVOICE, period: 1, paidAt: '2025-03-01T00:00:00.000Z', late: false },
    };
    given([...inGrace, paid])
      .when({ type: 'RecordRenewal', invoiceId: OTHER_INVOICE, period: 2, now: '2025-03-31T10:00:00.000Z' })
      .then([
        {
          type: 'RenewalInvoiceIssued',
          data: {
            invoiceId: OTHER_INVOICE,
            period: 2,
            periodStart: SECOND_PERIOD_END,
            periodEnd: '2025-04-30T10:00:00.000Z',
            gracePeriodEndsAt: '2025-04-03T10:00:00.000Z',
            issuedAt: '2025-03-31T10:00:00.000Z',
          },
        },
      ]);
  });

  it('refuses a renewal before the period ends, of an unpaid period, or when cancelling at period end', () => {
    given(active)
      .when({ type: 'RecordRenewal', invoiceId: RENEWAL_INVOICE, period: 1, now: '2025-02-27T00:00:00.000Z' })
      .thenError('conflict', `Subscriber does not renew before ${FIRST_PERIOD_END}`);
    given([enrolled])
      .when({ type: 'RecordRenewal', invoiceId: RENEWAL_INVOICE, period: 1, now: RENEWED_AT })
      .thenError('conflict', 'Subscriber cannot renew: its status is pending');
    given([...active, scheduled])
      .when({ type: 'RecordRenewal', invoiceId: RENEWAL_INVOICE, period: 1, now: RENEWED_AT })
      .thenError('conflict', 'Subscriber cannot renew: it is cancelled at the end of the period');
    given(inGrace)
      .when({ type: 'RecordRenewal', invoiceId: OTHER_INVOICE, period: 2, now: SECOND_PERIOD_END })
      .thenError('conflict', 'Subscriber cannot renew: the current period is unpaid');
    given(active)
      .when({ type: 'RecordRenewal', invoiceId: RENEWAL_INVOICE, period: 3, now: RENEWED_AT })
      .thenError('conflict', 'The next billing period is 1, not 3');
  });

  it('a repeated renewal, or one that lost the race for the period, changes nothing', () => {
    given(inGrace).when({ type: 'RecordRenewal', invoiceId: RENEWAL_INVOICE, period: 1, now: RENEWED_AT }).then([]);
    given(inGrace).when({ type: 'RecordRenewal', invoiceId: OTHER_INVOICE, period: 1, now: RENEWED_AT }).then([]);
  });

  it('a renewal paid within its grace period keeps the subscriber active', () => {
    const paidAt = '2025-03-01T12:00:00.000Z';
    given(inGrace)
      .when({ type: 'RecordInvoicePaid', invoiceId: RENEWAL_INVOICE, paidAt })
      .then([{ type: 'RenewalPaid', data: { invoiceId: RENEWAL_INVOICE, period: 1, paidAt, late: false } }]);
  });
});

describe('subscriber decider: lapsing', () => {
  it('active → past_due when the renewal is unpaid at the end of its grace period', () => {
    const s = subscriberAfter(inGrace);
    assert.equal(isPastDueDue(s, '2025-03-03T10:00:04.999Z'), false);
    assert.equal(isPastDueDue(s, RENEWAL_GRACE_END), true);
    given(inGrace)
      .when({ type: 'MarkPastDue', now: '2025-03-03T10:00:06.000Z', awaitingConfirmations: false })
      .then([pastDue]);
    assert.equal(subscriberAfter([...inGrace, pastDue]).status, 'past_due');
  });

  it('not before the grace period ends, not while a full payment awaits confirmations, not twice', () => {
    given(inGrace)
      .when({ type: 'MarkPastDue', now: '2025-03-02T00:00:00.000Z', awaitingConfirmations: false })
      .thenError('conflict', `Subscriber is not past due before ${RENEWAL_GRACE_END}`);
    given(inGrace).when({ type: 'MarkPastDue', now: '2025-03-04T00:00:00.000Z', awaitingConfirmations: true }).then([]);
    given([...inGrace, pastDue])
      .when({ type: 'MarkPastDue', now: '2025-03-04T00:00:00.000Z', awaitingConfirmations: false })
      .then([]);
    // The first period has no past due: its invoice expiring cancels the enrollment.
    given([enrolled])
      .when({ type: 'MarkPastDue', now: '2025-03-04T00:00:00.000Z', awaitingConfirmations: false })
      .then([]);
  });

  it('past_due → active when the renewal is paid late', () => {
    const paidAt = '2025-03-05T08:00:00.000Z';
    const paidLate: SubscriberEvent = {
      type: 'RenewalPaid',
      data: { invoiceId: RENEWAL_INVOICE, period: 1, paidAt, late: true },
    };
    given([...inGrace, pastDue])
      .when({ type: 'RecordInvoicePaid', invoiceId: RENEWAL_INVOICE, paidAt })
      .then([paidLate]);
    const s = subscriberAfter([...inGrace, pastDue, paidLate]);
    assert.equal(s.status, 'active');
    assert.equal(s.pastDueAt, null);
    assert.equal(s.invoices[1]!.paidAt, paidAt);
    // And the next period renews as usual.
    assert.equal(isRenewalDue(s, SECOND_PERIOD_END), true);
  });

  it('past_due → cancelled (unpaid) when the renewal invoice expires', () => {
    const expiredAt = '2025-03-06T10:00:05.000Z';
    given([...inGrace, pastDue])
      .when({ type: 'RecordInvoiceClosed', invoiceId: RENEWAL_INVOICE, closedAt: expiredAt })
      .then([
        {
          type: 'SubscriberCancelled',
          data: { reason: 'unpaid', invoiceId: RENEWAL_INVOICE, cancelledAt: expiredAt },
        },
      ]);
  });
});

describe('subscriber decider: cancellation by the merchant', () => {
  it('cancels now, from any live status', () => {
    const now = '2025-02-10T00:00:00.000Z';
    const cases: [SubscriberEvent[], string][] = [
      [[enrolled], FIRST_INVOICE],
      [active, FIRST_INVOICE],
      [inGrace, RENEWAL_INVOICE],
      [[...inGrace, pastDue], RENEWAL_INVOICE],
    ];
    for (const [history, invoiceId] of cases) {
      given(history)
        .when({ type: 'CancelSubscriber', atPeriodEnd: false, now })
        .then([{ type: 'SubscriberCancelled', data: { reason: 'merchant', invoiceId, cancelledAt: now } }]);
    }
  });

  it('schedules a cancellation at period end once, then cancels when the period ends', () => {
    given(active)
      .when({ type: 'CancelSubscriber', atPeriodEnd: true, now: '2025-02-10T00:00:00.000Z' })
      .then([scheduled]);
    const s = subscriberAfter([...active, scheduled]);
    assert.equal(s.cancelAtEnd, true);
    assert.equal(s.status, 'active');
    given([...active, scheduled])
      .when({ type: 'CancelSubscriber', atPeriodEnd: true, now: '2025-02-11T00:00:00.000Z' })
      .then([]);
    assert.equal(isPeriodEndCancellationDue(s, '2025-02-27T00:00:00.000Z'), false);
    assert.equal(isPeriodEndCancellationDue(s, FIRST_PERIOD_END), true);
    given([...active, scheduled])
      .when({ type: 'EndAtPeriodEnd', now: FIRST_PERIOD_END })
      .then([
        {
          type: 'SubscriberCancelled',
          data: { reason: 'period_end', invoiceId: FIRST_INVOICE, cancelledAt: FIRST_PERIOD_END },
        },
      ]);
  });

  it('a scheduled cancellation can still be made immediate', () => {
    const now = '2025-02-12T00:00:00.000Z';
    given([...active, scheduled])
      .when({ type: 'CancelSubscriber', atPeriodEnd: false, now })
      .then([
        { type: 'SubscriberCancelled', data: { reason: 'merchant', invoiceId: FIRST_INVOICE, cancelledAt: now } },
      ]);
  });

  it('refuses an early or unscheduled period-end cancellation, and ignores one after cancellation', () => {
    given([...active, scheduled])
      .when({ type: 'EndAtPeriodEnd', now: '2025-02-27T00:00:00.000Z' })
      .thenError('conflict', `The billing period does not end before ${FIRST_PERIOD_END}`);
    given(active)
      .when({ type: 'EndAtPeriodEnd', now: FIRST_PERIOD_END })
      .thenError('conflict', 'Subscriber is not set to cancel at the end of the period');
    const cancelled = subscriberIn(
      stateAfter(subscriberDecider, [...active, scheduled], { type: 'EndAtPeriodEnd', now: FIRST_PERIOD_END }),
    );
    assert.equal(cancelled!.status, 'cancelled');
    assert.equal(cancelled!.cancellationReason, 'period_end');
  });

  it('refuses to cancel a cancelled subscriber', () => {
    const history = [
      ...active,
      {
        type: 'SubscriberCancelled',
        data: { reason: 'merchant', invoiceId: FIRST_INVOICE, cancelledAt: '2025-02-10T00:00:00.000Z' },
      } as SubscriberEvent,
    ];
    for (const atPeriodEnd of [false, true]) {
      given(history)
        .when({ type: 'CancelSubscriber', atPeriodEnd, now: '2025-02-11T00:00:00.000Z' })
        .thenError('bad_request', 'Subscriber cannot be cancelled in its current status: cancelled');
    }
    given(history).when({ type: 'EndAtPeriodEnd', now: FIRST_PERIOD_END }).then([]);
  });
});

describe("subscriber decider: a reorg takes a period's payment back", () => {
  const unpaid = (invoiceId: string, reversedAt: string) =>
    ({ type: 'RecordInvoiceUnpaid', invoiceId, reversedAt }) as const;
  const reversed = (
    invoiceId: string,
    period: number,
    status: 'pending' | 'active' | 'past_due',
    reversedAt: string,
  ): SubscriberEvent => ({ type: 'PeriodPaymentReversed', data: { invoiceId, period, status, reversedAt } });
  const renewalPaid: SubscriberEvent = {
    type: 'RenewalPaid',
    data: { invoiceId: RENEWAL_INVOICE, period: 1, paidAt: '2025-03-01T00:00:00.000Z', late: false },
  };

  it('active → pending when the first invoice is not confirmed any more: the subscriber is back to enrolled', () => {
    const at = '2025-02-01T09:30:00.000Z';
    given(active)
      .when(unpaid(FIRST_INVOICE, at))
      .then([reversed(FIRST_INVOICE, 0, 'pending', at)]);
    const s = subscriberAfter([...active, reversed(FIRST_INVOICE, 0, 'pending', at)]);
    assert.deepEqual(
      { ...subscriberViewOf(s), updatedAt: undefined },
      { ...subscriberViewOf(subscriberAfter([enrolled])), updatedAt: undefined },
    );
    assert.equal(s.status, 'pending');
    assert.equal(s.activatedAt, null);
    assert.equal(s.invoices[0]!.paidAt, null);
    assert.equal(isRenewalDue(s, FIRST_PERIOD_END), false, 'an unpaid period is not renewed');
    // Paid again (the payment re-mined and confirmed): active again.
    given([...active, reversed(FIRST_INVOICE, 0, 'pending', at)])
      .when({ type: 'RecordInvoicePaid', invoiceId: FIRST_INVOICE, paidAt: '2025-02-01T10:00:00.000Z' })
      .then([
        { type: 'SubscriberActivated', data: { invoiceId: FIRST_INVOICE, activatedAt: '2025-02-01T10:00:00.000Z' } },
      ]);
    // Never paid again: the first invoice expires and the subscriber is cancelled as unpaid.
    given([...active, reversed(FIRST_INVOICE, 0, 'pending', at)])
      .when({ type: 'RecordInvoiceClosed', invoiceId: FIRST_INVOICE, closedAt: FIRST_GRACE_END })
      .then([
        {
          type: 'SubscriberCancelled',
          data: { reason: 'unpaid', invoiceId: FIRST_INVOICE, cancelledAt: FIRST_GRACE_END },
        },
      ]);
  });

  it('gives back the period as enrolled when the reversed payment had restarted it', () => {
    const restarted: SubscriberEvent = {
      type: 'SubscriberActivated',
      data: {
        invoiceId: FIRST_INVOICE,
        activatedAt: '2025-03-01T00:00:00.000Z',
        periodStart: '2025-03-01T00:00:00.000Z',
        periodEnd: '2025-04-01T00:00:00.000Z',
      },
    };
    const s = subscriberAfter([enrolled, restarted, reversed(FIRST_INVOICE, 0, 'pending', '2025-03-01T01:00:00.000Z')]);
    assert.deepEqual(
      [s.currentPeriodStart, s.currentPeriodEnd, s.gracePeriodEndsAt],
      [ENROLLED_AT, FIRST_PERIOD_END, FIRST_GRACE_END],
    );
  });

  it('a renewal paid then reversed: active and unpaid within its grace period, past due after it', () => {
    const paid = [...inGrace, renewalPaid];
    const within = '2025-03-01T01:00:00.000Z';
    given(paid)
      .when(unpaid(RENEWAL_INVOICE, within))
      .then([reversed(RENEWAL_INVOICE, 1, 'active', within)]);
    const s = subscriberAfter([...paid, reversed(RENEWAL_INVOICE, 1, 'active', within)]);
    assert.deepEqual([s.status, s.period, currentInvoicePaidAt(s)], ['active', 1, null]);
    assert.equal(isPastDueDue(s, RENEWAL_GRACE_END), true);
    assert.equal(isRenewalDue(s, SECOND_PERIOD_END), false);

    const after = '2025-03-04T00:00:00.000Z';
    given(paid)
      .when(unpaid(RENEWAL_INVOICE, after))
      .then([reversed(RENEWAL_INVOICE, 1, 'past_due', after)]);
    const late = subscriberAfter([...paid, reversed(RENEWAL_INVOICE, 1, 'past_due', after)]);
    assert.deepEqual([late.status, late.pastDueAt], ['past_due', after]);
  });

  it('ignores a repeat, an older period, an invoice never paid, and a cancelled subscriber', () => {
    const at = '2025-02-01T09:30:00.000Z';
    given([...active, reversed(FIRST_INVOICE, 0, 'pending', at)])
      .when(unpaid(FIRST_INVOICE, at))
      .then([]);
    given([...inGrace, renewalPaid])
      .when(unpaid(FIRST_INVOICE, at))
      .then([]);
    given([enrolled]).when(unpaid(FIRST_INVOICE, at)).then([]);
    const cancelled: SubscriberEvent = {
      type: 'SubscriberCancelled',
      data: { reason: 'merchant', invoiceId: FIRST_INVOICE, cancelledAt: '2025-02-01T09:10:00.000Z' },
    };
    given([...active, cancelled])
      .when(unpaid(FIRST_INVOICE, at))
      .then([]);
  });
});

describe('subscriber decider: an abandoned enrollment', () => {
  const abandon = { type: 'AbandonEnrollment', subscriberId: SUBSCRIBER_ID, now: '2025-01-31T10:01:00.000Z' } as const;
  const abandoned: SubscriberEvent = {
    type: 'EnrollmentAbandoned',
    data: { subscriberId: SUBSCRIBER_ID, abandonedAt: '2025-01-31T10:01:00.000Z' },
  };

  it('closes a stream whose subscriber was never written, once', () => {
    given([]).when(abandon).then([abandoned]);
    given([abandoned]).when(abandon).then([]);
    assert.equal(subscriberIn(given([abandoned]).state), null);
  });

  it('refuses the late subscriber of an abandoned enrollment', () => {
    given([abandoned])
      .when(enroll)
      .thenError(
        'conflict',
        'Enrollment was given up: it took so long that another enrollment of the address took its reservation over',
      );
  });

  it('refuses to abandon an enrollment whose subscriber was written after all', () => {
    given([enrolled])
      .when(abandon)
      .thenError('conflict', `Subscriber ${SUBSCRIBER_ID} exists: its enrollment was not abandoned`);
  });

  it('answers not found for any other command on an abandoned enrollment', () => {
    given([abandoned])
      .when({ type: 'CancelSubscriber', atPeriodEnd: false, now: '2025-02-01T00:00:00.000Z' })
      .thenError('not_found', 'Subscriber not found');
  });
});

describe('enrollment reservation', () => {
  const A = SUBSCRIBER_ID;
  const B = '6f7a8b9c-0d1e-4f2a-9b3c-4d5e6f7a8b9c';
  const at = '2025-01-31T10:00:00.000Z';
  const reserve = (subscriberId: string) => ({ type: 'ReserveEnrollment', subscriberId, now: at }) as const;
  const release = (subscriberId: string) => ({ type: 'ReleaseEnrollment', subscriberId, now: at }) as const;
  const reserved = (subscriberId: string): EnrollmentEvent => ({
    type: 'EnrollmentReserved',
    data: { subscriberId, reservedAt: at },
  });
  const released = (subscriberId: string): EnrollmentEvent => ({
    type: 'EnrollmentReleased',
    data: { subscriberId, releasedAt: at },
  });
  const givenReservation = (events: EnrollmentEvent[]) => givenFor(enrollmentDecider, events);

  it('names the stream after merchant, plan and the address without case or blanks, not the address itself', () => {
    const name = enrollmentStreamName(MERCHANT_ID, PLAN_ID, 'Alice@Example.com');
    assert.equal(name, enrollmentStreamName(MERCHANT_ID, PLAN_ID, '  alice@example.COM '));
    assert.notEqual(
      name,
      enrollmentStreamName(MERCHANT_ID, '7a7a7a7a-7a7a-4a7a-8a7a-7a7a7a7a7a7a', 'alice@example.com'),
    );
    assert.match(name, /^enrollment-[0-9a-f-]{36}$/);
  });

  it('reserves a free address; the holder asking again changes nothing', () => {
    givenReservation([])
      .when(reserve(A))
      .then([reserved(A)]);
    givenReservation([reserved(A)])
      .when(reserve(A))
      .then([]);
  });

  it('refuses a second enrollment while the address is held', () => {
    givenReservation([reserved(A)])
      .when(reserve(B))
      .thenError('conflict', 'Subscriber is already enrolled in this plan');
  });

  it('allows the same address again once its subscriber was cancelled and released', () => {
    givenReservation([reserved(A)])
      .when(release(A))
      .then([released(A)]);
    givenReservation([reserved(A), released(A)])
      .when(reserve(B))
      .then([reserved(B)]);
    // A late release of the old holder does not free the new one's hold.
    givenReservation([reserved(A), released(A), reserved(B)])
      .when(release(A))
      .then([]);
    assert.equal(givenReservation([reserved(A), released(A), reserved(B)]).state.holder, B);
  });
});
