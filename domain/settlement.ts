// The settlement aggregate (stream settlement-<id>): paying an invoice's
// receipts, net of fees, from its deposit address to the merchant's wallet.
//
// No payout may ever be sent twice. The transaction of an attempt is prepared
// (and so named by its hash) and recorded before it is broadcast; after a
// crash the recorded transaction is broadcast again, never a new one, and a
// new attempt is only made once the chain is known not to have the last one.
//
// Nothing here waits in silence: a refusal (fees larger than the amount, the
// chain or node saying no, the payments withdrawn by a reorg) is an event with
// a reason the merchant and the operator can read (operations.md §3,
// `failureReason`). Until a transaction is prepared the settlement follows
// the invoice's receipts (re-priced) and the merchant's current wallet;
// after that, a change it can no longer follow is raised for a person.
import { v5 as uuidv5 } from 'uuid';
import { DomainError, type Decider, type DomainEvent } from './decider.ts';
import * as payout from './payout-attempt.ts';
import { streams } from './streams.ts';

const SETTLEMENT_ID_NAMESPACE = '3d4b8f6e-9a1c-4e2b-8c7d-5f0a1b2c3d4e';

/** One settlement per invoice: its id follows from the invoice's. */
export const settlementIdOf = (invoiceId: string) => uuidv5(`${invoiceId}/settlement`, SETTLEMENT_ID_NAMESPACE);
export const settlementStreamName = streams.settlement.name;
/** The stream of an invoice's one settlement (its refund holds before it is requested, too). */
export const settlementStreamOf = (invoiceId: string) => settlementStreamName(settlementIdOf(invoiceId));

export type SettlementStatus = 'pending' | 'submitted' | 'completed' | 'failed';

/** Why a settlement is not going on (operations.md §3), as the merchant and the operator see it. */
export type SettlementFailureReason =
  | 'no_wallet'
  | 'fees_exceed_amount'
  | 'payment_reversed'
  | 'rejected_by_network'
  | 'node_unavailable'
  | 'fee_wallet_empty';

/** A recorded payment a settlement pays out: its transaction, output or log index, and base units. */
export interface PayoutSource {
  txHash: string;
  index: number;
  amount: string;
}

/**
 * What a refund's payout from the deposit did to its coins (a UTXO chain):
 * the coins it spent, and its change back to the deposit (null: the rest was
 * below the dust limit and went to the miners). The settlement then pays out
 * the change instead of the spent coins.
 */
export interface RefundCoins {
  spent: PayoutSource[];
  change: PayoutSource | null;
}

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
    /** The counted, confirmed payments it pays out (absent in settlements requested before it was recorded). */
    sources?: PayoutSource[];
  }
>;
/**
 * The amounts changed before any transaction was prepared: the invoice's
 * receipts changed (a reorg withdrew a payment, a later one was confirmed),
 * or the network fee was priced anew when the payout was prepared.
 */
export type SettlementRepriced = DomainEvent<
  'SettlementRepriced',
  {
    grossAmount: string;
    platformFee: string;
    networkFee: string;
    netAmount: string;
    sources?: PayoutSource[];
    /** refund_held / refund_released: a refund paid from the deposit took part of it, or gave it back. */
    cause: 'receipts_changed' | 'network_fee' | 'refund_held' | 'refund_released';
    repricedAt: string;
  }
>;
/** Something a settlement can no longer follow by itself (its payout was prepared already): for a person. */
export type SettlementAttentionRaised = DomainEvent<
  'SettlementAttentionRaised',
  {
    /**
     * paid_elsewhere: the invoice is now paid on another address (another token) than this settlement pays out from.
     * platform_fee_uncollected: the payout completed, but the platform fee the chain sends after it never reached
     * the treasury (Tron: its call failed, out of energy, and failed again when sent once more): it stays on the
     * deposit address; `detail` says so in the chain's words.
     */
    reason: 'payment_reversed' | 'received_after_payout' | 'paid_elsewhere' | 'platform_fee_uncollected';
    detail?: string;
    /** The invoice's counted, confirmed total now, base units. */
    grossAmount: string;
    sources?: PayoutSource[];
    raisedAt: string;
  }
>;
/** An operator looked at what was raised and settled it outside the service (a refund, a manual payout, nothing). */
export type SettlementAttentionResolved = DomainEvent<
  'SettlementAttentionResolved',
  { note: string; resolvedAt: string }
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
  {
    txHash: string;
    blockNumber: number;
    confirmations: number;
    completedAt: string;
    /** What reached the merchant, so that the invoice can be settled from this event alone (absent in older ones). */
    invoiceId?: string;
    netAmount?: string;
    token?: string;
    tokenDecimals?: number;
  }
>;
/** `retryAt` null: final (fees_exceed_amount, payment_reversed). */
export type SettlementFailed = DomainEvent<
  'SettlementFailed',
  payout.AttemptFailure & {
    /** The reason as operations.md names it (absent in older events: `rejected_by_network` or `node_unavailable`). */
    code?: SettlementFailureReason;
  }
>;
export type SettlementRetried = DomainEvent<'SettlementRetried', payout.AttemptRetried>;
/**
 * A refund is paid from the deposit before the settlement is (refunds.md,
 * "Where the money comes from"): its amount comes out of what the merchant
 * receives, and the settlement prepares nothing until the refund is out, so
 * the two never spend the same coins.
 */
