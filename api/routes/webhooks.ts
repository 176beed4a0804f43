// The merchant's webhook endpoints: a signed test event (interface.md,
// POST /api/v1/webhooks/test) and the delivery log with redelivery
// (operations.md §3). All need permission webhooks:write.
import { randomUUID } from 'node:crypto';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { checkWebhookTarget, webhookUrlProblem, type WebhookTargetPolicy } from '../../adapters/webhooks/target.ts';
import {
  DELIVERY_STATUSES,
  REDELIVERY_TARGETS,
  findWebhookDelivery,
  type RedeliveryTarget,
  listWebhookDeliveries,
  type WebhookDeliveryWorker,
} from '../../commands/webhook-delivery.ts';
import type { Authentication } from '../auth.ts';
import type { ReadModels } from '../../projections/schema.ts';
import { badRequest, notFound } from '../errors.ts';
import { pageOf } from './query.ts';
import { Nullable, Pagination } from './schemas.ts';

export const WEBHOOK_EVENT_TYPES = [
  'invoice.confirmed',
  'invoice.settled',
  'invoice.overpaid',
  'invoice.underpaid',
  'invoice.expired',
  'settlement.failed',
  'subscriber.enrolled',
  'subscriber.activated',
  'subscriber.renewal_invoice_created',
  'subscriber.renewed',
  'subscriber.payment_reversed',
  'subscriber.past_due',
  'subscriber.cancellation_scheduled',
  'subscriber.cancelled',
  'refund.created',
  'refund.claimed',
  'refund.approved',
  'refund.completed',
  'refund.failed',
  'refund.canceled',
  'refund.expired',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

const DeliverySchema = Type.Object({
  id: Type.String(),
  eventId: Type.String(),
  event: Type.String(),
  url: Type.String(),
  status: Type.String({ description: 'pending, succeeded or failed (given up, or a final 3xx/4xx)' }),
  attempts: Type.Integer({ description: 'Attempts made so far, across redeliveries' }),
  lastStatusCode: Nullable(Type.Integer()),
  lastError: Nullable(Type.String()),
  nextAttemptAt: Nullable(Type.String({ description: 'When a pending delivery is tried next' })),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});
const AttemptSchema = Type.Object({
  attempt: Type.Integer(),
  statusCode: Nullable(Type.Integer()),
  error: Nullable(Type.String()),
  durationMs: Type.Integer(),
  attemptedAt: Type.String(),
});
const TestBody = Type.Object({
  webhookUrl: Type.Optional(Type.Unknown({ description: 'Target URL; checked like every webhook URL' })),
  eventType: Type.Optional(Type.Unknown({ description: `One of ${WEBHOOK_EVENT_TYPES.join(', ')}` })),
});
const TestResult = Type.Object({
  delivered: Type.Boolean({ description: 'The receiver answered 2xx' }),
  statusCode: Nullable(Type.Integer({ description: "The receiver's HTTP status; null when none came" })),
  error: Nullable(Type.String({ description: 'Why it was not delivered' })),
  deliveryId: Type.String({ description: 'Its entry in the delivery log' }),
  eventId: Type.String({ description: 'The simulated event, as in the body sent' }),
});
const ListQuery = Type.Object({
  status: Type.Optional(
    Type.String({
      enum: [...DELIVERY_STATUSES],
      errorMessage: `Status must be one of ${DELIVERY_STATUSES.join(', ')}`,
    }),
  ),
  event: Type.Optional(Type.String({ description: 'Event name, e.g. invoice.confirmed' })),
  limit: Type.Optional(Type.String({ description: '1 to 100, default 20' })),
  page: Type.Optional(Type.String({ description: '1-indexed, default 1' })),
});
const IdParams = Type.Object({ id: Type.String() });
const RedeliverBody = Type.Union([
  Type.Object({
    to: Type.Optional(
      Type.Unsafe<RedeliveryTarget>({
        type: 'string',
        enum: [...REDELIVERY_TARGETS],
        description:
          "recorded (default): the URL the delivery was made to; current: the merchant's webhook URL as it is now, as a new delivery of that URL",
        errorMessage: `to must be one of ${REDELIVERY_TARGETS.join(', ')}`,
      }),
    ),
  }),
  Type.Null(),
]);

const EVENT_TYPE_MESSAGE = `eventType must be one of ${WEBHOOK_EVENT_TYPES.join(', ')}`;
const isEventType = (value: unknown): value is WebhookEventType =>
  typeof value === 'string' && (WEBHOOK_EVENT_TYPES as readonly string[]).includes(value);

/** The delivery worker (test events, redelivery) and the rule for webhook URLs. */
export interface WebhookSending {
  worker: WebhookDeliveryWorker;
  policy: WebhookTargetPolicy;
}

/** What these routes use of the service. */
export interface WebhookRouteDeps {
  auth: Authentication;
  db: ReadModels;
  webhooks: WebhookSending;
}

export async function webhookRoutes(scope: FastifyInstance, { auth, db, webhooks }: WebhookRouteDeps) {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const { worker } = webhooks;
  const security = [{ apiKey: [] }];
  const onRequest = auth.merchant('webhooks:write');

  app.post(
    '/api/v1/webhooks/test',
    {
      onRequest,
      schema: {
        tags: ['webhooks'],
        summary: 'Send a simulated, genuinely signed event to a URL now, and log it',
        security,
        body: TestBody,
        response: { 200: Type.Object({ data: TestResult }) },
      },
    },
    async (request) => {
      const { webhookUrl, eventType } = request.body ?? {};
      return { data: await sendTestEvent(webhooks, request.caller!.merchantId, webhookUrl, eventType) };
    },
  );

  app.get(
    '/api/v1/webhooks/deliveries',
    {
      onRequest,
      schema: {
        tags: ['webhooks'],
        summary: "The merchant's webhook deliveries, newest first",
        security,
        querystring: ListQuery,
        response: { 200: Type.Object({ data: Type.Array(DeliverySchema), pagination: Pagination }) },
      },
    },
    async (request) => {
      const { limit, page } = pageOf(request.query);
      const { items, total } = await listWebhookDeliveries(db, request.caller!.merchantId, {
        status: request.query.status,
        event: request.query.event,
        limit,
        page,
      });
      return { data: items, pagination: { total, page, limit, totalPages: Math.ceil(total / limit) } };
    },
  );

  app.get(
    '/api/v1/webhooks/deliveries/:id',
    {
      onRequest,
      schema: {
        tags: ['webhooks'],
        summary: 'A webhook delivery with every attempt made',
        security,
        params: IdParams,
        response: {
          200: Type.Object({
            data: Type.Object({ ...DeliverySchema.properties, attemptLog: Type.Array(AttemptSchema) }),
          }),
        },
      },
    },
    async (request) => {
      const delivery = await findWebhookDelivery(db, request.params.id, request.caller!.merchantId);
      if (!delivery) throw notFound('Webhook delivery not found');
      return { data: delivery };
    },
  );

  app.post(
    '/api/v1/webhooks/deliveries/:id/redeliver',
    {
      onRequest,
      schema: {
        tags: ['webhooks'],
        summary: 'Send a delivery again: a new attempt series, due now',
        security,
        params: IdParams,
        body: RedeliverBody,
        response: { 200: Type.Object({ data: DeliverySchema }) },
      },
    },
    async (request) => ({
      data: await worker.redeliver(request.params.id, request.caller!.merchantId, request.body?.to ?? 'recorded'),
    }),
  );
}

/**
 * POST /api/v1/webhooks/test's work (the dashboard's test event too): the
 * URL and event type checked, a sample event sent now and logged. Bad input
 * is the contract's 400.
 */
export async function sendTestEvent(
  { worker, policy }: WebhookSending,
  merchantId: string,
  webhookUrl: unknown,
  eventType: unknown,
) {
  if (typeof webhookUrl !== 'string') throw badRequest('Invalid webhook URL format');
  if (!isEventType(eventType)) throw badRequest(EVENT_TYPE_MESSAGE);
  const literal = webhookUrlProblem(webhookUrl, policy);
  if (literal) throw badRequest(literal);
  // Resolved here too, so a name pointing inside gets the contract's 400
  // instead of a logged failure; the sender checks again when it connects.
  const target = await checkWebhookTarget(webhookUrl, policy);
  if (!target.ok && target.kind === 'refused') throw badRequest(target.problem);
  const eventId = randomUUID();
  const { delivery, result } = await worker.sendNow({
    eventId,
    event: eventType,
    merchantId,
    url: webhookUrl,
    payload: sampleWebhookEvent(eventType, eventId, merchantId, new Date()),
  });
  return {
    delivered: result.ok,
    statusCode: result.statusCode,
    error: result.error,
    deliveryId: delivery.id,
    eventId,
  };
}

/**
 * A simulated event of the given type in the envelope real events use
 * ({ eventId, event, createdAt, data }), marked `test: true`, with a sample
 * invoice or subscriber of the real shape, so receivers can exercise their
 * whole handler, signature check included.
 */
export function sampleWebhookEvent(event: WebhookEventType, eventId: string, merchantId: string, now: Date) {
  const createdAt = now.toISOString();
  const subscriber = event.startsWith('subscriber.') ? sampleSubscriber(event, merchantId, now) : undefined;
  // Subscriber events carry externalId and metadata beside the subscriber, as the real ones do.
  const data =
    event === 'settlement.failed'
      ? sampleFailedSettlement(now)
      : event.startsWith('refund.')
        ? sampleRefund(event, now)
        : subscriber
          ? { subscriber, externalId: subscriber.externalId, metadata: subscriber.metadata }
          : { invoice: sampleInvoice(event, merchantId, now) };
  return { eventId, event, createdAt, test: true, data };
}

function sampleInvoice(event: WebhookEventType, merchantId: string, now: Date) {
  const status: Record<string, string> = {
    'invoice.confirmed': 'confirmed',
    'invoice.settled': 'settled',
    'invoice.overpaid': 'confirmed',
    'invoice.underpaid': 'partial',
    'invoice.expired': 'expired',
  };
  const received: Record<string, string> = {
    'invoice.overpaid': '30.00000000',
    'invoice.underpaid': '12.50000000',
    'invoice.expired': '0.00000000',
  };
  const totalReceivedAmount = received[event] ?? '25.00000000';
  const paid = totalReceivedAmount !== '0.00000000';
  return {
    id: randomUUID(),
    merchantId,
    amount: '25.00',
    currency: 'USD',
    status: status[event] ?? 'confirmed',
    description: 'Test invoice',
    expiresAt: new Date(now.getTime() + 30 * 60_000).toISOString(),
    createdAt: new Date(now.getTime() - 10 * 60_000).toISOString(),
    updatedAt: now.toISOString(),
    metadata: { orderId: 'test_order_123' },
    chain: 'tron',
    cryptoCurrency: 'USDT',
    cryptoAmount: '25.00000000',
    totalReceivedAmount,
    remainingAmount:
      event === 'invoice.underpaid' ? '12.50000000' : event === 'invoice.expired' ? '25.00000000' : '0.00000000',
    paymentIssueType: event === 'invoice.overpaid' ? 'overpaid' : event === 'invoice.underpaid' ? 'underpaid' : null,
    txHash: paid ? `test_${randomUUID().replace(/-/g, '')}` : null,
    settledAmount: event === 'invoice.settled' ? '24.75000000' : null,
  };
}

/** A Refund as the `refund.*` webhooks carry it, in the state the event leaves it. */
function sampleRefund(event: WebhookEventType, now: Date) {
  const status: Record<string, string> = {
    'refund.created': 'awaiting_destination',
    'refund.claimed': 'awaiting_approval',
    'refund.approved': 'sending',
    'refund.completed': 'completed',
    'refund.failed': 'failed',
    'refund.canceled': 'canceled',
    'refund.expired': 'expired',
  };
  const approved = ['refund.approved', 'refund.completed', 'refund.failed'].includes(event);
  const claimed = approved || event === 'refund.claimed';
  const sent = event === 'refund.completed' || event === 'refund.failed';
  const createdAt = new Date(now.getTime() - 60 * 60_000);
  return {
    id: randomUUID(),
    invoiceId: randomUUID(),
    status: status[event]!,
    chain: 'tron',
    token: 'USDT',
    amount: '5.000000',
    networkFee: '0.000000',
    netAmount: '5.000000',
    fiatAmount: '5.00000000',
    fiatCurrency: 'USD',
    reason: 'Overpaid',
    destination: claimed ? 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH' : null,
    claimUrl: approved ? null : `https://pay.example.com/refunds/test_${randomUUID().replace(/-/g, '')}`,
    claimExpiresAt: new Date(createdAt.getTime() + 30 * 86_400_000).toISOString(),
    fundedFrom: approved ? 'refund_wallet' : null,
    transactionHash: sent ? `test_${randomUUID().replace(/-/g, '')}` : null,
    createdAt: createdAt.toISOString(),
    updatedAt: now.toISOString(),
    approvedAt: approved ? now.toISOString() : null,
    completedAt: event === 'refund.completed' ? now.toISOString() : null,
  };
}

/** A Settlement that failed, as `settlement.failed` carries it. */
function sampleFailedSettlement(now: Date) {
  return {
    id: randomUUID(),
    invoiceId: randomUUID(),
    amount: '24.75000000',
    grossAmount: '25.00000000',
    currency: 'USDT',
    chain: 'tron',
    transactionHash: null,
    merchantWallet: 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH',
    status: 'failed',
    initiatedAt: null,
    completedAt: null,
    failedAt: now.toISOString(),
    createdAt: new Date(now.getTime() - 60_000).toISOString(),
    updatedAt: now.toISOString(),
    failureReason: 'node_unavailable',
    attempts: 1,
    nextAttemptAt: new Date(now.getTime() + 10_000).toISOString(),
  };
}

const subscriberStatusAfter: Partial<Record<WebhookEventType, string>> = {
  'subscriber.enrolled': 'pending',
  'subscriber.past_due': 'past_due',
  'subscriber.payment_reversed': 'pending',
  'subscriber.cancelled': 'cancelled',
};

function sampleSubscriber(event: WebhookEventType, merchantId: string, now: Date) {
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
