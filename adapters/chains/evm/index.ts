// A real EVM chain (ethereum, bsc, polygon) behind the chain port, through a
// node's JSON-RPC.
//
// Detection: native transfers are the value-carrying transactions of a block
// (index 0); USDT/USDC transfers are the Transfer logs of the token contracts
// (index = log index), fetched with eth_getLogs over a range of blocks ahead
// of the watcher and checked against each block's hash and logs bloom, so a
// block is never read half from one fork and half from another, and never
// skipped: a failed call is retried with backoff and then fails the whole
// block, which the watcher reads again (it only records a block once its
// transfers are handed over).
//
// Settlement: the deposit key is derived from WALLET_MNEMONIC. A settlement
// is one bundle of signed transactions from the deposit address, in nonce
// order: the platform fee to the treasury, then the payout (whose hash is
// the settlement's). A token bundle also carries the gas budget that the fee
// wallet tops the deposit address up with before it is sent. Since the payout
// has the highest nonce, the payout on the chain means the fee is there too,
// and since every attempt of a settlement starts at the deposit address's
// mined nonce, two attempts compete for the same nonces: at most one payout
// can ever be mined.
//
// Native payouts pay exactly the network fee the settlement recorded: every
// transaction has 21,000 gas at one price per gas (EIP-1559 with the tip equal
// to the fee cap, so the price paid is exactly the cap; a legacy gas price
// where the chain has no base fee), so the merchant receives the net amount
// to the wei and the deposit address keeps nothing. A refund is the same
// payout with no platform fee: one transaction, whose fee was quoted for one
// (`networkFee(token, 'refund')`), so the payer spends exactly the refund's
// amount; a token refund leaves the rest of a deposit for its settlement.
import {
  AbiCoder,
  getAddress,
  getBytes,
  hexlify,
  JsonRpcProvider,
  keccak256,
  Network,
  Transaction,
  WebSocketProvider,
  type JsonRpcApiProvider,
  type TransactionRequest,
  Wallet,
} from 'ethers';
import { findChain, mainnetChainIds, type ChainName } from '../../../domain/catalogue.ts';
import type { DepositKeyring } from '../../keys/derivation.ts';
import { withDeadline } from '../../deadline.ts';
import { HeadPoller } from '../head-poller.ts';
import { ChainNode, checkedOpen, RPC_TIMEOUT_MS, sleep, type RetryPolicy } from '../node.ts';
import {
  staleTip,
  TransactionRejectedError,
  type ChainAdapter,
  type ChainBlock,
  type ChainHead,
  type ChainTransfer,
  type OutgoingTransfer,
  type PreparedTransaction,
  type TransactionStatus,
} from '../port.ts';

export const TRANSFER_TOPIC = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef';
const NATIVE_GAS = 21_000n;
/** transfer(address,uint256) */
const TRANSFER_SELECTOR = '0xa9059cbb';
/** balanceOf(address) */
const BALANCE_OF_SELECTOR = '0x70a08231';

export interface EvmToken {
  symbol: string;
  contract: string;
  decimals: number;
}

export interface EvmChainOptions {
  chain: ChainName;
  rpcUrl: string;
  /** A test network's chain id, accepted instead of the mainnet one (CHAIN_<NAME>_CHAIN_ID). */
  chainId?: bigint;
  /** Token contracts; default: the catalogue's mainnet ones. */
  tokens?: EvmToken[];
  keyring: Pick<DepositKeyring, 'deriveDepositKey' | 'deriveEvmServiceKey'>;
  /** Where platform fees go; default: the derived treasury. */
  treasury?: string;
  /** With a platform fee a native settlement is two transactions, and its network fee covers both. */
  platformFeeBps: number;
  /** How often the head is polled for onNewBlock listeners. */
  pollMs?: number;
  /** Blocks per eth_getLogs range (halved when the node refuses a range). */
  logBatchBlocks?: number;
  /** Token sweeps (not refunds) below this many base units are not made (the gas would cost more); default one whole token. */
  dustThresholds?: Record<string, bigint>;
  /** RPC retries: attempts and the first delay, doubled each time up to 10 s. */
  retry?: RetryPolicy;
  /** How long a broadcast waits for the fee wallet's top-up to be mined before it gives up (unknown outcome). */
  topUpTimeoutMs?: number;
}

