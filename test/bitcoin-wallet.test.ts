// Refund wallets' coins followed by a watch-only descriptor wallet in Bitcoin
// Core: the test node's wallets against what Core refuses (a duplicate
// createwallet, loading a missing or loaded wallet, an unknown wallet path, a
// missing or wrong descriptor checksum, an import without a timestamp) and
// what its listunspent answers; then the adapter making, loading and
// re-importing its wallet across restarts of the service and of bitcoind.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { BitcoinChain, refundCoins, WATCH_WALLET } from '../adapters/chains/bitcoin/index.ts';
import { DepositKeyring } from '../adapters/keys/derivation.ts';
import { SERVICE_MNEMONIC } from './support/evm-flow.ts';
import { BitcoinTestNode, descriptorChecksum, randomBitcoinKey, type BitcoinKey } from './support/bitcoin-node.ts';

type Answer = { result: any; error: { code: number; message: string } | null };

function rpcOn(node: BitcoinTestNode) {
  return async (method: string, params: unknown[], wallet?: string): Promise<Answer> => {
    const url = wallet === undefined ? node.url : new URL(`wallet/${encodeURIComponent(wallet)}`, node.url);
    const response = await fetch(url, {
      method: 'POST',
      headers: { authorization: 'Basic ' + Buffer.from(`${node.user}:${node.password}`).toString('base64') },
      body: JSON.stringify({ jsonrpc: '1.0', id: 1, method, params }),
    });
    return (await response.json()) as Answer;
  };
}

/** A test node for the suite, with a funded payer, and its RPC. */
function suiteNode() {
  const t = {} as { node: BitcoinTestNode; payer: BitcoinKey; rpc: ReturnType<typeof rpcOn> };
  before(async () => {
    t.node = await new BitcoinTestNode().start();
    t.rpc = rpcOn(t.node);
    t.payer = randomBitcoinKey();
    for (let i = 0; i < 10; i++) t.node.fund(t.payer.address, 20_000_000n);
  });
  after(() => t.node.stop());
  return t;
}

