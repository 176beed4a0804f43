// Solana (SOL, and USDT and USDC as SPL tokens) behind the chain port,
// through a Solana JSON-RPC endpoint (node.ts): the reader (reader.ts: the
// head, blocks, where a transaction stands) and the payer (payer.ts: fees,
// preparing and broadcasting sweeps and refunds, balances) on one node,
// opened once its cluster, tokens and treasury are checked. Why blocks, not
// getSignaturesForAddress per open address: see docs/solana.md.
import { NATIVE_MINT, TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID } from '@solana/spl-token';
import { findChain, type ChainName } from '../../../domain/catalogue.ts';
import { NodeAdapter, nodeUrlOf, type NodeSettings } from '../node-adapter.ts';
import { checkedOpen, type RetryPolicy } from '../node.ts';
import type { ChainAdapter, PreparedTransaction } from '../port.ts';
import { SolanaNode } from './node.ts';
import { SolanaPayer, type SolanaPayerOptions } from './payer.ts';
import { SolanaReader, type SolanaToken } from './reader.ts';

export { MAX_SIGNATURE_STATUSES, parseRpcJson } from './node.ts';
export { LAMPORTS_PER_SIGNATURE } from './payer.ts';
export {
  parseSolanaBlock,
  TOKEN_INDEX_OFFSET,
  type RpcBlock,
  type RpcTokenBalance,
  type RpcTransaction,
  type SolanaToken,
} from './reader.ts';

/** Genesis hashes of the public clusters (getGenesisHash). */
export const solanaClusters: Record<string, string> = {
  'mainnet-beta': '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d',
  devnet: 'EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG',
  testnet: '4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY',
};

export interface SolanaChainOptions {
  rpcUrl: string;
  keyring: SolanaPayerOptions['keyring'];
  /** mainnet-beta (default), devnet, testnet, or a genesis hash. */
  cluster?: string;
  /** The catalogue's mints unless a test cluster names its own. */
  tokens?: SolanaToken[];
  treasury?: string;
  confirmations?: number;
  pollMs?: number;
  retry?: RetryPolicy;
}

// ---------------------------------------------------------------------------

export class SolanaChain extends NodeAdapter implements ChainAdapter {
  readonly chain: ChainName = 'solana';
  readonly treasury: string;
  readonly feeWallet: string;
  private readonly tokens: SolanaToken[];
  protected readonly reader: SolanaReader;
  protected readonly payer: SolanaPayer;

  private constructor(
    protected readonly node: SolanaNode,
    options: SolanaChainOptions,
  ) {
    super();
    this.tokens =
      options.tokens ??
      findChain('solana')!
        .supportedTokens.filter((t) => t.contractAddress !== null)
        .map((t) => ({ symbol: t.symbol, mint: t.contractAddress!, decimals: t.decimals }));
    const treasury = options.treasury ?? options.keyring.deriveSolanaServiceKey('treasury').address;
    this.payer = new SolanaPayer(node, { keyring: options.keyring, tokens: this.tokens, treasury });
    this.reader = new SolanaReader(node, {
      tokens: this.tokens,
      confirmations: options.confirmations,
      pollMs: options.pollMs,
      onHead: () => this.payer.refreshIfStale(),
    });
    this.feeWallet = this.payer.feeWallet;
    this.treasury = this.payer.treasury;
  }

  /**
   * Connects and checks the cluster's genesis hash and the configured
   * treasury; a mismatch, a treasury that cannot receive, or an RPC that does
   * not answer stops start-up with one line naming the variable.
   */
  static async open(options: SolanaChainOptions): Promise<SolanaChain> {
    const adapter = new SolanaChain(new SolanaNode(options.rpcUrl, options.retry), options);
    return checkedOpen(adapter, async () => {
      await adapter.checkCluster(options.cluster ?? 'mainnet-beta');
      // The treasury takes token fees in an associated account derived for it: a token account or a mint would lose them.
      const treasuryProblem = options.treasury && (await adapter.receivingProblem(options.treasury));
      if (treasuryProblem) throw new Error(`CHAIN_SOLANA_TREASURY: ${treasuryProblem}`);
      await adapter.checkTokens();
      await adapter.refreshPriorityPrice();
    });
  }

