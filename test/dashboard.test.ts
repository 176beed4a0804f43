// The merchant dashboard over plain HTTP (dashboard.md): the operator's user
// API, invitations, sign-in with password and TOTP, the session cookie,
// CSRF, lock-out, permissions refused on the server, and that no answer
// shows a password hash, a TOTP secret after enrolment or a key after its
// creation. The same flows in Chromium: test/dashboard-browser.test.ts.
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { after, before, describe, it } from 'node:test';
import { totpCode, totpMatches, passwordProblem } from '../api/dashboard/credentials.ts';
import { SIGN_IN_FAILED, SIGN_IN_LOCKED } from '../api/dashboard/routes.ts';
import { lockedOut, needsReauthentication, sessionOver } from '../api/dashboard/sessions.ts';
import { merchantWithKey } from './support/merchant.ts';
import { assertRebuildGivesTheSameRows } from './support/rebuild.ts';
import { startTestService, type RunningService } from './support/service.ts';
import { dashboardClient, paidOnEthereum, PASSWORD } from './support/dashboard.ts';

describe('dashboard rules (pure)', () => {
  it('TOTP follows RFC 6238 (its SHA-1 test vectors, last 6 digits)', () => {
    // RFC 6238 appendix B: the ASCII secret "12345678901234567890", in base32.
    const secret = 'GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ';
    const vectors: [number, string][] = [
      [59, '287082'],
      [1111111109, '081804'],
      [1111111111, '050471'],
      [1234567890, '005924'],
      [2000000000, '279037'],
      [20000000000, '353130'],
    ];
    for (const [seconds, code] of vectors) {
      assert.equal(totpCode(secret, seconds * 1000), code, `T = ${seconds}`);
      assert.ok(totpMatches(secret, code, seconds * 1000));
    }
    assert.ok(totpMatches(secret, '287082', 59_000 + 30_000), 'the step before is still taken');
    assert.ok(!totpMatches(secret, '287082', 59_000 + 90_000), 'two steps later it is not');
    assert.ok(!totpMatches(secret, '28708', 59_000));
  });

  it('passwords: at least 12 characters and not a common one', () => {
    assert.match(passwordProblem('short', 'a@b.c')!, /at least 12/);
    assert.match(passwordProblem('password1234', 'ann@example.com')!, /most common/);
    assert.match(passwordProblem('qwertyuiopasdfgh', 'ann@example.com')!, /most common/);
    assert.equal(passwordProblem(PASSWORD, 'ann@example.com'), undefined);
  });

  it('sessions end after 12 hours or 30 idle minutes; sensitive actions want the password after 5 minutes', () => {
    const t0 = new Date('2026-11-01T00:00:00Z');
    const plus = (minutes: number) => new Date(t0.getTime() + minutes * 60_000);
    assert.ok(!sessionOver({ createdAt: t0, lastSeenAt: t0 }, plus(29)));
    assert.ok(sessionOver({ createdAt: t0, lastSeenAt: t0 }, plus(30)));
    assert.ok(!sessionOver({ createdAt: t0, lastSeenAt: plus(700) }, plus(719)));
    assert.ok(sessionOver({ createdAt: t0, lastSeenAt: plus(710) }, plus(720)));
    assert.ok(!needsReauthentication({ authenticatedAt: t0 }, plus(5)));
    assert.ok(needsReauthentication({ authenticatedAt: t0 }, plus(6)));
    assert.ok(!lockedOut(9) && lockedOut(10));
  });
});