export type SettlementRefundHeld = DomainEvent<
  'SettlementRefundHeld',
  {
    refundId: string;
    amount: string;
    /**
     * Another token than the settlement's, paid to its deposit (a wrong-token payment); absent: the settlement's.
     * Always given on a hold taken before the settlement was requested (no settlement names a token yet).
     */
    token?: string;
    /**
     * Given only on a hold taken before the settlement was requested: the deposit the refund is paid from.
     * The settlement, once requested, takes the holds on its own chain and address and ignores the others.
     */
    chain?: string;
    fromAddress?: string;
    /**
     * What of `amount` comes out of the settlement's own token, the rest being what the deposit holds beyond the
     * payments it pays out (a late payment); given only when less than `amount` (absent: all of it).
     */
    fromSettlement?: string;
    /** Taken by the refund's payout, its approval recorded (see SettlementRefundHoldApproved); absent: by the approval. */
    approved?: true;
    heldAt: string;
  }
>;
/**
 * The refund's payout found its hold, the refund's approval recorded: from
 * now on only the refund's end releases it, never the release of a hold
 * left by an approval that stopped before it was recorded
 * (ReleaseUnapprovedHold). Decided on this stream, so the payout and that
 * release never both win.
 */
export type SettlementRefundHoldApproved = DomainEvent<
  'SettlementRefundHoldApproved',
  { refundId: string; approvedAt: string }
>;
/** The held refund was paid (its amount stays out of the settlement), or will never be (it comes back). */
export type SettlementRefundReleased = DomainEvent<
  'SettlementRefundReleased',
  { refundId: string; paid: boolean; coins?: RefundCoins; releasedAt: string }
>;
/**
 * Refunds paid from the deposit gave back everything it received: nothing is
 * left to settle. The settlement ends `completed` with an amount of 0 and no
 * transaction (interface.md has no state of its own for it); the invoice is
 * not settled, since nothing reached the merchant.
 */
export type SettlementRefundedInFull = DomainEvent<'SettlementRefundedInFull', { closedAt: string }>;

export type SettlementEvent =
  | SettlementRequested
  | SettlementWalletSet
  | SettlementTransactionPrepared
  | SettlementSubmitted
  | SettlementCompleted
  | SettlementFailed
  | SettlementRetried
  | SettlementRepriced
  | SettlementAttentionRaised
  | SettlementAttentionResolved
  | SettlementRefundHeld
  | SettlementRefundHoldApproved
  | SettlementRefundReleased
  | SettlementRefundedInFull;

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
      sources?: PayoutSource[];
      now: string;
    })
  /** The invoice's counted, confirmed receipts changed after the settlement was requested. */
  | { type: 'RepriceForReceipts'; grossAmount: bigint; fromAddress?: string; sources?: PayoutSource[]; now: string }
  /** The network fee of the payout, priced when it is prepared. */
  | { type: 'PriceNetworkFee'; networkFee: bigint; now: string }
  | { type: 'SetWallet'; merchantWallet: string; now: string }
  | {
      type: 'PrepareTransaction';
      txHash: string;
      raw: string;
      /** What the transaction pays, as the settlement stood when it was built (absent: not checked). */
      paying?: { netAmount: bigint; merchantWallet: string | null };
      now: string;
    }
  | { type: 'MarkSubmitted'; txHash: string; now: string }
  /** `platformFeeUncollected`: raised for a person, with the completion. */
  | payout.MarkCompleted
  | {
      type: 'MarkFailed';
      reason: string;
      code?: SettlementFailureReason;
      rejected: boolean;
      /** null: final, nothing an attempt can change (see SettlementFailed). */
      retryAt: string | null;
      now: string;
    }
  | { type: 'Retry'; now: string }
  | { type: 'ResolveAttention'; note: string; now: string }
  /**
   * Refused (conflict) once a payout is prepared, or from another address: the refund is then paid another way.
   * Another token on the deposit (a wrong-token payment) is held too, so that the two payouts never run at once
   * from one address, but takes nothing from the settlement's amount.
   */
  | {
      type: 'HoldForRefund';
      refundId: string;
      /** Required before the settlement is requested (the deposit's chain); the settlement's own after. */
      chain?: string;
      token: string;
      fromAddress: string;
      amount: bigint;
      /**
       * What the deposit holds of `token` beyond the payments the settlement pays out (live, confirmed, not
       * counted: a late payment), taken first; absent: nothing.
       */
      beyond?: bigint;
      /** The chain's payouts spend coins whole (Bitcoin): refused while another refund from the deposit is on its way. */
      oneAtATime?: boolean;
      /**
       * Asked by the refund's payout, its approval recorded: the hold, found or taken, is marked approved
       * (SettlementRefundHoldApproved) and no longer released by ReleaseUnapprovedHold.
       */
      approved?: true;
      now: string;
    }
  /**
   * A hold taken at or before `heldBefore` whose refund's approval never
   * found it (see SettlementRefundHoldApproved) is given back, as ReleaseRefund
   * unpaid; any other (approved, paid, younger, none) is left as it is.
   */
  | { type: 'ReleaseUnapprovedHold'; refundId: string; heldBefore: string; now: string }
  /**
   * The refund's payout, its approval recorded, finds its hold before it prepares a transaction from the deposit
   * and marks it approved; refused (conflict) when there is none (given back), and the payout then takes it again
   * by the approval's rules (HoldForRefund `approved`) or pays from the refund wallet.
   */
  | { type: 'ApproveRefundHold'; refundId: string; now: string }
  /** `coins`: what the paid refund spent of the deposit and gave back as change (a UTXO chain). */
  | { type: 'ReleaseRefund'; refundId: string; paid: boolean; coins?: RefundCoins; now: string };

