// Refunds (refunds.md): the merchant's endpoints and the customer's claim API.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { listRefunds, refundByClaimToken, refundById } from '../../projections/refunds.ts';
import { publicRefundView, refundView } from '../../projections/contract/refund.ts';
import { keyActor, type Authentication } from '../auth.ts';
import type { Config } from '../config.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import type { RefundCommands } from '../../commands/refunds.ts';
import type { ReadModels, RefundsTable } from '../../projections/schema.ts';
import type { Actor } from '../../commands/handle.ts';
import { badRequest, notFound } from '../errors.ts';
import { keyedId } from '../idempotency.ts';
import { listPage, ownRow, UUID } from './query.ts';
import { data, IdParams, Nullable, PageQuery, Paged } from './schemas.ts';

export const RefundSchema = Type.Object({
  id: Type.String(),
  invoiceId: Type.String(),
  status: Type.String({
    description:
      'awaiting_destination, awaiting_approval, awaiting_funds, sending, completed, canceled, expired, failed',
  }),
  chain: Type.String(),
  token: Type.String(),
  amount: Type.String({ description: 'what the refund takes, decimal in token units' }),
  networkFee: Type.String({ description: 'deducted from amount' }),
  netAmount: Type.String({ description: 'what the customer receives' }),
  fiatAmount: Type.String(),
  fiatCurrency: Type.String(),
  reason: Nullable(Type.String()),
  destination: Nullable(Type.String()),
  claimUrl: Nullable(Type.String({ description: 'where the customer gives the address; null once approved' })),
  claimExpiresAt: Type.String(),
  fundedFrom: Nullable(Type.String({ description: 'deposit or refund_wallet, once approved' })),
  transactionHash: Nullable(Type.String()),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  approvedAt: Nullable(Type.String()),
  completedAt: Nullable(Type.String()),
});
const PublicRefundSchema = Type.Object({
  status: Type.String(),
  merchantName: Type.String(),
  chain: Type.String(),
  token: Type.String(),
  amount: Type.String(),
  netAmount: Type.String(),
  destination: Nullable(Type.String()),
  claimExpiresAt: Type.String(),
});
const RefundBody = Type.Object(
  {
    chain: Type.Optional(Type.String()),
    token: Type.Optional(Type.String()),
    amount: Type.Optional(
      Type.String({ description: 'decimal string, token units', errorMessage: 'Amount must be a decimal string' }),
    ),
    kind: Type.Optional(
      Type.Union([Type.Literal('full'), Type.Literal('excess')], { errorMessage: 'Kind must be full or excess' }),
    ),
    destination: Type.Optional(Type.String({ maxLength: 128 })),
    reason: Type.Optional(Type.String({ maxLength: 500 })),
    claimExpiresInDays: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 90,
        errorMessage: 'claimExpiresInDays must be an integer from 1 to 90',
      }),
    ),
  },
  { additionalProperties: false },
);
const ListQuery = Type.Object({
  status: Type.Optional(Type.String()),
  invoiceId: Type.Optional(Type.String()),
  ...PageQuery,
});
const ClaimParams = Type.Object({ claimToken: Type.String({ maxLength: 128 }) });
const DestinationBody = Type.Object({
  address: Type.String({ minLength: 1, maxLength: 128, errorMessage: 'address is required' }),
});

/** What these routes use of the service. */
export interface RefundRouteDeps extends Pick<ReadYourWrites, 'settle' | 'caughtUp'> {
  auth: Authentication;
  db: ReadModels;
  refunds: RefundCommands;
  config: Config;
}

