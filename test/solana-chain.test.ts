// The service against the Solana test node (the real runtime), over its real
// HTTP API: SOL and USDT payments are detected, confirmed only once finalized
// and 32 slots deep, and settled with every balance exact to the lamport and
// the base unit; the merchant's token account is created when missing and the
// deposit's is closed with its rent to the treasury; a payment after the
// deadline stays on the deposit, the treasury getting only the platform fee;
// SOL paid by another program is seen; a dropped block withdraws its payment; an RPC of another
// cluster stops start-up.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Keypair, PublicKey } from '@solana/web3.js';
import { createCloseAccountInstruction } from '@solana/spl-token';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';
import { baseUnits } from './support/evm-flow.ts';
import type { SolanaTestNode } from './support/solana-node.ts';
import { solanaEnv, startSolanaService, stopSolanaService } from './support/solana-flow.ts';
import { settlementAmounts } from './support/settlement.ts';

describe('payments and settlement on the Solana test node', () => {
  let node: SolanaTestNode;
  let svc: RunningService;
  let payer: Keypair;
  before(async () => ({ node, svc, payer } = await startSolanaService()));
  after(() => stopSolanaService(node, svc));

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;
  const events = async (id: string, key: string) =>
    (await svc.call('GET', `/api/v1/invoices/${id}/events`, { token: key })).body.data as any[];
  const requested = async (id: string, key: string) => {
    const d = settlementAmounts(await events(id, key));
    return {
      gross: BigInt(d.grossAmount),
      platformFee: BigInt(d.platformFee),
      networkFee: BigInt(d.networkFee),
      net: BigInt(d.netAmount),
    };
  };
  const wallets = async () => (await admin('GET', '/admin/v1/wallets')).body.data as any[];

  async function merchant() {
    const wallet = Keypair.generate().publicKey.toBase58();
    const { key, merchant } = await merchantWithKey(svc);
    await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { solana: wallet } });
    return { key, wallet };
  }
  async function invoice(key: string, token?: string, amount = '25') {
    const res = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount, currency: 'USD', chain: 'solana', ...(token && { token }) },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
  }
  const mineUntil = <T>(read: () => Promise<T>, done: (v: T) => boolean) =>
    eventuallyMining(() => node.mine(1), read, done);
  const detected = (id: string) =>
    eventually(
      () => status(id),
      (s) => s.hasDetectedPayment,
    );

  it('lists the Solana fee wallet and treasury with their SOL balances', async () => {
    const [solana] = await wallets();
    assert.equal(solana.chain, 'solana');
    assert.notEqual(solana.feeWallet, solana.treasury);
    assert.equal(solana.feeWalletBalance, '0.000000000');
    await node.sendSol(payer, solana.feeWallet, 2_000_000_000n);
    await node.sendSol(payer, solana.treasury, 1_000_000n); // the treasury exists, as a real one would
    await node.mine();
    assert.equal((await wallets())[0].feeWalletBalance, '2.000000000');
  });

  it('refuses a token account as a settlement wallet when it is configured, naming solana', async () => {
    const { merchant } = await merchantWithKey(svc);
    const tokenAccount = node.tokenAccount(payer.publicKey, 'USDT').toBase58();
    const res = await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, {
      settlementWallets: { solana: tokenAccount },
    });
    assert.equal(res.status, 400);
    assert.equal(
      res.body.message,
      `settlementWallets.solana: ${tokenAccount} is a token account on solana, not a wallet: give the wallet's own address (the owner of its token accounts)`,
    );
    const wallet = payer.publicKey.toBase58();
    assert.equal(
      (await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { solana: wallet } })).status,
      200,
    );
  });

  it('a SOL payment confirms only once finalized, and settles exact to the lamport', async () => {
    const { key, wallet } = await merchant();
    const [{ feeWallet, treasury }] = await wallets();
    const p = await invoice(key);
    const lamports = baseUnits(p.cryptoAmount, 9);
    const paid = await node.sendSol(payer, p.address, lamports);
    await node.mine();
    const seen = await detected(p.paymentId);
    assert.equal(seen.paymentStatus, 'detected');
    assert.equal(seen.txHash, paid);
    const [feeBefore, treasuryBefore] = [await node.balance(feeWallet), await node.balance(treasury)];

    // 32 slots deep but not finalized yet (the node finalizes 33 behind for this test): not confirmed.
    node.finalizedLag = 33;
    await node.mine(31);
    const deep = await eventually(
      () => status(p.paymentId),
      (s) => s.confirmations >= 31,
    );
    assert.notEqual(deep.status, 'confirmed', 'a block above the finalized slot is not final');
    node.finalizedLag = 32;
    await node.mine(1);
    await eventually(
      () => status(p.paymentId),
      (s) => ['confirmed', 'settled'].includes(s.status),
    );

    const settled = await mineUntil(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    const { gross, platformFee, networkFee, net } = await requested(p.paymentId, key);
    assert.equal(gross, lamports);
    assert.equal(platformFee, lamports / 100n);
    assert.equal(networkFee, 10_000n, 'two signatures at 5,000 lamports');
    assert.equal(net, gross - platformFee - networkFee);
    assert.equal(baseUnits(settled.settledAmount, 9), net);
    assert.deepEqual(node.paymentsTo(wallet), [{ signature: settled.txHash, amount: net }]);
    assert.equal(await node.balance(p.address), 0n, 'nothing left behind');
    assert.equal(node.feeOf(settled.txHash), networkFee);
    assert.equal(await node.balance(feeWallet), feeBefore, 'the fee wallet paid the fee and got it back');
    assert.equal((await node.balance(treasury)) - treasuryBefore, platformFee);
  });

  it("a USDT payment settles: the merchant's token account created, the deposit's closed with its rent to the treasury", async () => {
    const { key, wallet } = await merchant();
    const [{ feeWallet, treasury }] = await wallets();
    const p = await invoice(key, 'USDT', '40');
    const units = baseUnits(p.cryptoAmount, 6);
    await node.sendToken(payer, p.address, 'USDT', units);
    await node.mine();
    await detected(p.paymentId);
    const depositAccount = node.tokenAccount(p.address, 'USDT');
    const rent = await node.balance(depositAccount);
    const [feeBefore, treasuryBefore, treasuryTokens] = [
      await node.balance(feeWallet),
      await node.balance(treasury),
      await node.tokenBalance(treasury, 'USDT'),
    ];
    assert.equal(await node.exists(node.tokenAccount(wallet, 'USDT')), false, 'the merchant has no USDT account yet');

    const settled = await mineUntil(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    const { platformFee, networkFee, net } = await requested(p.paymentId, key);
    assert.equal(networkFee, 0n, 'the fee wallet pays in SOL');
    assert.equal(platformFee, units / 100n);
    assert.equal(net, units - platformFee);
    assert.equal(baseUnits(settled.settledAmount, 6), net);
    assert.deepEqual(node.paymentsTo(wallet, 'USDT'), [{ signature: settled.txHash, amount: net }]);
    assert.equal((await node.tokenBalance(treasury, 'USDT')) - treasuryTokens, platformFee);
    assert.equal(await node.exists(depositAccount), false, "the deposit's token account is closed");
    assert.equal(await node.balance(p.address), 0n, 'the deposit address never held SOL');
    // The fee wallet paid the fee and the rent of the accounts it created; the treasury got the closed account's rent.
    const created = treasuryTokens === 0n ? 2n : 1n;
    assert.equal(feeBefore - (await node.balance(feeWallet)), node.feeOf(settled.txHash) + created * rent);
    assert.equal((await node.balance(treasury)) - treasuryBefore, rent);
  });

  /** Business time moved on by `seconds`, and the node's blocks stamped with it: a payment is late by its block's time. */
  async function advanceClock(seconds: number) {
    const now = (await admin('POST', '/dev/v1/clock/advance', { seconds })).body.data.now as string;
    node.clockAheadSeconds = Math.ceil((Date.parse(now) - Date.now()) / 1000);
  }

  for (const { token, decimals, late } of [
    { token: 'SOL', decimals: 9, late: 7_000_000n },
    { token: 'USDT', decimals: 6, late: 5_000_000n },
  ]) {
    it(`a ${token} invoice paid in time and again after its deadline settles exact: the merchant its net, the treasury the platform fee, the late payment stays on the deposit`, async () => {
      const { key, wallet } = await merchant();
      const [{ feeWallet, treasury }] = await wallets();
      const created = await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: {
          amount: '25',
          currency: 'USD',
          chain: 'solana',
          expiresInMinutes: 1,
          ...(token !== 'SOL' && { token }),
        },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const p = created.body.data as { paymentId: string; address: string; cryptoAmount: string };
      const pay = (amount: bigint) =>
        token === 'SOL' ? node.sendSol(payer, p.address, amount) : node.sendToken(payer, p.address, token, amount);
      const units = baseUnits(p.cryptoAmount, decimals);
      await pay(units);
      await node.mine();
      await detected(p.paymentId);
      // Paid in full in time, not yet confirmed: the deadline passing does not expire it, and what comes now is late.
      await advanceClock(61);
      await pay(late);
      await node.mine();
      const held = () => (token === 'SOL' ? node.balance(treasury) : node.tokenBalance(treasury, token));
      const [feeBefore, treasuryBefore] = [await node.balance(feeWallet), await held()];

      const settled = await mineUntil(
        () => status(p.paymentId),
        (s) => s.status === 'settled',
      );
      const { gross, platformFee, networkFee, net } = await requested(p.paymentId, key);
      assert.equal(gross, units, 'the late payment is not counted');
      assert.deepEqual(node.paymentsTo(wallet, token), [{ signature: settled.txHash, amount: net }]);
      assert.equal((await held()) - treasuryBefore, platformFee, 'the treasury gets the platform fee, no more');
      if (token === 'SOL') {
        assert.equal(node.feeOf(settled.txHash), networkFee);
        assert.equal(await node.balance(feeWallet), feeBefore, 'the fee wallet paid the network fee and got it back');
        assert.equal(await node.balance(p.address), late, 'the late payment stays on the deposit');
      } else {
        assert.equal(await node.tokenBalance(p.address, token), late, 'the late payment stays on the deposit');
        assert.equal(await node.exists(node.tokenAccount(p.address, token)), true, 'its account is not closed');
      }
      const refundable = (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/refundable`, { token: key })).body
        .data;
      assert.equal(baseUnits(refundable[0].excess, decimals), late, "the customer's, to refund");
    });
  }

  it('sees SOL paid by another program: the rent of a closed token account', async () => {
    const { key } = await merchant();
    const p = await invoice(key, undefined, '0.01');
    const spare = Keypair.generate();
    await node.airdrop(spare.publicKey, 100_000_000n);
    await node.mintTokens(spare.publicKey, 'USDT', 0n);
    await node.mine();
    const account = node.tokenAccount(spare.publicKey, 'USDT');
    const rent = await node.balance(account);
    const closed = await node.send(
      [createCloseAccountInstruction(account, new PublicKey(p.address), spare.publicKey)],
      [spare],
    );
    await node.mine();
    const seen = await detected(p.paymentId);
    assert.equal(seen.txHash, closed);
    assert.equal(baseUnits(seen.totalReceivedAmount, 9), rent);
  });

  it('a payment after skipped slots is detected at the confirmed slot, before any of them is finalized', async () => {
    const { key } = await merchant();
    const p = await invoice(key);
    await node.mine();
    node.skip(6);
    await node.sendSol(payer, p.address, baseUnits(p.cryptoAmount, 9));
    await node.mine();
    const paidAt = node.headSlot;
    // No block is produced while it waits: only what is confirmed now can be read.
    const seen = await detected(p.paymentId);
    assert.equal(seen.paymentStatus, 'detected');
    assert.equal(node.headSlot, paidAt);
    const finalized = (
      (await await fetch(node.url, {
        method: 'POST',
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'getSlot', params: [{ commitment: 'finalized' }] }),
      }).then((r) => r.json())) as { result: number }
    ).result;
    assert.ok(finalized < paidAt - 7, 'the skipped slots are not finalized: a validator still answers -32004 for them');
  });

  it('a dropped block withdraws its payment; it never confirms', async () => {
    const { key } = await merchant();
    const p = await invoice(key, 'USDT', '12');
    await node.sendToken(payer, p.address, 'USDT', baseUnits(p.cryptoAmount, 6));
    await node.mine();
    await detected(p.paymentId);
    node.drop(1);
    await node.mine(2);
    const after = await eventually(
      () => status(p.paymentId),
      (s) => !s.hasDetectedPayment,
    );
    assert.equal(after.status, 'pending');
    await node.mine(40);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await status(p.paymentId)).status, 'pending', 'a withdrawn payment never confirms');
    assert.deepEqual(
      (await events(p.paymentId, key)).map((e) => e.type),
      ['InvoiceCreated', 'AddressAssigned', 'PaymentDetected', 'PaymentApplied', 'PaymentReorged', 'PaymentWithdrawn'],
    );
  });

  it('an RPC of another cluster stops start-up with one line naming the variable', async () => {
    await assert.rejects(startTestService(solanaEnv(node, { CHAIN_SOLANA_CLUSTER: 'devnet' })), (error: Error) => {
      assert.match(error.message, /^CHAIN_SOLANA_RPC_URL is an RPC of Solana mainnet-beta, not Solana devnet/);
      assert.equal(error.message.split('\n').length, 1);
      return true;
    });
  });
});