/** A refund paid from the deposit; `paid` once it is out. */
export interface RefundHold {
  refundId: string;
  amount: bigint;
  /** Another token than the settlement's (a wrong-token payment): its amount is not the settlement's. */
  token?: string;
  /** What of `amount` the settlement gives, when less (the rest was beyond its payments, see HoldForRefund). */
  fromSettlement?: bigint;
  paid: boolean;
  /** Its refund's payout found it (SettlementRefundHoldApproved): only the refund's end releases it. */
  approved?: boolean;
  coins?: RefundCoins;
  /** When it was taken: a hold whose refund was not approved soon after is one whose approval was never recorded. */
  heldAt: string;
}

export interface Settlement extends SettlementSource, payout.PayoutAttempts {
  id: string;
  invoiceId: string;
  merchantId: string;
  grossAmount: bigint;
  platformFee: bigint;
  networkFee: bigint;
  netAmount: bigint;
  platformFeeBps: number;
  merchantWallet: string | null;
  status: SettlementStatus;
  /** The payments paid out, when recorded. */
  sources: PayoutSource[] | undefined;
  /** The last failure in words. */
  failureReason: string | null;
  /** Why it is not going on, as operations.md names it; null while nothing stands in its way. */
  failureCode: SettlementFailureReason | null;
  /** What needs a person, newest last (see SettlementAttentionRaised). */
  attention: SettlementAttentionRaised['data'][];
  /** Refunds paid from the deposit: their amounts are not the merchant's. */
  refundHolds: RefundHold[];
  createdAt: string;
  updatedAt: string;
  initiatedAt: string | null;
  completedAt: string | null;
  failedAt: string | null;
}

/** A refund held before the settlement was requested, with the deposit it is paid from. */
export interface HoldBeforeRequest extends RefundHold {
  chain: string;
  fromAddress: string;
  token: string;
}

/**
 * The stream before SettlementRequested, when refunds from a deposit were
 * held on it (the invoice still open, or confirmed and its settlement not yet
 * requested). A shape of its own rather than a Settlement with a flag: there
 * is no settlement yet (no amounts, no status, nothing to pay out), so every
 * reader must ask for the requested one (requestedSettlement) and the
 * compiler finds any that does not. The holds only serialise refunds from a
 * deposit with the settlement's request on one stream.
 */
export interface PendingHolds {
  requested: false;
  refundHolds: HoldBeforeRequest[];
}

export type SettlementState = Settlement | PendingHolds | null;

export const isPendingHolds = (s: SettlementState): s is PendingHolds => s !== null && 'requested' in s;

/** The settlement, once requested; a stream with only refund holds has none. */
export const requestedSettlement = (s: SettlementState): Settlement | null => (isPendingHolds(s) ? null : s);

/** The platform's share, rounded down: the merchant is never charged more than the stated rate. */
export function platformFeeOf(gross: bigint, bps: number): bigint {
  return (gross * BigInt(bps)) / 10_000n;
}

/**
 * The amounts of a payout of `gross` at `bps`, with `networkFee` paid out of
 * it and `refunded` given back from the deposit. The platform fee is on what
 * was received and is not given back (refunds.md), but never more than is left.
 */
function amountsOf(gross: bigint, bps: number, networkFee: bigint, refunded = 0n) {
  const left = gross - refunded;
  const fee = platformFeeOf(gross, bps);
  const platformFee = fee < left ? fee : left > 0n ? left : 0n;
  const net = left - platformFee - networkFee;
  // Fees larger than the amount leave nothing to pay (and fail the settlement), never a negative amount.
  return { platformFee, networkFee, netAmount: net > 0n ? net : 0n };
}

const failed = (
  state: Settlement,
  code: SettlementFailureReason,
  reason: string,
  now: string,
  retryAt: string | null = null,
  rejected = false,
): SettlementFailed => ({
  type: 'SettlementFailed',
  data: { attempt: state.attempt, reason, code, ...(rejected && { rejected: true }), retryAt, failedAt: now },
});

const FEES_EXCEED = 'The amount received does not cover the fees';
const REVERSED = 'The payments of this settlement were withdrawn by a reorganisation of the chain';

/** What a hold takes out of the settlement's amount. */
const fromSettlementOf = (h: RefundHold) => h.fromSettlement ?? h.amount;

/** What refunds paid from the deposit took of the settlement's token. */
const heldForRefunds = (s: Settlement) =>
  s.refundHolds.reduce((sum, h) => (h.token === undefined ? sum + fromSettlementOf(h) : sum), 0n);

/**
 * The part of a refund of `amount` the settlement gives: the deposit's
 * `beyond` (what it holds past the payments the settlement pays out, a late
 * payment) goes first, less what the `others` holds of that token on it took
 * of it already; so a late payment given back never costs the merchant.
 */
function takenFromSettlement(amount: bigint, beyond: bigint, others: RefundHold[]): bigint {
  const taken = others.reduce((sum, h) => sum + h.amount - fromSettlementOf(h), 0n);
  const left = beyond > taken ? beyond - taken : 0n;
  return amount > left ? amount - left : 0n;
}

