// The payout rule every payout follows (settlements, refunds): the
// transaction of an attempt is prepared, named by its hash, and recorded
// before it is broadcast; after an unknown outcome (a timeout, a dropped
// connection) the next attempt sends that very transaction again; only a
// transaction the chain refused outright is replaced by a new one; and
// whichever prepared transaction lands is the one payout. The aggregates keep
// these fields flat in their state, decide their payout steps and fold their
// own events through these.
import { blockSeconds, type ChainName } from './catalogue.ts';
import { DomainError, type DomainEvent } from './decider.ts';

export interface PayoutAttempts {
  /** The current attempt, from 1. */
  attempt: number;
  /** Attempts that reached the chain or failed trying: what the merchant sees as `attempts`. */
  attempts: number;
  /** The transaction of the current attempt, once prepared; kept across a retry unless the chain rejected it. */
  prepared: { txHash: string; raw: string } | null;
  /** The last failure was the chain refusing the transaction for good. */
  rejected: boolean;
  /** Every transaction ever prepared, so that none is forgotten when a later attempt is made. */
  preparedHashes: string[];
  /**
   * The recorded transactions (`raw`) of the attempts the chain refused, oldest first. A refused attempt may
   * still have had a part mined (EVM: its platform fee), or its refusal be proved wrong later: the next
   * attempt is prepared knowing them.
   */
  refusedAttempts: string[];
  txHash: string | null;
  retryAt: string | null;
}

/**
 * A failed attempt, as each payout's failure event records it. `rejected`:
 * the chain refused the transaction outright, so it can never be mined and
 * the next attempt prepares a new one. Otherwise the outcome is unknown (a
 * timeout, a dropped connection): the transaction may still land, so the
 * next attempt sends the very same one again, never a second payout.
 */
export interface AttemptFailure {
  attempt: number;
  /** What went wrong, in words (the node's or the adapter's message). */
  reason: string;
  rejected?: boolean;
  /** null: final, no attempt is due. */
  retryAt: string | null;
  failedAt: string;
}

/** The next attempt, as each payout's retry event records it. */
export interface AttemptRetried {
  attempt: number;
  retriedAt: string;
}

export const noAttemptYet: PayoutAttempts = {
  attempt: 1,
  attempts: 0,
  prepared: null,
  rejected: false,
  preparedHashes: [],
  refusedAttempts: [],
  txHash: null,
  retryAt: null,
};

/** The payout's transaction is on the chain, deep enough: what completes every payout. */
export interface MarkCompleted {
  type: 'MarkCompleted';
  txHash: string;
  blockNumber: number;
  confirmations: number;
  /** The platform fee that goes after the payout could not be collected, in the chain's words (a settlement's). */
  platformFeeUncollected?: string;
  now: string;
}

/** Any of its prepared transactions is the payout; another one is not. */
export const isOneOfItsTransactions = (state: PayoutAttempts, txHash: string) => state.preparedHashes.includes(txHash);

/**
 * The landed transaction as its completion event records it. Any attempt's
 * transaction that made it counts: it is the one payout; a transaction it
 * never prepared is refused (`payout` names it in the refusal).
 */
export function landed(
  state: PayoutAttempts,
  command: { txHash: string; blockNumber: number; confirmations: number; now: string },
  payout: 'refund' | 'settlement',
) {
  if (!isOneOfItsTransactions(state, command.txHash)) {
    throw new DomainError('conflict', `Transaction ${command.txHash} is not one of this ${payout}'s`);
  }
  const { txHash, blockNumber, confirmations, now } = command;
  return { txHash, blockNumber, confirmations, completedAt: now };
}

/** The next attempt, once a failure that names a time for one is behind it; nothing after a final one. */
export function retried<Type extends string>(
  type: Type,
  state: PayoutAttempts & { status: string },
  now: string,
): DomainEvent<Type, AttemptRetried>[] {
  if (state.status !== 'failed' || state.retryAt === null) return [];
  return [{ type, data: { attempt: state.attempt + 1, retriedAt: now } }];
}

export const afterPrepared = (
  state: PayoutAttempts,
  prepared: { txHash: string; raw: string; preparedAt: string },
) => ({
  prepared: { txHash: prepared.txHash, raw: prepared.raw },
  preparedHashes: [...state.preparedHashes, prepared.txHash],
  updatedAt: prepared.preparedAt,
});

export const afterSubmitted = (state: PayoutAttempts, submitted: { txHash: string; submittedAt: string }) => ({
  attempts: state.attempts + 1,
  txHash: submitted.txHash,
  failureCode: null,
  updatedAt: submitted.submittedAt,
});

export const afterCompleted = (completed: { txHash: string; completedAt: string }) => ({
  status: 'completed' as const,
  txHash: completed.txHash,
  failureCode: null,
  completedAt: completed.completedAt,
  updatedAt: completed.completedAt,
});

export const afterFailed = (state: PayoutAttempts, failure: AttemptFailure) => ({
  attempts: state.attempts + 1,
  rejected: failure.rejected === true,
  retryAt: failure.retryAt,
  status: 'failed' as const,
  failureReason: failure.reason,
  updatedAt: failure.failedAt,
});

/** The next attempt: the same transaction again, unless the chain refused it. */
export const afterRetried = (state: PayoutAttempts, retry: AttemptRetried) => ({
  attempt: retry.attempt,
  prepared: state.rejected ? null : state.prepared,
  refusedAttempts:
    state.rejected && state.prepared ? [...state.refusedAttempts, state.prepared.raw] : state.refusedAttempts,
  rejected: false,
  retryAt: null,
  updatedAt: retry.retriedAt,
});

/**
 * How long after its transaction was sent a payout not yet completed is
 * overdue, for an operator to look at: three times the usual time of its
 * confirmations, and never under 30 minutes. Sent again at every look, a
 * transaction the chain will not mine (an EVM fee cap below a risen base
 * fee, which geth keeps in its pool) records nothing: only its age says so.
 */
export function overdueAfterMs(chain: ChainName, confirmations: number): number {
  return Math.max(30 * 60_000, 3 * confirmations * blockSeconds[chain] * 1000);
}
