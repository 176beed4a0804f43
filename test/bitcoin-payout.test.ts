// Bitcoin payouts against a test node as strict as Bitcoin Core, one defect
// of issue 25 each: a payout found by its txid once its outputs are spent
// (never sent twice), the deposit's coins taken from the recorded payments
// (never a UTXO-set scan, never a later payment), the fee of the real size at
// the current rate out of the platform's share, the cookie re-read, pruned
// blocks named, immature coinbases, per-type dust and BIP125 with
// descendants; then fifty payouts of mixed shapes, each paid once.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as bitcoin from 'bitcoinjs-lib';
import { BitcoinChain, type BitcoinChainOptions } from '../adapters/chains/bitcoin/index.ts';
import type { OutgoingTransfer } from '../adapters/chains/port.ts';
import { DepositKeyring } from '../adapters/keys/derivation.ts';
import { SERVICE_MNEMONIC } from './support/evm-flow.ts';
import { BitcoinTestNode, randomAddress, randomBitcoinKey, type BitcoinKey } from './support/bitcoin-node.ts';

const keyring = DepositKeyring.fromMnemonic(SERVICE_MNEMONIC, { bitcoinNetwork: 'regtest' });
const RETRY = { attempts: 2, baseDelayMs: 10 };

describe('Bitcoin payouts', () => {
  let node: BitcoinTestNode;
  let chain: BitcoinChain;
  let payer: BitcoinKey;
  let nextIndex = 1000;
  before(async () => {
    node = await new BitcoinTestNode().start();
    payer = randomBitcoinKey();
    for (let i = 0; i < 150; i++) node.fund(payer.address, 100_000_000n);
    chain = await open(node);
  });
  after(async () => {
    chain.close();
    await node.stop();
  });

  const open = (on: BitcoinTestNode, extra: Partial<BitcoinChainOptions> = {}) =>
    BitcoinChain.open({ rpcUrl: on.rpcUrl, network: 'regtest', keyring, retry: RETRY, log: () => {}, ...extra });
  const deposit = () => {
    const derivationIndex = nextIndex++;
    return { address: keyring.deriveDepositKey('bitcoin', derivationIndex).address, derivationIndex };
  };
  /** The payer's payment of `amounts` to `address`, as the watcher records it: one source per output. */
  const pay = (address: string, ...amounts: bigint[]) => {
    const tx = node.pay(
      payer,
      amounts.map((sats) => ({ address, sats })),
    );
    const script = Buffer.from(bitcoin.address.toOutputScript(address, bitcoin.networks.regtest));
    return tx.outs.flatMap((o, index) =>
      script.equals(Buffer.from(o.script)) ? [{ txHash: tx.getId(), index, amount: BigInt(o.value) }] : [],
    );
  };
  const total = (sources: { amount: bigint }[]) => sources.reduce((s, x) => s + x.amount, 0n);
  /** A settlement's payout: 1% to the platform, the quoted fee to the network, the rest to the merchant. */
  const payout = (
    from: ReturnType<typeof deposit>,
    to: string,
    sources: OutgoingTransfer['sources'] & {},
    network: bigint,
    reference: string,
  ): OutgoingTransfer => {
    const platform = total(sources) / 100n;
    return {
      from,
      to,
      token: 'BTC',
      amount: total(sources) - platform - network,
      reference,
      fees: { platform, network },
      sources,
    };
  };

  it('1. is found by its txid once the merchant spent it, and a second payment to the address is never paid out with it', async () => {
    const from = deposit();
    const merchant = randomBitcoinKey();
    const sources = pay(from.address, 1_000_000n);
    node.mine(1);
    const quoted = chain.networkFee('BTC');
    // No treasury output (the platform takes nothing): the merchant's spend leaves nothing of the payout unspent.
    const transfer = {
      ...payout(from, merchant.address, sources, quoted, 'double/1'),
      amount: 1_000_000n - quoted,
      fees: { platform: 0n, network: quoted },
    };
    const first = await chain.prepareTransfer(transfer);
    await chain.broadcast(first);
    const [minedIn] = node.mine(1);
    node.spendOutput(merchant, first.txHash, 0, randomBitcoinKey().address);
    node.mine(1);
    pay(from.address, 700_000n); // the customer pays again, to the same address
    node.mine(1);
    const mined = { blockNumber: node.tip.height - 2, confirmations: 3 };
    assert.deepEqual(await chain.transactionStatus(first.txHash), mined);
    // Sent again (a restart between broadcast and record): Core answers -25, and it is no refusal.
    await chain.broadcast(first);
    // A process that knows nothing of it finds it too, and so does its broadcast.
    const restarted = await open(node);
    try {
      assert.deepEqual(await restarted.transactionStatus(first.txHash), mined);
      await restarted.broadcast(first);
      // A new attempt finds its coins spent, and makes nothing.
      await assert.rejects(
        restarted.prepareTransfer({ ...transfer, reference: 'double/2' }),
        /spent or not in the chain/,
      );
    } finally {
      restarted.close();
    }
    node.mine(1);
    assert.deepEqual(node.received(merchant.address), [{ txid: first.txHash, sats: transfer.amount }], 'paid once');
    assert.ok(minedIn);
  });

  it('2. spends exactly the recorded payments it is given, each checked, never from a wallet', async () => {
    const from = deposit();
    const merchant = randomAddress('p2wpkh');
    const sources = pay(from.address, 600_000n);
    const late = pay(from.address, 400_000n);
    node.mine(1);
    const walletReads = node.calls.get('listunspent') ?? 0;
    const transfer = payout(from, merchant, sources, chain.networkFee('BTC'), 'exact/1');
    await assert.rejects(
      chain.prepareTransfer({ ...transfer, sources: undefined, reference: 'exact/0' }),
      /names no recorded payments/,
    );
    await assert.rejects(
      chain.prepareTransfer({ ...transfer, sources: [{ ...sources[0]!, amount: 600_001n }], reference: 'exact/x' }),
      /is not a payment of 600001 sats/,
    );
    const prepared = await chain.prepareTransfer(transfer);
    await chain.broadcast(prepared);
    node.mine(1);
    assert.deepEqual(node.received(merchant), [{ txid: prepared.txHash, sats: transfer.amount }]);
    assert.equal(
      node.isUnspent(late[0]!.txHash, late[0]!.index),
      true,
      'the later payment stays for its own settlement or refund',
    );
    assert.equal(node.calls.get('listunspent') ?? 0, walletReads, "the deposit's coins are not read from a wallet");
  });

  it("3. pays the fee of its real size at the current rate, out of the platform's share, whatever its shape", async () => {
    const shapes = [
      { name: 'two outputs to a P2TR wallet', to: randomAddress('p2tr'), amounts: [300_000n, 300_000n] },
      { name: 'a dust top-up to a P2PKH wallet', to: randomAddress('p2pkh'), amounts: [600_000n, 400n] },
    ];
    for (const shape of shapes) {
      const from = deposit();
      const sources = pay(from.address, ...shape.amounts);
      node.mine(1);
      const transfer = payout(from, shape.to, sources, chain.networkFee('BTC'), `fee/${shape.name}`);
      // Between the quote and the sweep the market went from 2 to 20 sat/vB, and a full mempool asks 25.
      node.feeRate = 20_000n;
      node.mempoolMinFee = 25_000n;
      try {
        const prepared = await chain.prepareTransfer(transfer);
        await chain.broadcast(prepared);
        node.mine(1);
        const fee = node.minedFee(prepared.txHash);
        const tx = node.received(shape.to);
        assert.deepEqual(
          tx,
          [{ txid: prepared.txHash, sats: transfer.amount }],
          `${shape.name}: the merchant's net, untouched`,
        );
        assert.ok(fee > transfer.fees!.network, `${shape.name}: more than the quote`);
        assert.deepEqual(
          node.received(chain.treasury).filter((r) => r.txid === prepared.txHash),
          [{ txid: prepared.txHash, sats: total(sources) - transfer.amount - fee }],
          `${shape.name}: the difference came out of the platform's share`,
        );
      } finally {
        node.feeRate = 2_000n;
        node.mempoolMinFee = 0n;
      }
    }
  });

  it("3. says so when even the platform's share cannot pay the fee", async () => {
    const from = deposit();
    const sources = pay(from.address, 500_000n);
    node.mine(1);
    const transfer = payout(from, randomAddress('p2wpkh'), sources, chain.networkFee('BTC'), 'broke/1');
    node.feeRate = 200_000n; // 200 sat/vB: 22,000 sats for this sweep, the platform has 5,000
    try {
      await assert.rejects(chain.prepareTransfer(transfer), /is more than the platform's share can pay/);
    } finally {
      node.feeRate = 2_000n;
    }
  });

  it("4. refuses a payout under its wallet type's dust limit", async () => {
    const from = deposit();
    const sources = pay(from.address, 10_000n);
    node.mine(1);
    const transfer = { ...payout(from, randomAddress('p2pkh'), sources, 282n, 'dust/1'), amount: 545n };
    await assert.rejects(chain.prepareTransfer(transfer), /is dust \(under 546\)/);
  });

  it('4. waits for a coinbase payment to mature before spending it', async () => {
    const from = deposit();
    node.mine(1, { coinbaseTo: from.address });
    const reward = (await chain.block(node.tip.height))!.transfers.find((t) => t.to === from.address)!;
    const sources = [{ txHash: reward.txHash, index: reward.index, amount: reward.amount }];
    const transfer = payout(from, randomAddress('p2wpkh'), sources, chain.networkFee('BTC'), 'coinbase/1');
    await assert.rejects(
      chain.prepareTransfer(transfer),
      /coinbase output with 1 confirmations; it can be spent at 100/,
    );
    node.mine(99);
    const prepared = await chain.prepareTransfer({ ...transfer, reference: 'coinbase/2' });
    await chain.broadcast(prepared);
    node.mine(1);
    assert.ok(await chain.transactionStatus(prepared.txHash));
  });

  it("4. bumps a stuck payout over its descendants' fees too (BIP125)", async () => {
    const from = deposit();
    const merchant = randomBitcoinKey();
    const sources = pay(from.address, 5_000_000n);
    node.mine(1);
    const transfer = payout(from, merchant.address, sources, chain.networkFee('BTC'), 'bump/1');
    node.miningFloor = 50n; // the miners want 50 sat/vB: the payout waits
    try {
      const stuck = await chain.prepareTransfer(transfer);
      await chain.broadcast(stuck);
      node.mine(1);
      // The merchant already moves the unconfirmed payout on, at a generous fee.
      node.spendOutput(merchant, stuck.txHash, 0, randomBitcoinKey().address, 20_000n);
      node.feeRate = 30_000n;
      const bump = await chain.prepareTransfer({ ...transfer, reference: 'bump/2' });
      await chain.broadcast(bump);
      assert.equal(node.inMempool(stuck.txHash), false, 'the bump replaced the stuck payout and its child');
      node.miningFloor = 0n;
      node.mine(1);
      assert.deepEqual(node.received(merchant.address), [{ txid: bump.txHash, sats: transfer.amount }], 'paid once');
      assert.equal(await chain.transactionStatus(stuck.txHash), undefined);
    } finally {
      node.miningFloor = 0n;
      node.feeRate = 2_000n;
    }
  });

  it('fifty payouts of mixed shapes, with the fee moving between quote and sweep, each paid once, at the first broadcast or after a bump', async () => {
    await chain.head(); // the quotes at the market's current 2 sat/vB, as the watcher keeps it
    const runs = Array.from({ length: 50 }, (_, i) => {
      const from = deposit();
      const shape = (['one output', 'two outputs', 'a dust top-up', 'a P2TR wallet', 'a P2PKH wallet'] as const)[
        i % 5
      ]!;
      const to =
        shape === 'a P2TR wallet'
          ? randomAddress('p2tr')
          : shape === 'a P2PKH wallet'
            ? randomAddress('p2pkh')
            : randomAddress('p2wpkh');
      const base = 1_000_000n + BigInt(i) * 10_000n;
      const amounts =
        shape === 'two outputs' ? [base / 2n, base - base / 2n] : shape === 'a dust top-up' ? [base, 350n] : [base];
      return { i, shape, from, to, sources: pay(from.address, ...amounts), quoted: chain.networkFee('BTC') };
    });
    node.mine(1);
    const attempts: { run: (typeof runs)[number]; transfer: OutgoingTransfer; txHashes: string[] }[] = [];
    try {
      for (const run of runs) {
        // Every third sweep meets a market at 15 sat/vB where 2 were quoted.
        node.feeRate = run.i % 3 === 0 ? 15_000n : 2_000n;
        const transfer = payout(run.from, run.to, run.sources, run.quoted, `fifty/${run.i}/1`);
        const prepared = await chain.prepareTransfer(transfer);
        await chain.broadcast(prepared);
        attempts.push({ run, transfer, txHashes: [prepared.txHash] });
      }
      // The miners want 10 sat/vB: the sweeps at the quoted 2 wait, and are bumped at the market's 12.
      node.miningFloor = 10n;
      node.mine(1);
      node.feeRate = 12_000n;
      for (const attempt of attempts) {
        if (!node.inMempool(attempt.txHashes[0]!)) continue;
        const bump = await chain.prepareTransfer({ ...attempt.transfer, reference: `fifty/${attempt.run.i}/2` });
        await chain.broadcast(bump);
        attempt.txHashes.push(bump.txHash);
      }
      node.miningFloor = 0n;
      node.mine(1);
    } finally {
      node.feeRate = 2_000n;
      node.miningFloor = 0n;
    }
    for (const { run, transfer, txHashes } of attempts) {
      const paid = node.received(run.to);
      assert.equal(paid.length, 1, `payout ${run.i} (${run.shape}) paid once`);
      assert.deepEqual(
        paid[0],
        { txid: txHashes.at(-1), sats: transfer.amount },
        `payout ${run.i} (${run.shape}): the net, by its last attempt`,
      );
      assert.ok(await chain.transactionStatus(txHashes.at(-1)!));
      if (txHashes.length === 2) assert.equal(await chain.transactionStatus(txHashes[0]!), undefined);
    }
    const bumped = attempts.filter((a) => a.txHashes.length === 2).length;
    assert.ok(bumped > 0 && bumped < 50, `${bumped} bumped, the rest relayed and mined at the first broadcast`);
  });

  it('4. without ZMQ downloads the mempool at most once per mempoolPollMs, and reads at most 100 new transactions a step', async () => {
    const polled = await open(node, { mempoolPollMs: 600_000 });
    const calls = (method: string) => node.calls.get(method) ?? 0;
    try {
      node.mine(1); // an empty mempool
      const many = randomBitcoinKey();
      for (let i = 0; i < 130; i++) node.fund(many.address, 1_000_000n);
      for (let i = 0; i < 130; i++) node.pay(many, [{ address: randomAddress('p2wpkh'), sats: 10_000n }]);
      const [downloads, reads] = [calls('getrawmempool'), calls('getrawtransaction')];
      const txids = async () => new Set((await polled.mempool()).map((t) => t.txHash)).size;
      assert.equal(await txids(), 100, 'the first step reads 100 of the 130 new transactions');
      assert.equal(await txids(), 130, 'the next step the other 30');
      assert.equal(await txids(), 130);
      assert.equal(calls('getrawmempool') - downloads, 1, 'one download of the list');
      assert.equal(calls('getrawtransaction') - reads, 130, 'each transaction read once');
    } finally {
      polled.close();
      node.mine(1);
    }
  });

  it('4. reads the cookie again when the node restarted and wrote a new one', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'bitcoin-cookie-'));
    const cookieNode = await new BitcoinTestNode().start();
    cookieNode.useCookie(join(dir, '.cookie'));
    const url = new URL(cookieNode.url);
    const cookieChain = await open(cookieNode, { rpcUrl: url.toString(), cookieFile: join(dir, '.cookie') });
    try {
      cookieNode.rotateCookie();
      cookieNode.mine(1);
      assert.equal((await cookieChain.head()).height, 1);
    } finally {
      cookieChain.close();
      await cookieNode.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('4. says at start-up how far back a pruned node serves, and names a pruned block as such', async () => {
    const pruned = await new BitcoinTestNode().start();
    pruned.mine(5);
    pruned.pruneHeight = 3;
    const lines: string[] = [];
    const prunedChain = await open(pruned, { log: (line) => lines.push(line) });
    try {
      assert.deepEqual(lines, [
        'bitcoin: the node is pruned and serves blocks from height 3 on; a block below it the watcher has yet to read goes on the attention list, and a payout mined below it cannot be found',
      ]);
      await assert.rejects(prunedChain.block(1), {
        message: 'bitcoin: block 1 is pruned; the node serves blocks from height 3 on',
      });
      assert.equal((await prunedChain.block(3))!.height, 3);
      // A payout is looked for in the blocks the node still has.
      assert.equal(await prunedChain.transactionStatus('ab'.repeat(32)), undefined);
    } finally {
      prunedChain.close();
      await pruned.stop();
    }
  });
});
