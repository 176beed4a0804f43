// The built-in sandbox ledger of one chain (operations.md §4): a ChainAdapter
// whose blocks are mined on request, kept in the event store so that a restart
// finds the chain the watcher has already seen.
//
// The ledger keeps its state in memory and appends with the revision it holds.
// Calls of one process run one after another; a conflict means another
// process wrote to the same ledger, so the ledger folds what it missed and
// decides again.
import { randomUUID } from 'node:crypto';
import type { ChainName } from '../../../domain/catalogue.ts';
import { DomainError, type Decider } from '../../../domain/decider.ts';
import {
  blockAt,
  checkBlockCount,
  headBlock,
  heldBy,
  ledgerHeight,
  sandboxLedgerDecider,
  sandboxLedgerStreamName,
  sandboxTxHash,
  type LedgerBlock,
  type SandboxLedgerCommand,
  type SandboxLedgerEvent,
  type SandboxLedgerState,
} from './decider.ts';
import { systemClock, type Clock } from '../../clock.ts';
import { ConcurrencyError, type EventStore } from '../../event-store/port.ts';
import { findChain } from '../../../domain/catalogue.ts';
import {
  TransactionRejectedError,
  type ChainAdapter,
  type ChainBlock,
  type ChainHead,
  type ChainTransfer,
  type OutgoingTransfer,
  type PreparedTransaction,
  type TransactionStatus,
} from '../port.ts';

/** A flat fee per native payout, about what each chain charges for a simple transfer. */
const sandboxNetworkFees: Partial<Record<ChainName, bigint>> = {
  ethereum: 420_000_000_000_000n, // 21,000 gas at 20 gwei
  bsc: 105_000_000_000_000n, // 21,000 gas at 5 gwei
  polygon: 630_000_000_000_000n, // 21,000 gas at 30 gwei
  tron: 1_100_000n, // 1.1 TRX of bandwidth
  solana: 5_000n, // one signature
  bitcoin: 2_000n, // ~140 vbytes at ~14 sat/vB
};

/** Conflicts only come from other processes writing the same ledger; a few retries settle them. */
const MAX_ATTEMPTS = 10;

/** The most blocks appended at once. */
const MINE_CHUNK = 1_000;

export interface SandboxTransfer {
  to: string;
  /** Catalogue symbol of the token sent. */
  token: string;
  /** Base units of `token`. */
  amount: bigint;
  /** A hash of the caller's choice; generated in the chain's format when absent. */
  txHash?: string;
  /** The service's own payouts: the address they are paid from. */
  from?: string;
}

