// A real EVM chain (ethereum, bsc, polygon) behind the chain port, through a
// node's JSON-RPC (node.ts): the reader (reader.ts: heads, blocks, transfers,
// where a transaction stands) and the payer (payer.ts: fees, preparing and
// broadcasting payouts, balances) on one node, opened once its chain id is
// checked.
import { getAddress, Network } from 'ethers';
import { findChain, mainnetChainIds, type ChainName } from '../../../domain/catalogue.ts';
import { NodeAdapter, nodeUrlOf, type NodeSettings } from '../node-adapter.ts';
import { checkedOpen, type RetryPolicy } from '../node.ts';
import type { ChainAdapter } from '../port.ts';
import { EvmNode } from './node.ts';
import { EvmPayer, type EvmPayerOptions } from './payer.ts';
import { EvmReader, type EvmReaderOptions, type EvmToken } from './reader.ts';

export { TRANSFER_TOPIC, type EvmToken } from './reader.ts';

export interface EvmChainOptions
  extends
    Pick<EvmPayerOptions, 'keyring' | 'platformFeeBps' | 'dustThresholds' | 'topUpTimeoutMs'>,
    Pick<EvmReaderOptions, 'pollMs' | 'logBatchBlocks'> {
  chain: ChainName;
  rpcUrl: string;
  /** A test network's chain id, accepted instead of the mainnet one (CHAIN_<NAME>_CHAIN_ID). */
  chainId?: bigint;
  /** Token contracts; default: the catalogue's mainnet ones. */
  tokens?: EvmToken[];
  /** Where platform fees go; default: the derived treasury. */
  treasury?: string;
  /** RPC retries: attempts and the first delay, doubled each time up to 10 s. */
  retry?: RetryPolicy;
}

export class EvmChain extends NodeAdapter implements ChainAdapter {
  readonly chain: ChainName;
  readonly chainId: bigint;
  readonly treasury: string;
  readonly feeWallet: string;
  protected readonly reader: EvmReader;
  protected readonly payer: EvmPayer;

  private constructor(
    protected readonly node: EvmNode,
    options: EvmChainOptions,
    chainId: bigint,
  ) {
    super();
    this.chain = options.chain;
    this.chainId = chainId;
    const native = findChain(options.chain)!.nativeCurrency;
    const tokens =
      options.tokens ??
      findChain(options.chain)!
        .supportedTokens.filter((t) => t.contractAddress !== null)
        .map((t) => ({ symbol: t.symbol, contract: getAddress(t.contractAddress!), decimals: t.decimals }));
    this.feeWallet = options.keyring.deriveEvmServiceKey('fee').address;
    this.treasury = options.treasury ?? options.keyring.deriveEvmServiceKey('treasury').address;
    const { chain, feeWallet, treasury } = this;
    this.payer = new EvmPayer(node, { ...options, chainId, native, tokens, feeWallet, treasury });
    this.reader = new EvmReader(node, {
      chain,
      native,
      tokens,
      feeWallet,
      pollMs: options.pollMs,
      logBatchBlocks: options.logBatchBlocks,
      onHead: (latest) => this.payer.refreshFee(latest),
    });
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
    const node = new EvmNode(options.rpcUrl, Network.from(expected), options.retry);
    const adapter = new EvmChain(node, options, expected);
    return checkedOpen(adapter, async () => {
      let actual: bigint;
      try {
        actual = BigInt(await node.rpc<string>('eth_chainId', []));
        await adapter.head(); // also the first fee quote
      } catch (error) {
        throw node.unanswered(`${variable}_RPC_URL`, error);
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

  transactionStatus(txHash: string) {
    return this.reader.transactionStatus(txHash);
  }
  receivingProblem(address: string) {
    return this.payer.receivingProblem(address);
  }
}

/** The EVM chains among `chains` that have an RPC URL, opened (and their chain ids checked) one by one. */
export async function openEvmChains(
  settings: NodeSettings & {
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
      const rpcUrl = nodeUrlOf(settings, chain);
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
