// The Bitcoin adapter against the test node, and the test node against what
// Bitcoin Core refuses: missing or spent inputs (and -27 only while a mined
// transaction's output is unspent), bad signatures, outputs over inputs, dust
// by script type, a fee under the relay or the mempool's minimum, immature
// coinbases, conflicts without RBF, a replacement that does not pay for what
// it evicts, pruned blocks and a rotated cookie (wallets: bitcoin-wallet.test.ts).
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as bitcoin from 'bitcoinjs-lib';
import { BitcoinChain, parseCoreJson, satoshis } from '../adapters/chains/bitcoin/index.ts';
import { DepositKeyring } from '../adapters/keys/derivation.ts';
import { SERVICE_MNEMONIC } from './support/evm-flow.ts';
import { BitcoinTestNode, randomAddress, randomBitcoinKey, type BitcoinKey } from './support/bitcoin-node.ts';

describe('Bitcoin amounts', () => {
  it('are read from Core\'s decimal text to the satoshi, never through a double', () => {
    assert.equal(satoshis('0.00000001'), 1n);
    assert.equal(satoshis('20999999.99999999'), 2_099_999_999_999_999n);
    assert.equal(satoshis('0.1'), 10_000_000n);
    assert.throws(() => satoshis('0.000000001'));
    const parsed = parseCoreJson<{ vout: { value: string }[] }>('{"vout":[{"value": 0.29999999, "n":0}]}');
    assert.equal(satoshis(parsed.vout[0]!.value), 29_999_999n);
  });
});

