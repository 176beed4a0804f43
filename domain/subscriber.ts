// The subscriber aggregate, stream `subscriber-<id>`, and the enrollment
// reservation that keeps one e-mail address to one live subscriber per plan,
// stream `enrollment-<uuid of merchant, plan and e-mail>`.
//
// Life of a subscriber (interface.md, "Subscriber"; README, "Subscriptions"):
//
//   (none) ──enroll──▶ pending ──first invoice confirmed──▶ active
//   pending ──first invoice expired or cancelled──▶ cancelled (unpaid)
//   active ──period end, period paid──▶ active, with the next period's invoice (renewal)
//   active ──renewal unpaid at the end of its grace period──▶ past_due
//   active or past_due ──renewal confirmed──▶ active (paid late when past_due)
//   active or past_due ──renewal invoice expired or cancelled──▶ cancelled (unpaid)
//   any but cancelled ──merchant cancels now──▶ cancelled (merchant)
//   any but cancelled ──merchant cancels at period end──▶ cancelAtEnd, then at period end cancelled (period_end)
//
// Billing periods are counted from the first one's start (the enrollment), so
// they never drift. Each period has one invoice: the first one is due at the
// end of the grace period (it expires then); a renewal is due at the end of
// its grace period too, after which the subscriber is past due, and it stays
// payable for one more grace period before it expires.
import { v5 as uuidv5 } from 'uuid';
import { type Decider, type DomainEvent, DomainError } from './decider.ts';
import { addHours, periodEnd, type Plan, type PlanTerms } from './plan.ts';
import { streams } from './streams.ts';

export const subscriberStreamName = streams.subscriber.name;

const PERIOD_INVOICE_NAMESPACE = 'c1f7e2a4-8b3d-4f6a-9e5c-2d7b0a4f8e13';
/**
 * The invoice of a subscriber's billing period (0 is the first): one id per
 * period, so a retried or concurrent renewal finds the invoice already made
 * instead of billing twice.
 */
export const periodInvoiceId = (subscriberId: string, period: number): string =>
  uuidv5(`${subscriberId}/period/${period}`, PERIOD_INVOICE_NAMESPACE);

const ENROLLMENT_NAMESPACE = 'b4a7e0c2-5d3f-4e81-9a6b-7c2d1e0f3a58';

/** E-mail addresses are compared without case and surrounding blanks. */
export const normalizeEmail = (email: string): string => email.trim().toLowerCase();

/**
 * The reservation stream of an e-mail address in a plan. The address itself is
 * not in the name, only a UUIDv5 of it.
 */
export const enrollmentStreamName = (merchantId: string, planId: string, email: string): string =>
  streams.enrollment.name(uuidv5(`${merchantId}/${planId}/${normalizeEmail(email)}`, ENROLLMENT_NAMESPACE));

export type SubscriberStatus = 'pending' | 'active' | 'past_due' | 'cancelled';
export const subscriberStatuses: readonly SubscriberStatus[] = ['pending', 'active', 'past_due', 'cancelled'];

/** merchant: cancelled now by the merchant; period_end: at the end of the period (cancelAtEnd); unpaid: an invoice expired unpaid. */
export type CancellationReason = 'merchant' | 'period_end' | 'unpaid';

export const MAX_EXTERNAL_ID_LENGTH = 255;
export const MAX_EMAIL_LENGTH = 254;
export const MAX_METADATA_JSON_LENGTH = 16_384;
type JsonObject = { [key: string]: unknown };

/** How long the first invoice is payable: the grace period. */
export const firstInvoiceHours = (terms: Pick<PlanTerms, 'gracePeriodHours'>): number => terms.gracePeriodHours;
/** How long a renewal invoice is payable: the grace period, then as long again while past due. */
export const renewalInvoiceHours = (terms: Pick<PlanTerms, 'gracePeriodHours'>): number => 2 * terms.gracePeriodHours;

// ---------------------------------------------------------------- events

/** Who subscribes to which plan, on which terms: as enrolled, and as the subscriber keeps it. */
export interface Enrollment {
  id: string;
  merchantId: string;
  planId: string;
  email: string;
  externalId: string | null;
  metadata: JsonObject | null;
  /** The plan's terms at enrollment: renewals are billed on them. */
  terms: PlanTerms;
}

