// Crashes against the Solana test node, with the real service process killed
// (SIGKILL) and restarted: a kill while payments are being detected (and
// payments made while it is down) misses none and counts none twice; a kill
// between a sweep's signing and its broadcast, or between its broadcast and
// its record, sends exactly one payout; a kill at the same steps of a refund
// from the deposit pays the customer once, and the settlement then pays
// exactly what the refund left; and a sweep signed but never sent whose
// blockhash expired while the service was down is replaced only once the
// chain shows it can never land.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Keypair } from '@solana/web3.js';
import { baseUnits } from './support/evm-flow.ts';
import { callService as call } from './support/process.ts';
import { crashHarness } from './support/crash.ts';
import { eventually as until } from './support/merchant.ts';
import type { SolanaTestNode } from './support/solana-node.ts';
import { solanaEnv, startSolanaNode } from './support/solana-flow.ts';
import { settlementAmounts } from './support/settlement.ts';

const ADMIN = 'solana-crash-test-admin-token';

describe('crashes on the Solana test node', () => {
  let node: SolanaTestNode;
  let payer: Keypair;
  before(async () => {
    node = await startSolanaNode();
    payer = Keypair.generate();
    await node.airdrop(payer.publicKey, 1_000_000_000_000n);
    await node.mintTokens(payer.publicKey, 'USDT', 10_000_000_000n);
    node.mine();
  });
  after(() => node.stop());

  const service = crashHarness('solana-crash', () => solanaEnv(node, { ADMIN_TOKEN: ADMIN }));
  const { start, kill, withDataDir } = service;
  async function merchant(url: string, wallet: string) {
    const m = (
      await call(url, 'POST', '/admin/v1/merchants', ADMIN, { name: 'Solana', settlementWallets: { solana: wallet } })
    ).body.data;
    return (await call(url, 'POST', `/admin/v1/merchants/${m.id}/api-keys`, ADMIN, {})).body.data.key as string;
  }
  async function invoice(url: string, key: string, token?: string) {
    const res = await call(url, 'POST', '/api/v1/payments', key, {
      amount: '20',
      currency: 'USD',
      chain: 'solana',
      ...(token && { token }),
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
  }
  async function pay(p: { address: string; cryptoAmount: string }, token?: string) {
    if (token) await node.sendToken(payer, p.address, token, baseUnits(p.cryptoAmount, 6));
    else await node.sendSol(payer, p.address, baseUnits(p.cryptoAmount, 9));
  }
  async function fundServiceWallets(url: string) {
    const [{ feeWallet, treasury }] = (await call(url, 'GET', '/admin/v1/wallets', ADMIN)).body.data;
    await node.sendSol(payer, feeWallet, 1_000_000_000n);
    if ((await node.balance(treasury)) === 0n) await node.sendSol(payer, treasury, 1_000_000n);
    node.mine();
  }
  const status = async (url: string, id: string) => (await call(url, 'GET', `/api/v1/invoices/${id}/status`)).body.data;
  const events = async (url: string, id: string, key: string) =>
    (await call(url, 'GET', `/api/v1/invoices/${id}/events`, key)).body.data as any[];
  /** Mines a block at each look, so that confirmations and sweeps move on. */
  const mineUntil = (url: string, id: string, done: (s: any) => boolean) =>
    until(
      async () => {
        const s = await status(url, id);
        if (!done(s)) node.mine(1);
        return s;
      },
      done,
      90_000,
    );
  /** Mines until the failpoint has killed the process. */
  const mineUntilKilled = () => service.untilKilled(() => node.mine(1));
  /** The merchant got exactly one payout, of the net amount, in the settlement's transaction. */
  async function paidOnce(url: string, p: { paymentId: string }, key: string, wallet: string, token?: string) {
    const settled = await mineUntil(url, p.paymentId, (s) => s.status === 'settled');
    const history = await events(url, p.paymentId, key);
    const net = BigInt(settlementAmounts(history).netAmount);
    assert.deepEqual(
      node.paymentsTo(wallet, token),
      [{ signature: settled.txHash, amount: net }],
      'paid once, exactly',
    );
    assert.equal(history.filter((e) => e.type === 'InvoiceSettled').length, 1);
    return history;
  }

  it('a kill during detection, and payments while the service is down, miss nothing', async () => {
    await withDataDir(async () => {
      let url = await start();
      const key = await merchant(url, Keypair.generate().publicKey.toBase58());
      const invoices: { token: string | undefined; p: Awaited<ReturnType<typeof invoice>> }[] = [];
      for (let i = 0; i < 6; i++) {
        const token = i % 2 === 0 ? undefined : 'USDT';
        invoices.push({ token, p: await invoice(url, key, token) });
      }
      // Two paid and seen; two more paid as the process dies; two while it is down.
      for (const { p, token } of invoices.slice(0, 2)) await pay(p, token);
      node.mine(1);
      await until(
        () => status(url, invoices[0]!.p.paymentId),
        (s) => s.hasDetectedPayment,
      );
      for (const { p, token } of invoices.slice(2, 4)) await pay(p, token);
      node.mine(1);
      await kill();
      for (const { p, token } of invoices.slice(4)) await pay(p, token);
      node.mine(1);
      node.skip(2); // and slots without a block while it was away
      node.mine(2);

      url = await start();
      for (const { p } of invoices) {
        await mineUntil(url, p.paymentId, (s) => ['confirmed', 'settled'].includes(s.status));
        const types = (await events(url, p.paymentId, key)).map((e) => e.type);
        assert.equal(types.filter((t) => t === 'PaymentDetected').length, 1, `${p.paymentId} detected once`);
        assert.equal(types.filter((t) => t === 'PaymentApplied').length, 1, `${p.paymentId} counted once`);
      }
    });
  });

  for (const [failpoint, token] of [
    ['settlement:after-prepare', 'USDT'],
    ['settlement:after-broadcast', 'USDT'],
    ['settlement:after-prepare', undefined],
    ['settlement:after-broadcast', undefined],
  ] as const) {
    it(`a kill at ${failpoint} (${token ?? 'SOL'}) and a restart send exactly one payout`, async () => {
      await withDataDir(async () => {
        let url = await start({ FAILPOINTS: failpoint });
        await fundServiceWallets(url);
        const wallet = Keypair.generate().publicKey.toBase58();
        const key = await merchant(url, wallet);
        const p = await invoice(url, key, token);
        await pay(p, token);
        await mineUntilKilled();

        url = await start();
        const history = await paidOnce(url, p, key, wallet, token);
        assert.equal(history.filter((e) => e.type === 'SettlementTransactionPrepared').length, 1, 'one attempt');
      });
    });
  }

  for (const [failpoint, token] of [
    ['refund:after-prepare', undefined],
    ['refund:after-broadcast', 'USDT'],
  ] as const) {
    it(`a kill at ${failpoint} (${token ?? 'SOL'}) pays the customer once from the deposit; the settlement then pays the rest`, async () => {
      await withDataDir(async () => {
        let url = await start({ FAILPOINTS: failpoint });
        await fundServiceWallets(url);
        // No settlement wallet yet: the settlement waits, unprepared, and the deposit pays the refund.
        const m = (await call(url, 'POST', '/admin/v1/merchants', ADMIN, { name: 'Solana' })).body.data;
        const key = (await call(url, 'POST', `/admin/v1/merchants/${m.id}/api-keys`, ADMIN, {})).body.data.key;
        const p = await invoice(url, key, token);
        const excess = token ? 3_000_000n : 10_000_000n;
        const received = baseUnits(p.cryptoAmount, token ? 6 : 9) + excess;
        if (token) await node.sendToken(payer, p.address, token, received);
        else await node.sendSol(payer, p.address, received);
        await mineUntil(url, p.paymentId, (s) => s.status === 'confirmed');
        const customer = Keypair.generate().publicKey.toBase58();
        const created = await call(url, 'POST', `/api/v1/invoices/${p.paymentId}/refunds`, key, {
          kind: 'excess',
          destination: customer,
        });
        assert.equal(created.status, 201, JSON.stringify(created.body));
        const refundId = created.body.data.id as string;
        await call(url, 'POST', `/api/v1/refunds/${refundId}/approve`, key).catch(() => undefined);
        await mineUntilKilled();

        url = await start();
        const refund = await until(
          async () => {
            const r = (await call(url, 'GET', `/api/v1/refunds/${refundId}`, key)).body.data;
            if (r.status !== 'completed') node.mine(1);
            return r;
          },
          (r) => r.status === 'completed',
          90_000,
        );
        assert.equal(refund.fundedFrom, 'deposit');
        const net = baseUnits(refund.netAmount, token ? 6 : 9);
        assert.equal(baseUnits(refund.amount, token ? 6 : 9), excess);
        assert.deepEqual(
          node.paymentsTo(customer, token),
          [{ signature: refund.transactionHash, amount: net }],
          'paid once, exactly',
        );

        const wallet = Keypair.generate().publicKey.toBase58();
        await call(url, 'PATCH', `/admin/v1/merchants/${m.id}`, ADMIN, { settlementWallets: { solana: wallet } });
        const history = await paidOnce(url, p, key, wallet, token);
        const priced = settlementAmounts(history);
        assert.equal(
          BigInt(priced.netAmount),
          received - excess - BigInt(priced.platformFee) - BigInt(priced.networkFee),
          'the settlement pays what the refund left, less its fees',
        );
        const prepared = history.filter((e) => e.type === 'RefundTransactionPrepared');
        assert.equal(prepared.length, 1, 'one refund attempt');
      });
    });
  }

  it('a sweep signed but never sent, whose blockhash expired while the service was down, is replaced: one payout', async () => {
    await withDataDir(async () => {
      let url = await start({ FAILPOINTS: 'settlement:after-prepare' });
      await fundServiceWallets(url);
      const wallet = Keypair.generate().publicKey.toBase58();
      const key = await merchant(url, wallet);
      const p = await invoice(url, key, 'USDT');
      await pay(p, 'USDT');
      await mineUntilKilled();
      node.mine(200); // past the recorded sweep's last valid block height, finalized too

      url = await start();
      const history = await paidOnce(url, p, key, wallet, 'USDT');
      const prepared = history.filter((e) => e.type === 'SettlementTransactionPrepared');
      assert.equal(prepared.length, 2, 'the expired one, then its replacement');
      assert.equal(node.findTransaction(prepared[0].data.txHash), undefined, 'the expired one never landed');
    });
  });
});
