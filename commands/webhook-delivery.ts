// The webhook outbox and the worker that empties it (DESIGN.md, "Webhooks").
//
// A webhook is written once, in the transaction of whatever caused it
// (enqueueWebhook), as a `webhook_deliveries` row holding the exact JSON body
// to send. The worker claims due rows, signs them with the merchant's CURRENT
// secret, sends them and records every attempt in `webhook_attempts`, the
// delivery log merchants read and redeliver from.
//
// Guarantees:
// - At least once. A row is claimed with a lease (`locked_until`) before it is
//   sent, so two workers, in one process or several sharing a PostgreSQL
//   database, never send it at the same time. A crash between the send and the
//   record leaves the lease to expire, and the delivery is sent again: receivers
//   deduplicate on eventId (interface.md, "Delivery rules").
// - Order per target: only the oldest pending delivery of a URL may be sent,
//   and only while no other delivery of that URL is in flight. A delivery
//   being retried holds back the later ones to its URL for its first
//   ORDER_HOLD_ATTEMPTS attempts; one that keeps failing then waits its turn
//   on its own, so a receiver back after hours is not kept waiting for days.
//   A test send (sendNow) is outside the queue.
// - Retries on network errors, timeouts, 408, 429 and 5xx, with growing delays
//   over about three days (DEFAULT_RETRY_SCHEDULE); then `failed`. A refused
//   target, a redirect or any other 4xx is final at once.
import { randomUUID } from 'node:crypto';
import { sql, type Generated, type Kysely, type Migration } from 'kysely';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { ddl, migrate } from '../adapters/sql/migrate.ts';
import { DEFAULT_TIMEOUT_MS, sendWebhook, type WebhookSendResult } from '../adapters/webhooks/sender.ts';
import type { WebhookTargetPolicy } from '../adapters/webhooks/target.ts';
import { DomainError } from '../domain/decider.ts';

/** Where a redelivery goes: the delivery's recorded URL, or the merchant's webhook URL as it is now. */
export type RedeliveryTarget = 'recorded' | 'current';
export const REDELIVERY_TARGETS: readonly RedeliveryTarget[] = ['recorded', 'current'];

export type DeliveryStatus = 'pending' | 'succeeded' | 'failed';
export const DELIVERY_STATUSES: readonly DeliveryStatus[] = ['pending', 'succeeded', 'failed'];

export interface WebhookDeliveriesTable {
  id: string;
  /** Enqueue order, the order of deliveries to one URL; created_at can tie within a transaction. */
  seq: Generated<string>;
  merchant_id: string;
  event_id: string;
  event: string;
  url: string;
  /** The exact JSON body, signed and sent unchanged on every attempt. */
  payload: string;
  status: DeliveryStatus;
  /** All attempts ever made, across redeliveries. */
  attempts: number;
  /** Attempts of the current series (since enqueue or the last redelivery): picks the next delay. */
  series_attempts: number;
  /** Bumped by each redelivery, so an attempt in flight during one does not close the new series. */
  generation: number;
  last_status_code: number | null;
  last_error: string | null;
  next_attempt_at: Date | null;
  /** While in the future, a worker is sending this delivery. */
  locked_until: Date | null;
  created_at: Date;
  updated_at: Date;
}

export interface WebhookAttemptsTable {
  delivery_id: string;
  attempt: number;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
  attempted_at: Date;
}

export interface WebhookTables {
  webhook_deliveries: WebhookDeliveriesTable;
  webhook_attempts: WebhookAttemptsTable;
}

export const webhookMigrations: Record<string, Migration> = {
  '0001_webhook_deliveries': ddl(
    `create table webhook_deliveries (
      id uuid primary key,
      seq bigserial not null,
      merchant_id uuid not null,
      event_id uuid not null,
      event text not null,
      url text not null,
      payload text not null,
      status text not null,
      attempts integer not null default 0,
      series_attempts integer not null default 0,
      generation integer not null default 0,
      last_status_code integer,
      last_error text,
      next_attempt_at timestamptz,
      locked_until timestamptz,
      created_at timestamptz not null,
      updated_at timestamptz not null,
      constraint webhook_deliveries_event_url unique (event_id, url)
    )`,
    // The worker's question: the oldest pending delivery of each URL.
    `create index webhook_deliveries_pending_by_url on webhook_deliveries (url, seq) where status = 'pending'`,
    // The merchant's question: their deliveries, newest first.
    `create index webhook_deliveries_by_merchant on webhook_deliveries (merchant_id, seq)`,
    `create table webhook_attempts (
      delivery_id uuid not null references webhook_deliveries (id) on delete cascade,
      attempt integer not null,
      status_code integer,
      error text,
      duration_ms integer not null,
      attempted_at timestamptz not null,
      constraint webhook_attempts_pk primary key (delivery_id, attempt)
    )`,
  ),
};