export type SubscriberEnrolled = DomainEvent<
  'SubscriberEnrolled',
  Enrollment & {
    /** The first period's invoice, created just before. */
    invoiceId: string;
    periodStart: string;
    periodEnd: string;
    gracePeriodEndsAt: string;
    enrolledAt: string;
  }
>;
/**
 * `periodStart`/`periodEnd`: set when the first invoice was paid after its
 * period had already run out (a grace period longer than the billing
 * period): the subscription then starts at payment, and no period the
 * customer never had is billed.
 */
export type SubscriberActivated = DomainEvent<
  'SubscriberActivated',
  { invoiceId: string; activatedAt: string; periodStart?: string; periodEnd?: string }
>;
export type RenewalInvoiceIssued = DomainEvent<
  'RenewalInvoiceIssued',
  {
    invoiceId: string;
    /** 1 for the second billing period, and so on. */
    period: number;
    periodStart: string;
    periodEnd: string;
    gracePeriodEndsAt: string;
    issuedAt: string;
  }
>;
export type RenewalPaid = DomainEvent<
  'RenewalPaid',
  {
    invoiceId: string;
    period: number;
    paidAt: string;
    /** Paid after the grace period, while the subscriber was past due. */
    late: boolean;
  }
>;
/**
 * The payment of the current period's invoice was taken back by a reorg: its
 * invoice is not confirmed any more. The subscriber goes back to where it
 * stood before that payment: `pending` for the first period (its period as
 * enrolled), else `active` with the period unpaid, or `past_due` when its
 * grace period is over.
 */
export type PeriodPaymentReversed = DomainEvent<
  'PeriodPaymentReversed',
  { invoiceId: string; period: number; status: 'pending' | 'active' | 'past_due'; reversedAt: string }
>;
export type SubscriberPastDue = DomainEvent<'SubscriberPastDue', { invoiceId: string; pastDueAt: string }>;
export type CancellationScheduled = DomainEvent<'CancellationScheduled', { scheduledAt: string }>;
export type SubscriberCancelled = DomainEvent<
  'SubscriberCancelled',
  {
    reason: CancellationReason;
    /** The current period's invoice: for `unpaid`, the one that expired unpaid. */
    invoiceId: string;
    cancelledAt: string;
  }
>;

/**
 * An enrollment given up before its subscriber was written: another
 * enrollment of the address took its reservation over. Appended where the
 * subscriber would have been, so that of the two (the late subscriber, the
 * abandonment) the store takes only the first.
 */
export type EnrollmentAbandoned = DomainEvent<'EnrollmentAbandoned', { subscriberId: string; abandonedAt: string }>;

export type SubscriberEvent =
  | EnrollmentAbandoned
  | SubscriberEnrolled
  | SubscriberActivated
  | RenewalInvoiceIssued
  | RenewalPaid
  | PeriodPaymentReversed
  | SubscriberPastDue
  | CancellationScheduled
  | SubscriberCancelled;

// ---------------------------------------------------------------- commands

export interface EnrollmentInput {
  email: string;
  externalId: string | null;
  metadata: JsonObject | null;
}

export type SubscriberCommand =
  | (EnrollmentInput & {
      type: 'EnrollSubscriber';
      id: string;
      merchantId: string;
      /** The plan as it stands (null when there is none); the decider checks it. */
      plan: Plan | null;
      invoiceId: string;
      /** The first invoice's creation time: the start of the first period. */
      now: string;
    })
  /** An invoice of the subscriber was confirmed on-chain. */
  | { type: 'RecordInvoicePaid'; invoiceId: string; paidAt: string }
  /** A confirmed invoice of the subscriber is not confirmed any more: a reorg took its payment back. */
  | { type: 'RecordInvoiceUnpaid'; invoiceId: string; reversedAt: string }
  /** An invoice of the subscriber expired or was cancelled. */
  | { type: 'RecordInvoiceClosed'; invoiceId: string; closedAt: string }
  /** The next period's invoice was created at `now` (its creation time). */
  | { type: 'RecordRenewal'; invoiceId: string; period: number; now: string }
  | {
      type: 'MarkPastDue';
      now: string;
      /** The renewal is paid in full and only waits for its confirmations: not past due. */
      awaitingConfirmations: boolean;
    }
  | { type: 'CancelSubscriber'; atPeriodEnd: boolean; now: string }
  | { type: 'EndAtPeriodEnd'; now: string }
  /** Gives up an enrollment whose subscriber was never written, for good. */
  | { type: 'AbandonEnrollment'; subscriberId: string; now: string };