/** The hold's `fromSettlement`, recorded only when beyond took part of it. */
const fromSettlementField = (amount: bigint, fromSettlement: bigint) =>
  fromSettlement < amount ? { fromSettlement: fromSettlement.toString() } : {};

/** What refunds from the deposit, other than `refundId`, still have to take of `token`: on the chain, it is still there. */
export const unpaidHoldsOf = (s: Settlement, token: string, refundId: string) =>
  s.refundHolds
    .filter((h) => !h.paid && h.refundId !== refundId && (h.token ?? s.token) === token)
    .reduce((sum, h) => sum + h.amount, 0n);

/** A refund from the deposit is on its way: the settlement waits for it. */
export const waitsForRefund = (s: Settlement) => s.refundHolds.some((h) => !h.paid);

const outpoint = (c: PayoutSource) => `${c.txHash}:${c.index}`;

/**
 * The coins the settlement's payout spends: the payments it pays out, less
 * those a refund from the deposit spent, plus each such refund's change.
 * Undefined where no payments were recorded (older settlements).
 */
export function payoutSources(s: Pick<Settlement, 'sources' | 'refundHolds'>): PayoutSource[] | undefined {
  if (!s.sources) return undefined;
  const coins = s.refundHolds.flatMap((h) => h.coins ?? []);
  const spent = new Set(coins.flatMap((c) => c.spent).map(outpoint));
  return [...s.sources, ...coins.flatMap((c) => c.change ?? [])].filter((c) => !spent.has(outpoint(c)));
}

/**
 * The coins a refund from the deposit spends before the settlement is
 * requested (a chain whose payouts spend coins whole): the deposit's
 * `payments` the settlement will pay out, less those an earlier refund from
 * it spent, plus that refund's change. The same coins payoutSources gives
 * once the request names those payments and takes the holds over.
 */
export function sourcesBeforeRequest(
  payments: PayoutSource[],
  pending: PendingHolds | null,
  deposit: Pick<HoldBeforeRequest, 'chain' | 'fromAddress'>,
): PayoutSource[] {
  const holds = (pending?.refundHolds ?? []).filter(
    (h) => h.chain === deposit.chain && h.fromAddress === deposit.fromAddress,
  );
  return payoutSources({ sources: payments, refundHolds: holds })!;
}

/** What refunds from a deposit paid back to it as change: never a payment. */
export const refundChangeOf = (s: SettlementState): PayoutSource[] =>
  (s?.refundHolds ?? []).flatMap((h) => (h.coins?.change ? [h.coins.change] : []));

const paysAsBuilt = (s: Settlement, paying: { netAmount: bigint; merchantWallet: string | null }) =>
  s.netAmount === paying.netAmount && s.merchantWallet === paying.merchantWallet;

/** Not yet paid out: nothing is prepared, or what was prepared the chain refused for good. */
const isUnprepared = (s: Settlement) => s.prepared === null && (s.status === 'pending' || s.status === 'failed');

/**
 * A refund may still be paid from the deposit, and new receipts re-price the
 * settlement: it has never prepared a transaction and paid nothing. A refused
 * one counts: refused is the chain's word for now, not forever (a Bitcoin
 * payout declared stuck still in some mempool, an EVM step one node refused
 * and another holds), and if it is mined after all it pays what it was
 * prepared for, with the deposit's coins.
 */
export const holdsRefunds = (s: Settlement) =>
  s.preparedHashes.length === 0 && isUnprepared(s) && s.status !== 'completed';

/**
 * The settlement requested; it starts with the refunds held on its own chain
 * and deposit before (re-priced without those of its token, waiting for the
 * unpaid ones, ended when they took everything), exactly as if they had been
 * held just after. Holds on another deposit are not its business.
 */
function request(
  command: Extract<SettlementCommand, { type: 'RequestSettlement' }>,
  before: PendingHolds | null,
): SettlementEvent[] {
  const { platformFee, netAmount } = amountsOf(command.grossAmount, command.platformFeeBps, command.networkFee);
  const requested: SettlementRequested = {
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
      ...(command.sources && { sources: command.sources }),
    },
  };
  const created = next(before, requested);
  if (heldForRefunds(created) > 0n) {
    const repriced = repricedTo(created, created.grossAmount, created.networkFee, 'refund_held', command.now);
    if (!refundsTakeAll(created)) return [requested, ...withFeesFailure(created, repriced, command.now)];
    // Refunds took everything: nothing to fail for; ended at once when they are all out, else when the last is.
    if (waitsForRefund(created)) return [requested, repriced];
    return [requested, repriced, { type: 'SettlementRefundedInFull', data: { closedAt: command.now } }];
  }
  if (netAmount > 0n) return [requested];
  // Recorded, and failed where everyone can see why, rather than refused in silence.
  return [requested, failed(created, 'fees_exceed_amount', FEES_EXCEED, command.now)];
}

/**
 * The invoice's counted, confirmed receipts changed. Before a payout is
 * prepared the settlement takes the new amount (or fails when nothing is
 * left to pay); after, the change is raised for a person, since the payout
 * may already be on its way.
 */
