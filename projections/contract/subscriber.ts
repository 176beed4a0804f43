// The subscriber webhooks of the contract (README, "Subscriptions"): which
// event sends which, and the test event's sample Subscriber. The Subscriber
// object itself is projections/subscriptions.ts's subscriberRowView. Under projections/
// beside the outbox that sends them (see contract/invoice.ts).
import { randomUUID } from 'node:crypto';
import type { SubscriberEvent } from '../../domain/subscriber.ts';
import type { SubscriberView } from '../subscriptions.ts';

/** The webhook each subscriber event sends (README, "Subscriptions"); an abandoned enrollment had no subscriber to tell of. */
export const SUBSCRIBER_WEBHOOKS = {
  SubscriberEnrolled: 'subscriber.enrolled',
  SubscriberActivated: 'subscriber.activated',
  RenewalInvoiceIssued: 'subscriber.renewal_invoice_created',
  RenewalPaid: 'subscriber.renewed',
  PeriodPaymentReversed: 'subscriber.payment_reversed',
  SubscriberPastDue: 'subscriber.past_due',
  CancellationScheduled: 'subscriber.cancellation_scheduled',
  SubscriberCancelled: 'subscriber.cancelled',
} as const satisfies Record<Exclude<SubscriberEvent['type'], 'EnrollmentAbandoned'>, `subscriber.${string}`>;
export type SubscriberWebhook = (typeof SUBSCRIBER_WEBHOOKS)[keyof typeof SUBSCRIBER_WEBHOOKS];

/** The webhook a recorded event of this type sends, if it is a subscriber event that sends one. */
export const subscriberWebhookOf = (eventType: string): SubscriberWebhook | undefined =>
  Object.hasOwn(SUBSCRIBER_WEBHOOKS, eventType)
    ? SUBSCRIBER_WEBHOOKS[eventType as keyof typeof SUBSCRIBER_WEBHOOKS]
    : undefined;

const subscriberStatusAfter: Partial<Record<SubscriberWebhook, SubscriberView['status']>> = {
  'subscriber.enrolled': 'pending',
  'subscriber.past_due': 'past_due',
  'subscriber.payment_reversed': 'pending',
  'subscriber.cancelled': 'cancelled',
};

/** A Subscriber in the state `event` leaves it. */
export function sampleSubscriber(event: SubscriberWebhook, merchantId: string, now: Date): SubscriberView {
  const day = 24 * 60 * 60_000;
  return {
    id: randomUUID(),
    merchantId,
    planId: randomUUID(),
    email: 'subscriber@example.com',
    externalId: 'test_customer_123',
    status: subscriberStatusAfter[event] ?? 'active',
    currentPeriodStart: now.toISOString(),
    currentPeriodEnd: new Date(now.getTime() + 30 * day).toISOString(),
    gracePeriodEndsAt: new Date(now.getTime() + 3 * day).toISOString(),
    cancelAtEnd: event === 'subscriber.cancellation_scheduled',
    metadata: { plan: 'test' },
    createdAt: now.toISOString(),
  };
}

/** What every subscriber webhook's `data` begins with: the Subscriber, and its externalId and metadata beside it. */
export const subscriberPayload = (subscriber: SubscriberView) => ({
  subscriber,
  externalId: subscriber.externalId,
  metadata: subscriber.metadata,
});