describe('the Bitcoin test node refuses what Bitcoin Core refuses', () => {
  let node: BitcoinTestNode;
  let payer: BitcoinKey;
  before(async () => {
    node = await new BitcoinTestNode().start();
    payer = randomBitcoinKey();
    for (let i = 0; i < 40; i++) node.fund(payer.address, 20_000_000n);
  });
  after(() => node.stop());

  const rpc = async (method: string, params: unknown[], password = node.password, user = node.user): Promise<any> => {
    const response = await fetch(node.url, {
      method: 'POST',
      headers: { authorization: 'Basic ' + Buffer.from(`${user}:${password}`).toString('base64') },
      body: JSON.stringify({ jsonrpc: '1.0', id: 1, method, params }),
    });
    if (response.status === 401) return { status: 401 };
    return { status: response.status, ...((await response.json()) as { result: any; error: { code: number; message: string } | null }) };
  };
  const coin = (amount = 10_000_000n) => {
    const key = randomBitcoinKey();
    const tx = node.pay(payer, [{ address: key.address, sats: amount }]);
    node.mine(1);
    return { key, txid: tx.getId(), vout: 0, value: amount };
  };
  /** A spend of one coin built by hand (bitcoinjs's PSBT would refuse the bad ones before the node could). */
  const spend = (
    c: ReturnType<typeof coin>,
    outputs: { address: string; value: bigint }[],
    { forgedBy, sequence = 0xfffffffd }: { forgedBy?: BitcoinKey; sequence?: number } = {},
  ) => {
    const tx = new bitcoin.Transaction();
    tx.version = 2;
    tx.addInput(Buffer.from(c.txid, 'hex').reverse(), c.vout, sequence);
    for (const o of outputs) tx.addOutput(bitcoin.address.toOutputScript(o.address, bitcoin.networks.regtest), o.value);
    const program = bitcoin.payments.p2wpkh({ pubkey: c.key.keyPair.publicKey }).hash!;
    const scriptCode = bitcoin.payments.p2pkh({ hash: program }).output!;
    const sighash = tx.hashForWitnessV0(0, scriptCode, c.value, bitcoin.Transaction.SIGHASH_ALL);
    // forgedBy: the right public key with another key's signature of the same sighash.
    const signer = forgedBy ?? c.key;
    const signature = bitcoin.script.signature.encode(signer.keyPair.sign(sighash), bitcoin.Transaction.SIGHASH_ALL);
    tx.setWitness(0, [signature, c.key.keyPair.publicKey]);
    return tx.toHex();
  };
  const to = () => randomBitcoinKey().address;

  it('takes a valid spend once; a repeat is answered with its id; mined, -27 while an output is unspent, then -25', async () => {
    const c = coin();
    const owner = randomBitcoinKey();
    const hex = spend(c, [{ address: owner.address, value: 9_990_000n }]);
    const sent = await rpc('sendrawtransaction', [hex]);
    assert.equal(sent.error, null);
    assert.match(sent.result, /^[0-9a-f]{64}$/);
    assert.deepEqual(await rpc('sendrawtransaction', [hex]), { status: 200, result: sent.result, error: null, id: 1 });
    assert.equal((await rpc('testmempoolaccept', [[hex]])).result[0]['reject-reason'], 'txn-already-in-mempool');
    node.mine(1);
    assert.deepEqual((await rpc('sendrawtransaction', [hex])).error, { code: -27, message: 'Transaction outputs already in utxo set' });
    // Its only output spent: Core no longer knows it as a whole, only that its inputs are gone.
    node.spendOutput(owner, sent.result, 0, to());
    node.mine(1);
    assert.deepEqual((await rpc('sendrawtransaction', [hex])).error, { code: -25, message: 'bad-txns-inputs-missingorspent' });
    assert.equal((await rpc('testmempoolaccept', [[hex]])).result[0]['reject-reason'], 'missing-inputs');
    assert.equal((await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 9_000_000n }])])).error?.code, -25);
  });

  it('finds a mined transaction only in a named block, without txindex', async () => {
    const c = coin();
    const hex = spend(c, [{ address: to(), value: 9_990_000n }]);
    const txid = (await rpc('sendrawtransaction', [hex])).result;
    assert.equal((await rpc('getrawtransaction', [txid, true])).result.txid, txid, 'in the mempool');
    const [hash] = node.mine(1);
    assert.equal((await rpc('getrawtransaction', [txid, true])).error?.code, -5);
    const found = (await rpc('getrawtransaction', [txid, true, hash])).result;
    assert.deepEqual([found.txid, found.in_active_chain, found.confirmations, found.blockhash], [txid, true, 1, hash]);
    const [other] = node.mine(1);
    assert.deepEqual((await rpc('getrawtransaction', [txid, true, other])).error, {
      code: -5,
      message: 'No such transaction found in the provided block. Use gettransaction for wallet transactions.',
    });
  });

  it('refuses a signature by another key, outputs over inputs, dust and a fee under the relay minimum', async () => {
    const c = coin();
    const stranger = randomBitcoinKey();
    const forged = await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 9_990_000n }], { forgedBy: stranger })]);
    assert.equal(forged.error?.code, -26);
    assert.match(forged.error!.message, /mandatory-script-verify-flag-failed/);
    assert.equal((await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 10_000_001n }])])).error?.message, 'bad-txns-in-belowout');
    assert.equal(
      (await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 9_000_000n }, { address: to(), value: 293n }])])).error?.message,
      'dust',
    );
    assert.match((await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 9_999_950n }])])).error!.message, /^min relay fee not met, 50 < 110$/);
    const tested = await rpc('testmempoolaccept', [[spend(c, [{ address: to(), value: 10_000_001n }])]]);
    assert.deepEqual([tested.result[0].allowed, tested.result[0]['reject-reason']], [false, 'bad-txns-in-belowout']);
    assert.equal((await rpc('getblockcount', [], 'wrong')).status, 401);
  });

  it('has a dust limit per output type, as GetDustThreshold computes it', async () => {
    for (const [type, limit] of [['p2pkh', 546n], ['p2sh', 540n], ['p2wsh', 330n], ['p2tr', 330n], ['p2wpkh', 294n]] as const) {
      const c = coin();
      const under = await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 9_000_000n }, { address: randomAddress(type), value: limit - 1n }])]);
      assert.equal(under.error?.message, 'dust', `${type} under ${limit}`);
      const at = await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 9_000_000n }, { address: randomAddress(type), value: limit }])]);
      assert.equal(at.error, null, `${type} at ${limit}`);
    }
  });

  it('asks the mempool\'s minimum fee on the real size once it is above the relay minimum', async () => {
    const c = coin();
    node.mempoolMinFee = 5_000n;
    try {
      assert.equal((await rpc('getmempoolinfo', [])).result.mempoolminfee, 0.00005);
      assert.equal(
        (await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 10_000_000n - 500n }])])).error?.message,
        'mempool min fee not met, 500 < 550',
      );
      assert.equal((await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 10_000_000n - 550n }])])).error, null);
    } finally {
      node.mempoolMinFee = 0n;
    }
  });

  it('has a coinbase in every block, spendable at 100 confirmations', async () => {
    const miner = randomBitcoinKey();
    node.mine(1); // an empty mempool: the reward is the subsidy alone
    const [hash] = node.mine(1, { coinbaseTo: miner.address });
    const block = (await rpc('getblock', [hash, 2])).result;
    assert.ok(block.tx[0].vin[0].coinbase, 'the first transaction is the coinbase');
    const reward = { key: miner, txid: block.tx[0].txid as string, vout: 0, value: 5_000_000_000n };
    assert.equal((await rpc('gettxout', [reward.txid, 0])).result.coinbase, true);
    node.mine(98);
    assert.equal(
      (await rpc('sendrawtransaction', [spend(reward, [{ address: to(), value: 4_999_990_000n }])])).error?.message,
      'bad-txns-premature-spend-of-coinbase, tried to spend coinbase at depth 99',
    );
    node.mine(1);
    assert.equal((await rpc('sendrawtransaction', [spend(reward, [{ address: to(), value: 4_999_990_000n }])])).error, null);
  });

  it('serves no block below its prune height', async () => {
    node.mine(2);
    const old = (await rpc('getblockhash', [1])).result;
    node.pruneHeight = 2;
    try {
      const info = (await rpc('getblockchaininfo', [])).result;
      assert.deepEqual([info.pruned, info.pruneheight], [true, 2]);
      assert.deepEqual((await rpc('getblock', [old, 2])).error, { code: -1, message: 'Block not available (pruned data)' });
    } finally {
      node.pruneHeight = 0;
    }
  });

  it('writes a new cookie at every restart and refuses the old one', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'bitcoin-cookie-'));
    const cookieNode = await new BitcoinTestNode().start();
    try {
      cookieNode.useCookie(join(dir, '.cookie'));
      const call = (user: string, password: string) =>
        fetch(cookieNode.url, {
          method: 'POST',
          headers: { authorization: 'Basic ' + Buffer.from(`${user}:${password}`).toString('base64') },
          body: JSON.stringify({ jsonrpc: '1.0', id: 1, method: 'getblockcount', params: [] }),
        });
      const before = cookieNode.password;
      assert.equal(cookieNode.user, '__cookie__');
      assert.equal((await call('__cookie__', before)).status, 200);
      cookieNode.rotateCookie();
      assert.equal((await call('__cookie__', before)).status, 401);
      assert.equal((await call('__cookie__', cookieNode.password)).status, 200);
    } finally {
      await cookieNode.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('makes a replacement pay for the descendants it evicts (BIP125)', async () => {
    const c = coin();
    const owner = randomBitcoinKey();
    const parent = (await rpc('sendrawtransaction', [spend(c, [{ address: owner.address, value: 9_990_000n }])])).result;
    node.spendOutput(owner, parent, 0, to(), 50_000n); // a child paying 50,000 sats
    const entry = (await rpc('getmempoolentry', [parent])).result;
    assert.deepEqual([entry.descendantcount, entry.fees.base, entry.fees.descendant], [2, 0.0001, 0.0006]);
    // More than the parent's 10,000, less than parent and child together.
    assert.match(
      (await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 9_970_000n }])])).error!.message,
      /^insufficient fee, rejecting replacement [0-9a-f]{64}, less fees than conflicting txs; 30000 < 60000$/,
    );
    assert.equal((await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 9_930_000n }])])).error, null);
  });

  it('replaces a mempool transaction only when it signals RBF and the new one pays more', async () => {
    const final = coin();
    assert.equal((await rpc('sendrawtransaction', [spend(final, [{ address: to(), value: 9_990_000n }], { sequence: 0xffffffff })])).error, null);
    assert.equal(
      (await rpc('sendrawtransaction', [spend(final, [{ address: to(), value: 9_900_000n }])])).error?.message,
      'txn-mempool-conflict',
    );
    const signalling = coin();
    assert.equal((await rpc('sendrawtransaction', [spend(signalling, [{ address: to(), value: 9_990_000n }])])).error, null);
    assert.match(
      (await rpc('sendrawtransaction', [spend(signalling, [{ address: to(), value: 9_995_000n }])])).error!.message,
      /insufficient fee/,
    );
    assert.equal((await rpc('sendrawtransaction', [spend(signalling, [{ address: to(), value: 9_900_000n }])])).error, null);
  });
});