// ---------------------------------------------------------------- state

/** A period's invoice as RenewalInvoiceIssued issues it (the first one at enrollment), and how it ended. */
export interface PeriodInvoice extends Omit<RenewalInvoiceIssued['data'], 'period'> {
  /** 0 for the first billing period. */
  period: number;
  paidAt: string | null;
  /** expired or cancelled unpaid */
  closedAt: string | null;
}

export interface Subscriber extends Enrollment {
  status: SubscriberStatus;
  /** Start of the first billing period: every period is counted from it. */
  anchor: string;
  /** Index of the current billing period, 0 for the first. */
  period: number;
  currentPeriodStart: string;
  currentPeriodEnd: string;
  gracePeriodEndsAt: string;
  cancelAtEnd: boolean;
  /** One per period, in order; the last is the current period's. */
  invoices: PeriodInvoice[];
  activatedAt: string | null;
  pastDueAt: string | null;
  cancelledAt: string | null;
  cancellationReason: CancellationReason | null;
  createdAt: string;
  updatedAt: string;
}

/** The stream of an enrollment given up before its subscriber was written: it never holds one. */
export interface Abandoned {
  abandoned: true;
}

export type SubscriberState = Subscriber | null | Abandoned;

/** The subscriber a stream holds, or null when it holds none (never enrolled, or abandoned). */
export const subscriberIn = (state: SubscriberState): Subscriber | null =>
  state === null || 'abandoned' in state ? null : state;

export const currentInvoice = (subscriber: Subscriber): PeriodInvoice => subscriber.invoices.at(-1)!;

const isAtOrAfter = (time: string, reference: string): boolean => Date.parse(time) >= Date.parse(reference);
const isOpen = (invoice: PeriodInvoice): boolean => invoice.paidAt === null && invoice.closedAt === null;

/** The current period is over and paid, and the subscriber goes on: time for the next period's invoice. */
export function isRenewalDue(subscriber: Subscriber, now: string): boolean {
  return (
    subscriber.status === 'active' &&
    !subscriber.cancelAtEnd &&
    currentInvoice(subscriber).paidAt !== null &&
    isAtOrAfter(now, subscriber.currentPeriodEnd)
  );
}

/** A renewal still unpaid at the end of its grace period. */
export function isPastDueDue(subscriber: Subscriber, now: string): boolean {
  return (
    subscriber.status === 'active' &&
    subscriber.period > 0 &&
    isOpen(currentInvoice(subscriber)) &&
    isAtOrAfter(now, subscriber.gracePeriodEndsAt)
  );
}

/** Cancellation was asked for at the end of the period, and the period is over. */
export function isPeriodEndCancellationDue(subscriber: Subscriber, now: string): boolean {
  return subscriber.status !== 'cancelled' && subscriber.cancelAtEnd && isAtOrAfter(now, subscriber.currentPeriodEnd);
}

/** The 409 of a duplicate enrollment, in the words of interface.md. */
export const duplicateEnrollmentMessage = (status: SubscriberStatus): string =>
  `Subscriber is already enrolled in this plan (status: ${status})`;

// ---------------------------------------------------------------- enrollment rules

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

/** The enrollment request's own rules; throws a DomainError (bad_request) with the first problem found. */
export function checkEnrollmentInput(input: EnrollmentInput): void {
  if (typeof input.email !== 'string' || input.email.trim() === '') {
    throw new DomainError('bad_request', 'Email is required');
  }
  const email = input.email.trim();
  if (email.length > MAX_EMAIL_LENGTH || !EMAIL.test(email)) {
    throw new DomainError('bad_request', 'Email must be a valid e-mail address');
  }
  if (input.externalId !== null) {
    if (typeof input.externalId !== 'string') throw new DomainError('bad_request', 'External ID must be a string');
    // Characters, not UTF-16 code units: an emoji is one.
    if ([...input.externalId].length > MAX_EXTERNAL_ID_LENGTH) {
      throw new DomainError('bad_request', `External ID must be at most ${MAX_EXTERNAL_ID_LENGTH} characters`);
    }
  }
  if (input.metadata !== null) {
    if (typeof input.metadata !== 'object' || Array.isArray(input.metadata)) {
      throw new DomainError('bad_request', 'Metadata must be an object of key-value pairs');
    }
    if (JSON.stringify(input.metadata).length > MAX_METADATA_JSON_LENGTH) {
      throw new DomainError('bad_request', 'Metadata must be at most 16 KB as JSON');
    }
  }
}