/** Creates or updates the outbox tables; run before any projector can enqueue. */
export async function migrateWebhookDeliveries(database: SqlDatabase): Promise<void> {
  await migrate(database.db, 'webhook_migrations', webhookMigrations);
}

/**
 * Delays after the 1st, 2nd, … failed attempt of a series: 12 attempts over
 * about 2.9 days (10 s, 30 s, 2 min, 10 min, 30 min, 1 h, 3 h, 6 h, 12 h,
 * 24 h, 24 h); after the last one the delivery is failed.
 */
export const DEFAULT_RETRY_SCHEDULE: readonly number[] = [
  10_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000, 10_800_000, 21_600_000, 43_200_000, 86_400_000, 86_400_000,
];

export interface WebhookToEnqueue {
  eventId: string;
  event: string;
  merchantId: string;
  url: string;
  payload: Record<string, unknown>;
}

/**
 * Puts a webhook in the outbox, due now. Uses only `trx`, so it commits or
 * rolls back with the caller's work (a projector's batch). Enqueueing the
 * same (eventId, url) again adds nothing: a replayed event cannot send twice.
 */
export async function enqueueWebhook(trx: Kysely<any>, w: WebhookToEnqueue): Promise<void> {
  const now = new Date();
  await (trx as Kysely<WebhookTables>)
    .insertInto('webhook_deliveries')
    .values({
      ...newDelivery(outboxRow(w), now),
      next_attempt_at: now,
    })
    .onConflict((oc) => oc.columns(['event_id', 'url']).doNothing())
    .execute();
}

/** The columns of a webhook to enqueue; the body serialised once: every attempt signs and sends these very bytes. */
const outboxRow = (w: WebhookToEnqueue) => ({
  merchant_id: w.merchantId,
  event_id: w.eventId,
  event: w.event,
  url: w.url,
  payload: JSON.stringify(w.payload),
});

/** A new attempt series of a delivery, due now. */
const newSeries = (now: Date) => ({
  status: 'pending' as const,
  next_attempt_at: now,
  series_attempts: 0,
  updated_at: now,
});

function newDelivery(
  w: { merchant_id: string; event_id: string; event: string; url: string; payload: string },
  now: Date,
) {
  return {
    id: randomUUID(),
    ...w,
    status: 'pending' as const,
    attempts: 0,
    series_attempts: 0,
    generation: 0,
    created_at: now,
    updated_at: now,
  };
}

