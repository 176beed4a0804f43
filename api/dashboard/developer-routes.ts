// The dashboard's Developers → Webhooks and the invoice page's history
// (dashboard.md, pages 3 and 5). Everything goes through what the API uses:
// the merchant commands for the URL and the secret (the operator API's), the
// delivery worker and log for the test event, the log and redelivery
// (api/routes/webhooks.ts), and the invoice's events as its events endpoint
// reads them, with the user as the commands' actor. Changing the URL or the
// secret asks for the password again after 5 minutes.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { RecordedEvent } from '../../adapters/event-store/port.ts';
import type { Actor } from '../../commands/handle.ts';
import { DELIVERY_STATUSES, listWebhookDeliveries } from '../../commands/webhook-delivery.ts';
import { DomainError } from '../../domain/decider.ts';
import { roleAllows, type DashboardPermission } from '../../domain/merchant-user.ts';
import { formatUnits } from '../../domain/money.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { MerchantCommands } from '../../commands/merchants.ts';
import type { ReadModels } from '../../projections/schema.ts';
import { webhookEventId } from '../../projections/webhook-outboxes.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import { HttpError } from '../errors.ts';
import { clientScriptRoute } from '../routes/checkout.ts';
import { invoiceHistory } from '../routes/invoices.ts';
import { sendTestEvent, type WebhookSending } from '../routes/webhooks.ts';
import { WEBHOOK_EVENT_TYPES } from '../../projections/contract/webhooks.ts';
import { webhookUrlProblem } from '../webhook-url.ts';
import { invoiceHistorySections, webhooksPage, type TimelineEntry, type WebhooksPageData } from './developer-pages.ts';
import { messagePage } from './pages.ts';
import type { DashboardKit, Form } from './kit.ts';
import { needsReauthentication, type DashboardSession } from './sessions.ts';

const DELIVERIES_PER_PAGE = 20;
const text = (form: Form | undefined, name: string) => {
  const value = form?.[name];
  return typeof value === 'string' ? value.trim() : '';
};

// ---- The invoice's history -------------------------------------------------

/** "PaymentConfirmationsUpdated" as "Payment confirmations updated". */
const words = (type: string) => {
  const spaced = type.replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase();
  return spaced.charAt(0).toUpperCase() + spaced.slice(1);
};

/** The event in words: its type, and the amount, confirmations, transaction or reason it carries. */
export function eventSentence(type: string, data: Record<string, unknown>): string {
  const details: string[] = [];
  const { amount, currency, token, tokenDecimals, chain, confirmations, txHash, reason } = data;
  if (typeof amount === 'string' && typeof currency === 'string') details.push(`${amount} ${currency}`);
  else if (
    typeof amount === 'string' &&
    /^\d+$/.test(amount) &&
    typeof token === 'string' &&
    typeof tokenDecimals === 'number'
  )
    details.push(
      `${formatUnits(BigInt(amount), tokenDecimals, tokenDecimals)} ${token}${typeof chain === 'string' ? ` on ${chain}` : ''}`,
    );
  if (typeof confirmations === 'number') details.push(`${confirmations} confirmation${confirmations === 1 ? '' : 's'}`);
  if (typeof txHash === 'string') details.push(`transaction ${txHash}`);
  if (typeof reason === 'string' && reason) details.push(reason);
  return details.length > 0 ? `${words(type)}: ${details.join(', ')}` : words(type);
}

/** Who asked for the command, as the events endpoint's `actor` says; null where the event names nobody. */
export function actorName(actor: unknown): string | null {
  const a = actor as Actor | undefined;
  if (a?.type === 'user') return a.email;
  if (a?.type === 'api_key') return `API key ${a.keyId.slice(0, 8)}`;
  if (a?.type === 'operator') return 'the operator';
  return null;
}

const timelineEntry = (e: RecordedEvent): TimelineEntry => ({
  at: e.recordedAt.toISOString(),
  what: eventSentence(e.type, (e.data ?? {}) as Record<string, unknown>),
  by: actorName(e.metadata.actor),
});

/**
 * The ids the webhooks of these events would have: a webhook's id follows
 * from the event that caused it (webhookEventId), an invoice's from its
 * invoice, settlement and refund events; so these find the invoice's deliveries.
 */
export function webhookEventIdsOf(history: RecordedEvent[]): string[] {
  return history.flatMap((e) => {
    const kind = e.streamId.split('-')[0];
    return WEBHOOK_EVENT_TYPES.filter((name) => name.startsWith(`${kind}.`)).map((name) => webhookEventId(e.id, name));
  });
}

/** The invoice page's timeline and, for webhooks:write, its webhook deliveries. */
export async function invoiceSections(
  ctx: Pick<DeveloperRouteDeps, 'store' | 'db'>,
  session: DashboardSession,
  invoiceId: string,
) {
  const history = await invoiceHistory(ctx.store, ctx.db, invoiceId);
  const deliveries = roleAllows(session.role, 'webhooks:write')
    ? (
        await listWebhookDeliveries(ctx.db, session.merchantId, {
          eventIds: webhookEventIdsOf(history),
          limit: 100,
          page: 1,
        })
      ).rows
    : undefined;
  return invoiceHistorySections(session, invoiceId, history.map(timelineEntry), deliveries);
}

// ---- Routes ----------------------------------------------------------------

