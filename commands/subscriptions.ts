// Subscriptions: the merchant's commands on plans and subscribers and the
// process manager that carries invoice outcomes onto subscribers (the
// renewal scheduler that bills each period on the business clock:
// renewals.ts; their webhooks: projections/webhook-outboxes.ts).
//
// Invoices of subscribers are ordinary invoices (invoiceCommands.create with a
// subscriberId): they are paid, confirmed, expired and settled like any other.
import { randomUUID } from 'node:crypto';
import type { Clock } from '../adapters/clock.ts';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import { DomainError, fold } from '../domain/decider.ts';
import {
  invoiceDecider,
  invoiceStreamName,
  isPaidInFull,
  type Invoice,
  type InvoiceEvent,
  type JsonObject,
} from '../domain/invoice.ts';
import { periodEnd, planDecider, planStreamName, type Plan, type PlanTerms } from '../domain/plan.ts';
import {
  checkEnrollment,
  currentInvoice,
  duplicateEnrollmentMessage,
  enrollmentDecider,
  enrollmentStreamName,
  firstInvoiceHours,
  isPastDueDue,
  isPeriodEndCancellationDue,
  isRenewalDue,
  renewalInvoiceHours,
  subscriberDecider,
  subscriberIn,
  periodInvoiceId,
  subscriberStreamName,
  type EnrollmentEvent,
  type Subscriber,
  type SubscriberCommand,
} from '../domain/subscriber.ts';
import type { Reactor } from '../adapters/event-store/followers.ts';
import { handleCommand, handleWritten, loadState, type HandleOptions, type Written } from './handle.ts';
import type { InvoiceCommands } from './invoices.ts';
import { streams } from '../domain/streams.ts';

/** A reservation whose subscriber never got written (a crash in between) is taken over after this long. */
const ABANDONED_RESERVATION_MS = 60_000;

export interface NewPlan extends PlanTerms {
  description: string | null;
}

export interface NewEnrollment {
  planId: string;
  email: string;
  externalId: string | null;
  metadata: JsonObject | null;
}

export interface SubscriptionDeps {
  store: EventStore;
  clock: Clock;
  invoices: Pick<InvoiceCommands, 'create' | 'cancel'>;
  /** How old a reservation without its subscriber must be to be taken over; ABANDONED_RESERVATION_MS by default. */
  abandonReservationsAfterMs?: number;
}

const dateOf = (iso: string) => iso.slice(0, 10);

/** The description of a period's invoice, e.g. "Pro: 2025-01-31 to 2025-02-28". */
const periodDescription = (terms: PlanTerms, start: string, end: string) =>
  `${terms.name}: ${dateOf(start)} to ${dateOf(end)}`;

/**
 * The metadata of a subscriber's invoices: the subscriber's own metadata, so
 * that invoice webhooks carry it too, plus who the invoice is for (these keys
 * win over the merchant's own of the same name).
 */
const invoiceMetadata = (s: {
  id: string;
  planId: string;
  externalId: string | null;
  metadata: JsonObject | null;
}): JsonObject => ({
  ...s.metadata,
  subscriberId: s.id,
  planId: s.planId,
  externalId: s.externalId,
});

