// The dashboard's Settlements (list, filters, one settlement, CSV export),
// Settings (the merchant's name, a settlement wallet per chain) and Activity
// (who did what) pages. They read through the API's queries and the finance
// report, and write through the operator's merchant command with the user
// as actor; a settlement wallet is checked as the operator API checks it.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Actor } from '../../commands/handle.ts';
import { catalogue, isChainName } from '../../domain/catalogue.ts';
import type { DashboardPermission } from '../../domain/merchant-user.ts';
import { listActivity } from '../../projections/activity.ts';
import { listSettlements } from '../../projections/settlement-queries.ts';
import type { SqlDatabase } from '../../adapters/sql/database.ts';
import type { ChainName } from '../../domain/catalogue.ts';
import type { MerchantCommands } from '../../commands/merchants.ts';
import type { ReadModels } from '../../projections/schema.ts';
import type { Config } from '../config.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import { HttpError } from '../errors.ts';
import { sendReport } from '../routes/reports.ts';
import { settlementWalletProblem } from '../settlement-wallet.ts';
import { messagePage } from './pages.ts';
import { field, type DashboardKit, type Form } from './kit.ts';
import { daysOf } from './list-routes.ts';
import { needsReauthentication, type DashboardSession } from './sessions.ts';
import {
  activityPage,
  SETTLEMENT_STATUSES,
  settingsPage,
  settlementPage,
  settlementsPage,
  type SettlementListFilter,
} from './settings-pages.ts';

const ROWS_A_PAGE = 50;

type ListQuery = Partial<Record<keyof SettlementListFilter | 'page', string>>;

/** What these pages use of the service. */
export interface SettingsRouteDeps extends Pick<ReadYourWrites, 'caughtUp'> {
  db: ReadModels;
  database: SqlDatabase;
  config: Config;
  merchants: MerchantCommands;
  settlementWalletProblem: (chain: ChainName, address: string) => Promise<string | undefined>;
}

