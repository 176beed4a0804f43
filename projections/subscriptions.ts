// Projects subscription plans and subscribers into `subscription_plans` and
// `subscribers`, which the subscription endpoints and the renewal scheduler
// read. Each row is its stream folded up to the event, so replaying any prefix
// of the log gives the same rows.
import { sql, type Kysely } from 'kysely';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import { planDecider, type Plan, type PlanEvent } from '../domain/plan.ts';
import {
  currentInvoice,
  subscriberDecider,
  subscriberIn,
  type Subscriber,
  type SubscriberEvent,
  type SubscriberState,
  type SubscriberStatus,
} from '../domain/subscriber.ts';
import type { Projector } from './engine.ts';
import { newestFirst, type Page } from './paging.ts';
import type { ReadModelTables, SubscribersTable, SubscriptionPlansTable } from './schema.ts';

const json = <T>(value: T) => sql<T>`${JSON.stringify(value)}::jsonb`;
const date = (iso: string | null) => (iso === null ? null : new Date(iso));
const iso = (value: Date | string) => new Date(value).toISOString();
const isPlanStream = (streamId: string) => streamId.startsWith('plan-');
const isSubscriberStream = (streamId: string) => streamId.startsWith('subscriber-');

type Histories = Map<string, RecordedEvent[]>;

function foldUpTo<S, E>(
  history: RecordedEvent[],
  revision: number,
  decider: { initialState: S; evolve(state: S, event: E): S },
): S {
  return history
    .filter((e) => e.revision <= revision)
    .reduce((state, e) => decider.evolve(state, { type: e.type, data: e.data } as E), decider.initialState);
}

export const subscriptionsProjector: Projector<Histories> = {
  name: 'subscriptions',
  tables: ['subscription_plans', 'subscribers'],

  async prepare(batch: readonly RecordedEvent[], store: EventStore) {
    const streams = [
      ...new Set(
        batch.filter((e) => isPlanStream(e.streamId) || isSubscriberStream(e.streamId)).map((e) => e.streamId),
      ),
    ];
    return new Map(await Promise.all(streams.map(async (s) => [s, await store.readStream(s)] as const)));
  },

  async apply(trx: Kysely<ReadModelTables>, recorded: RecordedEvent, histories: Histories) {
    if (isPlanStream(recorded.streamId)) {
      const plan = foldUpTo<Plan | null, PlanEvent>(histories.get(recorded.streamId)!, recorded.revision, planDecider);
      if (plan) await upsertPlan(trx, plan);
    } else if (isSubscriberStream(recorded.streamId)) {
      const subscriber = subscriberIn(
        foldUpTo<SubscriberState, SubscriberEvent>(
          histories.get(recorded.streamId)!,
          recorded.revision,
          subscriberDecider,
        ),
      );
      if (subscriber) await upsertSubscriber(trx, subscriber);
    }
  },
};

async function upsertPlan(trx: Kysely<ReadModelTables>, plan: Plan) {
  const row = {
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
    archived_at: date(plan.archivedAt),
    created_at: new Date(plan.createdAt),
    updated_at: new Date(plan.updatedAt),
  };
  await trx
    .insertInto('subscription_plans')
    .values(row)
    .onConflict((oc) => oc.column('id').doUpdateSet(row))
    .execute();
}

async function upsertSubscriber(trx: Kysely<ReadModelTables>, s: Subscriber) {
  const invoice = currentInvoice(s);
  const row = {
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
    metadata: s.metadata === null ? null : json(s.metadata),
    current_invoice_id: invoice.invoiceId,
    current_invoice_paid_at: date(invoice.paidAt),
    activated_at: date(s.activatedAt),
    past_due_at: date(s.pastDueAt),
    cancelled_at: date(s.cancelledAt),
    cancellation_reason: s.cancellationReason,
    created_at: new Date(s.createdAt),
    updated_at: new Date(s.updatedAt),
  };
  await trx
    .insertInto('subscribers')
    .values(row)
    .onConflict((oc) => oc.column('id').doUpdateSet(row))
    .execute();
}

// ---------------------------------------------------------------- queries

/** The plan shape of the API from its row. */
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

/** The Subscriber object of interface.md from its row. */
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