export interface WebhookDeliveryView {
  id: string;
  eventId: string;
  event: string;
  url: string;
  status: DeliveryStatus;
  attempts: number;
  lastStatusCode: number | null;
  lastError: string | null;
  nextAttemptAt: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface WebhookAttemptView {
  attempt: number;
  statusCode: number | null;
  error: string | null;
  durationMs: number;
  attemptedAt: string;
}

const iso = (value: Date | string) => new Date(value).toISOString();

export function deliveryView(row: Omit<WebhookDeliveriesTable, 'seq'>): WebhookDeliveryView {
  return {
    id: row.id,
    eventId: row.event_id,
    event: row.event,
    url: row.url,
    status: row.status,
    attempts: row.attempts,
    lastStatusCode: row.last_status_code,
    lastError: row.last_error,
    nextAttemptAt: row.status === 'pending' && row.next_attempt_at ? iso(row.next_attempt_at) : null,
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
  };
}

const DELIVERY_COLUMNS = [
  'id',
  'merchant_id',
  'event_id',
  'event',
  'url',
  'payload',
  'status',
  'attempts',
  'series_attempts',
  'generation',
  'last_status_code',
  'last_error',
  'next_attempt_at',
  'locked_until',
  'created_at',
  'updated_at',
] as const;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const deliveryNotFound = () => new DomainError('not_found', 'Webhook delivery not found');

/** A merchant's deliveries, newest first, one page of them. */
export async function listWebhookDeliveries(
  db: Kysely<any>,
  merchantId: string,
  query: {
    status?: string;
    event?: string;
    /** Only the webhooks of these events (an invoice's, in the dashboard). */
    eventIds?: readonly string[];
    limit: number;
    page: number;
  },
): Promise<{ rows: WebhookDeliveryView[]; total: number }> {
  if (query.eventIds?.length === 0) return { rows: [], total: 0 };
  const base = (db as Kysely<WebhookTables>)
    .selectFrom('webhook_deliveries')
    .where('merchant_id', '=', merchantId)
    .$if(query.status !== undefined, (q) => q.where('status', '=', query.status as DeliveryStatus))
    .$if(query.event !== undefined, (q) => q.where('event', '=', query.event!))
    .$if(query.eventIds !== undefined, (q) => q.where('event_id', 'in', query.eventIds!));
  const [rows, count] = await Promise.all([
    base
      .select(DELIVERY_COLUMNS)
      .orderBy('seq', 'desc')
      .limit(query.limit)
      .offset((query.page - 1) * query.limit)
      .execute(),
    base.select((eb) => eb.fn.countAll<string>().as('total')).executeTakeFirstOrThrow(),
  ]);
  return { rows: rows.map(deliveryView), total: Number(count.total) };
}

/** A webhook target whose deliveries keep failing, for the operator's attention list. */
export interface FailingWebhookTarget {
  merchantId: string;
  url: string;
  failing: number;
  lastStatusCode: number | null;
  lastError: string | null;
  since: string;
}

/**
 * Targets with deliveries given up on, or still retrying after `attempts`
 * attempts in their series: most failing first. One merchant's only when
 * `merchantId` is given (the dashboard's needs-attention list).
 */
export async function failingWebhookTargets(
  db: Kysely<any>,
  attempts = 3,
  merchantId?: string,
): Promise<FailingWebhookTarget[]> {
  const rows = await (db as Kysely<WebhookTables>)
    .selectFrom('webhook_deliveries')
    .$if(merchantId !== undefined, (q) => q.where('merchant_id', '=', merchantId!))
    .select((eb) => [
      'merchant_id',
      'url',
      eb.fn.countAll<string>().as('failing'),
      eb.fn.min('updated_at').as('since'),
      eb.fn.max('seq').as('last_seq'),
    ])
    .where((eb) =>
      eb.or([
        eb('status', '=', 'failed'),
        eb.and([eb('status', '=', 'pending'), eb('series_attempts', '>=', attempts)]),
      ]),
    )
    .groupBy(['merchant_id', 'url'])
    .orderBy('failing', 'desc')
    .limit(100)
    .execute();
  if (rows.length === 0) return [];
  const last = await (db as Kysely<WebhookTables>)
    .selectFrom('webhook_deliveries')
    .select(['seq', 'last_status_code', 'last_error'])
    .where(
      'seq',
      'in',
      rows.map((r) => r.last_seq as unknown as string),
    )
    .execute();
  const lastOf = new Map(last.map((r) => [String(r.seq), r]));
  return rows.map((r) => ({
    merchantId: r.merchant_id,
    url: r.url,
    failing: Number(r.failing),
    lastStatusCode: lastOf.get(String(r.last_seq))?.last_status_code ?? null,
    lastError: lastOf.get(String(r.last_seq))?.last_error ?? null,
    since: new Date(r.since as unknown as string).toISOString(),
  }));
}

/** One of the merchant's deliveries with every attempt made, or undefined (also for another merchant's). */
export async function findWebhookDelivery(
  db: Kysely<any>,
  id: string,
  merchantId: string,
): Promise<(WebhookDeliveryView & { attemptLog: WebhookAttemptView[] }) | undefined> {
  if (!UUID.test(id)) return undefined;
  const tables = db as Kysely<WebhookTables>;
  const row = await tables
    .selectFrom('webhook_deliveries')
    .select(DELIVERY_COLUMNS)
    .where('id', '=', id)
    .where('merchant_id', '=', merchantId)
    .executeTakeFirst();
  if (!row) return undefined;
  const attempts = await tables
    .selectFrom('webhook_attempts')
    .selectAll()
    .where('delivery_id', '=', id)
    .orderBy('attempt')
    .execute();
  return {
    ...deliveryView(row),
    attemptLog: attempts.map((a) => ({
      attempt: a.attempt,
      statusCode: a.status_code,
      error: a.error,
      durationMs: a.duration_ms,
      attemptedAt: iso(a.attempted_at),
    })),
  };
}

export interface WebhookWorkerOptions {
  policy: WebhookTargetPolicy;
  /** The merchant's signing secret as it is now; the `merchants` read model by default. */
  secretOf?: (merchantId: string) => Promise<string | undefined>;
  /** The merchant's webhook URL as it is now (redelivery to it); the `merchants` read model by default. */
  urlOf?: (merchantId: string) => Promise<string | null | undefined>;
  /** Wall time: signature timestamps and delays follow it, never the sandbox business clock. */
  now?: () => Date;
  /** How often to look for due deliveries when nobody pokes. */
  pollMs?: number;
  /** Delays in ms after each failed attempt of a series; see DEFAULT_RETRY_SCHEDULE. */
  schedule?: readonly number[];
  /** Deliveries to different URLs sent at the same time. */
  concurrency?: number;
  timeoutMs?: number;
  onError?: (error: unknown) => void;
}

interface Claimed {
  id: string;
  merchant_id: string;
  url: string;
  payload: string;
  generation: number;
  series_attempts: number;
}

/** Failed attempts after which a delivery stops holding back the later ones to its URL. */
export const ORDER_HOLD_ATTEMPTS = 3;

/** Beyond the request timeout, time for DNS and the record before another worker may take over. */
const LEASE_MARGIN_MS = 60_000;

export class WebhookDeliveryWorker {
  private readonly db: Kysely<WebhookTables>;
  private readonly now: () => Date;
  private readonly schedule: readonly number[];
  private readonly concurrency: number;
  private readonly timeoutMs: number;
  private readonly secretOf: (merchantId: string) => Promise<string | undefined>;
  private readonly urlOf: (merchantId: string) => Promise<string | null | undefined>;
  private readonly inFlight = new Set<Promise<void>>();
  private running = false;
  private pumping: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    database: SqlDatabase,
    private readonly options: WebhookWorkerOptions,
  ) {
    this.db = database.db as Kysely<WebhookTables>;
    this.now = options.now ?? (() => new Date());
    this.schedule = options.schedule ?? DEFAULT_RETRY_SCHEDULE;
    this.concurrency = options.concurrency ?? 8;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.secretOf = options.secretOf ?? ((merchantId) => this.currentSecret(merchantId));
    this.urlOf = options.urlOf ?? ((merchantId) => this.currentUrl(merchantId));
  }

