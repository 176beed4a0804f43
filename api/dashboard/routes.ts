// The merchant dashboard (dashboard.md): server-side pages under /dashboard
// for the people of a merchant. Sign-in with a password and, for the roles
// that move money, a TOTP code; a session cookie; a CSRF token on every form
// that changes something; each page and action checked against the role's
// permissions here, on the server. It reads through the API's queries and
// writes through the API's commands, with the user as the events' actor.
import { randomBytes } from 'node:crypto';
import cookie from '@fastify/cookie';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { qrCodeDataUri } from '../../adapters/keys/qr.ts';
import { permissions as apiKeyPermissions, type Permission } from '../../domain/api-key.ts';
import { DomainError } from '../../domain/decider.ts';
import {
  isUserRole,
  normaliseEmail,
  roleAllows,
  roleNeedsTotp,
  type DashboardPermission,
} from '../../domain/merchant-user.ts';
import { hashInviteToken, userIdOf } from '../../commands/merchant-users.ts';
import type { Actor } from '../../commands/handle.ts';
import { invoiceAddresses, invoiceRow } from '../../projections/invoice-queries.ts';
import { invoiceCounts, invoicesNeedingAttention } from '../../projections/overview.ts';
import { listRefunds, refundById, refundsWaiting } from '../../projections/refunds.ts';
import { refundView } from '../../projections/contract/refund.ts';
import { paymentUrlOf } from '../../projections/contract/invoice.ts';
import { invoiceDecider, invoiceStreamName, refundableOf } from '../../domain/invoice.ts';
import { formatUnits } from '../../domain/money.ts';
import { loadState } from '../../commands/handle.ts';
import type { NewRefund } from '../../commands/refunds.ts';
import { merchantApiKeys, merchantUsers } from '../../projections/merchants.ts';
import { settlementsNeedingAttention } from '../../projections/settlement-queries.ts';
import { holdsWithoutApproval, unapprovedHoldWhat } from '../../projections/refund-holds.ts';
import type { Authentication } from '../auth.ts';
import type { DashboardSessions } from './sessions.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import type { MerchantUserCommands } from '../../commands/merchant-users.ts';
import type { InvoiceCommands } from '../../commands/invoices.ts';
import type { RefundCommands } from '../../commands/refunds.ts';
import { markup, pageHeaders } from '../routes/checkout.ts';
import {
  hashPassword,
  newTotpSecret,
  passwordMatches,
  passwordProblem,
  spendPasswordCheck,
  totpMatches,
  totpStep,
  totpUri,
} from './credentials.ts';
import { developerRoutes, invoiceSections, type DeveloperRouteDeps } from './developer-routes.ts';
import {
  apiKeysPage,
  DASHBOARD_CSS,
  invitePage,
  invoicePage,
  loginPage,
  messagePage,
  overviewPage,
  teamPage,
} from './pages.ts';
import { listRoutes, overviewFiguresOf, type ListRouteDeps } from './list-routes.ts';
import { invoiceRefundsSection, refundPage, type RefundableLine } from './refund-pages.ts';
import { settingsRoutes, type SettingsRouteDeps } from './settings-routes.ts';
import type { KeyUsage } from '../key-usage.ts';
import { failingWebhookTargets } from '../../commands/webhook-delivery.ts';
import { field, fields, parseForm, type DashboardKit, type Form } from './kit.ts';
import {
  csrfTokenMatches,
  sameSecret,
  lockedOut,
  needsReauthentication,
  SESSION_ABSOLUTE_MS,
  type DashboardSession,
} from './sessions.ts';

export const SESSION_COOKIE = 'dashboard_session';
/** The sign-in form's own CSRF token, before there is a session to tie one to. */
export const LOGIN_COOKIE = 'dashboard_login';
/** One message for every failed sign-in: it never tells whether the address has a user. */
export const SIGN_IN_FAILED = 'The e-mail address, password or code is not right.';
export const SIGN_IN_LOCKED = 'Too many failed sign-ins for this address. Try again in 15 minutes.';

declare module 'fastify' {
  interface FastifyRequest {
    dashboard?: DashboardSession;
  }
}