function reprice(
  command: Extract<SettlementCommand, { type: 'RepriceForReceipts' }>,
  state: Settlement,
): SettlementEvent[] {
  // Amounts paid to another address (another token) cannot be added to this settlement's: a person decides.
  const elsewhere = command.fromAddress !== undefined && command.fromAddress !== state.fromAddress;
  if (command.grossAmount === state.grossAmount && !elsewhere) return [];
  if (elsewhere || !holdsRefunds(state)) {
    const reason = elsewhere
      ? 'paid_elsewhere'
      : command.grossAmount < state.grossAmount
        ? 'payment_reversed'
        : 'received_after_payout';
    const last = state.attention.at(-1);
    if (last?.reason === reason && last.grossAmount === command.grossAmount.toString()) return [];
    return [
      {
        type: 'SettlementAttentionRaised',
        data: {
          reason,
          grossAmount: command.grossAmount.toString(),
          ...(command.sources && { sources: command.sources }),
          raisedAt: command.now,
        },
      },
    ];
  }
  const repriced = repricedTo(
    state,
    command.grossAmount,
    state.networkFee,
    'receipts_changed',
    command.now,
    command.sources,
  );
  if (command.grossAmount === 0n) {
    return [repriced, failed(next(state, repriced), 'payment_reversed', REVERSED, command.now)];
  }
  return withFeesFailure(state, repriced, command.now);
}

/** The settlement re-priced to `gross` with `networkFee` paid out of it. */
function repricedTo(
  state: Settlement,
  gross: bigint,
  networkFee: bigint,
  cause: SettlementRepriced['data']['cause'],
  now: string,
  sources?: PayoutSource[],
): SettlementRepriced {
  const amounts = amountsOf(gross, state.platformFeeBps, networkFee, heldForRefunds(state));
  return {
    type: 'SettlementRepriced',
    data: {
      grossAmount: gross.toString(),
      platformFee: amounts.platformFee.toString(),
      networkFee: amounts.networkFee.toString(),
      netAmount: amounts.netAmount.toString(),
      ...(sources && { sources }),
      cause,
      repricedAt: now,
    },
  };
}

/** The re-pricing, and the settlement failed for good when it leaves nothing to pay. */
function withFeesFailure(state: Settlement, repriced: SettlementRepriced, now: string): SettlementEvent[] {
  if (BigInt(repriced.data.netAmount) > 0n) return [repriced];
  return [repriced, failed(next(state, repriced), 'fees_exceed_amount', FEES_EXCEED, now)];
}

function priceNetworkFee(
  command: Extract<SettlementCommand, { type: 'PriceNetworkFee' }>,
  state: Settlement,
): SettlementEvent[] {
  // Priced once, for the first transaction: a replacement's extra cost (a fee bump) is the platform's, never the merchant's.
  if (state.status !== 'pending' || state.preparedHashes.length > 0 || command.networkFee === state.networkFee)
    return [];
  if (command.networkFee < 0n) throw new DomainError('bad_request', 'A network fee cannot be negative');
  const repriced = repricedTo(state, state.grossAmount, command.networkFee, 'network_fee', command.now);
  return withFeesFailure(state, repriced, command.now);
}

/**
 * A refund paid from the deposit, accepted only while nothing is prepared
 * (decided on this stream, so a refund and the payout's preparation never
 * both win) and only from this deposit's own asset and what is left of it.
 */
function holdForRefund(command: Extract<SettlementCommand, { type: 'HoldForRefund' }>, state: Settlement) {
  const found = state.refundHolds.find((h) => h.refundId === command.refundId);
  if (found) return approvedOf(command, found);
  if (!holdsRefunds(state)) {
    throw new DomainError('conflict', 'The settlement is already being paid out');
  }
  if (command.fromAddress !== state.fromAddress || (command.chain !== undefined && command.chain !== state.chain)) {
    throw new DomainError('conflict', 'The settlement pays out another address');
  }
  if (command.oneAtATime && waitsForRefund(state)) {
    throw new DomainError('conflict', 'Another refund from the deposit is on its way');
  }
  if (command.token !== state.token) {
    // The invoice's reservation already bounds it by what arrived of that token; the settlement only waits.
    const data = { refundId: command.refundId, amount: command.amount.toString(), token: command.token };
    const held = { ...data, ...approvedField(command), heldAt: command.now };
    return [{ type: 'SettlementRefundHeld', data: held } satisfies SettlementRefundHeld];
  }
  const ownHolds = state.refundHolds.filter((h) => h.token === undefined);
  const fromSettlement = takenFromSettlement(command.amount, command.beyond ?? 0n, ownHolds);
  if (command.amount <= 0n || fromSettlement > state.grossAmount - heldForRefunds(state)) {
    throw new DomainError('conflict', 'The deposit holds less than the refund');
  }
  const held: SettlementRefundHeld = {
    type: 'SettlementRefundHeld',
    data: {
      refundId: command.refundId,
      amount: command.amount.toString(),
      ...fromSettlementField(command.amount, fromSettlement),
      ...approvedField(command),
      heldAt: command.now,
    },
  };
  // Nothing out of the settlement: it only waits for the refund, at the same amounts.
  if (fromSettlement === 0n) return [held];
  const after = next(state, held);
  const repriced = repricedTo(after, after.grossAmount, after.networkFee, 'refund_held', command.now);
  // Refunds taking everything leave nothing to fail for: the settlement waits for them, then ends (ReleaseRefund).
  if (refundsTakeAll(after)) return [held, repriced];
  return [held, ...withFeesFailure(after, repriced, command.now)];
}

