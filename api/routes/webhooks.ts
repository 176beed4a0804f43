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
import { listPage } from './query.ts';
import { IdParams, Nullable, PageQuery, Paged, StatusQuery } from './schemas.ts';
import { sampleWebhookEvent, WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../projections/contract/webhooks.ts';

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
  status: StatusQuery(DELIVERY_STATUSES),
  event: Type.Optional(Type.String({ description: 'Event name, e.g. invoice.confirmed' })),
  ...PageQuery,
});
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
        response: { 200: Paged(DeliverySchema) },
      },
    },
    async ({ query, caller }) =>
      listPage(
        query,
        (paging) =>
          listWebhookDeliveries(db, caller!.merchantId, { status: query.status, event: query.event, ...paging }),
        (delivery) => delivery,
      ),
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