/** What a prepared settlement carries in `raw`. */
interface Bundle {
  v: 1;
  /** Signed transactions from the deposit address, in nonce order; the last is the payout. */
  steps: string[];
  /** Token bundles: the native balance the deposit address needs for their gas, and the top-up's fee. */
  topUp?: { budget: string; maxFeePerGas: string; maxPriorityFeePerGas: string; eip1559: boolean };
}

interface RpcBlock {
  number: string;
  hash: string;
  parentHash: string;
  timestamp: string;
  logsBloom?: string;
  baseFeePerGas?: string;
  transactions: (string | { hash: string; from: string; to: string | null; value: string })[];
}
interface RpcLog {
  address: string;
  topics: string[];
  data: string;
  blockNumber: string;
  blockHash: string;
  transactionHash: string;
  logIndex: string;
  removed?: boolean;
}
interface RpcReceipt {
  status: string;
  blockNumber: string;
  blockHash: string;
  transactionHash: string;
}

interface FeeQuote {
  /** Fee cap per gas (the gas price where there is no base fee). */
  maxFeePerGas: bigint;
  maxPriorityFeePerGas: bigint;
  eip1559: boolean;
}

const hex = (n: number | bigint) => '0x' + n.toString(16);

/** Every message an ethers or node error carries, lower-cased, to recognise a refusal. */
function errorText(error: unknown): string {
  const e = error as { message?: string; shortMessage?: string; info?: { error?: { message?: string } } };
  return [e?.message, e?.shortMessage, e?.info?.error?.message].filter(Boolean).join(' | ').toLowerCase();
}

/** The pauses before opening a new WebSocket to the node, growing while it stays out of reach. */
const RECONNECT_FIRST_MS = 250;
const RECONNECT_MAX_MS = 30_000;

/**
 * The node's JSON-RPC connection: one provider over HTTP. Over a WebSocket,
 * ethers (v6) neither reconnects a closed socket nor answers the requests
 * left on it; here a closed socket fails its requests at once and a new one
 * is opened after a pause. Callers retry (the watcher, the head poller and
 * the sweeper all ask again), so they go on through the new socket, and the
 * watcher reads the blocks it missed from the last one it stored.
 */
class NodeConnection {
  private provider!: JsonRpcApiProvider;
  /** Rejects when the current socket closes; never over HTTP. */
  private lost: Promise<never> = new Promise<never>(() => undefined);
  private pause = RECONNECT_FIRST_MS;
  private reopening?: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly url: string,
    private readonly network: Network,
  ) {
    this.open();
  }

  send(method: string, params: unknown[]): Promise<unknown> {
    return Promise.race([this.provider.send(method, params), this.lost]);
  }

  destroy(): void {
    this.closed = true;
    clearTimeout(this.reopening);
    void this.provider.destroy();
  }

  private open(): void {
    const options = { staticNetwork: this.network, batchStallTime: 0, cacheTimeout: -1 };
    if (!/^wss?:/.test(this.url)) {
      this.provider = new JsonRpcProvider(this.url, this.network, options);
      return;
    }
    const provider = new WebSocketProvider(this.url, this.network, options);
    let fail!: (error: Error) => void;
    const lost = new Promise<never>((_, reject) => (fail = reject));
    lost.catch(() => undefined);
    // The ws socket under ethers: without an error listener a refused
    // connection would throw; the close that follows any error does the rest.
    const socket = provider.websocket as unknown as {
      onerror: (() => void) | null;
      addEventListener(type: 'open' | 'close', listener: () => void): void;
    };
    socket.onerror = () => undefined;
    socket.addEventListener('open', () => (this.pause = RECONNECT_FIRST_MS));
    socket.addEventListener('close', () => {
      fail(new Error('the WebSocket to the node closed'));
      if (this.closed || this.provider !== provider) return;
      void provider.destroy();
      this.reopening = setTimeout(() => this.closed || this.open(), this.pause);
      this.reopening.unref();
      this.pause = Math.min(this.pause * 2, RECONNECT_MAX_MS);
    });
    this.provider = provider;
    this.lost = lost;
  }
}