export async function refundRoutes(scope: FastifyInstance, ctx: RefundRouteDeps) {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const { auth, db, refunds, settle, caughtUp, config } = ctx;
  const key = [{ apiKey: [] }];
  const view = (row: Parameters<typeof refundView>[0]) => refundView(row, config.publicBaseUrl);
  /** The caller's refund, or 404 as refunds.md says (also for another merchant's). */
  const ownRefund = (id: string, merchantId: string) =>
    ownRow(id, merchantId, (refundId) => refundById(db, refundId), 'Refund not found');

  app.post(
    '/api/v1/invoices/:id/refunds',
    {
      onRequest: auth.merchant('refunds:write'),
      schema: {
        tags: ['refunds'],
        summary: 'Refund part or all of what an invoice received',
        security: key,
        params: IdParams,
        body: RefundBody,
        response: { 201: data(RefundSchema) },
      },
    },
    async (request, reply) => {
      if (!UUID.test(request.params.id)) throw notFound('Invoice not found');
      const { refundId, position } = await refunds.create(
        request.caller!.merchantId,
        request.params.id,
        request.body,
        keyedId(request, `refund of ${request.params.id}`),
        keyActor(request),
      );
      await settle(position);
      return reply.code(201).send({ data: view((await refundById(db, refundId))!) });
    },
  );

  app.get(
    '/api/v1/refunds',
    {
      onRequest: auth.merchant('refunds:read'),
      schema: {
        tags: ['refunds'],
        summary: "List the merchant's refunds, newest first",
        security: key,
        querystring: ListQuery,
        response: { 200: Paged(RefundSchema) },
      },
    },
    async ({ query: q, caller }) =>
      listPage(
        q,
        async (paging) => {
          await caughtUp();
          if (q.invoiceId !== undefined && !UUID.test(q.invoiceId)) throw badRequest('invoiceId must be a UUID');
          return listRefunds(db, { merchantId: caller!.merchantId, status: q.status, invoiceId: q.invoiceId }, paging);
        },
        view,
      ),
  );

  app.get(
    '/api/v1/refunds/:id',
    {
      onRequest: auth.merchant('refunds:read'),
      schema: {
        tags: ['refunds'],
        summary: 'Get a refund',
        security: key,
        params: IdParams,
        response: { 200: data(RefundSchema) },
      },
    },
    async (request) => ({ data: view(await ownRefund(request.params.id, request.caller!.merchantId)) }),
  );

  // Cancel and approve: a command on the caller's refund, answered with the refund as it then stands.
  const decisions = [
    {
      name: 'cancel',
      permission: 'refunds:write',
      summary: 'Cancel a refund before it is sent',
      decide: (row: RefundsTable, actor: Actor) => refunds.cancel(row.id, actor),
    },
    {
      name: 'approve',
      permission: 'refunds:approve',
      summary: 'Approve a refund: it is paid from the deposit or the refund wallet; approving again is harmless',
      decide: (row: RefundsTable, actor: Actor) => refunds.approve(row.merchant_id, row.id, actor),
    },
  ] as const;
  for (const { name, permission, summary, decide } of decisions) {
    app.post(
      `/api/v1/refunds/:id/${name}`,
      {
        onRequest: auth.merchant(permission),
        schema: { tags: ['refunds'], summary, security: key, params: IdParams, response: { 200: data(RefundSchema) } },
      },
      async (request) => {
        const row = await ownRefund(request.params.id, request.caller!.merchantId);
        await settle((await decide(row, keyActor(request))).position);
        return { data: view((await refundById(db, row.id))!) };
      },
    );
  }

  app.get(
    '/api/v1/refund-wallets',
    {
      onRequest: auth.merchant('refunds:read'),
      schema: {
        tags: ['refunds'],
        summary: "The merchant's refund wallet on each enabled chain, and what it holds",
        security: key,
        response: {
          200: data(
            Type.Array(
              Type.Object({
                chain: Type.String(),
                address: Type.String({ description: 'derived by the service for this merchant' }),
                balances: Type.Record(Type.String(), Nullable(Type.String()), {
                  description: 'token → decimal string; null where the chain cannot be asked',
                }),
              }),
            ),
          ),
        },
      },
    },
    async (request) => ({ data: await refunds.refundWallets(request.caller!.merchantId, config.chains) }),
  );

  // The customer's side: no key, the claim token is the credential.
  async function claimed(claimToken: string) {
    const row = await refundByClaimToken(db, claimToken);
    // An expired link is as good as an unknown one.
    if (!row || row.status === 'expired') throw notFound('Refund not found');
    return row;
  }

  app.get(
    '/api/v1/public/refunds/:claimToken',
    {
      onRequest: auth.public,
      schema: {
        tags: ['refunds'],
        summary: 'A refund as its customer sees it through the claim link',
        params: ClaimParams,
        response: { 200: data(PublicRefundSchema) },
      },
    },
    async (request) => {
      const row = await claimed(request.params.claimToken);
      return { data: publicRefundView(row, row.merchant_name) };
    },
  );

  app.post(
    '/api/v1/public/refunds/:claimToken/destination',
    {
      onRequest: auth.public,
      schema: {
        tags: ['refunds'],
        summary: 'The customer gives (or changes, until approved) the address the refund is sent to',
        params: ClaimParams,
        body: DestinationBody,
        response: { 200: data(PublicRefundSchema) },
      },
    },
    async (request) => {
      const row = await claimed(request.params.claimToken);
      await settle((await refunds.giveDestination(row.id, row.chain, request.body.address)).position);
      const after = (await refundByClaimToken(db, request.params.claimToken))!;
      return { data: publicRefundView(after, after.merchant_name) };
    },
  );
}
