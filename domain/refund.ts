// The refund aggregate (stream refund-<id>): money given back to a customer
// for an invoice (shared/spec/refunds.md).
//
// A refund's amount is first reserved on the invoice's stream (the invoice's
// `ReserveRefund`), which alone knows what was received and what other
// refunds hold: that is where the limit is kept. This stream keeps the rest
// of its life: the customer's address, the merchant's approval, where the
// money comes from, and the payout, which follows the settlement's rule: its
// transaction is prepared (named by its hash) and recorded before it is
// broadcast, sent again as it is after a crash, and a new one is made only
// once the chain proves the last can never land.
import { DomainError, type Decider, type DomainEvent } from './decider.ts';
import * as payout from './payout-attempt.ts';
import type { RefundCoins, SettlementFailureReason } from './settlement.ts';
import { streams } from './streams.ts';

export const refundStreamName = streams.refund.name;

export type RefundStatus =
  | 'awaiting_destination'
  | 'awaiting_approval'
  | 'awaiting_funds'
  | 'sending'
  | 'completed'
  | 'canceled'
  | 'expired'
  | 'failed';

/** The deposit address while the settlement is not prepared, else the merchant's refund wallet. */
export type RefundFunding = 'deposit' | 'refund_wallet';

/** Why a refund payout is not going on, in the settlement's words (operations.md §3). */
export type RefundFailureReason = Extract<
  SettlementFailureReason,
  'rejected_by_network' | 'node_unavailable' | 'fee_wallet_empty' | 'fees_exceed_amount'
>;

/** The address a refund is paid from, and its derivation index (for the signer). */
export interface RefundPayer {
  fundedFrom: RefundFunding;
  fromAddress: string;
  derivationIndex: number;
}

export type RefundCreated = DomainEvent<
  'RefundCreated',
  {
    refundId: string;
    invoiceId: string;
    merchantId: string;
    chain: string;
    token: string;
    tokenDecimals: number;
    /** Base units, integer strings: what the refund takes, the network fee out of it, what the customer receives. */
    amount: string;
    networkFee: string;
    netAmount: string;
    /** The amount's value at the invoice's rate, decimal string. */
    fiatAmount: string;
    fiatCurrency: string;
    reason: string | null;
    /** Given by the merchant at creation, or null until the customer gives it. */
    destination: string | null;
    /** The claim link's secret (≥ 128 random bits). */
    claimToken: string;
    claimExpiresAt: string;
    createdAt: string;
  }
>;
/** The customer gave (or changed) the address through the claim link. */
export type RefundClaimed = DomainEvent<'RefundClaimed', { destination: string; claimedAt: string }>;
export type RefundApproved = DomainEvent<
  'RefundApproved',
  RefundPayer & {
    /** What the payout engine's queue needs to know of it without reading the stream. */
    merchantId: string;
    chain: string;
    /** false: the refund wallet holds too little; the refund waits in `awaiting_funds`. */
    funded: boolean;
    approvedAt: string;
  }
>;
export type RefundFunded = DomainEvent<'RefundFunded', { fundedAt: string }>;
/**
 * Approved to be paid from the deposit, but its payout found the deposit's
 * hold gone (given back: an approval recorded after the hold it took was
 * released as left behind) and the settlement would not hold it again
 * (prepared meanwhile): the refund wallet pays it instead, as the approval
 * would have chosen then; `funded` false, it waits in `awaiting_funds`.
 */
export type RefundPayerChanged = DomainEvent<
  'RefundPayerChanged',
  RefundPayer & { funded: boolean; reason: string; changedAt: string }
>;
/**
 * The refund wallet could not pay after all when its transaction was to be
 * prepared (another refund spent from it since it was found funded): the
 * refund waits for funds again, `reason` being the chain's refusal.
 */
export type RefundAwaitingFunds = DomainEvent<'RefundAwaitingFunds', { reason: string; awaitingSince: string }>;
export type RefundTransactionPrepared = DomainEvent<
  'RefundTransactionPrepared',
  {
    attempt: number;
    txHash: string;
    raw: string;
    /** A UTXO chain's: the coins it spends and its change back to the payer. */
    coins?: RefundCoins;
    preparedAt: string;
  }
>;
export type RefundSubmitted = DomainEvent<'RefundSubmitted', { attempt: number; txHash: string; submittedAt: string }>;
export type RefundCompleted = DomainEvent<
  'RefundCompleted',
  {
    invoiceId: string;
    txHash: string;
    blockNumber: number;
    confirmations: number;
    completedAt: string;
    /** Where it was paid from: a refund from the deposit lets the settlement go on (see refund-saga.ts). */
    fundedFrom?: RefundFunding;
    /** The mined transaction's coins (a UTXO chain): the settlement pays out its change instead of what it spent. */
    coins?: RefundCoins;
  }
