// The HTTP application: the contract's envelope and errors, authentication,
// rate limits, metrics and the OpenAPI document around the route modules.
import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import swagger from '@fastify/swagger';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import Negotiator from 'negotiator';
import type { Kysely } from 'kysely';
import type { EventStore } from '../adapters/event-store/port.ts';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { merchantCommands } from '../commands/merchants.ts';
import { merchantUserCommands } from '../commands/merchant-users.ts';
import { dashboardRoutes } from './dashboard/routes.ts';
import { dashboardSessions } from './dashboard/sessions.ts';
import { ReadModelsBehindError, type ProjectionEngine } from '../projections/engine.ts';
import type { ReadModelTables } from '../projections/schema.ts';
import { authentication } from './auth.ts';
import type { Config } from './config.ts';
import { catchingUp, errorBody, handleError, sendError } from './errors.ts';
import type { Metrics } from './metrics.ts';
import type { RateLimiter } from './rate-limit.ts';
import { adminRoutes, type ChainCondition, type OperatorWallet } from './routes/admin.ts';
import { catalogueRoutes } from './routes/catalogue.ts';
import { healthRoutes } from './routes/health.ts';
import { invoiceRoutes } from './routes/invoices.ts';
import { UUID } from './routes/query.ts';
import { settlementRoutes } from './routes/settlements.ts';
import { refundRoutes } from './routes/refunds.ts';
import { refundClaimRoutes } from './routes/refund-claim.ts';
import { reportRoutes } from './routes/reports.ts';
import { subscriptionRoutes } from './routes/subscriptions.ts';
import { liveRoutes } from './routes/live.ts';
import { checkoutRoutes } from './routes/checkout.ts';
import { webhookRoutes, type WebhookRouteDeps } from './routes/webhooks.ts';
import type { LiveInvoiceStatus } from '../projections/live-status.ts';
import { sandboxRoutes, type Sandbox } from './routes/sandbox.ts';
import { idempotency } from './idempotency.ts';
import type { Clock } from '../adapters/clock.ts';
import type { ChainName } from '../domain/catalogue.ts';
import type { InvoiceCommands } from '../commands/invoices.ts';
import { invoiceStreamName } from '../domain/invoice.ts';
import type { SubscriptionCommands } from '../commands/subscriptions.ts';
import type { RefundCommands } from '../commands/refunds.ts';
import type { RateDisagreement } from '../adapters/rates/median.ts';

export interface AppDeps {
  config: Config;
  clock: Clock;
  invoices: InvoiceCommands;
  subscriptions: SubscriptionCommands;
  refunds: RefundCommands;
  sandbox: Sandbox | undefined;
  live: LiveInvoiceStatus;
  webhooks: WebhookRouteDeps;
  /** GET /admin/v1/wallets: each enabled chain's fee wallet and treasury. */
  wallets: () => Promise<OperatorWallet[]>;
  /** How each chain's watcher sees its node, for GET /admin/v1/attention. */
  chainConditions?: () => ChainCondition[];
  /** Pairs the price sources lately disagreed about, for GET /admin/v1/attention. */
  rateDisagreements?: () => RateDisagreement[];
  /** Why `address` cannot be a settlement wallet on `chain`, or undefined when it can. */
  settlementWalletProblem: (chain: ChainName, address: string) => Promise<string | undefined>;
  adminToken: string;
  database: SqlDatabase;
  store: EventStore;
  projections: ProjectionEngine;
  /** The projectors whose tables the API reads: a write's answer waits for these (read your writes), not for the reactors. */
  readModels: readonly string[];
  metrics: Metrics;
  rateLimiter: RateLimiter | undefined;
  logger: FastifyBaseLogger | boolean;
}

/** The largest request body accepted; larger ones get a 413. */
export const BODY_LIMIT = 64 * 1024;

/** A copy of `value` with every `errorMessage` key renamed `x-error-message`. */
function publishedSchemas<T>(value: T): T {
  if (Array.isArray(value)) return value.map(publishedSchemas) as T;
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, inner]) => [
      key === 'errorMessage' ? 'x-error-message' : key,
      publishedSchemas(inner),
    ]),
  ) as T;
}

