// The service on a local Hardhat node over a WebSocket (ws://), through a TCP
// relay the test can cut: the socket dropped in the middle of a payment, and
// the node unreachable for a while, the adapter connects again, follows the
// head again and backfills the blocks it missed, so the payment is detected,
// confirmed and settled as if nothing had happened.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';
import { startHardhat, type LocalNode } from './support/hardhat.ts';
import { baseUnits, evmFixture, randomWallet } from './support/evm-flow.ts';

const started = await startHardhat();
const skip = 'skip' in started ? started.skip : false;
if (skip) console.log(`# skipped EVM WebSocket tests: ${skip}`);

/** A TCP relay to `target` that can drop every connection and refuse new ones until reopened. */
async function relay(target: URL) {
  const sockets = new Set<net.Socket>();
  let refusing = false;
  let connections = 0;
  const server = net.createServer((client) => {
    if (refusing) return void client.destroy();
    connections++;
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      sockets.add(a);
      a.on('error', () => b.destroy());
      a.on('close', () => {
        sockets.delete(a);
        b.destroy();
      });
      a.pipe(b);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `ws://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    get connections() {
      return connections;
    },
    /** Drops every open connection and refuses new ones. */
    cut() {
      refusing = true;
      for (const socket of sockets) socket.destroy();
    },
    reopen() {
      refusing = false;
    },
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('an EVM node over a WebSocket that drops', { skip }, () => {
  const node = started as LocalNode;
  let link: Awaited<ReturnType<typeof relay>>;
  let svc: RunningService;
  before(async () => {
    link = await relay(new URL(node.url));
    const fx = await evmFixture(node, {});
    svc = await startTestService({ ...fx.env, CHAIN_ETHEREUM_RPC_URL: link.url });
  });
  after(async () => {
    await svc?.close();
    await link?.close();
    await node.stop();
  });

  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;

  it('connects again after the socket is cut mid-payment, backfills the missed blocks and settles', async () => {
    const merchantWallet = randomWallet();
    const { key, merchant } = await merchantWithKey(svc);
    const patched = await svc.call('PATCH', `/admin/v1/merchants/${merchant.id}`, {
      token: svc.adminToken,
      body: { settlementWallets: { ethereum: merchantWallet } },
    });
    assert.equal(patched.status, 200);
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '25', currency: 'USD', chain: 'ethereum' },
    });
    assert.equal(created.status, 201);
    const p = created.body.data;
    const before = link.connections;

    // The socket drops and the node stays out of reach while the customer pays
    // and the chain moves on past the required confirmations.
    link.cut();
    await (await node.payer.sendTransaction({ to: p.address, value: baseUnits(p.cryptoAmount, 18) })).wait();
    await node.mine(4);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    assert.equal((await status(p.paymentId)).status, 'pending', 'nothing can be seen while the node is out of reach');
    link.reopen();

    await eventually(
      async () => {
        await node.mine(1);
        return status(p.paymentId);
      },
      (s) => s.status === 'settled',
      30_000,
    );
    assert.ok(link.connections > before, 'a new connection was opened');
    assert.equal((await node.provider.getBalance(merchantWallet)) > 0n, true);
  });
});