  /**
   * Only classic SPL Token mints are taken: a Token-2022 mint's accounts live
   * at other addresses and may carry extensions (transfer fees, hooks) that
   * change what a transfer delivers, and wrapped SOL is SOL held in a token
   * account; neither is detected nor swept here, so either stops start-up.
   */
  private async checkTokens(): Promise<void> {
    for (const { symbol, mint } of this.tokens) {
      const refused = (why: string) => new Error(`CHAIN_SOLANA_TOKENS: ${symbol}'s mint ${mint} ${why}`);
      if (mint === NATIVE_MINT.toBase58())
        throw refused('is wrapped SOL, which is not taken: SOL payments are taken as SOL');
      const { value } = await this.node.rpc<{ value: { owner: string } | null }>('getAccountInfo', [
        mint,
        { commitment: 'finalized', encoding: 'base64', dataSlice: { offset: 0, length: 0 } },
      ]);
      if (!value) throw refused('does not exist on this cluster');
      if (value.owner === TOKEN_2022_PROGRAM_ID.toBase58())
        throw refused('is a Token-2022 mint; only SPL Token mints are supported');
      if (value.owner !== TOKEN_PROGRAM_ID.toBase58()) throw refused(`is not a token mint (owner ${value.owner})`);
    }
  }

  private async checkCluster(cluster: string): Promise<void> {
    const expected = solanaClusters[cluster] ?? cluster;
    let genesis: string;
    try {
      genesis = await this.node.rpc<string>('getGenesisHash', []);
    } catch (error) {
      throw this.node.unanswered('CHAIN_SOLANA_RPC_URL', error, 'the RPC');
    }
    if (genesis !== expected) {
      const known = Object.entries(solanaClusters).find(([, hash]) => hash === genesis)?.[0];
      throw new Error(
        `CHAIN_SOLANA_RPC_URL is an RPC of ${known ? `Solana ${known}` : `the cluster whose genesis hash is ${genesis}`}, not ${
          solanaClusters[cluster] ? `Solana ${cluster}` : `the cluster of genesis hash ${expected}`
        }; set CHAIN_SOLANA_CLUSTER=${known ?? genesis} if that cluster is meant`,
      );
    }
  }

  transactionStatus(txHash: string) {
    return this.reader.transactionStatus(txHash);
  }
  transactionStatuses(signatures: readonly string[]) {
    return this.reader.transactionStatuses(signatures);
  }
  refreshPriorityPrice() {
    return this.payer.refreshPriorityPrice();
  }
  receivingProblem(address: string) {
    return this.payer.receivingProblem(address);
  }
  /** Sent again once final (the payout engine does so before completing): nothing left to do or ask. */
  override async broadcast(transaction: PreparedTransaction) {
    if (this.reader.isFinal(transaction.txHash)) return;
    return this.payer.broadcast(transaction);
  }
  canPay(address: string, token: string, amount: bigint) {
    return this.payer.canPay(address, token, amount);
  }
}

/** Solana's adapter when it is enabled and has an RPC URL, opened (and its cluster checked). */
export async function openSolanaChain(
  settings: NodeSettings & {
    solana: { cluster: string; tokens: SolanaToken[] | undefined; treasury: string | undefined } | undefined;
    requiredConfirmations: Record<ChainName, number>;
  },
  keyring: SolanaChainOptions['keyring'],
): Promise<SolanaChain | undefined> {
  const rpcUrl = nodeUrlOf(settings, 'solana');
  const solana = settings.solana;
  if (!rpcUrl || !solana) return undefined;
  return SolanaChain.open({
    rpcUrl,
    keyring,
    cluster: solana.cluster,
    confirmations: settings.requiredConfirmations.solana,
    ...(solana.tokens && { tokens: solana.tokens }),
    ...(solana.treasury && { treasury: solana.treasury }),
  });
}
