// A Bitcoin test node: the subset of Bitcoin Core's JSON-RPC that
// adapters/chains/bitcoin.ts uses, over a regtest chain it runs itself.
// Debian has no bitcoind and npm none that runs, so this one keeps a UTXO
// set and validates every transaction it accepts with bitcoinjs-lib and
// tiny-secp256k1, with Bitcoin Core's rules and error codes:
//   - inputs must exist and be unspent (-25 bad-txns-inputs-missingorspent);
//     a transaction already mined answers -27;
//   - every P2WPKH input's witness must hold the key of the spent output and a
//     signature that verifies against the BIP143 sighash
//     (-26 mandatory-script-verify-flag-failed);
//   - outputs may not exceed inputs (-26 bad-txns-in-belowout), outputs below
//     the dust limit are refused (-26 dust), and the fee must meet 1 sat/vB
//     (-26 min relay fee not met);
//   - a transaction spending what a mempool one spends replaces it only when
//     the old one signals RBF (BIP125) and the new one pays more
//     (-26 txn-mempool-conflict, insufficient fee);
//   - blocks are mined on demand; `invalidateblock` drops a block and those
//     after it, putting their transactions back in the mempool.
// Answer shapes follow Bitcoin Core's RPC documentation
// (developer.bitcoin.org/reference/rpc: getblockchaininfo, getblock
// verbosity 2, getrawmempool, getrawtransaction, estimatesmartfee,
// sendrawtransaction, testmempoolaccept, gettxout, scantxoutset); amounts
// are JSON numbers of BTC with eight decimals, as Core prints them.
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as bitcoin from 'bitcoinjs-lib';
import { ECPairFactory, type ECPairInterface } from 'ecpair';
import * as ecc from 'tiny-secp256k1';

const ecPair = ECPairFactory(ecc);
const network = bitcoin.networks.regtest;
/** Bitcoin Core's dust limit for a P2WPKH output at the default 3 sat/vB dust relay fee. */
export const P2WPKH_DUST = 294n;
const MIN_RELAY_SATS_PER_VBYTE = 1n;

interface Utxo {
  value: bigint;
  script: Buffer;
  height: number | null;
}
interface MinedBlock {
  hash: string;
  height: number;
  time: number;
  txs: bitcoin.Transaction[];
}

export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

const sha256d = (b: Buffer) => createHash('sha256').update(createHash('sha256').update(b).digest()).digest();
const outpoint = (txid: string, vout: number) => `${txid}:${vout}`;
/** Satoshis as Bitcoin Core prints them: a JSON number of BTC with eight decimals (written into the text as is). */
const btc = (sats: bigint) => `@@${sats < 0n ? '-' : ''}${(sats < 0n ? -sats : sats) / 100_000_000n}.${((sats < 0n ? -sats : sats) % 100_000_000n).toString().padStart(8, '0')}@@`;

export interface BitcoinKey {
  address: string;
  keyPair: ECPairInterface;
}

export function randomBitcoinKey(): BitcoinKey {
  const keyPair = ecPair.makeRandom({ network });
  return { address: bitcoin.payments.p2wpkh({ pubkey: keyPair.publicKey, network }).address!, keyPair };
}

export class BitcoinTestNode {
  url = '';
  readonly user = 'rpcuser';
  readonly password = randomBytes(8).toString('hex');
  private server?: Server;
  private readonly blocks: MinedBlock[] = [];
  /** The UTXO set of the best chain's tip (mempool spends are not applied here). */
  private utxos = new Map<string, Utxo>();
  private mempool = new Map<string, bitcoin.Transaction>();
  /** sat/kvB answered by estimatesmartfee. */
  feeRate = 2_000n;
  /** sat/vB below which `mine` leaves a transaction in the mempool (a fee market that passes it by). */
  miningFloor = 0n;
  /**
   * A node behind the chain, as getblockchaininfo shows it (Bitcoin Core
   * src/rpc/blockchain.cpp getblockchaininfo: `headers` is the best header
   * it knows, `initialblockdownload` is ChainstateManager::IsInitialBlockDownload).
   */
  headersAhead = 0;
  initialBlockDownload = false;
  /** The tip's height when each mempool transaction came in (getmempoolentry's `height`). */
  private readonly enteredAt = new Map<string, number>();

