// The webhook outboxes: three projectors that turn domain events into the
// merchant's webhooks (interface.md, "Webhooks"; refunds.md; README,
// "Subscriptions"). Each writes a webhook to the outbox (enqueueWebhook) in
// the same transaction as its checkpoint, so a webhook is enqueued once for
// each event however often the projector runs; the delivery worker sends it.
// None owns a table a rebuild may empty: replaying finds the outbox rows
// already there (a webhook's id follows from its cause's) and adds nothing.
// Their names are their checkpoints': renaming one would send its webhooks again.
import type { Kysely } from 'kysely';
import { v5 as uuidv5 } from 'uuid';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import { loadState } from '../commands/handle.ts';
import { enqueueWebhook } from '../commands/webhook-delivery.ts';
import { fold, type Decider, type DomainEvent } from '../domain/decider.ts';
import { countedTotal, invoiceDecider, invoiceStreamName, paymentQuote, type Invoice } from '../domain/invoice.ts';
import { merchantDecider, merchantStream, type Merchant } from '../domain/merchant.ts';
import { refundDecider, type RefundEvent } from '../domain/refund.ts';
import { requestedSettlement, settlementDecider } from '../domain/settlement.ts';
import { streams } from '../domain/streams.ts';
import { subscriberDecider, subscriberIn, type SubscriberEvent } from '../domain/subscriber.ts';
import { subscriberViewOf } from './subscriptions.ts';
import { eventsByStream } from './batch.ts';
import type { Projector } from '../adapters/event-store/followers.ts';
import { refundPayload, refundWebhookOf } from './contract/refund.ts';
import { settlementPayload } from './contract/settlement.ts';
import { subscriberPayload, subscriberWebhookOf } from './contract/subscriber.ts';
import { invoicePayload, subscriberInvoicePayload, type InvoiceWebhook } from './contract/invoice.ts';

const WEBHOOK_EVENT_NAMESPACE = '8e0f5a36-6a3e-4f44-9b8e-2d7c1b9e4a51';

/** The event id a webhook keeps on every delivery and redelivery: derived from its cause. */
export const webhookEventId = (causeEventId: string, event: string) =>
  uuidv5(`${causeEventId}/${event}`, WEBHOOK_EVENT_NAMESPACE);

/** The webhook `name` that `cause` sends to `url`, in the outbox, with `data` in the envelope. */
function enqueue(trx: Kysely<any>, cause: RecordedEvent, name: string, merchantId: string, url: string, data: unknown) {
  const eventId = webhookEventId(cause.id, name);
  return enqueueWebhook(trx, {
    eventId,
    event: name,
    merchantId,
    url,
    payload: { eventId, event: name, createdAt: cause.recordedAt.toISOString(), data },
  });
}

/** The state a stream's recorded events leave, folded by its aggregate's decider; `keep` picks the events. */
function stateOf<Command, State, Event extends DomainEvent>(
  decider: Decider<Command, State, Event>,
  history: readonly RecordedEvent[],
  keep: (e: RecordedEvent) => boolean = () => true,
): State {
  return fold(
    decider,
    history.filter(keep).map((e) => ({ type: e.type, data: e.data }) as Event),
  );
}

/** Each merchant as its stream now stands: where its webhooks go when the invoice names no URL. */
const merchantsById = async (store: EventStore, ids: Iterable<string>) =>
  new Map(
    await Promise.all(
      [...new Set(ids)].map(async (id) => [id, await loadState(store, merchantDecider, merchantStream(id))] as const),
    ),
  );

const readStreams = async (store: EventStore, streamIds: Iterable<string>) =>
  new Map(await Promise.all([...new Set(streamIds)].map(async (s) => [s, await store.readStream(s)] as const)));

// ---------------------------------------------------------------- invoice and settlement webhooks

interface InvoiceHistories {
  invoices: Map<string, RecordedEvent[]>;
  /** Settlement streams with a failure in the batch. */
  settlements: Map<string, RecordedEvent[]>;
  merchants: Map<string, Merchant | null>;
}

