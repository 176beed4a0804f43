// Reading an EVM chain (ethereum, bsc, polygon) from a node's JSON-RPC: its
// head, its blocks and their transfers to us, and where a transaction stands.
//
// Detection: native transfers are the value-carrying transactions of a block
// (index 0); USDT/USDC transfers are the Transfer logs of the token contracts
// (index = log index), fetched with eth_getLogs over a range of blocks ahead
// of the watcher and checked against each block's hash and logs bloom, so a
// block is never read half from one fork and half from another, and never
// skipped: a failed call is retried with backoff and then fails the whole
// block, which the watcher reads again (it only records a block once its
// transfers are handed over).
import { getAddress, getBytes, keccak256 } from 'ethers';
import type { ChainName } from '../../../domain/catalogue.ts';
import { HeadPoller } from '../head-poller.ts';
import { staleTip, type ChainBlock, type ChainHead, type ChainTransfer, type TransactionStatus } from '../port.ts';
import type { EvmNode } from './node.ts';

export const TRANSFER_TOPIC = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef';

export interface EvmToken {
  symbol: string;
  contract: string;
  decimals: number;
}

export interface RpcBlock {
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

const hex = (n: number | bigint) => '0x' + n.toString(16);

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

export interface EvmReaderOptions {
  chain: ChainName;
  native: string;
  tokens: EvmToken[];
  /** Its gas top-ups to deposit addresses are not payments. */
  feeWallet: string;
  /** How often the head is polled for onNewBlock listeners. */
  pollMs?: number | undefined;
  /** Blocks per eth_getLogs range (halved when the node refuses a range). */
  logBatchBlocks?: number | undefined;
  /** Each latest block read for the head, before `head` answers (the payer's fee quote). */
  onHead(latest: RpcBlock): Promise<void>;
}

export class EvmReader {
  private readonly tokenByContract: Map<string, EvmToken>;
  private readonly poller: HeadPoller;
  private knownHead = 0;
  /** Token logs fetched ahead, by height, and the heights that range covered. */
  private logCache = new Map<number, RpcLog[]>();
  private logRange?: { from: number; to: number };
  private logBatch: number;
  /** Blocks parsed lately, by hash (a block's content never changes under its hash). */
  private readonly recentBlocks = new Map<string, ChainBlock>();

  constructor(
    private readonly node: EvmNode,
    private readonly options: EvmReaderOptions,
  ) {
    this.tokenByContract = new Map(this.options.tokens.map((t) => [t.contract.toLowerCase(), t]));
    this.logBatch = options.logBatchBlocks ?? 100;
    this.poller = new HeadPoller(async () => Number(await this.node.once('eth_blockNumber', [])), options.pollMs);
  }

  close(): void {
    this.poller.close();
  }

  async head(): Promise<ChainHead> {
    const latest = await this.node.rpc<RpcBlock | null>('eth_getBlockByNumber', ['latest', false]);
    if (!latest) throw new Error(`${this.options.chain}: the node has no latest block`);
    const height = Number(latest.number);
    this.knownHead = Math.max(this.knownHead, height);
    await this.options.onHead(latest);
    // A syncing node's latest block is an old one (eth_syncing is not asked: one call less per step).
    const stale = staleTip(new Date(Number(latest.timestamp) * 1000));
    return { height, hash: latest.hash, ...(stale && { stale }) };
  }

  async block(height: number): Promise<ChainBlock | undefined> {
    // The watcher reads its last block again at every step (to find reorgs):
    // a block already parsed is known by its hash from the header alone.
    const header = await this.node.rpc<RpcBlock | null>('eth_getBlockByNumber', [hex(height), false]);
    if (!header) return undefined;
    const known = this.recentBlocks.get(header.hash);
    if (known) return known;
    const block = await this.node.rpc<RpcBlock | null>('eth_getBlockByNumber', [hex(height), true]);
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
      if (tx.from.toLowerCase() === this.options.feeWallet.toLowerCase()) continue;
      const amount = BigInt(tx.value);
      if (amount > 0n)
        transfers.push({ txHash: tx.hash, index: 0, to: getAddress(tx.to), token: this.options.native, amount });
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
    if (this.options.tokens.length === 0) return [];
    // Polygon's state-sync logs are not in its blocks' blooms: there the bloom cannot say "none".
    const trustBloom = this.options.chain !== 'polygon';
    if (
      trustBloom &&
      (!bloomMayContain(block.logsBloom, TRANSFER_TOPIC) ||
        !this.options.tokens.some((t) => bloomMayContain(block.logsBloom, t.contract)))
    ) {
      return [];
    }
    if (!this.logRange || height < this.logRange.from || height > this.logRange.to) await this.fetchLogRange(height);
    const cached = (this.logCache.get(height) ?? []).filter((l) => !l.removed);
    if (cached.length > 0 && cached.every((l) => l.blockHash === block.hash)) return cached;
    // The range held none (or another fork's): ask for this very block by its hash.
    const logs = await this.node.rpc<RpcLog[]>('eth_getLogs', [
      { blockHash: block.hash, address: this.options.tokens.map((t) => t.contract), topics: [TRANSFER_TOPIC] },
    ]);
    return logs.filter((l) => !l.removed && l.blockHash === block.hash);
  }

  /** Token logs of [from, from + batch) up to the known head, in one call; the range shrinks if the node refuses it. */
  private async fetchLogRange(from: number): Promise<void> {
    for (;;) {
      const to = Math.max(from, Math.min(from + this.logBatch - 1, this.knownHead));
      try {
        const logs = await this.node.rpc<RpcLog[]>('eth_getLogs', [
          {
            fromBlock: hex(from),
            toBlock: hex(to),
            address: this.options.tokens.map((t) => t.contract),
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

  async transactionStatus(txHash: string): Promise<TransactionStatus | undefined> {
    const receipt = await this.node.receipt(txHash);
    // A reverted payout paid nothing: it is not the payout (broadcast then reports it refused).
    if (!receipt || receipt.status !== '0x1') return undefined;
    const head = Number(await this.node.rpc<string>('eth_blockNumber', []));
    const blockNumber = Number(receipt.blockNumber);
    return { blockNumber, confirmations: head - blockNumber + 1 };
  }
}