/** Whether a 2048-bit logs bloom may hold `value` (an address or a topic). A bloom has no false negatives. */
export function bloomMayContain(bloomHex: string | undefined, value: string): boolean {
  if (!bloomHex) return true;
  const bloom = getBytes(bloomHex);
  if (bloom.length !== 256) return true;
  const hash = getBytes(keccak256(value));
  for (let i = 0; i < 6; i += 2) {
    const bit = ((hash[i]! << 8) | hash[i + 1]!) & 2047;
    if ((bloom[255 - (bit >> 3)]! & (1 << (bit & 7))) === 0) return false;
  }
  return true;
}

export class EvmChain implements ChainAdapter {
  readonly chain: ChainName;
  readonly chainId: bigint;
  readonly treasury: string;
  readonly feeWallet: string;
  private readonly native: string;
  private readonly tokens: EvmToken[];
  private readonly tokenByContract: Map<string, EvmToken>;
  private readonly poller: HeadPoller;
  private readonly node: ChainNode;
  private fee?: FeeQuote;
  private tipFetchedAt = 0;
  private knownHead = 0;
  /** Token logs fetched ahead, by height, and the heights that range covered. */
  private logCache = new Map<number, RpcLog[]>();
  private logRange?: { from: number; to: number };
  private logBatch: number;
  /** The fee wallet's top-ups, one at a time: its nonces never collide. */
  private topUps: Promise<unknown> = Promise.resolve();
  /** Blocks parsed lately, by hash (a block's content never changes under its hash). */
  private readonly recentBlocks = new Map<string, ChainBlock>();
  /** Prepared bundles by reference: preparing one again gives the same transaction. */
  private readonly preparedByReference = new Map<string, PreparedTransaction>();

  private constructor(
    private readonly provider: NodeConnection,
    private readonly options: EvmChainOptions,
    chainId: bigint,
  ) {
    this.chain = options.chain;
    this.chainId = chainId;
    this.native = findChain(options.chain)!.nativeCurrency;
    this.tokens =
      options.tokens ??
      findChain(options.chain)!
        .supportedTokens.filter((t) => t.contractAddress !== null)
        .map((t) => ({ symbol: t.symbol, contract: getAddress(t.contractAddress!), decimals: t.decimals }));
    this.tokenByContract = new Map(this.tokens.map((t) => [t.contract.toLowerCase(), t]));
    this.feeWallet = options.keyring.deriveEvmServiceKey('fee').address;
    this.treasury = options.treasury ?? options.keyring.deriveEvmServiceKey('treasury').address;
    this.logBatch = options.logBatchBlocks ?? 100;
    this.node = new ChainNode({ urls: [options.rpcUrl], retry: options.retry });
    this.poller = new HeadPoller(async () => Number(await this.provider.send('eth_blockNumber', [])), options.pollMs);
  }

  /**
   * Connects and checks the node's chain id against the chain's mainnet id, or
   * the configured test network's; a mismatch or a node that does not answer
   * stops start-up with one line naming the variable.
   */
  static async open(options: EvmChainOptions): Promise<EvmChain> {
    const variable = `CHAIN_${options.chain.toUpperCase()}`;
    const expected = options.chainId ?? mainnetChainIds[options.chain];
    if (expected === undefined) throw new Error(`${variable}_RPC_URL: ${options.chain} is not an EVM chain`);
    const adapter = new EvmChain(new NodeConnection(options.rpcUrl, Network.from(expected)), options, expected);
    return checkedOpen(adapter, async () => {
      let actual: bigint;
      try {
        actual = BigInt(await adapter.rpc<string>('eth_chainId', []));
        await adapter.head(); // also the first fee quote
      } catch (error) {
        throw adapter.node.unanswered(`${variable}_RPC_URL`, error);
      }
      if (actual !== expected) {
        throw new Error(
          options.chainId === undefined
            ? `${variable}_RPC_URL is a node of chain id ${actual}, not ${options.chain} mainnet (${expected}); set ${variable}_CHAIN_ID=${actual} if this test network is meant`
            : `${variable}_CHAIN_ID is ${expected} but ${variable}_RPC_URL is a node of chain id ${actual}`,
        );
      }
      const treasuryProblem = options.treasury && (await adapter.receivingProblem(options.treasury));
      if (treasuryProblem) throw new Error(`${variable}_TREASURY: ${treasuryProblem}`);
    });
  }

  close(): void {
    this.node.close();
    this.poller.close();
    this.provider.destroy();
  }

  // -------------------------------------------------------------------------
  // Reading the chain
  // -------------------------------------------------------------------------

