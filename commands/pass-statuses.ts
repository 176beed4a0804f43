// The statuses of a payout pass's transactions, asked of each chain in one
// call where the chain answers many at once (the port's optional
// `transactionStatuses`: Solana's getSignatureStatuses), so that a pass over
// N open payouts costs one question instead of N. Every payout kind uses it
// through RecordedPayoutKind (payouts.ts): `ask` in beforeLooks, `take` at
// the start of each look.
import type { ChainAdapter, TransactionStatus } from '../adapters/chains/port.ts';
import type { ChainName } from '../domain/catalogue.ts';

/** What a look needs of a payout to ask about its transactions. */
export interface PayoutTransactions {
  id: string;
  chain: string;
  preparedHashes: readonly string[];
}

/** Where a transaction stands on the best chain (undefined: the chain does not have it). */
export type StatusLookup = (txHash: string, chain: ChainAdapter) => Promise<TransactionStatus | undefined>;

export class StatusesAtPassStart {
  /** By payout: where each of its transactions stood when the pass began. */
  private readonly byPayout = new Map<string, Map<string, TransactionStatus | undefined>>();

  constructor(private readonly chains: ReadonlyMap<ChainName, ChainAdapter>) {}

  /** One call per chain that answers many at once, for every transaction of these payouts; other chains are left to each look. */
  async ask(payouts: readonly PayoutTransactions[]): Promise<void> {
    const byChain = new Map<ChainName, PayoutTransactions[]>();
    for (const payout of payouts) {
      const chain = payout.chain as ChainName;
      if (payout.preparedHashes.length === 0 || !this.chains.get(chain)?.transactionStatuses) continue;
      byChain.set(chain, [...(byChain.get(chain) ?? []), payout]);
    }
    for (const [chain, ofChain] of byChain) {
      const statuses = await this.chains.get(chain)!.transactionStatuses!(ofChain.flatMap((p) => p.preparedHashes));
      for (const { id, preparedHashes } of ofChain)
        this.byPayout.set(id, new Map(preparedHashes.map((hash) => [hash, statuses.get(hash)])));
    }
  }

  /**
   * The answer for one payout's look, once: taken, it is gone, so a later
   * look (the next pass, or the same look again after a retry) asks anew.
   */
  take(payoutId: string): StatusLookup {
    const known = this.byPayout.get(payoutId);
    this.byPayout.delete(payoutId);
    return (txHash, chain) =>
      known?.has(txHash) ? Promise.resolve(known.get(txHash)) : chain.transactionStatus(txHash);
  }
}
