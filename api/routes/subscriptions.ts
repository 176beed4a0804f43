// Subscription plans (operations.md §3) and subscribers (interface.md,
// "Subscriber"): enrollment, listing, reading and cancelling subscribers.
// Permission subscriptions:write to change, subscriptions:read to read.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import {
  billingIntervals,
  checkPlanTerms,
  DEFAULT_GRACE_PERIOD_HOURS,
  MAX_GRACE_PERIOD_HOURS,
  MAX_INTERVAL_COUNT,
  type BillingInterval,
} from '../../domain/plan.ts';
import { checkEnrollmentInput, subscriberStatuses } from '../../domain/subscriber.ts';
import { invoiceView } from '../../projections/contract/invoice.ts';
import {
  listPlans,
  listSubscriberInvoices,
  listSubscribers,
  planRow,
  planRowView,
  planViewOf,
  subscriberRow,
  subscriberRowView,
  subscriberViewOf,
} from '../../projections/subscriptions.ts';
import type { Authentication } from '../auth.ts';
import type { Config } from '../config.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import type { SubscriptionCommands } from '../../commands/subscriptions.ts';
import type { ReadModels } from '../../projections/schema.ts';
import { badRequest, notFound } from '../errors.ts';
import { listPage, ownRow, UUID } from './query.ts';
import { data, IdParams, Nullable, PageQuery, Paged, StatusQuery } from './schemas.ts';
import { InvoiceSchema } from './invoices.ts';

// Field types are checked in the handlers, so that every failure carries a clear message of its own.
const PlanBody = Type.Object({
  name: Type.Optional(Type.Unknown({ description: 'Plan name, at most 200 characters' })),
  amount: Type.Optional(
    Type.Unknown({ description: 'Fiat amount billed each period, a decimal string greater than 0' }),
  ),
  currency: Type.Optional(Type.Unknown({ description: 'Fiat currency code, e.g. USD' })),
  interval: Type.Optional(Type.Unknown({ description: `Billing interval: ${billingIntervals.join(', ')}` })),
  intervalCount: Type.Optional(
    Type.Unknown({ description: `Intervals per billing period, 1 to ${MAX_INTERVAL_COUNT}; default 1` }),
  ),
  gracePeriodHours: Type.Optional(
    Type.Unknown({
      description: `Hours an invoice may stay unpaid before the subscriber lapses, 1 to ${MAX_GRACE_PERIOD_HOURS}; default ${DEFAULT_GRACE_PERIOD_HOURS}`,
    }),
  ),
  description: Type.Optional(Type.Unknown({ description: 'Free text, at most 1000 characters' })),
});
const EnrollBody = Type.Object({
  planId: Type.Optional(
    Type.Unknown({ description: 'The plan (UUID); it must belong to the merchant and not be archived' }),
  ),
  email: Type.Optional(
    Type.Unknown({ description: 'Subscriber e-mail address; enrolled in a plan only once at a time' }),
  ),
  externalId: Type.Optional(
    Type.Unknown({ description: "The merchant's own customer id, at most 255 characters; returned in webhooks" }),
  ),
  metadata: Type.Optional(
    Type.Unknown({ description: 'Object of key-value pairs returned in every subscriber webhook' }),
  ),
});
const CancelBody = Type.Object({
  atPeriodEnd: Type.Optional(
    Type.Unknown({
      description: 'true: cancel at the end of the current billing period (cancelAtEnd); false (default): cancel now',
    }),
  ),
});

const PlanSchema = Type.Object({
  id: Type.String(),
  merchantId: Type.String(),
  name: Type.String(),
  description: Nullable(Type.String()),
  amount: Type.String(),
  currency: Type.String(),
  interval: Type.String(),
  intervalCount: Type.Integer(),
  gracePeriodHours: Type.Integer(),
  status: Type.String({ description: 'active or archived' }),
  archivedAt: Nullable(Type.String()),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});
const SubscriberSchema = Type.Object({
  id: Type.String(),
  merchantId: Type.String(),
  planId: Type.String(),
  email: Type.String(),
  externalId: Nullable(Type.String()),
  status: Type.String({ description: subscriberStatuses.join(', ') }),
  currentPeriodStart: Type.String(),
  currentPeriodEnd: Type.String(),
  gracePeriodEndsAt: Type.String({ description: 'Deadline to pay the current period’s invoice before lapsing' }),
  cancelAtEnd: Type.Boolean(),
  metadata: Nullable(Type.Object({}, { additionalProperties: true })),
  createdAt: Type.String(),
});
const PlanListQuery = Type.Object({
  status: StatusQuery(['active', 'archived']),
  ...PageQuery,
});
const SubscriberListQuery = Type.Object({
  planId: Type.Optional(Type.String({ description: 'Only subscribers of this plan' })),
  status: StatusQuery(subscriberStatuses),
  ...PageQuery,
});