export async function settingsRoutes(scope: FastifyInstance, ctx: SettingsRouteDeps, helpers: DashboardKit) {
  const { db, config, merchants } = ctx;
  const { page, html, redirectWhenSettled, actorOf, reauthenticationProblem } = helpers;
  const chains = config.chains;
  const tokens = [
    ...new Set(catalogue.filter((c) => chains.includes(c.name)).flatMap((c) => c.supportedTokens.map((t) => t.symbol))),
  ];

  // ---- Settlements -----------------------------------------------------------------------

  /** The list's filters from the query, the instants they mean, or what is wrong with them (a 400). */
  function settlementFilterOf(query: ListQuery) {
    const filter: SettlementListFilter = {
      status: query.status ?? '',
      chain: query.chain ?? '',
      token: query.token ?? '',
      from: query.from ?? '',
      to: query.to ?? '',
    };
    const days = daysOf(filter.from, filter.to);
    const pageNumber = Number(query.page ?? '1');
    const problem =
      filter.status && !(SETTLEMENT_STATUSES as readonly string[]).includes(filter.status)
        ? 'Choose a status from the list.'
        : filter.chain && !(chains as readonly string[]).includes(filter.chain)
          ? 'Choose a chain from the list.'
          : filter.token && !tokens.includes(filter.token)
            ? 'Choose a token from the list.'
            : typeof days === 'string'
              ? days
              : !Number.isInteger(pageNumber) || pageNumber < 1 || pageNumber > 1_000_000
                ? 'There is no such page.'
                : undefined;
    // `toEnd` is the whole last day: up to the instant before the next one.
    const { from, to: toEnd } = typeof days === 'string' ? {} : days;
    return { filter, from, toEnd, page: pageNumber, problem };
  }

  scope.get(
    '/dashboard/settlements',
    page<{ Querystring: ListQuery }>('settlements:read', async (request, reply, session) => {
      const { filter, from, toEnd, page, problem } = settlementFilterOf(request.query);
      const answer = (status: number, rows: Awaited<ReturnType<typeof listSettlements>>, error?: string) =>
        html(
          reply,
          status,
          settlementsPage(session, {
            ...rows,
            page,
            pages: Math.ceil(rows.total / ROWS_A_PAGE),
            filter,
            chains,
            tokens,
            error,
          }),
        );
      if (problem) return answer(400, { rows: [], total: 0 }, problem);
      await ctx.caughtUp();
      const rows = await listSettlements(
        db,
        {
          merchantId: session.merchantId,
          status: filter.status || undefined,
          chain: filter.chain || undefined,
          token: filter.token || undefined,
          from,
          to: toEnd && new Date(toEnd.getTime() - 1),
        },
        { limit: ROWS_A_PAGE, page },
      );
      return answer(200, rows);
    }),
  );

  // The list's CSV is the finance report of settlements (docs/reports.md), of the list's filters.
  scope.get(
    '/dashboard/settlements/export.csv',
    page<{ Querystring: ListQuery }>('reports:export', async (request, reply, session) => {
      const { filter, from, toEnd, problem } = settlementFilterOf(request.query);
      if (problem) return html(reply, 400, messagePage('Not exported', problem, session));
      await ctx.caughtUp();
      return sendReport(reply, ctx.database, {
        kind: 'settlements',
        format: 'csv',
        timeZone: 'UTC',
        scope: {
          merchantId: session.merchantId,
          from,
          to: toEnd,
          settlements: {
            status: filter.status || undefined,
            chain: filter.chain || undefined,
            token: filter.token || undefined,
          },
        },
      });
    }),
  );

  scope.get(
    '/dashboard/settlements/:id',
    page<{ Params: { id: string } }>('settlements:read', async (request, reply, session) => {
      await ctx.caughtUp();
      const row = /^[0-9a-f-]{36}$/i.test(request.params.id)
        ? await db.selectFrom('settlements').selectAll().where('id', '=', request.params.id).executeTakeFirst()
        : undefined;
      // Another merchant's settlement is unknown, as in the API.
      if (!row || row.merchant_id !== session.merchantId) {
        return html(reply, 404, messagePage('Settlement not found', 'There is no such settlement.', session));
      }
      return html(reply, 200, settlementPage(session, row));
    }),
  );

  // ---- Settings ----------------------------------------------------------------------------

  const settingsAnswer = async (
    reply: FastifyReply,
    session: DashboardSession,
    status: number,
    options: Pick<Parameters<typeof settingsPage>[1], 'nameError' | 'walletError' | 'entered' | 'saved'> = {},
  ) => {
    const merchant = await merchants.existingMerchant(session.merchantId);
    return html(
      reply,
      status,
      settingsPage(session, {
        name: merchant.name,
        wallets: merchant.settlementWallets,
        chains,
        reauthenticate: needsReauthentication(session, new Date()),
        ...options,
      }),
    );
  };
  const SAVED: Record<string, string> = { name: 'The name is saved.', wallet: 'The settlement wallet is saved.' };

  scope.get(
    '/dashboard/settings',
    page<{ Querystring: { saved?: string } }>(undefined, async (request, reply, session) =>
      settingsAnswer(reply, session, 200, { saved: SAVED[request.query.saved ?? ''] }),
    ),
  );

  scope.post(
    '/dashboard/settings/name',
    page<{ Body: Form }>('merchant:write', async (request, reply, session) => {
      const name = field(request.body, 'name').trim();
      // The operator API's rule (MerchantCreate in api/routes/admin.ts).
      if (name.length < 1 || name.length > 200) {
        return settingsAnswer(reply, session, 400, { nameError: 'The name is 1 to 200 characters.' });
      }
      const { position } = await merchants.update(session.merchantId, { name }, request.id, actorOf(session));
      return redirectWhenSettled(reply, position, '/dashboard/settings?saved=name');
    }),
  );

  // A settlement wallet is where money goes: it asks for the password (and code) again after 5 minutes.
  scope.post(
    '/dashboard/settings/wallets',
    page<{ Body: Form }>('wallets:write', async (request, reply, session) => {
      const chain = field(request.body, 'chain');
      const address = field(request.body, 'address').trim();
      const refuse = (status: number, error: string) =>
        settingsAnswer(reply, session, status, { walletError: error, entered: { chain, address } });
      const reauthentication = await reauthenticationProblem(request);
      if (reauthentication) return refuse(403, reauthentication);
      if (!isChainName(chain) || !chains.includes(chain)) return refuse(400, 'Choose a chain from the list.');
      if (address.length > 128) return refuse(400, 'The address is too long.');
      if (address) {
        let problem: string | undefined;
        try {
          problem = await settlementWalletProblem(ctx, chain, address, request.log);
        } catch (error) {
          if (error instanceof HttpError) return refuse(error.statusCode, error.message);
          throw error;
        }
        if (problem) return refuse(400, problem);
      }
      // This chain's wallet only, decided on the merchant's stream: another chain's change made meanwhile stays.
      const { position } = await merchants.setSettlementWallet(
        session.merchantId,
        chain,
        address || null,
        request.id,
        actorOf(session),
      );
      return redirectWhenSettled(reply, position, '/dashboard/settings?saved=wallet');
    }),
  );

  // ---- Activity ----------------------------------------------------------------------------

  scope.get(
    '/dashboard/activity',
    page<{ Querystring: { page?: string } }>('activity:read', async (request, reply, session) => {
      const page = Number(request.query.page ?? '1');
      if (!Number.isInteger(page) || page < 1 || page > 1_000_000) {
        return html(reply, 400, messagePage('No such page', 'There is no such page.', session));
      }
      await ctx.caughtUp();
      const { rows, total } = await listActivity(db, session.merchantId, { limit: ROWS_A_PAGE, page });
      return html(reply, 200, activityPage(session, { rows, total, page, pages: Math.ceil(total / ROWS_A_PAGE) }));
    }),
  );
}
