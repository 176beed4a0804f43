// Reading Bitcoin: the head, blocks, and the mempool.
//
// Detection: every output of a block's transactions that pays an address is
// a transfer (index = the output's n), so several outputs to one deposit
// address are several payments. Blocks come from `getblock` with verbosity 2,
// the mempool's through mempool.ts (Core's ZMQ `sequence` topic when
// configured, else `getrawmempool` every few seconds; new transactions read
// with `getrawtransaction`, a bounded batch per step), so a payment is seen
// at 0 confirmations seconds after its broadcast. On a pruned node a block
// below the prune height is a BlockPrunedError naming its hash, which the
// watcher passes and puts on the attention list.
import { HeadPoller } from '../head-poller.ts';
import { BlockPrunedError, type ChainBlock, type ChainHead, type ChainTransfer } from '../port.ts';
import { BitcoinMempool, type MempoolNode } from './mempool.ts';
import { BitcoinRpcError, satoshis, type BitcoinNode } from './node.ts';

export const COINBASE_MATURITY = 100;
/** Without a healthy ZMQ feed, the mempool's whole txid list is downloaded at most this often. */
const MEMPOOL_POLL_MS = 5_000;
/** New mempool transactions read (getrawtransaction) in one watcher step. */
const MEMPOOL_READ_PER_STEP = 100;

interface RpcTx {
  txid: string;
  vin: { coinbase?: string; txid?: string; vout?: number }[];
  vout: { value: string; n: number; scriptPubKey: { address?: string; hex: string } }[];
}
interface RpcBlock {
  hash: string;
  height: number;
  time: number;
  previousblockhash?: string;
  tx: RpcTx[];
}

/** The transfers of a block: one per output that pays an address. */
export function parseBitcoinBlock(block: Pick<RpcBlock, 'tx'>): ChainTransfer[] {
  const transfers: ChainTransfer[] = [];
  for (const tx of block.tx) {
    // consensus/tx_verify.cpp CheckTxInputs: a coinbase output is spendable in the 100th block after its own.
    const coinbase = tx.vin?.[0]?.coinbase !== undefined;
    const spends = coinbase
      ? []
      : (tx.vin ?? []).flatMap((i) => (i.txid === undefined ? [] : [{ txHash: i.txid, index: i.vout! }]));
    for (const out of tx.vout) {
      const amount = satoshis(String(out.value));
      if (out.scriptPubKey.address && amount > 0n) {
        transfers.push({
          txHash: tx.txid,
          index: out.n,
          to: out.scriptPubKey.address,
          token: 'BTC',
          amount,
          ...(coinbase && { spendableAfter: COINBASE_MATURITY }),
          ...(spends.length > 0 && { spends }),
        });
      }
    }
  }
  return transfers;
}

export interface BitcoinReaderOptions {
  pollMs?: number | undefined;
  /** Core's `zmqpubsequence` endpoint: the mempool followed by its changes instead of downloaded whole. */
  zmqUrl?: string | undefined;
  /** Least time between two whole mempool downloads without ZMQ (default 5 s). */
  mempoolPollMs?: number | undefined;
  log: (line: string) => void;
  /** Each head read, before `head` answers (the payer's fee rate). */
  onHead(): Promise<void>;
}

export class BitcoinReader {
  private readonly poller: HeadPoller;
  private readonly recentBlocks = new Map<string, ChainBlock>();
  private readonly mempoolFeed: BitcoinMempool;

  constructor(
    private readonly node: BitcoinNode,
    private readonly options: BitcoinReaderOptions,
  ) {
    this.poller = new HeadPoller(() => node.rpc<number>('getblockcount', []), options.pollMs);
    this.mempoolFeed = new BitcoinMempool(this.mempoolNode(), {
      ...(options.zmqUrl && { zmqUrl: options.zmqUrl }),
      pollMs: options.mempoolPollMs ?? MEMPOOL_POLL_MS,
      readPerStep: MEMPOOL_READ_PER_STEP,
      log: options.log,
    });
  }

  close(): void {
    this.poller.close();
    this.mempoolFeed.close();
  }

  async head(): Promise<ChainHead> {
    // The tip and whether it is the chain's present, in one call (Bitcoin
    // Core's getblockchaininfo, src/rpc/blockchain.cpp): a node in its
    // initial block download, or with headers whose blocks it lacks, is behind.
    const info = await this.node.rpc<{
      blocks: number;
      headers: number;
      bestblockhash: string;
      initialblockdownload: boolean;
    }>('getblockchaininfo', []);
    await this.options.onHead();
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
      hash = await this.node.rpc<string>('getblockhash', [height]);
    } catch (error) {
      if (error instanceof BitcoinRpcError && error.code === -8) return undefined; // above the tip
      throw error;
    }
    const known = this.recentBlocks.get(hash);
    if (known) return known;
    let block: RpcBlock;
    try {
      block = await this.node.rpc<RpcBlock>('getblock', [hash, 2]);
    } catch (error) {
      // rpc/blockchain.cpp GetBlockChecked: -1 "Block not available (pruned data)".
      if (error instanceof BitcoinRpcError && /pruned/.test(error.message)) {
        const info = await this.node.rpc<{ pruneheight?: number }>('getblockchaininfo', []);
        this.node.pruneHeight = info.pruneheight ?? this.node.pruneHeight;
        throw new BlockPrunedError('bitcoin', height, hash, this.node.pruneHeight);
      }
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

  /** The outputs of the mempool's transactions (followed by ZMQ when configured, else downloaded every few seconds). */
  mempool(): Promise<ChainTransfer[]> {
    return this.mempoolFeed.transfers();
  }

  /** What the mempool follower asks of the node. */
  private mempoolNode(): MempoolNode {
    return {
      snapshot: () => this.node.rpc('getrawmempool', [false, true]),
      transfers: async (txids) => {
        const answers = await this.node.post<RpcTx>(
          txids.map((id) => ({ method: 'getrawtransaction', params: [id, true] })),
        );
        // An error: gone since it was listed (mined, replaced).
        return new Map(
          answers.flatMap((a) =>
            a.result && !a.error ? [[a.result.txid, parseBitcoinBlock({ tx: [a.result] })]] : [],
          ),
        );
      },
      blockTxids: async (hash) => (await this.node.rpc<{ tx: string[] }>('getblock', [hash, 1])).tx,
    };
  }
}