  /** A JSON-RPC call, retried with growing delays (rate limits, dropped connections, a lagging node). */
  private rpc<T>(method: string, params: unknown[]): Promise<T> {
    return this.node.call(method, async () => (await this.provider.send(method, params)) as T);
  }

  async head(): Promise<ChainHead> {
    const latest = await this.rpc<RpcBlock | null>('eth_getBlockByNumber', ['latest', false]);
    if (!latest) throw new Error(`${this.chain}: the node has no latest block`);
    const height = Number(latest.number);
    this.knownHead = Math.max(this.knownHead, height);
    await this.refreshFee(latest);
    // A syncing node's latest block is an old one (eth_syncing is not asked: one call less per step).
    const stale = staleTip(new Date(Number(latest.timestamp) * 1000));
    return { height, hash: latest.hash, ...(stale && { stale }) };
  }

  async block(height: number): Promise<ChainBlock | undefined> {
    // The watcher reads its last block again at every step (to find reorgs):
    // a block already parsed is known by its hash from the header alone.
    const header = await this.rpc<RpcBlock | null>('eth_getBlockByNumber', [hex(height), false]);
    if (!header) return undefined;
    const known = this.recentBlocks.get(header.hash);
    if (known) return known;
    const block = await this.rpc<RpcBlock | null>('eth_getBlockByNumber', [hex(height), true]);
    if (!block) return undefined;
    const parsed = await this.parseBlock(height, block);
    this.recentBlocks.set(parsed.hash, parsed);
    if (this.recentBlocks.size > 64) this.recentBlocks.delete(this.recentBlocks.keys().next().value!);
    return parsed;
  }

  private async parseBlock(height: number, block: RpcBlock): Promise<ChainBlock> {
    this.knownHead = Math.max(this.knownHead, height);
    const transfers: ChainTransfer[] = [];
    for (const tx of block.transactions) {
      if (typeof tx === 'string' || !tx.to) continue;
      // The fee wallet's gas top-ups to deposit addresses are ours, not a customer's payment.
      if (tx.from.toLowerCase() === this.feeWallet.toLowerCase()) continue;
      const amount = BigInt(tx.value);
      if (amount > 0n) transfers.push({ txHash: tx.hash, index: 0, to: getAddress(tx.to), token: this.native, amount });
    }
    for (const log of await this.tokenLogs(height, block)) {
      const token = this.tokenByContract.get(log.address.toLowerCase());
      // ERC-20 Transfer: from and to indexed, the amount in data (an ERC-721 one has three indexed topics).
      if (!token || log.topics.length !== 3 || log.topics[0] !== TRANSFER_TOPIC || getBytes(log.data).length !== 32) {
        continue;
      }
      transfers.push({
        txHash: log.transactionHash,
        index: Number(log.logIndex),
        to: getAddress('0x' + log.topics[2]!.slice(26)),
        token: token.symbol,
        amount: BigInt(log.data),
      });
    }
    return {
      height,
      hash: block.hash,
      parentHash: block.parentHash,
      timestamp: new Date(Number(block.timestamp) * 1000),
      transfers,
    };
  }

  /** The token Transfer logs of exactly this block (this hash). */
  private async tokenLogs(height: number, block: RpcBlock): Promise<RpcLog[]> {
    if (this.tokens.length === 0) return [];
    // Polygon's state-sync logs are not in its blocks' blooms: there the bloom cannot say "none".
    const trustBloom = this.chain !== 'polygon';
    if (
      trustBloom &&
      (!bloomMayContain(block.logsBloom, TRANSFER_TOPIC) ||
        !this.tokens.some((t) => bloomMayContain(block.logsBloom, t.contract)))
    ) {
      return [];
    }
    if (!this.logRange || height < this.logRange.from || height > this.logRange.to) await this.fetchLogRange(height);
    const cached = (this.logCache.get(height) ?? []).filter((l) => !l.removed);
    if (cached.length > 0 && cached.every((l) => l.blockHash === block.hash)) return cached;
    // The range held none (or another fork's): ask for this very block by its hash.
    const logs = await this.rpc<RpcLog[]>('eth_getLogs', [
      { blockHash: block.hash, address: this.tokens.map((t) => t.contract), topics: [TRANSFER_TOPIC] },
    ]);
    return logs.filter((l) => !l.removed && l.blockHash === block.hash);
  }

