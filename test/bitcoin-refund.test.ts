// Refunds paid on the Bitcoin test node, over the service's HTTP API, each
// payout read back from the node and decoded (inputs, outputs, fee) to the
// satoshi: an overpayment's excess paid from the deposit, its change back to
// the deposit (not taken for a payment), and the settlement's sweep then
// spending that change and paying the re-priced rest; and a settled invoice
// refunded from the merchant's refund wallet once a coin reaches it (its
// coins read from the service's watch-only wallet in the node), and the
// wallet read again after a restart of the service.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as bitcoin from 'bitcoinjs-lib';
import { merchantWithKey, eventuallyMining } from './support/merchant.ts';
import type { RunningService } from './support/service.ts';
import { baseUnits } from './support/evm-flow.ts';
import {
  descriptorChecksum,
  randomAddress,
  randomBitcoinKey,
  type BitcoinKey,
  type BitcoinTestNode,
} from './support/bitcoin-node.ts';
import { WATCH_WALLET } from '../adapters/chains/bitcoin/index.ts';
import { startBitcoinService, stopBitcoinService } from './support/bitcoin-flow.ts';
import { settlementAmounts } from './support/settlement.ts';
import { formatUnits } from '../domain/money.ts';

const regtest = bitcoin.networks.regtest;