  get policy(): WebhookTargetPolicy {
    return this.options.policy;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.timer = setInterval(() => this.poke(), this.options.pollMs ?? 1000);
    this.timer.unref();
    this.poke();
  }

  /** Stops claiming, and waits for the sends in flight to be recorded. */
  async stop(): Promise<void> {
    this.running = false;
    clearInterval(this.timer);
    await this.pumping;
    await Promise.all(this.inFlight);
  }

  /** Looks for due deliveries now rather than at the next poll, e.g. after an enqueue. */
  poke(): void {
    if (!this.running) return;
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = this.pump().finally(() => {
      this.pumping = undefined;
    });
  }

  /** One round: claims what is due (up to `concurrency`), sends it, records it. Returns how many were sent. */
  async deliverDue(): Promise<number> {
    const claimed = await this.claim(this.concurrency);
    await Promise.all(claimed.map((delivery) => this.attempt(delivery)));
    return claimed.length;
  }

  /**
   * Sends one webhook at once (the test endpoint): recorded in the log like
   * any other, but one attempt only: it does not wait behind the URL's queue
   * and is not retried; a failed one can be redelivered.
   */
  async sendNow(w: WebhookToEnqueue): Promise<{ delivery: WebhookDeliveryView; result: WebhookSendResult }> {
    const now = this.now();
    const row = {
      ...newDelivery(outboxRow(w), now),
      next_attempt_at: null,
      locked_until: new Date(now.getTime() + this.timeoutMs + LEASE_MARGIN_MS),
    };
    await this.db.insertInto('webhook_deliveries').values(row).execute();
    const result = await this.attempt(row, { oneShot: true });
    const delivery = await this.db
      .selectFrom('webhook_deliveries')
      .select(DELIVERY_COLUMNS)
      .where('id', '=', row.id)
      .executeTakeFirstOrThrow();
    return { delivery: deliveryView(delivery), result };
  }