/** What these pages use of the service. */
export interface DeveloperRouteDeps extends Pick<ReadYourWrites, 'settle' | 'caughtUp'> {
  store: EventStore;
  db: ReadModels;
  merchants: MerchantCommands;
  webhooks: WebhookSending;
}

export async function developerRoutes(scope: FastifyInstance, ctx: DeveloperRouteDeps, kit: DashboardKit) {
  const { db, merchants, settle, webhooks } = ctx;
  const { page, html, redirect, redirectWhenSettled, actorOf, reauthenticationProblem } = kit;

  // The invoice page's live-following script, served as the checkout's is.
  scope.get(
    '/dashboard/assets/invoice.js',
    { schema: { hide: true } },
    clientScriptRoute(new URL('../dashboard/invoice.client.ts', import.meta.url)),
  );

  const webhookUrlOf = async (merchantId: string) =>
    (await db.selectFrom('merchants').select('webhook_url').where('id', '=', merchantId).executeTakeFirst())
      ?.webhook_url ?? null;

  /** The Webhooks page, on the log's page `query` asks for. */
  async function webhooksAnswer(
    reply: FastifyReply,
    session: DashboardSession,
    status: number,
    query: { status?: string; page?: string },
    extra: Partial<WebhooksPageData> = {},
  ) {
    const deliveryStatus = (DELIVERY_STATUSES as readonly string[]).includes(query.status ?? '') ? query.status! : '';
    const page = Math.max(1, Math.min(10_000, Number.parseInt(query.page ?? '1', 10) || 1));
    const [url, { rows, total }] = await Promise.all([
      webhookUrlOf(session.merchantId),
      listWebhookDeliveries(db, session.merchantId, {
        status: deliveryStatus || undefined,
        limit: DELIVERIES_PER_PAGE,
        page,
      }),
    ]);
    return html(
      reply,
      status,
      webhooksPage(session, {
        url,
        deliveries: rows,
        total,
        page,
        pages: Math.ceil(total / DELIVERIES_PER_PAGE),
        status: deliveryStatus,
        reauthenticate: needsReauthentication(session, new Date()),
        ...extra,
      }),
    );
  }

  scope.get(
    '/dashboard/developers/webhooks',
    page<{ Querystring: { status?: string; page?: string } }>('webhooks:write', async (request, reply, session) => {
      // Like the API's list: a webhook caused by a write before this request is shown.
      await ctx.caughtUp();
      return webhooksAnswer(reply, session, 200, request.query);
    }),
  );

  scope.post(
    '/dashboard/developers/webhooks/url',
    page<{ Body: Form }>('webhooks:write', async (request, reply, session) => {
      const refuse = (status: number, message: string) =>
        webhooksAnswer(reply, session, status, {}, { error: { form: 'url', message } });
      const reauthentication = await reauthenticationProblem(request);
      if (reauthentication) return refuse(403, reauthentication);
      const url = text(request.body, 'url');
      if (url.length > 2048) return refuse(400, 'The URL is at most 2048 characters.');
      // The operator API's check of a merchant's URL (admin.ts checkProfile).
      const problem = url && webhookUrlProblem(url, webhooks.policy);
      if (problem) return refuse(400, problem);
      const { position } = await merchants.update(
        session.merchantId,
        { webhookUrl: url || null },
        request.id,
        actorOf(session),
      );
      return redirectWhenSettled(reply, position, '/dashboard/developers/webhooks');
    }),
  );

  scope.post(
    '/dashboard/developers/webhooks/secret',
    page<{ Body: Form }>('webhooks:write', async (request, reply, session) => {
      const reauthentication = await reauthenticationProblem(request);
      if (reauthentication) {
        return webhooksAnswer(reply, session, 403, {}, { error: { form: 'secret', message: reauthentication } });
      }
      const { value, position } = await merchants.rotateWebhookSecret(session.merchantId, request.id, actorOf(session));
      await settle(position);
      // Shown in this answer only: the page, asked for again, never has it.
      return webhooksAnswer(reply, session, 201, {}, { newSecret: value, reauthenticate: false });
    }),
  );

  scope.post(
    '/dashboard/developers/webhooks/test',
    page<{ Body: Form }>('webhooks:write', async (request, reply, session) => {
      const url = text(request.body, 'url');
      const event = text(request.body, 'eventType');
      try {
        const result = await sendTestEvent(webhooks, session.merchantId, url, event);
        return webhooksAnswer(reply, session, 200, {}, { test: { ...result, url, event } });
      } catch (error) {
        if (!(error instanceof HttpError) || error.statusCode !== 400) throw error;
        return webhooksAnswer(reply, session, 400, {}, { error: { form: 'test', message: error.message } });
      }
    }),
  );

  scope.post(
    '/dashboard/developers/webhooks/deliveries/:id/redeliver',
    page<{ Params: { id: string }; Body: Form }>('webhooks:write', async (request, reply, session) => {
      try {
        // The API's redelivery, which takes only the merchant's own deliveries.
        await webhooks.worker.redeliver(request.params.id, session.merchantId, 'recorded');
      } catch (error) {
        if (!(error instanceof DomainError) || error.kind !== 'not_found') throw error;
        return html(reply, 404, messagePage('Delivery not found', 'There is no such webhook delivery.', session));
      }
      // Back to the invoice it was redelivered from, or to the log; nowhere else.
      const back = text(request.body, 'back');
      return redirect(
        reply,
        /^\/dashboard\/invoices\/[0-9a-f-]{36}$/i.test(back) ? back : '/dashboard/developers/webhooks',
      );
    }),
  );
}
