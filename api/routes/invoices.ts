// The merchant's invoice endpoints (interface.md), the public status and
// address endpoints, and the audit trail (operations.md §3).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import { Type, type Static } from 'typebox';
import { paymentRequests } from '../payment-request.ts';
import type { EventStore, RecordedEvent } from '../../adapters/event-store/port.ts';
import { chainAuditTrail } from '../../domain/audit-trail.ts';
import { loadState } from '../../commands/handle.ts';
import { refundStreamName } from '../../domain/refund.ts';
import { settlementStreamOf } from '../../domain/settlement.ts';
import {
  invoiceDecider,
  invoiceStreamName,
  refundableOf,
  type AssignedAddress,
  type Invoice,
} from '../../domain/invoice.ts';
import type { ChainName } from '../../domain/catalogue.ts';
import { formatFiat, formatUnits, parseUnits, FIAT_DECIMALS } from '../../domain/money.ts';
import { paymentStreamName } from '../../domain/payment.ts';
import { invoiceAddresses, invoiceRow, invoiceStatus, listInvoices } from '../../projections/invoice-queries.ts';
import { invoiceView, invoiceViewOf } from '../../projections/contract/invoice.ts';
import type { SqlDatabase } from '../../adapters/sql/database.ts';
import { keyActor, type Authentication } from '../auth.ts';
import type { Config } from '../config.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import type { InvoiceCommands } from '../../commands/invoices.ts';
import type { ReadModels, ReadModelTables } from '../../projections/schema.ts';
import { badRequest, notFound } from '../errors.ts';
import { keyedId } from '../idempotency.ts';
import { webhookUrlProblem } from '../webhook-url.ts';
import { listPage, timeOf, UUID } from './query.ts';
import { CreatedQuery, data, IdParams, Nullable, PageQuery, Paged, StatusQuery } from './schemas.ts';

const MAX_INVOICE_MINUTES = 525_600;

// Field types are checked in the handlers, so that every failure carries the
// contract's own message (e.g. a JSON number as amount is "not a valid decimal string").
const InvoiceFields = {
  amount: Type.Optional(Type.Unknown({ description: 'Fiat amount as a decimal string, greater than 0' })),
  currency: Type.Optional(Type.Unknown({ description: 'Fiat currency code, e.g. USD' })),
  description: Type.Optional(Type.Unknown({ description: 'Free text, at most 1000 characters' })),
  expiresInMinutes: Type.Optional(Type.Unknown({ description: 'Minutes until expiry' })),
  webhookUrl: Type.Optional(Type.Unknown({ description: 'HTTPS URL overriding the merchant default' })),
  metadata: Type.Optional(Type.Unknown({ description: 'Object of key-value pairs returned in every webhook event' })),
};
const InvoiceBody = Type.Object(InvoiceFields);
const PaymentBody = Type.Object({
  ...InvoiceFields,
  chain: Type.Optional(Type.Unknown({ description: 'Chain identifier (GET /api/v1/chains)' })),
  token: Type.Optional(Type.Unknown({ description: "Token symbol; the chain's native coin when omitted" })),
});
const AddressBody = Type.Object({
  chain: Type.Optional(Type.Unknown({ description: 'Chain identifier' })),
  token: Type.Optional(Type.Unknown({ description: "Token symbol; the chain's native coin when omitted" })),
});

export const InvoiceSchema = Type.Object({
  id: Type.String(),
  merchantId: Type.String(),
  amount: Type.String(),
  currency: Type.String(),
  status: Type.String(),
  description: Nullable(Type.String()),
  expiresAt: Type.String(),
  webhookUrl: Nullable(Type.String()),
  paymentUrl: Type.String(),
  refundStatus: Type.String({ description: 'none, partial or full: all received money refunded (refunds.md)' }),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});
