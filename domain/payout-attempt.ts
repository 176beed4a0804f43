// The payout rule every payout follows (settlements, refunds): the
// transaction of an attempt is prepared, named by its hash, and recorded
// before it is broadcast; after an unknown outcome (a timeout, a dropped
// connection) the next attempt sends that very transaction again; only a
// transaction the chain refused outright is replaced by a new one; and
// whichever prepared transaction lands is the one payout. The aggregates keep
// these fields flat in their state and fold their own events through these.

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
  txHash: string | null;
  retryAt: string | null;
}

export const noAttemptYet: PayoutAttempts = {
  attempt: 1,
  attempts: 0,
  prepared: null,
  rejected: false,
  preparedHashes: [],
  txHash: null,
  retryAt: null,
};

/** Any of its prepared transactions is the payout; another one is not. */
export const isOneOfItsTransactions = (state: PayoutAttempts, txHash: string) => state.preparedHashes.includes(txHash);

export const afterPrepared = (state: PayoutAttempts, txHash: string, raw: string): Partial<PayoutAttempts> => ({
  prepared: { txHash, raw },
  preparedHashes: [...state.preparedHashes, txHash],
});

export const afterSubmitted = (state: PayoutAttempts, txHash: string): Partial<PayoutAttempts> => ({
  attempts: state.attempts + 1,
  txHash,
});

export const afterFailed = (
  state: PayoutAttempts,
  failure: { rejected?: boolean; retryAt: string | null },
): Partial<PayoutAttempts> => ({
  attempts: state.attempts + 1,
  rejected: failure.rejected === true,
  retryAt: failure.retryAt,
});

/** The next attempt: the same transaction again, unless the chain refused it. */
export const afterRetried = (state: PayoutAttempts, attempt: number): Partial<PayoutAttempts> => ({
  attempt,
  prepared: state.rejected ? null : state.prepared,
  rejected: false,
  retryAt: null,
});