const PLAN_NOT_FOUND = 'Subscription plan not found';
const SUBSCRIBER_NOT_FOUND = 'Subscriber not found';

/** A value that must be a whole number when given, or the fallback when not. */
function wholeNumberOr(value: unknown, fallback: number, message: string): number {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value)) throw badRequest(message);
  return value;
}

/** What these routes use of the service. */
export interface SubscriptionRouteDeps extends Pick<ReadYourWrites, 'settle'> {
  auth: Authentication;
  db: ReadModels;
  config: Config;
  subscriptions: SubscriptionCommands;
}

export async function subscriptionRoutes(scope: FastifyInstance, ctx: SubscriptionRouteDeps) {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const { auth, db, config, settle, subscriptions } = ctx;
  const security = [{ apiKey: [] }];

  app.post(
    '/api/v1/subscriptions/plans',
    {
      onRequest: auth.merchant('subscriptions:write'),
      schema: {
        tags: ['subscriptions'],
        summary: 'Create a subscription plan',
        security,
        body: PlanBody,
        response: { 201: data(PlanSchema) },
      },
    },
    async (request, reply) => {
      const body = request.body;
      if (typeof body.amount !== 'string') throw badRequest('Amount must be greater than 0');
      if (typeof body.currency !== 'string' || body.currency.trim() === '') throw badRequest('Currency is required');
      if (body.name !== undefined && body.name !== null && typeof body.name !== 'string') {
        throw badRequest('Name must be a string');
      }
      if (typeof body.interval !== 'string') {
        throw badRequest(`Interval must be one of ${billingIntervals.join(', ')}`);
      }
      const input = {
        name: typeof body.name === 'string' ? body.name.trim() : '',
        amount: body.amount,
        currency: body.currency.trim().toUpperCase(),
        interval: body.interval.trim().toLowerCase() as BillingInterval,
        intervalCount: wholeNumberOr(
          body.intervalCount,
          1,
          `Interval count must be a whole number from 1 to ${MAX_INTERVAL_COUNT}`,
        ),
        gracePeriodHours: wholeNumberOr(
          body.gracePeriodHours,
          DEFAULT_GRACE_PERIOD_HOURS,
          `Grace period hours must be a whole number from 1 to ${MAX_GRACE_PERIOD_HOURS}`,
        ),
        description: body.description === undefined || body.description === null ? null : (body.description as string),
      };
      checkPlanTerms(input);
      const { value, position } = await subscriptions.createPlan(request.caller!.merchantId, input, request.id);
      await settle(position);
      return reply.code(201).send({ data: planViewOf(value) });
    },
  );

  app.get(
    '/api/v1/subscriptions/plans',
    {
      onRequest: auth.merchant('subscriptions:read'),
      schema: {
        tags: ['subscriptions'],
        summary: "List the merchant's subscription plans, newest first",
        security,
        querystring: PlanListQuery,
        response: { 200: Paged(PlanSchema) },
      },
    },
    async ({ query, caller }) =>
      listPage(
        query,
        (paging) => listPlans(db, { merchantId: caller!.merchantId, status: query.status, ...paging }),
        planRowView,
      ),
  );

  /** The caller's plan row, or 404 (also for another merchant's plan). */
  const ownPlan = (id: string, merchantId: string) =>
    ownRow(id, merchantId, (planId) => planRow(db, planId), PLAN_NOT_FOUND);

  app.get(
    '/api/v1/subscriptions/plans/:id',
    {
      onRequest: auth.merchant('subscriptions:read'),
      schema: {
        tags: ['subscriptions'],
        summary: 'Get a subscription plan',
        security,
        params: IdParams,
        response: { 200: data(PlanSchema) },
      },
    },
    async (request) => ({ data: planRowView(await ownPlan(request.params.id, request.caller!.merchantId)) }),
  );

  app.post(
    '/api/v1/subscriptions/plans/:id/archive',
    {
      onRequest: auth.merchant('subscriptions:write'),
      schema: {
        tags: ['subscriptions'],
        summary: 'Archive a plan: no new enrollments; enrolled subscribers keep being billed',
        security,
        params: IdParams,
        response: { 200: data(PlanSchema) },
      },
    },
    async (request) => {
      if (!UUID.test(request.params.id)) throw notFound(PLAN_NOT_FOUND);
      const { value, position } = await subscriptions.archivePlan(
        request.params.id,
        request.caller!.merchantId,
        request.id,
      );
      await settle(position);
      return { data: planViewOf(value) };
    },
  );

  app.post(
    '/api/v1/subscriptions/subscribers',
    {
      onRequest: auth.merchant('subscriptions:write'),
      schema: {
        tags: ['subscriptions'],
        summary: "Enroll a subscriber: pending, with the first period's invoice",
        security,
        body: EnrollBody,
        response: { 201: data(SubscriberSchema) },
      },
    },
    async (request, reply) => {
      const body = request.body;
      if (typeof body.planId !== 'string' || body.planId.trim() === '') throw badRequest('Plan ID is required');
      if (typeof body.email !== 'string' || body.email.trim() === '') throw badRequest('Email is required');
      const externalId = body.externalId ?? null;
      if (externalId !== null && typeof externalId !== 'string') throw badRequest('External ID must be a string');
      const metadata = body.metadata ?? null;
      if (metadata !== null && (typeof metadata !== 'object' || Array.isArray(metadata))) {
        throw badRequest('Metadata must be an object of key-value pairs');
      }
      const input = {
        planId: body.planId.toLowerCase(),
        email: body.email.trim(),
        externalId,
        metadata: metadata as Record<string, unknown> | null,
      };
      // The request's own rules first: a bad body is a 400 whatever the plan.
      checkEnrollmentInput(input);
      if (!UUID.test(input.planId)) throw notFound(PLAN_NOT_FOUND);
      const { value, position } = await subscriptions.enroll(request.caller!.merchantId, input, request.id);
      await settle(position);
      return reply.code(201).send({ data: subscriberViewOf(value.subscriber) });
    },
  );

  app.get(
    '/api/v1/subscriptions/subscribers',
    {
      onRequest: auth.merchant('subscriptions:read'),
      schema: {
        tags: ['subscriptions'],
        summary: "List the merchant's subscribers, newest first, by plan and status",
        security,
        querystring: SubscriberListQuery,
        response: { 200: Paged(SubscriberSchema) },
      },
    },
    async ({ query: q, caller }) =>
      listPage(
        q,
        (paging) => {
          if (q.planId !== undefined && !UUID.test(q.planId)) throw badRequest('planId must be a UUID');
          const merchantId = caller!.merchantId;
          return listSubscribers(db, { merchantId, planId: q.planId?.toLowerCase(), status: q.status, ...paging });
        },
        subscriberRowView,
      ),
  );

  /** The caller's subscriber row, or 404 (also for another merchant's subscriber). */
  const ownSubscriber = (id: string, merchantId: string) =>
    ownRow(id, merchantId, (subscriberId) => subscriberRow(db, subscriberId), SUBSCRIBER_NOT_FOUND);

  app.get(
    '/api/v1/subscriptions/subscribers/:id',
    {
      onRequest: auth.merchant('subscriptions:read'),
      schema: {
        tags: ['subscriptions'],
        summary: 'Get a subscriber',
        security,
        params: IdParams,
        response: { 200: data(SubscriberSchema) },
      },
    },
    async (request) => ({
      data: subscriberRowView(await ownSubscriber(request.params.id, request.caller!.merchantId)),
    }),
  );

  app.get(
    '/api/v1/subscriptions/subscribers/:id/invoices',
    {
      onRequest: auth.merchant('subscriptions:read'),
      schema: {
        tags: ['subscriptions'],
        summary: "The subscriber's invoices, one per billing period, newest first (paymentUrl to pay them)",
        security,
        params: IdParams,
        querystring: Type.Object(PageQuery),
        response: { 200: Paged(InvoiceSchema) },
      },
    },
    async (request) => {
      const subscriber = await ownSubscriber(request.params.id, request.caller!.merchantId);
      return listPage(
        request.query,
        (paging) => listSubscriberInvoices(db, subscriber.id, paging),
        (r) => invoiceView(r, config.publicBaseUrl),
      );
    },
  );

  app.post(
    '/api/v1/subscriptions/subscribers/:id/cancel',
    {
      onRequest: auth.merchant('subscriptions:write'),
      schema: {
        tags: ['subscriptions'],
        summary: 'Cancel a subscriber now, or at the end of the current period (atPeriodEnd: true)',
        security,
        params: IdParams,
        body: Type.Optional(CancelBody),
        response: { 200: data(SubscriberSchema) },
      },
      // No body at all means cancel now.
      preValidation: async (request) => {
        request.body ??= {};
      },
    },
    async (request) => {
      if (!UUID.test(request.params.id)) throw notFound(SUBSCRIBER_NOT_FOUND);
      const atPeriodEnd = request.body?.atPeriodEnd ?? false;
      if (typeof atPeriodEnd !== 'boolean') throw badRequest('atPeriodEnd must be true or false');
      const { value, position } = await subscriptions.cancel(
        request.params.id,
        request.caller!.merchantId,
        atPeriodEnd,
        request.id,
      );
      await settle(position);
      return { data: subscriberViewOf(value) };
    },
  );
}
