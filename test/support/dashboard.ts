// A dashboard user for tests over plain HTTP: invited by the operator,
// accepted (password, and the TOTP key read from the page where the role
// needs one), signed in, with the session cookie and CSRF token kept.
import assert from 'node:assert/strict';
import { totpCode } from '../../api/dashboard/credentials.ts';
import { defaultConfirmations } from '../../api/config.ts';
import { eventually } from './merchant.ts';
import type { RunningService } from './service.ts';

/** Long and uncommon enough for the invitation's checks. */
export const PASSWORD = 'correct horse battery staple 42';

export interface PageAnswer {
  status: number;
  text: string;
  location: string | null;
  setCookie: string | null;
  headers: Headers;
}

export async function dashboardClient(svc: RunningService, merchantId: string, email: string, role: string) {
  const invited = await svc.call('POST', `/admin/v1/merchants/${merchantId}/users`, {
    token: svc.adminToken,
    body: { email, role },
  });
  assert.equal(invited.status, 201, JSON.stringify(invited.body));
  const invitePath = new URL(invited.body.data.inviteUrl as string).pathname;
  const invitePage = await (await fetch(`${svc.url}${invitePath}`)).text();
  const totpSecret = /id="totp-secret">([A-Z2-7]{32})</.exec(invitePage)?.[1];
  /** The cookies the service set, by name. */
  const jar = new Map<string, string>();
  let csrf = '';

  async function request(method: string, path: string, form?: Record<string, string | string[]>): Promise<PageAnswer> {
    const body = new URLSearchParams();
    for (const [key, value] of Object.entries(form ?? {})) for (const v of [value].flat()) body.append(key, v);
    const response = await fetch(`${svc.url}${path}`, {
      method,
      headers: {
        ...(jar.size > 0 && { cookie: [...jar].map(([name, value]) => `${name}=${value}`).join('; ') }),
        ...(form && { 'content-type': 'application/x-www-form-urlencoded' }),
      },
      body: form ? body : undefined,
      redirect: 'manual',
    });
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const [name, value] = pair!.split('=') as [string, string];
      if (value === '' || /Expires=Thu, 01 Jan 1970/i.test(line)) jar.delete(name);
      else jar.set(name, value);
    }
    return {
      status: response.status,
      text: await response.text(),
      location: response.headers.get('location'),
      setCookie: response.headers.get('set-cookie'),
      headers: response.headers,
    };
  }

  const accepted = await request('POST', invitePath, {
    password: PASSWORD,
    ...(totpSecret && { totpSecret, code: totpCode(totpSecret) }),
  });
  assert.equal(accepted.status, 303, accepted.text);

  const client = {
    userId: invited.body.data.id as string,
    email,
    totpSecret,
    invitePath,
    setCookie: null as string | null,
    get: (path: string) => request('GET', path),
    /** Posts a form, with the session's CSRF token unless told not to. */
    post: (path: string, form: Record<string, string | string[]>, options: { csrf?: boolean } = {}) =>
      request('POST', path, options.csrf === false ? form : { _csrf: csrf, ...form }),
    /** Opens the sign-in form (for its CSRF token and cookie) and sends it. */
    async signIn(overrides: { email?: string; password?: string; code?: string } = {}) {
      const form = await request('GET', '/dashboard/login');
      return request('POST', '/dashboard/login', {
        _csrf: /name="_csrf" value="([^"]+)"/.exec(form.text)![1]!,
        email: overrides.email ?? email,
        password: overrides.password ?? PASSWORD,
        code: overrides.code ?? (totpSecret ? totpCode(totpSecret) : ''),
      });
    },
  };
  const signedIn = await client.signIn();
  assert.equal(signedIn.status, 303, signedIn.text);
  client.setCookie = signedIn.headers.getSetCookie().find((c) => c.startsWith('dashboard_session='))!;
  const overview = await client.get('/dashboard');
  csrf = /name="_csrf" value="([^"]+)"/.exec(overview.text)![1]!;
  return client;
}

/** An invoice of `amount` USD, paid with `paid` of `token` on the sandbox Ethereum and confirmed; its id. */
export async function paidOnEthereum(
  svc: RunningService,
  key: string,
  payment: { amount: string; token: string; paid: string; metadata?: Record<string, string> },
) {
  const created = await svc.call('POST', '/api/v1/payments', {
    token: key,
    body: {
      amount: payment.amount,
      currency: 'USD',
      chain: 'ethereum',
      token: payment.token,
      metadata: payment.metadata,
    },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const { paymentId, address } = created.body.data;
  const admin = (path: string, body: unknown) => svc.call('POST', path, { token: svc.adminToken, body });
  const sent = await admin('/dev/v1/chains/ethereum/transfers', {
    to: address,
    amount: payment.paid,
    token: payment.token,
  });
  assert.equal(sent.status, 201, JSON.stringify(sent.body));
  await admin('/dev/v1/chains/ethereum/blocks', { count: defaultConfirmations.ethereum });
  await eventually(
    async () => (await svc.call('GET', `/api/v1/invoices/${paymentId}/status`)).body.data,
    (s) => s.status === 'confirmed',
  );
  return paymentId as string;
}
