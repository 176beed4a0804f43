// Crashes against the Bitcoin test node, with the real service process
// killed (SIGKILL) and restarted: payments made while it is down are not
// missed, and a kill between a sweep's signing and its broadcast, or between
// its broadcast and its record, sends exactly one payout, even when the
// payout is mined and all its outputs spent while the service is down (it is
// found by its txid) and the customer pays the same address again. The
// same kills around a refund from the deposit: the customer is paid once,
// and the settlement afterwards sweeps the refund's change.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { baseUnits, SERVICE_MNEMONIC } from './support/evm-flow.ts';
import { callService as call } from './support/process.ts';
import { crashHarness } from './support/crash.ts';
import { eventually, eventuallyMining } from './support/merchant.ts';
import { BitcoinTestNode, randomBitcoinKey, type BitcoinKey } from './support/bitcoin-node.ts';
import { settlementAmounts } from './support/settlement.ts';

const ADMIN = 'bitcoin-crash-test-admin-token';
// The sweep spends only the recorded payments a payout names (its sources):
// the settlement path passes them once the lead's payout engine lands.

describe('crashes on the Bitcoin test node', () => {
  let node: BitcoinTestNode;
  let payer: BitcoinKey;
  before(async () => {
    node = await new BitcoinTestNode().start();
    payer = randomBitcoinKey();
    for (let i = 0; i < 30; i++) node.fund(payer.address, 50_000_000n);
  });
  after(() => node.stop());

  const service = crashHarness('bitcoin-crash', () => ({
    CHAINS: 'bitcoin',
    CHAIN_BITCOIN_RPC_URL: node.rpcUrl,
    CHAIN_BITCOIN_NETWORK: 'regtest',
    WALLET_MNEMONIC: SERVICE_MNEMONIC,
    RATE_LIMITS: 'off',
    ADMIN_TOKEN: ADMIN,
  }));
  const { start, kill, withDataDir } = service;
  async function merchant(url: string, wallet: string) {
    const m = (
      await call(url, 'POST', '/admin/v1/merchants', ADMIN, { name: 'BTC', settlementWallets: { bitcoin: wallet } })
    ).body.data;
    return (await call(url, 'POST', `/admin/v1/merchants/${m.id}/api-keys`, ADMIN, {})).body.data.key as string;
  }
  async function invoice(url: string, key: string) {
    const res = await call(url, 'POST', '/api/v1/payments', key, { amount: '60', currency: 'USD', chain: 'bitcoin' });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
  }
  /** Mines a block at a time until the failpoint kills the service. */
  const minedUntilKilled = () => service.untilKilled(() => node.mine(1));
  const status = async (url: string, id: string) => (await call(url, 'GET', `/api/v1/invoices/${id}/status`)).body.data;
  const types = async (url: string, key: string, id: string) =>
    ((await call(url, 'GET', `/api/v1/invoices/${id}/events`, key)).body.data as any[]).map((e) => e.type as string);

  it('payments made while the service is down are all seen, once', async () => {
    await withDataDir(async () => {
      let url = await start();
      const key = await merchant(url, randomBitcoinKey().address);
      const invoices = [await invoice(url, key), await invoice(url, key), await invoice(url, key)];
      node.pay(payer, [{ address: invoices[0]!.address, sats: baseUnits(invoices[0]!.cryptoAmount, 8) }]);
      node.mine(1);
      await eventually(
        () => status(url, invoices[0]!.paymentId),
        (s) => s.hasDetectedPayment,
      );
      await kill();
      for (const p of invoices.slice(1)) node.pay(payer, [{ address: p.address, sats: baseUnits(p.cryptoAmount, 8) }]);
      node.mine(2);
      url = await start();
      for (const p of invoices) {
        await eventuallyMining(
          () => node.mine(1),
          () => status(url, p.paymentId),
          (s) => ['confirmed', 'settled'].includes(s.status),
        );
        const seen = await types(url, key, p.paymentId);
        assert.equal(seen.filter((t) => t === 'PaymentApplied').length, 1, `${p.paymentId} counted once`);
      }
    });
  });

  it('a payout mined and spent on while the service is down is found by its txid, and a second payment is not paid out with it', async () => {
    await withDataDir(async () => {
      const merchantKey = randomBitcoinKey();
      const treasuryKey = randomBitcoinKey();
      let url = await start({ FAILPOINTS: 'settlement:after-broadcast', CHAIN_BITCOIN_TREASURY: treasuryKey.address });
      const key = await merchant(url, merchantKey.address);
      const p = await invoice(url, key);
      node.pay(payer, [{ address: p.address, sats: baseUnits(p.cryptoAmount, 8) }]);
      await minedUntilKilled();
      // Killed after the broadcast, before its record. Meanwhile the payout is
      // mined, the merchant and the treasury move its outputs on (Core now
      // answers -25 to it, as to any transaction whose inputs are gone), and
      // the customer pays the same address again.
      node.mine(1);
      const [payout] = node.received(merchantKey.address);
      node.spendOutput(merchantKey, payout!.txid, 0, randomBitcoinKey().address);
      node.spendOutput(treasuryKey, payout!.txid, 1, randomBitcoinKey().address, 150n);
      node.pay(payer, [{ address: p.address, sats: baseUnits(p.cryptoAmount, 8) }]);
      node.mine(2);
      url = await start({ CHAIN_BITCOIN_TREASURY: treasuryKey.address });
      const settled = await eventuallyMining(
        () => node.mine(1),
        () => status(url, p.paymentId),
        (s) => s.status === 'settled',
      );
      assert.equal(settled.txHash, payout!.txid);
      node.mine(3);
      await new Promise((resolve) => setTimeout(resolve, 2_000)); // a few sweeper passes after it settled
      assert.deepEqual(node.received(merchantKey.address), [payout], 'paid once');
    });
  });

  for (const failpoint of ['settlement:after-prepare', 'settlement:after-broadcast']) {
    it(`a kill at ${failpoint} and a restart send exactly one payout`, async () => {
      await withDataDir(async () => {
        let url = await start({ FAILPOINTS: failpoint });
        const wallet = randomBitcoinKey().address;
        const key = await merchant(url, wallet);
        const p = await invoice(url, key);
        node.pay(payer, [{ address: p.address, sats: baseUnits(p.cryptoAmount, 8) }]);
        await minedUntilKilled();
        url = await start();
        const settled = await eventuallyMining(
          () => node.mine(1),
          () => status(url, p.paymentId),
          (s) => s.status === 'settled',
        );
        const events = (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/events`, key)).body.data as any[];
        const net = BigInt(settlementAmounts(events).netAmount);
        assert.deepEqual(node.received(wallet), [{ txid: settled.txHash, sats: net }], 'paid once, exactly');
        assert.equal(events.filter((e) => e.type === 'SettlementTransactionPrepared').length, 1, 'one attempt');
      });
    });
  }

  for (const failpoint of ['refund:after-prepare', 'refund:after-broadcast']) {
    it(`a kill at ${failpoint} sends a deposit refund once, and the settlement then sweeps its change`, async () => {
      await withDataDir(async () => {
        let url = await start({ FAILPOINTS: failpoint });
        // No settlement wallet yet: the settlement waits, unprepared, and the refund is paid from the deposit.
        const m = (await call(url, 'POST', '/admin/v1/merchants', ADMIN, { name: 'BTC refunds' })).body.data;
        const key = (await call(url, 'POST', `/admin/v1/merchants/${m.id}/api-keys`, ADMIN, {})).body.data
          .key as string;
        const p = await invoice(url, key);
        const received = baseUnits(p.cryptoAmount, 8) + 500_000n;
        node.pay(payer, [{ address: p.address, sats: received }]);
        await eventuallyMining(
          () => node.mine(1),
          async () => (await call(url, 'GET', `/api/v1/settlements?invoiceId=${p.paymentId}`, key)).body.data,
          (list) => list.length === 1,
        );
        const customer = randomBitcoinKey().address;
        const created = await call(url, 'POST', `/api/v1/invoices/${p.paymentId}/refunds`, key, {
          kind: 'excess',
          destination: customer,
        });
        assert.equal(created.status, 201, JSON.stringify(created.body));
        const refundId = created.body.data.id as string;
        const approved = await call(url, 'POST', `/api/v1/refunds/${refundId}/approve`, key);
        assert.equal(approved.body.data?.fundedFrom, 'deposit', JSON.stringify(approved.body));
        await minedUntilKilled();
        assert.equal(service.running!.child.signalCode, 'SIGKILL');
        url = await start();
        const done = await eventuallyMining(
          () => node.mine(1),
          async () => (await call(url, 'GET', `/api/v1/refunds/${refundId}`, key)).body.data,
          (r) => r.status === 'completed',
        );
        const net = baseUnits(done.netAmount, 8);
        assert.deepEqual(
          node.received(customer),
          [{ txid: done.transactionHash, sats: net }],
          'refunded once, exactly',
        );
        const wallet = randomBitcoinKey().address;
        await call(url, 'PATCH', `/admin/v1/merchants/${m.id}`, ADMIN, { settlementWallets: { bitcoin: wallet } });
        const settled = await eventuallyMining(
          () => node.mine(1),
          () => status(url, p.paymentId),
          (s) => s.status === 'settled',
        );
        const events = (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/events`, key)).body.data as any[];
        assert.deepEqual(
          node.received(wallet),
          [{ txid: settled.txHash, sats: BigInt(settlementAmounts(events).netAmount) }],
          'the rest settled once',
        );
        const sweep = node.minedTransaction(settled.txHash!);
        assert.deepEqual(
          sweep.ins.map((i) => `${Buffer.from(i.hash).reverse().toString('hex')}:${i.index}`),
          [`${done.transactionHash}:1`],
          "the sweep spends the refund's change",
        );
      });
    });
  }
});
