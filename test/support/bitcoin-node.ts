// A Bitcoin test node: the subset of Bitcoin Core's JSON-RPC that
// adapters/chains/bitcoin/ uses, over a regtest chain it runs itself.
// Debian has no bitcoind and npm none that runs, so this one keeps a UTXO
// set and validates every transaction it accepts with bitcoinjs-lib and
// tiny-secp256k1, with Bitcoin Core's (28+) rules, codes and texts. Where a
// rule comes from, in Core's source:
//   - sendrawtransaction (src/node/transaction.cpp, BroadcastTransaction): a
//     transaction already in the mempool is not an error; one with an output
//     still in the UTXO set is -27 "Transaction outputs already in utxo set";
//     anything else goes through mempool acceptance, so a mined transaction
//     whose outputs are all spent gets -25 bad-txns-inputs-missingorspent,
//     like any transaction whose inputs are gone (src/rpc/util.cpp,
//     JSONRPCTransactionError: MISSING_INPUTS is RPC_TRANSACTION_ERROR);
//   - inputs may be confirmed or in the mempool (chains of unconfirmed
//     transactions); a coinbase output is spent at 100 confirmations at the
//     earliest (src/consensus/tx_verify.cpp, CheckTxInputs:
//     bad-txns-premature-spend-of-coinbase);
//   - every P2WPKH input's witness must hold the key of the spent output and a
//     signature that verifies against the BIP143 sighash
//     (-26 mandatory-script-verify-flag-failed);
//   - outputs may not exceed inputs (-26 bad-txns-in-belowout); an output
//     under its script type's dust limit is refused (src/policy/policy.cpp,
//     GetDustThreshold at the 3 sat/vB dust relay fee: P2PKH 546, P2SH 540,
//     P2WSH and P2TR 330, P2WPKH 294; -26 dust);
//   - the fee on the real virtual size must meet the mempool's minimum, then
//     the relay minimum (src/validation.cpp, CheckFeeRate: -26 "mempool min
//     fee not met", "min relay fee not met");
//   - a transaction spending what a mempool one spends replaces it only when
//     the old one signals RBF and BIP125's fee rules hold, counting every
//     descendant it evicts (src/policy/rbf.cpp, PaysMoreThanConflicts and
//     PaysForRBF: -26 "insufficient fee, ...", or txn-mempool-conflict);
//   - every block has a coinbase (the genesis one is not in the UTXO set);
//     `invalidateblock` drops a block and those after it, putting their
//     transactions but the coinbases back in the mempool;
//   - wallets (watch-only descriptor wallets, the only kind modelled), each
//     asked through `/wallet/<name>` (src/wallet/rpc/util.cpp,
//     GetWalletForJSONRPCRequest: an unknown or unloaded name is -18
//     "Requested wallet does not exist or is not loaded"; on `/`, none loaded
//     is -18 and several -19). `createwallet` of an existing name is -36,
//     `loadwallet` of a missing one -18 and of a loaded one -35
//     (src/wallet/rpc/wallet.cpp; src/wallet/rpc/util.cpp HandleWalletError).
//     `getdescriptorinfo` (src/rpc/output_script.cpp) checksums an addr()
//     descriptor (src/script/descriptor.cpp, DescriptorChecksum: BIP380);
//     `importdescriptors` (src/wallet/rpc/backup.cpp) wants the checksum (-5
//     "Missing checksum", or "Provided checksum ... does not match computed
//     checksum ...", in that import's answer) and a timestamp (-3), and the
//     wallet sees the outputs of blocks from 2 hours (TIMESTAMP_WINDOW,
//     src/chain.h) before it ("now": the tip's time) on, the descriptor
//     stored before the rescan (ProcessDescriptorImport); a block it cannot
//     read (pruned) is passed by and that import answers success false, -1
//     "Rescan failed for descriptor with timestamp ..."; while one import
//     rescans (`holdRescans`, until `finishRescans`) another is -4 "Wallet is
//     currently rescanning. Abort existing rescan or wait." (WalletRescanReserver),
//     and a bitcoind restart (`restartWallets`) cuts it off unanswered;
//     `setlabel` labels any valid address (src/wallet/rpc/addresses.cpp),
//     shown in getaddressinfo's `labels`; `listunspent`
//     (src/wallet/rpc/coins.cpp) answers only what the wallet sees, never an
//     output a mempool transaction spends nor an immature coinbase output;
//     `getaddressinfo` (src/wallet/rpc/addresses.cpp) answers `ismine` for
//     an address the wallet watches (a descriptor wallet's IsMine,
//     DescriptorScriptPubKeyMan::IsMine, keys or not), `iswatchonly` false;
//     `mockTimeAhead` is `setmocktime`: later blocks are timed that far on;
//     `restartWallets` unloads those not saved to load at start-up; with
//     `walletDisabled` (-disablewallet) the wallet RPCs are not registered
//     (src/wallet/init.cpp, WalletInit::Construct), so -32601;
//   - a pruned node has no data below `pruneHeight` (src/rpc/blockchain.cpp,
//     GetBlockChecked: -1 "Block not available (pruned data)");
//   - with a cookie file, the credentials are `__cookie__` and a password
//     rewritten at every restart (src/rpc/request.cpp, GenerateAuthCookie);
//   - `publishSequence` is `-zmqpubsequence` (doc/zmq.md; src/zmq/
//     zmqpublishnotifier.cpp, SendSequenceMsg): [`sequence`, 32-byte hash
//     in the RPC's order + label (+ 8-byte LE mempool sequence for A and R),
//     4-byte LE message number per topic]. A for each transaction added, R
//     for each removed but by a block (a replacement), C per block connected,
//     D per block disconnected. The mempool sequence starts at 1 and counts
//     every addition and every removal, those by a block too, which have no
//     message (src/txmempool.cpp, removeUnchecked: "We increment mempool
//     sequence value no matter removal reason"); `getrawmempool false true`
//     answers the txids and the next number (GetSequence), and refuses
//     verbose with mempool_sequence (-8). `loseSequenceMessages(n)` skips
//     the next n messages' numbers, as a subscriber sees a lost message.
// Answer shapes follow Bitcoin Core's RPC documentation
// (developer.bitcoin.org/reference/rpc); amounts are JSON numbers of BTC
// with eight decimals, as Core prints them.
import { createHash, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as bitcoin from 'bitcoinjs-lib';
import { ECPairFactory, type ECPairInterface } from 'ecpair';
import * as ecc from 'tiny-secp256k1';
import { Publisher } from 'zeromq';

bitcoin.initEccLib(ecc); // Taproot addresses
const ecPair = ECPairFactory(ecc);
const network = bitcoin.networks.regtest;
/** Bitcoin Core's dust limit for a P2WPKH output at the default 3 sat/vB dust relay fee. */
export const P2WPKH_DUST = 294n;
/** Dust limits by Core's script type name (policy.cpp GetDustThreshold: (output size + spending input size) × 3 sat/vB). */
const DUST_BY_TYPE: Record<string, bigint> = {
  pubkeyhash: 546n,
  scripthash: 540n,
  witness_v0_keyhash: 294n,
  witness_v0_scripthash: 330n,
  witness_v1_taproot: 330n,
  nulldata: 0n,
};
const COINBASE_MATURITY = 100;
const SUBSIDY = 5_000_000_000n;

interface Utxo {
  value: bigint;
  script: Buffer;
  height: number | null;
  coinbase?: boolean;
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
const spentBy = (x: bitcoin.Transaction['ins'][number]) =>
  outpoint(Buffer.from(x.hash).reverse().toString('hex'), x.index);
/** Satoshis as Bitcoin Core prints them: a JSON number of BTC with eight decimals (written into the text as is). */
const btc = (sats: bigint) =>
  `@@${sats < 0n ? '-' : ''}${(sats < 0n ? -sats : sats) / 100_000_000n}.${((sats < 0n ? -sats : sats) % 100_000_000n).toString().padStart(8, '0')}@@`;
/** sat/kvB for `fee` over `vsize`, as CFeeRate(fee, vsize) does. */
const rateOf = (fee: bigint, vsize: number) => (fee * 1000n) / BigInt(vsize);
/** The fee a rate in sat/kvB asks of `vsize` vbytes (CFeeRate::GetFee, rounded up). */
const feeAt = (satsPerKvB: bigint, vsize: number) => (satsPerKvB * BigInt(vsize) + 999n) / 1000n;

export interface BitcoinKey {
  address: string;
  keyPair: ECPairInterface;
}

export function randomBitcoinKey(): BitcoinKey {
  const keyPair = ecPair.makeRandom({ network });
  return { address: bitcoin.payments.p2wpkh({ pubkey: keyPair.publicKey, network }).address!, keyPair };
}

/** Merchant addresses of other script types (their keys are thrown away: only receiving is tested). */
export function randomAddress(type: 'p2wpkh' | 'p2tr' | 'p2pkh' | 'p2sh' | 'p2wsh'): string {
  const pubkey = ecPair.makeRandom({ network }).publicKey;
  switch (type) {
    case 'p2wpkh':
      return bitcoin.payments.p2wpkh({ pubkey, network }).address!;
    case 'p2tr':
      return bitcoin.payments.p2tr({ internalPubkey: Buffer.from(pubkey.subarray(1)), network }).address!;
    case 'p2pkh':
      return bitcoin.payments.p2pkh({ pubkey, network }).address!;
    case 'p2sh':
      return bitcoin.payments.p2sh({ redeem: bitcoin.payments.p2wpkh({ pubkey, network }), network }).address!;
    case 'p2wsh':
      return bitcoin.payments.p2wsh({ redeem: bitcoin.payments.p2pk({ pubkey, network }), network }).address!;
  }
}

export class BitcoinTestNode {
  url = '';
  user = 'rpcuser';
  password = randomBytes(8).toString('hex');
  private server?: Server;
  private readonly blocks: MinedBlock[] = [];
  /** Every block ever mined, stale ones included (getblock still answers for them, as Core does while it has their data). */
  private readonly known = new Map<string, MinedBlock>();
  /** The UTXO set of the best chain's tip (mempool spends are not applied here). */
  private utxos = new Map<string, Utxo>();
  private mempool = new Map<string, bitcoin.Transaction>();
  /** sat/kvB answered by estimatesmartfee. */
  feeRate = 2_000n;
  /** sat/kvB: the relay minimum (minrelaytxfee). */
  minRelayFee = 1_000n;
  /** sat/kvB: the mempool's rolling minimum, 0 until it is full (txmempool.cpp GetMinFee); getmempoolinfo's mempoolminfee is the higher of the two. */
  mempoolMinFee = 0n;
  /** sat/kvB: what a replacement must add per vbyte of its own (incrementalrelayfee). */
  incrementalRelayFee = 1_000n;
  /** sat/vB below which `mine` leaves a transaction in the mempool (a fee market that passes it by). */
  miningFloor = 0n;
  /** Methods whose calls never reach the node: the connection drops (a network failure). */
  readonly unreachable = new Set<string>();
  /** Seconds the node's clock runs ahead of the real one (Core's `setmocktime`): later blocks are timed so. */
  mockTimeAhead = 0;
  /** bitcoind run with -disablewallet: no wallet RPC exists. */
  walletDisabled = false;
  /** Wallets by name: loaded or only on disk, and each watched address's first block seen. */
  private readonly wallets = new Map<string, TestWallet>();
  /** Imports answer only when `finishRescans` is called (a rescan that takes minutes on mainnet). */
  holdRescans = false;
  /** Blocks below this height have no data any more (a pruned node). */
  pruneHeight = 0;
  /** Calls answered, by method (what the adapter asked). */
  readonly calls = new Map<string, number>();
  /**
   * A node behind the chain, as getblockchaininfo shows it (Bitcoin Core
   * src/rpc/blockchain.cpp getblockchaininfo: `headers` is the best header
   * it knows, `initialblockdownload` is ChainstateManager::IsInitialBlockDownload).
   */
  headersAhead = 0;
  initialBlockDownload = false;
  /** The tip's height when each mempool transaction came in (getmempoolentry's `height`). */
  private readonly enteredAt = new Map<string, number>();
  private readonly miner = randomBitcoinKey();
  private cookieFile?: string;
  /** txmempool.cpp m_sequence_number: starts at 1, one per addition or removal. */
  private mempoolSequence = 1n;
  private zmq?: { publisher: Publisher; number: number; sending: Promise<unknown>; lose: number };

  constructor(readonly chain: 'regtest' | 'main' | 'test' = 'regtest') {
    const genesis = this.coinbase(0, this.miner.address, SUBSIDY);
    const block = {
      hash: randomBytes(32).toString('hex'),
      height: 0,
      time: Math.floor(Date.now() / 1000) - 3600,
      txs: [genesis],
    };
    this.blocks.push(block);
    this.known.set(block.hash, block);
  }

  get rpcUrl(): string {
    const u = new URL(this.url);
    u.username = this.user;
    u.password = this.password;
    return u.toString();
  }

  /**
   * Authentication by cookie from now on: Core writes `__cookie__:<random>`
   * to the file at every start, and then takes only those credentials.
   */
  useCookie(file: string): void {
    this.cookieFile = file;
    this.rotateCookie();
  }

  /** What a restart of bitcoind does to the cookie: a new password, the old one refused. */
  rotateCookie(): void {
    if (!this.cookieFile) throw new Error('the node has no cookie file');
    this.user = '__cookie__';
    this.password = randomBytes(32).toString('hex');
    writeFileSync(this.cookieFile, `${this.user}:${this.password}`);
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
      req.on('end', async () => {
        let request: any;
        try {
          request = JSON.parse(body);
        } catch {
          res
            .writeHead(500)
            .end(JSON.stringify({ result: null, error: { code: -32700, message: 'Parse error' }, id: null }));
          return;
        }
        // Lost on the way: the connection drops with no answer (the network, not an answer of Core's).
        if (!Array.isArray(request) && this.unreachable.has(request.method)) {
          req.socket.destroy();
          return;
        }
        const wallet = /^\/wallet\/(.*)$/.exec(req.url ?? '/')?.[1];
        const endpoint = wallet === undefined ? undefined : decodeURIComponent(wallet);
        let answer: Answer | Answer[];
        try {
          answer = Array.isArray(request)
            ? await Promise.all(request.map((r) => this.handle(r, endpoint)))
            : await this.handle(request, endpoint);
        } catch (error) {
          if (!(error instanceof CutOff)) throw error;
          req.socket.destroy();
          return;
        }
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

  /** Starts publishing the `sequence` topic (Core's -zmqpubsequence=tcp://127.0.0.1:port); its endpoint. */
  async publishSequence(endpoint = 'tcp://127.0.0.1:*'): Promise<string> {
    const publisher = new Publisher();
    // Watched before binding: a subscriber may connect as soon as it is bound.
    publisher.events.on('accept', () => this.sequenceSubscribers++);
    await publisher.bind(endpoint);
    this.zmq = { publisher, number: 0, sending: Promise.resolve(), lose: 0 };
    return publisher.lastEndpoint!;
  }

  /** Stops publishing, as a bitcoind restart does (its numbering starts again at 0); the endpoint it published on. */
  async stopPublishing(): Promise<string> {
    const zmq = this.zmq!;
    this.zmq = undefined;
    await zmq.sending;
    const endpoint = zmq.publisher.lastEndpoint!;
    zmq.publisher.close();
    return endpoint;
  }

  /** Connections the sequence publisher accepted. */
  sequenceSubscribers = 0;

  /** The next `count` sequence messages are lost on the way: their numbers are skipped. */
  loseSequenceMessages(count = 1): void {
    this.zmq!.lose += count;
  }

  /** One `sequence` message, in order (a publisher sends one message at a time). */
  private announce(hash: string, label: 'A' | 'R' | 'C' | 'D', mempoolSequence?: bigint) {
    const zmq = this.zmq;
    if (!zmq) return;
    const body = Buffer.alloc(mempoolSequence === undefined ? 33 : 41);
    Buffer.from(hash, 'hex').copy(body); // the hash as the RPC prints it (SendSequenceMsg reverses uint256's bytes)
    body[32] = label.charCodeAt(0);
    if (mempoolSequence !== undefined) body.writeBigUInt64LE(mempoolSequence, 33);
    const number = Buffer.alloc(4);
    number.writeUInt32LE(zmq.number);
    zmq.number = (zmq.number + 1) >>> 0;
    if (zmq.lose > 0) {
      zmq.lose--;
      return;
    }
    zmq.sending = zmq.sending.then(() => zmq.publisher.send(['sequence', body, number])).catch(() => undefined);
  }

  /** A transaction enters the mempool (CTxMemPool::addUnchecked, then TransactionAddedToMempool). */
  private addToMempool(tx: bitcoin.Transaction) {
    this.mempool.set(tx.getId(), tx);
    this.announce(tx.getId(), 'A', this.mempoolSequence++);
  }

  /** A transaction leaves the mempool; only a removal not by a block is announced (R). */
  private removeFromMempool(txid: string, byBlock: boolean) {
    this.mempool.delete(txid);
    const sequence = this.mempoolSequence++;
    if (!byBlock) this.announce(txid, 'R', sequence);
  }

  async stop(): Promise<void> {
    if (this.zmq) await this.stopPublishing();
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }

  private handle(
    request: { method: string; params?: unknown[]; id: unknown },
    wallet?: string,
  ): Answer | Promise<Answer> {
    this.calls.set(request.method, (this.calls.get(request.method) ?? 0) + 1);
    try {
      const params = request.params ?? [];
      if (this.walletDisabled && (WALLET_METHODS.has(request.method) || /wallet$/.test(request.method))) {
        throw new RpcError(-32601, 'Method not found');
      }
      const result = WALLET_METHODS.has(request.method)
        ? this.walletCall(request.method, params, this.walletAt(wallet))
        : this.call(request.method, params);
      // An import held while it rescans answers later.
      if (result instanceof Promise) return result.then((later) => ({ result: later, error: null, id: request.id }));
      return { result, error: null, id: request.id };
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
          pruned: this.pruneHeight > 0,
          ...(this.pruneHeight > 0 && {
            pruneheight: this.pruneHeight,
            automatic_pruning: true,
            prune_target_size: 576_716_800,
          }),
        };
      case 'getblockcount':
        return this.tip.height;
      case 'getblockhash': {
        const block = this.blocks[Number(params[0])];
        if (!block) throw new RpcError(-8, 'Block height out of range');
        return block.hash;
      }
      case 'getblock': {
        const block = this.known.get(String(params[0]));
        if (!block) throw new RpcError(-5, 'Block not found');
        if (block.height < this.pruneHeight) throw new RpcError(-1, 'Block not available (pruned data)');
        const json = this.blockJson(block);
        if (params[1] === 2) this.readWhole = Math.max(this.readWhole, block.height);
        return params[1] === 1 ? { ...json, tx: block.txs.map((t) => t.getId()) } : json;
      }
      case 'getrawmempool': {
        // rpc/mempool.cpp getrawmempool: ( verbose mempool_sequence )
        if (params[0] && params[1]) throw new RpcError(-8, 'Verbose results cannot contain mempool sequence values.');
        if (params[1]) return { txids: [...this.mempool.keys()], mempool_sequence: Number(this.mempoolSequence) };
        return [...this.mempool.keys()];
      }
      case 'getmempoolinfo':
        return {
          loaded: true,
          size: this.mempool.size,
          mempoolminfee: btc(this.mempoolMinFee > this.minRelayFee ? this.mempoolMinFee : this.minRelayFee),
          minrelaytxfee: btc(this.minRelayFee),
          incrementalrelayfee: btc(this.incrementalRelayFee),
          fullrbf: false,
        };
      case 'getmempoolentry': {
        const tx = this.mempool.get(String(params[0]));
        if (!tx) throw new RpcError(-5, 'Transaction not in mempool');
        const family = this.withDescendants([tx.getId()]);
        return {
          vsize: tx.virtualSize(),
          weight: tx.weight(),
          time: this.tip.time,
          height: this.enteredAt.get(tx.getId()) ?? this.tip.height,
          descendantcount: family.length,
          descendantsize: family.reduce((s, t) => s + t.virtualSize(), 0),
          fees: {
            base: btc(this.feeOf(tx)),
            modified: btc(this.feeOf(tx)),
            descendant: btc(family.reduce((s, t) => s + this.feeOf(t), 0n)),
          },
          'bip125-replaceable': tx.ins.some((x) => x.sequence < 0xfffffffe),
        };
      }
      case 'gettxspendingprevout':
        return (params[0] as { txid: string; vout: number }[]).map(({ txid, vout }) => {
          const spender = [...this.mempool.values()].find((m) =>
            m.ins.some((x) => spentBy(x) === outpoint(txid, vout)),
          );
          return { txid, vout, ...(spender && { spendingtxid: spender.getId() }) };
        });
      case 'getrawtransaction':
        return this.rawTransaction(String(params[0]), Boolean(params[1]), params[2] as string | undefined);
      case 'estimatesmartfee':
        return { feerate: btc(this.feeRate), blocks: Number(params[0] ?? 6) };
      case 'testmempoolaccept':
        return (params[0] as string[]).map((hex) => {
          const tx = bitcoin.Transaction.fromHex(hex);
          const ids = { txid: tx.getId(), wtxid: Buffer.from(tx.getHash(true)).reverse().toString('hex') };
          if (this.mempool.has(tx.getId()))
            return { ...ids, allowed: false, 'reject-reason': 'txn-already-in-mempool' };
          try {
            const fee = this.validate(tx);
            return { ...ids, allowed: true, vsize: tx.virtualSize(), fees: { base: btc(fee) } };
          } catch (error) {
            if (!(error instanceof RpcError)) throw error;
            // rpc/mempool.cpp testmempoolaccept: missing inputs are "missing-inputs"; other reasons without their detail.
            const reason = error.code === -25 ? 'missing-inputs' : error.message.split(',')[0]!;
            return { ...ids, allowed: false, 'reject-reason': reason };
          }
        });
      case 'sendrawtransaction':
        return this.accept(String(params[0]));
      case 'gettxout': {
        const key = outpoint(String(params[0]), Number(params[1]));
        const includeMempool = params[2] !== false;
        const utxo = this.utxos.get(key) ?? (includeMempool ? this.mempoolOutput(key) : undefined);
        if (!utxo) return null;
        if (includeMempool && [...this.mempool.values()].some((m) => m.ins.some((x) => spentBy(x) === key)))
          return null;
        return {
          bestblock: this.tip.hash,
          confirmations: utxo.height === null ? 0 : this.tip.height - utxo.height + 1,
          value: btc(utxo.value),
          scriptPubKey: {
            hex: utxo.script.toString('hex'),
            address: addressOf(utxo.script),
            type: scriptType(utxo.script),
          },
          coinbase: utxo.coinbase === true,
        };
      }
      case 'invalidateblock':
        this.invalidate(String(params[0]));
        return null;
      case 'createwallet':
        return this.createWallet(params);
      case 'loadwallet': {
        const name = String(params[0]);
        const wallet = this.wallets.get(name);
        if (!wallet) {
          throw new RpcError(
            -18,
            `Wallet file verification failed. Failed to load database path '${walletPath(name)}'. Path does not exist.`,
          );
        }
        if (wallet.loaded) throw new RpcError(-35, `Wallet "${name}" is already loaded.`);
        wallet.loaded = true;
        if (typeof params[1] === 'boolean') wallet.loadOnStartup = params[1];
        return { name };
      }
      case 'unloadwallet': {
        const wallet = this.wallets.get(String(params[0]));
        if (!wallet?.loaded) throw new RpcError(-18, 'Requested wallet does not exist or is not loaded');
        wallet.loaded = false;
        return {};
      }
      case 'getdescriptorinfo': {
        const { address, checksum } = this.parseDescriptor(String(params[0]), false);
        return {
          descriptor: `addr(${address})#${checksum}`,
          checksum,
          isrange: false,
          issolvable: false,
          hasprivatekeys: false,
        };
      }
      default:
        throw new RpcError(-32601, 'Method not found');
    }
  }

  /** getrawtransaction (src/rpc/rawtransaction.cpp): without txindex, the mempool's, or a given block's. */
  private rawTransaction(txid: string, verbose: boolean, blockhash?: string) {
    if (blockhash === undefined || blockhash === null) {
      const tx = this.mempool.get(txid);
      if (!tx) {
        throw new RpcError(
          -5,
          'No such mempool transaction. Use -txindex or provide a block hash to enable blockchain transaction queries. Use gettransaction for wallet transactions.',
        );
      }
      return verbose ? this.txJson(tx) : tx.toHex();
    }
    const block = this.known.get(blockhash);
    if (!block) throw new RpcError(-5, 'Block hash not found');
    if (block.height < this.pruneHeight) throw new RpcError(-1, 'Block not available');
    const tx = block.txs.find((t) => t.getId() === txid);
    if (!tx)
      throw new RpcError(
        -5,
        'No such transaction found in the provided block. Use gettransaction for wallet transactions.',
      );
    if (!verbose) return tx.toHex();
    const active = this.blocks[block.height]?.hash === block.hash;
    return {
      in_active_chain: active,
      ...this.txJson(tx),
      blockhash,
      confirmations: active ? this.tip.height - block.height + 1 : 0,
      time: block.time,
      blocktime: block.time,
    };
  }

  // -------------------------------------------------------------------------
  // Wallets

  /** createwallet (src/wallet/rpc/wallet.cpp): only watch-only descriptor wallets are modelled. */
  private createWallet(params: any[]) {
    const [name, disablePrivateKeys, , , , descriptors = true, loadOnStartup] = params;
    if (disablePrivateKeys !== true || descriptors !== true) {
      throw new RpcError(
        -8,
        'the test node makes watch-only descriptor wallets only (disable_private_keys, descriptors)',
      );
    }
    if (this.wallets.has(String(name))) {
      throw new RpcError(
        -36,
        `Wallet file verification failed. Failed to create database path '${walletPath(String(name))}'. Database already exists.`,
      );
    }
    this.wallets.set(String(name), {
      loaded: true,
      loadOnStartup: loadOnStartup === true,
      watching: new Map(),
      labels: new Map(),
    });
    return { name: String(name) };
  }

  /** What a bitcoind restart does to wallets: only those saved to load at start-up (load_on_startup) are loaded again. */
  restartWallets(): void {
    for (const wallet of this.wallets.values()) {
      wallet.loaded = wallet.loadOnStartup;
      // A rescan cut off: its import never answers and the blocks it had yet to read stay unread. (Core
      // may go on from the progress it saved, ScanForWalletTransactions' WriteBestBlock; the worst case is modelled.)
      wallet.rescan?.cutOff();
    }
  }

  /** The imports held by `holdRescans` rescan and answer. */
  finishRescans(): void {
    for (const wallet of this.wallets.values()) wallet.rescan?.finish();
  }

  /** The wallet a call is for (src/wallet/rpc/util.cpp, GetWalletForJSONRPCRequest). */
  private walletAt(name: string | undefined) {
    if (name !== undefined) {
      const wallet = this.wallets.get(name);
      if (!wallet?.loaded) throw new RpcError(-18, 'Requested wallet does not exist or is not loaded');
      return wallet;
    }
    const loaded = [...this.wallets.values()].filter((w) => w.loaded);
    if (loaded.length === 1) return loaded[0]!;
    if (loaded.length === 0) {
      throw new RpcError(
        -18,
        'No wallet is loaded. Load a wallet using loadwallet or create a new one with createwallet. (Note: A default wallet is no longer automatically created)',
      );
    }
    throw new RpcError(-19, 'Wallet file not specified (must request wallet RPC through /wallet/<filename> uri-path).');
  }

  /**
   * An addr() descriptor (src/script/descriptor.cpp, Parse): its address as
   * Core writes it, and its checksum, which a given one must match and an
   * import must give. Other descriptor kinds are not modelled.
   */
  private parseDescriptor(text: string, requireChecksum: boolean): { address: string; checksum: string } {
    const [body, given] = text.split('#') as [string, string | undefined];
    const checksum = descriptorChecksum(body);
    if (given === undefined && requireChecksum) throw new RpcError(-5, 'Missing checksum');
    if (given !== undefined && given !== checksum) {
      throw new RpcError(-5, `Provided checksum '${given}' does not match computed checksum '${checksum}'`);
    }
    const inner = /^addr\((.*)\)$/.exec(body)?.[1];
    if (inner === undefined) throw new RpcError(-5, 'the test node models addr() descriptors only');
    let script: Buffer;
    try {
      script = Buffer.from(bitcoin.address.toOutputScript(inner, network));
    } catch {
      throw new RpcError(-5, 'Address is not valid');
    }
    return { address: addressOf(script)!, checksum };
  }

  private walletCall(method: string, params: any[], wallet: TestWallet): unknown {
    if (method === 'importdescriptors') {
      // src/wallet/rpc/backup.cpp importdescriptors: one rescan at a time per wallet (WalletRescanReserver).
      if (wallet.rescan) throw new RpcError(-4, 'Wallet is currently rescanning. Abort existing rescan or wait.');
      const rescans: (() => void)[] = [];
      const answers = (params[0] as { desc?: string; timestamp?: number | 'now' }[]).map((request) => {
        if (request.timestamp === undefined) throw new RpcError(-3, 'Missing required timestamp field for key');
        if (request.desc === undefined)
          return { success: false, error: { code: -8, message: 'Descriptor not found.' } };
        let address: string;
        try {
          ({ address } = this.parseDescriptor(request.desc, true));
        } catch (error) {
          if (!(error instanceof RpcError)) throw error;
          return { success: false, error: { code: error.code, message: error.message } };
        }
        // ProcessDescriptorImport stores the descriptor before the rescan: blocks from now on are seen anyway.
        if (!wallet.watching.has(address)) wallet.watching.set(address, this.tip.height + 1);
        // The rescan starts 2 hours before the timestamp (TIMESTAMP_WINDOW, RescanFromTime). A block it
        // cannot read (pruned) is passed by, the scan going on after it (ScanForWalletTransactions:
        // last_failed_block), and the import's answer is then this error.
        const timestamp = request.timestamp === 'now' ? this.tip.time : request.timestamp;
        const from = this.blocks.find((b) => b.time >= timestamp - 7200)?.height ?? this.tip.height + 1;
        const read = Math.max(from, this.pruneHeight);
        rescans.push(() => wallet.watching.set(address, Math.min(wallet.watching.get(address)!, read)));
        if (from >= this.pruneHeight) return { success: true };
        return {
          success: false,
          error: {
            code: -1,
            message: `Rescan failed for descriptor with timestamp ${timestamp}. There was an error reading a block from time ${this.blocks[this.pruneHeight - 1]!.time}, which is after or within 7200 seconds of key creation, and could contain transactions pertaining to the desc. As a result, transactions and coins using this desc may not appear in the wallet. This error could be caused by pruning or data corruption (see bitcoind log for details) and could be dealt with by downloading and rescanning the relevant blocks (see -reindex option and rescanblockchain RPC).`,
          },
        };
      });
      const rescan = () => rescans.forEach((r) => r());
      if (!this.holdRescans) {
        rescan();
        return answers;
      }
      return new Promise((resolve, reject) => {
        wallet.rescan = {
          finish: () => {
            wallet.rescan = undefined;
            rescan();
            resolve(answers);
          },
          cutOff: () => {
            wallet.rescan = undefined;
            reject(new CutOff());
          },
        };
      });
    }
    if (method === 'setlabel') {
      // src/wallet/rpc/addresses.cpp setlabel: any valid address, the wallet's or not (SetAddressBook).
      const address = addressOf(this.scriptOf(String(params[0])));
      if (!address) throw new RpcError(-5, 'Invalid Bitcoin address');
      wallet.labels.set(address, String(params[1]));
      return null;
    }
    if (method === 'getaddressinfo') {
      // src/wallet/rpc/addresses.cpp getaddressinfo: `ismine` is IsMine's ISMINE_SPENDABLE, which a
      // descriptor wallet answers for every script of its descriptors, keys or not
      // (DescriptorScriptPubKeyMan::IsMine); `iswatchonly` is never set in a descriptor wallet.
      const script = this.scriptOf(String(params[0]));
      const address = addressOf(script);
      if (!address) throw new RpcError(-5, 'Invalid address');
      return {
        address,
        scriptPubKey: script.toString('hex'),
        ismine: wallet.watching.has(address),
        solvable: false,
        iswatchonly: false,
        isscript: false,
        iswitness: false,
        ischange: false,
        // No `timestamp`: DescriptorScriptPubKeyMan::GetMetadata (src/wallet/scriptpubkeyman.cpp) has
        // one only for a key with an origin, which an addr() descriptor has not.
        labels: wallet.labels.has(address) ? [wallet.labels.get(address)] : [],
      };
    }
    // listunspent (src/wallet/rpc/coins.cpp): minconf, maxconf, addresses.
    const [minconf = 1, maxconf = 9_999_999, addresses] = params as [number?, number?, string[]?];
    const wanted = new Set<string>();
    for (const a of addresses ?? []) {
      const canonical = addressOf(this.scriptOf(a));
      if (!canonical) throw new RpcError(-5, `Invalid Bitcoin address: ${a}`);
      if (wanted.has(canonical)) throw new RpcError(-8, `Invalid parameter, duplicated address: ${a}`);
      wanted.add(canonical);
    }
    const spent = new Set([...this.mempool.values()].flatMap((m) => m.ins.map(spentBy)));
    const unconfirmed = [...this.mempool.values()].flatMap((tx) =>
      tx.outs.map((_, n) => [outpoint(tx.getId(), n), this.mempoolOutput(outpoint(tx.getId(), n))!] as const),
    );
    return [...this.utxos, ...unconfirmed].flatMap(([key, u]) => {
      const address = addressOf(u.script);
      const seenFrom = address === undefined ? undefined : wallet.watching.get(address);
      if (seenFrom === undefined || (u.height !== null && u.height < seenFrom) || spent.has(key)) return [];
      if (addresses && !wanted.has(address!)) return [];
      const confirmations = u.height === null ? 0 : this.tip.height - u.height + 1;
      if (confirmations < minconf || confirmations > maxconf) return [];
      if (u.coinbase && confirmations < COINBASE_MATURITY) return [];
      const [txid, vout] = key.split(':');
      return [
        {
          txid,
          vout: Number(vout),
          address,
          scriptPubKey: u.script.toString('hex'),
          amount: btc(u.value),
          confirmations,
          spendable: false,
          solvable: false,
          parent_descs: [`addr(${address})#${descriptorChecksum(`addr(${address})`)}`],
          safe: confirmations > 0,
        },
      ];
    });
  }

  private scriptOf(address: string): Buffer {
    try {
      return Buffer.from(bitcoin.address.toOutputScript(address, network));
    } catch {
      return Buffer.alloc(0);
    }
  }

  /**
   * The highest block a reader has fetched whole (getblock, verbosity 2: the
   * service's chain watcher). A test that mines at every look waits for it,
   * so that a loaded machine's watcher is never left ever further behind a
   * chain growing at 40 blocks a second (a real one grows at one in ten minutes).
   */
  readWhole = -1;

  /** Mines one block, only once the watcher has read the tip (see readWhole). */
  mineWhenRead(): void {
    if (this.readWhole >= this.tip.height) this.mine(1);
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

  /** An output of a mempool transaction (a chain of unconfirmed transactions), unconfirmed. */
  private mempoolOutput(key: string): Utxo | undefined {
    const [txid, vout] = key.split(':');
    const out = this.mempool.get(txid!)?.outs[Number(vout)];
    return out && { value: BigInt(out.value), script: Buffer.from(out.script), height: null };
  }

  /** `ids` and every mempool transaction that spends their outputs, transitively. */
  private withDescendants(ids: string[]): bitcoin.Transaction[] {
    const family = new Set(ids);
    for (const tx of this.mempool.values()) {
      if (tx.ins.some((x) => family.has(Buffer.from(x.hash).reverse().toString('hex')))) family.add(tx.getId());
    }
    return [...family].map((id) => this.mempool.get(id)).filter((t): t is bitcoin.Transaction => t !== undefined);
  }

  /** Bitcoin Core's mempool acceptance (src/validation.cpp, MemPoolAccept): the fee on success; `replacing` gets what it evicts. */
  private validate(tx: bitcoin.Transaction, replacing = new Set<string>()): bigint {
    const txid = tx.getId();
    let inputs = 0n;
    const conflicts = new Set<string>();
    for (const [i, input] of tx.ins.entries()) {
      const key = spentBy(input);
      const utxo = this.utxos.get(key) ?? this.mempoolOutput(key);
      if (!utxo) throw new RpcError(-25, 'bad-txns-inputs-missingorspent');
      if (utxo.coinbase && this.tip.height + 1 - utxo.height! < COINBASE_MATURITY) {
        throw new RpcError(
          -26,
          `bad-txns-premature-spend-of-coinbase, tried to spend coinbase at depth ${this.tip.height + 1 - utxo.height!}`,
        );
      }
      const conflict = [...this.mempool.values()].find((m) => m.ins.some((x) => spentBy(x) === key));
      if (conflict) conflicts.add(conflict.getId());
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
        throw new RpcError(
          -26,
          'mandatory-script-verify-flag-failed (Signature must be zero for failed CHECK(MULTI)SIG operation)',
        );
      }
      inputs += utxo.value;
    }
    const outputs = tx.outs.reduce((sum, out) => sum + BigInt(out.value), 0n);
    if (outputs > inputs) throw new RpcError(-26, 'bad-txns-in-belowout');
    // policy.cpp IsStandardTx: each output against its own type's dust limit.
    if (tx.outs.some((out) => BigInt(out.value) < (DUST_BY_TYPE[scriptType(out.script)] ?? 546n)))
      throw new RpcError(-26, 'dust');
    const fee = inputs - outputs;
    const vsize = tx.virtualSize();
    // validation.cpp CheckFeeRate: the mempool's minimum first, then the relay minimum, both on the real size.
    if (this.mempoolMinFee > 0n && fee < feeAt(this.mempoolMinFee, vsize))
      throw new RpcError(-26, `mempool min fee not met, ${fee} < ${feeAt(this.mempoolMinFee, vsize)}`);
    if (fee < feeAt(this.minRelayFee, vsize))
      throw new RpcError(-26, `min relay fee not met, ${fee} < ${feeAt(this.minRelayFee, vsize)}`);
    if (conflicts.size > 0) {
      for (const id of conflicts) {
        const old = this.mempool.get(id)!;
        // Without full RBF the replaced transaction must signal replaceability (BIP125 rule 1).
        if (!old.ins.some((x) => x.sequence < 0xfffffffe)) throw new RpcError(-26, 'txn-mempool-conflict');
        // rbf.cpp PaysMoreThanConflicts: a higher feerate than each transaction it replaces directly.
        if (rateOf(fee, vsize) <= rateOf(this.feeOf(old), old.virtualSize())) {
          throw new RpcError(
            -26,
            `insufficient fee, rejecting replacement ${txid}; new feerate ${rateOf(fee, vsize)} <= old feerate ${rateOf(this.feeOf(old), old.virtualSize())}`,
          );
        }
      }
      // rbf.cpp PaysForRBF: at least the fees of everything evicted (descendants too), plus its own relay at the incremental rate.
      const evicted = this.withDescendants([...conflicts]);
      const evictedFees = evicted.reduce((s, t) => s + this.feeOf(t), 0n);
      if (fee < evictedFees)
        throw new RpcError(
          -26,
          `insufficient fee, rejecting replacement ${txid}, less fees than conflicting txs; ${fee} < ${evictedFees}`,
        );
      if (fee - evictedFees < feeAt(this.incrementalRelayFee, vsize)) {
        throw new RpcError(
          -26,
          `insufficient fee, rejecting replacement ${txid}, not enough additional fees to relay; ${fee - evictedFees} < ${feeAt(this.incrementalRelayFee, vsize)}`,
        );
      }
      for (const t of evicted) replacing.add(t.getId());
    }
    return fee;
  }

  private feeOf(tx: bitcoin.Transaction): bigint {
    const inputs = tx.ins.reduce(
      (sum, x) => sum + ((this.utxos.get(spentBy(x)) ?? this.mempoolOutput(spentBy(x)))?.value ?? 0n),
      0n,
    );
    return inputs - tx.outs.reduce((sum, out) => sum + BigInt(out.value), 0n);
  }

  /** sendrawtransaction (BroadcastTransaction): validates, replaces what it conflicts with (RBF), keeps it in the mempool. */
  accept(hex: string): string {
    let tx: bitcoin.Transaction;
    try {
      tx = bitcoin.Transaction.fromHex(hex);
    } catch {
      throw new RpcError(-22, 'TX decode failed. Make sure the tx has at least one input.');
    }
    const txid = tx.getId();
    if (this.mempool.has(txid)) return txid; // already there: Core relays it again and answers its id
    // Only an output still unspent shows a transaction is in the chain; once all are spent it is just missing inputs.
    if (tx.outs.some((_, n) => this.utxos.has(outpoint(txid, n))))
      throw new RpcError(-27, 'Transaction outputs already in utxo set');
    const replacing = new Set<string>();
    this.validate(tx, replacing);
    for (const id of replacing) this.removeFromMempool(id, false);
    this.addToMempool(tx);
    this.enteredAt.set(txid, this.tip.height);
    return txid;
  }

  // -------------------------------------------------------------------------
  // Driving the chain

  /** A coinbase at `height` (BIP34: the height in its script, so every one has its own txid). */
  private coinbase(height: number, to: string, sats: bigint): bitcoin.Transaction {
    const tx = new bitcoin.Transaction();
    tx.version = 2;
    tx.addInput(
      Buffer.alloc(32),
      0xffffffff,
      0xffffffff,
      Buffer.from(bitcoin.script.compile([bitcoin.script.number.encode(height), randomBytes(4)])),
    );
    tx.addOutput(Buffer.from(bitcoin.address.toOutputScript(to, network)), sats);
    return tx;
  }

  /** Mines `count` blocks; the first takes the mempool above the mining floor. `coinbaseTo` gets the first block's reward. */
  mine(count = 1, { coinbaseTo }: { coinbaseTo?: string } = {}): string[] {
    const hashes: string[] = [];
    for (let i = 0; i < count; i++) {
      const taken = new Set<string>();
      const txs: bitcoin.Transaction[] = [];
      for (const tx of this.mempool.values()) {
        // A child only with its parents (mempool order puts parents first).
        const parentsIn = tx.ins.every((x) => {
          const parent = Buffer.from(x.hash).reverse().toString('hex');
          return !this.mempool.has(parent) || taken.has(parent);
        });
        if (parentsIn && this.feeOf(tx) >= this.miningFloor * BigInt(tx.virtualSize())) {
          taken.add(tx.getId());
          txs.push(tx);
        }
      }
      const fees = txs.reduce((s, t) => s + this.feeOf(t), 0n);
      const height = this.tip.height + 1;
      const coinbase = this.coinbase(height, (i === 0 && coinbaseTo) || this.miner.address, SUBSIDY + fees);
      for (const tx of txs) this.removeFromMempool(tx.getId(), true);
      this.apply(coinbase, height, true);
      for (const tx of txs) this.apply(tx, height);
      const hash = sha256d(
        Buffer.from(
          `${this.tip.hash}:${height}:${txs.map((t) => t.getId()).join(',')}:${randomBytes(4).toString('hex')}`,
        ),
      ).toString('hex');
      const block = {
        hash,
        height,
        time: Math.max(this.tip.time + 1, Math.floor(Date.now() / 1000) + this.mockTimeAhead),
        txs: [coinbase, ...txs],
      };
      this.blocks.push(block);
      this.known.set(hash, block);
      this.announce(hash, 'C');
      hashes.push(hash);
    }
    return hashes;
  }

  private apply(tx: bitcoin.Transaction, height: number, coinbase = false) {
    if (!coinbase) for (const x of tx.ins) this.utxos.delete(spentBy(x));
    tx.outs.forEach((out, n) =>
      this.utxos.set(outpoint(tx.getId(), n), {
        value: BigInt(out.value),
        script: Buffer.from(out.script),
        height,
        coinbase,
      }),
    );
  }

  /** Drops the block and every later one; their transactions but the coinbases go back to the mempool, as Core's invalidateblock does. */
  invalidate(hash: string): void {
    const at = this.blocks.findIndex((b) => b.hash === hash);
    if (at <= 0) throw new RpcError(-5, 'Block not found');
    const dropped = this.blocks.splice(at);
    for (const block of dropped.reverse()) {
      for (const tx of [...block.txs].reverse()) {
        tx.outs.forEach((_, n) => this.utxos.delete(outpoint(tx.getId(), n)));
        if (tx.isCoinbase()) continue;
        for (const x of tx.ins) {
          const key = spentBy(x);
          const parent = this.funding.get(key) ?? this.findOutput(key);
          if (parent) this.utxos.set(key, parent);
        }
      }
    }
    for (const block of dropped) this.announce(block.hash, 'D'); // tip first, as DisconnectTip goes
    for (const block of dropped.reverse()) for (const tx of block.txs.slice(1)) this.addToMempool(tx);
  }

  /** Outputs created by `fund`, which no block holds. */
  private readonly funding = new Map<string, Utxo>();

  private findOutput(key: string): Utxo | undefined {
    const [txid, vout] = key.split(':');
    for (const block of this.blocks) {
      const tx = block.txs.find((t) => t.getId() === txid);
      if (tx) {
        const out = tx.outs[Number(vout)]!;
        return {
          value: BigInt(out.value),
          script: Buffer.from(out.script),
          height: block.height,
          coinbase: tx.isCoinbase(),
        };
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
    const spentInMempool = new Set([...this.mempool.values()].flatMap((t) => t.ins.map(spentBy)));
    const coins = [...this.utxos].filter(
      ([k, u]) =>
        Buffer.from(script).equals(u.script) &&
        !spentInMempool.has(k) &&
        !exclude.includes(k) &&
        !(u.coinbase && this.tip.height + 1 - u.height! < COINBASE_MATURITY),
    );
    return this.signAndSend(from, coins, outputs, satsPerVbyte, rbf);
  }

  /** Spends the same coins as `original` again with `outputs` at a higher rate (an RBF replacement). */
  replace(
    from: BitcoinKey,
    original: bitcoin.Transaction,
    outputs: { address: string; sats: bigint }[],
    satsPerVbyte: bigint,
  ) {
    const coins = original.ins.map((x) => [spentBy(x), this.utxos.get(spentBy(x))!] as [string, Utxo]);
    return this.signAndSend(from, coins, outputs, satsPerVbyte, true);
  }

  /** Spends one output (confirmed or still in the mempool) of `from`'s to `to`, less `fee`: the merchant moving a payout on. */
  spendOutput(from: BitcoinKey, txid: string, vout: number, to: string, fee = 1_000n): bitcoin.Transaction {
    const key = outpoint(txid, vout);
    const utxo = this.utxos.get(key) ?? this.mempoolOutput(key);
    if (!utxo) throw new Error(`${key} is not unspent`);
    return this.signAndSend(from, [[key, utxo]], [{ address: to, sats: utxo.value - fee }], 0n, true, false);
  }

  private signAndSend(
    from: BitcoinKey,
    coins: [string, Utxo][],
    outputs: { address: string; sats: bigint }[],
    satsPerVbyte: bigint,
    rbf: boolean,
    change = true,
  ) {
    const want = outputs.reduce((s, o) => s + o.sats, 0n);
    const psbt = new bitcoin.Psbt({ network });
    let have = 0n;
    for (const [key, utxo] of coins) {
      const [txid, vout] = key.split(':');
      psbt.addInput({
        hash: txid!,
        index: Number(vout),
        sequence: rbf ? 0xfffffffd : 0xffffffff,
        witnessUtxo: { script: utxo.script, value: utxo.value },
      });
      have += utxo.value;
      if (have >= want + 10_000n) break;
    }
    for (const o of outputs) psbt.addOutput({ address: o.address, value: o.sats });
    const fee = BigInt(11 + psbt.inputCount * 68 + (outputs.length + 1) * 31) * satsPerVbyte;
    if (have < want + fee) throw new Error(`the payer holds ${have} sats, not ${want + fee}`);
    if (change && have - want - fee >= P2WPKH_DUST) psbt.addOutput({ address: from.address, value: have - want - fee });
    psbt.signAllInputs(from.keyPair);
    psbt.finalizeAllInputs();
    const tx = psbt.extractTransaction();
    this.accept(tx.toHex());
    return tx;
  }

  /** Whether an output is unspent in the chain (what the mempool spends aside). */
  isUnspent(txid: string, vout: number): boolean {
    return this.utxos.has(outpoint(txid, vout));
  }

  inMempool(txid: string): boolean {
    return this.mempool.has(txid);
  }

  /** Every output of mined transactions paying `address`. */
  received(address: string): { txid: string; sats: bigint }[] {
    const script = bitcoin.address.toOutputScript(address, network);
    return this.blocks.flatMap((b) =>
      b.txs.flatMap((tx) =>
        tx.outs
          .filter((o) => Buffer.from(o.script).equals(Buffer.from(script)))
          .map((o) => ({ txid: tx.getId(), sats: BigInt(o.value) })),
      ),
    );
  }

  /** A transaction mined on the best chain, as its block holds it. */
  minedTransaction(txid: string): bitcoin.Transaction {
    const tx = this.blocks.flatMap((b) => b.txs).find((t) => t.getId() === txid);
    if (!tx) throw new Error(`${txid} is not mined`);
    return tx;
  }

  /** The fee a mined transaction paid (inputs − outputs). */
  minedFee(txid: string): bigint {
    for (const block of this.blocks) {
      const tx = block.txs.find((t) => t.getId() === txid);
      if (!tx) continue;
      const inputs = tx.ins.reduce(
        (sum, x) => sum + (this.funding.get(spentBy(x)) ?? this.findOutput(spentBy(x)))!.value,
        0n,
      );
      return inputs - tx.outs.reduce((s, o) => s + BigInt(o.value), 0n);
    }
    throw new Error(`${txid} is not mined`);
  }
}

const WALLET_METHODS = new Set(['importdescriptors', 'listunspent', 'getaddressinfo', 'setlabel']);

interface TestWallet {
  loaded: boolean;
  loadOnStartup: boolean;
  /** Each watched address's first block the wallet has read. */
  watching: Map<string, number>;
  /** Address book labels (setlabel). */
  labels: Map<string, string>;
  /** The import rescanning (held by `holdRescans`). */
  rescan?: { finish(): void; cutOff(): void } | undefined;
}

/** bitcoind stopped while a call ran: the connection drops with no answer. */
class CutOff extends Error {}

type Answer = { result: unknown; error: { code: number; message: string } | null; id: unknown };
const walletPath = (name: string) => `/home/bitcoin/.bitcoin/regtest/wallets/${name}`;

/**
 * A descriptor's checksum (BIP380; src/script/descriptor.cpp,
 * DescriptorChecksum): a BCH code over the descriptor's characters, eight
 * characters of the bech32 alphabet.
 */
export function descriptorChecksum(descriptor: string): string {
  const inputCharset =
    '0123456789()[],\'/*abcdefgh@:$%{}IJKLMNOPQRSTUVWXYZ&+-.;<=>?!^_|~ijklmnopqrstuvwxyzABCDEFGH`#"\\ ';
  const checksumCharset = 'qpzry9x8gf2tvdw0s3jn54khce6mua7l';
  const generator = [0xf5dee51989n, 0xa9fdca3312n, 0x1bab10e32dn, 0x3706b1677an, 0x644d626ffdn];
  let c = 1n;
  const polymod = (value: number) => {
    const top = c >> 35n;
    c = ((c & 0x7ffffffffn) << 5n) ^ BigInt(value);
    for (let i = 0; i < 5; i++) if ((top >> BigInt(i)) & 1n) c ^= generator[i]!;
  };
  let group = 0;
  let groups = 0;
  for (const ch of descriptor) {
    const pos = inputCharset.indexOf(ch);
    if (pos === -1) throw new RpcError(-5, `Invalid character in descriptor: ${ch}`);
    polymod(pos & 31);
    group = group * 3 + (pos >> 5);
    if (++groups === 3) {
      polymod(group);
      group = 0;
      groups = 0;
    }
  }
  if (groups > 0) polymod(group);
  for (let i = 0; i < 8; i++) polymod(0);
  c ^= 1n;
  let out = '';
  for (let i = 0; i < 8; i++) out += checksumCharset[Number((c >> (5n * BigInt(7 - i))) & 31n)];
  return out;
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
    ['witness_v1_taproot', bitcoin.payments.p2tr],
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