/**
 * What enrollment needs of the plan and the request, checked before anything
 * is written; throws a DomainError with the contract's message. Returns the plan.
 */
export function checkEnrollment(plan: Plan | null, merchantId: string, input: EnrollmentInput): Plan {
  checkEnrollmentInput(input);
  // Another merchant's plan is reported exactly like a missing one.
  if (plan === null || plan.merchantId !== merchantId) {
    throw new DomainError('not_found', 'Subscription plan not found');
  }
  if (plan.status === 'archived') throw new DomainError('bad_request', 'Cannot enroll into an archived plan');
  return plan;
}

// ---------------------------------------------------------------- decide

function requireTime(time: string, name: string): void {
  if (typeof time !== 'string' || Number.isNaN(Date.parse(time))) {
    throw new DomainError('bad_request', `${name} must be an ISO 8601 timestamp`);
  }
}

function requireSubscriber(state: SubscriberState): Subscriber {
  const subscriber = subscriberIn(state);
  if (subscriber === null) throw new DomainError('not_found', 'Subscriber not found');
  return subscriber;
}

function enroll(command: Extract<SubscriberCommand, { type: 'EnrollSubscriber' }>, state: SubscriberState) {
  if (state !== null && 'abandoned' in state) {
    throw new DomainError(
      'conflict',
      'Enrollment was given up: it took so long that another enrollment of the address took its reservation over',
    );
  }
  if (state !== null) throw new DomainError('conflict', `Subscriber ${command.id} already exists`);
  const plan = checkEnrollment(command.plan, command.merchantId, command);
  requireTime(command.now, 'now');
  const terms: PlanTerms = {
    name: plan.name,
    amount: plan.amount,
    currency: plan.currency,
    interval: plan.interval,
    intervalCount: plan.intervalCount,
    gracePeriodHours: plan.gracePeriodHours,
  };
  const enrolled: SubscriberEnrolled = {
    type: 'SubscriberEnrolled',
    data: {
      id: command.id,
      merchantId: command.merchantId,
      planId: plan.id,
      email: command.email.trim(),
      externalId: command.externalId,
      metadata: command.metadata,
      terms,
      invoiceId: command.invoiceId,
      periodStart: command.now,
      periodEnd: periodEnd(command.now, terms, 0),
      gracePeriodEndsAt: addHours(command.now, firstInvoiceHours(terms)),
      enrolledAt: command.now,
    },
  };
  return [enrolled];
}

function recordPaid(command: Extract<SubscriberCommand, { type: 'RecordInvoicePaid' }>, s: Subscriber) {
  const invoice = currentInvoice(s);
  // An older period's invoice, one the subscriber never took (a lost race), a
  // repeat, or a payment after cancellation (it stays on its invoice): nothing to do.
  if (invoice.invoiceId !== command.invoiceId || invoice.paidAt !== null || s.status === 'cancelled') return [];
  requireTime(command.paidAt, 'paidAt');
  if (s.status === 'pending') {
    const restarts = isAtOrAfter(command.paidAt, s.currentPeriodEnd);
    const activated: SubscriberActivated = {
      type: 'SubscriberActivated',
      data: {
        invoiceId: command.invoiceId,
        activatedAt: command.paidAt,
        ...(restarts && { periodStart: command.paidAt, periodEnd: periodEnd(command.paidAt, s.terms, 0) }),
      },
    };
    return [activated];
  }
  const paid: RenewalPaid = {
    type: 'RenewalPaid',
    data: { invoiceId: command.invoiceId, period: s.period, paidAt: command.paidAt, late: s.status === 'past_due' },
  };
  return [paid];
}

function recordUnpaid(command: Extract<SubscriberCommand, { type: 'RecordInvoiceUnpaid' }>, s: Subscriber) {
  const invoice = currentInvoice(s);
  // An older period's invoice (its period was served; the current one has
  // its own), one never paid here, a repeat, or after cancellation: nothing to do.
  if (invoice.invoiceId !== command.invoiceId || invoice.paidAt === null || s.status === 'cancelled') return [];
  requireTime(command.reversedAt, 'reversedAt');
  const status =
    invoice.period === 0
      ? 'pending'
      : isAtOrAfter(command.reversedAt, invoice.gracePeriodEndsAt)
        ? 'past_due'
        : 'active';
  const reversed: PeriodPaymentReversed = {
    type: 'PeriodPaymentReversed',
    data: { invoiceId: invoice.invoiceId, period: invoice.period, status, reversedAt: command.reversedAt },
  };
  return [reversed];
}

