// Bitcoin behind the chain port, through Bitcoin Core's JSON-RPC (no wallet,
// no txindex needed).
//
// Detection: every output of a block's transactions that pays an address is
// a transfer (index = the output's n), so several outputs to one deposit
// address are several payments. Blocks come from `getblock` with verbosity 2,
// the mempool's transactions from `getrawmempool` and `getrawtransaction`
// (in JSON-RPC batches), so a payment is seen at 0 confirmations seconds
// after its broadcast. Amounts are read from Core's JSON text as decimal
// strings, never as floating-point numbers.
//
// Settlement: one transaction spends every confirmed output of the deposit
// address (found with `scantxoutset`) to the merchant (the net amount) and the
// treasury (the rest after the network fee recorded at request time), signed
// with the deposit key from WALLET_MNEMONIC. Its inputs are taken in a fixed
// order and its signatures are deterministic (RFC 6979), so the same
// settlement attempt always gives the same txid; it is recorded before it is
// sent and sent again after a crash. Every input signals RBF.
import { readFile } from 'node:fs/promises';
import * as bitcoin from 'bitcoinjs-lib';
import type { ChainName } from '../../domain/catalogue.ts';
import type { BitcoinCoreChain, DepositKeyring } from '../keys/derivation.ts';
import { HeadPoller } from './head-poller.ts';
import { DEFAULT_RETRY, retried, withoutRpcUrl, type RetryPolicy } from './retry.ts';
import {
  TransactionRejectedError,
  type ChainAdapter,
  type ChainBlock,
  type ChainHead,
  type ChainTransfer,
  type OutgoingTransfer,
  type PreparedTransaction,
  type TransactionStatus,
} from './port.ts';

const bitcoinjsNetwork: Record<BitcoinCoreChain, bitcoin.Network> = {
  main: bitcoin.networks.bitcoin,
  test: bitcoin.networks.testnet,
  signet: bitcoin.networks.testnet,
  regtest: bitcoin.networks.regtest,
};

/** vbytes of a P2WPKH input, and of a transaction's fixed part with two P2WPKH outputs (10.5 + 2 × 31, rounded up). */
const INPUT_VBYTES = 68n;
const TWO_OUTPUT_VBYTES = 73n;
/** Bitcoin Core's dust limit for a P2WPKH output. */
const DUST = 294n;
const RBF_SEQUENCE = 0xfffffffd;
/** Blocks a sweep may wait in the mempool below the market's fee rate before it is replaced. */
const STUCK_BLOCKS = 3;
const RPC_TIMEOUT_MS = 30_000;

export interface BitcoinChainOptions {
  /** http://user:pass@host:8332 (the credentials may instead come from `cookieFile`). */
  rpcUrl: string;
  cookieFile?: string;
  network: BitcoinCoreChain;
  keyring: Pick<DepositKeyring, 'deriveDepositKey' | 'deriveBitcoinTreasury'>;
  treasury?: string;
  /** sat/vB bounds of the fee rate taken from estimatesmartfee. */
  feeRate?: { floor: bigint; cap: bigint };
  pollMs?: number;
  retry?: RetryPolicy;
}

interface RpcTx {
  txid: string;
  vin: { coinbase?: string }[];
  vout: { value: string; n: number; scriptPubKey: { address?: string; hex: string } }[];
}
interface RpcBlock {
  hash: string;
  height: number;
  time: number;
  previousblockhash?: string;
  tx: RpcTx[];
}

export class BitcoinRpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = 'BitcoinRpcError';
  }
}


/** "0.00012345" (BTC, as Core prints it) in satoshis. */
export function satoshis(btc: string): bigint {
  const m = /^(-?)(\d+)(?:\.(\d{1,8}))?$/.exec(btc);
  if (!m) throw new Error(`not a BTC amount: ${btc}`);
  const sats = BigInt(m[2]!) * 100_000_000n + BigInt((m[3] ?? '').padEnd(8, '0'));
  return m[1] ? -sats : sats;
}

/** Core's JSON with its amounts kept as the decimal text it printed (JSON.parse would make them doubles). */
export function parseCoreJson<T>(text: string): T {
  return JSON.parse(text.replace(/"(value|amount|feerate|total_amount|fee|base|modified|ancestor|descendant)":\s*(-?\d+(?:\.\d+)?)/g, '"$1":"$2"')) as T;
}

