// The chain port: what the watcher (and later the settlement signer) asks of a
// chain, whether the sandbox ledger or a real node behind an adapter.
import type { ChainName } from '../../domain/catalogue.ts';

export interface ChainTransfer {
  txHash: string;
  /** Output index (Bitcoin), log index (EVM token), or 0 for a plain native transfer. */
  index: number;
  to: string;
  /** Token symbol from the catalogue (the chain's native coin or a token). */
  token: string;
  /** Base units of `token`. */
  amount: bigint;
  /**
   * Confirmations before the chain lets this output be spent, where that is
   * more than the payment's usual count (a Bitcoin coinbase output matures
   * at 100): the payment is not confirmed before it could be paid out.
   */
  spendableAfter?: number;
  /**
   * The coins its transaction spends (a UTXO chain): an output that pays a
   * deposit back from that deposit's own coins is the service's change (a
   * refund's), not a payment.
   */
  spends?: { txHash: string; index: number }[];
}

export interface ChainBlock {
  height: number;
  hash: string;
  parentHash: string;
  timestamp: Date;
  /** Every transfer in the block; the watcher picks those to its addresses. */
  transfers: ChainTransfer[];
}

export interface ChainHead {
  height: number;
  hash: string;
  /**
   * The newest block the chain holds final (Tron's solidified block, Solana's
   * finalized slot), where the chain has such a notion. A payment in a newer
   * block never counts as confirmed, whatever its depth.
   */
  finalized?: number;
  /**
   * Why the node is not at the chain's present, when it shows so itself
   * (initial block download or syncing, headers ahead of blocks, a tip too
   * old for the chain's block time). The watcher then reads what the node
   * has but does not take "nothing newer" to mean there is nothing newer, so
   * expiry waits on this chain. A node that does not answer at all throws.
   */
  stale?: string;
}

/**
 * A node of an account chain (EVM, Tron: a block every 2 to 12 s) whose
 * newest block is over 10 minutes old has stopped following the chain (no
 * peers, stuck, still syncing), however healthy it answers.
 */
export function staleTip(tip: Date, now = Date.now()): string | undefined {
  const age = now - tip.getTime();
  if (age <= 10 * 60_000) return undefined;
  return `its newest block is ${Math.round(age / 1000)} s old`;
}

/**
 * The node knows the block at `height` (its hash) but no longer has its
 * transactions (a pruned Bitcoin node): its payments cannot be read from this
 * node until it has the block again. Thrown by `block`; the watcher notes the
 * height for operators and follows the chain past it by its hash.
 */
export class BlockPrunedError extends Error {
  override name = 'BlockPrunedError';
  constructor(
    chain: ChainName,
    readonly height: number,
    readonly hash: string,
    /** The lowest height whose block the node still has. */
    readonly servedFrom: number,
  ) {
    super(`${chain}: block ${height} is pruned; the node serves blocks from height ${servedFrom} on`);
  }
}

/** A payout from a deposit address (a settlement's sweep). */
export interface OutgoingTransfer {
  /**
   * `fundedSince`: the earliest time the address may have received coins (a
   * refund wallet's assignment), for a chain that must look back for them.
   */
  from: { address: string; derivationIndex: number; fundedSince?: string };
  to: string;
  token: string;
  /** Base units of `token`. */
  amount: bigint;
  /** Unique per settlement attempt: the same reference always prepares the same transaction. */
  reference: string;
  /**
   * The settlement's fees, base units of `token`. `platform` goes to the
   * chain's treasury where the adapter has one (the sandbox ledger leaves it
   * on the deposit address); `network` is what `networkFee` quoted when the
   * settlement was requested, and an adapter whose fee varies must spend
   * exactly that on a native payout, so that the merchant gets `amount`.
   */
  fees?: { platform: bigint; network: bigint };
  /**
   * The recorded payments this payout pays out (their transaction hash and
   * output or log index, and amount in base units of `token`). A UTXO chain
   * spends exactly these coins and no others, so that a payment that arrives
   * later is never swept with them; an account chain may ignore them.
   */
  sources?: { txHash: string; index: number; amount: bigint }[];
  /**
   * 'refund': the payout takes only its amount and leaves the rest with the
   * payer (for the deposit's settlement, or in the merchant's refund wallet);
   * a settlement's sweep takes the deposit whole. On a UTXO chain what the
   * coins hold beyond `amount` and the network fee comes back to `from` as
   * change (no treasury output), and without `sources` the payer's coins are
   * looked up on the chain (a refund wallet).
   */
  payout?: 'settlement' | 'refund';
  /**
   * The network fee is `fees.network` exactly, never more: the payer's coins
   * beyond the payout are another payout's, priced already (a refund from a
   * deposit, whose change is the settlement's). When the chain would not take
   * the payout at that fee now, preparing it fails, to be tried again later.
   */
  exactNetworkFee?: boolean;
  /**
   * Coins (a UTXO chain's) that other payouts from the same payer have
   * prepared and the chain has not yet seen spent: never chosen for this one.
   */
  taken?: { txHash: string; index: number }[];
  /**
   * The recorded transactions (`raw`, as `prepareTransfer` gave them) of
   * other payouts from the same payer still on their way. An account chain
   * whose payouts lend the payer coins (Tron: the fee wallet's TRX top-up of
   * a token call) counts what those may still hold there as not the
   * payer's own, from the chain, so that a restart forgets none of them; one
   * whose transactions are mined in order (EVM: by nonce) prepares this one
   * only once theirs are mined (PayerBusyError).
   */
  othersPrepared?: string[];
  /**
   * The recorded transactions (`raw`, as `prepareTransfer` gave them) of this
   * payout's earlier attempts that the chain refused. An account chain whose
   * payout is several transactions (EVM: the platform fee, then the payout)
   * reads from the chain which of theirs were mined all the same, and does
   * not send those again: a new attempt pays only the platform fee still owed,
   * never from a payment that reached the deposit since. One whose refusals
   * may be read from a lagging node (EVM) checks that none of them landed,
   * and competes with them for their nonce rather than sign past it.
   */
  refusedAttempts?: string[];
}

