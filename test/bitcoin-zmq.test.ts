// The mempool followed through Bitcoin Core's ZMQ `sequence` topic
// (CHAIN_BITCOIN_ZMQ_URL), over the service's real HTTP API: a payment is
// seen at 0 confirmations from its A message, no watcher step downloads the
// mempool while the feed is healthy, and a lost message (a skipped message
// number) brings one `getrawmempool` snapshot that finds what it missed.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually, merchantWithKey } from './support/merchant.ts';
import type { RunningService } from './support/service.ts';
import { baseUnits } from './support/evm-flow.ts';
import { BitcoinTestNode, type BitcoinKey } from './support/bitcoin-node.ts';
import { startBitcoinService, stopBitcoinService } from './support/bitcoin-flow.ts';

describe('the Bitcoin mempool followed by ZMQ', () => {
  let node: BitcoinTestNode, svc: RunningService, payer: BitcoinKey;
  before(async () => {
    node = await new BitcoinTestNode().start();
    ({ svc, payer } = await startBitcoinService(10, { CHAIN_BITCOIN_ZMQ_URL: await node.publishSequence() }, node));
    // Connected, and the steps after the connection have taken their snapshot.
    await eventually(
      () => node.sequenceSubscribers,
      (n) => n > 0,
    );
    const steps = calls('getblockchaininfo');
    await eventually(
      () => calls('getblockchaininfo'),
      (n) => n >= steps + 3,
    );
  });
  after(() => stopBitcoinService(node, svc));

  const calls = (method: string) => node.calls.get(method) ?? 0;
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;
  async function invoice(amount: string) {
    const { key } = await merchantWithKey(svc);
    const res = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount, currency: 'USD', chain: 'bitcoin' },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
  }
  const pay = (p: { address: string; cryptoAmount: string }) =>
    node.pay(payer, [{ address: p.address, sats: baseUnits(p.cryptoAmount, 8) }]);

  it('sees a payment at 0 confirmations from its A message, and no step downloads the mempool while the feed is healthy', async () => {
    const downloads = calls('getrawmempool');
    const steps = calls('getblockchaininfo');
    const p = await invoice('30');
    pay(p);
    const seen = await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment === true,
    );
    assert.equal(seen.confirmations, 0);
    // Mined (its C message takes it out of the mempool), confirmed, and ten more steps.
    node.mine(2);
    await eventually(
      () => status(p.paymentId),
      (s) => ['confirmed', 'settled'].includes(s.status),
    );
    await eventually(
      () => calls('getblockchaininfo'),
      (n) => n >= steps + 10,
    );
    assert.equal(calls('getrawmempool'), downloads, 'no whole mempool download while ZMQ is healthy');
  });

  it('takes one snapshot after a lost message, and finds the payment it announced', async () => {
    const downloads = calls('getrawmempool');
    const missed = await invoice('31');
    const next = await invoice('32');
    node.loseSequenceMessages(1);
    pay(missed); // its A never arrives
    pay(next); // its A comes with a skipped number: a message was lost
    for (const p of [missed, next]) {
      await eventually(
        () => status(p.paymentId),
        (s) => s.hasDetectedPayment === true,
      );
    }
    assert.equal(calls('getrawmempool'), downloads + 1);
    node.mine(1);
  });
  it('after the feed comes back, takes a snapshot that finds what was paid while it was away, and then follows it again', async () => {
    const endpoint = await node.stopPublishing();
    const away = await invoice('33');
    pay(away); // no A message: nobody publishes
    const accepted = node.sequenceSubscribers;
    await node.publishSequence(endpoint);
    await eventually(
      () => node.sequenceSubscribers,
      (n) => n > accepted,
    );
    await eventually(
      () => status(away.paymentId),
      (s) => s.hasDetectedPayment === true,
    );
    // Reconnected and resynchronised: the steps from here on download nothing.
    let steps = calls('getblockchaininfo');
    await eventually(
      () => calls('getblockchaininfo'),
      (n) => n >= steps + 3,
    );
    const downloads = calls('getrawmempool');
    steps = calls('getblockchaininfo');
    const next = await invoice('34');
    pay(next);
    await eventually(
      () => status(next.paymentId),
      (s) => s.hasDetectedPayment === true,
    );
    await eventually(
      () => calls('getblockchaininfo'),
      (n) => n >= steps + 10,
    );
    assert.equal(calls('getrawmempool'), downloads);
    node.mine(1);
  });
});