function recordClosed(command: Extract<SubscriberCommand, { type: 'RecordInvoiceClosed' }>, s: Subscriber) {
  const invoice = currentInvoice(s);
  if (invoice.invoiceId !== command.invoiceId || !isOpen(invoice) || s.status === 'cancelled') return [];
  requireTime(command.closedAt, 'closedAt');
  const cancelled: SubscriberCancelled = {
    type: 'SubscriberCancelled',
    data: { reason: 'unpaid', invoiceId: command.invoiceId, cancelledAt: command.closedAt },
  };
  return [cancelled];
}

function recordRenewal(command: Extract<SubscriberCommand, { type: 'RecordRenewal' }>, s: Subscriber) {
  // The same renewal again, or a period already renewed by someone else: nothing to do.
  if (s.invoices.some((i) => i.invoiceId === command.invoiceId) || command.period <= s.period) return [];
  requireTime(command.now, 'now');
  if (command.period !== s.period + 1) {
    throw new DomainError('conflict', `The next billing period is ${s.period + 1}, not ${command.period}`);
  }
  if (s.status !== 'active' || s.cancelAtEnd || currentInvoice(s).paidAt === null) {
    throw new DomainError('conflict', `Subscriber cannot renew: ${renewalObstacle(s)}`);
  }
  if (!isRenewalDue(s, command.now)) {
    throw new DomainError('conflict', `Subscriber does not renew before ${s.currentPeriodEnd}`);
  }
  const issued: RenewalInvoiceIssued = {
    type: 'RenewalInvoiceIssued',
    data: {
      invoiceId: command.invoiceId,
      period: command.period,
      periodStart: s.currentPeriodEnd,
      periodEnd: periodEnd(s.anchor, s.terms, command.period),
      gracePeriodEndsAt: addHours(command.now, s.terms.gracePeriodHours),
      issuedAt: command.now,
    },
  };
  return [issued];
}

function renewalObstacle(s: Subscriber): string {
  if (s.status !== 'active') return `its status is ${s.status}`;
  if (s.cancelAtEnd) return 'it is cancelled at the end of the period';
  return 'the current period is unpaid';
}

function markPastDue(command: Extract<SubscriberCommand, { type: 'MarkPastDue' }>, s: Subscriber) {
  // Already past due, paid, cancelled, or paid in full and only waiting for
  // confirmations: the timer raced with something else, nothing to do.
  if (s.status !== 'active' || s.period === 0 || !isOpen(currentInvoice(s)) || command.awaitingConfirmations) return [];
  requireTime(command.now, 'now');
  if (!isPastDueDue(s, command.now)) {
    throw new DomainError('conflict', `Subscriber is not past due before ${s.gracePeriodEndsAt}`);
  }
  const pastDue: SubscriberPastDue = {
    type: 'SubscriberPastDue',
    data: { invoiceId: currentInvoice(s).invoiceId, pastDueAt: command.now },
  };
  return [pastDue];
}

function cancel(command: Extract<SubscriberCommand, { type: 'CancelSubscriber' }>, s: Subscriber) {
  if (s.status === 'cancelled') {
    throw new DomainError('bad_request', 'Subscriber cannot be cancelled in its current status: cancelled');
  }
  requireTime(command.now, 'now');
  if (command.atPeriodEnd) {
    // Asked twice: the first one stands.
    if (s.cancelAtEnd) return [];
    const scheduled: CancellationScheduled = { type: 'CancellationScheduled', data: { scheduledAt: command.now } };
    return [scheduled];
  }
  const cancelled: SubscriberCancelled = {
    type: 'SubscriberCancelled',
    data: { reason: 'merchant', invoiceId: currentInvoice(s).invoiceId, cancelledAt: command.now },
  };
  return [cancelled];
}