describe("the Bitcoin test node's wallets refuse what Bitcoin Core refuses", () => {
  const t = suiteNode();
  const watchOnly = (name: string) => t.rpc('createwallet', [name, true, true, '', false, true]);
  const addrDescriptor = (address: string) => `addr(${address})#${descriptorChecksum(`addr(${address})`)}`;

  it('answers a wallet call on / with none loaded, and on an unknown or unloaded wallet path, with -18', async () => {
    assert.deepEqual((await t.rpc('listunspent', [])).error, {
      code: -18,
      message:
        'No wallet is loaded. Load a wallet using loadwallet or create a new one with createwallet. (Note: A default wallet is no longer automatically created)',
    });
    assert.deepEqual((await t.rpc('listunspent', [], 'nowhere')).error, {
      code: -18,
      message: 'Requested wallet does not exist or is not loaded',
    });
    assert.equal((await watchOnly('unloaded')).error, null);
    assert.equal((await t.rpc('unloadwallet', ['unloaded'])).error, null);
    assert.equal((await t.rpc('listunspent', [], 'unloaded')).error?.code, -18);
  });

  it('makes a wallet once: createwallet again is -36; loadwallet of a loaded one is -35, of a missing one -18', async () => {
    assert.deepEqual((await watchOnly('once')).result, { name: 'once' });
    const again = await watchOnly('once');
    assert.equal(again.error?.code, -36);
    assert.match(again.error!.message, /Database already exists\.$/);
    assert.deepEqual((await t.rpc('loadwallet', ['once'])).error, {
      code: -35,
      message: 'Wallet "once" is already loaded.',
    });
    const missing = await t.rpc('loadwallet', ['never-made']);
    assert.equal(missing.error?.code, -18);
    assert.match(missing.error!.message, /^Wallet file verification failed\. .*Path does not exist\.$/);
    assert.equal((await t.rpc('unloadwallet', ['once'])).error, null);
    assert.deepEqual((await t.rpc('loadwallet', ['once'])).result, { name: 'once' });
  });

  it('checksums descriptors as BIP380 does, and imports a descriptor only with its checksum and a timestamp', async () => {
    assert.equal(descriptorChecksum('raw(deadbeef)'), '89f8spxm'); // BIP380's test vector
    await watchOnly('imports');
    const { address } = randomBitcoinKey();
    const info = (await t.rpc('getdescriptorinfo', [`addr(${address})`])).result;
    assert.equal(info.descriptor, addrDescriptor(address));
    const wrong = `addr(${address})#${info.checksum === 'qqqqqqqq' ? 'pppppppp' : 'qqqqqqqq'}`;
    assert.equal((await t.rpc('getdescriptorinfo', [wrong])).error?.code, -5);
    const answers = (
      await t.rpc(
        'importdescriptors',
        [
          [
            { desc: `addr(${address})`, timestamp: 'now' },
            { desc: wrong, timestamp: 'now' },
            { desc: info.descriptor, timestamp: 'now' },
          ],
        ],
        'imports',
      )
    ).result;
    assert.deepEqual(answers, [
      { success: false, error: { code: -5, message: 'Missing checksum' } },
      {
        success: false,
        error: {
          code: -5,
          message: `Provided checksum '${wrong.split('#')[1]}' does not match computed checksum '${info.checksum}'`,
        },
      },
      { success: true },
    ]);
    assert.deepEqual((await t.rpc('importdescriptors', [[{ desc: info.descriptor }]], 'imports')).error, {
      code: -3,
      message: 'Missing required timestamp field for key',
    });
  });

  it('lists only what the wallet watches since its timestamp: confirmed (minconf), unspent, mature', async () => {
    await watchOnly('lists');
    const [watched, other, late] = [randomBitcoinKey(), randomBitcoinKey(), randomBitcoinKey()];
    t.node.pay(t.payer, [{ address: late.address, sats: 50_000n }]);
    t.node.mine(1);
    const lateFrom = t.node.tip.time + 3 * 3600; // past the two-hour window: the coin mined before it is not seen
    const imported = await t.rpc(
      'importdescriptors',
      [
        [
          { desc: addrDescriptor(watched.address), timestamp: 'now' },
          { desc: addrDescriptor(late.address), timestamp: lateFrom },
        ],
      ],
      'lists',
    );
    assert.deepEqual(imported.result, [{ success: true }, { success: true }]);
    t.node.pay(t.payer, [{ address: watched.address, sats: 70_000n }]);
    t.node.pay(t.payer, [{ address: other.address, sats: 60_000n }]); // never imported
    t.node.pay(t.payer, [{ address: late.address, sats: 40_000n }]);
    const spentLater = t.node.pay(t.payer, [{ address: watched.address, sats: 30_000n }]);
    t.node.mine(1);
    t.node.mine(1, { coinbaseTo: watched.address }); // immature
    t.node.pay(t.payer, [{ address: watched.address, sats: 9_000n }]); // unconfirmed
    const vout = spentLater.outs.findIndex((o) => BigInt(o.value) === 30_000n);
    t.node.spendOutput(watched, spentLater.getId(), vout, t.payer.address); // spent by a mempool transaction

    const list = async (minconf: number, addresses: string[]) =>
      ((await t.rpc('listunspent', [minconf, 9_999_999, addresses], 'lists')).result as any[])
        .map((u) => `${u.address}:${u.amount}:${u.confirmations}`)
        .sort();
    assert.deepEqual(await list(1, [other.address]), [], 'an address the wallet never imported has nothing');
    assert.deepEqual(await list(1, [watched.address]), [`${watched.address}:0.0007:2`]);
    assert.deepEqual(await list(0, [watched.address]), [`${watched.address}:0.00009:0`, `${watched.address}:0.0007:2`]);
    assert.deepEqual(await list(1, [late.address]), [`${late.address}:0.0004:2`], 'only what came after its timestamp');
    const [entry] = (await t.rpc('listunspent', [1, 9_999_999, [watched.address]], 'lists')).result;
    assert.deepEqual(Object.keys(entry).sort(), [
      'address',
      'amount',
      'confirmations',
      'parent_descs',
      'safe',
      'scriptPubKey',
      'solvable',
      'spendable',
      'txid',
      'vout',
    ]);
    assert.equal((await t.rpc('listunspent', [1, 9_999_999, ['not-an-address']], 'lists')).error?.code, -5);
  });
});

