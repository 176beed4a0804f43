// The service against the Tron test node, over its real HTTP API: TRX and
// USDT payments are detected, confirmed only once solidified and 19 deep,
// and settled with the merchant's and the treasury's balances exact to the
// sun; a reverted or out-of-energy USDT transfer pays nothing; a transfer
// made through another contract is seen by its Transfer log; a fork
// withdraws a detected payment; a node of another network stops start-up; a
// platform fee call that keeps running out of energy is on the operator's list.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';
import { baseUnits } from './support/evm-flow.ts';
import { randomTronKey, type TronKey, type TronTestNode } from './support/tron-node.ts';
import { startTronService, stopTronService, TEST_ROUTER, TEST_USDT, tronEnv } from './support/tron-flow.ts';
import { trxInToken } from '../adapters/chains/tron/index.ts';
import { settlementAmounts } from './support/settlement.ts';

describe('payments and settlement on the Tron test node', () => {
  let node: TronTestNode, svc: RunningService, payer: TronKey;
  before(async () => ({ node, svc, payer } = await startTronService()));
  after(() => stopTronService(node, svc));

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
    const wallet = randomTronKey().address;
    const { key, merchant } = await merchantWithKey(svc);
    await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { tron: wallet } });
    return { key, wallet };
  }
  async function invoice(key: string, token?: string, amount = '25') {
    const res = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount, currency: 'USD', chain: 'tron', ...(token && { token }) },
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

  /** A USDT invoice of `amount` USD, paid in full and detected. */
  const paidInUsdt = async (key: string, amount: string) => {
    const p = await invoice(key, 'USDT', amount);
    const units = baseUnits(p.cryptoAmount, 6);
    await node.sendToken(payer, TEST_USDT, p.address, units);
    node.mine(1);
    await detected(p.paymentId);
    return { p, units };
  };

  it('lists the Tron fee wallet and treasury with their TRX balances', async () => {
    const [tron] = await wallets();
    assert.equal(tron.chain, 'tron');
    assert.match(tron.feeWallet, /^T[1-9A-HJ-NP-Za-km-z]{33}$/);
    assert.match(tron.treasury, /^T[1-9A-HJ-NP-Za-km-z]{33}$/);
    assert.notEqual(tron.feeWallet, tron.treasury);
    assert.equal(tron.feeWalletBalance, '0.000000');
    await node.sendTrx(payer, tron.feeWallet, 500_000_000n);
    await node.sendTrx(payer, tron.treasury, 1_000_000n); // the treasury exists, as a real one would
    node.mine(1);
    assert.equal((await wallets())[0].feeWalletBalance, '500.000000');
  });

  it('a TRX payment confirms only once solidified, and settles exact to the sun', async () => {
    const { key, wallet } = await merchant();
    await node.sendTrx(payer, wallet, 1_000_000n); // the merchant's wallet is an existing account
    const [{ treasury }] = await wallets();
    const p = await invoice(key);
    const sun = baseUnits(p.cryptoAmount, 6);
    await node.sendTrx(payer, p.address, sun);
    node.mine(1);
    const seen = await detected(p.paymentId);
    assert.equal(seen.paymentStatus, 'detected');
    const treasuryBefore = node.balance(treasury);
    const walletBefore = node.balance(wallet);

    // 19 deep but not yet solidified (the node solidifies 19 behind its head): not confirmed.
    node.mine(18);
    const deep = await eventually(
      () => status(p.paymentId),
      (s) => s.confirmations >= 18,
    );
    assert.notEqual(deep.status, 'confirmed', 'a block above the solidified one is not final');
    node.mine(1);
    await eventually(
      () => status(p.paymentId),
      (s) => ['confirmed', 'settled'].includes(s.status),
    );

    const settled = await mineUntil(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    node.mine(1); // the platform fee, sent once the payout was final
    const { gross, platformFee, networkFee, net } = await requested(p.paymentId, key);
    assert.equal(gross, sun);
    assert.equal(platformFee, sun / 100n);
    assert.ok(networkFee > 0n, 'the quote is the bandwidth of two transfers');
    assert.equal(net, gross - platformFee - networkFee);
    assert.equal(baseUnits(settled.settledAmount, 6), net);
    // The merchant got the net amount to the sun; the deposit address is empty; the
    // treasury got the rest after what the chain charged (here nothing: free bandwidth).
    assert.equal(node.balance(wallet) - walletBefore, net);
    assert.equal(node.balance(p.address), 0n);
    const sent = node.trxTransfers({ from: p.address });
    assert.equal(sent.length, 2, 'the platform fee and the payout');
    const charged = sent.reduce((total, t) => total + node.feeOf(t.txid), 0n);
    assert.equal(node.balance(treasury) - treasuryBefore, gross - net - charged);
    assert.deepEqual(
      node.trxTransfers({ to: wallet }).filter((t) => t.txid === settled.txHash),
      [{ txid: settled.txHash, amount: net }],
    );
  });

  it('a USDT payment settles through an energy top-up from the fee wallet, exact to the base unit', async () => {
    const { key, wallet } = await merchant();
    const [{ feeWallet, treasury }] = await wallets();
    const feeBefore = node.balance(feeWallet);
    const treasuryBefore = node.tokenBalance(TEST_USDT, treasury);
    const { p, units } = await paidInUsdt(key, '40');
    assert.equal(node.exists(p.address), false, 'receiving a token creates no account');
    const settled = await mineUntil(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    const { platformFee, networkFee, net } = await requested(p.paymentId, key);
    assert.ok(networkFee > 0n, 'the TRX the fee wallet burns is charged in USDT');
    assert.equal(platformFee, units / 100n);
    assert.equal(net, units - platformFee - networkFee);
    assert.equal(node.tokenBalance(TEST_USDT, wallet), net);
    assert.equal(baseUnits(settled.settledAmount, 6), net);
    assert.equal(node.tokenBalance(TEST_USDT, treasury) - treasuryBefore, platformFee + networkFee);
    assert.equal(node.tokenBalance(TEST_USDT, p.address), 0n);
    assert.deepEqual(node.tokenTransfersTo(TEST_USDT, wallet), [{ txid: settled.txHash, amount: net }]);
    node.mine(1); // the leftover's way back
    const spent = feeBefore - node.balance(feeWallet);
    assert.ok(spent > 0n, 'the fee wallet paid the top-up');
    // The development rates (RATE_PROVIDER=fixed): TRX at 0.25 USD, USDT at 1.
    assert.ok(
      trxInToken(spent, '0.25', '1', 6) <= networkFee,
      `the fee wallet spent ${spent} sun, no more than it charged`,
    );
    assert.ok(node.balance(p.address) < spent, 'the deposit address keeps at most what the energy did not burn');

    // The top-up (a TRX transfer to the deposit address) is not taken for a payment.
    const later = await invoice(key, 'USDT', '2');
    await node.sendToken(payer, TEST_USDT, later.address, baseUnits(later.cryptoAmount, 6));
    node.mine(1);
    await detected(later.paymentId);
    const after = await status(p.paymentId);
    assert.equal(after.paymentIssueType, null, 'the top-up is not a wrong-token payment');
  });

  it('a reverted USDT transfer and one out of energy pay nothing; one made through another contract pays', async () => {
    const { key } = await merchant();
    const broke = randomTronKey();
    node.fund(broke.address, 100_000_000n);
    node.mintToken(TEST_USDT, broke.address, 1n);
    const reverted = await invoice(key, 'USDT', '10');
    const revertTx = await node.sendToken(broke, TEST_USDT, reverted.address, baseUnits(reverted.cryptoAmount, 6));
    const starved = await invoice(key, 'USDT', '10');
    const starvedTx = await node.sendToken(payer, TEST_USDT, starved.address, baseUnits(starved.cryptoAmount, 6), {
      feeLimit: 1_000_000,
    });
    const routed = await invoice(key, 'USDT', '10');
    await node.sendToken(payer, TEST_USDT, routed.address, baseUnits(routed.cryptoAmount, 6), { via: TEST_ROUTER });
    node.mine(1);
    await detected(routed.paymentId);
    // The block is read as a whole: the other two were in it and paid nothing.
    for (const p of [reverted, starved]) assert.equal((await status(p.paymentId)).hasDetectedPayment, false);
    assert.ok(node.feeOf(revertTx) > 0n && node.feeOf(starvedTx) > 0n, 'both were mined and charged');
  });

  it('a fork that drops a detected payment withdraws it; it never confirms', async () => {
    const { key } = await merchant();
    const p = await invoice(key, 'USDT', '12');
    await node.sendToken(payer, TEST_USDT, p.address, baseUnits(p.cryptoAmount, 6));
    node.mine(1);
    await detected(p.paymentId);
    node.fork(1);
    node.mine(2); // a longer chain without the payment
    const after = await eventually(
      () => status(p.paymentId),
      (s) => !s.hasDetectedPayment,
    );
    assert.equal(after.status, 'pending');
    node.mine(25);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await status(p.paymentId)).status, 'pending', 'a withdrawn payment never confirms');
    assert.deepEqual(
      (await events(p.paymentId, key)).map((e) => e.type),
      ['InvoiceCreated', 'AddressAssigned', 'PaymentDetected', 'PaymentApplied', 'PaymentReorged', 'PaymentWithdrawn'],
    );
  });

  it('refuses a contract as a Tron settlement wallet, with a 400 naming the chain', async () => {
    const contract = randomTronKey().address;
    node.deployContract(contract);
    const { merchant } = await merchantWithKey(svc);
    const res = await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { tron: contract } });
    assert.equal(res.status, 400, JSON.stringify(res.body));
    assert.match(JSON.stringify(res.body), /tron/);
  });

  it('a node of another network stops start-up with one line naming the variable', async () => {
    const { CHAIN_TRON_NETWORK: _, ...mainnet } = tronEnv(node);
    await assert.rejects(startTestService(mainnet), (error: Error) => {
      assert.match(
        error.message,
        /^CHAIN_TRON_RPC_URL is a node of the network whose genesis block is [0-9a-f]{64}, not Tron mainnet/,
      );
      assert.equal(error.message.split('\n').length, 1);
      return true;
    });
  });

  // Last: it leaves the service's prices high (read every 10 minutes).
  it("a USDT settlement whose platform fee call keeps running out of energy completes, on the operator's list", async () => {
    const { key, wallet } = await merchant();
    const [{ feeWallet, treasury }] = await wallets();
    node.fund(feeWallet, 10_000_000_000n);
    const { p } = await paidInUsdt(key, '40');
    const settlement = await mineUntil(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: key })).body.data,
      (s) => s?.status === 'submitted',
    );
    // The energy price raised (by proposal) once the payout went, and again each time the service reads the
    // prices anew: every fee call is built at a price already old when it runs, and is mined OUT_OF_ENERGY.
    const pricesRead = () => node.requests.get('/wallet/getchainparameters') ?? 0;
    let read = pricesRead();
    node.fees.getEnergyFee = 200;
    try {
      const attention = await eventuallyMining(
        () => {
          if (pricesRead() > read) [read, node.fees.getEnergyFee] = [pricesRead(), node.fees.getEnergyFee * 2];
          node.mine(1);
        },
        async () => (await admin('GET', '/admin/v1/attention')).body.data as any[],
        (items) => items.some((a) => a.subject === settlement.id),
        120_000,
      );
      const item = attention.find((a) => a.subject === settlement.id);
      assert.equal(item.kind, 'platform_fee_uncollected');
      assert.equal(item.reason, 'platform_fee_uncollected');
      assert.ok(item.detail.includes(p.address), item.detail);
      const { platformFee, networkFee, net } = await requested(p.paymentId, key);
      // The merchant's money is out (the invoice's read model may follow a moment later).
      await eventually(
        () => status(p.paymentId),
        (s) => s.status === 'settled',
      );
      assert.equal(node.tokenBalance(TEST_USDT, wallet), net);
      // Other settlements' fees may reach the treasury meanwhile: none of this deposit's calls did.
      const calls = new Set(node.calls(p.address).map((c) => c.txid));
      assert.ok(
        !node.tokenTransfersTo(TEST_USDT, treasury).some((t) => calls.has(t.txid)),
        'no fee reached the treasury',
      );
      assert.equal(node.tokenBalance(TEST_USDT, p.address), platformFee + networkFee, 'it stays on the deposit');
      assert.deepEqual(
        node.calls(p.address).map((c) => c.result),
        ['SUCCESS', 'OUT_OF_ENERGY', 'OUT_OF_ENERGY', 'OUT_OF_ENERGY'],
      );
      const raised = (await events(p.paymentId, key)).find((e) => e.type === 'SettlementAttentionRaised');
      assert.equal(raised?.data.reason, 'platform_fee_uncollected');
      assert.match(raised.data.detail, /OUT_OF_ENERGY/);
      const resolved = await admin('POST', `/admin/v1/settlements/${settlement.id}/resolve`, {
        note: 'fee swept to the treasury by hand',
      });
      assert.equal(resolved.status, 200);
      const after = (await admin('GET', '/admin/v1/attention')).body.data as any[];
      assert.ok(!after.some((a) => a.subject === settlement.id));
    } finally {
      node.fees.getEnergyFee = 100;
    }
  });
});