function endAtPeriodEnd(command: Extract<SubscriberCommand, { type: 'EndAtPeriodEnd' }>, s: Subscriber) {
  if (s.status === 'cancelled') return [];
  requireTime(command.now, 'now');
  if (!s.cancelAtEnd) throw new DomainError('conflict', 'Subscriber is not set to cancel at the end of the period');
  if (!isPeriodEndCancellationDue(s, command.now)) {
    throw new DomainError('conflict', `The billing period does not end before ${s.currentPeriodEnd}`);
  }
  const cancelled: SubscriberCancelled = {
    type: 'SubscriberCancelled',
    data: { reason: 'period_end', invoiceId: currentInvoice(s).invoiceId, cancelledAt: command.now },
  };
  return [cancelled];
}

function abandon(command: Extract<SubscriberCommand, { type: 'AbandonEnrollment' }>, state: SubscriberState) {
  if (state !== null && 'abandoned' in state) return [];
  // Written after all: the enrollment was slow, not lost.
  if (state !== null)
    throw new DomainError('conflict', `Subscriber ${state.id} exists: its enrollment was not abandoned`);
  const abandoned: EnrollmentAbandoned = {
    type: 'EnrollmentAbandoned',
    data: { subscriberId: command.subscriberId, abandonedAt: command.now },
  };
  return [abandoned];
}

function decide(command: SubscriberCommand, state: SubscriberState): SubscriberEvent[] {
  if (command.type === 'EnrollSubscriber') return enroll(command, state);
  if (command.type === 'AbandonEnrollment') return abandon(command, state);
  const subscriber = requireSubscriber(state);
  switch (command.type) {
    case 'RecordInvoicePaid':
      return recordPaid(command, subscriber);
    case 'RecordInvoiceUnpaid':
      return recordUnpaid(command, subscriber);
    case 'RecordInvoiceClosed':
      return recordClosed(command, subscriber);
    case 'RecordRenewal':
      return recordRenewal(command, subscriber);
    case 'MarkPastDue':
      return markPastDue(command, subscriber);
    case 'CancelSubscriber':
      return cancel(command, subscriber);
    case 'EndAtPeriodEnd':
      return endAtPeriodEnd(command, subscriber);
  }
}

// ---------------------------------------------------------------- evolve

const updateCurrentInvoice = (s: Subscriber, change: Partial<PeriodInvoice>): PeriodInvoice[] =>
  s.invoices.map((invoice, i) => (i === s.invoices.length - 1 ? { ...invoice, ...change } : invoice));