  /** Token logs of [from, from + batch) up to the known head, in one call; the range shrinks if the node refuses it. */
  private async fetchLogRange(from: number): Promise<void> {
    for (;;) {
      const to = Math.max(from, Math.min(from + this.logBatch - 1, this.knownHead));
      try {
        const logs = await this.rpc<RpcLog[]>('eth_getLogs', [
          {
            fromBlock: hex(from),
            toBlock: hex(to),
            address: this.tokens.map((t) => t.contract),
            topics: [TRANSFER_TOPIC],
          },
        ]);
        this.logCache = new Map();
        for (const log of logs) {
          const h = Number(log.blockNumber);
          this.logCache.set(h, [...(this.logCache.get(h) ?? []), log]);
        }
        this.logRange = { from, to };
        return;
      } catch (error) {
        if (this.logBatch === 1 || to === from) throw error;
        this.logBatch = Math.max(1, Math.floor(this.logBatch / 2)); // too many results, or a range limit
      }
    }
  }

  onNewBlock(listener: () => void): () => void {
    return this.poller.onNewBlock(listener);
  }

  async balanceOf(address: string, token: string = this.native): Promise<bigint> {
    if (token === this.native) return BigInt(await this.rpc<string>('eth_getBalance', [address, 'latest']));
    const contract = this.tokens.find((t) => t.symbol === token)?.contract;
    if (!contract) throw new Error(`${this.chain} has no token ${token}`);
    const data = BALANCE_OF_SELECTOR + AbiCoder.defaultAbiCoder().encode(['address'], [address]).slice(2);
    return BigInt(await this.rpc<string>('eth_call', [{ to: contract, data }, 'latest']));
  }

  /** The fee wallet and the treasury with their native balances (GET /admin/v1/wallets). */
  async wallets() {
    const [feeWalletBalance, treasuryBalance] = await Promise.all([
      this.balanceOf(this.feeWallet),
      this.balanceOf(this.treasury),
    ]);
    return { feeWallet: this.feeWallet, feeWalletBalance, treasury: this.treasury, treasuryBalance };
  }

  // -------------------------------------------------------------------------
  // Fees
  // -------------------------------------------------------------------------

  /** From the latest block's base fee (twice it, for headroom, plus the node's tip) or the gas price. */
  private async refreshFee(latest: RpcBlock) {
    try {
      if (latest.baseFeePerGas !== undefined) {
        const now = Date.now();
        let tip = this.fee?.maxPriorityFeePerGas;
        if (tip === undefined || now - this.tipFetchedAt > 30_000) {
          tip = BigInt(await this.rpc<string>('eth_maxPriorityFeePerGas', []));
          this.tipFetchedAt = now;
        }
        this.fee = { maxFeePerGas: BigInt(latest.baseFeePerGas) * 2n + tip, maxPriorityFeePerGas: tip, eip1559: true };
      } else {
        const price = BigInt(await this.rpc<string>('eth_gasPrice', []));
        this.fee = { maxFeePerGas: price, maxPriorityFeePerGas: price, eip1559: false };
      }
    } catch (error) {
      if (!this.fee) throw error;
      // Keep the last quote; the next head refreshes it.
    }
  }

  private get transactionsPerNativeSettlement(): bigint {
    return this.options.platformFeeBps > 0 ? 2n : 1n;
  }

  /**
   * A native settlement's fee: 21,000 gas per transaction (the payout and,
   * with a platform fee, the fee's transfer) at the current fee cap; a
   * refund's, one transaction's. Token payouts' gas is paid by the fee
   * wallet: 0.
   */
  networkFee(token: string, payout: 'settlement' | 'refund' = 'settlement'): bigint {
    if (token !== this.native) return 0n;
    if (!this.fee) throw new Error(`${this.chain}: no fee quote yet`);
    return NATIVE_GAS * this.fee.maxFeePerGas * (payout === 'refund' ? 1n : this.transactionsPerNativeSettlement);
  }

  // -------------------------------------------------------------------------
  // Settlement
  // -------------------------------------------------------------------------

  private async sign(wallet: Wallet, request: TransactionRequest, fee: FeeQuote): Promise<Transaction> {
    const fees: TransactionRequest = fee.eip1559
      ? { type: 2, maxFeePerGas: fee.maxFeePerGas, maxPriorityFeePerGas: fee.maxPriorityFeePerGas }
      : { type: 0, gasPrice: fee.maxFeePerGas };
    return Transaction.from(await wallet.signTransaction({ ...request, ...fees, chainId: this.chainId }));
  }

