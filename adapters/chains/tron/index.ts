// Tron (TRX and USDT-TRC20) behind the chain port, through the java-tron HTTP
// API (node.ts): the reader (reader.ts: the head and the solidified block,
// blocks and their payments) and the payer (payer.ts: fees, preparing and
// broadcasting payouts, where they stand, balances) on one node, opened once
// its network and treasury are checked.
import { findChain, type ChainName } from '../../../domain/catalogue.ts';
import type { RateProvider } from '../../rates/port.ts';
import { NodeAdapter, nodeUrlOf, type NodeSettings } from '../node-adapter.ts';
import { checkedOpen } from '../node.ts';
import type { ChainAdapter, OutgoingTransfer } from '../port.ts';
import { TronNode, type BlockJson, type TronNodeOptions } from './node.ts';
import { TronPayer, type TronPayerOptions } from './payer.ts';
import { TronReader, type TronReaderOptions, type TronToken } from './reader.ts';

export { type TransactionInfoJson, type TransactionJson } from './node.ts';
export { bandwidthOf, trxInToken } from './payer.ts';
export { parseTronBlock, TRC20_TRANSFER_TOPIC, type TronToken } from './reader.ts';

/** Genesis block ids (the blockID of block 0) of the public networks. */
export const tronNetworks: Record<string, string> = {
  mainnet: '00000000000000001ebf88508a03865c71d452e25f4d51194196a1d22b6653dc',
  nile: '0000000000000000d698d4192c56cb6be724a558448e2684802de4d6cd8690dc',
  shasta: '0000000000000000de1aa88295e1fcf982742f773e0419c5a9c134c994a9059e',
};

export interface TronChainOptions
  extends
    TronNodeOptions,
    Pick<TronPayerOptions, 'keyring' | 'confirmations' | 'topUpTimeoutMs' | 'rates' | 'energyDelegation'>,
    Pick<TronReaderOptions, 'pollMs' | 'headMs' | 'solidifiedMs'> {
  rpcUrl: string;
  /** `mainnet`, `nile`, `shasta`, or the 64-hex genesis block id of another network. */
  network?: string;
  /** Token contracts; default: the catalogue's mainnet ones. */
  tokens?: TronToken[];
  /** Where platform fees go; default: the derived treasury. */
  treasury?: string;
}

export class TronChain extends NodeAdapter implements ChainAdapter {
  readonly chain: ChainName = 'tron';
  readonly treasury: string;
  readonly feeWallet: string;
  protected readonly reader: TronReader;
  protected readonly payer: TronPayer;

  private constructor(
    protected readonly node: TronNode,
    options: TronChainOptions,
  ) {
    super();
    const tokens =
      options.tokens ??
      findChain('tron')!
        .supportedTokens.filter((t) => t.contractAddress !== null)
        .map((t) => ({ symbol: t.symbol, contract: t.contractAddress!, decimals: t.decimals }));
    this.feeWallet = options.keyring.deriveTronServiceKey('fee').address;
    this.treasury = options.treasury ?? options.keyring.deriveTronServiceKey('treasury').address;
    const { feeWallet, treasury } = this;
    this.reader = new TronReader(node, {
      tokens,
      feeWallet,
      pollMs: options.pollMs,
      headMs: options.headMs,
      solidifiedMs: options.solidifiedMs,
      onHead: () => this.payer.refreshFeesIfDue(),
    });
    this.payer = new TronPayer(node, this.reader, { ...options, tokens, feeWallet, treasury });
  }

  /**
   * Connects and checks the node's genesis block against the configured
   * network; a mismatch or a node that does not answer stops start-up with
   * one line naming the variable.
   */
  static async open(options: TronChainOptions): Promise<TronChain> {
    const network = options.network ?? 'mainnet';
    const expected = tronNetworks[network] ?? network.toLowerCase();
    if (!/^[0-9a-f]{64}$/.test(expected)) {
      throw new Error(
        `CHAIN_TRON_NETWORK must be mainnet, nile, shasta or a 64-hex genesis block id (got "${network.slice(0, 80)}")`,
      );
    }
    const node = new TronNode(options.rpcUrl, options);
    const adapter = new TronChain(node, options);
    return checkedOpen(adapter, async () => {
      let genesis: string | undefined;
      try {
        genesis = (await node.rpc<BlockJson>('/wallet/getblock', { id_or_num: '0', detail: false })).blockID;
        await adapter.head(); // also the first fee schedule
      } catch (error) {
        const reason = node.redacted(error).message.split('\n')[0]!;
        throw node.unanswered(
          /\/walletsolidity\//.test(reason) ? 'CHAIN_TRON_SOLIDITY_URL' : 'CHAIN_TRON_RPC_URL',
          error,
        );
      }
      if (genesis !== expected) {
        const known = Object.entries(tronNetworks).find(([, id]) => id === genesis)?.[0];
        throw new Error(
          `CHAIN_TRON_RPC_URL is a node of ${known ? `Tron ${known}` : `the network whose genesis block is ${genesis}`}, not ${
            tronNetworks[network] ? `Tron ${network}` : `the network of genesis block ${expected}`
          }; set CHAIN_TRON_NETWORK=${known ?? genesis} if that network is meant`,
        );
      }
      const treasuryProblem = options.treasury && (await adapter.receivingProblem(options.treasury));
      if (treasuryProblem) throw new Error(`CHAIN_TRON_TREASURY: ${treasuryProblem}`);
    });
  }

  /** The service's exchange rates, which price token settlements (they open after the chains). */
  useRates(rates: Pick<RateProvider, 'rate'>): void {
    this.payer.useRates(rates);
  }

  /** How far the node's head is behind the wall clock, in ms (a backend that stopped following the chain). */
  headAge(now?: number) {
    return this.reader.headAge(now);
  }
  receivingProblem(address: string) {
    return this.payer.receivingProblem(address);
  }
  quoteNetworkFee(payout: Pick<OutgoingTransfer, 'from' | 'to' | 'token'>) {
    return this.payer.quoteNetworkFee(payout);
  }
  /** A payout's place on the chain; one of this process whose platform fee is still owed sends it first. */
  transactionStatus(txHash: string) {
    return this.payer.transactionStatus(txHash);
  }
}

/** Tron's adapter when it is enabled and has an RPC URL, opened (and its network checked). */
export async function openTronChain(
  settings: NodeSettings & {
    tron:
      | {
          network: string;
          apiKey: string | undefined;
          tokens: TronToken[] | undefined;
          treasury: string | undefined;
          solidityUrl?: string | undefined;
          energyDelegation?: boolean;
        }
      | undefined;
    requiredConfirmations: Record<ChainName, number>;
  },
  keyring: TronChainOptions['keyring'],
): Promise<TronChain | undefined> {
  const rpcUrl = nodeUrlOf(settings, 'tron');
  const tron = settings.tron;
  if (!rpcUrl || !tron) return undefined;
  return TronChain.open({
    rpcUrl,
    keyring,
    network: tron.network,
    confirmations: settings.requiredConfirmations.tron,
    ...(tron.apiKey && { apiKey: tron.apiKey }),
    ...(tron.tokens && { tokens: tron.tokens }),
    ...(tron.treasury && { treasury: tron.treasury }),
    ...(tron.solidityUrl && { solidityUrl: tron.solidityUrl }),
    ...(tron.energyDelegation && { energyDelegation: true }),
  });
}