describe("the Bitcoin adapter's watch-only wallet for refund wallets", () => {
  const t = suiteNode();
  const keyring = DepositKeyring.fromMnemonic(SERVICE_MNEMONIC, { bitcoinNetwork: 'regtest' });
  const options = () => ({ rpcUrl: t.node.rpcUrl, network: 'regtest' as const, keyring, log: () => {} });
  const open = () => BitcoinChain.open(options());

  it("reads a refund wallet's confirmed coins no pending transaction spends, from the wallet it made", async () => {
    const chain = await open();
    try {
      const [a, b] = [randomBitcoinKey(), randomBitcoinKey()];
      // Asked before anyone pays it: the address is imported then, and later coins are seen.
      assert.equal(await chain.balanceOf(a.address, 'BTC'), 0n);
      assert.equal(await chain.balanceOf(b.address, 'BTC'), 0n);
      t.node.pay(t.payer, [{ address: a.address, sats: 70_000n }]);
      t.node.pay(t.payer, [{ address: a.address, sats: 30_000n }]);
      t.node.pay(t.payer, [{ address: b.address, sats: 5_000n }]);
      const spent = t.node.pay(t.payer, [{ address: b.address, sats: 40_000n }]);
      t.node.mine(1);
      t.node.pay(t.payer, [{ address: a.address, sats: 9_000n }]); // unconfirmed: waits for its block
      t.node.spendOutput(
        b,
        spent.getId(),
        spent.outs.findIndex((o) => BigInt(o.value) === 40_000n),
        t.payer.address,
      );
      assert.deepEqual(await Promise.all([chain.balanceOf(a.address, 'BTC'), chain.balanceOf(b.address, 'BTC')]), [
        100_000n,
        5_000n, // the coin a pending transaction spends is not counted
      ]);
      assert.equal(t.node.calls.get('createwallet'), 1, 'the wallet is made once');
      assert.equal(t.node.calls.get('importdescriptors'), 2, 'each address is imported once by a process');
      const coins = (await t.rpc('listunspent', [1, 9_999_999, [a.address]], WATCH_WALLET)).result;
      assert.equal(coins.length, 2, "the coins are the watch-only wallet's");
    } finally {
      chain.close();
    }
  });

  it('refuses to start on a node without a wallet (disablewallet=1), saying so', async () => {
    t.node.walletDisabled = true;
    try {
      await assert.rejects(open(), /the node has no wallet \(disablewallet=1\?\)/);
    } finally {
      t.node.walletDisabled = false;
    }
  });

  it('loads its wallet after a restart of the service, and of bitcoind, and finds the addresses it follows already', async () => {
    const a = randomBitcoinKey();
    const first = await open();
    assert.equal(await first.balanceOf(a.address, 'BTC'), 0n);
    first.close();
    t.node.pay(t.payer, [{ address: a.address, sats: 80_000n }]);
    t.node.mine(1);

    const created = t.node.calls.get('createwallet');
    const second = await open(); // a restart of the service: its wallet is still loaded in Core (-35)
    try {
      assert.equal(await second.balanceOf(a.address, 'BTC'), 80_000n);
      t.node.restartWallets(); // bitcoind restarted: the wallet was saved to load at start-up
      assert.equal(await second.balanceOf(a.address, 'BTC'), 80_000n);
      // Unloaded by hand: the next call is -18, and the adapter loads it again.
      assert.equal((await t.rpc('unloadwallet', [WATCH_WALLET])).error, null);
      assert.equal(await second.balanceOf(a.address, 'BTC'), 80_000n);
      assert.equal(t.node.calls.get('createwallet'), created, 'never made again');
    } finally {
      second.close();
    }
  });

  it("finds a refund wallet's coins mined hours before its first import into the node's wallet, from its assignment on", async () => {
    const a = randomBitcoinKey();
    const assignedAt = new Date(Date.now() - 60_000).toISOString();
    t.node.pay(t.payer, [{ address: a.address, sats: 60_000n }]);
    t.node.mine(1);
    t.node.mockTimeAhead = 3 * 3600; // three hours on: the coin is older than "now" less Core's two hours
    try {
      t.node.mine(1);
      const imports = t.node.calls.get('importdescriptors') ?? 0;
      const chain = await open();
      try {
        assert.equal(await chain.balanceOf(a.address, 'BTC', assignedAt), 60_000n);
        assert.equal(t.node.calls.get('importdescriptors'), imports + 1);
      } finally {
        chain.close();
      }
      const restarted = await open();
      try {
        assert.equal(await restarted.balanceOf(a.address, 'BTC', assignedAt), 60_000n);
        assert.equal(t.node.calls.get('importdescriptors'), imports + 1, 'followed already: no import, no rescan');
      } finally {
        restarted.close();
      }
    } finally {
      t.node.mockTimeAhead = 0;
    }
  });

  it('imports again an address whose rescan failed (pruned blocks) or was cut off (bitcoind restarted), and then finds its older coins', async () => {
    const [a, b] = [randomBitcoinKey(), randomBitcoinKey()];
    const assignedAt = new Date(Date.now() - 60_000).toISOString();
    t.node.pay(t.payer, [
      { address: a.address, sats: 60_000n },
      { address: b.address, sats: 50_000n },
    ]);
    t.node.mine(1);
    t.node.mockTimeAhead = 3 * 3600; // the coins older than "now" less Core's two hours: only a rescan finds them
    const lines: string[] = [];
    /** What a new process of the service reads of `address`'s balance, the process then stopped. */
    const balanceSeenByNewProcess = async (address: string) => {
      const chain = await BitcoinChain.open({ ...options(), log: (l) => lines.push(l) });
      try {
        return await chain.balanceOf(address, 'BTC', assignedAt);
      } finally {
        chain.close();
      }
    };
    try {
      t.node.mine(1);
      // A pruned node lacks the coins' block: the import's answer is success false, the address followed all the same.
      t.node.pruneHeight = t.node.tip.height;
      assert.equal(await balanceSeenByNewProcess(a.address), 0n);
      assert.match(lines.join('\n'), /Rescan failed for descriptor with timestamp \d+\. .*pruning/);
      assert.equal((await t.rpc('getaddressinfo', [a.address], WATCH_WALLET)).result.ismine, true);
      // The blocks downloaded again (-reindex): the next process imports it again and finds the coin.
      t.node.pruneHeight = 0;
      assert.equal(await balanceSeenByNewProcess(a.address), 60_000n);

      // A rescan still running does not hold the look (IMPORT_WAIT_MS), and bitcoind stops before it ends.
      t.node.holdRescans = true;
      try {
        assert.equal(await balanceSeenByNewProcess(b.address), 0n);
      } finally {
        t.node.holdRescans = false;
        t.node.restartWallets();
      }
      assert.equal((await t.rpc('getaddressinfo', [b.address], WATCH_WALLET)).result.ismine, true);
      assert.equal(await balanceSeenByNewProcess(b.address), 50_000n);
      const imports = t.node.calls.get('importdescriptors');
      assert.equal(await balanceSeenByNewProcess(b.address), 50_000n);
      assert.equal(t.node.calls.get('importdescriptors'), imports, 'rescanned in full once: not imported again');
    } finally {
      t.node.mockTimeAhead = 0;
      t.node.pruneHeight = 0;
    }
  });

  it(
    "waits for an import whose rescan outlasts fetch's 300 s wait for headers, and imports it once",
    { skip: !process.env.BITCOIN_LONG_RESCAN && 'takes 5 minutes: BITCOIN_LONG_RESCAN=1', timeout: 400_000 },
    async () => {
      const a = randomBitcoinKey();
      const chain = await open();
      t.node.holdRescans = true;
      try {
        const imports = t.node.calls.get('importdescriptors') ?? 0;
        assert.equal(await chain.balanceOf(a.address, 'BTC', new Date().toISOString()), 0n);
        await new Promise((resolve) => setTimeout(resolve, 305_000));
        t.node.holdRescans = false;
        t.node.finishRescans();
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        const info = await t.rpc('getaddressinfo', [a.address], WATCH_WALLET);
        assert.match(info.result.labels[0] ?? 'none', /^rescanned from \d+$/, 'the answer came back to the import');
        assert.equal(t.node.calls.get('importdescriptors'), imports + 1, 'imported once');
      } finally {
        t.node.holdRescans = false;
        t.node.finishRescans();
        chain.close();
      }
    },
  );
});