describe('the Bitcoin adapter', () => {
  let node: BitcoinTestNode;
  let chain: BitcoinChain;
  const keyring = DepositKeyring.fromMnemonic(SERVICE_MNEMONIC, { bitcoinNetwork: 'regtest' });
  before(async () => {
    node = await new BitcoinTestNode().start();
    chain = await BitcoinChain.open({ rpcUrl: node.rpcUrl, network: 'regtest', keyring, retry: { attempts: 2, baseDelayMs: 10 } });
  });
  after(async () => {
    chain.close();
    await node.stop();
  });

  it('reports a node that is behind the chain as stale: in its initial block download, or with headers ahead of its blocks', async () => {
    assert.equal((await chain.head()).stale, undefined);
    node.headersAhead = 2;
    const head = await chain.head();
    assert.match(head.stale ?? '', /headers up to \d+ but blocks only up to \d+/);
    node.headersAhead = 0;
    node.initialBlockDownload = true;
    assert.match((await chain.head()).stale ?? '', /initial block download/);
    node.initialBlockDownload = false;
    assert.equal((await chain.head()).stale, undefined);
  });

  it('prepares the same transaction for the same reference and sends it once however often it is broadcast', async () => {
    const from = { address: keyring.deriveDepositKey('bitcoin', 3).address, derivationIndex: 3 };
    const payer = randomBitcoinKey();
    node.fund(payer.address, 2_000_000n);
    const paid = node.pay(payer, [{ address: from.address, sats: 600_000n }, { address: from.address, sats: 400_000n }]);
    node.mine(1);
    const sources = [
      { txHash: paid.getId(), index: 0, amount: 600_000n },
      { txHash: paid.getId(), index: 1, amount: 400_000n },
    ];
    const merchant = randomBitcoinKey().address;
    const transfer = { from, to: merchant, token: 'BTC', amount: 980_000n, reference: 's/1', fees: { platform: 10_000n, network: 2_000n }, sources };
    const prepared = await chain.prepareTransfer(transfer);
    assert.deepEqual(await chain.prepareTransfer(transfer), prepared);
    await chain.broadcast(prepared);
    await chain.broadcast(prepared);
    node.mine(1);
    await chain.broadcast(prepared);
    assert.deepEqual(node.received(merchant), [{ txid: prepared.txHash, sats: 980_000n }]);
    assert.deepEqual(node.received(chain.treasury), [{ txid: prepared.txHash, sats: 18_000n }]);
    assert.equal(node.minedFee(prepared.txHash), 2_000n);
    assert.deepEqual(await chain.transactionStatus(prepared.txHash), { blockNumber: node.tip.height, confirmations: 1 });
    // A second attempt finds its coins spent.
    await assert.rejects(chain.prepareTransfer({ ...transfer, reference: 's/2' }), /spent or not in the chain/);
  });
});