export async function buildApp(deps: AppDeps) {
  const app = Fastify({
    loggerInstance: typeof deps.logger === 'object' ? deps.logger : undefined,
    logger: typeof deps.logger === 'boolean' ? deps.logger : undefined,
    genReqId: () => randomUUID(),
    requestIdHeader: false,
    // One access line per request, once answered (onResponse below), where
    // fastify writes two, the first with the request's headers: logging
    // those two lines cost a fifth of the status route's requests/s
    // (docs/benchmarks.md).
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: BODY_LIMIT,
    return503OnClosing: true,
    // Errors fastify meets before any route runs answer in the contract's envelope too.
    frameworkErrors: (error, request, reply) => {
      reply.header('X-Correlation-Id', request.id);
      if (error.code === 'FST_ERR_MAX_PARAM_LENGTH') {
        return sendError(reply, 414, 'A path parameter is longer than the service accepts');
      }
      return sendError(reply, 400, 'The request URL is not valid');
    },
    clientErrorHandler: (error, socket) => {
      // The request could not even be parsed (e.g. a URL larger than Node's header limit).
      const status = error.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
      const body = JSON.stringify(
        errorBody(
          status,
          status === 431 ? 'The request line or headers are too large' : 'The request is malformed',
          randomUUID(),
        ),
      );
      if (socket.writable) {
        socket.end(
          `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        );
      } else {
        socket.destroy(error);
      }
    },
    ajv: {
      customOptions: {
        // `errorMessage` carries the contract's wording for a field; `verbose`
        // hands the failing schema to the error handler so it can use it.
        keywords: ['errorMessage'],
        verbose: true,
        removeAdditional: false,
        // Never turn a JSON number into a string: amounts must arrive as strings.
        coerceTypes: false,
      },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  const db = deps.database.db as Kysely<ReadModelTables>;
  const auth = authentication({ database: deps.database, rateLimiter: deps.rateLimiter, adminToken: deps.adminToken });
  /**
   * Lets the answer to a write wait until the read models show it, so a
   * GET right after it sees what it wrote; and a read wait until they show
   * what it must (readInvoice, caughtUp). Only the read models: the
   * process managers and webhook outboxes that also follow the log add
   * nothing a read needs, and waiting for the slowest of them cost a
   * payment creation most of its time. Read models further behind than the
   * wait give a 503: answering from them would deny what was written (a
   * fresh invoice's 404, a fresh key's 401), which a client must not take
   * for the truth. A write has committed by then; its claim on an
   * Idempotency-Key is held as for any 5xx (api/idempotency.ts).
   */
  const settle = async (position: string | undefined) => {
    if (!position) return;
    try {
      await deps.projections.waitFor(position, 10_000, deps.readModels);
    } catch (error) {
      if (!(error instanceof ReadModelsBehindError)) throw error;
      app.log.warn({ err: error }, 'read models lag');
      throw catchingUp();
    }
  };
  const merchants = merchantCommands(deps.store);
  const context = {
    ...deps,
    db,
    auth,
    merchants,
    users: merchantUserCommands(deps.store, merchants),
    sessions: await dashboardSessions(deps.database),
    settle,
    /** For a list: waits until the read models show every write committed before the call (see readInvoice). */
    caughtUp: async () => settle(await deps.store.headPosition()),
    /**
     * A read of an invoice from the read models; undefined for an id that is
     * not a UUID or an invoice that does not exist. Invoices and payments
     * are answered as soon as their events are committed, without waiting
     * for the read models (a third of a payment creation's throughput); so
     * a read that finds nothing asks the event store whether the invoice
     * exists, and if it does, waits until the read models show it and reads
     * again. A client that creates and at once reads, from this instance or
     * another, never gets a 404: they share the event store and the read
     * models. Every other write still settles before answering, because a
     * row that is there but stale cannot be told from a current one.
     */
    readInvoice: async <T>(id: string, read: () => Promise<T | undefined>): Promise<T | undefined> => {
      if (!UUID.test(id)) return undefined;
      const found = await read();
      if (found !== undefined) return found;
      const last = (await deps.store.readStream(invoiceStreamName(id))).at(-1);
      if (!last) return undefined;
      await settle(last.position);
      return read();
    },
  };

  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'Crypto payment invoicing API',
        version: '1.0.0',
        description: 'Merchant API (interface.md), operator API and sandbox API (operations.md).',
      },
      servers: [{ url: deps.config.publicBaseUrl }],
      components: {
        securitySchemes: {
          apiKey: { type: 'http', scheme: 'bearer', description: 'Merchant API key, pk_live_…' },
          adminToken: { type: 'http', scheme: 'bearer', description: 'Operator ADMIN_TOKEN' },
        },
      },
    },
    // The schemas' `errorMessage` (the contract's wording for a failed check)
    // is a validator keyword OpenAPI does not know: published as an `x-`
    // extension, so the document stays valid and the wording stays visible.
    transformObject: (document) =>
      publishedSchemas('openapiObject' in document ? document.openapiObject : document.swaggerObject),
  });

  app.addHook('onRequest', async (request, reply) => {
    reply.header('X-Correlation-Id', request.id);
    // The APIs answer JSON only (and an audit trail and reports as JSON lines,
    // reports as CSV too); a client that accepts nothing of the kind is told so.
    if (/^\/(api|admin|dev)\//.test(request.url) && request.headers.accept) {
      const acceptable = new Negotiator(request).mediaType(['application/json', 'application/x-ndjson', 'text/csv']);
      if (!acceptable)
        return sendError(reply, 406, 'This API answers application/json only; send an Accept header that allows it');
    }
  });
  app.addHook('onResponse', async (request, reply) => {
    request.log.info(
      { method: request.method, url: request.url, statusCode: reply.statusCode, ms: Math.round(reply.elapsedTime) },
      'request',
    );
    const route = request.routeOptions.url ?? 'unmatched';
    deps.metrics.requests.inc({ method: request.method, route, status: reply.statusCode });
    deps.metrics.latency.observe({ method: request.method, route }, reply.elapsedTime / 1000);
  });

  // Which methods each path pattern answers, so a wrong method gets 405 instead of 404.
  const routes: { pattern: RegExp; method: string }[] = [];
  app.addHook('onRoute', (route) => {
    const pattern = new RegExp(`^${route.url.replace(/:[^/]+/g, '[^/]+')}/?$`);
    for (const method of [route.method].flat()) routes.push({ pattern, method });
  });
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0]!;
    const allowed = [...new Set(routes.filter((r) => r.pattern.test(path)).map((r) => r.method))];
    if (allowed.length > 0) {
      reply.header('Allow', allowed.join(', '));
      return sendError(reply, 405, `Method ${request.method} is not allowed on ${path}`);
    }
    return sendError(reply, 404, `Route ${request.method} ${path} not found`);
  });
  app.setErrorHandler(handleError);
  // Only JSON bodies: anything else is a 415, not a string the schema then rejects.
  app.removeContentTypeParser('text/plain');
  const idempotent = await idempotency(deps.database);
  app.addHook('preHandler', idempotent.claim);
  app.addHook('onSend', idempotent.record);

  await app.register(async (scope) => healthRoutes(scope, context));
  await app.register(async (scope) => catalogueRoutes(scope, context));
  await app.register(async (scope) => adminRoutes(scope, context));
  await app.register(async (scope) => invoiceRoutes(scope, context));
  await app.register(async (scope) => settlementRoutes(scope, context));
  await app.register(async (scope) => refundRoutes(scope, context));
  await app.register(async (scope) => refundClaimRoutes(scope, context));
  await app.register(async (scope) => reportRoutes(scope, context));
  await app.register(async (scope) => subscriptionRoutes(scope, context));
  await app.register(async (scope) => liveRoutes(scope, context, deps.live));
  await app.register(async (scope) => webhookRoutes(scope, context, deps.webhooks));
  await app.register(async (scope) => checkoutRoutes(scope, context));
  await app.register(async (scope) => dashboardRoutes(scope, context));
  if (deps.sandbox) {
    const sandbox = deps.sandbox;
    await app.register(async (scope) => sandboxRoutes(scope, context, sandbox));
  }

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  return app;
}

export type App = Awaited<ReturnType<typeof buildApp>>;
export type RouteContext = AppDeps & {
  db: Kysely<ReadModelTables>;
  auth: ReturnType<typeof authentication>;
  merchants: ReturnType<typeof merchantCommands>;
  users: ReturnType<typeof merchantUserCommands>;
  sessions: Awaited<ReturnType<typeof dashboardSessions>>;
  settle: (position: string | undefined) => Promise<void>;
  caughtUp: () => Promise<void>;
  readInvoice: <T>(id: string, read: () => Promise<T | undefined>) => Promise<T | undefined>;
};