export class SandboxLedger implements ChainAdapter {
  private readonly decider: Decider<SandboxLedgerCommand, SandboxLedgerState, SandboxLedgerEvent>;
  private readonly streamId: string;
  private state: SandboxLedgerState;
  private readonly listeners = new Set<() => void>();
  /** The highest block this ledger ever held: above its head up to it are blocks it dropped. */
  private highest = 0;
  /** The tail of the calls of this process: each waits for the one before. */
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly store: EventStore,
    readonly chain: ChainName,
    private readonly clock: Clock,
  ) {
    this.decider = sandboxLedgerDecider(chain);
    this.streamId = sandboxLedgerStreamName(chain);
    this.state = this.decider.initialState;
  }

  /** The ledger of `chain` as its stream left it (a fresh one holds only the genesis block at height 0). */
  static async open(store: EventStore, chain: ChainName, clock: Clock = systemClock): Promise<SandboxLedger> {
    const ledger = new SandboxLedger(store, chain, clock);
    await ledger.catchUp();
    return ledger;
  }

  /** Mines one new block holding this transfer: it has 1 confirmation. */
  async transfer(transfer: SandboxTransfer): Promise<{ txHash: string; blockNumber: number }> {
    const [mined] = await this.execute(() => ({
      type: 'MineBlock',
      transfers: [transfer],
      timestamp: this.timestamp(),
    }));
    if (mined?.type !== 'BlockMined' || !mined.data.transfers[0])
      throw new Error('The sandbox ledger mined no block for the transfer');
    return { txHash: mined.data.transfers[0].txHash, blockNumber: mined.data.height };
  }

  /** Mines `count` empty blocks (adding confirmations); returns the new height. */
  async mine(count = 1): Promise<number> {
    return this.exclusive(async () => {
      // Validated whole before the first chunk, so a bad count mines nothing.
      checkBlockCount(count);
      // Appended in chunks: one append of ten thousand rows would strain SQL's parameter limit.
      for (let left = count; left > 0; left -= MINE_CHUNK) {
        const chunk = Math.min(left, MINE_CHUNK);
        await this.decideAndAppend(() => ({ type: 'MineEmptyBlocks', count: chunk, timestamp: this.timestamp() }));
      }
      return ledgerHeight(this.state);
    });
  }

  /** Drops the last `depth` blocks and their transfers; returns the new height. */
  async reorg(depth: number): Promise<number> {
    return this.exclusive(async () => {
      await this.decideAndAppend(() => ({ type: 'Reorg', depth, timestamp: this.timestamp() }));
      return ledgerHeight(this.state);
    });
  }

  async head(): Promise<ChainHead> {
    // Another process may have mined on the same ledger; the watcher asks for
    // the head first in every step, so that is where we look.
    await this.exclusive(() => this.catchUp());
    const head = headBlock(this.state);
    return { height: head.height, hash: head.hash };
  }

  async block(height: number): Promise<ChainBlock | undefined> {
    const block = blockAt(this.state, height);
    if (block) return toChainBlock(block);
    if (height <= ledgerHeight(this.state) || height > this.highest) return undefined;
    // A height this ledger dropped (a sandbox reorg) and has not mined again.
    // The ledger is the whole chain and knows the block is gone, as a Solana
    // node knows a slot was skipped; it says so the same way: an empty block
    // carrying the hash of the block before it. Undefined would mean "not
    // served yet", which the watcher waits out.
    const head = headBlock(this.state);
    return { height, hash: head.hash, parentHash: head.hash, timestamp: new Date(head.timestamp), transfers: [] };
  }

  onNewBlock(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  networkFee(token: string): bigint {
    // Native payouts pay a flat fee out of the amount; token fees are paid in
    // the native coin by the fee wallet, not out of the token amount.
    return token === findChain(this.chain)!.nativeCurrency ? (sandboxNetworkFees[this.chain] ?? 0n) : 0n;
  }

  async prepareTransfer(transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    const txHash = sandboxTxHash(this.chain, `payout:${transfer.reference}`);
    const raw = JSON.stringify({
      from: transfer.from.address,
      to: transfer.to,
      token: transfer.token,
      amount: transfer.amount.toString(),
    });
    return { txHash, raw };
  }

  async broadcast(transaction: PreparedTransaction): Promise<void> {
    if (await this.transactionStatus(transaction.txHash)) return; // already on the chain
    const { from, to, token, amount } = JSON.parse(transaction.raw) as {
      from?: string;
      to: string;
      token: string;
      amount: string;
    };
    try {
      await this.transfer({ to, token, amount: BigInt(amount), txHash: transaction.txHash, ...(from && { from }) });
    } catch (error) {
      // The ledger's refusals are final; anything else (the store) leaves the outcome unknown.
      if (error instanceof DomainError) throw new TransactionRejectedError(error.message);
      throw error;
    }
  }

  async transactionStatus(txHash: string): Promise<TransactionStatus | undefined> {
    const height = ledgerHeight(this.state);
    for (let h = height; h >= 1; h--) {
      if (blockAt(this.state, h)?.transfers.some((t) => t.txHash === txHash)) {
        return { blockNumber: h, confirmations: height - h + 1 };
      }
    }
    return undefined;
  }

  /** What `address` holds of `token` on the best chain (see heldBy). */
  async balanceOf(address: string, token: string): Promise<bigint> {
    await this.exclusive(() => this.catchUp());
    return heldBy(this.state, address, token);
  }

  /** Every transfer to `address` on the best chain, oldest first (for checking balances from outside). */
  transfersTo(address: string): (ChainTransfer & { blockNumber: number })[] {
    const found: (ChainTransfer & { blockNumber: number })[] = [];
    for (let h = 1; h <= ledgerHeight(this.state); h++) {
      for (const t of blockAt(this.state, h)!.transfers) {
        if (t.to === address)
          found.push({
            txHash: t.txHash,
            index: t.index,
            to: t.to,
            token: t.token,
            amount: BigInt(t.amount),
            blockNumber: h,
          });
      }
    }
    return found;
  }

  private timestamp(): string {
    return this.clock.now().toISOString();
  }

  private exclusive<T>(work: () => Promise<T>): Promise<T> {
    const result = this.queue.then(work);
    this.queue = result.catch(() => undefined);
    return result;
  }

  /** Decide on the state in memory, append with its revision, and on a conflict fold the missed events and decide again. */
  private execute(command: () => SandboxLedgerCommand): Promise<SandboxLedgerEvent[]> {
    return this.exclusive(() => this.decideAndAppend(command));
  }

  /** Only inside `exclusive`. */
  private async decideAndAppend(command: () => SandboxLedgerCommand): Promise<SandboxLedgerEvent[]> {
    for (let attempt = 1; ; attempt++) {
      const events = this.decider.decide(command(), this.state);
      if (events.length === 0) return events;
      const expected = this.state.nextRevision === 0 ? 'no_stream' : this.state.nextRevision - 1;
      try {
        await this.store.append(
          this.streamId,
          events.map((event) => ({ id: randomUUID(), type: event.type, data: event.data })),
          expected,
        );
      } catch (error) {
        if (!(error instanceof ConcurrencyError) || attempt >= MAX_ATTEMPTS) throw error;
        await this.catchUp();
        continue;
      }
      this.apply(events);
      return events;
    }
  }

  /** Folds the events appended after the state in memory (by anyone). */
  private async catchUp(): Promise<void> {
    const recorded = await this.store.readStream(this.streamId, this.state.nextRevision);
    const missed = recorded.filter((r) => r.revision >= this.state.nextRevision);
    this.apply(missed.map((r) => ({ type: r.type, data: r.data }) as SandboxLedgerEvent));
  }

  private apply(events: readonly SandboxLedgerEvent[]): void {
    if (events.length === 0) return;
    for (const event of events) {
      this.state = this.decider.evolve(this.state, event);
      this.highest = Math.max(this.highest, ledgerHeight(this.state));
    }
    for (const listener of this.listeners) {
      try {
        listener();
      } catch {
        // A listener's failure is its own; the block is mined either way.
      }
    }
  }
}

function toChainBlock(block: LedgerBlock): ChainBlock {
  return {
    height: block.height,
    hash: block.hash,
    parentHash: block.parentHash,
    timestamp: new Date(block.timestamp),
    transfers: block.transfers.map((t) => ({
      txHash: t.txHash,
      index: t.index,
      to: t.to,
      token: t.token,
      amount: BigInt(t.amount),
    })),
  };
}