  /**
   * Starts a new attempt series, due now, whatever the delivery's status
   * (a succeeded one is sent again). 404 for an unknown or another merchant's
   * delivery. An attempt in flight keeps its lease, so it is not sent twice
   * at once; the new series follows it.
   *
   * By default the delivery goes where it was recorded: the log then says
   * truly where each of its attempts went, and an old event never reaches an
   * endpoint set up after it happened (perhaps another system's) unless the
   * merchant asks. `to: 'current'` asks: the event's body goes, unchanged, to
   * the merchant's webhook URL as it is now, as a delivery of that URL (one
   * per event and URL: asking again restarts it), queued behind that URL's
   * earlier deliveries. The answer is the delivery that will be sent.
   */
  async redeliver(
    deliveryId: string,
    merchantId: string,
    to: RedeliveryTarget = 'recorded',
  ): Promise<WebhookDeliveryView> {
    if (!UUID.test(deliveryId)) throw deliveryNotFound();
    if (to === 'current') {
      const recorded = await findWebhookDelivery(this.db, deliveryId, merchantId);
      if (!recorded) throw deliveryNotFound();
      const url = await this.urlOf(merchantId);
      if (!url) throw new DomainError('bad_request', 'The merchant has no webhook URL to redeliver to');
      if (url !== recorded.url) return this.redeliverTo(deliveryId, url);
    }
    const now = this.now();
    const row = await this.db
      .updateTable('webhook_deliveries')
      .set((eb) => ({ ...newSeries(now), generation: eb('generation', '+', 1) }))
      .where('id', '=', deliveryId)
      .where('merchant_id', '=', merchantId)
      .returning(DELIVERY_COLUMNS)
      .executeTakeFirst();
    if (!row) throw deliveryNotFound();
    this.poke();
    return deliveryView(row);
  }

  /** A copy of a delivery's body for `url`, due now; or that URL's delivery of the event, started again. */
  private async redeliverTo(deliveryId: string, url: string): Promise<WebhookDeliveryView> {
    const now = this.now();
    const source = await this.db
      .selectFrom('webhook_deliveries')
      .select(['merchant_id', 'event_id', 'event', 'payload'])
      .where('id', '=', deliveryId)
      .executeTakeFirstOrThrow();
    const row = await this.db
      .insertInto('webhook_deliveries')
      .values({ ...newDelivery({ ...source, url }, now), next_attempt_at: now })
      .onConflict((oc) =>
        oc.columns(['event_id', 'url']).doUpdateSet((eb) => ({
          ...newSeries(now),
          generation: eb('webhook_deliveries.generation', '+', 1),
        })),
      )
      .returning(DELIVERY_COLUMNS)
      .executeTakeFirstOrThrow();
    this.poke();
    return deliveryView(row);
  }

  private async pump(): Promise<void> {
    do {
      this.again = false;
      const free = this.concurrency - this.inFlight.size;
      if (free <= 0) return;
      let claimed: Claimed[] = [];
      try {
        claimed = await this.claim(free);
      } catch (error) {
        this.options.onError?.(error);
        return;
      }
      for (const delivery of claimed) {
        const sending: Promise<void> = this.attempt(delivery)
          .then(() => undefined)
          .catch((error) => this.options.onError?.(error))
          .finally(() => {
            this.inFlight.delete(sending);
            this.poke();
          });
        this.inFlight.add(sending);
      }
      // A full batch suggests more is due.
      if (claimed.length === free) this.again = true;
    } while (this.again && this.running);
  }