const PaymentUri = Type.String({
  description: 'A payment request wallets read: BIP21, EIP-681, Solana Pay, or tron: (docs); the QR code holds it',
});
const AddressSchema = Type.Object({
  currency: Type.String(),
  chain: Type.String(),
  address: Type.String(),
  qrCode: Type.String(),
  paymentUri: PaymentUri,
});
const PaymentSchema = Type.Object({
  paymentId: Type.String(),
  address: Type.String(),
  qrCode: Type.String(),
  paymentUri: PaymentUri,
  requiredConfirmations: Type.Integer({ description: "Confirmations the payment's chain needs before it counts" }),
  cryptoAmount: Type.String(),
  cryptoCurrency: Type.String(),
  chain: Type.String(),
  fiatAmount: Type.String(),
  fiatCurrency: Type.String(),
  exchangeRate: Type.String(),
  exchangeRateObservedAt: Nullable(
    Type.String({
      description:
        'When the exchange rate was observed (of a median of sources: its oldest answer used); null for quotes made before this was recorded',
    }),
  ),
  status: Type.String(),
  expiresAt: Type.String(),
  createdAt: Type.String(),
});
const StatusSchema = Type.Object({
  id: Type.String(),
  status: Type.String(),
  amount: Type.String(),
  currency: Type.String(),
  description: Nullable(Type.String()),
  merchantName: Type.String(),
  confirmations: Type.Integer(),
  requiredConfirmations: Type.Integer(),
  paymentStatus: Type.String(),
  paymentStatusDetail: Nullable(Type.String()),
  settledAmount: Nullable(Type.String()),
  txHash: Nullable(Type.String()),
  expiresAt: Nullable(Type.String()),
  createdAt: Type.String(),
  returnUrl: Nullable(Type.String()),
  totalReceivedAmount: Type.String(),
  totalReceivedCurrency: Type.String(),
  remainingAmount: Type.String(),
  paymentProgress: Type.Integer(),
  hasDetectedPayment: Type.Boolean(),
  detectedPaymentAmount: Nullable(Type.String()),
  detectedPaymentCurrency: Nullable(Type.String()),
  paymentIssueType: Nullable(Type.String()),
  mismatchPayment: Nullable(
    Type.Object({
      amount: Type.String(),
      currency: Type.String(),
      actualCurrency: Type.String(),
      txHash: Type.String(),
    }),
  ),
});
const RefundableSchema = Type.Object({
  chain: Type.String(),
  token: Type.String(),
  received: Type.String({ description: 'confirmed payments of this token, decimal in token units' }),
  refunded: Type.String({ description: 'refunds completed' }),
  pending: Type.String({ description: 'refunds not yet completed' }),
  refundable: Type.String({ description: 'received − refunded − pending' }),
  excess: Type.String({ description: 'the overpaid part, late and wrong-token payments, not yet refunded' }),
});
const EventSchema = Type.Object({
  eventId: Type.String(),
  type: Type.String(),
  streamId: Type.String(),
  position: Type.String(),
  recordedAt: Type.String(),
  data: Type.Unknown(),
  actor: Nullable(
    Type.Object(
      {
        type: Type.String({ description: 'user (a dashboard user), operator or api_key' }),
        userId: Type.Optional(Type.String()),
        email: Type.Optional(Type.String()),
        keyId: Type.Optional(Type.String()),
      },
      { description: 'Who asked for the command that wrote the event; null where the service acted by itself' },
    ),
  ),
});
const ListQuery = Type.Object({
  status: StatusQuery(['pending', 'confirmed', 'settled', 'expired']),
  currency: Type.Optional(Type.String()),
  ...CreatedQuery,
  ...PageQuery,
});

type InvoiceInput = Static<typeof InvoiceBody>;

const MAX_FIAT_UNITS = 10n ** 15n * 10n ** BigInt(FIAT_DECIMALS);

/** What these routes use of the service. */
export interface InvoiceRouteDeps extends Pick<ReadYourWrites, 'settle' | 'caughtUp' | 'readInvoice'> {
  auth: Authentication;
  invoices: InvoiceCommands;
  db: ReadModels;
  database: SqlDatabase;
  config: Config;
  store: EventStore;
}