describe("a refund wallet's coins for one refund", () => {
  const coin = (value: bigint, id: string) => ({ value, id });
  // 1,000 sat/kvB: one more input costs 68 sats.
  const rate = 1_000n;

  it('the smallest coin that pays the refund and its fee on its own', () => {
    const coins = [coin(50_000n, 'a'), coin(20_000n, 'b'), coin(10_999n, 'c'), coin(11_000n, 'd')];
    assert.deepEqual(
      refundCoins(coins, 10_000n, 1_000n, rate).map((c) => c.id),
      ['d'],
    );
  });

  it('else the largest ones until they pay it, each added input priced at the rate', () => {
    const coins = [coin(6_000n, 'a'), coin(5_000n, 'b'), coin(4_000n, 'c')];
    // 6,000 + 5,000 = 11,000 = 10,000 + 1,000 + 68 short; the third makes it.
    assert.deepEqual(
      refundCoins(coins, 10_000n, 1_000n, rate).map((c) => c.id),
      ['a', 'b', 'c'],
    );
    assert.deepEqual(
      refundCoins(coins, 9_900n, 1_000n, rate).map((c) => c.id),
      ['a', 'b'],
    );
  });

  it('all of them when they do not pay it (the payout then says what is missing)', () => {
    assert.deepEqual(
      refundCoins([coin(1_000n, 'a'), coin(2_000n, 'b')], 10_000n, 1_000n, rate).map((c) => c.id),
      ['b', 'a'],
    );
    assert.deepEqual(refundCoins([], 10_000n, 1_000n, rate), []);
  });
});