  private async nonceOf(address: string): Promise<number> {
    // The mined count: a new attempt reuses the nonces of any earlier one still pending, so only one can land.
    return Number(await this.rpc<string>('eth_getTransactionCount', [address, 'latest']));
  }

  private async isContract(address: string): Promise<boolean> {
    return (await this.rpc<string>('eth_getCode', [address, 'latest'])) !== '0x';
  }

  async receivingProblem(address: string): Promise<string | undefined> {
    // Native payouts carry exactly 21,000 gas (their fee is quoted exactly),
    // which no contract's receive code can count on, EIP-7702 delegated
    // accounts included: they too have code.
    if (await this.isContract(address)) {
      return `${address} is a contract on ${this.chain}: payouts carry a plain transfer's 21,000 gas, so they go to plain accounts (an externally owned address)`;
    }
    return undefined;
  }

  async prepareTransfer(transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    const earlier = this.preparedByReference.get(transfer.reference);
    if (earlier) return earlier;
    const key = this.options.keyring.deriveDepositKey(this.chain as 'ethereum', transfer.from.derivationIndex);
    if (key.address !== getAddress(transfer.from.address)) {
      throw new TransactionRejectedError(
        `derivation index ${transfer.from.derivationIndex} is not ${transfer.from.address}`,
      );
    }
    const wallet = new Wallet(hexlify(key.privateKey));
    const prepared =
      transfer.token === this.native
        ? await this.prepareNative(wallet, transfer)
        : await this.prepareToken(wallet, transfer);
    if (this.preparedByReference.size > 1000) this.preparedByReference.clear();
    this.preparedByReference.set(transfer.reference, prepared);
    return prepared;
  }

  private async prepareNative(wallet: Wallet, transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    // Without a platform fee (a refund) the payout is the only transaction, and it spends the whole network fee.
    const platform = transfer.fees?.platform ?? 0n;
    const count = platform > 0n ? this.transactionsPerNativeSettlement : 1n;
    const network = transfer.fees?.network ?? this.networkFee(this.native);
    const perGas = network / (NATIVE_GAS * count);
    if (perGas <= 0n || perGas * NATIVE_GAS * count !== network) {
      throw new TransactionRejectedError(`network fee ${network} is not ${count} transfers' gas at one price`);
    }
    for (const to of [transfer.to, this.treasury]) {
      // A contract may need more than 21,000 gas, and the fee must be exact.
      if (await this.isContract(to))
        throw new TransactionRejectedError(`${to} is a contract: native payouts go to plain accounts`);
    }
    const from = wallet.address;
    const [balance, nonce] = await Promise.all([this.balanceOf(from), this.nonceOf(from)]);
    const gas = NATIVE_GAS * perGas;
    const fee: FeeQuote = { maxFeePerGas: perGas, maxPriorityFeePerGas: perGas, eip1559: this.fee?.eip1559 ?? true };
    // The platform fee, or what is left of it when an earlier attempt already sent it.
    const feeAmount = [platform, balance - transfer.amount - 2n * gas].reduce((a, b) => (a < b ? a : b));
    const steps: Transaction[] = [];
    if (feeAmount > 0n) {
      steps.push(await this.sign(wallet, { to: this.treasury, value: feeAmount, nonce, gasLimit: NATIVE_GAS }, fee));
    }
    const left = balance - (feeAmount > 0n ? feeAmount + gas : 0n);
    if (left < transfer.amount + gas) {
      throw new TransactionRejectedError(
        `${from} holds ${balance} wei, less than the payout of ${transfer.amount} and its gas`,
      );
    }
    steps.push(
      await this.sign(
        wallet,
        { to: transfer.to, value: transfer.amount, nonce: nonce + steps.length, gasLimit: NATIVE_GAS },
        fee,
      ),
    );
    return this.bundle(steps);
  }