/** The refund form as the API's body: `asset` is `chain:token`; an amount or a kind; or what is wrong with it. */
export function refundInput(form: Form | undefined): NewRefund | string {
  const [chain, token] = field(form, 'asset').split(':');
  const kind = field(form, 'kind') || 'amount';
  const amount = field(form, 'amount').trim();
  const destination = field(form, 'destination').trim();
  const reason = field(form, 'reason').trim();
  if (kind !== 'amount' && kind !== 'full' && kind !== 'excess') return 'Choose how much to refund.';
  if (kind === 'amount' && !/^\d+(\.\d+)?$/.test(amount)) return 'Enter the amount to refund, in the token.';
  if (destination.length > 128) return 'The address is too long.';
  if (reason.length > 500) return 'The reason is at most 500 characters.';
  return {
    ...(chain && { chain }),
    ...(token && { token }),
    ...(kind === 'amount' ? { amount } : { kind }),
    ...(destination && { destination }),
    ...(reason && { reason }),
  };
}

/** What these routes use of the service. */
export interface DashboardRouteDeps
  extends DeveloperRouteDeps, SettingsRouteDeps, ListRouteDeps, Pick<ReadYourWrites, 'readInvoice'> {
  auth: Authentication;
  users: MerchantUserCommands;
  sessions: DashboardSessions;
  refunds: RefundCommands;
  invoices: InvoiceCommands;
  keyUsage: KeyUsage;
}

