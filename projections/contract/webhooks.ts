// Every webhook the contract names, in one list (the test event's choices,
// the dashboard's), and the test event: a simulated event of a chosen type,
// with the sample of its resource.
import { INVOICE_WEBHOOKS, sampleInvoicePayload, type InvoiceWebhook } from './invoice.ts';
import { REFUND_WEBHOOKS, sampleRefund, type RefundWebhook } from './refund.ts';
import { sampleFailedSettlement, SETTLEMENT_WEBHOOKS } from './settlement.ts';
import { sampleSubscriber, SUBSCRIBER_WEBHOOKS, subscriberPayload, type SubscriberWebhook } from './subscriber.ts';

export const WEBHOOK_EVENT_TYPES = [
  ...INVOICE_WEBHOOKS,
  ...SETTLEMENT_WEBHOOKS,
  ...Object.values(SUBSCRIBER_WEBHOOKS),
  ...Object.values(REFUND_WEBHOOKS),
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

const isSubscriberWebhook = (event: WebhookEventType): event is SubscriberWebhook => event.startsWith('subscriber.');
const isRefundWebhook = (event: WebhookEventType): event is RefundWebhook => event.startsWith('refund.');

/**
 * A simulated event of the given type in the envelope real events use
 * ({ eventId, event, createdAt, data }), marked `test: true`, with a sample
 * invoice, settlement, refund or subscriber of the real shape, so receivers
 * can exercise their whole handler, signature check included.
 */
export function sampleWebhookEvent(event: WebhookEventType, eventId: string, merchantId: string, now: Date) {
  const createdAt = now.toISOString();
  const data =
    event === 'settlement.failed'
      ? sampleFailedSettlement(now)
      : isRefundWebhook(event)
        ? sampleRefund(event, now)
        : isSubscriberWebhook(event)
          ? subscriberPayload(sampleSubscriber(event, merchantId, now))
          : { invoice: sampleInvoicePayload(event as InvoiceWebhook, merchantId, now) };
  return { eventId, event, createdAt, test: true, data };
}