>;
export type RefundFailed = DomainEvent<
  'RefundFailed',
  payout.AttemptFailure & { invoiceId: string; fundedFrom?: RefundFunding; code: RefundFailureReason }
>;
export type RefundRetried = DomainEvent<'RefundRetried', payout.AttemptRetried>;
// The events that end a refund name its invoice, whose reservation they settle (see refund-saga.ts).
export type RefundCanceled = DomainEvent<
  'RefundCanceled',
  {
    invoiceId: string;
    canceledAt: string;
    /** Why, when the service canceled it: its reservation was refused (another refund took the amount first). */
    reason?: string;
  }
>;
export type RefundExpired = DomainEvent<'RefundExpired', { invoiceId: string; expiredAt: string }>;

export type RefundEvent =
  | RefundCreated
  | RefundClaimed
  | RefundApproved
  | RefundFunded
  | RefundPayerChanged
  | RefundAwaitingFunds
  | RefundTransactionPrepared
  | RefundSubmitted
  | RefundCompleted
  | RefundFailed
  | RefundRetried
  | RefundCanceled
  | RefundExpired;

export type RefundCommand =
  | ({ type: 'CreateRefund'; amount: bigint; networkFee: bigint; now: string } & Omit<
      RefundCreated['data'],
      BaseUnits | 'createdAt'
    >)
  | { type: 'GiveDestination'; destination: string; now: string }
  | { type: 'Approve'; payer: RefundPayer; funded: boolean; now: string }
  | { type: 'MarkFunded'; now: string }
  /** Refused unless from the deposit with no transaction ever prepared: nothing of it can be on its way. */
  | { type: 'PayFromRefundWallet'; payer: RefundPayer; funded: boolean; reason: string; now: string }
  | { type: 'AwaitFunds'; reason: string; now: string }
  | { type: 'Cancel'; now: string; reason?: string }
  | { type: 'Expire'; now: string }
  | { type: 'PrepareTransaction'; txHash: string; raw: string; coins?: RefundCoins; now: string }
  | { type: 'MarkSubmitted'; txHash: string; now: string }
  | { type: 'MarkCompleted'; txHash: string; blockNumber: number; confirmations: number; now: string }
  | {
      type: 'MarkFailed';
      reason: string;
      code: RefundFailureReason;
      rejected: boolean;
      retryAt: string | null;
      now: string;
    }
  | { type: 'Retry'; now: string };

/** RefundCreated's amounts, base units as integer strings in events and bigint elsewhere. */
type BaseUnits = 'amount' | 'networkFee' | 'netAmount';

export interface Refund
  extends payout.PayoutAttempts, Omit<RefundCreated['data'], 'refundId' | BaseUnits>, Record<BaseUnits, bigint> {
  id: string;
  status: RefundStatus;
  payer: RefundPayer | null;
  /** The current attempt's transaction was broadcast. */
  submitted: boolean;
  /** Each prepared transaction's coins, by its hash (a UTXO chain): every attempt spends the same ones. */
  coins: Record<string, RefundCoins>;
  failureReason: string | null;
  failureCode: RefundFailureReason | null;
  createdAt: string;
  updatedAt: string;
  approvedAt: string | null;
  completedAt: string | null;
}

export type RefundState = Refund | null;

/** Before the payout: the merchant may still cancel, the customer's link may still expire. */
const BEFORE_SENDING: readonly RefundStatus[] = ['awaiting_destination', 'awaiting_approval', 'awaiting_funds'];

/**
 * The merchant may cancel before the payout, or once it failed before any
 * transaction was ever made for it (a token transfer the chain would revert,
 * to an address its contract blacklists, is refused at preparing and tried
 * again for ever): nothing of it can be on its way. A refund with a
 * transaction, even one the chain refused, is not: Bitcoin's refused
 * transaction may still be mined (see TransactionRejectedError).
 */
const mayCancel = (refund: Refund) =>
  BEFORE_SENDING.includes(refund.status) || (refund.status === 'failed' && refund.preparedHashes.length === 0);

/**
 * A refund that may go back to waiting for funds: from the refund wallet (a
 * deposit's funds are the payment's, and no one adds to them), with no
 * transaction of its current attempt recorded (none, or the last one refused
 * by the chain for good): nothing of it can be on its way.
 */
export const mayAwaitFunds = (refund: Refund) =>
  refund.status === 'sending' && refund.prepared === null && refund.payer?.fundedFrom === 'refund_wallet';