export async function dashboardRoutes(scope: FastifyInstance, ctx: DashboardRouteDeps) {
  const { auth, db, users, sessions, merchants, settle, config } = ctx;
  const secureCookie = config.publicBaseUrl.startsWith('https:');
  await scope.register(cookie);
  scope.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) =>
    done(null, parseForm(body as string)),
  );

  const html = (reply: FastifyReply, status: number, body: string) => pageHeaders(reply).code(status).send(body);
  const redirect = (reply: FastifyReply, to: string) => reply.code(303).header('Location', to).send();
  const redirectWhenSettled = async (reply: FastifyReply, position: string | undefined, to: string) => {
    await settle(position);
    return redirect(reply, to);
  };

  /**
   * Who is signed in, with the permission a route needs: no session sends a
   * page to sign-in (401 for a form); a role without the permission gets 403,
   * whatever the page showed; a form without the session's CSRF token, 403.
   */
  const signedIn = (permission?: DashboardPermission) =>
    async function requireSession(request: FastifyRequest, reply: FastifyReply) {
      const session = await sessions.find(request.cookies[SESSION_COOKIE]);
      if (!session) {
        if (request.method === 'GET') return redirect(reply, '/dashboard/login');
        return html(reply, 401, messagePage('Signed out', 'Your session has ended. Please sign in again.'));
      }
      request.dashboard = session;
      if (request.method !== 'GET' && !csrfTokenMatches(session, (request.body as Form | undefined)?._csrf)) {
        return html(
          reply,
          403,
          messagePage('Refused', 'This form has expired. Go back, reload and try again.', session),
        );
      }
      if (permission && !roleAllows(session.role, permission)) {
        return html(
          reply,
          403,
          messagePage('Not allowed', `Your role (${session.role}) may not do this (${permission}).`, session),
        );
      }
    };
  /** The route of a page: signedIn before it, hidden from the OpenAPI document, its handler given the session. */
  const page: DashboardKit['page'] = (permission, handler) => ({
    preHandler: signedIn(permission),
    schema: { hide: true },
    handler: (request, reply) => handler(request, reply, request.dashboard!),
  });
  const actorOf = (session: DashboardSession): Actor => ({
    type: 'user',
    userId: session.userId,
    email: session.email,
  });

  scope.get('/dashboard/assets/dashboard.css', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('text/css; charset=utf-8').header('Cache-Control', 'public, max-age=300').send(DASHBOARD_CSS),
  );

  // ---- Sign-in ---------------------------------------------------------------------

  /**
   * The sign-in form, with a token that is also in a cookie of its own
   * (double submit): another site cannot read either, so it cannot sign a
   * browser in to an account of its choosing (login CSRF).
   */
  const loginForm = (
    request: FastifyRequest,
    reply: FastifyReply,
    status: number,
    options: Omit<Parameters<typeof loginPage>[0], 'csrfToken'>,
  ) => {
    const kept = request.cookies[LOGIN_COOKIE];
    const token = kept && /^[A-Za-z0-9_-]{43}$/.test(kept) ? kept : randomBytes(32).toString('base64url');
    reply.setCookie(LOGIN_COOKIE, token, {
      path: '/dashboard/login',
      httpOnly: true,
      secure: secureCookie,
      sameSite: 'strict',
    });
    return html(reply, status, loginPage({ ...options, csrfToken: token }));
  };

  scope.get<{ Querystring: { welcome?: string } }>(
    '/dashboard/login',
    { onRequest: auth.public, schema: { hide: true } },
    async (request, reply) =>
      loginForm(request, reply, 200, {
        notice: request.query.welcome ? 'Your account is ready. Sign in to continue.' : undefined,
      }),
  );

  /** The password, and the code where enrolled, of the user of `email`; false for anyone else, in the same time. */
  async function credentialsMatch(email: string, password: string, code: string) {
    const user = await users.load(userIdOf(email));
    if (!user || user.status !== 'active' || !user.passwordHash) {
      await spendPasswordCheck(password);
      return undefined;
    }
    const passwordRight = await passwordMatches(password, user.passwordHash);
    return passwordRight && (await secondFactorRight(user, code)) ? user : undefined;
  }

  /** No second factor enrolled, or a code of it not given before. */
  async function secondFactorRight(user: { id: string; totpSecret: string | null }, code: string) {
    if (user.totpSecret === null) return true;
    const step = totpStep(user.totpSecret, code);
    return step !== undefined && (await sessions.useTotpStep(user.id, step));
  }

  scope.post<{ Body: Form }>(
    '/dashboard/login',
    { onRequest: auth.public, schema: { hide: true } },
    async (request, reply) => {
      const email = normaliseEmail(field(request.body, 'email')).slice(0, 254);
      const password = field(request.body, 'password').slice(0, 200);
      const code = field(request.body, 'code').trim();
      const cookieToken = request.cookies[LOGIN_COOKIE];
      if (!cookieToken || !sameSecret(cookieToken, field(request.body, '_csrf'))) {
        return loginForm(request, reply, 403, { error: 'This form has expired. Please try again.', email });
      }
      if (!email || !password) {
        return loginForm(request, reply, 400, { error: 'Enter your e-mail address and password.', email });
      }
      if (lockedOut(await sessions.recentFailures(email))) {
        return loginForm(request, reply, 429, { error: SIGN_IN_LOCKED, email });
      }
      const user = await credentialsMatch(email, password, code);
      if (!user) {
        await sessions.recordFailure(email);
        request.log.info({ event: 'dashboard_sign_in_failed' }, 'dashboard sign-in failed');
        return loginForm(request, reply, 401, { error: SIGN_IN_FAILED, email });
      }
      const sessionId = await sessions.start(user.id);
      reply.clearCookie(LOGIN_COOKIE, { path: '/dashboard/login' });
      reply.setCookie(SESSION_COOKIE, sessionId, {
        path: '/dashboard',
        httpOnly: true,
        secure: secureCookie,
        sameSite: 'lax',
        maxAge: SESSION_ABSOLUTE_MS / 1000,
      });
      return redirect(reply, '/dashboard');
    },
  );

  scope.post(
    '/dashboard/logout',
    page(undefined, async (request, reply) => {
      await sessions.end(request.cookies[SESSION_COOKIE]!);
      reply.clearCookie(SESSION_COOKIE, { path: '/dashboard' });
      return redirect(reply, '/dashboard/login');
    }),
  );

  // ---- Invitations -----------------------------------------------------------------

  /** The invited user of a link, while it can still be used. */
  async function invitation(token: string) {
    if (token.length > 100) return undefined;
    const row = await db
      .selectFrom('merchant_users')
      .selectAll()
      .where('invite_token_hash', '=', hashInviteToken(token))
      .where('status', '=', 'invited')
      .executeTakeFirst();
    return row && new Date(row.invite_expires_at).getTime() > Date.now() ? row : undefined;
  }
  const invitationGone = (reply: FastifyReply) =>
    html(reply, 404, messagePage('Invitation not valid', 'This invitation is not valid any more; ask for a new one.'));
  /** The invitation's form, offering `secret` to enrol where the role needs an authenticator. */
  const inviteForm = (row: { email: string; role: string }, secret: string, error?: string) =>
    invitePage({
      email: row.email,
      role: row.role,
      totp:
        isUserRole(row.role) && roleNeedsTotp(row.role)
          ? { secret, qrCode: qrCodeDataUri(totpUri(secret, row.email)) }
          : null,
      error,
    });

  scope.get<{ Params: { token: string } }>(
    '/dashboard/invite/:token',
    { onRequest: auth.public, schema: { hide: true } },
    async (request, reply) => {
      const row = await invitation(request.params.token);
      if (!row) return invitationGone(reply);
      return html(reply, 200, inviteForm(row, newTotpSecret()));
    },
  );

  scope.post<{ Params: { token: string }; Body: Form }>(
    '/dashboard/invite/:token',
    { onRequest: auth.public, schema: { hide: true } },
    async (request, reply) => {
      // The link's token, unguessable and known only to the invitee, stands for a CSRF token here.
      const row = await invitation(request.params.token);
      if (!row) return invitationGone(reply);
      const needsTotp = isUserRole(row.role) && roleNeedsTotp(row.role);
      const password = field(request.body, 'password');
      const offered = field(request.body, 'totpSecret');
      const secret = /^[A-Z2-7]{32}$/.test(offered) ? offered : newTotpSecret();
      const again = (error: string) => html(reply, 400, inviteForm(row, secret, error));
      const problem = passwordProblem(password, row.email);
      if (problem) return again(problem);
      if (needsTotp && (secret !== offered || !totpMatches(secret, field(request.body, 'code').trim()))) {
        return again('The authenticator code is not right. Check the app shows this key, and type its current code.');
      }
      try {
        const { position } = await users.accept(
          row.id,
          {
            token: request.params.token,
            passwordHash: await hashPassword(password),
            totpSecret: needsTotp ? secret : null,
          },
          request.id,
        );
        await settle(position);
      } catch (error) {
        if (error instanceof DomainError && error.kind === 'not_found') return invitationGone(reply);
        throw error;
      }
      return redirect(reply, '/dashboard/login?welcome=1');
    },
  );

  // ---- Pages -------------------------------------------------------------------------

  const kit: DashboardKit = { page, html, redirect, redirectWhenSettled, actorOf, reauthenticationProblem };
  await listRoutes(scope, ctx, kit);

  scope.get(
    '/dashboard',
    page(undefined, async (_request, reply, session) => {
      const mayReadRefunds = roleAllows(session.role, 'refunds:read');
      const [counts, issues, settlementIssues, unapprovedHolds, waitingRefunds, failingWebhooks, figures] =
        await Promise.all([
          invoiceCounts(db, session.merchantId),
          invoicesNeedingAttention(db, session.merchantId, 50),
          settlementsNeedingAttention(db, 50, session.merchantId),
          mayReadRefunds ? holdsWithoutApproval(db, ctx.clock.now(), 50, session.merchantId) : [],
          mayReadRefunds ? refundsWaiting(db, session.merchantId, 50) : [],
          // The operator's rule for a failing URL (3 attempts in a series), for those who may change the URL.
          roleAllows(session.role, 'webhooks:write') ? failingWebhookTargets(db, 3, session.merchantId) : [],
          overviewFiguresOf(ctx, session),
        ]);
      return html(
        reply,
        200,
        overviewPage(session, {
          figures,
          counts,
          attention: issues.map((i) => ({
            invoiceId: i.id,
            what: `Invoice ${i.id.slice(0, 8)}: ${[i.payment_issue_type, i.paid_late && 'paid late'].filter(Boolean).join(', ')}`,
            since: i.updated_at,
          })),
          // The platform's own fee left on a deposit is the operator's to move, not the merchant's.
          settlementsAttention: settlementIssues
            .filter((s) => s.kind !== 'platform_fee_uncollected')
            .map((s) => ({
              id: s.subject,
              invoiceId: s.settlement.invoiceId,
              what: `Settlement: ${s.reason}`,
            })),
          refundsAttention: [
            // Said once, as what it is: a refund holding its settlement is also one waiting for approval.
            ...unapprovedHolds.map((r) => ({ id: r.id, what: unapprovedHoldWhat(r) })),
            ...waitingRefunds
              .filter((r) => !unapprovedHolds.some((h) => h.id === r.id))
              .map((r) => ({
                id: r.id,
                what: `Refund ${r.amount} ${r.token} on ${r.chain}: ${r.status === 'awaiting_approval' ? 'waiting for approval' : 'waiting for funds in the refund wallet'}`,
              })),
          ],
          webhooksAttention: failingWebhooks.map((w) => ({
            what: `Webhooks to ${w.url} failing: ${w.failing} ${w.failing === 1 ? 'delivery' : 'deliveries'}${w.lastStatusCode ? `, last answer ${w.lastStatusCode}` : ''}`,
            since: w.since,
          })),
        }),
      );
    }),
  );

  /** The session merchant's invoice row, or undefined for another's or none. */
  async function ownInvoice(session: DashboardSession, id: string) {
    if (!/^[0-9a-f-]{36}$/i.test(id)) return undefined;
    const row = await ctx.readInvoice(id, () => invoiceRow(db, id));
    // Another merchant's invoice is as unknown as one that does not exist.
    return row && row.merchant_id === session.merchantId ? row : undefined;
  }
  const invoiceNotFound = (reply: FastifyReply, session: DashboardSession) =>
    html(reply, 404, messagePage('Invoice not found', 'There is no such invoice.', session));

  /** What the invoice can still give back, per chain and token: the API's refundable, from the invoice's stream. */
  async function refundableLines(invoiceId: string): Promise<RefundableLine[]> {
    const invoice = await loadState(ctx.store, invoiceDecider, invoiceStreamName(invoiceId));
    return (invoice ? refundableOf(invoice) : []).map((a) => ({
      chain: a.chain,
      token: a.token,
      refundable: formatUnits(a.refundable, a.tokenDecimals, a.tokenDecimals),
      excess: formatUnits(a.excess, a.tokenDecimals, a.tokenDecimals),
    }));
  }

  /** The invoice page; its refunds for the roles that read them. */
  async function invoiceAnswer(
    reply: FastifyReply,
    session: DashboardSession,
    row: NonNullable<Awaited<ReturnType<typeof ownInvoice>>>,
    status = 200,
    refundError?: string,
  ) {
    const readsRefunds = roleAllows(session.role, 'refunds:read');
    const [addresses, payments, refunds, refundable, history] = await Promise.all([
      invoiceAddresses(db, row.id),
      db.selectFrom('payments').selectAll().where('invoice_id', '=', row.id).orderBy('detected_at').execute(),
      readsRefunds
        ? listRefunds(db, { merchantId: session.merchantId, invoiceId: row.id }, { limit: 100, page: 1 })
        : undefined,
      roleAllows(session.role, 'refunds:write') ? refundableLines(row.id) : [],
      invoiceSections(ctx, session, row.id),
    ]);
    const section =
      refunds &&
      invoiceRefundsSection(
        session,
        row.id,
        refunds.rows.map((r) => refundView(r, config.publicBaseUrl)),
        refundable,
        refundError,
      );
    return html(
      reply,
      status,
      invoicePage(
        session,
        row,
        addresses,
        payments,
        paymentUrlOf(config.publicBaseUrl, row.id),
        markup`${section}${history}`,
      ),
    );
  }

  scope.get(
    '/dashboard/invoices/:id',
    page<{ Params: { id: string } }>('invoices:read', async (request, reply, session) => {
      const row = await ownInvoice(session, request.params.id);
      if (!row) return invoiceNotFound(reply, session);
      // Like the API's list: a refund made before this request is shown.
      if (roleAllows(session.role, 'refunds:read')) await ctx.caughtUp();
      return invoiceAnswer(reply, session, row);
    }),
  );

  scope.post(
    '/dashboard/invoices/:id/refunds',
    page<{ Params: { id: string }; Body: Form }>('refunds:write', async (request, reply, session) => {
      const row = await ownInvoice(session, request.params.id);
      if (!row) return invoiceNotFound(reply, session);
      const input = refundInput(request.body);
      if (typeof input === 'string') return invoiceAnswer(reply, session, row, 400, input);
      try {
        // The API's own command: the limit, the asset and the destination are checked there.
        const { refundId, position } = await ctx.refunds.create(
          session.merchantId,
          row.id,
          input,
          undefined,
          actorOf(session),
        );
        return redirectWhenSettled(reply, position, `/dashboard/refunds/${refundId}`);
      } catch (error) {
        if (!(error instanceof DomainError)) throw error;
        if (error.kind === 'not_found') return invoiceNotFound(reply, session);
        return invoiceAnswer(reply, session, row, error.kind === 'bad_request' ? 400 : 409, error.message);
      }
    }),
  );

  scope.post(
    '/dashboard/invoices/:id/cancel',
    page<{ Params: { id: string }; Body: Form }>('invoices:write', async (request, reply, session) => {
      const id = request.params.id;
      const notFound = () => html(reply, 404, messagePage('Invoice not found', 'There is no such invoice.', session));
      if (!/^[0-9a-f-]{36}$/i.test(id)) return notFound();
      try {
        // The API's own command, which refuses another merchant's invoice as unknown.
        const { position } = await ctx.invoices.cancel(id, session.merchantId, request.id, actorOf(session));
        await settle(position);
      } catch (error) {
        if (!(error instanceof DomainError)) throw error;
        if (error.kind === 'not_found') return notFound();
        return html(reply, 409, messagePage('Not cancelled', error.message, session));
      }
      return redirect(reply, `/dashboard/invoices/${id}`);
    }),
  );

  // ---- Refunds ---------------------------------------------------------------------------

  /** The session merchant's refund, or undefined (another merchant's is unknown, as in the API). */
  async function ownRefund(session: DashboardSession, id: string) {
    const row = /^[0-9a-f-]{36}$/i.test(id) ? await refundById(db, id) : undefined;
    return row && row.merchant_id === session.merchantId ? row : undefined;
  }
  const refundNotFound = (reply: FastifyReply, session: DashboardSession) =>
    html(reply, 404, messagePage('Refund not found', 'There is no such refund.', session));
  const refundAnswer = async (
    reply: FastifyReply,
    session: DashboardSession,
    id: string,
    status = 200,
    error?: string,
  ) =>
    html(
      reply,
      status,
      refundPage(session, refundView((await refundById(db, id))!, config.publicBaseUrl), {
        reauthenticate: needsReauthentication(session, new Date()),
        error,
      }),
    );

  scope.get(
    '/dashboard/refunds/:id',
    page<{ Params: { id: string } }>('refunds:read', async (request, reply, session) => {
      await ctx.caughtUp();
      const row = await ownRefund(session, request.params.id);
      if (!row) return refundNotFound(reply, session);
      return refundAnswer(reply, session, row.id);
    }),
  );

  /** Runs the API's command on the session merchant's refund, answering with its page (or why not). */
  const refundAction = (
    permission: DashboardPermission,
    run: (session: DashboardSession, refundId: string) => Promise<{ position?: string }>,
    options: { sensitive: boolean },
  ) =>
    page<{ Params: { id: string }; Body: Form }>(permission, async (request, reply, session) => {
      const row = await ownRefund(session, request.params.id);
      if (!row) return refundNotFound(reply, session);
      if (options.sensitive) {
        const reauthentication = await reauthenticationProblem(request);
        if (reauthentication) return refundAnswer(reply, session, row.id, 403, reauthentication);
      }
      try {
        await settle((await run(session, row.id)).position);
      } catch (error) {
        if (!(error instanceof DomainError)) throw error;
        return refundAnswer(reply, session, row.id, error.kind === 'not_found' ? 404 : 409, error.message);
      }
      return redirect(reply, `/dashboard/refunds/${row.id}`);
    });

  // Approving pays money out: it asks for the password again after 5 minutes, as creating a key does.
  scope.post(
    '/dashboard/refunds/:id/approve',
    refundAction('refunds:approve', (session, id) => ctx.refunds.approve(session.merchantId, id, actorOf(session)), {
      sensitive: true,
    }),
  );
  scope.post(
    '/dashboard/refunds/:id/cancel',
    refundAction('refunds:write', (session, id) => ctx.refunds.cancel(id, actorOf(session)), { sensitive: false }),
  );

  // ---- Developers: API keys ------------------------------------------------------------

  const keysOf = async (merchantId: string) => {
    const keys = await merchantApiKeys(db, merchantId);
    const lastUsed = await ctx.keyUsage.lastUsed(keys.map((k) => k.id));
    return keys.map((k) => ({ ...k, lastUsedAt: lastUsed.get(k.id) }));
  };

  scope.get(
    '/dashboard/developers/api-keys',
    page('api_keys:write', async (request, reply, session) => {
      return html(
        reply,
        200,
        apiKeysPage(session, await keysOf(session.merchantId), {
          reauthenticate: needsReauthentication(session, new Date()),
        }),
      );
    }),
  );

  /**
   * A sensitive action's check that the person is still the one who signed
   * in: their password, and code where enrolled, when the last time they gave
   * it is more than 5 minutes ago. Undefined when fine, else what is wrong.
   */
  async function reauthenticationProblem(request: FastifyRequest) {
    const session = request.dashboard!;
    if (!needsReauthentication(session, new Date())) return undefined;
    const form = request.body as Form | undefined;
    const user = await users.load(session.userId);
    const right =
      user?.passwordHash &&
      (await passwordMatches(field(form, 'password'), user.passwordHash)) &&
      (await secondFactorRight(user, field(form, 'code').trim()));
    if (!right) return 'Your password or code is not right.';
    await sessions.reauthenticated(request.cookies[SESSION_COOKIE]!);
    return undefined;
  }

  scope.post(
    '/dashboard/developers/api-keys',
    page<{ Body: Form }>('api_keys:write', async (request, reply, session) => {
      const refuse = async (status: number, error: string) =>
        html(
          reply,
          status,
          apiKeysPage(session, await keysOf(session.merchantId), {
            reauthenticate: needsReauthentication(session, new Date()),
            error,
          }),
        );
      const reauthentication = await reauthenticationProblem(request);
      if (reauthentication) return refuse(403, reauthentication);
      const chosen = fields(request.body, 'permissions');
      if (chosen.length === 0) return refuse(400, 'Choose at least one permission.');
      const unknown = chosen.find((p) => !(apiKeyPermissions as readonly string[]).includes(p));
      if (unknown) return refuse(400, `Unknown permission: ${unknown}`);
      const name = field(request.body, 'name').trim().slice(0, 200) || null;
      let expiresAt: string | null = null;
      const expiresOn = field(request.body, 'expiresOn');
      if (expiresOn) {
        const at = /^\d{4}-\d{2}-\d{2}$/.test(expiresOn) ? new Date(`${expiresOn}T00:00:00Z`) : new Date(NaN);
        if (Number.isNaN(at.getTime())) return refuse(400, 'The expiry must be a date.');
        if (at.getTime() <= Date.now()) return refuse(400, 'The expiry must be in the future.');
        expiresAt = at.toISOString();
      }
      const { value, position } = await merchants.issueApiKey(
        session.merchantId,
        { name, permissions: [...new Set(chosen)] as Permission[], expiresAt },
        request.id,
        actorOf(session),
      );
      await settle(position);
      return html(
        reply,
        201,
        apiKeysPage(session, await keysOf(session.merchantId), {
          reauthenticate: false,
          created: { key: value.key, name },
        }),
      );
    }),
  );

  scope.post(
    '/dashboard/developers/api-keys/:keyId/revoke',
    page<{ Params: { keyId: string }; Body: Form }>('api_keys:write', async (request, reply, session) => {
      const key = /^[0-9a-f-]{36}$/i.test(request.params.keyId)
        ? await db
            .selectFrom('api_keys')
            .select('id')
            .where('id', '=', request.params.keyId)
            .where('merchant_id', '=', session.merchantId)
            .executeTakeFirst()
        : undefined;
      if (!key) return html(reply, 404, messagePage('Key not found', 'There is no such API key.', session));
      const { position } = await merchants.revokeApiKey(key.id, request.id, actorOf(session));
      return redirectWhenSettled(reply, position, '/dashboard/developers/api-keys');
    }),
  );

  // ---- Team ----------------------------------------------------------------------------

  const teamAnswer = async (
    reply: FastifyReply,
    session: DashboardSession,
    status: number,
    options: { invited?: { email: string; url: string }; error?: string } = {},
  ) =>
    html(
      reply,
      status,
      teamPage(session, await merchantUsers(db, session.merchantId), {
        reauthenticate: needsReauthentication(session, new Date()) && !options.invited,
        ...options,
      }),
    );

  scope.get(
    '/dashboard/team',
    page('users:write', async (_request, reply, session) => teamAnswer(reply, session, 200)),
  );

  /** Only an owner makes, changes or removes an owner (dashboard.md: admin is "everything but removing an owner"). */
  const touchesOwner = (session: DashboardSession, ...roles: string[]) =>
    roles.includes('owner') && !roleAllows(session.role, 'owners:write');

  scope.post(
    '/dashboard/team/invite',
    page<{ Body: Form }>('users:write', async (request, reply, session) => {
      const reauthentication = await reauthenticationProblem(request);
      if (reauthentication) return teamAnswer(reply, session, 403, { error: reauthentication });
      const email = normaliseEmail(field(request.body, 'email'));
      const role = field(request.body, 'role');
      if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email) || email.length > 254) {
        return teamAnswer(reply, session, 400, { error: 'Enter an e-mail address.' });
      }
      if (!isUserRole(role)) return teamAnswer(reply, session, 400, { error: 'Choose a role.' });
      if (touchesOwner(session, role))
        return teamAnswer(reply, session, 403, { error: 'Only an owner invites an owner.' });
      try {
        const { value, position } = await users.invite(
          session.merchantId,
          { email, role },
          actorOf(session),
          request.id,
        );
        await settle(position);
        const url = `${config.publicBaseUrl}/dashboard/invite/${value.token}`;
        return teamAnswer(reply, session, 201, { invited: { email, url } });
      } catch (error) {
        if (error instanceof DomainError && error.kind === 'conflict') {
          return teamAnswer(reply, session, 409, { error: error.message });
        }
        throw error;
      }
    }),
  );

  /** A user of the session's merchant that the session may manage, or the answer why not. */
  async function manageable(request: FastifyRequest<{ Params: { userId: string } }>, reply: FastifyReply) {
    const session = request.dashboard!;
    const target = /^[0-9a-f-]{36}$/i.test(request.params.userId)
      ? await db
          .selectFrom('merchant_users')
          .selectAll()
          .where('id', '=', request.params.userId)
          .where('merchant_id', '=', session.merchantId)
          .executeTakeFirst()
      : undefined;
    if (!target) {
      await html(reply, 404, messagePage('User not found', 'There is no such user.', session));
      return undefined;
    }
    if (target.id === session.userId) {
      await teamAnswer(reply, session, 403, { error: 'You cannot change your own role or disable yourself.' });
      return undefined;
    }
    if (touchesOwner(session, target.role)) {
      await teamAnswer(reply, session, 403, { error: 'Only an owner changes or removes an owner.' });
      return undefined;
    }
    return target;
  }

  scope.post(
    '/dashboard/team/:userId/role',
    page<{ Params: { userId: string }; Body: Form }>('users:write', async (request, reply, session) => {
      const target = await manageable(request, reply);
      if (!target) return reply;
      const role = field(request.body, 'role');
      if (!isUserRole(role)) return teamAnswer(reply, session, 400, { error: 'Choose a role.' });
      if (touchesOwner(session, role))
        return teamAnswer(reply, session, 403, { error: 'Only an owner makes an owner.' });
      try {
        const { position } = await users.changeRole(target.id, role, actorOf(session), request.id);
        await settle(position);
      } catch (error) {
        if (error instanceof DomainError && error.kind === 'conflict') {
          return teamAnswer(reply, session, 409, { error: error.message });
        }
        throw error;
      }
      return redirect(reply, '/dashboard/team');
    }),
  );

  scope.post(
    '/dashboard/team/:userId/disable',
    page<{ Params: { userId: string }; Body: Form }>('users:write', async (request, reply, session) => {
      const target = await manageable(request, reply);
      if (!target) return reply;
      const { position } = await users.disable(target.id, actorOf(session), request.id);
      await sessions.endAllOf(target.id);
      return redirectWhenSettled(reply, position, '/dashboard/team');
    }),
  );
  await developerRoutes(scope, ctx, kit);
  await settingsRoutes(scope, ctx, kit);
}