describe('dashboard over HTTP', () => {
  let svc: RunningService;
  let merchantId: string;
  let otherMerchantId: string;
  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });

  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
    merchantId = (await merchantWithKey(svc, { name: 'Fish & Chips' })).merchant.id;
    otherMerchantId = (await merchantWithKey(svc, { name: 'Other shop' })).merchant.id;
  });
  after(() => svc.close());

  it('operator invites: 201 with a one-time link valid 7 days; the list never shows a hash or token', async () => {
    const invited = await admin('POST', `/admin/v1/merchants/${merchantId}/users`, {
      email: 'Owner@Example.com',
      role: 'owner',
    });
    assert.equal(invited.status, 201, JSON.stringify(invited.body));
    const user = invited.body.data;
    assert.deepEqual(Object.keys(user).sort(), ['email', 'id', 'inviteExpiresAt', 'inviteUrl', 'role', 'status']);
    assert.equal(user.email, 'owner@example.com');
    assert.equal(user.status, 'invited');
    assert.match(user.inviteUrl, /\/dashboard\/invite\/[0-9A-Za-z]{43}$/);
    const days = (Date.parse(user.inviteExpiresAt) - Date.now()) / 86_400_000;
    assert.ok(days > 6.9 && days <= 7, `${days} days`);

    const list = await admin('GET', `/admin/v1/merchants/${merchantId}/users`);
    assert.equal(list.status, 200);
    assert.equal(list.body.data.length, 1);
    const text = JSON.stringify(list.body);
    assert.ok(!text.includes(user.inviteUrl.split('/').at(-1)), 'no token');
    assert.ok(!/hash|secret|password|token/i.test(text), text);

    const bad = await admin('POST', `/admin/v1/merchants/${merchantId}/users`, {
      email: 'x@example.com',
      role: 'boss',
    });
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /role must be one of owner, admin, finance, support, developer, viewer/);
    const badEmail = await admin('POST', `/admin/v1/merchants/${merchantId}/users`, { email: 'nope', role: 'viewer' });
    assert.equal(badEmail.status, 400);
    const taken = await admin('POST', `/admin/v1/merchants/${otherMerchantId}/users`, {
      email: 'owner@example.com',
      role: 'viewer',
    });
    assert.equal(taken.status, 409);
  });

  it('an owner accepts with a password and TOTP, signs in, and the cookie is HttpOnly, SameSite=Lax, path /dashboard', async () => {
    const owner = await dashboardClient(svc, merchantId, 'ann@example.com', 'owner');
    assert.ok(owner.totpSecret, 'an owner enrols an authenticator');
    const cookie = owner.setCookie!;
    assert.match(cookie, /^dashboard_session=[A-Za-z0-9_-]{43};/);
    assert.match(cookie, /HttpOnly/);
    assert.match(cookie, /SameSite=Lax/);
    assert.match(cookie, /Path=\/dashboard/);
    assert.doesNotMatch(cookie, /Secure/, 'not Secure over http');
    const overview = await owner.get('/dashboard');
    assert.equal(overview.status, 200);
    assert.ok(overview.text.includes('Fish &amp; Chips'));
    // The invitation is used: its link is gone.
    const again = await fetch(`${svc.url}${owner.invitePath}`);
    assert.equal(again.status, 404);
    // A code is good once: the next step's code signs in, then is refused.
    const code = totpCode(owner.totpSecret!, Date.now() + 30_000);
    assert.equal((await owner.signIn({ code })).status, 303);
    const replayed = await owner.signIn({ code });
    assert.equal(replayed.status, 401);
    assert.ok(replayed.text.includes(SIGN_IN_FAILED));
    // Signing in without the code is refused with the one message.
    const noCode = await owner.signIn({ code: '' });
    assert.equal(noCode.status, 401);
    assert.ok(noCode.text.includes(SIGN_IN_FAILED));
  });

  it('refuses a weak password and a wrong code at enrolment, showing the same key again', async () => {
    const invited = await admin('POST', `/admin/v1/merchants/${merchantId}/users`, {
      email: 'fin@example.com',
      role: 'finance',
    });
    const path = new URL(invited.body.data.inviteUrl).pathname;
    const page = await (await fetch(`${svc.url}${path}`)).text();
    const secret = /id="totp-secret">([A-Z2-7]{32})</.exec(page)![1]!;
    assert.ok(page.includes('data:image/png;base64,'), 'a QR code');
    const post = (form: Record<string, string>) =>
      fetch(`${svc.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams(form),
        redirect: 'manual',
      });
    const weak = await post({ password: 'password1234', totpSecret: secret, code: totpCode(secret) });
    assert.equal(weak.status, 400);
    assert.ok((await weak.text()).includes('among the most common'));
    const wrong = await post({
      password: PASSWORD,
      totpSecret: secret,
      code: '000000' === totpCode(secret) ? '111111' : '000000',
    });
    assert.equal(wrong.status, 400);
    assert.ok((await wrong.text()).includes(secret), 'the same key is offered again');
  });

  it('refuses a form without the session’s CSRF token (403), and takes it with', async () => {
    const dev = await dashboardClient(svc, merchantId, 'dev@example.com', 'developer');
    const without = await dev.post('/dashboard/developers/api-keys', { permissions: 'invoices:read' }, { csrf: false });
    assert.equal(without.status, 403);
    const wrong = await dev.post(
      '/dashboard/developers/api-keys',
      { permissions: 'invoices:read', _csrf: 'x'.repeat(43) },
      { csrf: false },
    );
    assert.equal(wrong.status, 403);
    // The sign-in form too has its token (and cookie): right credentials without them are refused.
    const login = await fetch(`${svc.url}/dashboard/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ email: 'dev@example.com', password: PASSWORD }),
      redirect: 'manual',
    });
    assert.equal(login.status, 403);
    assert.equal(login.headers.getSetCookie().filter((c) => c.startsWith('dashboard_session=')).length, 0);
    const created = await dev.post('/dashboard/developers/api-keys', { permissions: 'invoices:read', name: 'ci' });
    assert.equal(created.status, 201, created.text);
  });

  it('creates an API key shown once, which then works over the API, and revokes it', async () => {
    const dev = await dashboardClient(svc, merchantId, 'dev2@example.com', 'developer');
    const created = await dev.post('/dashboard/developers/api-keys', {
      name: 'shop backend',
      permissions: ['invoices:read', 'invoices:write'],
    });
    assert.equal(created.status, 201);
    const key = /id="new-key">(pk_live_[0-9A-Za-z]{43})</.exec(created.text)![1]!;
    const invoice = await svc.call('POST', '/api/v1/invoices', {
      token: key,
      body: { amount: '12.50', currency: 'USD' },
    });
    assert.equal(invoice.status, 201, JSON.stringify(invoice.body));
    const listed = await dev.get('/dashboard/developers/api-keys');
    assert.ok(!listed.text.includes(key), 'the key is never shown again');
    assert.ok(listed.text.includes(key.slice(0, 12)), 'its prefix is');
    // The event says who created it.
    const row = listed.text.split('<tr').find((r) => r.includes('shop backend'));
    const keyId = /data-key-id="([0-9a-f-]{36})"/.exec(row ?? '')?.[1];
    assert.ok(keyId);
    const events = await svc.service.store.readStream(`apikey-${keyId}`);
    assert.deepEqual(events[0]!.metadata.actor, { type: 'user', userId: dev.userId, email: 'dev2@example.com' });
    const revoked = await dev.post(`/dashboard/developers/api-keys/${keyId}/revoke`, {});
    assert.equal(revoked.status, 303);
    assert.equal((await svc.call('GET', '/api/v1/invoices', { token: key })).status, 401);
  });

  /** Moves a user's sessions' times `minutes` into the past, as if that long had gone by. */
  const age = (userId: string, column: 'authenticated_at' | 'last_seen_at', minutes: number) =>
    sql`update dashboard_sessions set ${sql.ref(column)} = ${sql.ref(column)} - make_interval(mins => ${minutes})
        where user_id = ${userId}`.execute(svc.service.database.db);

  it('asks for the password and code again to create a key when the last was over 5 minutes ago', async () => {
    const owner = await dashboardClient(svc, merchantId, 'reauth@example.com', 'owner');
    await age(owner.userId, 'authenticated_at', 6);
    const page = await owner.get('/dashboard/developers/api-keys');
    assert.ok(page.text.includes('id="reauth-password"') && page.text.includes('id="reauth-code"'));
    const without = await owner.post('/dashboard/developers/api-keys', { permissions: 'invoices:read' });
    assert.equal(without.status, 403);
    assert.ok(without.text.includes('Your password or code is not right.'));
    const wrongCode = await owner.post('/dashboard/developers/api-keys', {
      permissions: 'invoices:read',
      password: PASSWORD,
      code: totpCode(owner.totpSecret!) === '000000' ? '111111' : '000000',
    });
    assert.equal(wrongCode.status, 403);
    const right = await owner.post('/dashboard/developers/api-keys', {
      permissions: 'invoices:read',
      password: PASSWORD,
      // The next step's code (taken within the window): the current one was used to sign in.
      code: totpCode(owner.totpSecret!, Date.now() + 30_000),
    });
    assert.equal(right.status, 201, right.text);
    // Given just now: the next one asks nothing.
    assert.ok(!right.text.includes('id="reauth-password"'));
  });

  it('a session unused for 30 minutes is over', async () => {
    const viewer = await dashboardClient(svc, merchantId, 'idle@example.com', 'viewer');
    assert.equal((await viewer.get('/dashboard')).status, 200);
    await age(viewer.userId, 'last_seen_at', 31);
    const after = await viewer.get('/dashboard');
    assert.equal(after.status, 303);
    assert.equal(after.location, '/dashboard/login');
  });

  it('no answer shows a password hash, a TOTP key after enrolment, or an API key after its creation', async () => {
    const owner = await dashboardClient(svc, merchantId, 'secrets@example.com', 'owner');
    const created = await owner.post('/dashboard/developers/api-keys', { permissions: 'invoices:read' });
    const key = /id="new-key">([^<]+)</.exec(created.text)![1]!;
    const user = await svc.service.store.readStream(`merchantuser-${owner.userId}`);
    const { passwordHash } = user.find((e) => e.type === 'InvitationAccepted')!.data as { passwordHash: string };
    const answers = [
      await owner.get('/dashboard'),
      await owner.get('/dashboard/invoices'),
      await owner.get('/dashboard/developers/api-keys'),
      { text: JSON.stringify((await admin('GET', `/admin/v1/merchants/${merchantId}/users`)).body) },
      { text: JSON.stringify((await admin('GET', `/admin/v1/merchants/${merchantId}/api-keys`)).body) },
    ];
    for (const { text } of answers) {
      for (const secret of [key, owner.totpSecret!, passwordHash, passwordHash.split('$').at(-1)!]) {
        assert.ok(!text.includes(secret), `an answer shows ${secret.slice(0, 12)}…`);
      }
    }
  });

  it('team: an admin invites, changes roles and disables, but never touches an owner; others may not', async () => {
    const admin_ = await dashboardClient(svc, merchantId, 'admin@example.com', 'admin');
    const owner = await dashboardClient(svc, merchantId, 'owner2@example.com', 'owner');
    const invited = await admin_.post('/dashboard/team/invite', { email: 'Sam@Example.com', role: 'support' });
    assert.equal(invited.status, 201, invited.text);
    const url = /id="invite-url">([^<]+)</.exec(invited.text)![1]!;
    const samId = /data-user-id="([0-9a-f-]{36})">\s*<td>sam@example.com/.exec(invited.text)![1]!;
    const invitedEvent = (await svc.service.store.readStream(`merchantuser-${samId}`))[0]!;
    assert.deepEqual(invitedEvent.metadata.actor, { type: 'user', userId: admin_.userId, email: 'admin@example.com' });
    const accepted = await fetch(`${svc.url}${new URL(url).pathname}`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ password: PASSWORD }),
      redirect: 'manual',
    });
    assert.equal(accepted.status, 303);

    const ownerInvite = await admin_.post('/dashboard/team/invite', { email: 'boss@example.com', role: 'owner' });
    assert.equal(ownerInvite.status, 403);
    assert.equal((await admin_.post(`/dashboard/team/${owner.userId}/disable`, {})).status, 403);
    assert.equal((await admin_.post(`/dashboard/team/${owner.userId}/role`, { role: 'viewer' })).status, 403);
    assert.equal((await admin_.post(`/dashboard/team/${admin_.userId}/disable`, {})).status, 403, 'not oneself');
    assert.equal((await admin_.post(`/dashboard/team/${samId}/role`, { role: 'owner' })).status, 403);

    assert.equal((await admin_.post(`/dashboard/team/${samId}/role`, { role: 'viewer' })).status, 303);
    const team = await admin_.get('/dashboard/team');
    assert.match(team.text, /<td>sam@example.com<\/td>[^]*?<option value="viewer" selected>/);
    assert.equal((await admin_.post(`/dashboard/team/${samId}/disable`, {})).status, 303);
    const users = (await admin('GET', `/admin/v1/merchants/${merchantId}/users`)).body.data;
    assert.equal(users.find((u: { id: string }) => u.id === samId).status, 'disabled');

    // Another merchant's user is not found; a role without users:write is refused.
    const foreign = await dashboardClient(svc, otherMerchantId, 'foreign@example.com', 'viewer');
    assert.equal((await admin_.post(`/dashboard/team/${foreign.userId}/disable`, {})).status, 404);
    assert.equal(
      (await foreign.post('/dashboard/team/invite', { email: 'x@example.com', role: 'viewer' })).status,
      403,
    );
    // An owner may make an owner.
    assert.equal(
      (await owner.post('/dashboard/team/invite', { email: 'boss@example.com', role: 'owner' })).status,
      201,
    );
  });

  it('support cancels an invoice as themselves: the API’s events name them; a viewer is refused', async () => {
    const { merchant, key: shopKey } = await merchantWithKey(svc, { name: 'Cancel shop' });
    const create = async () =>
      (await svc.call('POST', '/api/v1/invoices', { token: shopKey, body: { amount: '9', currency: 'USD' } })).body.data
        .id as string;
    const first = await create();
    const second = await create();
    const support = await dashboardClient(svc, merchant.id, 'support2@example.com', 'support');
    const viewer = await dashboardClient(svc, merchant.id, 'viewer3@example.com', 'viewer');
    assert.ok((await support.get(`/dashboard/invoices/${first}`)).text.includes('id="cancel-invoice"'));
    assert.ok(!(await viewer.get(`/dashboard/invoices/${first}`)).text.includes('id="cancel-invoice"'));
    assert.equal((await viewer.post(`/dashboard/invoices/${first}/cancel`, {})).status, 403);
    const cancelled = await support.post(`/dashboard/invoices/${first}/cancel`, {});
    assert.equal(cancelled.status, 303);
    const events = (await svc.call('GET', `/api/v1/invoices/${first}/events`, { token: shopKey })).body.data;
    const cancel = events.find((e: { type: string }) => e.type === 'InvoiceCancelled');
    assert.deepEqual(cancel.actor, { type: 'user', userId: support.userId, email: 'support2@example.com' });
    // Created through the API: its key is the actor.
    assert.equal(events.find((e: { type: string }) => e.type === 'InvoiceCreated').actor.type, 'api_key');
    // Through the API, the key is the actor.
    await svc.call('POST', `/api/v1/invoices/${second}/cancel`, { token: shopKey });
    const byKey = (await svc.call('GET', `/api/v1/invoices/${second}/events`, { token: shopKey })).body.data.find(
      (e: { type: string }) => e.type === 'InvoiceCancelled',
    );
    assert.equal(byKey.actor.type, 'api_key');
    // Another merchant's invoice is unknown here too.
    const foreign = await dashboardClient(svc, merchantId, 'support3@example.com', 'support');
    assert.equal((await foreign.post(`/dashboard/invoices/${second}/cancel`, {})).status, 404);
  });

  /** A 100 USD invoice of `key`'s merchant paid 120 USDT on the sandbox Ethereum, confirmed: 20 USDT excess. */
  const overpaidInvoice = (key: string) => paidOnEthereum(svc, key, { amount: '100', token: 'USDT', paid: '120' });
  const CUSTOMER = '0x8ba1f109551bD432803012645Ac136ddd64DBA72';

  it('refunds: support creates (as themselves) but the server refuses their approval; a viewer does neither; finance approves', async () => {
    const { merchant, key } = await merchantWithKey(svc, { name: 'Refund shop' });
    const invoiceId = await overpaidInvoice(key);
    const support = await dashboardClient(svc, merchant.id, 'support-r@example.com', 'support');
    const viewer = await dashboardClient(svc, merchant.id, 'viewer-r@example.com', 'viewer');
    const finance = await dashboardClient(svc, merchant.id, 'finance-r@example.com', 'finance');
    const refundForm = { asset: 'ethereum:USDT', kind: 'excess', destination: CUSTOMER, reason: 'paid too much' };

    // The form is offered to support, not to a viewer, and the server refuses a viewer all the same.
    assert.ok((await support.get(`/dashboard/invoices/${invoiceId}`)).text.includes('id="refund-form"'));
    const viewerPage = await viewer.get(`/dashboard/invoices/${invoiceId}`);
    assert.ok(viewerPage.text.includes('id="no-refunds"') && !viewerPage.text.includes('id="refund-form"'));
    assert.equal((await viewer.post(`/dashboard/invoices/${invoiceId}/refunds`, refundForm)).status, 403);
    // Without the session's CSRF token, refused too.
    assert.equal(
      (await support.post(`/dashboard/invoices/${invoiceId}/refunds`, refundForm, { csrf: false })).status,
      403,
    );
    // Bad input is the form again with why, not a 500; the command's own checks say theirs.
    const noAmount = await support.post(`/dashboard/invoices/${invoiceId}/refunds`, { asset: 'ethereum:USDT' });
    assert.equal(noAmount.status, 400);
    assert.ok(noAmount.text.includes('Enter the amount to refund'));
    const tooMuch = await support.post(`/dashboard/invoices/${invoiceId}/refunds`, {
      asset: 'ethereum:USDT',
      amount: '121',
    });
    assert.equal(tooMuch.status, 400);
    assert.match(tooMuch.text, /role="alert">[^<]+</);
    assert.equal((await svc.call('GET', `/api/v1/refunds?invoiceId=${invoiceId}`, { token: key })).body.data.length, 0);

    const created = await support.post(`/dashboard/invoices/${invoiceId}/refunds`, refundForm);
    assert.equal(created.status, 303, created.text);
    const refundId = /^\/dashboard\/refunds\/([0-9a-f-]{36})$/.exec(created.location ?? '')![1]!;
    // The API sees the same refund, made by the same command.
    const viaApi = (await svc.call('GET', `/api/v1/refunds/${refundId}`, { token: key })).body.data;
    assert.equal(viaApi.amount, '20.000000');
    assert.equal(viaApi.status, 'awaiting_approval');
    assert.equal(viaApi.reason, 'paid too much');
    const events = await svc.service.store.readStream(`refund-${refundId}`);
    assert.deepEqual(events[0]!.metadata.actor, {
      type: 'user',
      userId: support.userId,
      email: 'support-r@example.com',
    });

    const supportView = await support.get(`/dashboard/refunds/${refundId}`);
    assert.ok(supportView.text.includes('id="cancel-refund"') && !supportView.text.includes('id="approve-refund"'));
    assert.equal((await support.post(`/dashboard/refunds/${refundId}/approve`, {})).status, 403);
    assert.equal((await viewer.post(`/dashboard/refunds/${refundId}/approve`, {})).status, 403);
    assert.equal((await viewer.post(`/dashboard/refunds/${refundId}/cancel`, {})).status, 403);
    assert.equal((await finance.post(`/dashboard/refunds/${refundId}/approve`, {}, { csrf: false })).status, 403);
    assert.equal((await svc.call('GET', `/api/v1/refunds/${refundId}`, { token: key })).body.data.approvedAt, null);

    const listed = await viewer.get('/dashboard/refunds?status=awaiting_approval');
    assert.equal(listed.status, 200);
    assert.ok(listed.text.includes(`data-refund-id="${refundId}"`));
    assert.ok(!(await viewer.get('/dashboard/refunds?status=completed')).text.includes(refundId));
    assert.ok((await viewer.get(`/dashboard/invoices/${invoiceId}`)).text.includes(`data-refund-id="${refundId}"`));

    // The overview says it waits for approval.
    const overview = await finance.get('/dashboard');
    assert.match(
      overview.text,
      new RegExp(`href="/dashboard/refunds/${refundId}"[^>]*>Refund 20.000000 USDT on ethereum: waiting for approval<`),
    );

    const approved = await finance.post(`/dashboard/refunds/${refundId}/approve`, {});
    assert.equal(approved.status, 303, approved.text);
    const after = (await svc.call('GET', `/api/v1/refunds/${refundId}`, { token: key })).body.data;
    assert.notEqual(after.approvedAt, null);
    assert.ok(['awaiting_funds', 'sending', 'completed'].includes(after.status), after.status);
    const approval = (await svc.service.store.readStream(`refund-${refundId}`)).find(
      (e) => e.type === 'RefundApproved',
    )!;
    assert.deepEqual(approval.metadata.actor, { type: 'user', userId: finance.userId, email: 'finance-r@example.com' });
    // Approved: it cannot be canceled any more, and the page says why.
    const late = await support.post(`/dashboard/refunds/${refundId}/cancel`, {});
    if (after.status !== 'awaiting_funds') assert.equal(late.status, 409);
  });

  it('refunds: a claim link while the customer has not given an address; support cancels; approving after 5 minutes asks for the password', async () => {
    const { merchant, key } = await merchantWithKey(svc, { name: 'Claim shop' });
    const invoiceId = await overpaidInvoice(key);
    const support = await dashboardClient(svc, merchant.id, 'support-c@example.com', 'support');
    const owner = await dashboardClient(svc, merchant.id, 'owner-c@example.com', 'owner');
    const created = await support.post(`/dashboard/invoices/${invoiceId}/refunds`, {
      asset: 'ethereum:USDT',
      amount: '5',
    });
    assert.equal(created.status, 303, created.text);
    const refundId = created.location!.split('/').at(-1)!;
    const claimUrl = (await svc.call('GET', `/api/v1/refunds/${refundId}`, { token: key })).body.data.claimUrl;
    const page = await owner.get(`/dashboard/refunds/${refundId}`);
    assert.ok(page.text.includes(`id="claim-link">${claimUrl}<`), 'the claim link is shown');
    assert.ok(!page.text.includes('id="approve-refund"'), 'nothing to approve before the address');

    await age(owner.userId, 'authenticated_at', 6);
    const second = await support.post(`/dashboard/invoices/${invoiceId}/refunds`, {
      asset: 'ethereum:USDT',
      amount: '1',
      destination: CUSTOMER,
    });
    const secondId = second.location!.split('/').at(-1)!;
    assert.ok((await owner.get(`/dashboard/refunds/${secondId}`)).text.includes('id="reauth-password"'));
    const without = await owner.post(`/dashboard/refunds/${secondId}/approve`, {});
    assert.equal(without.status, 403);
    assert.ok(without.text.includes('Your password or code is not right.'));
    assert.equal((await svc.call('GET', `/api/v1/refunds/${secondId}`, { token: key })).body.data.approvedAt, null);

    const canceled = await support.post(`/dashboard/refunds/${refundId}/cancel`, {});
    assert.equal(canceled.status, 303);
    assert.equal((await svc.call('GET', `/api/v1/refunds/${refundId}`, { token: key })).body.data.status, 'canceled');
    const cancelEvent = (await svc.service.store.readStream(`refund-${refundId}`)).find(
      (e) => e.type === 'RefundCanceled',
    )!;
    assert.equal((cancelEvent.metadata.actor as { userId: string }).userId, support.userId);
    // Another merchant's refund is unknown.
    const foreign = await dashboardClient(svc, merchantId, 'support-f@example.com', 'support');
    assert.equal((await foreign.get(`/dashboard/refunds/${secondId}`)).status, 404);
    assert.equal((await foreign.post(`/dashboard/refunds/${secondId}/cancel`, {})).status, 404);
    // Through the API the key is the actor, as the dashboard's user is here.
    assert.equal((await svc.call('POST', `/api/v1/refunds/${secondId}/cancel`, { token: key })).status, 200);
    const byKey = (await svc.service.store.readStream(`refund-${secondId}`)).find((e) => e.type === 'RefundCanceled')!;
    assert.equal((byKey.metadata.actor as { type: string }).type, 'api_key');
  });

  it('a viewer can read but the server refuses every change (403), and cannot open API keys', async () => {
    const viewer = await dashboardClient(svc, merchantId, 'viewer@example.com', 'viewer');
    assert.equal((await viewer.get('/dashboard/invoices')).status, 200);
    assert.equal((await viewer.get('/dashboard/developers/api-keys')).status, 403);
    const post = await viewer.post('/dashboard/developers/api-keys', { permissions: 'invoices:read' });
    assert.equal(post.status, 403);
    assert.equal(
      (await svc.service.store.readAll(undefined, 10_000)).filter(
        (e) =>
          e.type === 'ApiKeyIssued' && (e.metadata.actor as { userId?: string } | undefined)?.userId === viewer.userId,
      ).length,
      0,
    );
  });

  it('another merchant’s invoice is 404 through the dashboard, as through the API', async () => {
    const { key } = await merchantWithKey(svc, { name: 'Third shop' });
    const foreign = (await svc.call('POST', '/api/v1/invoices', { token: key, body: { amount: '5', currency: 'USD' } }))
      .body.data;
    const viewer = await dashboardClient(svc, merchantId, 'viewer2@example.com', 'viewer');
    assert.equal((await viewer.get(`/dashboard/invoices/${foreign.id}`)).status, 404);
    assert.equal((await viewer.get('/dashboard/invoices/not-a-uuid')).status, 404);
  });

  it('disabling a user ends their sessions at once', async () => {
    const support = await dashboardClient(svc, merchantId, 'support@example.com', 'support');
    assert.equal((await support.get('/dashboard')).status, 200);
    const disabled = await admin('POST', `/admin/v1/users/${support.userId}/disable`);
    assert.equal(disabled.status, 200);
    assert.equal(disabled.body.data.status, 'disabled');
    const after = await support.get('/dashboard');
    assert.equal(after.status, 303);
    assert.equal(after.location, '/dashboard/login');
    const signIn = await support.signIn();
    assert.equal(signIn.status, 401);
    assert.ok(signIn.text.includes(SIGN_IN_FAILED));
  });

  it('ten wrong passwords lock the address; an unknown address gets the very same answers', async () => {
    const known = await dashboardClient(svc, merchantId, 'locked@example.com', 'viewer');
    const unknown = { ...known, email: 'nobody@example.com' };
    const answers = async (email: string) => {
      const seen: string[] = [];
      for (let i = 0; i < 11; i++) {
        const r = await known.signIn({ email, password: `wrong password ${i}` });
        seen.push(`${r.status} ${/role="alert">([^<]*)</.exec(r.text)?.[1]}`);
      }
      return seen;
    };
    const forKnown = await answers('locked@example.com');
    const forUnknown = await answers(unknown.email);
    assert.deepEqual(forKnown, forUnknown);
    assert.deepEqual(forKnown.slice(0, 10), Array(10).fill(`401 ${SIGN_IN_FAILED}`));
    assert.equal(forKnown[10], `429 ${SIGN_IN_LOCKED}`);
    // Locked: even the right password is refused.
    const right = await known.signIn();
    assert.equal(right.status, 429);
  });

  it('rebuilds merchant_users from zero into the rows it projected', async () => {
    await assertRebuildGivesTheSameRows(svc.service, 'merchants');
  });
});

describe('dashboard behind https', () => {
  it('marks the session cookie Secure', async () => {
    const svc = await startTestService({ RATE_LIMITS: 'off', PUBLIC_BASE_URL: 'https://pay.example.com' });
    try {
      const { merchant } = await merchantWithKey(svc);
      const user = await dashboardClient(svc, merchant.id, 'tls@example.com', 'viewer');
      assert.match(user.setCookie!, /; Secure/);
      assert.match(user.setCookie!, /HttpOnly/);
    } finally {
      await svc.close();
    }
  });
});
