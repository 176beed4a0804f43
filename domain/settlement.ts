// The settlement aggregate (stream settlement-<id>): paying an invoice's
// receipts, net of fees, from its deposit address to the merchant's wallet.
//
// No payout may ever be sent twice. The transaction of an attempt is prepared
// (and so named by its hash) and recorded before it is broadcast; after a
// crash the recorded transaction is broadcast again, never a new one, and a
// new attempt is only made once the chain is known not to have the last one.
import { v5 as uuidv5 } from 'uuid';
import { DomainError, type Decider, type DomainEvent } from './decider.ts';

const SETTLEMENT_ID_NAMESPACE = '3d4b8f6e-9a1c-4e2b-8c7d-5f0a1b2c3d4e';

/** One settlement per invoice: its id follows from the invoice's. */
export const settlementIdOf = (invoiceId: string) => uuidv5(`${invoiceId}/settlement`, SETTLEMENT_ID_NAMESPACE);
export const settlementStreamName = (settlementId: string) => `settlement-${settlementId}`;

export type SettlementStatus = 'pending' | 'submitted' | 'completed' | 'failed';

export interface SettlementSource {
  chain: string;
  token: string;
  tokenDecimals: number;
  /** The deposit address that received the payments, and its derivation index (for the signer). */
  fromAddress: string;
  derivationIndex: number;
}

export type SettlementRequested = DomainEvent<
  'SettlementRequested',
  SettlementSource & {
    settlementId: string;
    invoiceId: string;
    merchantId: string;
    /** Base units, integer strings. */
    grossAmount: string;
    platformFee: string;
    networkFee: string;
    netAmount: string;
    platformFeeBps: number;
    /** null: the merchant has no wallet on this chain yet; the settlement waits for one. */
    merchantWallet: string | null;
    requestedAt: string;
  }
>;
export type SettlementWalletSet = DomainEvent<'SettlementWalletSet', { merchantWallet: string; setAt: string }>;
/** The intent: the transaction of this attempt, named before it is sent. */
export type SettlementTransactionPrepared = DomainEvent<
  'SettlementTransactionPrepared',
  { attempt: number; txHash: string; raw: string; preparedAt: string }
>;
export type SettlementSubmitted = DomainEvent<
  'SettlementSubmitted',
  { attempt: number; txHash: string; submittedAt: string }
>;
export type SettlementCompleted = DomainEvent<
  'SettlementCompleted',
  { txHash: string; blockNumber: number; confirmations: number; completedAt: string }
>;
/**
 * `rejected`: the chain refused the transaction outright, so it can never be
 * mined and the next attempt prepares a new one. Otherwise the outcome is
 * unknown (a timeout, a dropped connection): the transaction may still land,
 * so the next attempt sends the very same one again, never a second payout.
 */
export type SettlementFailed = DomainEvent<
  'SettlementFailed',
  { attempt: number; reason: string; rejected?: boolean; retryAt: string; failedAt: string }
>;
export type SettlementRetried = DomainEvent<'SettlementRetried', { attempt: number; retriedAt: string }>;

export type SettlementEvent =
  | SettlementRequested
  | SettlementWalletSet
  | SettlementTransactionPrepared
  | SettlementSubmitted
  | SettlementCompleted
  | SettlementFailed
  | SettlementRetried;

export type SettlementCommand =
  | (SettlementSource & {
      type: 'RequestSettlement';
      settlementId: string;
      invoiceId: string;
      merchantId: string;
      grossAmount: bigint;
      networkFee: bigint;
      platformFeeBps: number;
      merchantWallet: string | null;
      now: string;
    })
  | { type: 'SetWallet'; merchantWallet: string; now: string }
  | { type: 'PrepareTransaction'; txHash: string; raw: string; now: string }
  | { type: 'MarkSubmitted'; txHash: string; now: string }
  | { type: 'MarkCompleted'; txHash: string; blockNumber: number; confirmations: number; now: string }
  | { type: 'MarkFailed'; reason: string; rejected: boolean; retryAt: string; now: string }
  | { type: 'Retry'; now: string };

export interface Settlement extends SettlementSource {
  id: string;
  invoiceId: string;
  merchantId: string;
  grossAmount: bigint;
  platformFee: bigint;
  networkFee: bigint;
  netAmount: bigint;
  merchantWallet: string | null;
  status: SettlementStatus;
  attempt: number;
  /** The transaction of the current attempt, once prepared; kept across a retry unless the chain rejected it. */
  prepared: { txHash: string; raw: string } | null;
  /** The last failure was the chain refusing the transaction (see SettlementFailed). */
  rejected: boolean;
  /** Every transaction ever prepared, so that none is forgotten when a later attempt is made. */
  preparedHashes: string[];
  txHash: string | null;
  failureReason: string | null;
  retryAt: string | null;
  createdAt: string;
  updatedAt: string;
  initiatedAt: string | null;
  completedAt: string | null;
  failedAt: string | null;
}

export type SettlementState = Settlement | null;

/** The platform's share, rounded down: the merchant is never charged more than the stated rate. */
export function platformFeeOf(gross: bigint, bps: number): bigint {
  return (gross * BigInt(bps)) / 10_000n;
}

