// Bitcoin behind the chain port, through Bitcoin Core's JSON-RPC (node.ts; no
// txindex needed; docs/bitcoin.md says what a mainnet operator runs): the
// reader (reader.ts: the head, blocks, the mempool through mempool.ts) and the
// payer (payer.ts: fees, preparing and broadcasting settlements and refunds,
// where a payout stands, refund wallets' balances) on one node, the refund
// wallets' coins found by a watch-only wallet of its own in Core (wallet.ts),
// opened once its chain is checked and that wallet loaded.
import type { ChainName } from '../../../domain/catalogue.ts';
import type { BitcoinCoreChain, DepositKeyring } from '../../keys/derivation.ts';
import { NodeAdapter, nodeUrlOf, type NodeSettings } from '../node-adapter.ts';
import { checkedOpen, type RetryPolicy } from '../node.ts';
import type { ChainAdapter } from '../port.ts';
import { BitcoinNode, BitcoinRpcError } from './node.ts';
import { BitcoinPayer } from './payer.ts';
import { BitcoinReader } from './reader.ts';
import { WATCH_WALLET, WatchWallet } from './wallet.ts';

export { parseCoreJson, satoshis } from './node.ts';
export { refundCoins } from './payer.ts';
export { parseBitcoinBlock } from './reader.ts';
export { WATCH_WALLET } from './wallet.ts';

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
  /** Blocks looked through for a payout this process neither prepared nor sent since it started (default a week, 1008). */
  payoutLookbackBlocks?: number;
  /** Core's `zmqpubsequence` endpoint: the mempool followed by its changes instead of downloaded whole. */
  zmqUrl?: string;
  /** Least time between two whole mempool downloads without ZMQ (default 5 s). */
  mempoolPollMs?: number;
  /** Where start-up notes go (a pruned node: how far back it serves). */
  log?: (line: string) => void;
}

export class BitcoinChain extends NodeAdapter implements ChainAdapter {
  readonly chain: ChainName = 'bitcoin';
  readonly spendsCoinsWhole = true;
  readonly treasury: string;
  protected readonly reader: BitcoinReader;
  protected readonly payer: BitcoinPayer;
  private readonly wallet: WatchWallet;

  private constructor(
    protected readonly node: BitcoinNode,
    options: BitcoinChainOptions,
  ) {
    super();
    const log = options.log ?? console.log;
    this.treasury = options.treasury ?? options.keyring.deriveBitcoinTreasury();
    this.wallet = new WatchWallet(node, log);
    this.payer = new BitcoinPayer(node, this.wallet, {
      network: options.network,
      keyring: options.keyring,
      treasury: this.treasury,
      feeRate: options.feeRate,
      payoutLookbackBlocks: options.payoutLookbackBlocks,
    });
    this.reader = new BitcoinReader(node, {
      pollMs: options.pollMs,
      zmqUrl: options.zmqUrl,
      mempoolPollMs: options.mempoolPollMs,
      log,
      onHead: () => this.payer.refreshFeeRate(),
    });
  }

  /** Connects and checks the node's chain against CHAIN_BITCOIN_NETWORK; a mismatch stops start-up with one line. */
  static async open(options: BitcoinChainOptions): Promise<BitcoinChain> {
    const node = new BitcoinNode(options.rpcUrl, options.cookieFile, options.retry);
    const adapter = new BitcoinChain(node, options);
    return checkedOpen(adapter, async () => {
      let chain: string;
      try {
        if (options.cookieFile) await node.readCookie();
        const info = await node.rpc<{ chain: string; pruned: boolean; pruneheight?: number }>('getblockchaininfo', []);
        chain = info.chain;
        if (info.pruned) {
          node.pruneHeight = info.pruneheight ?? 0;
          (options.log ?? console.log)(
            `bitcoin: the node is pruned and serves blocks from height ${node.pruneHeight} on; a block below it the watcher has yet to read goes on the attention list, and a payout mined below it cannot be found`,
          );
        }
        await adapter.head(); // also the first fee rate
      } catch (error) {
        throw node.unanswered('CHAIN_BITCOIN_RPC_URL', error);
      }
      if (chain !== options.network) {
        throw new Error(
          `CHAIN_BITCOIN_RPC_URL is a node of the ${chain} chain, not ${options.network}; set CHAIN_BITCOIN_NETWORK=${chain} if that network is meant`,
        );
      }
      try {
        await adapter.wallet.open(); // at start-up, rather than at a merchant's first refund
      } catch (error) {
        // -32601: a node run with disablewallet=1 (or built without a wallet) has no wallet RPCs.
        if (error instanceof BitcoinRpcError && error.code === -32601) {
          throw new Error(
            `CHAIN_BITCOIN_RPC_URL: the node has no wallet (disablewallet=1?); refund wallets are followed by a watch-only wallet in it (docs/bitcoin.md)`,
          );
        }
        const reason = node.redacted(error).message.split('\n')[0]!;
        throw new Error(
          `CHAIN_BITCOIN_RPC_URL: the node's wallet ${WATCH_WALLET} did not open (${reason.slice(0, 200)})`,
        );
      }
    });
  }

  /** The outputs of the mempool's transactions (followed by ZMQ when configured, else downloaded every few seconds). */
  mempool() {
    return this.reader.mempool();
  }
  transactionStatus(txHash: string) {
    return this.payer.transactionStatus(txHash);
  }
}

/** Bitcoin's adapter when it is enabled and has an RPC URL, opened (and its network checked). */
export async function openBitcoinChain(
  settings: NodeSettings & {
    bitcoin: {
      network: BitcoinCoreChain;
      cookieFile: string | undefined;
      zmqUrl: string | undefined;
      treasury: string | undefined;
      feeRate: { floor: bigint; cap: bigint };
    };
  },
  keyring: BitcoinChainOptions['keyring'],
): Promise<BitcoinChain | undefined> {
  const rpcUrl = nodeUrlOf(settings, 'bitcoin');
  if (!rpcUrl) return undefined;
  const { network, cookieFile, zmqUrl, treasury, feeRate } = settings.bitcoin;
  return BitcoinChain.open({
    rpcUrl,
    network,
    keyring,
    feeRate,
    ...(cookieFile && { cookieFile }),
    ...(zmqUrl && { zmqUrl }),
    ...(treasury && { treasury }),
  });
}
