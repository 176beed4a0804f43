// The operator API (operations.md §2): merchants and their API keys.
import { Type, type Static } from 'typebox';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { permissions, type ApiKey } from '../../domain/api-key.ts';
import { isChainName, type ChainName } from '../../domain/catalogue.ts';
import { merchantStatuses, merchantTiers, type Merchant, type MerchantChanges } from '../../domain/merchant.ts';
import type { Authentication } from '../auth.ts';
import type { Config } from '../config.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import type { DashboardSessions } from '../dashboard/sessions.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { SqlDatabase } from '../../adapters/sql/database.ts';
import type { Clock } from '../../adapters/clock.ts';
import type { RateDisagreement } from '../../adapters/rates/median.ts';
import type { MerchantCommands } from '../../commands/merchants.ts';
import type { MerchantUserCommands } from '../../commands/merchant-users.ts';
import type { ReadModels } from '../../projections/schema.ts';
import type { Actor } from '../../commands/handle.ts';
import { badRequest, notFound } from '../errors.ts';
import { settlementWalletProblem } from '../settlement-wallet.ts';
import { webhookUrlProblem } from '../webhook-url.ts';
import { data, Nullable, PageQuery, Paged, StatusQuery } from './schemas.ts';
import { failingWebhookTargets } from '../../commands/webhook-delivery.ts';
import { newestFirst } from '../../projections/paging.ts';
import { merchantApiKeys, merchantUsers } from '../../projections/merchants.ts';
import { payoutsOverdue, settlementsNeedingAttention } from '../../projections/settlement-queries.ts';
import { holdsWithoutApproval, unapprovedHoldWhat } from '../../projections/refund-holds.ts';
import { refundsInStatus } from '../../projections/refunds.ts';
import { settlementView } from '../../projections/contract/settlement.ts';
import { resolveSettlementAttention } from '../../commands/settlements.ts';
import { SETTLEMENT_STATUSES, SettlementSchema } from './settlements.ts';
import { listPage } from './query.ts';
import { isUserRole, userRoles } from '../../domain/merchant-user.ts';
import type { MerchantUsersTable } from '../../projections/schema.ts';

/** A string from a fixed list, with one message for any other value. */
const OneOf = <T extends string>(values: readonly T[], errorMessage: string) =>
  Type.Unsafe<T>({ type: 'string', enum: [...values], errorMessage });

const Uuid = Type.String({ format: 'uuid', errorMessage: 'id must be a UUID' });
const Wallets = Type.Record(Type.String(), Type.String({ minLength: 1, maxLength: 128 }));

const MerchantView = Type.Object({
  id: Type.String(),
  name: Type.String(),
  tier: Type.String(),
  status: Type.String(),
  webhookUrl: Nullable(Type.String()),
  settlementWallets: Wallets,
  createdAt: Type.String(),
  updatedAt: Type.String(),
});
const ApiKeyView = Type.Object({
  id: Type.String(),
  name: Nullable(Type.String()),
  keyPrefix: Type.String(),
  permissions: Nullable(Type.Array(Type.String())),
  expiresAt: Nullable(Type.String()),
  revokedAt: Nullable(Type.String()),
  createdAt: Type.String(),
});

const MerchantCreate = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200, errorMessage: 'Name is required (1 to 200 characters)' }),
    tier: Type.Optional(OneOf(merchantTiers, 'Tier must be free or pro')),
    webhookUrl: Type.Optional(Nullable(Type.String({ maxLength: 2048 }))),
    settlementWallets: Type.Optional(Wallets),
  },
  { additionalProperties: false },
);
const MerchantPatch = Type.Object(
  {
    name: Type.Optional(MerchantCreate.properties.name),
    tier: Type.Optional(MerchantCreate.properties.tier),
    status: Type.Optional(OneOf(merchantStatuses, 'Status must be active, suspended or pending_review')),
    webhookUrl: MerchantCreate.properties.webhookUrl,
    settlementWallets: MerchantCreate.properties.settlementWallets,
  },
  { additionalProperties: false },
);
const permissionsMessage = `Permissions must be a list of distinct values from: ${permissions.join(', ')}`;
const KeyCreate = Type.Object(
  {
    name: Type.Optional(Nullable(Type.String({ maxLength: 200 }))),
    permissions: Type.Optional(
      Type.Array(OneOf(permissions, permissionsMessage), { uniqueItems: true, errorMessage: permissionsMessage }),
    ),
    expiresAt: Type.Optional(
      Nullable(Type.String({ format: 'date-time', errorMessage: 'expiresAt must be an ISO 8601 date-time' })),
    ),
  },
  { additionalProperties: false },
);