function decide(command: SettlementCommand, state: SettlementState): SettlementEvent[] {
  if (command.type === 'RequestSettlement') {
    if (state) return []; // one settlement per invoice: asking again changes nothing
    const platformFee = platformFeeOf(command.grossAmount, command.platformFeeBps);
    const netAmount = command.grossAmount - platformFee - command.networkFee;
    if (netAmount <= 0n) throw new DomainError('bad_request', 'The amount received does not cover the fees');
    return [
      {
        type: 'SettlementRequested',
        data: {
          settlementId: command.settlementId,
          invoiceId: command.invoiceId,
          merchantId: command.merchantId,
          chain: command.chain,
          token: command.token,
          tokenDecimals: command.tokenDecimals,
          fromAddress: command.fromAddress,
          derivationIndex: command.derivationIndex,
          grossAmount: command.grossAmount.toString(),
          platformFee: platformFee.toString(),
          networkFee: command.networkFee.toString(),
          netAmount: netAmount.toString(),
          platformFeeBps: command.platformFeeBps,
          merchantWallet: command.merchantWallet,
          requestedAt: command.now,
        },
      },
    ];
  }
  if (!state) throw new DomainError('not_found', 'Settlement not found');
  switch (command.type) {
    case 'SetWallet':
      // The destination is fixed once a transaction has been prepared for it.
      if (state.merchantWallet !== null || state.prepared !== null) return [];
      return [{ type: 'SettlementWalletSet', data: { merchantWallet: command.merchantWallet, setAt: command.now } }];
    case 'PrepareTransaction':
      if (state.status !== 'pending' || state.prepared !== null) return [];
      if (state.merchantWallet === null) throw new DomainError('conflict', 'The merchant has no wallet for this chain');
      return [
        {
          type: 'SettlementTransactionPrepared',
          data: { attempt: state.attempt, txHash: command.txHash, raw: command.raw, preparedAt: command.now },
        },
      ];
    case 'MarkSubmitted':
      // An earlier attempt's transaction found on the chain is adopted: it is the payout.
      if (state.status !== 'pending' || !state.preparedHashes.includes(command.txHash)) return [];
      return [
        {
          type: 'SettlementSubmitted',
          data: { attempt: state.attempt, txHash: command.txHash, submittedAt: command.now },
        },
      ];
    case 'MarkCompleted':
      if (state.status === 'completed') return [];
      // Any attempt's transaction that made it counts: it is the one payout.
      if (!state.preparedHashes.includes(command.txHash)) {
        throw new DomainError('conflict', `Transaction ${command.txHash} is not one of this settlement's`);
      }
      return [
        {
          type: 'SettlementCompleted',
          data: {
            txHash: command.txHash,
            blockNumber: command.blockNumber,
            confirmations: command.confirmations,
            completedAt: command.now,
          },
        },
      ];
    case 'MarkFailed':
      if (state.status === 'completed' || state.status === 'failed') return [];
      return [
        {
          type: 'SettlementFailed',
          data: {
            attempt: state.attempt,
            reason: command.reason,
            ...(command.rejected && { rejected: true }),
            retryAt: command.retryAt,
            failedAt: command.now,
          },
        },
      ];
    case 'Retry':
      if (state.status !== 'failed') return [];
      return [{ type: 'SettlementRetried', data: { attempt: state.attempt + 1, retriedAt: command.now } }];
  }
}

function evolve(state: SettlementState, event: SettlementEvent): SettlementState {
  if (event.type === 'SettlementRequested') {
    const d = event.data;
    return {
      id: d.settlementId,
      invoiceId: d.invoiceId,
      merchantId: d.merchantId,
      chain: d.chain,
      token: d.token,
      tokenDecimals: d.tokenDecimals,
      fromAddress: d.fromAddress,
      derivationIndex: d.derivationIndex,
      grossAmount: BigInt(d.grossAmount),
      platformFee: BigInt(d.platformFee),
      networkFee: BigInt(d.networkFee),
      netAmount: BigInt(d.netAmount),
      merchantWallet: d.merchantWallet,
      status: 'pending',
      attempt: 1,
      prepared: null,
      rejected: false,
      preparedHashes: [],
      txHash: null,
      failureReason: null,
      retryAt: null,
      createdAt: d.requestedAt,
      updatedAt: d.requestedAt,
      initiatedAt: null,
      completedAt: null,
      failedAt: null,
    };
  }
  if (!state) throw new Error(`${event.type} before SettlementRequested`);
  switch (event.type) {
    case 'SettlementWalletSet':
      return { ...state, merchantWallet: event.data.merchantWallet, updatedAt: event.data.setAt };
    case 'SettlementTransactionPrepared':
      return {
        ...state,
        prepared: { txHash: event.data.txHash, raw: event.data.raw },
        preparedHashes: [...state.preparedHashes, event.data.txHash],
        updatedAt: event.data.preparedAt,
      };
    case 'SettlementSubmitted':
      return {
        ...state,
        status: 'submitted',
        txHash: event.data.txHash,
        initiatedAt: event.data.submittedAt,
        updatedAt: event.data.submittedAt,
      };
    case 'SettlementCompleted':
      return {
        ...state,
        status: 'completed',
        txHash: event.data.txHash,
        completedAt: event.data.completedAt,
        updatedAt: event.data.completedAt,
      };
    case 'SettlementFailed':
      return {
        ...state,
        status: 'failed',
        failureReason: event.data.reason,
        rejected: event.data.rejected === true,
        retryAt: event.data.retryAt,
        failedAt: event.data.failedAt,
        updatedAt: event.data.failedAt,
      };
    case 'SettlementRetried':
      return {
        ...state,
        status: 'pending',
        attempt: event.data.attempt,
        prepared: state.rejected ? null : state.prepared,
        rejected: false,
        retryAt: null,
        updatedAt: event.data.retriedAt,
      };
  }
}

export const settlementDecider: Decider<SettlementCommand, SettlementState, SettlementEvent> = {
  initialState: null,
  decide,
  evolve,
};