/**
 * A signed transaction, named by its hash before it is broadcast. On an
 * account chain a settlement may need several (a gas top-up, the platform
 * fee, the payout): `raw` then carries them all and `txHash` is the payout's,
 * sent last, so that the payout on the chain means the rest is there too.
 */
export interface PreparedTransaction {
  txHash: string;
  /** The adapter's own serialisation (e.g. signed raw bytes), JSON-safe, kept to broadcast it again after a crash. */
  raw: string;
  /**
   * A UTXO chain's refund: the coins it spends, and its change back to the
   * payer (index in this transaction and amount; null when the rest was
   * below the dust limit). A later payout from the payer spends the change
   * instead of the spent coins; a later attempt of this one, the same coins.
   */
  coins?: {
    spent: { txHash: string; index: number; amount: bigint }[];
    change: { index: number; amount: bigint } | null;
  };
}

export interface TransactionStatus {
  blockNumber: number;
  confirmations: number;
}

/**
 * The chain refused a transaction outright (invalid, underfunded, conflicting):
 * it can never be mined, so another may be prepared in its place. (Bitcoin
 * also says it of a sweep stuck in the mempool: its replacement spends the
 * same coins, so at most one of the two can ever be mined.) Any other error
 * from `broadcast` leaves the outcome unknown.
 */
export class TransactionRejectedError extends Error {
  override name = 'TransactionRejectedError';
}

/**
 * From `broadcast`: the payout is on the chain, but what it leaves to do
 * once final is not done yet (Tron: the platform fee, a token payout's
 * leftover TRX back to the fee wallet; a process that restarted learns of it
 * only from this broadcast). Not a failure: the payout completes at a later
 * look, once it is done.
 */
export class PayoutNotFinalError extends Error {
  override name = 'PayoutNotFinalError';
}

/**
 * From `broadcast`, once the payout is final: the merchant's payout is done,
 * but the platform fee that the chain sends after it (Tron) could not be
 * collected (its call mined and failed, tried again and failed again, or
 * failed in a way no retry changes). The payout completes; the message says
 * what is left where, for an operator (settlement attention
 * `platform_fee_uncollected`), rather than the payout completing in silence.
 */
export class PlatformFeeUncollectedError extends Error {
  override name = 'PlatformFeeUncollectedError';
}

/**
 * From `prepareTransfer`: the payer has another payout on its way that this
 * one must follow (EVM: a payer's transactions are mined in nonce order, and
 * one signed behind a transaction that may never be mined waits behind it).
 * Not a failure: the payout is prepared once that one is mined.
 */
export class PayerBusyError extends Error {
  override name = 'PayerBusyError';
}

/**
 * The adapter will not prepare a payout, for a reason no node call can
 * change by itself: too little left after the chain's own costs (below its
 * dust limit), or a fee wallet too low to pay gas or energy. The payout is
 * failed with `reason`, visibly, instead of tried again in silence.
 */
export class PayoutRefusedError extends Error {
  override name = 'PayoutRefusedError';
  constructor(
    readonly reason: 'fees_exceed_amount' | 'fee_wallet_empty',
    message: string,
  ) {
    super(message);
  }
}