/** A hold found again: marked approved when the refund's payout asks, once. */
function approvedOf(command: { approved?: true; refundId: string; now: string }, hold: RefundHold) {
  if (!command.approved || hold.approved || hold.paid) return [];
  const data = { refundId: command.refundId, approvedAt: command.now };
  return [{ type: 'SettlementRefundHoldApproved', data } satisfies SettlementRefundHoldApproved];
}

const approvedField = (command: { approved?: true }) => (command.approved ? { approved: true as const } : {});

/** The hold may be given back without its refund's end: no payout found it, and it was taken by `heldBefore`. */
export const isUnapprovedHold = (hold: RefundHold, heldBefore: string) =>
  !hold.paid && !hold.approved && Date.parse(hold.heldAt) <= Date.parse(heldBefore);

/** ApproveRefundHold: the hold found is marked approved (once); none is a refusal. */
function approveHold(command: Extract<SettlementCommand, { type: 'ApproveRefundHold' }>, holds: readonly RefundHold[]) {
  const hold = holds.find((h) => h.refundId === command.refundId);
  if (!hold) throw new DomainError('conflict', 'The deposit no longer holds this refund');
  return approvedOf({ approved: true, refundId: command.refundId, now: command.now }, hold);
}

/** ReleaseUnapprovedHold as the ReleaseRefund it is, when the hold may be given back; else nothing. */
function unapprovedRelease(
  command: Extract<SettlementCommand, { type: 'ReleaseUnapprovedHold' }>,
  holds: readonly RefundHold[],
): Extract<SettlementCommand, { type: 'ReleaseRefund' }> | undefined {
  const hold = holds.find((h) => h.refundId === command.refundId);
  if (!hold || !isUnapprovedHold(hold, command.heldBefore)) return undefined;
  return { type: 'ReleaseRefund', refundId: command.refundId, paid: false, now: command.now };
}

/** Refunds from the deposit take all it received: no fee can be short of anything. */
const refundsTakeAll = (s: Settlement) => s.grossAmount > 0n && heldForRefunds(s) >= s.grossAmount;

/**
 * Before the settlement is requested the stream only takes refund holds:
 * refunds from a deposit of an invoice not yet settling (still open, or
 * confirmed and not yet requested). The invoice's reservation (ReserveRefund)
 * already bounds each by what arrived; here they are only put in line with
 * the settlement's request, which takes them over.
 */
function beforeRequest(command: SettlementCommand, before: PendingHolds | null): SettlementEvent[] {
  const holds = before?.refundHolds ?? [];
  switch (command.type) {
    case 'RequestSettlement':
      return request(command, before);
    case 'HoldForRefund': {
      const found = holds.find((h) => h.refundId === command.refundId);
      if (found) return approvedOf(command, found);
      if (command.chain === undefined) throw new DomainError('not_found', 'Settlement not found');
      if (command.amount <= 0n) throw new DomainError('bad_request', 'A refund amount must be greater than 0');
      const fromSameDeposit = (h: HoldBeforeRequest) =>
        h.chain === command.chain && h.fromAddress === command.fromAddress;
      if (command.oneAtATime && holds.some((h) => !h.paid && fromSameDeposit(h))) {
        throw new DomainError('conflict', 'Another refund from the deposit is on its way');
      }
      const { refundId, token, chain, fromAddress, amount, now } = command;
      const sameAsset = holds.filter((h) => fromSameDeposit(h) && h.token === token);
      const fromSettlement = takenFromSettlement(amount, command.beyond ?? 0n, sameAsset);
      const data = {
        refundId,
        amount: amount.toString(),
        token,
        chain,
        fromAddress,
        ...fromSettlementField(amount, fromSettlement),
        ...approvedField(command),
        heldAt: now,
      };
      return [{ type: 'SettlementRefundHeld', data } satisfies SettlementRefundHeld];
    }
    case 'ReleaseRefund': {
      const hold = holds.find((h) => h.refundId === command.refundId);
      // Given back or paid: nothing to re-price, the settlement will start from what is left.
      return !hold || hold.paid ? [] : [releasedOf(command)];
    }
    case 'ReleaseUnapprovedHold': {
      const release = unapprovedRelease(command, holds);
      return release ? beforeRequest(release, before) : [];
    }
    case 'ApproveRefundHold':
      return approveHold(command, holds);
    default:
      throw new DomainError('not_found', 'Settlement not found');
  }
}

const releasedOf = (command: Extract<SettlementCommand, { type: 'ReleaseRefund' }>): SettlementRefundReleased => ({
  type: 'SettlementRefundReleased',
  data: {
    refundId: command.refundId,
    paid: command.paid,
    ...(command.paid && command.coins && { coins: command.coins }),
    releasedAt: command.now,
  },
});

