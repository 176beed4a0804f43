// Issue 27's run: 50 invoices in SOL, USDC and USDT, each to its own
// merchant, on a fresh deployment (an empty treasury); some token payments go
// to a token account the payer created for the deposit instead of its
// associated one; slots are skipped along the way, and from the middle on
// the RPC is a load balancer with a backend 40 slots behind. A token account
// offered as a settlement wallet is refused. Every invoice settles exactly
// once, and each merchant receives exactly its settlement's net amount.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Keypair } from '@solana/web3.js';
import { merchantWithKey } from './support/merchant.ts';
import type { RunningService } from './support/service.ts';
import { baseUnits } from './support/evm-flow.ts';
import type { SolanaTestNode } from './support/solana-node.ts';
import { startSolanaService, stopSolanaService } from './support/solana-flow.ts';
import { settlementAmounts } from './support/settlement.ts';

const INVOICES = 50;
const TOKENS = ['SOL', 'USDC', 'USDT'] as const;

describe('fifty Solana invoices on mainnet terms', () => {
  let node: SolanaTestNode, svc: RunningService, payer: Keypair;
  before(async () => ({ node, svc, payer } = await startSolanaService()));
  after(() => stopSolanaService(node, svc));

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;

  it('settles every invoice once, each merchant getting exactly the net amount', async () => {
    const [wallets] = (await admin('GET', '/admin/v1/wallets')).body.data as { feeWallet: string; treasury: string }[];
    await node.sendSol(payer, wallets!.feeWallet, 100_000_000_000n); // the treasury stays empty
    await node.mine();

    const refused = await merchantWithKey(svc);
    const tokenAccount = node.tokenAccount(payer.publicKey, 'USDC').toBase58();
    const answer = await admin('PATCH', `/admin/v1/merchants/${refused.merchant.id}`, {
      settlementWallets: { solana: tokenAccount },
    });
    assert.equal(answer.status, 400);

    const invoices: { id: string; key: string; wallet: string; token: (typeof TOKENS)[number]; address: string }[] = [];
    for (let i = 0; i < INVOICES; i++) {
      const token = TOKENS[i % 3]!;
      const wallet = Keypair.generate().publicKey.toBase58();
      const { key, merchant } = await merchantWithKey(svc);
      const patched = await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, {
        settlementWallets: { solana: wallet },
      });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      const res = await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount: String(20 + i), currency: 'USD', chain: 'solana', ...(token !== 'SOL' && { token }) },
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      const p = res.body.data as { paymentId: string; address: string; cryptoAmount: string };
      if (token === 'SOL') await node.sendSol(payer, p.address, baseUnits(p.cryptoAmount, 9));
      else if (i % 4 === 1) await node.sendTokenToNewAccount(payer, p.address, token, baseUnits(p.cryptoAmount, 6));
      else await node.sendToken(payer, p.address, token, baseUnits(p.cryptoAmount, 6));
      invoices.push({ id: p.paymentId, key, wallet, token, address: p.address });
      if (i === INVOICES / 2) node.lagging = true;
      if (i % 5 === 4) {
        await node.mine();
        if (i % 10 === 9) node.skip(3);
      }
    }
    await node.mine();

    // Beyond the payout engine's third retry (10 s, 1 min, 5 min after failures): a sweep the lagging backend
    // failed three times still settles within it.
    const deadline = Date.now() + 600_000;
    for (let round = 0; ; round++) {
      const states = await Promise.all(invoices.map((p) => status(p.id)));
      if (states.every((s) => s.status === 'settled')) break;
      if (Date.now() > deadline) {
        // What each invoice still waiting last did, so that a failure here says why.
        const waiting = await Promise.all(
          invoices
            .filter((_, i) => states[i]!.status !== 'settled')
            .map(async (p) => {
              const events = (await svc.call('GET', `/api/v1/invoices/${p.id}/events`, { token: p.key })).body.data as {
                type: string;
                data: unknown;
              }[];
              return { token: p.token, id: p.id, last: events.slice(-6).map((e) => [e.type, e.data]) };
            }),
        );
        assert.fail(`not settled: ${JSON.stringify(waiting)}`);
      }
      await node.mine();
      if (round % 25 === 24) node.skip(2);
      await new Promise((r) => setTimeout(r, 100));
    }
    node.lagging = false;

    for (const p of invoices) {
      const events = (await svc.call('GET', `/api/v1/invoices/${p.id}/events`, { token: p.key })).body.data as any[];
      const net = BigInt(settlementAmounts(events).netAmount);
      const paid = node.paymentsTo(p.wallet, p.token).map((t) => t.amount);
      assert.deepEqual(paid, [net], `${p.token} invoice ${p.id}: paid once, exactly`);
      assert.equal(events.filter((e) => e.type === 'SettlementCompleted').length, 1);
    }
  });
});
