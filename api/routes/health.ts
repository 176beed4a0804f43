import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import type { SqlDatabase } from '../../adapters/sql/database.ts';
import type { Metrics } from '../metrics.ts';
import type { ProjectionEngine } from '../../adapters/event-store/followers.ts';
import { sendError } from '../errors.ts';

/** What these routes use of the service. */
export interface HealthRouteDeps {
  database: SqlDatabase;
  projections: ProjectionEngine;
  metrics: Metrics;
}

export async function healthRoutes(app: FastifyInstance, { database, projections, metrics }: HealthRouteDeps) {
  // Liveness: the process answers.
  app.get('/healthz', { schema: { hide: true } }, async () => ({ data: { status: 'ok' } }));

  // Readiness: the database answers; projection lag is shown for operators.
  app.get('/readyz', { schema: { hide: true } }, async (request, reply) => {
    try {
      await sql`select 1`.execute(database.db);
      const status = await projections.status();
      return { data: { status: 'ready', database: database.engine, projections: status } };
    } catch (error) {
      request.log.warn({ err: error }, 'readiness check failed');
      return sendError(reply, 503, 'Database is not reachable');
    }
  });

  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    reply.header('Content-Type', metrics.registry.contentType);
    return metrics.registry.metrics();
  });
}