  /**
   * Takes a lease on up to `limit` due deliveries of URLs with nothing in
   * flight: the oldest queued one of each URL, and those that have failed so
   * often that they no longer hold the line. The UPDATE re-checks the lease on
   * the row it locks, so of two workers racing for a row only one gets it.
   */
  private async claim(limit: number): Promise<Claimed[]> {
    const now = this.now();
    const leaseEnd = new Date(now.getTime() + this.timeoutMs + LEASE_MARGIN_MS);
    const { rows } = await sql<Claimed>`
      update webhook_deliveries d
         set locked_until = ${leaseEnd}, updated_at = ${now}
       where d.id in (
               select head.id
                 from ((select distinct on (url) id, url, next_attempt_at, locked_until
                          from webhook_deliveries
                         where status = 'pending' and next_attempt_at is not null
                           and series_attempts < ${ORDER_HOLD_ATTEMPTS}
                         order by url, seq)
                       union all
                       (select id, url, next_attempt_at, locked_until
                          from webhook_deliveries
                         where status = 'pending' and next_attempt_at is not null
                           and series_attempts >= ${ORDER_HOLD_ATTEMPTS})) head
                where head.next_attempt_at <= ${now}
                  and (head.locked_until is null or head.locked_until <= ${now})
                  and not exists (select 1 from webhook_deliveries busy
                                   where busy.url = head.url and busy.status = 'pending'
                                     and busy.locked_until > ${now})
                order by head.next_attempt_at
                limit ${limit})
         and d.status = 'pending'
         and (d.locked_until is null or d.locked_until <= ${now})
      returning d.id, d.merchant_id, d.url, d.payload, d.generation, d.series_attempts`.execute(this.db);
    return rows;
  }

  /** Sends a claimed delivery with the merchant's current secret and records the outcome. */
  private async attempt(delivery: Claimed, mode: { oneShot?: boolean } = {}): Promise<WebhookSendResult> {
    const secret = await this.secretOf(delivery.merchant_id);
    const result: WebhookSendResult =
      secret === undefined
        ? // Not in the read model (yet, or during a rebuild): retried, never given up for it.
          { ok: false, statusCode: null, error: 'Merchant not found', retryable: true, durationMs: 0 }
        : await sendWebhook({
            url: delivery.url,
            rawBody: delivery.payload,
            secret,
            policy: this.options.policy,
            timeoutMs: this.timeoutMs,
            now: () => this.now().getTime(),
          });
    await this.record(delivery, result, mode.oneShot ?? false);
    return result;
  }

  /** Writes the attempt to the log and moves the delivery on: succeeded, retried later, or failed. */
  private async record(delivery: Claimed, result: WebhookSendResult, oneShot: boolean): Promise<void> {
    const now = this.now();
    await this.db.transaction().execute(async (trx) => {
      const current = await trx
        .selectFrom('webhook_deliveries')
        .select(['attempts', 'generation'])
        .where('id', '=', delivery.id)
        .forUpdate()
        .executeTakeFirst();
      if (!current) return;
      const attempt = current.attempts + 1;
      // Redelivered while this attempt was in flight: the new series is still to come.
      const next =
        current.generation === delivery.generation
          ? this.nextStep(result, delivery.series_attempts + 1, now, oneShot)
          : {};
      await trx
        .updateTable('webhook_deliveries')
        .set({
          attempts: attempt,
          last_status_code: result.statusCode,
          last_error: result.error,
          locked_until: null,
          updated_at: now,
          ...next,
        })
        .where('id', '=', delivery.id)
        .execute();
      await trx
        .insertInto('webhook_attempts')
        .values({
          delivery_id: delivery.id,
          attempt,
          status_code: result.statusCode,
          error: result.error,
          duration_ms: result.durationMs,
          attempted_at: now,
        })
        .execute();
    });
  }

  private nextStep(result: WebhookSendResult, seriesAttempts: number, now: Date, oneShot: boolean) {
    const done = { series_attempts: seriesAttempts, next_attempt_at: null };
    if (result.ok) return { ...done, status: 'succeeded' as const };
    const delay = result.retryable && !oneShot ? this.schedule[seriesAttempts - 1] : undefined;
    if (delay === undefined) return { ...done, status: 'failed' as const };
    return {
      series_attempts: seriesAttempts,
      status: 'pending' as const,
      next_attempt_at: new Date(now.getTime() + delay),
    };
  }

  private async currentSecret(merchantId: string): Promise<string | undefined> {
    return (await this.merchant(merchantId))?.webhook_secret;
  }

  private async currentUrl(merchantId: string): Promise<string | null | undefined> {
    return (await this.merchant(merchantId))?.webhook_url;
  }

  private merchant(merchantId: string) {
    return (
      this.db as unknown as Kysely<{ merchants: { id: string; webhook_secret: string; webhook_url: string | null } }>
    )
      .selectFrom('merchants')
      .select(['webhook_secret', 'webhook_url'])
      .where('id', '=', merchantId)
      .executeTakeFirst();
  }
}
