// Settlements of the merchant's invoices (interface.md, "Settlement").
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { listSettlements } from '../../projections/settlement-queries.ts';
import { settlementView } from '../../projections/contract/settlement.ts';
import { newestFirst } from '../../projections/paging.ts';
import type { Authentication } from '../auth.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import type { ReadModels } from '../../projections/schema.ts';
import { forbidden, notFound } from '../errors.ts';
import { listPage, timeOf, UUID } from './query.ts';
import { CreatedQuery, IdParams, Nullable, PageQuery, Paged, StatusQuery } from './schemas.ts';

export const SettlementSchema = Type.Object({
  id: Type.String(),
  invoiceId: Type.String(),
  amount: Type.String(),
  grossAmount: Nullable(Type.String()),
  currency: Type.String(),
  chain: Type.String(),
  transactionHash: Nullable(Type.String()),
  merchantWallet: Type.String(),
  status: Type.String(),
  initiatedAt: Nullable(Type.String()),
  completedAt: Nullable(Type.String()),
  failedAt: Nullable(Type.String()),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  failureReason: Nullable(
    Type.String({
      description:
        'Why it is not going on: no_wallet, fees_exceed_amount, payment_reversed, rejected_by_network, node_unavailable, fee_wallet_empty',
    }),
  ),
  attempts: Type.Integer({ description: 'attempts that reached the chain or failed trying' }),
  nextAttemptAt: Nullable(Type.String({ description: 'when a failed settlement is tried again; null when final' })),
});
/** The statuses a settlement list can be narrowed to. */
export const SETTLEMENT_STATUSES = ['pending', 'submitted', 'completed', 'failed'];
const ListQuery = Type.Object({
  status: StatusQuery(SETTLEMENT_STATUSES),
  chain: Type.Optional(Type.String()),
  ...CreatedQuery,
  ...PageQuery,
});
/** What these routes use of the service. */
export interface SettlementRouteDeps extends Pick<ReadYourWrites, 'readInvoice'> {
  auth: Authentication;
  db: ReadModels;
}

export async function settlementRoutes(scope: FastifyInstance, { auth, db, readInvoice }: SettlementRouteDeps) {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const security = [{ apiKey: [] }];

  app.get(
    '/api/v1/invoices/:id/settlement',
    {
      onRequest: auth.merchant('invoices:read'),
      schema: {
        tags: ['settlements'],
        summary: 'The most recent settlement of an invoice',
        security,
        params: IdParams,
        response: { 200: Type.Object({ data: SettlementSchema }) },
      },
    },
    async (request) => {
      const id = request.params.id;
      const invoice = await readInvoice(id, () =>
        db.selectFrom('invoices').select('merchant_id').where('id', '=', id).executeTakeFirst(),
      );
      if (!invoice) throw notFound('Invoice not found');
      if (invoice.merchant_id !== request.caller!.merchantId) throw forbidden('Invoice not accessible');
      const row = await db
        .selectFrom('settlements')
        .selectAll()
        .where('invoice_id', '=', request.params.id)
        .orderBy('created_at', 'desc')
        .limit(1)
        .executeTakeFirst();
      if (!row) throw notFound('No settlement found for this invoice');
      return { data: settlementView(row) };
    },
  );

  app.get(
    '/api/v1/settlements',
    {
      onRequest: auth.merchant('settlements:read'),
      schema: {
        tags: ['settlements'],
        summary: "List the merchant's settlements, newest first",
        security,
        querystring: ListQuery,
        response: { 200: Paged(SettlementSchema) },
      },
    },
    async ({ query: q, caller }) =>
      listPage(
        q,
        (paging) =>
          listSettlements(
            db,
            {
              merchantId: caller!.merchantId,
              status: q.status,
              chain: q.chain?.toLowerCase(),
              from: timeOf(q.from, 'from'),
              to: timeOf(q.to, 'to'),
            },
            paging,
          ),
        settlementView,
      ),
  );

  app.get(
    '/api/v1/settlements/:id',
    {
      onRequest: auth.merchant('settlements:read'),
      schema: {
        tags: ['settlements'],
        summary: 'Get a settlement',
        security,
        params: IdParams,
        response: { 200: Type.Object({ data: SettlementSchema }) },
      },
    },
    async (request) => {
      const row = UUID.test(request.params.id)
        ? await db.selectFrom('settlements').selectAll().where('id', '=', request.params.id).executeTakeFirst()
        : undefined;
      if (!row || row.merchant_id !== request.caller!.merchantId) throw notFound('Settlement not found');
      return { data: settlementView(row) };
    },
  );
}
