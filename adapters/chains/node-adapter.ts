// What every node adapter (EVM, Solana, Tron, Bitcoin) does alike: it reads
// the chain through its reader and pays out through its payer, and closing it
// stops the reader's polling before the node's connections. Each chain's
// index.ts builds the two on its node and adds what is its own (where a
// transaction's status is asked, fee quotes, refund checks), so that the port
// (port.ts) stays what the watcher and the payout engine ask of any chain.
// Also what the payers and the opening functions share: the deposit key a
// payout is signed with, and which chains have a node.
import type { ChainName } from '../../domain/catalogue.ts';
import type { Chain, DepositKeyFor, DepositKeyring } from '../keys/derivation.ts';
import {
  TransactionRejectedError,
  type ChainBlock,
  type ChainHead,
  type OutgoingTransfer,
  type PreparedTransaction,
} from './port.ts';

export interface NodeReader {
  head(): Promise<ChainHead>;
  block(height: number): Promise<ChainBlock | undefined>;
  onNewBlock(listener: () => void): () => void;
  close(): void;
}

/** GET /admin/v1/wallets: null where the chain has no such wallet or cannot say what it holds. */
export interface NodeWallets {
  feeWallet: string | null;
  feeWalletBalance: bigint | null;
  treasury: string;
  treasuryBalance: bigint | null;
}

export interface NodePayer {
  networkFee(token: string, payout?: 'settlement' | 'refund', coins?: number): bigint;
  prepareTransfer(transfer: OutgoingTransfer): Promise<PreparedTransaction>;
  broadcast(transaction: PreparedTransaction): Promise<void>;
  balanceOf(address: string, token?: string, fundedSince?: string, taken?: OutgoingTransfer['taken']): Promise<bigint>;
  wallets(): Promise<NodeWallets>;
}

export abstract class NodeAdapter {
  protected abstract readonly node: { close(): void };
  protected abstract readonly reader: NodeReader;
  protected abstract readonly payer: NodePayer;

  close(): void {
    this.reader.close();
    this.node.close();
  }

  // Reading the chain
  head() {
    return this.reader.head();
  }
  block(height: number) {
    return this.reader.block(height);
  }
  onNewBlock(listener: () => void) {
    return this.reader.onNewBlock(listener);
  }

  // Paying out
  networkFee(token: string, payout?: 'settlement' | 'refund', coins?: number) {
    return this.payer.networkFee(token, payout, coins);
  }
  prepareTransfer(transfer: OutgoingTransfer) {
    return this.payer.prepareTransfer(transfer);
  }
  broadcast(transaction: PreparedTransaction) {
    return this.payer.broadcast(transaction);
  }
  /** `token`: the chain's native coin when not given, where the payer has one. */
  balanceOf(address: string, token?: string, fundedSince?: string, taken?: OutgoingTransfer['taken']) {
    return this.payer.balanceOf(address, token, fundedSince, taken);
  }
  wallets() {
    return this.payer.wallets();
  }
}

/** What opening the node adapters reads of the settings, whatever the chain. */
export interface NodeSettings {
  chains: readonly ChainName[];
  chainRpcUrls: Partial<Record<ChainName, string>>;
}

/** The URL of `chain`'s node when the chain is enabled and has one; otherwise it has no node adapter. */
export function nodeUrlOf(settings: NodeSettings, chain: ChainName): string | undefined {
  const rpcUrl = settings.chainRpcUrls[chain];
  return rpcUrl && settings.chains.includes(chain) ? rpcUrl : undefined;
}

/**
 * The key a payout from `from` is signed with. A derivation index that
 * gives another address than the recorded one is refused for good: no key
 * signs a payout it was not recorded for. `asDerived`: the address as the
 * keyring spells it (EVM: checksummed).
 */
export function depositKeyOf<C extends Chain>(
  keyring: Pick<DepositKeyring, 'deriveDepositKey'>,
  chain: C,
  from: OutgoingTransfer['from'],
  asDerived: (address: string) => string = (address) => address,
): DepositKeyFor<C> {
  const key = keyring.deriveDepositKey(chain, from.derivationIndex);
  if (key.address !== asDerived(from.address)) {
    throw new TransactionRejectedError(`derivation index ${from.derivationIndex} is not ${from.address}`);
  }
  return key;
}
