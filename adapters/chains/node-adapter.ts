// What every node adapter (EVM, Solana, Tron, Bitcoin) does alike: it reads
// the chain through its reader and pays out through its payer, and closing it
// stops the reader's polling before the node's connections. Each chain's
// index.ts builds the two on its node and adds what is its own (where a
// transaction's status is asked, fee quotes, refund checks), so that the port
// (port.ts) stays what the watcher and the payout engine ask of any chain.
import type { ChainBlock, ChainHead, OutgoingTransfer, PreparedTransaction } from './port.ts';

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