export function subscriptionCommands({
  store,
  clock,
  invoices,
  abandonReservationsAfterMs = ABANDONED_RESERVATION_MS,
}: SubscriptionDeps) {
  const now = () => clock.now().toISOString();
  /** A command to a subscriber; the answer's state is the subscriber written, if any. */
  const subscriberCommand = async (subscriberId: string, command: SubscriberCommand, options: HandleOptions = {}) => {
    const handled = await handleCommand(store, subscriberDecider, subscriberStreamName(subscriberId), command, options);
    return { ...handled, state: subscriberIn(handled.state) };
  };
  /** The subscriber as its stream has it; null when never written (or abandoned). */
  const loadSubscriber = async (subscriberId: string) =>
    subscriberIn(await loadState(store, subscriberDecider, subscriberStreamName(subscriberId)));

  async function planOf(planId: string, merchantId: string): Promise<Plan> {
    const plan = await loadState(store, planDecider, planStreamName(planId));
    // Another merchant's plan is reported exactly like a missing one.
    if (!plan || plan.merchantId !== merchantId) throw new DomainError('not_found', 'Subscription plan not found');
    return plan;
  }

  async function subscriberOf(subscriberId: string, merchantId: string): Promise<Subscriber> {
    const subscriber = await loadSubscriber(subscriberId);
    if (!subscriber || subscriber.merchantId !== merchantId) throw new DomainError('not_found', 'Subscriber not found');
    return subscriber;
  }

  /** Cancels a subscriber's invoice that nobody should pay any more; one that is paid or closed stays as it is. */
  async function voidInvoice(invoiceId: string, merchantId: string): Promise<string | undefined> {
    try {
      return (await invoices.cancel(invoiceId, merchantId)).position;
    } catch (error) {
      // Not pending any more (paid, partly paid, expired): it keeps its course.
      if (error instanceof DomainError) return undefined;
      throw error;
    }
  }

  /** Who holds the address in the plan, as the contract's 409 says it. */
  async function heldMessage(stream: string): Promise<string> {
    const { holder } = fold(
      enrollmentDecider,
      (await store.readStream(stream)).map((r) => ({ type: r.type, data: r.data }) as EnrollmentEvent),
    );
    const held = holder === null ? null : await loadSubscriber(holder);
    return duplicateEnrollmentMessage(held?.status ?? 'pending');
  }

  /**
   * Takes the e-mail address in the plan for `subscriberId`. When it is held:
   * by a live subscriber, 409 with its status; by a cancelled one (its release
   * not yet made) or by a reservation whose subscriber was never written, the
   * hold is released and the reservation tried again. Two enrollments racing
   * for one address append to the same stream with the revision they read, so
   * only one of them can get it.
   *
   * A reservation is taken over only after its subscriber's stream is closed
   * to it (EnrollmentAbandoned, appended where the subscriber would be): an
   * enrollment that was slow rather than lost then cannot write its
   * subscriber afterwards, and one that wrote it first makes the take-over
   * fail, so one address is never enrolled twice.
   */
  async function reserve(stream: string, subscriberId: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await handleCommand(store, enrollmentDecider, stream, {
          type: 'ReserveEnrollment',
          subscriberId,
          now: now(),
        });
        return;
      } catch (error) {
        if (!(error instanceof DomainError) || error.kind !== 'conflict') throw error;
        // Contested five times over: someone holds it; say who, in the contract's words.
        if (attempt >= 5) throw new DomainError('conflict', await heldMessage(stream));
      }
      const recorded = await store.readStream(stream);
      const { holder } = fold(
        enrollmentDecider,
        recorded.map((r) => ({ type: r.type, data: r.data }) as EnrollmentEvent),
      );
      if (holder === null) continue;
      const held = await loadSubscriber(holder);
      if (held === null) {
        const reserved = [...recorded].reverse().find((r) => r.type === 'EnrollmentReserved');
        // Most likely an enrollment still on its way: its subscriber is pending.
        if (reserved && Date.now() - reserved.recordedAt.getTime() < abandonReservationsAfterMs) {
          throw new DomainError('conflict', duplicateEnrollmentMessage('pending'));
        }
        try {
          await subscriberCommand(holder, { type: 'AbandonEnrollment', subscriberId: holder, now: now() });
        } catch (error) {
          // Its subscriber was written meanwhile: the next round finds it live.
          if (error instanceof DomainError && error.kind === 'conflict') continue;
          throw error;
        }
      } else if (held.status !== 'cancelled') {
        throw new DomainError('conflict', duplicateEnrollmentMessage(held.status));
      }
      await handleCommand(store, enrollmentDecider, stream, {
        type: 'ReleaseEnrollment',
        subscriberId: holder,
        now: now(),
      });
    }
  }

  /** Gives a cancelled (or never written) subscriber's e-mail address in the plan back. */
  async function release(stream: string, subscriberId: string, options: HandleOptions = {}) {
    return handleCommand(
      store,
      enrollmentDecider,
      stream,
      { type: 'ReleaseEnrollment', subscriberId, now: now() },
      options,
    );
  }

  /** What follows a cancellation: the address is free again and the open invoice can no longer be paid. */
  async function afterCancellation(subscriber: Subscriber, options: HandleOptions = {}): Promise<string | undefined> {
    if (subscriber.status !== 'cancelled') return undefined;
    const released = await release(
      enrollmentStreamName(subscriber.merchantId, subscriber.planId, subscriber.email),
      subscriber.id,
      options,
    );
    const open = currentInvoice(subscriber);
    const voided =
      open.paidAt === null && open.closedAt === null
        ? await voidInvoice(open.invoiceId, subscriber.merchantId)
        : undefined;
    return latest(store, released.position, voided);
  }

  return {
    planOf,
    subscriberOf,
    afterCancellation,

    async createPlan(merchantId: string, input: NewPlan, correlationId?: string): Promise<Written<Plan>> {
      const id = randomUUID();
      return handleWritten(
        store,
        planDecider,
        planStreamName(id),
        { type: 'CreatePlan', id, merchantId, ...input, now: now() },
        { correlationId },
      );
    },

    async archivePlan(planId: string, merchantId: string, correlationId?: string): Promise<Written<Plan>> {
      await planOf(planId, merchantId);
      return handleWritten(
        store,
        planDecider,
        planStreamName(planId),
        { type: 'ArchivePlan', now: now() },
        { correlationId },
      );
    },

    /**
     * Enrolls an e-mail address into a plan: reserves the address in the plan,
     * creates the first period's invoice (payable until the end of the grace
     * period), then writes the subscriber, pending until that invoice is paid.
     */
    async enroll(
      merchantId: string,
      input: NewEnrollment,
      correlationId?: string,
    ): Promise<Written<{ subscriber: Subscriber; invoice: Invoice }>> {
      const plan = checkEnrollment(
        await loadState(store, planDecider, planStreamName(input.planId)),
        merchantId,
        input,
      );
      const id = randomUUID();
      const reservation = enrollmentStreamName(merchantId, plan.id, input.email);
      await reserve(reservation, id);
      // Known before it exists, so that a failure at any point can void it.
      const invoiceId = periodInvoiceId(id, 0);
      try {
        const start = now();
        const created = await invoices.create(
          merchantId,
          {
            amount: plan.amount,
            currency: plan.currency,
            description: periodDescription(plan, start, periodEnd(start, plan, 0)),
            expiresInMinutes: firstInvoiceHours(plan) * 60,
            webhookUrl: null,
            metadata: invoiceMetadata({ id, planId: plan.id, externalId: input.externalId, metadata: input.metadata }),
            subscriberId: id,
            id: periodInvoiceId(id, 0),
          },
          correlationId,
        );
        const invoice = created.value;
        const { state, position } = await subscriberCommand(
          id,
          {
            type: 'EnrollSubscriber',
            id,
            merchantId,
            plan,
            email: input.email,
            externalId: input.externalId,
            metadata: input.metadata,
            invoiceId: invoice.id,
            // The invoice's own creation time: its expiry is then exactly the end of the grace period.
            now: invoice.createdAt,
          },
          { correlationId },
        );
        return { value: { subscriber: state!, invoice }, position };
      } catch (error) {
        // Not enrolled after all (unless the subscriber was written and only the answer got lost):
        // the address is free again and the invoice nobody was given cannot be paid.
        const state = await loadState(store, subscriberDecider, subscriberStreamName(id));
        if (subscriberIn(state) === null) {
          await release(reservation, id).catch(() => undefined);
          await voidInvoice(invoiceId, merchantId).catch(() => undefined);
        }
        // So slow that another enrollment of the address took it over: that one holds it now.
        if (state !== null && 'abandoned' in state) throw new DomainError('conflict', await heldMessage(reservation));
        throw error;
      }
    },

    /** Cancels now, or at the end of the current period (`atPeriodEnd`). */
    async cancel(
      subscriberId: string,
      merchantId: string,
      atPeriodEnd: boolean,
      correlationId?: string,
    ): Promise<Written<Subscriber>> {
      await subscriberOf(subscriberId, merchantId);
      const { state, position } = await subscriberCommand(
        subscriberId,
        { type: 'CancelSubscriber', atPeriodEnd, now: now() },
        { correlationId },
      );
      // Also done by the subscription manager; here so that the answer already shows it.
      const after = await afterCancellation(state!, { correlationId });
      return { value: state!, position: latest(store, position, after) };
    },

    /**
     * The end of the current period: cancels a subscriber set to cancel then,
     * or creates the next period's invoice. Decided on the subscriber's own
     * stream, so a stale read model asks in vain. Returns whether it did anything.
     */
    async renew(subscriberId: string): Promise<boolean> {
      const subscriber = await loadSubscriber(subscriberId);
      if (!subscriber) return false;
      if (isPeriodEndCancellationDue(subscriber, now())) {
        const { events } = await subscriberCommand(subscriberId, { type: 'EndAtPeriodEnd', now: now() });
        return events.length > 0;
      }
      if (!isRenewalDue(subscriber, now())) return false;
      const period = subscriber.period + 1;
      const created = await invoices.create(subscriber.merchantId, {
        amount: subscriber.terms.amount,
        currency: subscriber.terms.currency,
        description: periodDescription(
          subscriber.terms,
          subscriber.currentPeriodEnd,
          periodEnd(subscriber.anchor, subscriber.terms, period),
        ),
        expiresInMinutes: renewalInvoiceHours(subscriber.terms) * 60,
        webhookUrl: null,
        metadata: invoiceMetadata(subscriber),
        subscriberId,
        // The period's own id: a retry after a crash, or another instance
        // renewing at the same time, gets this same invoice, never a second.
        id: periodInvoiceId(subscriberId, period),
      });
      const invoice = created.value;
      let recorded: Subscriber | null = null;
      try {
        ({ state: recorded } = await subscriberCommand(subscriberId, {
          type: 'RecordRenewal',
          invoiceId: invoice.id,
          period,
          now: invoice.createdAt,
        }));
      } catch (error) {
        // Anything but a refusal leaves the outcome unknown: the next pass asks
        // again, with this same invoice.
        if (!(error instanceof DomainError)) throw error;
      }
      if (recorded && currentInvoice(recorded).invoiceId === invoice.id) return true;
      // Refused: the subscriber moved on meanwhile (cancelled), so nobody is to pay this invoice.
      await voidInvoice(invoice.id, subscriber.merchantId);
      return false;
    },

    /** A renewal unpaid at the end of its grace period: past due (not while a full payment awaits its confirmations). */
    async markPastDue(subscriberId: string): Promise<boolean> {
      const subscriber = await loadSubscriber(subscriberId);
      if (!subscriber || !isPastDueDue(subscriber, now())) return false;
      const invoice = await loadState(store, invoiceDecider, invoiceStreamName(currentInvoice(subscriber).invoiceId));
      const { events } = await subscriberCommand(subscriberId, {
        type: 'MarkPastDue',
        now: now(),
        awaitingConfirmations: invoice !== null && isPaidInFull(invoice),
      });
      return events.length > 0;
    },
  };
}