function decide(command: SettlementCommand, state: SettlementState): SettlementEvent[] {
  if (state === null || isPendingHolds(state)) return beforeRequest(command, state);
  switch (command.type) {
    case 'RequestSettlement':
      // One settlement per invoice: asking again (the invoice confirmed again after a reorg) re-prices it,
      // if it is paid on the same address; amounts of two tokens cannot be added up.
      return reprice({ ...command, type: 'RepriceForReceipts' }, state);
    case 'RepriceForReceipts':
      return reprice(command, state);
    case 'PriceNetworkFee':
      return priceNetworkFee(command, state);
    case 'SetWallet':
      // The merchant's current wallet, until a transaction for some wallet is prepared.
      if (state.merchantWallet === command.merchantWallet || !isUnprepared(state)) return [];
      return [{ type: 'SettlementWalletSet', data: { merchantWallet: command.merchantWallet, setAt: command.now } }];
    case 'HoldForRefund':
      return holdForRefund(command, state);
    case 'ReleaseUnapprovedHold': {
      const release = unapprovedRelease(command, state.refundHolds);
      return release ? decide(release, state) : [];
    }
    case 'ApproveRefundHold':
      return approveHold(command, state.refundHolds);
    case 'ReleaseRefund': {
      const hold = state.refundHolds.find((h) => h.refundId === command.refundId);
      if (!hold || hold.paid) return [];
      const released = releasedOf(command);
      // Paid, or of nothing the settlement's amount gave (another token, or all beyond its payments): nothing to re-price.
      if (command.paid || hold.token !== undefined || fromSettlementOf(hold) === 0n) {
        const after = next(state, released);
        // The last refund out, and nothing left to pay: the settlement ends here, never failed.
        if (refundsTakeAll(after) && !waitsForRefund(after) && isUnprepared(after)) {
          return [released, { type: 'SettlementRefundedInFull', data: { closedAt: command.now } }];
        }
        return [released];
      }
      const after = next(state, released);
      const repriced = repricedTo(after, after.grossAmount, after.networkFee, 'refund_released', command.now);
      return [released, ...withFeesFailure(after, repriced, command.now)];
    }
    case 'PrepareTransaction':
      // Not while a refund from the deposit is on its way: both would spend the same coins.
      if (state.status !== 'pending' || state.prepared !== null || waitsForRefund(state)) return [];
      if (state.merchantWallet === null) throw new DomainError('conflict', 'The merchant has no wallet for this chain');
      if (state.netAmount <= 0n) throw new DomainError('conflict', FEES_EXCEED);
      // Built for what the settlement no longer pays (re-priced, or another wallet, while it was being built):
      // not recorded, so never sent; the next look builds what it pays now.
      if (command.paying && !paysAsBuilt(state, command.paying)) return [];
      return [
        {
          type: 'SettlementTransactionPrepared',
          data: { attempt: state.attempt, txHash: command.txHash, raw: command.raw, preparedAt: command.now },
        },
      ];
    case 'MarkSubmitted':
      // An earlier attempt's transaction found on the chain is adopted: it is the payout.
      if (state.status !== 'pending' || !payout.isOneOfItsTransactions(state, command.txHash)) return [];
      return [
        {
          type: 'SettlementSubmitted',
          data: { attempt: state.attempt, txHash: command.txHash, submittedAt: command.now },
        },
      ];
    case 'MarkCompleted': {
      if (state.status === 'completed') return [];
      const completed: SettlementEvent = {
        type: 'SettlementCompleted',
        data: {
          ...payout.landed(state, command, 'settlement'),
          invoiceId: state.invoiceId,
          netAmount: state.netAmount.toString(),
          token: state.token,
          tokenDecimals: state.tokenDecimals,
        },
      };
      if (!command.platformFeeUncollected) return [completed];
      // The merchant was paid; what the platform was not is for a person, in the same write.
      return [
        completed,
        {
          type: 'SettlementAttentionRaised',
          data: {
            reason: 'platform_fee_uncollected',
            grossAmount: state.grossAmount.toString(),
            detail: command.platformFeeUncollected,
            raisedAt: command.now,
          },
        },
      ];
    }
    case 'MarkFailed':
      if (state.status === 'completed' || state.status === 'failed') return [];
      return [
        failed(
          state,
          command.code ?? (command.rejected ? 'rejected_by_network' : 'node_unavailable'),
          command.reason,
          command.now,
          command.retryAt,
          command.rejected,
        ),
      ];
    case 'ResolveAttention':
      if (state.attention.length === 0)
        throw new DomainError('conflict', 'Nothing about this settlement needs attention');
      return [{ type: 'SettlementAttentionResolved', data: { note: command.note, resolvedAt: command.now } }];
    case 'Retry':
      return payout.retried('SettlementRetried', state, command.now);
  }
}

/** The failure code of an event recorded before codes were (a rejection, or an unknown outcome). */
const codeOf = (d: SettlementFailed['data']): SettlementFailureReason =>
  d.code ?? (d.rejected ? 'rejected_by_network' : 'node_unavailable');

/** The state after `event`, which must leave a requested settlement. */
function next(state: SettlementState, event: SettlementEvent): Settlement {
  const after = evolve(state, event);
  if (after === null || isPendingHolds(after)) throw new Error(`${event.type} leaves no settlement`);
  return after;
}

/** The holds taken before the request that are the settlement's: on its chain and deposit; its own token's without one. */
const holdsTakenOver = (before: PendingHolds | null, d: SettlementRequested['data']): RefundHold[] =>
  (before?.refundHolds ?? [])
    .filter((h) => h.chain === d.chain && h.fromAddress === d.fromAddress)
    .map(({ refundId, amount, fromSettlement, paid, approved, coins, token, heldAt }) => ({
      refundId,
      amount,
      ...(fromSettlement !== undefined && { fromSettlement }),
      paid,
      ...(approved && { approved }),
      ...(coins && { coins }),
      ...(token !== d.token && { token }),
      heldAt,
    }));