export async function invoiceRoutes(scope: FastifyInstance, ctx: InvoiceRouteDeps) {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const { auth, invoices, db, database, config, settle, caughtUp, readInvoice, store } = ctx;
  const requests = paymentRequests(config);
  const key = [{ apiKey: [] }];

  /** The contract's checks of a new invoice, in the contract's words. */
  function checkInvoice(body: InvoiceInput, minutes: { fallback: number; max?: number; clampTo?: number }) {
    const units = typeof body.amount === 'string' ? (parseUnits(body.amount, FIAT_DECIMALS) ?? 0n) : 0n;
    if (units <= 0n) throw badRequest('Amount must be greater than 0');
    // Beyond any real price, and it keeps every derived amount within the read models' numeric(78,0).
    if (units >= MAX_FIAT_UNITS) throw badRequest('Amount must be less than 1000000000000000');
    if (typeof body.currency !== 'string' || body.currency.trim() === '') throw badRequest('Currency is required');
    const currency = body.currency.trim().toUpperCase();
    if (!/^[A-Z]{3}$/.test(currency)) throw badRequest('Currency must be a 3-letter ISO 4217 code');
    let expiresInMinutes = minutes.fallback;
    if (body.expiresInMinutes !== undefined && body.expiresInMinutes !== null) {
      if (typeof body.expiresInMinutes !== 'number' || !Number.isFinite(body.expiresInMinutes)) {
        throw badRequest('Expires in minutes must be a number');
      }
      if (body.expiresInMinutes <= 0) throw badRequest('Expires in minutes must be greater than 0');
      if (!Number.isInteger(body.expiresInMinutes)) throw badRequest('Expires in minutes must be a whole number');
      if (minutes.max !== undefined && body.expiresInMinutes > minutes.max) {
        throw badRequest(`Expires in minutes cannot exceed ${minutes.max}`);
      }
      expiresInMinutes = Math.min(body.expiresInMinutes, minutes.clampTo ?? Infinity);
    }
    if (body.description !== undefined && body.description !== null) {
      if (typeof body.description !== 'string') throw badRequest('Description must be a string');
      if (body.description.length > 1000) throw badRequest('Description must be at most 1000 characters');
    }
    let webhookUrl: string | null = null;
    if (body.webhookUrl !== undefined && body.webhookUrl !== null) {
      if (typeof body.webhookUrl !== 'string') throw badRequest('Invalid webhook URL format');
      const problem = webhookUrlProblem(body.webhookUrl, {
        production: config.appEnv === 'production',
        allowPrivateTargets: config.webhookAllowPrivateTargets,
      });
      if (problem) throw badRequest(problem);
      webhookUrl = body.webhookUrl;
    }
    const metadata = body.metadata ?? null;
    if (metadata !== null && (typeof metadata !== 'object' || Array.isArray(metadata))) {
      throw badRequest('Metadata must be an object of key-value pairs');
    }
    if (metadata !== null && JSON.stringify(metadata).length > 16_384)
      throw badRequest('Metadata must be at most 16 KB as JSON');
    return {
      amount: body.amount as string,
      currency,
      description: (body.description as string | undefined) ?? null,
      expiresInMinutes,
      webhookUrl,
      metadata: metadata as Record<string, unknown> | null,
    };
  }

  const tokenOf = (value: unknown) => {
    if (value === undefined || value === null) return undefined;
    if (typeof value !== 'string' || value.trim() === '') throw badRequest('Token must be a token symbol, e.g. USDT');
    return value.trim().toUpperCase();
  };
  const chainOf = (value: unknown) => {
    if (typeof value !== 'string' || value.trim() === '') throw badRequest('Chain is required');
    return value.trim().toLowerCase();
  };

  function paymentView(invoice: Invoice, address: AssignedAddress, merchantName: string) {
    return {
      paymentId: invoice.id,
      address: address.address,
      ...requests.withQr({
        invoiceId: invoice.id,
        merchantName,
        chain: address.chain,
        token: address.token,
        address: address.address,
        amount: address.cryptoAmount,
        decimals: address.tokenDecimals,
      }),
      requiredConfirmations: config.requiredConfirmations[address.chain as ChainName],
      cryptoAmount: formatUnits(address.cryptoAmount, address.tokenDecimals),
      cryptoCurrency: address.token,
      chain: address.chain,
      fiatAmount: formatFiat(invoice.amount)!,
      fiatCurrency: invoice.currency,
      exchangeRate: address.rate,
      exchangeRateObservedAt: address.rateObservedAt ?? null,
      status: 'pending',
      expiresAt: invoice.expiresAt,
      createdAt: invoice.createdAt,
    };
  }

  const viewOf = (invoice: Invoice) => invoiceViewOf(invoice, config.publicBaseUrl);

  app.post(
    '/api/v1/payments',
    {
      onRequest: auth.merchant(),
      schema: {
        tags: ['invoices'],
        summary: 'Create an invoice and its deposit address',
        security: key,
        body: PaymentBody,
        response: { 201: data(PaymentSchema) },
      },
    },
    async (request, reply) => {
      const input = checkInvoice(request.body, { fallback: 15, clampTo: 15 });
      const chain = chainOf(request.body.chain);
      const token = tokenOf(request.body.token);
      // Answered without waiting for the read models: see readInvoice.
      const { value } = await invoices.createPayment(
        request.caller!.merchantId,
        { ...input, chain, token, id: keyedId(request, 'invoice') },
        request.id,
        keyActor(request),
      );
      return reply.code(201).send({ data: paymentView(value.invoice, value.address, request.caller!.merchantName) });
    },
  );

  app.post(
    '/api/v1/invoices',
    {
      onRequest: auth.merchant('invoices:write'),
      schema: {
        tags: ['invoices'],
        summary: 'Create an invoice; the customer picks chain and token at checkout',
        security: key,
        body: InvoiceBody,
        response: { 201: data(InvoiceSchema) },
      },
    },
    async (request, reply) => {
      const input = checkInvoice(request.body, { fallback: 15, max: MAX_INVOICE_MINUTES });
      // Answered without waiting for the read models: see readInvoice.
      const { value } = await invoices.create(
        request.caller!.merchantId,
        { ...input, id: keyedId(request, 'invoice') },
        request.id,
        keyActor(request),
      );
      return reply.code(201).send({ data: viewOf(value) });
    },
  );

  app.get(
    '/api/v1/invoices',
    {
      onRequest: auth.merchant('invoices:read'),
      schema: {
        tags: ['invoices'],
        summary: "List the merchant's invoices, newest first",
        security: key,
        querystring: ListQuery,
        response: { 200: Paged(InvoiceSchema) },
      },
    },
    async ({ query: q, caller }) =>
      listPage(
        q,
        async (paging) => {
          await caughtUp();
          return listInvoices(db, {
            merchantId: caller!.merchantId,
            status: q.status,
            currency: q.currency,
            from: timeOf(q.from, 'from'),
            to: timeOf(q.to, 'to'),
            ...paging,
          });
        },
        (r) => invoiceView(r, config.publicBaseUrl),
      ),
  );

  /** The caller's invoice row, or 404 as the contract says (also for another merchant's invoice). */
  async function ownInvoice(id: string, merchantId: string) {
    const row = await readInvoice(id, () => invoiceRow(db, id));
    if (!row || row.merchant_id !== merchantId) throw notFound('Invoice not found');
    return row;
  }

  app.get(
    '/api/v1/invoices/:id',
    {
      onRequest: auth.merchant('invoices:read'),
      schema: {
        tags: ['invoices'],
        summary: 'Get an invoice with its addresses',
        security: key,
        params: IdParams,
        response: { 200: data(Type.Intersect([InvoiceSchema, Type.Object({ addresses: Type.Array(AddressSchema) })])) },
      },
    },
    async (request) => {
      const row = await ownInvoice(request.params.id, request.caller!.merchantId);
      const addresses = await invoiceAddresses(db, row.id);
      return {
        data: {
          ...invoiceView(row, config.publicBaseUrl),
          addresses: addresses.map((a) => ({
            currency: a.token,
            chain: a.chain,
            address: a.address,
            ...requests.withQr({
              invoiceId: row.id,
              merchantName: request.caller!.merchantName,
              chain: a.chain,
              token: a.token,
              address: a.address,
              amount: BigInt(a.crypto_amount),
              decimals: a.token_decimals,
            }),
          })),
        },
      };
    },
  );

  app.post(
    '/api/v1/invoices/:id/cancel',
    {
      onRequest: auth.merchant('invoices:write'),
      schema: {
        tags: ['invoices'],
        summary: 'Cancel a pending invoice (it becomes expired)',
        security: key,
        params: IdParams,
        response: { 200: data(InvoiceSchema) },
      },
    },
    async (request) => {
      if (!UUID.test(request.params.id)) throw notFound('Invoice not found');
      const { value, position } = await invoices.cancel(
        request.params.id,
        request.caller!.merchantId,
        request.id,
        keyActor(request),
      );
      await settle(position);
      return { data: viewOf(value) };
    },
  );

  app.get(
    '/api/v1/invoices/:id/status',
    {
      onRequest: auth.public,
      schema: {
        tags: ['public'],
        summary: 'Poll payment status (public)',
        params: IdParams,
        response: { 200: data(StatusSchema) },
      },
    },
    async (request) => {
      const id = request.params.id;
      const status = await readInvoice(id, () => invoiceStatus(database, id));
      if (!status) throw notFound('Invoice not found');
      return { data: status };
    },
  );

  app.post(
    '/api/v1/invoices/:id/addresses',
    {
      onRequest: auth.public,
      schema: {
        tags: ['public'],
        summary: 'Create (201) or return (200) the deposit address of a chain and token, for the checkout page',
        params: IdParams,
        body: AddressBody,
        response: { 200: data(PaymentSchema), 201: data(PaymentSchema) },
      },
    },
    async (request, reply) => {
      if (!UUID.test(request.params.id)) throw notFound('Invoice not found');
      const chain = chainOf(request.body.chain);
      const token = tokenOf(request.body.token);
      const invoice = await invoices.invoiceOf(request.params.id);
      if (invoice.status !== 'pending')
        throw badRequest(
          `Invoice is ${invoice.status === 'partial' ? 'partly paid' : invoice.status}: no new address can be created`,
        );
      const { value, position } = await invoices.assignAddress(request.params.id, chain, token, request.id);
      await settle(position);
      const merchant = await db
        .selectFrom('merchants')
        .select('name')
        .where('id', '=', value.invoice.merchantId)
        .executeTakeFirstOrThrow();
      return reply
        .code(value.created ? 201 : 200)
        .send({ data: paymentView(value.invoice, value.address, merchant.name) });
    },
  );

  app.get(
    '/api/v1/invoices/:id/refundable',
    {
      onRequest: auth.merchant('refunds:read'),
      schema: {
        tags: ['refunds'],
        summary: 'What the invoice received of each chain and token, and how much of it can still be refunded',
        security: key,
        params: IdParams,
        response: { 200: data(Type.Array(RefundableSchema)) },
      },
    },
    async (request) => {
      const row = await ownInvoice(request.params.id, request.caller!.merchantId);
      // The invoice's own stream, not a read model: the refund limit is decided on it.
      const invoice = await loadState(store, invoiceDecider, invoiceStreamName(row.id));
      return {
        data: (invoice ? refundableOf(invoice) : []).map((a) => ({
          chain: a.chain,
          token: a.token,
          received: formatUnits(a.received, a.tokenDecimals, a.tokenDecimals),
          refunded: formatUnits(a.refunded, a.tokenDecimals, a.tokenDecimals),
          pending: formatUnits(a.pending, a.tokenDecimals, a.tokenDecimals),
          refundable: formatUnits(a.refundable, a.tokenDecimals, a.tokenDecimals),
          excess: formatUnits(a.excess, a.tokenDecimals, a.tokenDecimals),
        })),
      };
    },
  );

  app.get(
    '/api/v1/invoices/:id/events',
    {
      onRequest: auth.merchant('invoices:read'),
      schema: {
        tags: ['invoices'],
        summary: "The invoice's whole history: its events and those of its payments, settlement and refunds, in order",
        description:
          'With format=ndjson: one JSON line per event with its stream revision, and a SHA-256 hash chain over the lines (previousHash, hash) for `npm run cli -- audit verify`',
        security: key,
        params: IdParams,
        querystring: Type.Object({ format: Type.Optional(Type.Union([Type.Literal('json'), Type.Literal('ndjson')])) }),
        response: { 200: data(Type.Array(EventSchema)) },
      },
    },
    async (request, reply) => {
      const row = await ownInvoice(request.params.id, request.caller!.merchantId);
      const events = await invoiceHistory(store, db, row.id);
      if (request.query.format === 'ndjson') {
        const lines = chainAuditTrail(
          events.map((e) => ({
            eventId: e.id,
            streamId: e.streamId,
            revision: e.revision,
            position: e.position,
            recordedAt: e.recordedAt.toISOString(),
            type: e.type,
            data: e.data,
          })),
        );
        return reply
          .type('application/x-ndjson; charset=utf-8')
          .header('Content-Disposition', `attachment; filename="invoice-${row.id}.ndjson"`)
          .serializer((text: string) => text)
          .send((lines.map((line) => JSON.stringify(line)).join('\n') + '\n') as never);
      }
      return {
        data: events.map((e) => ({
          eventId: e.id,
          type: e.type,
          streamId: e.streamId,
          position: e.position,
          recordedAt: e.recordedAt.toISOString(),
          data: e.data,
          actor: (e.metadata.actor as Static<typeof EventSchema>['actor'] | undefined) ?? null,
        })),
      };
    },
  );
}

/**
 * The invoice's whole history, in log order: its events and those of its
 * payments, settlement and refunds (the events endpoint, and the dashboard's
 * timeline).
 */
export async function invoiceHistory(
  store: EventStore,
  db: Kysely<ReadModelTables>,
  invoiceId: string,
): Promise<RecordedEvent[]> {
  const payments = await db
    .selectFrom('payments')
    .select(['chain', 'tx_hash', 'output_index'])
    .where('invoice_id', '=', invoiceId)
    .execute();
  const refunds = await db.selectFrom('refunds').select('id').where('invoice_id', '=', invoiceId).execute();
  const streams = [
    invoiceStreamName(invoiceId),
    ...new Set(payments.map((p) => paymentStreamName(p.chain, p.tx_hash, p.output_index))),
    settlementStreamOf(invoiceId),
    ...refunds.map((r) => refundStreamName(r.id)),
  ];
  const events = (await Promise.all(streams.map((s) => store.readStream(s)))).flat();
  return events.sort((a, b) => store.comparePositions(a.position, b.position));
}