  private async prepareToken(wallet: Wallet, transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    const token = this.tokens.find((t) => t.symbol === transfer.token);
    if (!token) throw new TransactionRejectedError(`${this.chain} has no token ${transfer.token}`);
    const platform = transfer.fees?.platform ?? 0n;
    // A sweep this small costs the fee wallet more gas than it is worth; a refund is paid whatever its size.
    const dust = this.options.dustThresholds?.[token.symbol] ?? 10n ** BigInt(token.decimals);
    if (transfer.payout !== 'refund' && transfer.amount + platform < dust) {
      throw new TransactionRejectedError(
        `${transfer.amount + platform} ${token.symbol} base units is below the dust threshold of ${dust}`,
      );
    }
    const from = wallet.address;
    const [balance, nonce] = await Promise.all([this.balanceOf(from, token.symbol), this.nonceOf(from)]);
    if (balance < transfer.amount) {
      throw new TransactionRejectedError(
        `${from} holds ${balance} ${token.symbol} base units, less than the payout of ${transfer.amount}`,
      );
    }
    const feeAmount = platform < balance - transfer.amount ? platform : balance - transfer.amount;
    const fee = this.fee;
    if (!fee) throw new Error(`${this.chain}: no fee quote yet`);
    const calls: { to: string; amount: bigint }[] = [
      ...(feeAmount > 0n ? [{ to: this.treasury, amount: feeAmount }] : []),
      { to: transfer.to, amount: transfer.amount },
    ];
    const steps: Transaction[] = [];
    let budget = 0n;
    for (const [i, call] of calls.entries()) {
      const data =
        TRANSFER_SELECTOR + AbiCoder.defaultAbiCoder().encode(['address', 'uint256'], [call.to, call.amount]).slice(2);
      // Estimated from the deposit address (no gas needed for that), with a margin; unused gas stays there as dust.
      const estimate = BigInt(await this.rpc<string>('eth_estimateGas', [{ from, to: token.contract, data }]));
      const gasLimit = (estimate * 13n) / 10n;
      budget += gasLimit * fee.maxFeePerGas;
      steps.push(await this.sign(wallet, { to: token.contract, data, value: 0n, nonce: nonce + i, gasLimit }, fee));
    }
    return this.bundle(steps, {
      budget: budget.toString(),
      maxFeePerGas: fee.maxFeePerGas.toString(),
      maxPriorityFeePerGas: fee.maxPriorityFeePerGas.toString(),
      eip1559: fee.eip1559,
    });
  }

  private bundle(steps: Transaction[], topUp?: Bundle['topUp']): PreparedTransaction {
    const raw: Bundle = { v: 1, steps: steps.map((t) => t.serialized), ...(topUp && { topUp }) };
    return { txHash: steps[steps.length - 1]!.hash!, raw: JSON.stringify(raw) };
  }

  private async receipt(txHash: string): Promise<RpcReceipt | null> {
    return this.rpc<RpcReceipt | null>('eth_getTransactionReceipt', [txHash]);
  }

  async broadcast(transaction: PreparedTransaction): Promise<void> {
    const bundle = JSON.parse(transaction.raw) as Bundle;
    const steps = bundle.steps.map((s) => Transaction.from(s));
    const payout = steps[steps.length - 1]!;
    const landed = await this.receipt(payout.hash!);
    if (landed) {
      if (landed.status !== '0x1') throw new TransactionRejectedError(`payout ${payout.hash} reverted`);
      return;
    }
    if (bundle.topUp) await this.topUp(steps, bundle.topUp);
    for (const step of steps) await this.send(step);
  }

  /** Sends one signed transaction; one the node already has (pending or mined) is fine. */
  private async send(tx: Transaction): Promise<void> {
    try {
      await withDeadline(
        this.provider.send('eth_sendRawTransaction', [tx.serialized]),
        RPC_TIMEOUT_MS,
        'eth_sendRawTransaction',
      );
      return;
    } catch (error) {
      const text = errorText(error);
      if (/already known|known transaction|already imported|already exists/.test(text)) return;
      const receipt = await this.receipt(tx.hash!).catch(() => null);
      if (receipt) {
        if (receipt.status !== '0x1') throw new TransactionRejectedError(`${tx.hash} reverted`);
        return;
      }
      // Another transaction with the same nonce is pending (perhaps an earlier attempt's): the outcome is open.
      if (/replacement|replace/.test(text)) throw this.node.redacted(error);
      if (
        /nonce too low|nonce has already been used|insufficient funds|intrinsic gas|exceeds block gas limit|gas limit reached|invalid sender|underpriced|too low for the next block|less than block base fee|fee cap less than/.test(
          text,
        )
      ) {
        throw new TransactionRejectedError(this.node.redacted(text.split(' | ')[0]!).message.slice(0, 300));
      }
      throw this.node.redacted(error);
    }
  }