const merchantView = (m: Merchant): Static<typeof MerchantView> => ({
  id: m.id,
  name: m.name,
  tier: m.tier,
  status: m.status,
  webhookUrl: m.webhookUrl,
  settlementWallets: m.settlementWallets,
  createdAt: m.createdAt,
  updatedAt: m.updatedAt,
});
const apiKeyView = (k: ApiKey): Static<typeof ApiKeyView> => ({
  id: k.id,
  name: k.name,
  keyPrefix: k.keyPrefix,
  permissions: k.permissions,
  expiresAt: k.expiresAt,
  revokedAt: k.revokedAt,
  createdAt: k.createdAt,
});

/** One chain's platform wallets (GET /admin/v1/wallets); null where the chain runs on the sandbox ledger. */
export interface OperatorWallet {
  chain: string;
  feeWallet: string | null;
  feeWalletBalance: string | null;
  treasury: string | null;
  treasuryBalance: string | null;
  nextDerivationIndex: number;
}
const WalletView = Type.Object({
  chain: Type.String(),
  feeWallet: Nullable(Type.String()),
  feeWalletBalance: Nullable(Type.String()),
  treasury: Nullable(Type.String()),
  treasuryBalance: Nullable(Type.String()),
  nextDerivationIndex: Type.Integer(),
});

const security = [{ adminToken: [] }];
/** Every command of this API is the operator's, and its events say so. */
const operator: Actor = { type: 'operator' };

const UserView = Type.Object({
  id: Type.String(),
  email: Type.String(),
  role: Type.String(),
  status: Type.String({ description: 'invited, active or disabled' }),
  totpEnrolled: Type.Boolean(),
  inviteExpiresAt: Nullable(Type.String({ description: 'while the invitation can still be used' })),
  invitedAt: Type.String(),
  acceptedAt: Nullable(Type.String()),
  disabledAt: Nullable(Type.String()),
});
const rolesMessage = `role must be one of ${userRoles.join(', ')}`;
const UserInvite = Type.Object(
  {
    email: Type.String({
      format: 'email',
      maxLength: 254,
      errorMessage: 'email must be an e-mail address',
    }),
    role: Type.Unsafe<(typeof userRoles)[number]>({ type: 'string', enum: [...userRoles], errorMessage: rolesMessage }),
  },
  { additionalProperties: false },
);

/** A user as the operator sees them: never a hash, a secret or a token. */
const userView = (u: MerchantUsersTable): Static<typeof UserView> => ({
  id: u.id,
  email: u.email,
  role: u.role,
  status: u.status,
  totpEnrolled: u.totp_enrolled,
  inviteExpiresAt: u.status === 'invited' ? new Date(u.invite_expires_at).toISOString() : null,
  invitedAt: new Date(u.invited_at).toISOString(),
  acceptedAt: u.accepted_at && new Date(u.accepted_at).toISOString(),
  disabledAt: u.disabled_at && new Date(u.disabled_at).toISOString(),
});

/** How a chain's watcher sees its node (GET /admin/v1/attention lists those not `ok`). */
export interface ChainCondition {
  chain: string;
  state: 'ok' | 'behind' | 'stale' | 'silent';
  since: string | null;
  detail: string | null;
}