const isAtOrAfter = (time: string, reference: string) => Date.parse(time) >= Date.parse(reference);

function create(command: Extract<RefundCommand, { type: 'CreateRefund' }>, state: RefundState): RefundEvent[] {
  if (state) return [];
  if (command.networkFee < 0n) throw new DomainError('bad_request', 'A network fee cannot be negative');
  if (command.amount <= command.networkFee) {
    throw new DomainError('bad_request', 'Refund amount must be above the network fee');
  }
  if (isAtOrAfter(command.now, command.claimExpiresAt)) {
    throw new DomainError('bad_request', 'claimExpiresAt must be in the future');
  }
  const { type: _, amount, networkFee, now, ...rest } = command;
  return [
    {
      type: 'RefundCreated',
      data: {
        ...rest,
        amount: amount.toString(),
        networkFee: networkFee.toString(),
        netAmount: (amount - networkFee).toString(),
        createdAt: now,
      },
    },
  ];
}

function giveDestination(command: Extract<RefundCommand, { type: 'GiveDestination' }>, refund: Refund): RefundEvent[] {
  // An expired link is as good as none: the customer sees "not found" (refunds.md).
  if (
    refund.status === 'expired' ||
    (refund.status === 'awaiting_destination' && isAtOrAfter(command.now, refund.claimExpiresAt))
  ) {
    throw new DomainError('not_found', 'Refund not found');
  }
  if (refund.status !== 'awaiting_destination' && refund.status !== 'awaiting_approval') {
    throw new DomainError('conflict', 'The refund address can no longer be changed');
  }
  if (refund.destination === command.destination) return [];
  return [{ type: 'RefundClaimed', data: { destination: command.destination, claimedAt: command.now } }];
}

function approve(command: Extract<RefundCommand, { type: 'Approve' }>, refund: Refund): RefundEvent[] {
  // Approving twice is one payout: a repeat changes nothing.
  if (refund.approvedAt !== null) return [];
  if (refund.status === 'awaiting_destination') {
    throw new DomainError('conflict', 'The customer has not given an address yet');
  }
  if (refund.status !== 'awaiting_approval') throw new DomainError('conflict', 'Refund can no longer be approved');
  const { merchantId, chain } = refund;
  return [
    {
      type: 'RefundApproved',
      data: { ...command.payer, merchantId, chain, funded: command.funded, approvedAt: command.now },
    },
  ];
}

function decide(command: RefundCommand, state: RefundState): RefundEvent[] {
  if (command.type === 'CreateRefund') return create(command, state);
  if (!state) throw new DomainError('not_found', 'Refund not found');
  switch (command.type) {
    case 'GiveDestination':
      return giveDestination(command, state);
    case 'Approve':
      return approve(command, state);
    case 'MarkFunded':
      if (state.status !== 'awaiting_funds') return [];
      return [{ type: 'RefundFunded', data: { fundedAt: command.now } }];
    case 'PayFromRefundWallet': {
      if (state.payer?.fundedFrom === 'refund_wallet') return [];
      if (state.status !== 'sending' || state.payer === null || state.preparedHashes.length > 0) {
        throw new DomainError('conflict', 'The refund is no longer waiting to be paid from the deposit');
      }
      const { payer, funded, reason, now } = command;
      return [{ type: 'RefundPayerChanged', data: { ...payer, funded, reason, changedAt: now } }];
    }
    case 'AwaitFunds':
      if (state.status === 'awaiting_funds') return [];
      if (!mayAwaitFunds(state)) throw new DomainError('conflict', 'Refund can no longer wait for funds');
      return [{ type: 'RefundAwaitingFunds', data: { reason: command.reason, awaitingSince: command.now } }];
    case 'Cancel':
      if (state.status === 'canceled') return [];
      if (!mayCancel(state)) throw new DomainError('conflict', 'Refund can no longer be canceled');
      return [
        {
          type: 'RefundCanceled',
          data: {
            invoiceId: state.invoiceId,
            canceledAt: command.now,
            ...(command.reason && { reason: command.reason }),
          },
        },
      ];
    case 'Expire':
      // Only a link never used expires; a refund with an address waits for the merchant.
      if (state.status !== 'awaiting_destination' || !isAtOrAfter(command.now, state.claimExpiresAt)) return [];
      return [{ type: 'RefundExpired', data: { invoiceId: state.invoiceId, expiredAt: command.now } }];
    case 'PrepareTransaction':
      if (state.status !== 'sending' || state.prepared !== null) return [];
      return [
        {
          type: 'RefundTransactionPrepared',
          data: {
            attempt: state.attempt,
            txHash: command.txHash,
            raw: command.raw,
            ...(command.coins && { coins: command.coins }),
            preparedAt: command.now,
          },
        },
      ];
    case 'MarkSubmitted':
      if (state.status !== 'sending' || state.submitted || !payout.isOneOfItsTransactions(state, command.txHash))
        return [];
      return [
        { type: 'RefundSubmitted', data: { attempt: state.attempt, txHash: command.txHash, submittedAt: command.now } },
      ];
    case 'MarkCompleted':
      if (state.status === 'completed') return [];
      return [
        {
          type: 'RefundCompleted',
          data: {
            invoiceId: state.invoiceId,
            ...(state.payer && { fundedFrom: state.payer.fundedFrom }),
            ...(state.coins[command.txHash] && { coins: state.coins[command.txHash] }),
            ...payout.landed(state, command, 'refund'),
          },
        },
      ];
    case 'MarkFailed':
      if (state.status !== 'sending') return [];
      return [
        {
          type: 'RefundFailed',
          data: {
            invoiceId: state.invoiceId,
            ...(state.payer && { fundedFrom: state.payer.fundedFrom }),
            attempt: state.attempt,
            reason: command.reason,
            code: command.code,
            ...(command.rejected && { rejected: true }),
            retryAt: command.retryAt,
            failedAt: command.now,
          },
        },
      ];
    case 'Retry':
      return payout.retried('RefundRetried', state, command.now);
  }
}

