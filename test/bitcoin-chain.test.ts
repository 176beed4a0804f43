// The service against the Bitcoin test node (regtest), over its real HTTP
// API: a payment is detected, confirmed after 2 blocks and settled with the
// merchant's and the treasury's outputs exact to the satoshi and the fee
// exactly inputs − outputs; a payment is seen from the mempool at 0
// confirmations; two outputs to one address are two payments; an RBF
// replacement withdraws the replaced payment and is detected itself; a reorg
// withdraws a payment and it comes back; a node of another network stops
// start-up.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';
import { baseUnits, SERVICE_MNEMONIC } from './support/evm-flow.ts';
import { BitcoinTestNode, randomBitcoinKey, type BitcoinKey } from './support/bitcoin-node.ts';
import { settlementAmounts } from './support/settlement.ts';

// The sweep spends only the recorded payments a payout names (its sources):
// the settlement path passes them once the lead's payout engine lands.

describe('payments and settlement on the Bitcoin test node', () => {
  let node: BitcoinTestNode;
  let svc: RunningService;
  let payer: BitcoinKey;
  const env = () => ({
    CHAINS: 'bitcoin',
    CHAIN_BITCOIN_RPC_URL: node.rpcUrl,
    CHAIN_BITCOIN_NETWORK: 'regtest',
    WALLET_MNEMONIC: SERVICE_MNEMONIC,
    RATE_LIMITS: 'off',
  });
  before(async () => {
    node = await new BitcoinTestNode().start();
    payer = randomBitcoinKey();
    for (let i = 0; i < 20; i++) node.fund(payer.address, 50_000_000n);
    svc = await startTestService(env());
  });
  after(async () => {
    await svc?.close();
    await node?.stop();
  });

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;
  const events = async (id: string, key: string) =>
    (await svc.call('GET', `/api/v1/invoices/${id}/events`, { token: key })).body.data as any[];
  async function merchant() {
    const wallet = randomBitcoinKey().address;
    const { key, merchant } = await merchantWithKey(svc);
    await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { bitcoin: wallet } });
    return { key, wallet };
  }
  async function invoice(key: string, amount = '100') {
    const res = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount, currency: 'USD', chain: 'bitcoin' },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
  }
  const mineUntil = <T>(read: () => Promise<T>, done: (v: T) => boolean) =>
    eventuallyMining(() => node.mine(1), read, done);

  it('names the regtest treasury, and deposit addresses carry the regtest prefix', async () => {
    const [btc] = (await admin('GET', '/admin/v1/wallets')).body.data;
    assert.equal(btc.chain, 'bitcoin');
    assert.match(btc.treasury, /^bcrt1q/);
    assert.equal(btc.feeWallet, null);
    const { key } = await merchant();
    assert.match((await invoice(key)).address, /^bcrt1q/);
  });

  it('a payment in a coinbase output confirms only once it can be spent, 100 blocks on', async () => {
    const { key } = await merchant();
    const p = await invoice(key, '1');
    // A miner pays the invoice with its block reward (consensus/tx_verify.cpp: spendable at 100 confirmations).
    node.mine(1, { coinbaseTo: p.address });
    await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment === true,
    );
    node.mine(10);
    await new Promise((r) => setTimeout(r, 1500));
    assert.notEqual((await status(p.paymentId)).status, 'confirmed', 'not before it can be paid out');
    node.mine(89);
    await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'confirmed' || s.status === 'settled',
    );
  });

  it('a payment confirms after 2 blocks and settles exact to the satoshi', async () => {
    const { key, wallet } = await merchant();
    const [{ treasury }] = (await admin('GET', '/admin/v1/wallets')).body.data;
    const p = await invoice(key);
    const sats = baseUnits(p.cryptoAmount, 8);
    node.pay(payer, [{ address: p.address, sats }]);
    node.mine(1);
    const seen = await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment,
    );
    assert.notEqual(seen.status, 'confirmed', 'one block is not two confirmations');
    const settled = await mineUntil(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    const d = settlementAmounts(await events(p.paymentId, key));
    const gross = BigInt(d.grossAmount);
    const platformFee = BigInt(d.platformFee);
    const networkFee = BigInt(d.networkFee);
    const net = BigInt(d.netAmount);
    assert.equal(gross, sats);
    assert.equal(platformFee, sats / 100n);
    assert.equal(net, gross - platformFee - networkFee);
    assert.equal(baseUnits(settled.settledAmount, 8), net);
    assert.deepEqual(node.received(wallet), [{ txid: settled.txHash, sats: net }]);
    assert.deepEqual(
      node.received(treasury).filter((r) => r.txid === settled.txHash),
      [{ txid: settled.txHash, sats: platformFee }],
    );
    // The fee the network took is exactly inputs − outputs, and is what was recorded.
    assert.equal(node.minedFee(settled.txHash), networkFee);
  });

  it('two outputs to one address in one transaction are two payments', async () => {
    const { key } = await merchant();
    const p = await invoice(key, '50');
    const half = baseUnits(p.cryptoAmount, 8) / 2n;
    const tx = node.pay(payer, [
      { address: p.address, sats: half },
      { address: p.address, sats: baseUnits(p.cryptoAmount, 8) - half },
    ]);
    node.mine(1);
    const seen = await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment && s.paymentStatus !== 'partial',
    );
    assert.notEqual(seen.paymentStatus, 'partial');
    const detected = (await events(p.paymentId, key)).filter((e) => e.type === 'PaymentApplied');
    assert.equal(detected.length, 2);
    assert.deepEqual(detected.map((e) => e.data.txHash).sort(), [tx.getId(), tx.getId()]);
  });

  it('a payment is seen from the mempool at 0 confirmations, and counts once it is mined', async () => {
    const { key } = await merchant();
    const p = await invoice(key, '40');
    node.pay(payer, [{ address: p.address, sats: baseUnits(p.cryptoAmount, 8) }]);
    const seen = await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment,
    );
    assert.equal(seen.confirmations, 0);
    assert.equal(seen.paymentStatus, 'detected');
    node.mine(2);
    await eventually(
      () => status(p.paymentId),
      (s) => ['confirmed', 'settled'].includes(s.status),
    );
    const types = (await events(p.paymentId, key)).map((e) => e.type);
    assert.deepEqual(
      types.filter((t) => t.startsWith('Payment')),
      ['PaymentDetected', 'PaymentApplied', 'PaymentMined', 'PaymentConfirmed'],
    );
    // Mined in the first of the two blocks.
    assert.equal(
      (await events(p.paymentId, key)).find((e) => e.type === 'PaymentMined').data.blockNumber,
      node.tip.height - 1,
    );
  });

  it('an RBF replacement withdraws the transaction it replaced and is detected itself', async () => {
    const { key } = await merchant();
    const p = await invoice(key, '30');
    const sats = baseUnits(p.cryptoAmount, 8);
    const first = node.pay(payer, [{ address: p.address, sats: sats / 2n }], { satsPerVbyte: 2n });
    await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment,
    );
    const second = node.replace(payer, first, [{ address: p.address, sats }], 10n);
    assert.equal(node.inMempool(first.getId()), false, 'the replacement evicted the first');
    const all = await eventually(
      () => events(p.paymentId, key),
      (list) =>
        list.some((e) => e.type === 'PaymentWithdrawn') && list.filter((e) => e.type === 'PaymentApplied').length === 2,
    );
    assert.deepEqual(
      all.filter((e) => e.type === 'PaymentApplied').map((e) => e.data.txHash),
      [first.getId(), second.getId()],
    );
    assert.equal(all.filter((e) => e.type === 'PaymentWithdrawn').length, 1, 'the first is withdrawn');
    node.mine(2);
    const done = await eventually(
      () => status(p.paymentId),
      (s) => ['confirmed', 'settled'].includes(s.status),
    );
    assert.notEqual(done.paymentStatus, 'partial', 'only the replacement counts');
  });

  it('a reorg withdraws a payment; back in the mempool it is seen again, and counts when mined again', async () => {
    const { key } = await merchant();
    const p = await invoice(key, '20');
    node.pay(payer, [{ address: p.address, sats: baseUnits(p.cryptoAmount, 8) }]);
    const [mined] = node.mine(1);
    await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment && s.confirmations === 1,
    );
    node.invalidate(mined!); // its transaction goes back to the mempool
    // A competing block without it takes the height: another hash there is
    // the evidence of the reorg (a shorter chain alone may be a lagging node).
    const floor = node.miningFloor;
    node.miningFloor = 1_000_000n;
    node.mine(1);
    node.miningFloor = floor;
    await eventually(
      async () => (await events(p.paymentId, key)).map((e) => e.type),
      (types) => types.includes('PaymentWithdrawn') && types.filter((t) => t === 'PaymentApplied').length === 2,
    );
    node.mine(2);
    await eventually(
      () => status(p.paymentId),
      (s) => ['confirmed', 'settled'].includes(s.status),
    );
    const types = (await events(p.paymentId, key)).map((e) => e.type).filter((t) => t.startsWith('Payment'));
    assert.deepEqual(types.slice(0, 6), [
      'PaymentDetected',
      'PaymentApplied',
      'PaymentReorged',
      'PaymentWithdrawn',
      'PaymentDetected',
      'PaymentApplied',
    ]);
    assert.ok(types.includes('PaymentMined') && types.includes('PaymentConfirmed'), types.join(','));
  });

  it('a sweep stuck below the market rate is replaced by RBF from the same coins, and pays once', async () => {
    const { key, wallet } = await merchant();
    node.feeRate = 1_000n; // 1 sat/vB: the sweep's fee is recorded at this rate
    node.miningFloor = 5n; // and the miners want 5
    try {
      // Large enough that the treasury's share (1%) pays the higher fee.
      const p = await invoice(key, '800');
      node.pay(payer, [{ address: p.address, sats: baseUnits(p.cryptoAmount, 8) }]);
      await mineUntil(
        () => status(p.paymentId),
        (s) => s.status === 'confirmed',
      );
      const settlement = async () =>
        (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: key })).body.data;
      const stuck = await eventually(settlement, (s) => s.status === 'submitted');
      node.mine(3); // the sweep stays in the mempool
      assert.equal(node.inMempool(stuck.transactionHash), true);
      node.feeRate = 10_000n; // the market moved to 10 sat/vB
      // The next pass finds it stuck; its retry (10 s later) replaces it.
      await eventually(
        async () => {
          await admin('POST', '/dev/v1/clock/advance', { seconds: 15 });
          return settlement();
        },
        (s) => s.transactionHash !== stuck.transactionHash && node.inMempool(s.transactionHash ?? ''),
      );
      assert.equal(node.inMempool(stuck.transactionHash), false, 'the replacement evicted the stuck sweep');
      const settled = await mineUntil(
        () => status(p.paymentId),
        (s) => s.status === 'settled',
      );
      const d = settlementAmounts(await events(p.paymentId, key));
      assert.deepEqual(
        node.received(wallet),
        [{ txid: settled.txHash, sats: BigInt(d.netAmount) }],
        'paid once, exactly',
      );
      assert.ok(
        node.minedFee(settled.txHash) > BigInt(d.networkFee),
        'the replacement paid more, from the treasury share',
      );
    } finally {
      node.feeRate = 2_000n;
      node.miningFloor = 0n;
    }
  });

  it('a block the pruned node no longer has is on the attention list with its height; the watcher follows the chain past it and reads it once the node has it again', async () => {
    const { key } = await merchant();
    const inPruned = await invoice(key, '3');
    const later = await invoice(key, '4');
    const chainItems = async () =>
      ((await admin('GET', '/admin/v1/attention')).body.data as any[]).filter((i) => i.kind === 'chain_behind');
    // The watcher has read the tip: a payment mined in it is seen there.
    const probe = await invoice(key, '2');
    node.pay(payer, [{ address: probe.address, sats: baseUnits(probe.cryptoAmount, 8) }]);
    node.mine(1);
    await eventually(
      () => status(probe.paymentId),
      (s) => s.confirmations >= 1,
    );
    await eventually(chainItems, (items) => items.length === 0);
    // In one go, before the watcher reads again (as after a long stop): a
    // payment is mined, and the node prunes that block and the next.
    const base = node.tip.height;
    node.pay(payer, [{ address: inPruned.address, sats: baseUnits(inPruned.cryptoAmount, 8) }]);
    node.mine(4);
    node.pruneHeight = base + 3;
    try {
      node.pay(payer, [{ address: later.address, sats: baseUnits(later.cryptoAmount, 8) }]);
      node.mine(1);
      // The watcher keeps following: the payment in a block after the pruned ones is seen.
      await eventually(
        () => status(later.paymentId),
        (s) => s.hasDetectedPayment === true,
      );
      const [item] = await eventually(chainItems, (items) => items.length === 1);
      assert.equal(item.chain, 'bitcoin');
      assert.equal(item.reason, 'behind');
      assert.equal(
        item.detail,
        `2 blocks from ${base + 1} to ${base + 2} are pruned on the node: payments in them are not seen until the node has them again`,
      );
      assert.equal((await status(inPruned.paymentId)).hasDetectedPayment, false);
      // The operator has the node fetch them again (getblockfrompeer): the payment is found and the item goes.
      node.pruneHeight = 0;
      await eventually(
        () => status(inPruned.paymentId),
        (s) => s.hasDetectedPayment === true,
      );
      await eventually(chainItems, (items) => items.length === 0);
    } finally {
      node.pruneHeight = 0;
    }
  });

  it('a node of another network stops start-up with one line naming the variable', async () => {
    await assert.rejects(startTestService({ ...env(), CHAIN_BITCOIN_NETWORK: 'main' }), (error: Error) => {
      assert.equal(
        error.message,
        'CHAIN_BITCOIN_RPC_URL is a node of the regtest chain, not main; set CHAIN_BITCOIN_NETWORK=regtest if that network is meant',
      );
      return true;
    });
  });
});
