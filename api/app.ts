// The HTTP application: the contract's envelope and errors, authentication,
// rate limits, metrics and the OpenAPI document around the route modules.
import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import swagger from '@fastify/swagger';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyPluginAsync } from 'fastify';
import Negotiator from 'negotiator';
import type { Kysely } from 'kysely';
import type { EventStore } from '../adapters/event-store/port.ts';
import type { SecretSealer } from '../adapters/secrets.ts';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { merchantCommands } from '../commands/merchants.ts';
import { merchantUserCommands } from '../commands/merchant-users.ts';
import { dashboardRoutes } from './dashboard/routes.ts';
import { dashboardSessions } from './dashboard/sessions.ts';
import type { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { readYourWrites } from './read-your-writes.ts';
import type { ReadModelTables } from '../projections/schema.ts';
import { authentication } from './auth.ts';
import { keyUsage } from './key-usage.ts';
import type { Config } from './config.ts';
import { errorBody, handleError, sendError } from './errors.ts';
import type { Metrics } from './metrics.ts';
import type { RateLimiter } from './rate-limit.ts';
import { adminRoutes, type AdminRouteDeps } from './routes/admin.ts';
import { catalogueRoutes } from './routes/catalogue.ts';
import { healthRoutes } from './routes/health.ts';
import { invoiceRoutes } from './routes/invoices.ts';
import { settlementRoutes } from './routes/settlements.ts';
import { refundRoutes } from './routes/refunds.ts';
import { refundClaimRoutes } from './routes/refund-claim.ts';
import { reportRoutes } from './routes/reports.ts';
import { subscriptionRoutes } from './routes/subscriptions.ts';
import { liveRoutes } from './routes/live.ts';
import { checkoutRoutes } from './routes/checkout.ts';
import { webhookRoutes, type WebhookSending } from './routes/webhooks.ts';
import type { LiveInvoiceStatus } from '../projections/live-status.ts';
import { sandboxRoutes, type Sandbox } from './routes/sandbox.ts';
import { idempotency } from './idempotency.ts';
import type { Clock } from '../adapters/clock.ts';
import type { InvoiceCommands } from '../commands/invoices.ts';
import type { SubscriptionCommands } from '../commands/subscriptions.ts';
import type { RefundCommands } from '../commands/refunds.ts';

/** What the service gives the HTTP application; the operator's views of wallets, nodes and prices are AdminRouteDeps'. */
export interface AppDeps extends Pick<
  AdminRouteDeps,
  'wallets' | 'chainConditions' | 'rateDisagreements' | 'settlementWalletProblem'
> {
  config: Config;
  clock: Clock;
  invoices: InvoiceCommands;
  subscriptions: SubscriptionCommands;
  refunds: RefundCommands;
  sandbox: Sandbox | undefined;
  live: LiveInvoiceStatus;
  webhooks: WebhookSending;
  adminToken: string;
  /** Seals dashboard users' TOTP keys in their events (from the wallet seed). */
  totpSealer: SecretSealer;
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
  const usage = await keyUsage(deps.database, app.log);
  const auth = authentication({
    database: deps.database,
    rateLimiter: deps.rateLimiter,
    adminToken: deps.adminToken,
    keyUsage: usage,
  });
  const merchants = merchantCommands(deps.store);
  // Everything a route module may ask for; each takes only what it names in its own deps type.
  const context = {
    ...deps,
    db,
    auth,
    merchants,
    users: merchantUserCommands(deps.store, merchants, deps.totpSealer),
    sessions: await dashboardSessions(deps.database),
    keyUsage: usage,
    ...readYourWrites({ store: deps.store, projections: deps.projections, readModels: deps.readModels, log: app.log }),
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

  const resources: FastifyPluginAsync<typeof context>[] = [
    healthRoutes,
    catalogueRoutes,
    adminRoutes,
    invoiceRoutes,
    settlementRoutes,
    refundRoutes,
    refundClaimRoutes,
    reportRoutes,
    subscriptionRoutes,
    liveRoutes,
    webhookRoutes,
    checkoutRoutes,
    dashboardRoutes,
  ];
  for (const routes of resources) await app.register(routes, context);
  if (deps.sandbox) await app.register(sandboxRoutes, { ...context, sandbox: deps.sandbox });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  return app;
}

export type App = Awaited<ReturnType<typeof buildApp>>;