function evolve(state: RefundState, event: RefundEvent): RefundState {
  if (event.type === 'RefundCreated') {
    const { refundId, amount, networkFee, netAmount, createdAt, ...d } = event.data;
    return {
      ...d,
      id: refundId,
      amount: BigInt(amount),
      networkFee: BigInt(networkFee),
      netAmount: BigInt(netAmount),
      status: d.destination === null ? 'awaiting_destination' : 'awaiting_approval',
      payer: null,
      ...payout.noAttemptYet,
      submitted: false,
      coins: {},
      failureReason: null,
      failureCode: null,
      createdAt,
      updatedAt: createdAt,
      approvedAt: null,
      completedAt: null,
    };
  }
  if (!state) throw new Error(`${event.type} before RefundCreated`);
  switch (event.type) {
    case 'RefundClaimed':
      return {
        ...state,
        destination: event.data.destination,
        status: 'awaiting_approval',
        updatedAt: event.data.claimedAt,
      };
    case 'RefundApproved': {
      const { funded, approvedAt, fundedFrom, fromAddress, derivationIndex } = event.data;
      const payer = { fundedFrom, fromAddress, derivationIndex };
      return {
        ...state,
        payer,
        status: funded ? 'sending' : 'awaiting_funds',
        approvedAt,
        updatedAt: approvedAt,
      };
    }
    case 'RefundFunded':
      return { ...state, status: 'sending', updatedAt: event.data.fundedAt };
    case 'RefundPayerChanged': {
      const { funded, changedAt, fundedFrom, fromAddress, derivationIndex } = event.data;
      return {
        ...state,
        payer: { fundedFrom, fromAddress, derivationIndex },
        status: funded ? 'sending' : 'awaiting_funds',
        updatedAt: changedAt,
      };
    }
    case 'RefundAwaitingFunds':
      return { ...state, status: 'awaiting_funds', updatedAt: event.data.awaitingSince };
    case 'RefundTransactionPrepared':
      return {
        ...state,
        ...payout.afterPrepared(state, event.data),
        ...(event.data.coins && { coins: { ...state.coins, [event.data.txHash]: event.data.coins } }),
      };
    case 'RefundSubmitted':
      return {
        ...state,
        ...payout.afterSubmitted(state, event.data),
        submitted: true,
      };
    case 'RefundCompleted':
      return { ...state, ...payout.afterCompleted(event.data), retryAt: null };
    case 'RefundFailed':
      return {
        ...state,
        ...payout.afterFailed(state, event.data),
        failureCode: event.data.code,
      };
    case 'RefundRetried':
      return {
        ...state,
        ...payout.afterRetried(state, event.data),
        status: 'sending',
        submitted: false,
      };
    case 'RefundCanceled':
      return { ...state, status: 'canceled', updatedAt: event.data.canceledAt };
    case 'RefundExpired':
      return { ...state, status: 'expired', updatedAt: event.data.expiredAt };
  }
}

export const refundDecider: Decider<RefundCommand, RefundState, RefundEvent> = {
  initialState: null,
  decide,
  evolve,
};