/** Which webhooks an invoice event causes, given the invoice before and after it. */
function invoiceWebhooks(event: RecordedEvent, before: Invoice | null, after: Invoice): InvoiceWebhook[] {
  switch (event.type) {
    case 'InvoiceConfirmed':
      return ['invoice.confirmed'];
    case 'InvoiceSettled':
      return ['invoice.settled'];
    case 'InvoiceExpired':
    case 'InvoiceCancelled':
      return ['invoice.expired'];
    case 'PaymentApplied': {
      const names: InvoiceWebhook[] = [];
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

const invoiceUpTo = (history: readonly RecordedEvent[], revision: number) =>
  stateOf(invoiceDecider, history, (e) => e.revision <= revision);

/** The `invoice.*` webhooks and `settlement.failed`. */
export const webhookEvents: Projector<InvoiceHistories> = {
  name: 'webhook-events',
  tables: [],

  async prepare(batch: readonly RecordedEvent[], store: EventStore) {
    // A stream the batch begins (a new payment's invoice) needs no read: `apply` folds up to events in the batch.
    const invoices = new Map(
      await Promise.all(
        [...eventsByStream(batch, streams.invoice.holds)].map(
          async ([s, events]) => [s, events[0]!.revision === 0 ? events : await store.readStream(s)] as const,
        ),
      ),
    );
    // A settlement that failed: its webhook goes where its invoice's do, with the Settlement as data.
    const settlements = await readStreams(
      store,
      [...eventsByStream(batch, streams.settlement.holds)]
        .filter(([, events]) => events.some((e) => e.type === 'SettlementFailed'))
        .map(([s]) => s),
    );
    for (const history of settlements.values()) {
      // Not the stream's first event: refunds held before the request (refunds.md) may come first, naming no invoice.
      const requested = history.find((e) => e.type === 'SettlementRequested');
      if (!requested) continue;
      const invoiceStream = invoiceStreamName((requested.data as { invoiceId: string }).invoiceId);
      if (!invoices.has(invoiceStream)) invoices.set(invoiceStream, await store.readStream(invoiceStream));
    }
    const merchantIds = [...invoices.values()].flatMap(([created]) =>
      created?.type === 'InvoiceCreated' ? [(created.data as { merchantId: string }).merchantId] : [],
    );
    return { invoices, settlements, merchants: await merchantsById(store, merchantIds) };
  },

  async apply(trx: Kysely<any>, event: RecordedEvent, { invoices, settlements, merchants }: InvoiceHistories) {
    if (event.type === 'SettlementFailed') return enqueueSettlementFailed(trx, event, settlements, invoices, merchants);
    const history = invoices.get(event.streamId);
    if (!history) return;
    const after = invoiceUpTo(history, event.revision);
    if (!after) return;
    const names = invoiceWebhooks(event, invoiceUpTo(history, event.revision - 1), after);
    // The invoice's own webhook URL, else the merchant's default (as it is now).
    const url = after.webhookUrl ?? merchants.get(after.merchantId)?.webhookUrl ?? null;
    if (names.length === 0 || !url) return;
    for (const name of names)
      await enqueue(trx, event, name, after.merchantId, url, { invoice: invoicePayload(after) });
  },
};

/** `settlement.failed` (operations.md §3): the Settlement, as it stands after the failure, as `data`. */
async function enqueueSettlementFailed(
  trx: Kysely<any>,
  event: RecordedEvent,
  settlements: InvoiceHistories['settlements'],
  invoices: InvoiceHistories['invoices'],
  merchants: InvoiceHistories['merchants'],
) {
  const settlement = requestedSettlement(
    stateOf(settlementDecider, settlements.get(event.streamId) ?? [], (e) => e.revision <= event.revision),
  );
  if (!settlement) return;
  const invoice = stateOf(invoiceDecider, invoices.get(invoiceStreamName(settlement.invoiceId)) ?? []);
  const url = invoice?.webhookUrl ?? merchants.get(settlement.merchantId)?.webhookUrl ?? null;
  if (!url) return;
  await enqueue(trx, event, 'settlement.failed', settlement.merchantId, url, settlementPayload(settlement));
}

// ---------------------------------------------------------------- refund webhooks

interface RefundHistories {
  refunds: Map<string, RecordedEvent[]>;
  /** Where each refund's webhooks go: its invoice's URL, else its merchant's. */
  urls: Map<string, string | null>;
}

/** The `refund.*` webhooks, with the Refund as it stood after the event as `data`. */
export function refundWebhooks(publicBaseUrl: string): Projector<RefundHistories> {
  return {
    name: 'refund-webhooks',
    tables: [],

    async prepare(batch: readonly RecordedEvent[], store: EventStore) {
      const refunds = await readStreams(store, eventsByStream(batch, streams.refund.holds).keys());
      const urls = new Map<string, string | null>();
      for (const [stream, history] of refunds) {
        const refund = stateOf(refundDecider, history);
        if (!refund) continue;
        const invoice = await loadState(store, invoiceDecider, invoiceStreamName(refund.invoiceId));
        const merchant = await loadState(store, merchantDecider, merchantStream(refund.merchantId));
        urls.set(stream, invoice?.webhookUrl ?? merchant?.webhookUrl ?? null);
      }
      return { refunds, urls };
    },

    async apply(trx: Kysely<any>, event: RecordedEvent, { refunds, urls }: RefundHistories) {
      const name = refundWebhookOf(event.type);
      const url = urls.get(event.streamId);
      if (!name || !url) return;
      const refund = stateOf(refundDecider, refunds.get(event.streamId) ?? [], (e) => e.revision <= event.revision);
      if (!refund) return;
      await enqueue(trx, event, name, refund.merchantId, url, refundPayload(refund, publicBaseUrl));
    },
  };
}

// ---------------------------------------------------------------- subscriber webhooks

interface SubscriberHistories {
  subscribers: Map<string, RecordedEvent[]>;
  invoices: Map<string, RecordedEvent[]>;
  merchants: Map<string, Merchant | null>;
  comparePositions: (a: string, b: string) => number;
}

const invoiceIdOf = (event: RecordedEvent): string | undefined => (event.data as { invoiceId?: string }).invoiceId;

/**
 * The `subscriber.*` webhooks: each carries `data.subscriber` (the Subscriber
 * object), the subscriber's `externalId` and `metadata`, and `data.invoice`
 * (with its `paymentUrl`) when the event concerns an invoice. Sent to the
 * merchant's webhook URL.
 */
export function subscriberWebhooks(publicBaseUrl: string): Projector<SubscriberHistories> {
  return {
    name: 'subscriber-webhooks',
    tables: [],

    async prepare(batch: readonly RecordedEvent[], store: EventStore) {
      const ours = batch.filter(
        (e) => streams.subscriber.holds(e.streamId) && subscriberWebhookOf(e.type) !== undefined,
      );
      const subscribers = await readStreams(
        store,
        ours.map((e) => e.streamId),
      );
      const invoices = await readStreams(
        store,
        ours.map(invoiceIdOf).flatMap((id) => (id === undefined ? [] : [invoiceStreamName(id)])),
      );
      const merchantIds = [...subscribers.values()].flatMap(([enrolled]) =>
        enrolled?.type === 'SubscriberEnrolled' ? [(enrolled.data as { merchantId: string }).merchantId] : [],
      );
      return {
        subscribers,
        invoices,
        merchants: await merchantsById(store, merchantIds),
        comparePositions: (a, b) => store.comparePositions(a, b),
      };
    },

    async apply(trx: Kysely<any>, event: RecordedEvent, prepared: SubscriberHistories) {
      const name = subscriberWebhookOf(event.type);
      const history = prepared.subscribers.get(event.streamId);
      if (!name || !history) return;
      const subscriber = subscriberIn(stateOf(subscriberDecider, history, (e) => e.revision <= event.revision));
      if (!subscriber) return;
      const url = prepared.merchants.get(subscriber.merchantId)?.webhookUrl ?? null;
      if (!url) return;
      // The invoice as it stood when the subscriber event was written.
      const invoiceId = invoiceIdOf(event);
      const invoice =
        invoiceId === undefined
          ? null
          : stateOf(
              invoiceDecider,
              prepared.invoices.get(invoiceStreamName(invoiceId)) ?? [],
              (e) => prepared.comparePositions(e.position, event.position) <= 0,
            );
      const data: Record<string, unknown> = subscriberPayload(subscriberViewOf(subscriber));
      if (invoice) data.invoice = subscriberInvoicePayload(invoice, publicBaseUrl);
      if (event.type === 'SubscriberCancelled') data.reason = (event.data as { reason: string }).reason;
      if (event.type === 'RenewalPaid') data.paidLate = (event.data as { late: boolean }).late;
      await enqueue(trx, event, name, subscriber.merchantId, url, data);
    },
  };
}
