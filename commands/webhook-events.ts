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
import { settlementDecider, type SettlementEvent } from '../domain/settlement.ts';
import { settlementRowOf, settlementView } from '../projections/settlements.ts';
import { eventsByStream } from '../projections/batch.ts';
import type { Projector } from '../projections/engine.ts';
import { enqueueWebhook } from './webhook-delivery.ts';
import { streams } from '../domain/streams.ts';

const WEBHOOK_EVENT_NAMESPACE = '8e0f5a36-6a3e-4f44-9b8e-2d7c1b9e4a51';

/** The event id a webhook keeps on every delivery and redelivery: derived from its cause. */
export const webhookEventId = (causeEventId: string, event: string) =>
  uuidv5(`${causeEventId}/${event}`, WEBHOOK_EVENT_NAMESPACE);

interface Histories {
  invoices: Map<string, RecordedEvent[]>;
  /** Settlement streams with a failure in the batch. */
  settlements: Map<string, RecordedEvent[]>;
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
        [...eventsByStream(batch, streams.invoice.holds)].map(
          async ([s, events]) => [s, events[0]!.revision === 0 ? events : await store.readStream(s)] as const,
        ),
      ),
    );
    // A settlement that failed: its webhook goes where its invoice's do, with the Settlement as data.
    const settlements = new Map(
      await Promise.all(
        [...eventsByStream(batch, streams.settlement.holds)]
          .filter(([, events]) => events.some((e) => e.type === 'SettlementFailed'))
          .map(async ([s]) => [s, await store.readStream(s)] as const),
      ),
    );
    for (const history of settlements.values()) {
      const invoiceStream = `invoice-${(history[0]?.data as { invoiceId: string }).invoiceId}`;
      if (!invoices.has(invoiceStream)) invoices.set(invoiceStream, await store.readStream(invoiceStream));
    }
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
    return { invoices, settlements, merchants };
  },

  async apply(trx: Kysely<any>, event: RecordedEvent, { invoices, settlements, merchants }: Histories) {
    if (event.type === 'SettlementFailed') return enqueueSettlementFailed(trx, event, settlements, invoices, merchants);
    const history = invoices.get(event.streamId);
    if (!history) return;
    const after = fold(history, event.revision);
    if (!after) return;
    const names = invoiceWebhooks(event, fold(history, event.revision - 1), after);
    // The invoice's own webhook URL, else the merchant's default (as it is now).
    const url = after.webhookUrl ?? merchants.get(after.merchantId)?.webhookUrl ?? null;
    if (names.length === 0 || !url) return;
    for (const name of names)
      await enqueue(trx, event, name, after.merchantId, url, { invoice: invoicePayload(after) });
  },
};

/** The webhook `name` that `event` causes, in the outbox; its id follows from the event's. */
function enqueue(trx: Kysely<any>, event: RecordedEvent, name: string, merchantId: string, url: string, data: unknown) {
  const eventId = webhookEventId(event.id, name);
  return enqueueWebhook(trx, {
    eventId,
    event: name,
    merchantId,
    url,
    payload: { eventId, event: name, createdAt: event.recordedAt.toISOString(), data },
  });
}

/** `settlement.failed` (operations.md §3): the Settlement, as it stands after the failure, as `data`. */
async function enqueueSettlementFailed(
  trx: Kysely<any>,
  event: RecordedEvent,
  settlements: Histories['settlements'],
  invoices: Histories['invoices'],
  merchants: Histories['merchants'],
) {
  const settlement = (settlements.get(event.streamId) ?? [])
    .filter((e) => e.revision <= event.revision)
    .reduce(
      (state, e) => settlementDecider.evolve(state, { type: e.type, data: e.data } as SettlementEvent),
      settlementDecider.initialState,
    );
  if (!settlement) return;
  const invoice = fold(invoices.get(`invoice-${settlement.invoiceId}`) ?? [], Infinity);
  const url = invoice?.webhookUrl ?? merchants.get(settlement.merchantId)?.webhookUrl ?? null;
  if (!url) return;
  await enqueue(
    trx,
    event,
    'settlement.failed',
    settlement.merchantId,
    url,
    settlementView(settlementRowOf(settlement)),
  );
}