const AttentionItem = Type.Object({
  kind: Type.String({
    description:
      'settlement_failed, settlement_no_wallet, settlement_changed_after_payout, platform_fee_uncollected, settlement_unconfirmed, refund_hold_unapproved, refund_awaiting_funds, refund_failed, refund_unconfirmed, webhook_failing, chain_behind or rate_disagreement',
  }),
  merchantId: Nullable(Type.String()),
  /** The settlement id, the refund id, the webhook URL or the chain. */
  subject: Type.String(),
  chain: Nullable(Type.String()),
  reason: Type.String(),
  detail: Nullable(Type.String()),
  since: Nullable(Type.String()),
});

/** What the operator API uses of the service. */
export interface AdminRouteDeps extends Pick<ReadYourWrites, 'settle'> {
  auth: Authentication;
  config: Config;
  clock: Clock;
  store: EventStore;
  database: SqlDatabase;
  db: ReadModels;
  merchants: MerchantCommands;
  users: MerchantUserCommands;
  sessions: DashboardSessions;
  /** GET /admin/v1/wallets: each enabled chain's fee wallet and treasury. */
  wallets: () => Promise<OperatorWallet[]>;
  /** How each chain's watcher sees its node, for GET /admin/v1/attention. */
  chainConditions?: () => ChainCondition[];
  /** Pairs the price sources lately disagreed about, for GET /admin/v1/attention. */
  rateDisagreements?: () => RateDisagreement[];
  /** Why `address` cannot be a settlement wallet on `chain`, or undefined when it can. */
  settlementWalletProblem: (chain: ChainName, address: string) => Promise<string | undefined>;
}