function evolve(state: SubscriberState, event: SubscriberEvent): SubscriberState {
  if (event.type === 'SubscriberEnrolled') {
    const d = event.data;
    return {
      id: d.id,
      merchantId: d.merchantId,
      planId: d.planId,
      email: d.email,
      externalId: d.externalId,
      metadata: d.metadata,
      terms: d.terms,
      status: 'pending',
      anchor: d.periodStart,
      period: 0,
      currentPeriodStart: d.periodStart,
      currentPeriodEnd: d.periodEnd,
      gracePeriodEndsAt: d.gracePeriodEndsAt,
      cancelAtEnd: false,
      invoices: [
        {
          invoiceId: d.invoiceId,
          period: 0,
          periodStart: d.periodStart,
          periodEnd: d.periodEnd,
          gracePeriodEndsAt: d.gracePeriodEndsAt,
          issuedAt: d.enrolledAt,
          paidAt: null,
          closedAt: null,
        },
      ],
      activatedAt: null,
      pastDueAt: null,
      cancelledAt: null,
      cancellationReason: null,
      createdAt: d.enrolledAt,
      updatedAt: d.enrolledAt,
    };
  }
  if (event.type === 'EnrollmentAbandoned') return { abandoned: true };
  // Events only exist after SubscriberEnrolled; a stream that says otherwise is corrupt.
  if (state === null || 'abandoned' in state) throw new Error(`${event.type} before SubscriberEnrolled`);
  switch (event.type) {
    case 'SubscriberActivated': {
      const { periodStart, periodEnd: end } = event.data;
      return {
        ...state,
        status: 'active',
        activatedAt: event.data.activatedAt,
        ...(periodStart !== undefined &&
          end !== undefined && { anchor: periodStart, currentPeriodStart: periodStart, currentPeriodEnd: end }),
        invoices: updateCurrentInvoice(state, { paidAt: event.data.activatedAt }),
        updatedAt: event.data.activatedAt,
      };
    }
    case 'RenewalInvoiceIssued': {
      const d = event.data;
      return {
        ...state,
        period: d.period,
        currentPeriodStart: d.periodStart,
        currentPeriodEnd: d.periodEnd,
        gracePeriodEndsAt: d.gracePeriodEndsAt,
        invoices: [
          ...state.invoices,
          {
            invoiceId: d.invoiceId,
            period: d.period,
            periodStart: d.periodStart,
            periodEnd: d.periodEnd,
            gracePeriodEndsAt: d.gracePeriodEndsAt,
            issuedAt: d.issuedAt,
            paidAt: null,
            closedAt: null,
          },
        ],
        updatedAt: d.issuedAt,
      };
    }
    case 'PeriodPaymentReversed': {
      const d = event.data;
      const first = state.invoices[0]!;
      return {
        ...state,
        status: d.status,
        pastDueAt: d.status === 'past_due' ? d.reversedAt : null,
        // Unpaid, the first period is the one enrolled for again, even if the payment had restarted it.
        ...(d.period === 0 && {
          activatedAt: null,
          anchor: first.periodStart,
          currentPeriodStart: first.periodStart,
          currentPeriodEnd: first.periodEnd,
        }),
        invoices: updateCurrentInvoice(state, { paidAt: null }),
        updatedAt: d.reversedAt,
      };
    }
    case 'RenewalPaid':
      return {
        ...state,
        status: 'active',
        pastDueAt: null,
        invoices: updateCurrentInvoice(state, { paidAt: event.data.paidAt }),
        updatedAt: event.data.paidAt,
      };
    case 'SubscriberPastDue':
      return { ...state, status: 'past_due', pastDueAt: event.data.pastDueAt, updatedAt: event.data.pastDueAt };
    case 'CancellationScheduled':
      return { ...state, cancelAtEnd: true, updatedAt: event.data.scheduledAt };
    case 'SubscriberCancelled':
      return {
        ...state,
        status: 'cancelled',
        cancelledAt: event.data.cancelledAt,
        cancellationReason: event.data.reason,
        invoices:
          event.data.reason === 'unpaid'
            ? updateCurrentInvoice(state, { closedAt: event.data.cancelledAt })
            : state.invoices,
        updatedAt: event.data.cancelledAt,
      };
  }
}

export const subscriberDecider: Decider<SubscriberCommand, SubscriberState, SubscriberEvent> = {
  initialState: null,
  decide,
  evolve,
};

// ---------------------------------------------------------------- the enrollment reservation

// One stream per (merchant, plan, e-mail address). Appending to it with the
// revision that was read makes enrollment race-safe: of two concurrent
// enrollments of one address, one reserves, the other is decided again on the
// fresh stream and finds it held. A cancelled subscriber's reservation is
// released (by the subscription manager, or by the next enrollment that finds
// it cancelled), so the address can be enrolled again.

export type EnrollmentEvent =
  | DomainEvent<'EnrollmentReserved', { subscriberId: string; reservedAt: string }>
  | DomainEvent<'EnrollmentReleased', { subscriberId: string; releasedAt: string }>;

export type EnrollmentCommand =
  | { type: 'ReserveEnrollment'; subscriberId: string; now: string }
  | { type: 'ReleaseEnrollment'; subscriberId: string; now: string };

/** Who holds the address in the plan, if anyone. */
export interface EnrollmentState {
  holder: string | null;
}

export const enrollmentDecider: Decider<EnrollmentCommand, EnrollmentState, EnrollmentEvent> = {
  initialState: { holder: null },

  decide(command, state) {
    switch (command.type) {
      case 'ReserveEnrollment':
        if (state.holder === command.subscriberId) return [];
        // The caller looks the holder up to say which status it has.
        if (state.holder !== null) throw new DomainError('conflict', 'Subscriber is already enrolled in this plan');
        return [{ type: 'EnrollmentReserved', data: { subscriberId: command.subscriberId, reservedAt: command.now } }];
      case 'ReleaseEnrollment':
        // Only the holder's release counts; a late or repeated one changes nothing.
        if (state.holder !== command.subscriberId) return [];
        return [{ type: 'EnrollmentReleased', data: { subscriberId: command.subscriberId, releasedAt: command.now } }];
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'EnrollmentReserved':
        return { holder: event.data.subscriberId };
      case 'EnrollmentReleased':
        return state.holder === event.data.subscriberId ? { holder: null } : state;
    }
  },
};
