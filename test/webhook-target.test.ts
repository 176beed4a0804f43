// Where webhooks may go: the literal checks when a URL is saved, and the
// checks at send time after DNS resolution, with the connection pinned to the
// address that was checked (no DNS rebinding).
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import {
  addressProblem,
  checkWebhookTarget,
  pinnedLookup,
  webhookUrlProblem,
  type WebhookResolver,
} from '../adapters/webhooks/target.ts';
import { sendWebhook } from '../adapters/webhooks/sender.ts';
import { webhookUrlProblem as reExported } from '../api/webhook-url.ts';

const LOOPBACK = 'Webhook URL cannot point to localhost or loopback addresses';
const PRIVATE = 'Webhook URL cannot point to private or internal IP addresses';
const strict = { production: true, allowPrivateTargets: false };
const development = { production: false, allowPrivateTargets: false };

/** A resolver from a fixed table, counting its questions; no DNS server involved. */
function resolverOf(table: Record<string, string[] | string[][]>) {
  const asked: string[] = [];
  let round = 0;
  const resolve: WebhookResolver = async (hostname) => {
    asked.push(hostname);
    const entry = table[hostname];
    if (!entry) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    // A list of lists answers differently on each question (a rebinding name).
    const answer = (Array.isArray(entry[0]) ? entry[Math.min(round++, entry.length - 1)] : entry) as string[];
    return answer.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
  return { resolve, asked };
}

describe('webhook URL checks when saved', () => {
  it('answers with the messages of the contract, for every spelling of an address', () => {
    const cases: [string, string | null][] = [
      ['not a url', 'Invalid webhook URL format'],
      ['ftp://example.com/hook', 'Invalid webhook URL format'],
      ['https://user:pw@example.com/hook', 'Invalid webhook URL format'],
      ['http://example.com/hook', 'Webhook URL must use HTTPS in production'],
      ['https://localhost/hook', LOOPBACK],
      ['https://api.localhost./hook', LOOPBACK],
      ['https://127.0.0.1/hook', LOOPBACK],
      ['https://2130706433/hook', LOOPBACK],
      ['https://0x7f.1/hook', LOOPBACK],
      ['https://[::1]/hook', LOOPBACK],
      ['https://[::ffff:127.0.0.1]/hook', LOOPBACK],
      ['https://[::127.0.0.1]/hook', LOOPBACK],
      ['https://10.1.2.3/hook', PRIVATE],
      ['https://192.168.0.10/hook', PRIVATE],
      ['https://172.16.5.4/hook', PRIVATE],
      ['https://169.254.169.254/latest/meta-data', PRIVATE],
      ['https://0.0.0.0/hook', PRIVATE],
      ['https://[fd00::1]/hook', PRIVATE],
      ['https://[fe80::1]/hook', PRIVATE],
      ['https://[::ffff:10.0.0.1]/hook', PRIVATE],
      ['https://012.0.0.1/hook', PRIVATE],
      ['https://100.64.0.1/hook', PRIVATE],
      ['https://shop.example.com/hooks', null],
      ['https://93.184.216.34/hook', null],
      ['https://[2606:4700::1111]/hook', null],
    ];
    for (const [url, message] of cases) assert.equal(webhookUrlProblem(url, strict), message, url);
  });

  it('allows HTTP outside production, and private targets only when the flag says so', () => {
    assert.equal(webhookUrlProblem('http://example.com/hook', development), null);
    assert.equal(webhookUrlProblem('http://127.0.0.1:8080/hook', development), LOOPBACK);
    assert.equal(webhookUrlProblem('http://127.0.0.1:8080/hook', { ...development, allowPrivateTargets: true }), null);
    assert.equal(
      webhookUrlProblem('http://127.0.0.1/hook', { production: true, allowPrivateTargets: true }),
      'Webhook URL must use HTTPS in production',
    );
  });

  it('keeps working through the old api/webhook-url.ts import', () => {
    assert.equal(reExported('https://10.0.0.1/x', strict), PRIVATE);
  });

  it('judges resolved addresses of both families, mapped ones as their IPv4 address', () => {
    assert.equal(addressProblem('127.0.0.53'), LOOPBACK);
    assert.equal(addressProblem('::ffff:127.0.0.1'), LOOPBACK);
    assert.equal(addressProblem('::ffff:192.168.1.1'), PRIVATE);
    assert.equal(addressProblem('169.254.169.254'), PRIVATE);
    assert.equal(addressProblem('fd00:ec2::254'), PRIVATE);
    assert.equal(addressProblem('::'), PRIVATE);
    assert.equal(addressProblem('8.8.8.8'), null);
    assert.equal(addressProblem('2001:4860:4860::8888'), null);
  });
});

describe('webhook targets at send time', () => {
  it('refuses a name when any address it resolves to is loopback, private, link-local or metadata', async () => {
    const { resolve } = resolverOf({
      'public.example': ['93.184.216.34'],
      'internal.example': ['10.0.0.7'],
      'mixed.example': ['93.184.216.34', '192.168.1.20'],
      'mapped.example': ['::ffff:127.0.0.1'],
      'v6.example': ['2606:4700::1111', '::1'],
      'metadata.example': ['169.254.169.254'],
      'linklocal.example': ['fe80::1'],
      'nothing.example': ['0.0.0.0'],
    });
    const policy = { ...strict, resolve };
    const outcome = async (host: string) => {
      const check = await checkWebhookTarget(`https://${host}/hook`, policy);
      return check.ok ? check.target.addresses.map((a) => a.address).join(' ') : check.problem;
    };
    assert.equal(await outcome('public.example'), '93.184.216.34');
    assert.equal(await outcome('internal.example'), PRIVATE);
    assert.equal(await outcome('mixed.example'), PRIVATE);
    assert.equal(await outcome('mapped.example'), LOOPBACK);
    assert.equal(await outcome('v6.example'), LOOPBACK);
    assert.equal(await outcome('metadata.example'), PRIVATE);
    assert.equal(await outcome('linklocal.example'), PRIVATE);
    assert.equal(await outcome('nothing.example'), PRIVATE);
  });

  it('refuses localhost at send time without asking DNS', async () => {
    const check = await checkWebhookTarget('https://localhost/hook', strict);
    assert.deepEqual(check, { ok: false, kind: 'refused', problem: LOOPBACK });
  });

  it('reports a name that does not resolve as worth retrying, not as refused', async () => {
    const { resolve } = resolverOf({});
    const check = await checkWebhookTarget('https://gone.example/hook', { ...strict, resolve });
    assert.equal(check.ok, false);
    assert.equal(!check.ok && check.kind, 'unresolved');
  });

  it('gives up on a name server that never answers, as unresolved (worth retrying)', async () => {
    const never = () => new Promise<never>(() => {});
    const check = await checkWebhookTarget('https://slow.example/hook', { ...strict, resolve: never, resolveTimeoutMs: 200 });
    assert.deepEqual(check, { ok: false, kind: 'unresolved', problem: 'Could not resolve slow.example: ETIMEOUT' });
  });

  it('pins the connection to the checked address: a rebinding name is asked once', async () => {
    // First answer public, every later one loopback: a client that resolved
    // again when connecting would end up on 127.0.0.1.
    const { resolve, asked } = resolverOf({ 'rebind.example': [['93.184.216.34'], ['127.0.0.1']] });
    const check = await checkWebhookTarget('https://rebind.example/hook', { ...strict, resolve });
    assert.ok(check.ok);
    assert.deepEqual(check.target.addresses, [{ address: '93.184.216.34', family: 4 }]);
    assert.equal(check.target.hostname, 'rebind.example');
    const lookup = pinnedLookup(check.target);
    const single = await new Promise<unknown[]>((done) =>
      lookup('rebind.example', {}, (...args: unknown[]) => done(args)),
    );
    assert.deepEqual(single, [null, '93.184.216.34', 4]);
    const all = await new Promise<unknown[]>((done) =>
      lookup('rebind.example', { all: true }, (...args: unknown[]) => done(args)),
    );
    assert.deepEqual(all, [null, [{ address: '93.184.216.34', family: 4 }]]);
    assert.deepEqual(asked, ['rebind.example']);
  });

  it('offers every checked address of a name with both families, and nothing else', async () => {
    const { resolve } = resolverOf({ 'dual.example': ['2606:4700::1111', '93.184.216.34'] });
    const check = await checkWebhookTarget('https://dual.example/hook', { ...strict, resolve });
    assert.ok(check.ok);
    const lookup = pinnedLookup(check.target);
    const all = await new Promise<unknown[]>((done) =>
      lookup('dual.example', { all: true }, (...args: unknown[]) => done(args)),
    );
    assert.deepEqual(all, [
      null,
      [
        { address: '2606:4700::1111', family: 6 },
        { address: '93.184.216.34', family: 4 },
      ],
    ]);
  });

  it('connects to the resolved address while the Host header keeps the name', async () => {
    const seen: { host?: string; path?: string }[] = [];
    const receiver = http.createServer((req, res) => {
      seen.push({ host: req.headers.host, path: req.url });
      req.resume();
      res.end('ok');
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const { port } = receiver.address() as AddressInfo;
    try {
      // `hooks.invalid` exists in no DNS: only the pinned address can be reached.
      const { resolve, asked } = resolverOf({ 'hooks.invalid': ['127.0.0.1'] });
      const result = await sendWebhook({
        url: `http://hooks.invalid:${port}/in?x=1`,
        rawBody: '{}',
        secret: 'whsec_test',
        policy: { production: false, allowPrivateTargets: true, resolve },
      });
      assert.equal(result.ok, true, String(result.error));
      assert.deepEqual(seen, [{ host: `hooks.invalid:${port}`, path: '/in?x=1' }]);
      assert.deepEqual(asked, ['hooks.invalid']);

      // Without the flag the same name is refused before anything is sent.
      const refused = await sendWebhook({
        url: `http://hooks.invalid:${port}/in`,
        rawBody: '{}',
        secret: 'whsec_test',
        policy: { production: false, allowPrivateTargets: false, resolve },
      });
      assert.deepEqual(
        { ok: refused.ok, error: refused.error, retryable: refused.retryable, statusCode: refused.statusCode },
        { ok: false, error: LOOPBACK, retryable: false, statusCode: null },
      );
      assert.equal(seen.length, 1);
    } finally {
      await new Promise((r) => receiver.close(r));
    }
  });
});
