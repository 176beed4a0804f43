// Prometheus metrics: request rates and latencies, projection lag, event-store
// appends, and the money-moving backlogs (settlements, webhook deliveries).
import type { Kysely } from 'kysely';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ProjectionEngine } from '../adapters/event-store/followers.ts';

export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const requests = new Counter({
    name: 'http_requests_total',
    help: 'HTTP requests answered, by method, route and status code',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request latency, by method and route',
    labelNames: ['method', 'route'] as const,
    buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  const appends = new Counter({
    name: 'eventstore_appends_total',
    help: 'Appends (transactions that wrote events) made by this process',
    registers: [registry],
  });
  const projected = new Counter({
    name: 'projection_events_total',
    help: 'Events applied by each projector in this process',
    labelNames: ['projection'] as const,
    registers: [registry],
  });
  let engine: ProjectionEngine | undefined;
  // Lag is measured when scraped, so it is never stale.
  new Gauge({
    name: 'projection_lag_events',
    help: 'Events committed but not yet applied, per projection',
    labelNames: ['projection'] as const,
    registers: [registry],
    async collect() {
      for (const s of (await engine?.status()) ?? []) this.set({ projection: s.name }, s.eventsBehind);
    },
  });
  new Gauge({
    name: 'projection_lag_seconds',
    help: 'Age of the oldest event not yet applied, per projection',
    labelNames: ['projection'] as const,
    registers: [registry],
    async collect() {
      for (const s of (await engine?.status()) ?? []) this.set({ projection: s.name }, s.msBehind / 1000);
    },
  });
  // Backlogs an operator alerts on, counted when scraped: payouts not yet
  // completed (and why), webhooks pending or given up.
  let db: Kysely<any> | undefined;
  /** A gauge of `table`'s rows by status, counted when scraped. */
  const byStatus = (table: string, help: string) =>
    new Gauge({
      name: table,
      help,
      labelNames: ['status'] as const,
      registers: [registry],
      async collect() {
        if (!db) return;
        const rows = await db
          .selectFrom(table)
          .select(['status', (eb) => eb.fn.countAll().as('count')])
          .groupBy('status')
          .execute();
        this.reset();
        for (const row of rows) this.set({ status: row.status }, Number(row.count));
      },
    });
  byStatus('settlements', 'Settlements by status (pending, submitted, completed, failed)');
  byStatus(
    'webhook_deliveries',
    'Webhook deliveries by status (pending includes those waiting for a retry; failed were given up)',
  );
  return {
    registry,
    requests,
    latency,
    appends,
    projected,
    watch(projections: ProjectionEngine, database: Kysely<any>) {
      engine = projections;
      db = database;
    },
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