export type SubscriptionCommands = ReturnType<typeof subscriptionCommands>;

/** The later of some positions in the log. */
function latest(store: EventStore, ...positions: (string | undefined)[]): string | undefined {
  return positions.reduce<string | undefined>(
    (a, b) => (a === undefined ? b : b === undefined ? a : store.comparePositions(a, b) >= 0 ? a : b),
    undefined,
  );
}

// ---------------------------------------------------------------- the subscription manager

/**
 * The process manager between invoices and subscribers: a subscriber's
 * invoice confirmed → paid on the subscriber (activation, renewal); its
 * payment withdrawn by a reorg, leaving it unconfirmed → unpaid again on the
 * subscriber (back to pending, or to an unpaid period); expired or
 * cancelled → the subscriber is cancelled as unpaid, if it was the open one;
 * subscriber cancelled → its e-mail address is released in the plan and its
 * open invoice cancelled. Its commands derive their event ids from the
 * causing event, so a repeat after a crash appends nothing.
 */
export function subscriptionManager(store: EventStore, subscriptions: SubscriptionCommands): Reactor {
  const invoiceOutcomes = new Set(['InvoiceConfirmed', 'PaymentWithdrawn', 'InvoiceExpired', 'InvoiceCancelled']);
  return {
    name: 'subscription-manager',
    async react(recorded: RecordedEvent) {
      const options = { causationId: recorded.id, correlationId: recorded.metadata.correlationId };
      try {
        if (streams.invoice.holds(recorded.streamId) && invoiceOutcomes.has(recorded.type)) {
          const invoice = await loadState(store, invoiceDecider, recorded.streamId);
          if (!invoice?.subscriberId) return;
          const event = { type: recorded.type, data: recorded.data } as InvoiceEvent;
          let command: SubscriberCommand;
          if (event.type === 'InvoiceConfirmed') {
            command = { type: 'RecordInvoicePaid', invoiceId: invoice.id, paidAt: event.data.confirmedAt };
          } else if (event.type === 'PaymentWithdrawn') {
            // A reorg that leaves the invoice unconfirmed (as it stands now: confirmed again, nothing was lost).
            if (invoice.status === 'confirmed' || invoice.status === 'settled') return;
            command = { type: 'RecordInvoiceUnpaid', invoiceId: invoice.id, reversedAt: event.data.withdrawnAt };
          } else if (event.type === 'InvoiceExpired') {
            command = { type: 'RecordInvoiceClosed', invoiceId: invoice.id, closedAt: event.data.expiredAt };
          } else if (event.type === 'InvoiceCancelled') {
            command = { type: 'RecordInvoiceClosed', invoiceId: invoice.id, closedAt: event.data.cancelledAt };
          } else return;
          await handleCommand(store, subscriberDecider, subscriberStreamName(invoice.subscriberId), command, options);
        } else if (streams.subscriber.holds(recorded.streamId) && recorded.type === 'SubscriberCancelled') {
          const subscriber = subscriberIn(await loadState(store, subscriberDecider, recorded.streamId));
          if (subscriber) await subscriptions.afterCancellation(subscriber, options);
        }
      } catch (error) {
        // A refusal is deterministic (e.g. the invoice of an enrollment that
        // never completed): retrying would refuse again and hold up the rest.
        if (!(error instanceof DomainError)) throw error;
      }
    },
  };
}
