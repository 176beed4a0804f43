// The process manager that turns domain events into the merchant's webhooks.
// It writes each webhook to the outbox in the same transaction as its
// checkpoint (it runs as a projector), so a webhook is enqueued once for each
// event however often the manager runs; the delivery worker sends them.
// It owns no table a rebuild may empty: replaying finds the outbox rows
// already there and adds nothing.
import type { Kysely } from 'kysely';
import { v5 as uuidv5 } from 'uuid';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import {
  countedTotal,
  invoiceDecider,
  invoicePaymentView,
  paymentQuote,
  type Invoice,
  type InvoiceEvent,
} from '../domain/invoice.ts';
import { merchantDecider, merchantStream, type Merchant, type MerchantEvent } from '../domain/merchant.ts';
import { eventsByStream } from '../projections/batch.ts';
import type { Projector } from '../projections/engine.ts';
import { enqueueWebhook } from './webhook-delivery.ts';

const WEBHOOK_EVENT_NAMESPACE = '8e0f5a36-6a3e-4f44-9b8e-2d7c1b9e4a51';

/** The event id a webhook keeps on every delivery and redelivery: derived from its cause. */
export const webhookEventId = (causeEventId: string, event: string) =>
  uuidv5(`${causeEventId}/${event}`, WEBHOOK_EVENT_NAMESPACE);

interface Histories {
  invoices: Map<string, RecordedEvent[]>;
  merchants: Map<string, Merchant | null>;
}

const fold = (history: RecordedEvent[], upTo: number) =>
  history
    .filter((e) => e.revision <= upTo)
    .reduce(
      (state, e) => invoiceDecider.evolve(state, { type: e.type, data: e.data } as InvoiceEvent),
      invoiceDecider.initialState,
    );

/** Which webhooks an invoice event causes, given the invoice before and after it. */
export function invoiceWebhooks(event: RecordedEvent, before: Invoice | null, after: Invoice): string[] {
  switch (event.type) {
    case 'InvoiceConfirmed':
      return ['invoice.confirmed'];
    case 'InvoiceSettled':
      return ['invoice.settled'];
    case 'InvoiceExpired':
    case 'InvoiceCancelled':
      return ['invoice.expired'];
    case 'PaymentApplied': {
      const names: string[] = [];
      const quote = paymentQuote(after);
      const wasOver = before !== null && quote !== undefined && countedTotal(before) > quote.cryptoAmount;
      if (quote !== undefined && countedTotal(after) > quote.cryptoAmount && !wasOver) names.push('invoice.overpaid');
      if (after.status === 'partial' && countedTotal(after) !== (before ? countedTotal(before) : 0n)) {
        names.push('invoice.underpaid');
      }
      return names;
    }
    default:
      return [];
  }
}

/** `data.invoice` of a webhook: the invoice, its metadata and where its payment stands. */
export function invoicePayload(invoice: Invoice) {
  const view = invoicePaymentView(invoice);
  return {
    id: invoice.id,
    merchantId: invoice.merchantId,
    amount: invoice.amount,
    currency: invoice.currency,
    status: invoice.status,
    description: invoice.description,
    expiresAt: invoice.expiresAt,
    createdAt: invoice.createdAt,
    updatedAt: invoice.updatedAt,
    metadata: invoice.metadata,
    subscriberId: invoice.subscriberId ?? null,
    chain: view.chain,
    cryptoCurrency: view.token,
    cryptoAmount: view.cryptoAmount,
    totalReceivedAmount: view.totalReceivedAmount,
    remainingAmount: view.remainingAmount,
    paymentIssueType: view.paymentIssueType,
    txHash: view.txHash,
    settledAmount: invoice.settlement?.settledAmount ?? null,
  };
}

export const webhookEvents: Projector<Histories> = {
  name: 'webhook-events',
  tables: [],

  async prepare(batch: readonly RecordedEvent[], store: EventStore) {
    // A stream the batch begins (a new payment's invoice) needs no read: `apply` folds up to events in the batch.
    const invoices = new Map(
      await Promise.all(
        [...eventsByStream(batch, (s) => s.startsWith('invoice-'))].map(
          async ([s, events]) => [s, events[0]!.revision === 0 ? events : await store.readStream(s)] as const,
        ),
      ),
    );
    const merchantIds = new Set<string>();
    for (const history of invoices.values()) {
      const created = history[0];
      if (created?.type === 'InvoiceCreated') merchantIds.add((created.data as { merchantId: string }).merchantId);
    }
    const merchants = new Map(
      await Promise.all(
        [...merchantIds].map(async (id) => {
          const events = await store.readStream(merchantStream(id));
          const merchant = events.reduce(
            (state, e) => merchantDecider.evolve(state, { type: e.type, data: e.data } as MerchantEvent),
            merchantDecider.initialState,
          );
          return [id, merchant] as const;
        }),
      ),
    );
    return { invoices, merchants };
  },

  async apply(trx: Kysely<any>, event: RecordedEvent, { invoices, merchants }: Histories) {
    const history = invoices.get(event.streamId);
    if (!history) return;
    const after = fold(history, event.revision);
    if (!after) return;
    const names = invoiceWebhooks(event, fold(history, event.revision - 1), after);
    // The invoice's own webhook URL, else the merchant's default (as it is now).
    const url = after.webhookUrl ?? merchants.get(after.merchantId)?.webhookUrl ?? null;
    if (names.length === 0 || !url) return;
    for (const name of names) {
      const eventId = webhookEventId(event.id, name);
      await enqueueWebhook(trx, {
        eventId,
        event: name,
        merchantId: after.merchantId,
        url,
        payload: {
          eventId,
          event: name,
          createdAt: event.recordedAt.toISOString(),
          data: { invoice: invoicePayload(after) },
        },
      });
    }
  },
};