describe('refunds paid on the Bitcoin test node', () => {
  let node: BitcoinTestNode, svc: RunningService, payer: BitcoinKey;
  let env: Record<string, string>;
  before(async () => {
    // On disk, so that the service can be restarted on the same data.
    env = {
      CHAIN_BITCOIN_TREASURY: randomBitcoinKey().address,
      DATA_DIR: await mkdtemp(join(tmpdir(), 'btc-refund-')),
    };
    ({ node, svc, payer } = await startBitcoinService(10, env));
  });
  after(async () => {
    await stopBitcoinService(node, svc);
    await rm(env.DATA_DIR!, { recursive: true, force: true });
  });

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  // One block at a time, each once the service has read the last (a loaded machine's watcher falls behind otherwise).
  const mine = () => node.mineWhenRead();
  const get = async (path: string, key: string) => (await svc.call('GET', path, { token: key })).body.data;
  const settlementOf = async (id: string, key: string) => (await get(`/api/v1/settlements?invoiceId=${id}`, key))?.[0];
  const setWallet = (merchantId: string, wallet: string) =>
    admin('PATCH', `/admin/v1/merchants/${merchantId}`, { settlementWallets: { bitcoin: wallet } });
  const sats = (btc: string) => baseUnits(btc, 8);

  async function invoice(key: string) {
    const res = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '60', currency: 'USD', chain: 'bitcoin' },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
  }

  async function refund(key: string, invoiceId: string, body: Record<string, unknown>) {
    const created = await svc.call('POST', `/api/v1/invoices/${invoiceId}/refunds`, { token: key, body });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const approved = await svc.call('POST', `/api/v1/refunds/${created.body.data.id}/approve`, { token: key });
    assert.equal(approved.status, 200, JSON.stringify(approved.body));
    return approved.body.data as { id: string; status: string; fundedFrom: string };
  }

  const completed = (id: string, key: string) =>
    eventuallyMining(
      mine,
      () => get(`/api/v1/refunds/${id}`, key),
      (r) => r.status === 'completed',
    );

  /** A new merchant's invoice, paid exactly and settled: refunds of it are paid from the refund wallet. */
  async function settledInvoice() {
    const { key, merchant } = await merchantWithKey(svc);
    assert.equal((await setWallet(merchant.id, randomAddress('p2wpkh'))).status, 200);
    const p = await invoice(key);
    node.pay(payer, [{ address: p.address, sats: sats(p.cryptoAmount) }]);
    await eventuallyMining(
      mine,
      () => get(`/api/v1/invoices/${p.paymentId}`, key),
      (i) => i.status === 'settled',
      90_000,
    );
    return { key, p };
  }

  /** The invoice's settlement once completed, and the amounts it was last priced at. */
  async function settledAndPriced(invoiceId: string, key: string) {
    const settled = await eventuallyMining(
      mine,
      () => settlementOf(invoiceId, key),
      (s) => s?.status === 'completed',
      90_000,
    );
    return { settled, priced: settlementAmounts(await get(`/api/v1/invoices/${invoiceId}/events`, key)) };
  }

  /** A mined transaction decoded: the coins it spends, its outputs (address, sats), and its fee. */
  function decoded(txid: string) {
    const tx = node.minedTransaction(txid);
    return {
      spends: tx.ins.map((i) => `${Buffer.from(i.hash).reverse().toString('hex')}:${i.index}`),
      outputs: tx.outs.map((o) => ({ to: bitcoin.address.fromOutputScript(o.script, regtest), sats: BigInt(o.value) })),
      fee: node.minedFee(txid),
      vsize: tx.virtualSize(),
    };
  }

  it("an overpayment's excess is paid from the deposit at its quoted fee whatever the rate does, its change comes back to it, and the settlement sweeps that change", async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await invoice(key);
    const excess = 1_000_000n;
    const received = sats(p.cryptoAmount) + excess;
    const payment = node.pay(payer, [{ address: p.address, sats: received }]);
    const paid = `${payment.getId()}:${payment.outs.findIndex((o) => BigInt(o.value) === received)}`;
    await eventuallyMining(
      mine,
      () => settlementOf(p.paymentId, key),
      (s) => s !== undefined,
    );
    assert.equal((await settlementOf(p.paymentId, key)).status, 'pending', 'no settlement wallet yet');

    const customer = randomAddress('p2wpkh');
    const quotedRate = node.feeRate;
    const created = await svc.call('POST', `/api/v1/invoices/${p.paymentId}/refunds`, {
      token: key,
      body: { kind: 'excess', destination: customer },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    // The rate triples after the quote, and a full mempool takes nothing below it: the
    // refund waits, saying why, rather than take the difference from the settlement's rest.
    node.feeRate = quotedRate * 3n;
    node.mempoolMinFee = quotedRate * 3n;
    let done;
    try {
      const approval = await svc.call('POST', `/api/v1/refunds/${created.body.data.id}/approve`, { token: key });
      assert.equal(approval.status, 200, JSON.stringify(approval.body));
      const approved = approval.body.data as { id: string; fundedFrom: string };
      assert.equal(approved.fundedFrom, 'deposit');
      const waiting = await eventuallyMining(
        mine,
        () => get(`/api/v1/invoices/${p.paymentId}/events`, key),
        (events: { type: string; data: { reason?: string } }[]) =>
          events.some((e) => e.type === 'RefundFailed' && /waits for lower fees/.test(e.data.reason ?? '')),
      );
      assert.ok(waiting);
      // The mempool empties; the market's rate stays above the quote: it is sent at the quote all the same.
      node.mempoolMinFee = 0n;
      done = await completed(approved.id, key);
    } finally {
      node.feeRate = quotedRate;
      node.mempoolMinFee = 0n;
    }
    const [amount, fee, net] = [sats(done.amount), sats(done.networkFee), sats(done.netAmount)];
    assert.equal(amount, excess);
    assert.ok(fee > 0n);
    assert.equal(net, excess - fee);

    const paidOut = decoded(done.transactionHash);
    assert.deepEqual(paidOut.spends, [paid], "it spends the deposit's recorded payment");
    assert.deepEqual(paidOut.outputs, [
      { to: customer, sats: net },
      { to: p.address, sats: received - amount },
    ]);
    assert.equal(paidOut.fee, fee, 'the quoted fee is what the transaction pays');
    assert.ok(fee * 1000n >= quotedRate * BigInt(paidOut.vsize), 'and it covers its size at the quoted rate');

    // The change paid back to the deposit is not a payment.
    await eventuallyMining(
      mine,
      () => get(`/api/v1/invoices/${p.paymentId}`, key),
      () => true,
    );
    const history = (await get(`/api/v1/invoices/${p.paymentId}/events`, key)) as { type: string }[];
    assert.equal(history.filter((e) => e.type === 'PaymentApplied').length, 1, 'one payment, the customer’s');

    const merchantWallet = randomAddress('p2wpkh');
    assert.equal((await setWallet(merchant.id, merchantWallet)).status, 200);
    const { settled, priced } = await settledAndPriced(p.paymentId, key);
    // The platform fee stays on all that was received (refunds.md).
    assert.equal(BigInt(priced.platformFee), received / 100n);
    const sweep = decoded(settled.transactionHash);
    assert.deepEqual(sweep.spends, [`${done.transactionHash}:1`], "the sweep spends the refund's change, only");
    const toMerchant = received - amount - BigInt(priced.platformFee) - BigInt(priced.networkFee);
    assert.equal(BigInt(priced.netAmount), toMerchant);
    assert.deepEqual(sweep.outputs, [
      { to: merchantWallet, sats: toMerchant },
      { to: env.CHAIN_BITCOIN_TREASURY!, sats: received - amount - toMerchant - sweep.fee },
    ]);
    assert.equal(sweep.fee, BigInt(priced.networkFee), 'the sweep pays its quoted fee');
  });

  /** A new merchant's invoice paid in `parts` transactions, its settlement waiting for a wallet: refunds are paid from the deposit. */
  async function paidInParts(parts: number) {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await invoice(key);
    const total = sats(p.cryptoAmount);
    const coins: string[] = [];
    for (let i = 0; i < parts; i++) {
      const part = i < parts - 1 ? total / BigInt(parts) : total - (total / BigInt(parts)) * BigInt(parts - 1);
      const tx = node.pay(payer, [{ address: p.address, sats: part }]);
      coins.push(
        `${tx.getId()}:${tx.outs.findIndex((o) => bitcoin.address.fromOutputScript(o.script, regtest) === p.address)}`,
      );
    }
    await eventuallyMining(
      mine,
      () => settlementOf(p.paymentId, key),
      (s) => s !== undefined,
    );
    return { key, merchant, p, total, coins: coins.sort() };
  }

  for (const parts of [2, 3]) {
    it(`a deposit paid in ${parts} transactions is refunded in full at a fee quoted for its ${parts} coins, and the settlement ends`, async () => {
      // At the relay minimum's rate a fee quoted for one coin is below what the node takes
      // for a transaction spending several, and a full refund leaves no change to pay more.
      const rate = node.feeRate;
      node.feeRate = node.minRelayFee;
      try {
        const { key, p, total, coins } = await paidInParts(parts);
        const customer = randomAddress('p2tr');
        const approved = await refund(key, p.paymentId, { kind: 'full', destination: customer });
        assert.equal(approved.fundedFrom, 'deposit');
        const done = await completed(approved.id, key);
        const [amount, fee, net] = [sats(done.amount), sats(done.networkFee), sats(done.netAmount)];
        assert.equal(amount, total);
        // One coin's quote (153 vB) and 68 vB for each more, at 1 sat/vB.
        assert.equal(fee, 153n + 68n * BigInt(parts - 1));
        assert.equal(net, total - fee);

        const paidOut = decoded(done.transactionHash);
        assert.deepEqual([...paidOut.spends].sort(), coins, "it spends every one of the deposit's payments");
        assert.deepEqual(paidOut.outputs, [{ to: customer, sats: net }], 'no change: the refund takes it all');
        assert.equal(paidOut.fee, fee, 'the quoted fee is what the transaction pays');
        assert.ok(fee * 1000n >= node.minRelayFee * BigInt(paidOut.vsize), 'at least the relay minimum at its size');

        // Nothing left to settle: the settlement ends rather than wait behind the refund.
        const settled = await eventuallyMining(
          mine,
          () => settlementOf(p.paymentId, key),
          (s) => s?.status === 'completed',
        );
        assert.equal(settled.transactionHash, null);
      } finally {
        node.feeRate = rate;
      }
    });
  }

  it('a deposit refund whose fee the relay minimum outgrew after its quote fails for good, and the settlement goes on', async () => {
    const rate = node.feeRate;
    const relay = node.minRelayFee;
    node.feeRate = node.minRelayFee;
    try {
      const { key, merchant, p, total } = await paidInParts(2);
      const created = await svc.call('POST', `/api/v1/invoices/${p.paymentId}/refunds`, {
        token: key,
        body: { kind: 'full', destination: randomAddress('p2wpkh') },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      // The node's relay minimum doubles (a restart with another -minrelaytxfee): no wait lowers it.
      node.minRelayFee = relay * 2n;
      node.feeRate = relay * 2n;
      const approval = await svc.call('POST', `/api/v1/refunds/${created.body.data.id}/approve`, { token: key });
      assert.equal(approval.status, 200, JSON.stringify(approval.body));
      const failed = await eventuallyMining(
        mine,
        () => get(`/api/v1/invoices/${p.paymentId}/events`, key),
        (events: { type: string; data: { code?: string; retryAt?: string | null } }[]) =>
          events.some((e) => e.type === 'RefundFailed'),
      );
      const failure = failed.find((e) => e.type === 'RefundFailed')!;
      assert.equal(failure.data.code, 'fees_exceed_amount');
      assert.equal(failure.data.retryAt, null, 'final: no attempt could pay it');
      assert.equal((await get(`/api/v1/refunds/${created.body.data.id}`, key)).status, 'failed');

      // Its hold released, the settlement pays the deposit out.
      assert.equal((await setWallet(merchant.id, randomAddress('p2wpkh'))).status, 200);
      const settled = await eventuallyMining(
        mine,
        () => settlementOf(p.paymentId, key),
        (s) => s?.status === 'completed',
        90_000,
      );
      assert.equal(sats(settled.grossAmount), total);
    } finally {
      node.feeRate = rate;
      node.minRelayFee = relay;
    }
  });

  it("an underpayment refunded while the invoice is open spends the deposit's payment; paid in full then, the settlement sweeps only the new coin", async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await invoice(key);
    const quoted = sats(p.cryptoAmount);
    const first = quoted / 4n;
    const payment = node.pay(payer, [{ address: p.address, sats: first }]);
    const coin = `${payment.getId()}:${payment.outs.findIndex((o) => BigInt(o.value) === first)}`;
    await eventuallyMining(
      mine,
      () => get(`/api/v1/invoices/${p.paymentId}/refundable`, key),
      (assets) => assets?.[0] !== undefined && sats(assets[0].refundable) === first,
    );
    const customer = randomAddress('p2wpkh');
    const approved = await refund(key, p.paymentId, { amount: formatUnits(first, 8), destination: customer });
    assert.equal(approved.fundedFrom, 'deposit');
    assert.equal(await settlementOf(p.paymentId, key), undefined, 'still open: no settlement yet');
    const done = await completed(approved.id, key);
    const [fee, net] = [sats(done.networkFee), sats(done.netAmount)];
    const paidOut = decoded(done.transactionHash);
    assert.deepEqual(paidOut.spends, [coin], "it spends the deposit's payment");
    assert.deepEqual(paidOut.outputs, [{ to: customer, sats: net }], 'no change: the refund takes it all');
    assert.equal(paidOut.fee, fee, 'the quoted fee is what the transaction pays');

    // The refunded part pays nothing towards the quote: the whole quote is paid, and the settlement starts from
    // the refund paid before it, spending only the new coin.
    const merchantWallet = randomAddress('p2wpkh');
    assert.equal((await setWallet(merchant.id, merchantWallet)).status, 200);
    const whole = node.pay(payer, [{ address: p.address, sats: quoted }]);
    const { settled, priced } = await settledAndPriced(p.paymentId, key);
    const received = first + quoted;
    assert.equal(BigInt(priced.platformFee), received / 100n, 'the platform fee on all received');
    const toMerchant = quoted - BigInt(priced.platformFee) - BigInt(priced.networkFee);
    assert.equal(BigInt(priced.netAmount), toMerchant);
    const sweep = decoded(settled.transactionHash);
    assert.deepEqual(sweep.spends, [`${whole.getId()}:${whole.outs.findIndex((o) => BigInt(o.value) === quoted)}`]);
    assert.deepEqual(sweep.outputs, [
      { to: merchantWallet, sats: toMerchant },
      { to: env.CHAIN_BITCOIN_TREASURY!, sats: quoted - toMerchant - sweep.fee },
    ]);
    assert.equal(sweep.fee, BigInt(priced.networkFee), 'the sweep pays its quoted fee');
  });

  it('a settled invoice is refunded from the refund wallet once a coin reaches it', async () => {
    const { key, p } = await settledInvoice();

    const customer = randomAddress('p2tr');
    const approved = await refund(key, p.paymentId, { kind: 'full', destination: customer });
    assert.equal(approved.fundedFrom, 'refund_wallet');
    assert.equal(approved.status, 'awaiting_funds');
    const [wallet] = (await get('/api/v1/refund-wallets', key)) as { address: string; balances: { BTC: string } }[];
    assert.equal(wallet!.balances.BTC, '0.00000000');

    // An unconfirmed coin is not spendable yet: the refund waits for its block.
    const funded = sats(p.cryptoAmount) + 150_000n;
    // Two coins: the refund spends the smaller one that pays it, and the other stays for the next refund.
    const other = 5_000_000n;
    const funding = node.pay(payer, [
      { address: wallet!.address, sats: funded },
      { address: wallet!.address, sats: other },
    ]);
    const coin = `${funding.getId()}:${funding.outs.findIndex((o) => BigInt(o.value) === funded)}`;
    assert.equal((await get('/api/v1/refund-wallets', key))[0].balances.BTC, '0.00000000');
    const done = await completed(approved.id, key);
    const [amount, fee, net] = [sats(done.amount), sats(done.networkFee), sats(done.netAmount)];
    assert.equal(amount, sats(p.cryptoAmount));

    const paidOut = decoded(done.transactionHash);
    assert.deepEqual(paidOut.spends, [coin], "it spends the wallet's coin");
    assert.deepEqual(paidOut.outputs, [
      { to: customer, sats: net },
      { to: wallet!.address, sats: funded - amount },
    ]);
    assert.equal(paidOut.fee, fee, 'the quoted fee is what the transaction pays');
    // What the wallet holds now is the refund's change, mined with it, and the coin it did not need.
    assert.equal((await get('/api/v1/refund-wallets', key))[0].balances.BTC, '0.05150000');
    // Read from the service's watch-only wallet in the node, never by a scan of the UTXO set.
    assert.ok(node.calls.get('listunspent'));
    assert.equal(node.calls.get('scantxoutset'), undefined);

    // A restart of the service loads the wallet and imports the address again, without error.
    const imports = node.calls.get('importdescriptors')!;
    await svc.close();
    ({ svc } = await startBitcoinService(0, env, node));
    assert.equal((await get('/api/v1/refund-wallets', key))[0].balances.BTC, '0.05150000');
    assert.equal(node.calls.get('importdescriptors'), imports, "not imported again: the node's wallet follows it");
    assert.equal(node.calls.get('createwallet'), 1, 'the wallet is made once');
  });

  it("a refund approved while Core rescans for another import (-4) waits for its wallet's import, done later, and completes", async () => {
    const { key, p } = await settledInvoice();
    // Another import rescanning in the service's watch-only wallet (an operator's, or one a restart left running).
    node.holdRescans = true;
    const other = randomBitcoinKey().address;
    const held = fetch(new URL(`wallet/${WATCH_WALLET}`, node.url), {
      method: 'POST',
      headers: { authorization: 'Basic ' + Buffer.from(`${node.user}:${node.password}`).toString('base64') },
      body: JSON.stringify({
        id: 1,
        method: 'importdescriptors',
        params: [[{ desc: `addr(${other})#${descriptorChecksum(`addr(${other})`)}`, timestamp: 'now' }]],
      }),
    });
    try {
      const approved = await refund(key, p.paymentId, { kind: 'full', destination: randomAddress('p2wpkh') });
      assert.equal(approved.status, 'awaiting_funds', 'the import answered -4: the balance is not known yet');
      const [wallet] = (await get('/api/v1/refund-wallets', key)) as { address: string }[];
      node.pay(payer, [{ address: wallet!.address, sats: sats(p.cryptoAmount) + 100_000n }]);
      node.mine(1);
      node.holdRescans = false;
      node.finishRescans();
      assert.equal((await held).status, 200);
      assert.equal((await completed(approved.id, key)).status, 'completed');
    } finally {
      node.holdRescans = false;
      node.finishRescans();
    }
  });

  it('two refunds from one refund wallet, both prepared before either is sent, spend different coins and both complete', async () => {
    const { key, p } = await settledInvoice();
    // Two refunds of a third each, both waiting for the refund wallet's coins.
    const third = (sats(p.cryptoAmount) / 3n).toString().padStart(9, '0');
    const part = `${third.slice(0, -8)}.${third.slice(-8)}`;
    const first = await refund(key, p.paymentId, { amount: part, destination: randomAddress('p2wpkh') });
    const second = await refund(key, p.paymentId, { amount: part, destination: randomAddress('p2wpkh') });
    assert.equal(first.status, 'awaiting_funds');
    assert.equal(second.status, 'awaiting_funds');
    const [wallet] = (await get('/api/v1/refund-wallets', key)) as { address: string }[];

    // Two coins alike, each enough for one refund. Nothing reaches the node's mempool for a
    // while: both refunds are prepared and recorded before either is sent.
    const coin = sats(p.cryptoAmount);
    const funding = node.pay(payer, [
      { address: wallet!.address, sats: coin },
      { address: wallet!.address, sats: coin },
    ]);
    node.unreachable.add('sendrawtransaction');
    const history = () =>
      get(`/api/v1/invoices/${p.paymentId}/events`, key) as Promise<{ type: string; streamId: string }[]>;
    const prepared = (events: { type: string; streamId: string }[]) =>
      new Set(events.filter((e) => e.type === 'RefundTransactionPrepared').map((e) => e.streamId)).size;
    try {
      await eventuallyMining(mine, history, (events) => prepared(events) === 2, 90_000);
    } finally {
      node.unreachable.delete('sendrawtransaction');
    }
    const done = [await completed(first.id, key), await completed(second.id, key)];
    assert.notEqual(done[0].transactionHash, done[1].transactionHash);
    const spends = done.map((r) => decoded(r.transactionHash).spends);
    assert.equal(spends[0]!.length, 1);
    assert.equal(spends[1]!.length, 1);
    assert.notEqual(spends[0]![0], spends[1]![0], 'never both spending one coin');
    for (const s of spends) assert.ok(s[0]!.startsWith(funding.getId()), "each spends one of the wallet's coins");
  });
  it('a second refund from a refund wallet whose one coin another refund has prepared waits in awaiting_funds, and is paid once funded again', async () => {
    const { key, p } = await settledInvoice();
    const third = sats(p.cryptoAmount) / 3n;
    const part = `${(third / 100_000_000n).toString()}.${(third % 100_000_000n).toString().padStart(8, '0')}`;
    const first = await refund(key, p.paymentId, { amount: part, destination: randomAddress('p2wpkh') });
    assert.equal(first.status, 'awaiting_funds');
    const [wallet] = (await get('/api/v1/refund-wallets', key)) as { address: string }[];
    const history = () =>
      get(`/api/v1/invoices/${p.paymentId}/events`, key) as Promise<{ type: string; streamId: string }[]>;
    const of = (id: string, events: { type: string; streamId: string }[]) =>
      events.filter((e) => e.streamId.endsWith(id)).map((e) => e.type);

    // One coin, enough for one refund; its change (1,000 sats) is not enough for another.
    node.pay(payer, [{ address: wallet!.address, sats: third + 1_000n }]);
    // The first refund is prepared and recorded but not sent: only the records say the coin is taken.
    node.unreachable.add('sendrawtransaction');
    let second;
    try {
      await eventuallyMining(
        mine,
        history,
        (events) => of(first.id, events).includes('RefundTransactionPrepared'),
        90_000,
      );
      second = await refund(key, p.paymentId, { amount: part, destination: randomAddress('p2wpkh') });
      assert.equal(second.status, 'awaiting_funds', "the wallet's one coin is the first refund's");
      // The payout engine looks again every 5 s: still nothing to pay it from.
      await new Promise((resolve) => setTimeout(resolve, 12_000));
      assert.deepEqual(of(second.id, await history()), ['RefundCreated', 'RefundApproved']);
    } finally {
      node.unreachable.delete('sendrawtransaction');
    }
    await completed(first.id, key);
    assert.equal((await get(`/api/v1/refunds/${second.id}`, key)).status, 'awaiting_funds');
    assert.deepEqual(of(second.id, await history()), ['RefundCreated', 'RefundApproved']);

    // The merchant funds the wallet again: the second refund goes on by itself.
    const funding = node.pay(payer, [{ address: wallet!.address, sats: third + 100_000n }]);
    const done = await completed(second.id, key);
    const paidOut = decoded(done.transactionHash);
    assert.deepEqual(paidOut.spends, [
      `${funding.getId()}:${funding.outs.findIndex((o) => BigInt(o.value) === third + 100_000n)}`,
    ]);
    assert.equal(paidOut.fee, sats(done.networkFee));
    assert.deepEqual(paidOut.outputs[0], { to: done.destination, sats: sats(done.netAmount) });
  });
});
