// The Bitcoin adapter against the test node, and the test node against what
// Bitcoin Core refuses: missing or spent inputs, bad signatures, outputs over
// inputs, dust, a fee under the relay minimum, conflicts without RBF, and a
// replacement that does not pay more.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as bitcoin from 'bitcoinjs-lib';
import { BitcoinChain, parseCoreJson, satoshis } from '../adapters/chains/bitcoin.ts';
import { DepositKeyring } from '../adapters/keys/derivation.ts';
import { SERVICE_MNEMONIC } from './support/evm-flow.ts';
import { BitcoinTestNode, randomBitcoinKey, type BitcoinKey } from './support/bitcoin-node.ts';

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
    for (let i = 0; i < 10; i++) node.fund(payer.address, 10_000_000n);
  });
  after(() => node.stop());

  const rpc = async (method: string, params: unknown[], password = node.password): Promise<any> => {
    const response = await fetch(node.url, {
      method: 'POST',
      headers: { authorization: 'Basic ' + Buffer.from(`${node.user}:${password}`).toString('base64') },
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

  it('takes a valid spend once; a repeat is already known, and once mined, already in the chain', async () => {
    const c = coin();
    const hex = spend(c, [{ address: to(), value: 9_990_000n }]);
    const sent = await rpc('sendrawtransaction', [hex]);
    assert.equal(sent.error, null);
    assert.match(sent.result, /^[0-9a-f]{64}$/);
    assert.equal((await rpc('sendrawtransaction', [hex])).error?.message, 'txn-already-in-mempool');
    node.mine(1);
    assert.equal((await rpc('sendrawtransaction', [hex])).error?.code, -27);
    assert.equal((await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 9_000_000n }])])).error?.code, -25);
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
    assert.match((await rpc('sendrawtransaction', [spend(c, [{ address: to(), value: 9_999_950n }])])).error!.message, /min relay fee not met/);
    const tested = await rpc('testmempoolaccept', [[spend(c, [{ address: to(), value: 10_000_001n }])]]);
    assert.deepEqual([tested.result[0].allowed, tested.result[0]['reject-reason']], [false, 'bad-txns-in-belowout']);
    assert.equal((await rpc('getblockcount', [], 'wrong')).status, 401);
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
    node.fund(from.address, 600_000n);
    node.fund(from.address, 400_000n);
    const merchant = randomBitcoinKey().address;
    const transfer = { from, to: merchant, token: 'BTC', amount: 980_000n, reference: 's/1', fees: { platform: 10_000n, network: 2_000n } };
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
    // A second attempt finds nothing left to spend.
    await assert.rejects(chain.prepareTransfer({ ...transfer, reference: 's/2' }), /holds 0 sats/);
  });
});