export async function adminRoutes(scope: FastifyInstance, ctx: AdminRouteDeps) {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const { auth, merchants, settle, db, config } = ctx;
  app.addHook('onRequest', async (request) => {
    if (request.url.startsWith('/admin/')) await auth.admin(request);
  });

  app.get(
    '/admin/v1/settlements',
    {
      schema: {
        tags: ['operator'],
        summary: "Every merchant's settlements, newest first; status=failed for those that need a person",
        security,
        querystring: Type.Object({
          status: StatusQuery(SETTLEMENT_STATUSES),
          merchantId: Type.Optional(Uuid),
          ...PageQuery,
        }),
        response: { 200: Paged(SettlementSchema) },
      },
    },
    async ({ query: q }) =>
      listPage(
        q,
        (paging) => {
          let query = db.selectFrom('settlements');
          if (q.status) query = query.where('status', '=', q.status);
          if (q.merchantId) query = query.where('merchant_id', '=', q.merchantId);
          return newestFirst(query, paging);
        },
        settlementView,
      ),
  );

  app.post(
    '/admin/v1/settlements/:id/resolve',
    {
      schema: {
        tags: ['operator'],
        summary: 'Take a settlement changed after its payout off the attention list, saying what was done',
        security,
        params: Type.Object({ id: Uuid }),
        body: Type.Object(
          {
            note: Type.String({
              minLength: 1,
              maxLength: 500,
              errorMessage: 'note is required (1 to 500 characters): say what was done',
            }),
          },
          { additionalProperties: false },
        ),
        response: { 200: data(SettlementSchema) },
      },
    },
    async (request) => {
      const { position } = await resolveSettlementAttention(ctx.store, request.params.id, request.body.note, ctx.clock);
      await settle(position);
      const row = await db.selectFrom('settlements').selectAll().where('id', '=', request.params.id).executeTakeFirst();
      if (!row) throw notFound('Settlement not found');
      return { data: settlementView(row) };
    },
  );

  app.get(
    '/admin/v1/attention',
    {
      schema: {
        tags: ['operator'],
        summary:
          'What needs a person: settlements failed, waiting for a wallet or changed after their payout, or held by a refund whose approval was never recorded, refunds waiting for funds or failed, payouts sent long ago and not confirmed, webhook URLs failing, chains whose node is behind or silent, price sources disagreeing',
        security,
        response: { 200: data(Type.Array(AttentionItem)) },
      },
    },
    async () => {
      const [settlements, unapprovedHolds, unfunded, failedRefunds, webhooks, overdue] = await Promise.all([
        settlementsNeedingAttention(db),
        holdsWithoutApproval(db, ctx.clock.now(), 200),
        refundsInStatus(db, 'awaiting_funds', 200),
        refundsInStatus(db, 'failed', 200),
        failingWebhookTargets(ctx.database.db),
        payoutsOverdue(db, ctx.clock.now(), ctx.config.requiredConfirmations),
      ]);
      const chains = (ctx.chainConditions?.() ?? []).filter((c) => c.state !== 'ok');
      const rates = ctx.rateDisagreements?.() ?? [];
      return {
        data: [
          ...rates.map((r) => ({
            kind: 'rate_disagreement',
            merchantId: null,
            subject: r.pair,
            chain: null,
            reason: r.reason,
            detail: r.detail,
            since: r.since.toISOString(),
          })),
          ...chains.map((c) => ({
            kind: 'chain_behind',
            merchantId: null,
            subject: c.chain,
            chain: c.chain,
            reason: c.state,
            detail: c.detail,
            since: c.since,
          })),
          ...settlements.map(({ settlement: _, ...item }) => item),
          ...unapprovedHolds.map((r) => ({
            kind: 'refund_hold_unapproved',
            merchantId: r.merchant_id,
            subject: r.id,
            chain: r.chain,
            reason: 'approval_not_recorded',
            detail: unapprovedHoldWhat(r),
            since: new Date(r.held_at).toISOString(),
          })),
          ...unfunded.map((r) => ({
            kind: 'refund_awaiting_funds',
            merchantId: r.merchant_id,
            subject: r.id,
            chain: r.chain,
            reason: 'awaiting_funds',
            detail: `the merchant's refund wallet on ${r.chain} holds too little to pay ${r.amount} ${r.token}`,
            since: new Date(r.updated_at).toISOString(),
          })),
          ...[
            ...overdue.settlements.map((row) => ({ kind: 'settlement_unconfirmed', row })),
            ...overdue.refunds.map((row) => ({ kind: 'refund_unconfirmed', row })),
          ].map(({ kind, row }) => ({
            kind,
            merchantId: row.merchant_id,
            subject: row.id,
            chain: row.chain,
            reason: 'not_confirmed',
            detail: row.transaction_hash
              ? `its transaction ${row.transaction_hash} is not confirmed: the chain may not mine it (a fee below what it takes now), or the node may be behind`
              : 'no transaction is sent yet: it waits behind another payout from its payer, or for its node',
            since: new Date(row.updated_at).toISOString(),
          })),
          ...failedRefunds.map((r) => ({
            kind: 'refund_failed',
            merchantId: r.merchant_id,
            subject: r.id,
            chain: r.chain,
            reason: r.failure_code ?? 'unknown',
            detail: r.failure_reason,
            since: new Date(r.updated_at).toISOString(),
          })),
          ...webhooks.map((w) => ({
            kind: 'webhook_failing',
            merchantId: w.merchantId,
            subject: w.url,
            chain: null,
            reason: `${w.failing} deliveries failing`,
            detail: w.lastStatusCode !== null ? `HTTP ${w.lastStatusCode}` : w.lastError,
            since: w.since,
          })),
        ],
      };
    },
  );

  app.get(
    '/admin/v1/wallets',
    { schema: { tags: ['operator'], security, response: { 200: data(Type.Array(WalletView)) } } },
    async () => ({ data: await ctx.wallets() }),
  );

  const checkProfile = async (body: { webhookUrl?: string | null; settlementWallets?: Record<string, string> }) => {
    if (body.webhookUrl) {
      const problem = webhookUrlProblem(body.webhookUrl, {
        production: config.appEnv === 'production',
        allowPrivateTargets: config.webhookAllowPrivateTargets,
      });
      if (problem) throw badRequest(problem);
    }
    for (const chain of Object.keys(body.settlementWallets ?? {})) {
      if (!isChainName(chain)) throw badRequest(`Unknown chain in settlementWallets: ${chain}`);
    }
    for (const [chain, address] of Object.entries(body.settlementWallets ?? {})) {
      const problem = await settlementWalletProblem(ctx, chain as ChainName, address, app.log);
      if (problem) throw badRequest(`settlementWallets.${chain}: ${problem}`);
    }
  };

  app.post(
    '/admin/v1/merchants',
    {
      schema: {
        tags: ['operator'],
        security,
        body: MerchantCreate,
        response: { 201: data(Type.Intersect([MerchantView, Type.Object({ webhookSecret: Type.String() })])) },
      },
    },
    async (request, reply) => {
      await checkProfile(request.body);
      const { value, position } = await merchants.register(
        {
          name: request.body.name,
          tier: request.body.tier ?? 'free',
          webhookUrl: request.body.webhookUrl ?? null,
          settlementWallets: request.body.settlementWallets ?? {},
        },
        request.id,
        operator,
      );
      await settle(position);
      return reply.code(201).send({ data: { ...merchantView(value), webhookSecret: value.webhookSecret } });
    },
  );

  app.get(
    '/admin/v1/merchants/:id',
    {
      schema: {
        tags: ['operator'],
        security,
        params: Type.Object({ id: Uuid }),
        response: { 200: data(MerchantView) },
      },
    },
    async (request) => ({ data: merchantView(await merchants.existingMerchant(request.params.id)) }),
  );

  app.patch(
    '/admin/v1/merchants/:id',
    {
      schema: {
        tags: ['operator'],
        security,
        params: Type.Object({ id: Uuid }),
        body: MerchantPatch,
        response: { 200: data(MerchantView) },
      },
    },
    async (request) => {
      await checkProfile(request.body);
      const { value, position } = await merchants.update(
        request.params.id,
        request.body as MerchantChanges,
        request.id,
        operator,
      );
      await settle(position);
      return { data: merchantView(value) };
    },
  );

  app.post(
    '/admin/v1/merchants/:id/webhook-secret/rotate',
    {
      schema: {
        tags: ['operator'],
        security,
        params: Type.Object({ id: Uuid }),
        response: { 200: data(Type.Object({ webhookSecret: Type.String() })) },
      },
    },
    async (request) => {
      const { value, position } = await merchants.rotateWebhookSecret(request.params.id, request.id, operator);
      await settle(position);
      return { data: { webhookSecret: value } };
    },
  );

  app.post(
    '/admin/v1/merchants/:id/api-keys',
    {
      // Every field is optional, so no body at all is fine too.
      preValidation: async (request) => {
        request.body ??= {};
      },
      schema: {
        tags: ['operator'],
        security,
        params: Type.Object({ id: Uuid }),
        body: KeyCreate,
        response: {
          201: data(
            Type.Object({
              id: Type.String(),
              key: Type.String(),
              name: Nullable(Type.String()),
              permissions: Nullable(Type.Array(Type.String())),
              expiresAt: Nullable(Type.String()),
              createdAt: Type.String(),
            }),
          ),
        },
      },
    },
    async (request, reply) => {
      const body = request.body;
      let expiresAt: string | null = null;
      if (body.expiresAt) {
        const at = new Date(body.expiresAt);
        if (at.getTime() <= Date.now()) throw badRequest('expiresAt must be in the future');
        expiresAt = at.toISOString();
      }
      const { value, position } = await merchants.issueApiKey(
        request.params.id,
        { name: body.name ?? null, permissions: body.permissions ?? null, expiresAt },
        request.id,
        operator,
      );
      await settle(position);
      const { record, key } = value;
      return reply.code(201).send({
        data: {
          id: record.id,
          key,
          name: record.name,
          permissions: record.permissions,
          expiresAt: record.expiresAt,
          createdAt: record.createdAt,
        },
      });
    },
  );

  app.get(
    '/admin/v1/merchants/:id/api-keys',
    {
      schema: {
        tags: ['operator'],
        security,
        params: Type.Object({ id: Uuid }),
        response: { 200: data(Type.Array(ApiKeyView)) },
      },
    },
    async (request) => {
      await merchants.existingMerchant(request.params.id);
      const rows = await merchantApiKeys(db, request.params.id);
      return {
        data: rows.map((r) =>
          apiKeyView({
            id: r.id,
            merchantId: r.merchant_id,
            name: r.name,
            keyHash: r.key_hash,
            keyPrefix: r.key_prefix,
            permissions: r.permissions as ApiKey['permissions'],
            expiresAt: r.expires_at && new Date(r.expires_at).toISOString(),
            revokedAt: r.revoked_at && new Date(r.revoked_at).toISOString(),
            createdAt: new Date(r.created_at).toISOString(),
          }),
        ),
      };
    },
  );

  app.post(
    '/admin/v1/api-keys/:keyId/revoke',
    {
      schema: {
        tags: ['operator'],
        security,
        params: Type.Object({ keyId: Type.String({ format: 'uuid', errorMessage: 'keyId must be a UUID' }) }),
        response: { 200: data(ApiKeyView) },
      },
    },
    async (request) => {
      const { value, position } = await merchants.revokeApiKey(request.params.keyId, request.id, operator);
      // Revocation takes effect at once: answer only when authentication sees it.
      await settle(position);
      return { data: apiKeyView(value) };
    },
  );

  app.post(
    '/admin/v1/merchants/:id/users',
    {
      schema: {
        tags: ['operator'],
        summary: 'Invite a person of the merchant to the dashboard; the link is valid 7 days, once',
        security,
        params: Type.Object({ id: Uuid }),
        body: UserInvite,
        response: {
          201: data(
            Type.Object({
              id: Type.String(),
              email: Type.String(),
              role: Type.String(),
              status: Type.String(),
              inviteUrl: Type.String(),
              inviteExpiresAt: Type.String(),
            }),
          ),
        },
      },
    },
    async (request, reply) => {
      if (!isUserRole(request.body.role)) throw badRequest(rolesMessage);
      const { value, position } = await ctx.users.invite(
        request.params.id,
        { email: request.body.email, role: request.body.role },
        operator,
        request.id,
      );
      await settle(position);
      const { user, token } = value;
      return reply.code(201).send({
        data: {
          id: user.id,
          email: user.email,
          role: user.role,
          status: user.status,
          inviteUrl: `${config.publicBaseUrl}/dashboard/invite/${token}`,
          inviteExpiresAt: user.inviteExpiresAt,
        },
      });
    },
  );

  app.get(
    '/admin/v1/merchants/:id/users',
    {
      schema: {
        tags: ['operator'],
        security,
        params: Type.Object({ id: Uuid }),
        response: { 200: data(Type.Array(UserView)) },
      },
    },
    async (request) => {
      await merchants.existingMerchant(request.params.id);
      return { data: (await merchantUsers(db, request.params.id)).map(userView) };
    },
  );

  app.post(
    '/admin/v1/users/:userId/disable',
    {
      schema: {
        tags: ['operator'],
        summary: 'Disable a dashboard user; every session of theirs ends at once',
        security,
        params: Type.Object({ userId: Type.String({ format: 'uuid', errorMessage: 'userId must be a UUID' }) }),
        response: { 200: data(UserView) },
      },
    },
    async (request) => {
      const { position } = await ctx.users.disable(request.params.userId, operator, request.id);
      // Ended here, and refused by every instance once the read model shows the user disabled.
      await ctx.sessions.endAllOf(request.params.userId);
      await settle(position);
      const row = await db
        .selectFrom('merchant_users')
        .selectAll()
        .where('id', '=', request.params.userId)
        .executeTakeFirst();
      if (!row) throw notFound('User not found');
      return { data: userView(row) };
    },
  );
}