export interface ChainAdapter {
  readonly chain: ChainName;
  /**
   * A payout spends the coins it names whole, the rest coming back as change
   * (Bitcoin): a deposit then pays one refund at a time, since two at once
   * would spend the same coins.
   */
  readonly spendsCoinsWhole?: boolean;
  head(): Promise<ChainHead>;
  /**
   * The block at `height` on the node's best chain, or undefined when the
   * node does not serve it now: above its head, or a load-balanced backend
   * that lags behind one that served it a moment ago. Undefined is never a
   * sign that a block was dropped: only another hash at that height is (or,
   * on a chain that skips slots, the node saying a slot was skipped once it
   * is final, which the adapter reports as a block with another hash).
   */
  block(height: number): Promise<ChainBlock | undefined>;
  /** Calls `listener` when a new block (or a reorg) may be there; returns a function that stops it. */
  onNewBlock(listener: () => void): () => void;
  /**
   * The transfers of the transactions waiting in the node's mempool, where
   * the chain has a public one (Bitcoin): payments seen at 0 confirmations.
   */
  mempool?(): Promise<ChainTransfer[]>;

  /**
   * Why `address` could not take this chain's payouts, or undefined when it
   * can. Asked when an operator configures a settlement wallet or treasury,
   * so that the first sweep is not where it is found out. (EVM: a contract,
   * whose receiving code needs more gas than a plain transfer carries.)
   */
  receivingProblem?(address: string): Promise<string | undefined>;

  /**
   * What the chain charges to send `token`, in base units of `token` (0 where
   * the fee is paid in another coin). `payout` 'refund': a refund's payout,
   * one transfer with no platform fee beside it (EVM: a native settlement
   * with a platform fee is two transactions, a refund one). `coins`: how
   * many coins the refund spends (a UTXO chain, whose fee grows with them;
   * one when not given), since a refund pays exactly its quote.
   */
  networkFee(token: string, payout?: 'settlement' | 'refund', coins?: number): bigint;
  /**
   * What this payout costs now, in base units of its token, where that
   * depends on its addresses or on an exchange rate (Tron: a token call's
   * energy, more to an address holding none, is paid in TRX). The payout
   * engine prices a settlement with it when the adapter has it, else with
   * `networkFee`; it throws when it cannot price (the attempt fails, retried).
   */
  quoteNetworkFee?(payout: Pick<OutgoingTransfer, 'from' | 'to' | 'token'>): Promise<bigint>;
  /** Builds and signs a payout; preparing the same reference again gives the same transaction. */
  prepareTransfer(transfer: OutgoingTransfer): Promise<PreparedTransaction>;
  /**
   * Sends a prepared transaction; sending one the chain already has is not an
   * error. Throws TransactionRejectedError when the chain refuses it for good.
   * Sent again once the payout is final, it does what the payout leaves to do
   * after it (Tron sends the platform fee only then); the settlement completes
   * only when that call succeeds, or throws PlatformFeeUncollectedError.
   */
  broadcast(transaction: PreparedTransaction): Promise<void>;
  /**
   * What `address` holds of `token` now, base units (a merchant's refund
   * wallet); `fundedSince`, the earliest time it may have received coins,
   * for a chain that must look back for them (Bitcoin's watch-only wallet);
   * `taken`, coins other payouts have prepared (as OutgoingTransfer's), left out.
   */
  balanceOf(address: string, token: string, fundedSince?: string, taken?: OutgoingTransfer['taken']): Promise<bigint>;
  /**
   * Whether `address` can pay out `amount` of `token` now, `amount` being all
   * it gives up (a refund's network fee is in it where the payer pays it): a
   * refund wallet that cannot waits in `awaiting_funds`; a deposit that
   * cannot leaves the refund to the refund wallet. Without it, holding
   * `amount` is enough (see `canPay`). Solana: a System account left neither
   * empty nor rent-exempt is refused by the runtime, so it must hold `amount`
   * exactly or `amount` plus the rent-exempt minimum.
   */
  canPay?(address: string, token: string, amount: bigint): Promise<boolean>;
  /** Where a transaction stands on the best chain, or undefined when the chain does not have it. */
  transactionStatus(txHash: string): Promise<TransactionStatus | undefined>;
  /**
   * `transactionStatus` of many transactions at once, where the node answers
   * them in one call (Solana's getSignatureStatuses): the payout engine asks
   * for every transaction of a pass before it looks at the payouts one by
   * one, so that N open payouts cost one question, not N. Every hash asked is
   * in the answer (undefined: not on the chain). Without it, each payout asks
   * `transactionStatus` on its own.
   */
  transactionStatuses?(txHashes: readonly string[]): Promise<Map<string, TransactionStatus | undefined>>;
}

/**
 * The adapter's own answer where it has one, else: the payer holds at least
 * `amount` in coins no other payout has taken.
 */
export async function canPay(
  chain: ChainAdapter,
  address: string,
  token: string,
  amount: bigint,
  fundedSince?: string,
  taken?: OutgoingTransfer['taken'],
): Promise<boolean> {
  if (chain.canPay) return chain.canPay(address, token, amount);
  return (await chain.balanceOf(address, token, fundedSince, taken)) >= amount;
}
