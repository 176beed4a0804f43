// The live status WebSocket over a real connection: the status on connect,
// one message per change to every socket, a clear close when final.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WebSocket } from 'ws';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

interface Client {
  socket: WebSocket;
  messages: any[];
  closed: Promise<{ code: number; reason: string }>;
}

function connect(url: string): Promise<Client> {
  const socket = new WebSocket(url, { perMessageDeflate: false });
  const messages: any[] = [];
  socket.on('message', (data) => messages.push(JSON.parse(String(data))));
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    socket.on('close', (code, reason) => resolve({ code, reason: String(reason) })),
  );
  return new Promise((resolve, reject) => {
    socket.once('open', () => resolve({ socket, messages, closed }));
    socket.once('error', reject);
  });
}

describe('live status WebSocket', () => {
  let svc: RunningService;
  let key: string;
  let ws: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', CHAIN_TRON_CONFIRMATIONS: '3' });
    key = (await merchantWithKey(svc)).key;
    ws = svc.url.replace('http://', 'ws://');
  });
  after(() => svc.close());

  const pay = async () =>
    (
      await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount: '20', currency: 'USD', chain: 'tron', token: 'USDT' },
      })
    ).body.data;
  const transfer = (to: string, amount: string) =>
    svc.call('POST', '/dev/v1/chains/tron/transfers', { token: svc.adminToken, body: { to, amount, token: 'USDT' } });

  it('closes with 4404 for an unknown invoice', async () => {
    const client = await connect(`${ws}/ws/invoices/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10`);
    assert.deepEqual(await client.closed, { code: 4404, reason: 'Invoice not found' });
    const malformed = await connect(`${ws}/ws/invoices/nope`);
    assert.equal((await malformed.closed).code, 4404);
  });

  it('sends the status on connect and on every change, then closes when the invoice is final', async () => {
    const p = await pay();
    const client = await connect(`${ws}/ws/invoices/${p.paymentId}`);
    await eventually(
      async () => client.messages.length,
      (n) => n === 1,
    );
    const first = client.messages[0];
    assert.equal(first.type, 'status');
    assert.deepEqual(first.data, (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/status`)).body.data);
    await transfer(p.address, '5');
    const partial = await eventually(
      async () => client.messages.at(-1),
      (m) => m.data.status === 'partial',
    );
    assert.equal(partial.data.remainingAmount, '15.00000000');
    await svc.call('POST', `/api/v1/invoices/${p.paymentId}/cancel`, { token: key }).catch(() => undefined);
    // partial invoices cannot be cancelled: pay the rest and confirm instead
    await transfer(p.address, '15');
    await svc.call('POST', '/dev/v1/chains/tron/blocks', { token: svc.adminToken, body: { count: 2 } });
    const confirmed = await eventually(
      async () => client.messages.at(-1),
      (m) => m.data.status === 'confirmed',
    );
    assert.equal(confirmed.data.confirmations, 3);
    // Changes that land while a message is on its way are shown together in the next one.
    const statuses = client.messages.map((m) => m.data.status);
    assert.equal(statuses[0], 'pending');
    assert.ok(statuses.includes('partial'));
    assert.equal(statuses.at(-1), 'confirmed');
    for (let i = 1; i < client.messages.length; i++) {
      assert.notDeepEqual(client.messages[i], client.messages[i - 1], 'one message per change, no repeats');
    }
    const cancelled = await pay();
    const watcher = await connect(`${ws}/ws/invoices/${cancelled.paymentId}`);
    await eventually(
      async () => watcher.messages.length,
      (n) => n === 1,
    );
    await svc.call('POST', `/api/v1/invoices/${cancelled.paymentId}/cancel`, { token: key });
    assert.deepEqual(await watcher.closed, { code: 4000, reason: 'Invoice is expired' });
    assert.equal(watcher.messages.at(-1).data.status, 'expired');
    const late = await connect(`${ws}/ws/invoices/${cancelled.paymentId}`);
    assert.equal((await late.closed).code, 4000);
    assert.equal(late.messages.length, 1);
    client.socket.close();
  });

  it('gives 2,000 sockets on one invoice the same messages, one per change', async () => {
    const p = await pay();
    const clients: Client[] = [];
    for (let i = 0; i < 2000; i += 200) {
      clients.push(
        ...(await Promise.all(Array.from({ length: 200 }, () => connect(`${ws}/ws/invoices/${p.paymentId}`)))),
      );
    }
    await eventually(
      async () => clients.filter((c) => c.messages.length !== 1).length,
      (n) => n === 0,
      30_000,
    );
    for (const amount of ['1', '2']) await transfer(p.address, amount);
    await eventually(
      async () => clients.filter((c) => c.messages.at(-1)?.data.totalReceivedAmount !== '3.00000000').length,
      (n) => n === 0,
      30_000,
    );
    await new Promise((r) => setTimeout(r, 300));
    const reference = JSON.stringify(clients[0]!.messages);
    assert.ok(clients[0]!.messages.length >= 3, 'the two payments changed the status');
    for (const c of clients) assert.equal(JSON.stringify(c.messages), reference, 'every socket got every change once');
    for (let i = 1; i < clients[0]!.messages.length; i++) {
      assert.notDeepEqual(clients[0]!.messages[i], clients[0]!.messages[i - 1], 'no message repeats the one before');
    }
    for (const c of clients) c.socket.close();
  });
});

/** The HTTP answer a refused upgrade gets: its status and body (the contract's envelope). */
function refused(url: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { perMessageDeflate: false });
    socket.once('open', () => reject(new Error('the socket was admitted')));
    socket.once('unexpected-response', (_request, response) => {
      let text = '';
      response.on('data', (chunk: Buffer) => (text += chunk.toString()));
      response.on('end', () => resolve({ status: response.statusCode!, body: JSON.parse(text) }));
    });
  });
}

for (const limits of [
  {
    perClient: 2,
    total: 100,
    status: 429,
    error: 'Too Many Requests',
    message: /^Too many live connections from this address \(at most 2\)/,
  },
  {
    perClient: 100,
    total: 2,
    status: 503,
    error: 'Service Unavailable',
    message: /^The service has as many live connections as it takes/,
  },
]) {
  describe(`live status WebSocket limits: ${limits.perClient} per client, ${limits.total} in all`, () => {
    let svc: RunningService;
    let url: string;
    before(async () => {
      svc = await startTestService({
        LIVE_SOCKETS_PER_CLIENT: String(limits.perClient),
        LIVE_SOCKETS_TOTAL: String(limits.total),
      });
      const key = (await merchantWithKey(svc)).key;
      const invoiceId = (
        await svc.call('POST', '/api/v1/payments', {
          token: key,
          body: { amount: '20', currency: 'USD', chain: 'tron', token: 'USDT' },
        })
      ).body.data.paymentId;
      url = `${svc.url.replace('http://', 'ws://')}/ws/invoices/${invoiceId}`;
    });
    after(() => svc.close());

    it(`refuses the next socket with ${limits.status} in the envelope, and takes one again once a socket closes`, async () => {
      const open = [await connect(url), await connect(url)];
      const answer = await refused(url);
      assert.equal(answer.status, limits.status);
      assert.equal(answer.body.error, limits.error);
      assert.match(answer.body.message, limits.message);
      assert.match(answer.body.correlationId, /\S/);
      open[0]!.socket.close();
      await open[0]!.closed;
      const again = await eventually(
        () => connect(url).catch(() => undefined),
        (c) => c !== undefined,
        5_000,
      );
      for (const c of [open[1]!, again!]) c.socket.close();
    });
  });
}