/** The transfers of a block: one per output that pays an address. */
export function parseBitcoinBlock(block: Pick<RpcBlock, 'tx'>): ChainTransfer[] {
  const transfers: ChainTransfer[] = [];
  for (const tx of block.tx) {
    for (const out of tx.vout) {
      const amount = satoshis(String(out.value));
      if (out.scriptPubKey.address && amount > 0n) {
        transfers.push({ txHash: tx.txid, index: out.n, to: out.scriptPubKey.address, token: 'BTC', amount });
      }
    }
  }
  return transfers;
}

export class BitcoinChain implements ChainAdapter {
  readonly chain: ChainName = 'bitcoin';
  readonly treasury: string;
  private readonly endpoint: string;
  private readonly network: bitcoin.Network;
  private readonly poller: HeadPoller;
  private readonly recentBlocks = new Map<string, ChainBlock>();
  private readonly preparedByReference = new Map<string, PreparedTransaction>();
  private authorization = '';
  private closed = false;
  /** sat/vB from the last estimatesmartfee, within the floor and cap. */
  private satsPerVbyte?: bigint;
  private rpcId = 0;
  /** The mempool's transactions already read, by txid (a transaction's content never changes). */
  private mempoolTransfers = new Map<string, ChainTransfer[]>();

  private constructor(private readonly options: BitcoinChainOptions) {
    const url = new URL(options.rpcUrl);
    if (url.username) {
      this.authorization = 'Basic ' + Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`).toString('base64');
    }
    url.username = '';
    url.password = '';
    this.endpoint = url.toString();
    this.network = bitcoinjsNetwork[options.network];
    this.treasury = options.treasury ?? options.keyring.deriveBitcoinTreasury();
    this.poller = new HeadPoller(() => this.rpc<number>('getblockcount', []), options.pollMs);
  }

  /** Connects and checks the node's chain against CHAIN_BITCOIN_NETWORK; a mismatch stops start-up with one line. */
  static async open(options: BitcoinChainOptions): Promise<BitcoinChain> {
    const adapter = new BitcoinChain(options);
    let chain: string;
    try {
      if (options.cookieFile) {
        const cookie = (await readFile(options.cookieFile, 'utf8')).trim();
        adapter.authorization = 'Basic ' + Buffer.from(cookie).toString('base64');
      }
      chain = (await adapter.rpc<{ chain: string }>('getblockchaininfo', [])).chain;
      await adapter.head(); // also the first fee rate
    } catch (error) {
      adapter.close();
      const reason = withoutRpcUrl(error, options.rpcUrl).message.split('\n')[0]!;
      throw new Error(`CHAIN_BITCOIN_RPC_URL: the node did not answer (${reason.slice(0, 200)})`);
    }
    if (chain !== options.network) {
      adapter.close();
      throw new Error(
        `CHAIN_BITCOIN_RPC_URL is a node of the ${chain} chain, not ${options.network}; set CHAIN_BITCOIN_NETWORK=${chain} if that network is meant`,
      );
    }
    return adapter;
  }

  close(): void {
    this.closed = true;
    this.poller.close();
  }

  // -------------------------------------------------------------------------
  // JSON-RPC

  private rpc<T>(method: string, params: unknown[]): Promise<T> {
    // A node's refusal is an answer, not a failure to retry.
    return retried(
      () => this.send<T>(method, params),
      this.options.retry ?? DEFAULT_RETRY,
      (error) => error instanceof BitcoinRpcError || this.closed,
    );
  }

  private async send<T>(method: string, params: unknown[]): Promise<T> {
    const [body] = await this.post<T>([{ method, params }]);
    if (body!.error) throw new BitcoinRpcError(body!.error.code, body!.error.message);
    return body!.result;
  }

  /** One HTTP request; several calls go as one JSON-RPC batch, answered in order. */
  private async post<T>(calls: { method: string; params: unknown[] }[]) {
    const requests = calls.map((c) => ({ jsonrpc: '1.0', id: ++this.rpcId, ...c }));
    const response = await fetch(this.endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(this.authorization && { authorization: this.authorization }) },
      body: JSON.stringify(requests.length === 1 ? requests[0] : requests),
      signal: AbortSignal.timeout(RPC_TIMEOUT_MS),
    });
    if (response.status === 401) throw new Error('the node refused the RPC credentials (HTTP 401)');
    const text = await response.text();
    type Answer = { id: number; result: T; error: { code: number; message: string } | null };
    let answers: Answer[];
    try {
      const parsed = parseCoreJson<Answer | Answer[]>(text);
      answers = Array.isArray(parsed) ? parsed : [parsed];
    } catch {
      throw new Error(`${calls[0]!.method}: HTTP ${response.status}, not JSON`);
    }
    const byId = new Map(answers.map((a) => [a.id, a]));
    return requests.map(
      (r) => byId.get(r.id) ?? { id: r.id, result: null as T, error: { code: -32603, message: 'no answer' } },
    );
  }

  // -------------------------------------------------------------------------
  // Reading the chain

  async head(): Promise<ChainHead> {
    // The tip and whether it is the chain's present, in one call (Bitcoin
    // Core's getblockchaininfo, src/rpc/blockchain.cpp): a node in its
    // initial block download, or with headers whose blocks it lacks, is behind.
    const info = await this.rpc<{
      blocks: number;
      headers: number;
      bestblockhash: string;
      initialblockdownload: boolean;
    }>('getblockchaininfo', []);
    await this.refreshFeeRate();
    const stale = info.initialblockdownload
      ? 'it is in its initial block download'
      : info.headers > info.blocks
        ? `it has headers up to ${info.headers} but blocks only up to ${info.blocks}`
        : undefined;
    return { height: info.blocks, hash: info.bestblockhash, ...(stale && { stale }) };
  }

  async block(height: number): Promise<ChainBlock | undefined> {
    let hash: string;
    try {
      hash = await this.rpc<string>('getblockhash', [height]);
    } catch (error) {
      if (error instanceof BitcoinRpcError && error.code === -8) return undefined; // above the tip
      throw error;
    }
    const known = this.recentBlocks.get(hash);
    if (known) return known;
    let block: RpcBlock;
    try {
      block = await this.rpc<RpcBlock>('getblock', [hash, 2]);
    } catch (error) {
      // -5: asked of a load-balanced backend that has not got it yet.
      if (error instanceof BitcoinRpcError && error.code === -5) return undefined;
      throw error;
    }
    const parsed: ChainBlock = {
      height: block.height,
      hash: block.hash,
      parentHash: block.previousblockhash ?? '0'.repeat(64),
      timestamp: new Date(block.time * 1000),
      transfers: parseBitcoinBlock(block),
    };
    this.recentBlocks.set(hash, parsed);
    if (this.recentBlocks.size > 32) this.recentBlocks.delete(this.recentBlocks.keys().next().value!);
    return parsed;
  }

  onNewBlock(listener: () => void): () => void {
    return this.poller.onNewBlock(listener);
  }

  /** The outputs of the mempool's transactions; new ones are read in batches of 100, the rest remembered. */
  async mempool(): Promise<ChainTransfer[]> {
    const txids = await this.rpc<string[]>('getrawmempool', []);
    const fresh = txids.filter((id) => !this.mempoolTransfers.has(id));
    const current = new Map(txids.filter((id) => this.mempoolTransfers.has(id)).map((id) => [id, this.mempoolTransfers.get(id)!]));
    for (let i = 0; i < fresh.length; i += 100) {
      const answers = await this.post<RpcTx>(fresh.slice(i, i + 100).map((id) => ({ method: 'getrawtransaction', params: [id, true] })));
      for (const answer of answers) {
        // Gone since the list was read (mined, replaced): the next look settles it.
        if (answer.error || !answer.result) continue;
        current.set(answer.result.txid, parseBitcoinBlock({ tx: [answer.result] }));
      }
    }
    this.mempoolTransfers = current;
    return [...current.values()].flat();
  }

  // -------------------------------------------------------------------------
  // Fees

  private async refreshFeeRate() {
    const { floor, cap } = this.options.feeRate ?? { floor: 1n, cap: 500n };
    try {
      const estimate = await this.rpc<{ feerate?: string; errors?: string[] }>('estimatesmartfee', [2]);
      // BTC per 1,000 vbytes → sat/vB, rounded up.
      const perVbyte = estimate.feerate ? (satoshis(estimate.feerate) + 999n) / 1000n : floor;
      this.satsPerVbyte = perVbyte < floor ? floor : perVbyte > cap ? cap : perVbyte;
    } catch (error) {
      if (this.satsPerVbyte === undefined) throw error;
    }
  }

  /** A sweep of one deposit output to the merchant and the treasury at the current fee rate. */
  networkFee(token: string): bigint {
    if (token !== 'BTC') return 0n;
    if (this.satsPerVbyte === undefined) throw new Error('bitcoin: no fee rate yet');
    return (TWO_OUTPUT_VBYTES + INPUT_VBYTES) * this.satsPerVbyte;
  }

  // -------------------------------------------------------------------------
  // Settlement

  async prepareTransfer(transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    const earlier = this.preparedByReference.get(transfer.reference);
    if (earlier) return earlier;
    const key = this.options.keyring.deriveDepositKey('bitcoin', transfer.from.derivationIndex);
    if (key.address !== transfer.from.address) {
      throw new TransactionRejectedError(`derivation index ${transfer.from.derivationIndex} is not ${transfer.from.address}`);
    }
    const scan = await this.rpc<{ unspents: { txid: string; vout: number; scriptPubKey: string; amount: string }[] }>(
      'scantxoutset',
      ['start', [`addr(${transfer.from.address})`]],
    );
    // A fixed order: the same outputs always make the same transaction.
    const coins = [...scan.unspents].sort((a, b) => a.txid.localeCompare(b.txid) || a.vout - b.vout);
    const inputs = coins.reduce((sum, c) => sum + satoshis(c.amount), 0n);
    const fee = await this.sweepFee(coins, transfer.fees?.network ?? this.networkFee('BTC'));
    const rest = inputs - transfer.amount - fee;
    if (coins.length === 0 || rest < 0n) {
      throw new TransactionRejectedError(
        `${transfer.from.address} holds ${inputs} sats, less than the payout of ${transfer.amount} and its fee of ${fee}`,
      );
    }
    if (transfer.amount < DUST) throw new TransactionRejectedError(`a payout of ${transfer.amount} sats is dust`);
    const psbt = new bitcoin.Psbt({ network: this.network });
    for (const c of coins) {
      psbt.addInput({
        hash: c.txid,
        index: c.vout,
        sequence: RBF_SEQUENCE,
        witnessUtxo: { script: Buffer.from(c.scriptPubKey, 'hex'), value: satoshis(c.amount) },
      });
    }
    psbt.addOutput({ address: transfer.to, value: transfer.amount });
    // The treasury takes the platform fee and anything else the address holds; below dust it is left to the miners.
    if (rest >= DUST) psbt.addOutput({ address: this.treasury, value: rest });
    psbt.signAllInputs(key.keyPair);
    psbt.finalizeAllInputs();
    const tx = psbt.extractTransaction();
    const prepared = { txHash: tx.getId(), raw: tx.toHex() };
    if (this.preparedByReference.size > 1000) this.preparedByReference.clear();
    this.preparedByReference.set(transfer.reference, prepared);
    return prepared;
  }

  /**
   * The fee of a sweep of `coins`: the one recorded, unless an earlier sweep
   * of the same coins waits in the mempool (it got stuck and is being
   * replaced): then at least the current rate, and more than the earlier one
   * by the relay minimum of 1 sat/vB, as BIP125 requires. The difference comes
   * out of the treasury's share; the merchant's amount never changes.
   */
  private async sweepFee(coins: { txid: string; vout: number }[], recorded: bigint): Promise<bigint> {
    if (coins.length === 0) return recorded;
    const spending = await this.rpc<{ spendingtxid?: string }[]>('gettxspendingprevout', [
      coins.map(({ txid, vout }) => ({ txid, vout })),
    ]);
    const earlier = [...new Set(spending.map((s) => s.spendingtxid).filter((id): id is string => id !== undefined))];
    if (earlier.length === 0) return recorded;
    const vsize = TWO_OUTPUT_VBYTES + INPUT_VBYTES * BigInt(coins.length);
    let fee = recorded;
    for (const id of earlier) {
      const entry = await this.rpc<{ fees: { base: string } }>('getmempoolentry', [id]);
      const over = satoshis(entry.fees.base) + vsize;
      if (over > fee) fee = over;
    }
    const market = vsize * (this.satsPerVbyte ?? 1n);
    return market > fee ? market : fee;
  }

  /**
   * A sweep still in the mempool STUCK_BLOCKS after it came in, below the
   * current fee rate, is not sent again: the next attempt spends the same
   * coins at a higher fee and replaces it (RBF), so at most one of them can
   * ever be mined.
   */
  private async refuseIfStuck(txHash: string): Promise<void> {
    let entry: { vsize: number; height: number; fees: { base: string } };
    try {
      entry = await this.rpc('getmempoolentry', [txHash]);
    } catch (error) {
      if (error instanceof BitcoinRpcError && error.code === -5) return; // not in the mempool
      throw error;
    }
    const tip = await this.rpc<number>('getblockcount', []);
    await this.refreshFeeRate();
    const paying = satoshis(entry.fees.base) / BigInt(entry.vsize);
    if (tip - entry.height >= STUCK_BLOCKS && paying < (this.satsPerVbyte ?? 1n)) {
      throw new TransactionRejectedError(
        `${txHash} waits in the mempool at ${paying} sat/vB since block ${entry.height}, below the market's ${this.satsPerVbyte}: it is replaced by RBF`,
      );
    }
  }

  async broadcast(transaction: PreparedTransaction): Promise<void> {
    if (await this.transactionStatus(transaction.txHash)) return;
    await this.refuseIfStuck(transaction.txHash);
    try {
      await this.rpc<string>('sendrawtransaction', [transaction.raw]);
    } catch (error) {
      if (!(error instanceof BitcoinRpcError)) throw withoutRpcUrl(error, this.options.rpcUrl);
      const { code, message } = error;
      if (code === -27 || /txn-already-in-mempool|txn-already-known/.test(message)) return;
      // Spent by another transaction pending in the mempool (an earlier attempt): the outcome is open.
      if (/txn-mempool-conflict|insufficient fee|replacement/.test(message)) throw new Error(`${transaction.txHash}: ${message}`);
      // Its inputs are gone (spent by a mined transaction: only an earlier attempt can, and the
      // sweeper adopts that one), or the transaction is invalid: this one can never be mined.
      if (code === -25 || code === -26 || code === -22) {
        throw new TransactionRejectedError(`${transaction.txHash} refused: ${message}`.slice(0, 300));
      }
      throw error;
    }
  }

  /**
   * Where a payout stands. Without txindex, Core finds a mined transaction
   * through its unspent outputs (`gettxout`); the payout's are the merchant's
   * and the treasury's, unspent until they move them.
   */
  async transactionStatus(txHash: string): Promise<TransactionStatus | undefined> {
    for (const n of [0, 1]) {
      const out = await this.rpc<{ confirmations: number } | null>('gettxout', [txHash, n, false]);
      if (out && out.confirmations > 0) {
        const tip = await this.rpc<number>('getblockcount', []);
        return { blockNumber: tip - out.confirmations + 1, confirmations: out.confirmations };
      }
    }
    return undefined;
  }

  async wallets() {
    return { feeWallet: null, feeWalletBalance: null, treasury: this.treasury, treasuryBalance: null };
  }
}

/** Bitcoin's adapter when it is enabled and has an RPC URL, opened (and its network checked). */
export async function openBitcoinChain(
  settings: {
    chains: readonly ChainName[];
    chainRpcUrls: Partial<Record<ChainName, string>>;
    bitcoin: { network: BitcoinCoreChain; cookieFile: string | undefined; treasury: string | undefined; feeRate: { floor: bigint; cap: bigint } };
  },
  keyring: BitcoinChainOptions['keyring'],
): Promise<BitcoinChain | undefined> {
  const rpcUrl = settings.chainRpcUrls.bitcoin;
  if (!rpcUrl || !settings.chains.includes('bitcoin')) return undefined;
  const { network, cookieFile, treasury, feeRate } = settings.bitcoin;
  return BitcoinChain.open({
    rpcUrl,
    network,
    keyring,
    feeRate,
    ...(cookieFile && { cookieFile }),
    ...(treasury && { treasury }),
  });
}
