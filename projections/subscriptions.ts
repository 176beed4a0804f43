// Projects subscription plans and subscribers into `subscription_plans` and
// `subscribers`, which the subscription endpoints and the renewal scheduler
// read.
import type { Kysely } from 'kysely';
import { planDecider, type Plan } from '../domain/plan.ts';
import {
  currentInvoice,
  subscriberDecider,
  subscriberIn,
  type Subscriber,
  type SubscriberStatus,
} from '../domain/subscriber.ts';
import { dateOrNull, rowPerStreamProjector, streamTable } from './batch.ts';
import { newestFirst, type Page } from './paging.ts';
import type { ReadModelTables, SubscribersTable, SubscriptionPlansTable } from './schema.ts';
import { streams } from '../domain/streams.ts';

const iso = (value: Date | string) => new Date(value).toISOString();
// Each plan's and subscriber's row once, as of its last event in the batch (see batch.ts).
export const subscriptionsProjector = rowPerStreamProjector(
  'subscriptions',
  streamTable('subscription_plans', streams.plan.holds, planDecider, planRowOf),
  // An abandoned enrollment has no row.
  streamTable('subscribers', streams.subscriber.holds, subscriberDecider, (state) => {
    const subscriber = subscriberIn(state);
    return subscriber && subscriberRowOf(subscriber);
  }),
);

function planRowOf(plan: Plan) {
  return {
    id: plan.id,
    merchant_id: plan.merchantId,
    name: plan.name,
    description: plan.description,
    amount: plan.amount,
    currency: plan.currency,
    interval: plan.interval,
    interval_count: plan.intervalCount,
    grace_period_hours: plan.gracePeriodHours,
    status: plan.status,
    archived_at: dateOrNull(plan.archivedAt),
    created_at: new Date(plan.createdAt),
    updated_at: new Date(plan.updatedAt),
  };
}

function subscriberRowOf(s: Subscriber) {
  const invoice = currentInvoice(s);
  return {
    id: s.id,
    merchant_id: s.merchantId,
    plan_id: s.planId,
    email: s.email,
    external_id: s.externalId,
    status: s.status,
    period: s.period,
    current_period_start: new Date(s.currentPeriodStart),
    current_period_end: new Date(s.currentPeriodEnd),
    grace_period_ends_at: new Date(s.gracePeriodEndsAt),
    cancel_at_end: s.cancelAtEnd,
    metadata: s.metadata,
    current_invoice_id: invoice.invoiceId,
    current_invoice_paid_at: dateOrNull(invoice.paidAt),
    activated_at: dateOrNull(s.activatedAt),
    past_due_at: dateOrNull(s.pastDueAt),
    cancelled_at: dateOrNull(s.cancelledAt),
    cancellation_reason: s.cancellationReason,
    created_at: new Date(s.createdAt),
    updated_at: new Date(s.updatedAt),
  };
}

// ---------------------------------------------------------------- queries

/** The plan shape of the API from its row: the one mapping, also of a plan just written (planViewOf). */
export function planRowView(row: SubscriptionPlansTable) {
  return {
    id: row.id,
    merchantId: row.merchant_id,
    name: row.name,
    description: row.description,
    amount: row.amount,
    currency: row.currency,
    interval: row.interval,
    intervalCount: row.interval_count,
    gracePeriodHours: row.grace_period_hours,
    status: row.status,
    archivedAt: row.archived_at === null ? null : iso(row.archived_at),
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
  };
}

/** The same view of a plan just written, before its row exists (the create and archive answers). */
export const planViewOf = (plan: Plan) => planRowView(planRowOf(plan));

/** The Subscriber object of interface.md, exactly its fields, from its row: the one mapping (see subscriberViewOf). */
export function subscriberRowView(row: SubscribersTable) {
  return {
    id: row.id,
    merchantId: row.merchant_id,
    planId: row.plan_id,
    email: row.email,
    externalId: row.external_id,
    status: row.status as SubscriberStatus,
    currentPeriodStart: iso(row.current_period_start),
    currentPeriodEnd: iso(row.current_period_end),
    gracePeriodEndsAt: iso(row.grace_period_ends_at),
    cancelAtEnd: row.cancel_at_end,
    metadata: row.metadata,
    createdAt: iso(row.created_at),
  };
}

export type SubscriberView = ReturnType<typeof subscriberRowView>;

/** The same view of a subscriber just written or as an event left it (the answers, the webhooks' `subscriber`). */
export const subscriberViewOf = (subscriber: Subscriber) => subscriberRowView(subscriberRowOf(subscriber));

export async function listPlans(
  db: Kysely<ReadModelTables>,
  filter: Page & { merchantId: string; status?: string },
): Promise<{ rows: SubscriptionPlansTable[]; total: number }> {
  let query = db.selectFrom('subscription_plans').where('merchant_id', '=', filter.merchantId);
  if (filter.status) query = query.where('status', '=', filter.status);
  return newestFirst(query, filter);
}

export async function planRow(db: Kysely<ReadModelTables>, id: string) {
  return db.selectFrom('subscription_plans').selectAll().where('id', '=', id).executeTakeFirst();
}

export async function listSubscribers(
  db: Kysely<ReadModelTables>,
  filter: Page & { merchantId: string; planId?: string; status?: string },
): Promise<{ rows: SubscribersTable[]; total: number }> {
  let query = db.selectFrom('subscribers').where('merchant_id', '=', filter.merchantId);
  if (filter.planId) query = query.where('plan_id', '=', filter.planId);
  if (filter.status) query = query.where('status', '=', filter.status);
  return newestFirst(query, filter);
}

export async function subscriberRow(db: Kysely<ReadModelTables>, id: string) {
  return db.selectFrom('subscribers').selectAll().where('id', '=', id).executeTakeFirst();
}

/** The subscriber's invoices, newest first, one page of them. */
export async function listSubscriberInvoices(db: Kysely<ReadModelTables>, subscriberId: string, page: Page) {
  const query = db.selectFrom('invoices').where('subscriber_id', '=', subscriberId);
  return newestFirst(query, page);
}