  /**
   * Gives the deposit address the gas of the transactions not mined yet, from
   * the fee wallet, and waits for it to be mined (the node refuses a
   * transaction whose sender cannot pay for it). One top-up at a time; its
   * nonce is the fee wallet's mined count, so a top-up resent after a crash is
   * the same transaction and the node takes it as a repeat.
   */
  private topUp(steps: Transaction[], topUp: NonNullable<Bundle['topUp']>): Promise<void> {
    const run = this.topUps.then(async () => {
      const from = steps[0]!.from!;
      const mined = await this.nonceOf(from);
      const waiting = steps.filter((s) => s.nonce >= mined);
      if (waiting.length === 0) return;
      const maxFee = BigInt(topUp.maxFeePerGas);
      const need = waiting.reduce((total, s) => total + s.gasLimit * maxFee + s.value, 0n);
      const balance = await this.balanceOf(from);
      if (balance >= need) return;
      const feeKey = this.options.keyring.deriveEvmServiceKey('fee');
      const fee: FeeQuote = {
        maxFeePerGas: maxFee,
        maxPriorityFeePerGas: BigInt(topUp.maxPriorityFeePerGas),
        eip1559: topUp.eip1559,
      };
      const tx = await this.sign(
        new Wallet(hexlify(feeKey.privateKey)),
        { to: from, value: need - balance, nonce: await this.nonceOf(feeKey.address), gasLimit: NATIVE_GAS },
        fee,
      );
      try {
        await this.send(tx);
      } catch (error) {
        if (/insufficient funds/.test(errorText(error))) {
          throw new TransactionRejectedError(`the fee wallet ${feeKey.address} cannot pay the gas top-up: fund it`);
        }
        throw error;
      }
      const deadline = Date.now() + (this.options.topUpTimeoutMs ?? 120_000);
      for (;;) {
        const receipt = await this.receipt(tx.hash!);
        if (receipt?.status === '0x1') return;
        if (receipt) throw new Error(`gas top-up ${tx.hash} reverted`);
        if (Date.now() > deadline) throw new Error(`gas top-up ${tx.hash} is not mined yet`);
        await sleep(250);
      }
    });
    this.topUps = run.catch(() => undefined);
    return run;
  }

  async transactionStatus(txHash: string): Promise<TransactionStatus | undefined> {
    const receipt = await this.receipt(txHash);
    // A reverted payout paid nothing: it is not the payout (broadcast then reports it refused).
    if (!receipt || receipt.status !== '0x1') return undefined;
    const head = Number(await this.rpc<string>('eth_blockNumber', []));
    const blockNumber = Number(receipt.blockNumber);
    return { blockNumber, confirmations: head - blockNumber + 1 };
  }
}

/** The EVM chains among `chains` that have an RPC URL, opened (and their chain ids checked) one by one. */
export async function openEvmChains(
  settings: {
    chains: readonly ChainName[];
    chainRpcUrls: Partial<Record<ChainName, string>>;
    evm: Partial<
      Record<ChainName, { chainId: bigint | undefined; tokens: EvmToken[] | undefined; treasury: string | undefined }>
    >;
    platformFeeBps: number;
  },
  keyring: EvmChainOptions['keyring'],
): Promise<Map<ChainName, EvmChain>> {
  const opened = new Map<ChainName, EvmChain>();
  try {
    for (const chain of settings.chains) {
      const rpcUrl = settings.chainRpcUrls[chain];
      const evm = settings.evm[chain];
      if (!rpcUrl || !evm || mainnetChainIds[chain] === undefined) continue;
      opened.set(
        chain,
        await EvmChain.open({
          chain,
          rpcUrl,
          keyring,
          platformFeeBps: settings.platformFeeBps,
          ...(evm.chainId !== undefined && { chainId: evm.chainId }),
          ...(evm.tokens && { tokens: evm.tokens }),
          ...(evm.treasury && { treasury: evm.treasury }),
        }),
      );
    }
  } catch (error) {
    for (const adapter of opened.values()) adapter.close();
    throw error;
  }
  return opened;
}