/** The holds after a release: paid ones stay (their amount is out), the others are given back. */
function releasedHolds<H extends RefundHold>(holds: H[], d: SettlementRefundReleased['data']): H[] {
  const { refundId, paid, coins } = d;
  return paid
    ? holds.map((h) => (h.refundId === refundId ? { ...h, paid: true, ...(coins && { coins }) } : h))
    : holds.filter((h) => h.refundId !== refundId);
}

const fromSettlementHeld = ({ fromSettlement, approved }: SettlementRefundHeld['data']) => ({
  ...(fromSettlement !== undefined && { fromSettlement: BigInt(fromSettlement) }),
  ...(approved && { approved: true }),
});

const approvedHolds = <H extends RefundHold>(holds: H[], { refundId }: SettlementRefundHoldApproved['data']): H[] =>
  holds.map((h) => (h.refundId === refundId ? { ...h, approved: true } : h));

function evolveBeforeRequest(state: PendingHolds | null, event: SettlementEvent): PendingHolds {
  const holds = state?.refundHolds ?? [];
  if (event.type === 'SettlementRefundHeld') {
    const { refundId, amount, token, chain, fromAddress, heldAt } = event.data;
    if (token === undefined || chain === undefined || fromAddress === undefined) {
      throw new Error('SettlementRefundHeld before SettlementRequested names no deposit');
    }
    const hold = {
      refundId,
      amount: BigInt(amount),
      ...fromSettlementHeld(event.data),
      paid: false,
      token,
      chain,
      fromAddress,
      heldAt,
    };
    return { requested: false, refundHolds: [...holds, hold] };
  }
  if (event.type === 'SettlementRefundReleased') {
    return { requested: false, refundHolds: releasedHolds(holds, event.data) };
  }
  if (event.type === 'SettlementRefundHoldApproved') {
    return { requested: false, refundHolds: approvedHolds(holds, event.data) };
  }
  throw new Error(`${event.type} before SettlementRequested`);
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
      platformFeeBps: d.platformFeeBps,
      merchantWallet: d.merchantWallet,
      status: 'pending',
      ...payout.noAttemptYet,
      sources: d.sources,
      failureReason: null,
      failureCode: d.merchantWallet === null ? 'no_wallet' : null,
      attention: [],
      refundHolds: holdsTakenOver(isPendingHolds(state) ? state : null, d),
      createdAt: d.requestedAt,
      updatedAt: d.requestedAt,
      initiatedAt: null,
      completedAt: null,
      failedAt: null,
    };
  }
  if (state === null || isPendingHolds(state)) return evolveBeforeRequest(state, event);
  switch (event.type) {
    case 'SettlementRepriced': {
      const d = event.data;
      const reopened = state.status === 'failed' && state.retryAt === null;
      return {
        ...state,
        grossAmount: BigInt(d.grossAmount),
        platformFee: BigInt(d.platformFee),
        networkFee: BigInt(d.networkFee),
        netAmount: BigInt(d.netAmount),
        sources: d.sources ?? state.sources,
        // A final failure (nothing left to pay) goes on once there is something again.
        ...(reopened && { status: 'pending' as const, failureCode: null, failureReason: null, failedAt: null }),
        updatedAt: d.repricedAt,
      };
    }
    case 'SettlementAttentionRaised':
      return { ...state, attention: [...state.attention, event.data], updatedAt: event.data.raisedAt };
    case 'SettlementRefundHeld': {
      const { refundId, amount, token, heldAt } = event.data;
      const hold = {
        refundId,
        amount: BigInt(amount),
        ...fromSettlementHeld(event.data),
        paid: false,
        ...(token !== undefined && { token }),
        heldAt,
      };
      return { ...state, refundHolds: [...state.refundHolds, hold], updatedAt: heldAt };
    }
    case 'SettlementRefundHoldApproved':
      return { ...state, refundHolds: approvedHolds(state.refundHolds, event.data), updatedAt: event.data.approvedAt };
    case 'SettlementRefundReleased':
      return { ...state, refundHolds: releasedHolds(state.refundHolds, event.data), updatedAt: event.data.releasedAt };
    case 'SettlementRefundedInFull':
      return {
        ...state,
        status: 'completed',
        failureCode: null,
        failureReason: null,
        failedAt: null,
        completedAt: event.data.closedAt,
        updatedAt: event.data.closedAt,
      };
    case 'SettlementAttentionResolved':
      return { ...state, attention: [], updatedAt: event.data.resolvedAt };
    case 'SettlementWalletSet':
      return {
        ...state,
        merchantWallet: event.data.merchantWallet,
        failureCode: state.failureCode === 'no_wallet' ? null : state.failureCode,
        updatedAt: event.data.setAt,
      };
    case 'SettlementTransactionPrepared':
      return { ...state, ...payout.afterPrepared(state, event.data) };
    case 'SettlementSubmitted':
      return {
        ...state,
        ...payout.afterSubmitted(state, event.data),
        status: 'submitted',
        initiatedAt: event.data.submittedAt,
      };
    case 'SettlementCompleted':
      return { ...state, ...payout.afterCompleted(event.data) };
    case 'SettlementFailed':
      return {
        ...state,
        ...payout.afterFailed(state, event.data),
        failureCode: codeOf(event.data),
        failedAt: event.data.failedAt,
      };
    case 'SettlementRetried':
      return {
        ...state,
        ...payout.afterRetried(state, event.data),
        status: 'pending',
      };
  }
}

export const settlementDecider: Decider<SettlementCommand, SettlementState, SettlementEvent> = {
  initialState: null,
  decide,
  evolve,
};