  constructor(readonly chain: 'regtest' | 'main' | 'test' = 'regtest') {
    this.blocks.push({ hash: randomBytes(32).toString('hex'), height: 0, time: Math.floor(Date.now() / 1000) - 3600, txs: [] });
  }

  get rpcUrl(): string {
    const u = new URL(this.url);
    u.username = this.user;
    u.password = this.password;
    return u.toString();
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const auth = Buffer.from(`${this.user}:${this.password}`).toString('base64');
      if (req.headers.authorization !== `Basic ${auth}`) {
        res.writeHead(401).end(); // Bitcoin Core answers a wrong password with an empty 401
        return;
      }
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        let request: any;
        try {
          request = JSON.parse(body);
        } catch {
          res.writeHead(500).end(JSON.stringify({ result: null, error: { code: -32700, message: 'Parse error' }, id: null }));
          return;
        }
        const answer = Array.isArray(request) ? request.map((r) => this.handle(r)) : this.handle(request);
        const status = !Array.isArray(answer) && answer.error ? (answer.error.code === -32601 ? 404 : 500) : 200;
        // Amounts are written as JSON numbers with eight decimals, as Core does.
        const text = coreJsonText(answer);
        res.writeHead(status, { 'content-type': 'application/json' }).end(text);
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/`;
    return this;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }

  private handle(request: { method: string; params?: unknown[]; id: unknown }) {
    try {
      return { result: this.call(request.method, request.params ?? []), error: null, id: request.id };
    } catch (error) {
      if (!(error instanceof RpcError)) throw error;
      return { result: null, error: { code: error.code, message: error.message }, id: request.id };
    }
  }

  private call(method: string, params: any[]): unknown {
    switch (method) {
      case 'getblockchaininfo':
        return {
          chain: this.chain,
          blocks: this.tip.height,
          headers: this.tip.height + this.headersAhead,
          bestblockhash: this.tip.hash,
          mediantime: this.tip.time,
          initialblockdownload: this.initialBlockDownload,
          pruned: false,
        };
      case 'getblockcount':
        return this.tip.height;
      case 'getblockhash': {
        const block = this.blocks[Number(params[0])];
        if (!block) throw new RpcError(-8, 'Block height out of range');
        return block.hash;
      }
      case 'getblock': {
        const block = this.blocks.find((b) => b.hash === params[0]);
        if (!block) throw new RpcError(-5, 'Block not found');
        return this.blockJson(block);
      }
      case 'getrawmempool':
        return [...this.mempool.keys()];
      case 'getmempoolentry': {
        const tx = this.mempool.get(String(params[0]));
        if (!tx) throw new RpcError(-5, 'Transaction not in mempool');
        return {
          vsize: tx.virtualSize(),
          weight: tx.weight(),
          time: this.tip.time,
          height: this.enteredAt.get(tx.getId()) ?? this.tip.height,
          fees: { base: btc(this.feeOf(tx)), modified: btc(this.feeOf(tx)) },
          'bip125-replaceable': tx.ins.some((x) => x.sequence < 0xfffffffe),
        };
      }
      case 'gettxspendingprevout':
        return (params[0] as { txid: string; vout: number }[]).map(({ txid, vout }) => {
          const spender = [...this.mempool.values()].find((m) =>
            m.ins.some((x) => outpoint(Buffer.from(x.hash).reverse().toString('hex'), x.index) === outpoint(txid, vout)),
          );
          return { txid, vout, ...(spender && { spendingtxid: spender.getId() }) };
        });
      case 'getrawtransaction': {
        const tx = this.mempool.get(String(params[0]));
        if (!tx) {
          throw new RpcError(
            -5,
            'No such mempool transaction. Use -txindex or provide a block hash to enable blockchain transaction queries. Use gettransaction for wallet transactions.',
          );
        }
        return params[1] ? this.txJson(tx) : tx.toHex();
      }
      case 'estimatesmartfee':
        return { feerate: btc(this.feeRate), blocks: Number(params[0] ?? 6) };
      case 'testmempoolaccept':
        return (params[0] as string[]).map((hex) => {
          const tx = bitcoin.Transaction.fromHex(hex);
          try {
            const fee = this.validate(tx);
            return { txid: tx.getId(), wtxid: Buffer.from(tx.getHash(true)).reverse().toString('hex'), allowed: true, vsize: tx.virtualSize(), fees: { base: btc(fee) } };
          } catch (error) {
            if (!(error instanceof RpcError)) throw error;
            return { txid: tx.getId(), wtxid: Buffer.from(tx.getHash(true)).reverse().toString('hex'), allowed: false, 'reject-reason': error.message };
          }
        });
      case 'sendrawtransaction':
        return this.accept(String(params[0]));
      case 'gettxout': {
        const utxo = this.utxos.get(outpoint(String(params[0]), Number(params[1])));
        if (!utxo) return null;
        return {
          bestblock: this.tip.hash,
          confirmations: utxo.height === null ? 0 : this.tip.height - utxo.height + 1,
          value: btc(utxo.value),
          scriptPubKey: { hex: utxo.script.toString('hex'), address: addressOf(utxo.script), type: 'witness_v0_keyhash' },
          coinbase: false,
        };
      }
      case 'scantxoutset': {
        if (params[0] !== 'start') throw new RpcError(-8, 'Invalid action');
        const wanted = new Set((params[1] as string[]).map((d) => /^addr\((.+)\)$/.exec(d)?.[1]));
        const unspents = [...this.utxos]
          .filter(([, u]) => u.height !== null && wanted.has(addressOf(u.script)))
          .map(([key, u]) => {
            const [txid, vout] = key.split(':');
            return { txid, vout: Number(vout), scriptPubKey: u.script.toString('hex'), desc: `addr(${addressOf(u.script)})`, amount: btc(u.value), coinbase: false, height: u.height };
          });
        const total = [...this.utxos.values()]
          .filter((u) => u.height !== null && wanted.has(addressOf(u.script)))
          .reduce((s, u) => s + u.value, 0n);
        return { success: true, txouts: this.utxos.size, height: this.tip.height, bestblock: this.tip.hash, unspents, total_amount: btc(total) };
      }
      case 'invalidateblock':
        this.invalidate(String(params[0]));
        return null;
      default:
        throw new RpcError(-32601, 'Method not found');
    }
  }

  get tip(): MinedBlock {
    return this.blocks[this.blocks.length - 1]!;
  }

  private blockJson(block: MinedBlock) {
    const onChain = this.blocks[block.height]?.hash === block.hash;
    return {
      hash: block.hash,
      confirmations: onChain ? this.tip.height - block.height + 1 : -1,
      height: block.height,
      version: 0x20000000,
      time: block.time,
      mediantime: block.time,
      nTx: block.txs.length,
      ...(block.height > 0 && { previousblockhash: this.blocks[block.height - 1]!.hash }),
      ...(this.blocks[block.height + 1] && { nextblockhash: this.blocks[block.height + 1]!.hash }),
      tx: block.txs.map((tx) => this.txJson(tx)),
    };
  }

  private txJson(tx: bitcoin.Transaction) {
    return coreTransactionJson(tx, network);
  }

  // -------------------------------------------------------------------------
  // Validation

  /** Bitcoin Core's checks of a transaction against the chain's UTXO set and the mempool; the fee on success. */
  private validate(tx: bitcoin.Transaction, replacing = new Set<string>()): bigint {
    const txid = tx.getId();
    if (this.blocks.some((b) => b.txs.some((t) => t.getId() === txid))) {
      throw new RpcError(-27, 'Transaction already in block chain');
    }
    if (this.mempool.has(txid)) throw new RpcError(-26, 'txn-already-in-mempool');
    let inputs = 0n;
    for (const [i, input] of tx.ins.entries()) {
      const key = outpoint(Buffer.from(input.hash).reverse().toString('hex'), input.index);
      const utxo = this.utxos.get(key);
      if (!utxo) throw new RpcError(-25, 'bad-txns-inputs-missingorspent');
      const conflict = [...this.mempool.values()].find((m) => m.ins.some((x) => outpoint(Buffer.from(x.hash).reverse().toString('hex'), x.index) === key));
      if (conflict && !replacing.has(conflict.getId())) replacing.add(conflict.getId());
      // P2WPKH: the witness is [signature, public key]; the key must hash to the output's program.
      const program = utxo.script.subarray(2);
      const [signature, pubkey] = input.witness;
      if (utxo.script.length !== 22 || utxo.script[0] !== 0 || input.witness.length !== 2 || !pubkey || !signature) {
        throw new RpcError(-26, 'mandatory-script-verify-flag-failed (Witness program hash mismatch)');
      }
      if (!Buffer.from(bitcoin.crypto.hash160(pubkey)).equals(program)) {
        throw new RpcError(-26, 'mandatory-script-verify-flag-failed (Witness program hash mismatch)');
      }
      const decoded = bitcoin.script.signature.decode(Buffer.from(signature));
      const scriptCode = bitcoin.payments.p2pkh({ hash: Buffer.from(program), network }).output!;
      const sighash = tx.hashForWitnessV0(i, scriptCode, utxo.value, decoded.hashType);
      if (!ecc.verify(sighash, pubkey, decoded.signature)) {
        throw new RpcError(-26, 'mandatory-script-verify-flag-failed (Signature must be zero for failed CHECK(MULTI)SIG operation)');
      }
      inputs += utxo.value;
    }
    const outputs = tx.outs.reduce((sum, out) => sum + BigInt(out.value), 0n);
    if (outputs > inputs) throw new RpcError(-26, 'bad-txns-in-belowout');
    if (tx.outs.some((out) => BigInt(out.value) < P2WPKH_DUST)) throw new RpcError(-26, 'dust');
    const fee = inputs - outputs;
    const vsize = BigInt(tx.virtualSize());
    if (fee < vsize * MIN_RELAY_SATS_PER_VBYTE) {
      throw new RpcError(-26, `min relay fee not met, ${fee} < ${vsize * MIN_RELAY_SATS_PER_VBYTE}`);
    }
    for (const id of replacing) {
      const old = this.mempool.get(id)!;
      // BIP125: the replaced transaction signals replaceability, and the new one pays more.
      if (!old.ins.some((x) => x.sequence < 0xfffffffe)) throw new RpcError(-26, 'txn-mempool-conflict');
      if (fee <= this.feeOf(old)) throw new RpcError(-26, `insufficient fee, rejecting replacement ${txid}; new feerate too low`);
    }
    return fee;
  }

  private feeOf(tx: bitcoin.Transaction): bigint {
    const inputs = tx.ins.reduce((sum, x) => sum + (this.utxos.get(outpoint(Buffer.from(x.hash).reverse().toString('hex'), x.index))?.value ?? 0n), 0n);
    return inputs - tx.outs.reduce((sum, out) => sum + BigInt(out.value), 0n);
  }

  /** sendrawtransaction: validates, replaces what it conflicts with (RBF), keeps it in the mempool. */
  accept(hex: string): string {
    let tx: bitcoin.Transaction;
    try {
      tx = bitcoin.Transaction.fromHex(hex);
    } catch {
      throw new RpcError(-22, 'TX decode failed');
    }
    const replacing = new Set<string>();
    this.validate(tx, replacing);
    for (const id of replacing) this.mempool.delete(id);
    this.mempool.set(tx.getId(), tx);
    this.enteredAt.set(tx.getId(), this.tip.height);
    return tx.getId();
  }

  // -------------------------------------------------------------------------
  // Driving the chain

  /** Mines `count` blocks; the first takes the whole mempool. */
  mine(count = 1): string[] {
    const hashes: string[] = [];
    for (let i = 0; i < count; i++) {
      const txs = [...this.mempool.values()].filter(
        (tx) => this.feeOf(tx) >= this.miningFloor * BigInt(tx.virtualSize()),
      );
      for (const tx of txs) this.mempool.delete(tx.getId());
      const height = this.tip.height + 1;
      for (const tx of txs) this.apply(tx, height);
      const hash = sha256d(Buffer.from(`${this.tip.hash}:${height}:${txs.map((t) => t.getId()).join(',')}:${randomBytes(4).toString('hex')}`)).toString('hex');
      this.blocks.push({ hash, height, time: Math.max(this.tip.time + 1, Math.floor(Date.now() / 1000)), txs });
      hashes.push(hash);
    }
    return hashes;
  }

  private apply(tx: bitcoin.Transaction, height: number) {
    for (const x of tx.ins) this.utxos.delete(outpoint(Buffer.from(x.hash).reverse().toString('hex'), x.index));
    tx.outs.forEach((out, n) => this.utxos.set(outpoint(tx.getId(), n), { value: BigInt(out.value), script: Buffer.from(out.script), height }));
  }

  /** Drops the block and every later one; their transactions go back to the mempool, as Core's invalidateblock does. */
  invalidate(hash: string): void {
    const at = this.blocks.findIndex((b) => b.hash === hash);
    if (at <= 0) throw new RpcError(-5, 'Block not found');
    const dropped = this.blocks.splice(at);
    for (const block of dropped.reverse()) {
      for (const tx of [...block.txs].reverse()) {
        tx.outs.forEach((_, n) => this.utxos.delete(outpoint(tx.getId(), n)));
        for (const x of tx.ins) {
          const key = outpoint(Buffer.from(x.hash).reverse().toString('hex'), x.index);
          const parent = this.funding.get(key) ?? this.findOutput(key);
          if (parent) this.utxos.set(key, parent);
        }
      }
    }
    for (const block of dropped.reverse()) for (const tx of block.txs) this.mempool.set(tx.getId(), tx);
  }

  /** Outputs created by `fund`, which no block holds. */
  private readonly funding = new Map<string, Utxo>();

  private findOutput(key: string): Utxo | undefined {
    const [txid, vout] = key.split(':');
    for (const block of this.blocks) {
      const tx = block.txs.find((t) => t.getId() === txid);
      if (tx) {
        const out = tx.outs[Number(vout)]!;
        return { value: BigInt(out.value), script: Buffer.from(out.script), height: block.height };
      }
    }
    return undefined;
  }

  /** Gives `address` a confirmed output of `sats` out of nowhere (a coinbase of long ago). */
  fund(address: string, sats: bigint): void {
    const key = outpoint(randomBytes(32).toString('hex'), 0);
    const utxo = { value: sats, script: Buffer.from(bitcoin.address.toOutputScript(address, network)), height: 0 };
    this.funding.set(key, utxo);
    this.utxos.set(key, utxo);
  }

  /** A payer's signed transaction to `outputs`, change back to the payer, sent through the node's checks. */
  pay(
    from: BitcoinKey,
    outputs: { address: string; sats: bigint }[],
    { satsPerVbyte = 5n, rbf = true, exclude = [] as string[] } = {},
  ): bitcoin.Transaction {
    const script = Buffer.from(bitcoin.address.toOutputScript(from.address, network));
    const spentInMempool = new Set(
      [...this.mempool.values()].flatMap((t) => t.ins.map((x) => outpoint(Buffer.from(x.hash).reverse().toString('hex'), x.index))),
    );
    const coins = [...this.utxos].filter(([k, u]) => Buffer.from(script).equals(u.script) && !spentInMempool.has(k) && !exclude.includes(k));
    return this.signAndSend(from, coins, outputs, satsPerVbyte, rbf);
  }

  /** Spends the same coins as `original` again with `outputs` at a higher rate (an RBF replacement). */
  replace(from: BitcoinKey, original: bitcoin.Transaction, outputs: { address: string; sats: bigint }[], satsPerVbyte: bigint) {
    const coins = original.ins.map((x) => {
      const key = outpoint(Buffer.from(x.hash).reverse().toString('hex'), x.index);
      return [key, this.utxos.get(key)!] as [string, Utxo];
    });
    return this.signAndSend(from, coins, outputs, satsPerVbyte, true);
  }

  private signAndSend(
    from: BitcoinKey,
    coins: [string, Utxo][],
    outputs: { address: string; sats: bigint }[],
    satsPerVbyte: bigint,
    rbf: boolean,
  ) {
    const want = outputs.reduce((s, o) => s + o.sats, 0n);
    const psbt = new bitcoin.Psbt({ network });
    let have = 0n;
    for (const [key, utxo] of coins) {
      const [txid, vout] = key.split(':');
      psbt.addInput({ hash: txid!, index: Number(vout), sequence: rbf ? 0xfffffffd : 0xffffffff, witnessUtxo: { script: utxo.script, value: utxo.value } });
      have += utxo.value;
      if (have >= want + 10_000n) break;
    }
    for (const o of outputs) psbt.addOutput({ address: o.address, value: o.sats });
    const fee = BigInt(11 + psbt.inputCount * 68 + (outputs.length + 1) * 31) * satsPerVbyte;
    if (have < want + fee) throw new Error(`the payer holds ${have} sats, not ${want + fee}`);
    if (have - want - fee >= P2WPKH_DUST) psbt.addOutput({ address: from.address, value: have - want - fee });
    psbt.signAllInputs(from.keyPair);
    psbt.finalizeAllInputs();
    const tx = psbt.extractTransaction();
    this.accept(tx.toHex());
    return tx;
  }

  inMempool(txid: string): boolean {
    return this.mempool.has(txid);
  }

  /** Every output of mined transactions paying `address`. */
  received(address: string): { txid: string; sats: bigint }[] {
    const script = bitcoin.address.toOutputScript(address, network);
    return this.blocks.flatMap((b) =>
      b.txs.flatMap((tx) => tx.outs.filter((o) => Buffer.from(o.script).equals(Buffer.from(script))).map((o) => ({ txid: tx.getId(), sats: BigInt(o.value) }))),
    );
  }

  /** The fee a mined transaction paid (inputs − outputs). */
  minedFee(txid: string): bigint {
    for (const block of this.blocks) {
      const tx = block.txs.find((t) => t.getId() === txid);
      if (!tx) continue;
      const inputs = tx.ins.reduce((sum, x) => {
        const key = outpoint(Buffer.from(x.hash).reverse().toString('hex'), x.index);
        return sum + (this.funding.get(key) ?? this.findOutput(key))!.value;
      }, 0n);
      return inputs - tx.outs.reduce((s, o) => s + BigInt(o.value), 0n);
    }
    throw new Error(`${txid} is not mined`);
  }
}

function addressOf(script: Uint8Array, on: bitcoin.Network = network): string | undefined {
  try {
    return bitcoin.address.fromOutputScript(script, on);
  } catch {
    return undefined;
  }
}

/** Core's name of an output script's type (scriptPubKey.type). */
function scriptType(script: Uint8Array): string {
  const kinds = [
    ['witness_v0_keyhash', bitcoin.payments.p2wpkh],
    ['pubkeyhash', bitcoin.payments.p2pkh],
    ['scripthash', bitcoin.payments.p2sh],
    ['witness_v0_scripthash', bitcoin.payments.p2wsh],
    ['pubkey', bitcoin.payments.p2pk],
    ['nulldata', bitcoin.payments.embed],
  ] as const;
  for (const [name, payment] of kinds) {
    try {
      payment({ output: script });
      return name;
    } catch {
      // not this kind
    }
  }
  return 'nonstandard';
}

/** A transaction as Bitcoin Core's getrawtransaction (verbose) and getblock (verbosity 2) show it. */
export function coreTransactionJson(tx: bitcoin.Transaction, on: bitcoin.Network) {
  return {
    txid: tx.getId(),
    hash: Buffer.from(tx.getHash(true)).reverse().toString('hex'),
    version: tx.version,
    size: tx.byteLength(),
    vsize: tx.virtualSize(),
    weight: tx.weight(),
    locktime: tx.locktime,
    vin: tx.ins.map((input) =>
      tx.isCoinbase()
        ? { coinbase: Buffer.from(input.script).toString('hex'), sequence: input.sequence }
        : {
            txid: Buffer.from(input.hash).reverse().toString('hex'),
            vout: input.index,
            scriptSig: { asm: '', hex: Buffer.from(input.script).toString('hex') },
            ...(input.witness.length > 0 && { txinwitness: input.witness.map((w) => Buffer.from(w).toString('hex')) }),
            sequence: input.sequence,
          },
    ),
    vout: tx.outs.map((out, n) => {
      // Core (22+) names an address only where the script has one: not for bare public keys.
      const type = scriptType(out.script);
      const address = type === 'pubkey' ? undefined : addressOf(out.script, on);
      return {
        value: btc(BigInt(out.value)),
        n,
        scriptPubKey: {
          asm: bitcoin.script.toASM(out.script),
          hex: Buffer.from(out.script).toString('hex'),
          ...(address && { address }),
          type,
        },
      };
    }),
    hex: tx.toHex(),
  };
}

/** Text a node sends: amounts written as JSON numbers with eight decimals, as Core prints them. */
export function coreJsonText(value: unknown): string {
  return JSON.stringify(value).replace(/"@@(-?\d+\.\d{8})@@"/g, '$1');
}
