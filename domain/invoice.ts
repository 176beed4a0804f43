// The invoice aggregate, stream `invoice-<id>`.
//
// Two axes (DESIGN.md, "Payment rules worth keeping"): the contract's status
// (pending, partial, confirmed, settled, expired) and, beside it, an exception
// (underpaid, overpaid, wrong token, paid late) that never changes the status.
//
// Payments reach the invoice from the payment aggregate through a process
// manager: ApplyPayment when a transfer is detected, ConfirmInvoicePayment when
// it has its chain's confirmations, WithdrawPayment when a reorg drops it.
// Every payment is recorded, whatever it is; only "counted" payments (right
// token, in time) move the status.
import { type Decider, type DomainEvent, DomainError } from './decider.ts';
import {
  FIAT_DECIMALS,
  formatFiat,
  formatUnits,
  isFullPayment,
  parseUnits,
  paymentProgress,
  quoteCryptoAmount,
} from './money.ts';
import { streams } from './streams.ts';

export const invoiceStreamName = streams.invoice.name;

export type InvoiceStatus = 'pending' | 'partial' | 'confirmed' | 'settled' | 'expired';
export type JsonObject = { [key: string]: unknown };

// ---------------------------------------------------------------- events
// Event data is JSON: amounts in base units as integer strings, times as ISO strings.

export type InvoiceCreated = DomainEvent<
  'InvoiceCreated',
  {
    id: string;
    merchantId: string;
    /** fiat decimal string, as given */
    amount: string;
    currency: string;
    description: string | null;
    expiresAt: string;
    webhookUrl: string | null;
    metadata: JsonObject | null;
    createdAt: string;
    subscriberId?: string;
  }
>;

/** What an address asks for: the rate, the amount in the token and the window the rate holds. */
export interface Quote extends RateProvenance {
  /** fiat per whole token, decimal string */
  rate: string;
  /** base units of the token */
  cryptoAmount: string;
  quotedAt: string;
  rateValidUntil: string;
}

export type AddressAssigned = DomainEvent<
  'AddressAssigned',
  { chain: string; token: string; tokenDecimals: number; address: string; derivationIndex: number } & Quote
>;

/**
 * Where a quote's rate came from, for an auditor: when it was observed and
 * each source's answer. Optional: quotes recorded before they were kept have
 * neither.
 */
export interface RateProvenance {
  /** When the rate was observed (of a median: its oldest answer used). */
  rateObservedAt?: string;
  /** Every source's answer, those left out (used: false) included. */
  rateSources?: { name: string; rate: string; observedAt: string; used: boolean }[];
}

/** A new quote for an address whose rate window passed with nothing paid to it. */
export type AddressRequoted = DomainEvent<'AddressRequoted', { chain: string; token: string; address: string } & Quote>;

export type InvoiceCancelled = DomainEvent<'InvoiceCancelled', { cancelledAt: string }>;
export type InvoiceExpired = DomainEvent<'InvoiceExpired', { expiredAt: string }>;

/** A transfer to one of the invoice's addresses, as the chain watcher saw it (its amount apart). */
export interface Transfer {
  paymentId: string;
  chain: string;
  /** the token actually sent */
  token: string;
  tokenDecimals: number;
  address: string;
  txHash: string;
  detectedAt: string;
  /** When the chain says it was paid (its block's time), if it says; lateness is judged by it. */
  paidAt?: string;
  /** The output (Bitcoin) or log index in its transaction; absent in payments applied before it was recorded. */
  outputIndex?: number;
}

export type PaymentApplied = DomainEvent<
  'PaymentApplied',
  Transfer & {
    /** base units of `token` */
    amount: string;
    /** not the token of the invoice's payment quote: recorded, never counted */
    wrongToken: boolean;
    /** arrived after expiry or cancellation: recorded, never counted */
    late: boolean;
  }
>;

export type InvoicePaymentConfirmed = DomainEvent<
  'InvoicePaymentConfirmed',
  { paymentId: string; confirmedAt: string }
>;
export type PaymentWithdrawn = DomainEvent<'PaymentWithdrawn', { paymentId: string; withdrawnAt: string }>;

/** A counted, confirmed payment as a payout pays it out: transaction, output or log index, base units. */
export interface ReceivedPayment {
  paymentId: string;
  txHash: string;
  index: number;
  amount: string;
}

/**
 * What a settlement of the invoice pays out, carried by the events that
 * change it so that the settlement's process manager needs no reads: the
 * merchant, the deposit address and its derivation index, and the counted
 * payments that are confirmed. (Absent in events recorded before it was.)
 */
export interface Receipts {
  merchantId: string;
  address: string;
  derivationIndex: number;
  tokenDecimals: number;
  payments: ReceivedPayment[];
}

export type InvoiceConfirmed = DomainEvent<
  'InvoiceConfirmed',
  {
    confirmedAt: string;
    chain: string;
    token: string;
    /** counted total in base units of `token` */
    totalReceived: string;
  } & Partial<Receipts>
>;

/**
 * After the invoice was first confirmed, its counted and confirmed payments
 * changed: a reorg withdrew one, or a later one was confirmed. The
 * settlement follows (re-priced, or raised for a person once paid out).
 */
export type InvoiceReceiptsChanged = DomainEvent<
  'InvoiceReceiptsChanged',
  {
    changedAt: string;
    chain: string;
    token: string;
    /** counted, confirmed total in base units of `token` */
    totalReceived: string;
  } & Receipts
>;

export type InvoiceSettled = DomainEvent<
  'InvoiceSettled',
  {
    settlementId: string;
    /** net decimal amount delivered, in the settlement currency */
    settledAmount: string;
    settledCurrency: string;
    txHash: string | null;
    settledAt: string;
  }
>;

/**
 * A refund's claim on what the invoice received (refunds.md): reserved when
 * the refund is created, so that refunds of an asset can never add up to
 * more than it received, whatever requests race; released when the refund
 * will never be paid (cancelled, expired); refunded once its payout is final.
 * The invoice stream is the one place all of an invoice's refunds meet its
 * payments, so the limit holds by its expected revision alone.
 */
export type RefundReserved = DomainEvent<
  'RefundReserved',
  {
    refundId: string;
    chain: string;
    token: string;
    /** base units of `token` */
    amount: string;
    reservedAt: string;
  }
>;
export type RefundReleased = DomainEvent<'RefundReleased', { refundId: string; releasedAt: string }>;
export type InvoiceRefunded = DomainEvent<'InvoiceRefunded', { refundId: string; txHash: string; refundedAt: string }>;

export type InvoiceEvent =
  | InvoiceCreated
  | AddressAssigned
  | AddressRequoted
  | InvoiceCancelled
  | InvoiceExpired
  | PaymentApplied
  | InvoicePaymentConfirmed
  | PaymentWithdrawn
  | InvoiceConfirmed
  | InvoiceReceiptsChanged
  | InvoiceSettled
  | RefundReserved
  | RefundReleased
  | InvoiceRefunded;

// ---------------------------------------------------------------- commands

export type InvoiceCommand =
  | ({ type: 'CreateInvoice' } & InvoiceCreated['data'])
  // The quotes without their crypto amount: the decider computes it from the rate.
  | ({ type: 'AssignAddress' } & Omit<AddressAssigned['data'], 'cryptoAmount'>)
  | ({ type: 'RequoteAddress' } & Omit<AddressRequoted['data'], 'cryptoAmount' | 'address'>)
  | { type: 'CancelInvoice'; cancelledAt: string }
  | { type: 'ExpireInvoice'; now: string }
  | ({ type: 'ApplyPayment'; amount: bigint } & Transfer)
  | { type: 'ConfirmInvoicePayment'; paymentId: string; confirmedAt: string }
  | { type: 'WithdrawPayment'; paymentId: string; withdrawnAt: string }
  | ({ type: 'SettleInvoice' } & Settlement)
  | { type: 'ReserveRefund'; refundId: string; chain: string; token: string; amount: bigint; now: string }
  | { type: 'ReleaseRefund'; refundId: string; now: string }
  | { type: 'RecordRefund'; refundId: string; txHash: string; now: string };

// ---------------------------------------------------------------- state

export type AssignedAddress = Omit<AddressAssigned['data'], 'cryptoAmount'> & { cryptoAmount: bigint };

export interface InvoicePayment extends Omit<PaymentApplied['data'], 'amount' | 'paidAt'> {
  amount: bigint;
  confirmedAt: string | null;
  /** taken back out by a reorg; kept for the history, ignored everywhere else */
  withdrawn: boolean;
}

export type Settlement = InvoiceSettled['data'];

export interface Invoice extends Omit<InvoiceCreated['data'], 'subscriberId'> {
  updatedAt: string;
  subscriberId: string | null;
  status: InvoiceStatus;
  /** expired because the merchant cancelled it, not because time ran out */
  cancelled: boolean;
  addresses: AssignedAddress[];
  /** every payment ever applied, in order of application */
  payments: InvoicePayment[];
  confirmedAt: string | null;
  settlement: Settlement | null;
  /** Every refund's claim on the receipts, in order of reservation (released ones removed). */
  refunds: RefundClaim[];
}

export interface RefundClaim {
  refundId: string;
  chain: string;
  token: string;
  amount: bigint;
  /** Paid out and final; until then the claim is pending. */
  refunded: boolean;
}

/** null until InvoiceCreated. */
export type InvoiceState = Invoice | null;

// ---------------------------------------------------------------- pure helpers

const isAtOrAfter = (time: string, reference: string): boolean => Date.parse(time) >= Date.parse(reference);
const isValidTime = (time: string): boolean => typeof time === 'string' && !Number.isNaN(Date.parse(time));

/** A payment that is still there (not withdrawn by a reorg). */
const isLive = (payment: InvoicePayment): boolean => !payment.withdrawn;

/** A payment that counts toward the invoice total: live, right token, in time. */
export function countsTowardTotal(payment: InvoicePayment): boolean {
  return isLive(payment) && !payment.wrongToken && !payment.late;
}

export function countedPayments(invoice: Invoice): InvoicePayment[] {
  return invoice.payments.filter(countsTowardTotal);
}

const sum = (payments: InvoicePayment[]): bigint => payments.reduce((total, p) => total + p.amount, 0n);

/** Sum of the counted payments, in base units of the payment quote's token. */
export function countedTotal(invoice: Invoice): bigint {
  return sum(countedPayments(invoice));
}

/**
 * The quote the invoice is being paid against. The first counted payment locks
 * it (amounts in two tokens cannot be added up); before any payment it is the
 * most recently assigned address, the one the customer was last shown.
 */
export function paymentQuote(invoice: Invoice): AssignedAddress | undefined {
  return lockedQuote(invoice) ?? invoice.addresses.at(-1);
}

/** The quote of the first counted payment, if any. */
function lockedQuote(invoice: Invoice): AssignedAddress | undefined {
  const first = countedPayments(invoice)[0];
  return first === undefined ? undefined : findAssignment(invoice, first.chain, first.address);
}

export function findAssignment(invoice: Invoice, chain: string, address: string): AssignedAddress | undefined {
  return invoice.addresses.find((a) => a.chain === chain && a.address === address);
}

/**
 * What the counted payments pay towards the quote. While the invoice is
 * open, what refunds of the quoted asset give back (reserved, paid or not)
 * pays nothing towards it: 40 paid, 40 refunded, then 60 paid is 60, not the
 * 100 that would confirm it. A refund of a late payment (beyond the counted
 * ones) takes nothing from it. Once confirmed, a refund (of goods sent back,
 * of an excess) never takes that back.
 */
function paidTowardsQuote(invoice: Invoice, quote: AssignedAddress): bigint {
  const total = countedTotal(invoice);
  if (invoice.status !== 'pending' && invoice.status !== 'partial') return total;
  const givenBack = invoice.refunds.filter((r) => sameAsset(r, quote)).reduce((sum, r) => sum + r.amount, 0n);
  // Refunds give back what is beyond the counted payments first (late ones), as the settlement takes them.
  const beyond = beyondSettlementOf(invoice, quote, quote.address);
  const fromCounted = givenBack > beyond ? givenBack - beyond : 0n;
  return total > fromCounted ? total - fromCounted : 0n;
}

/** What is paid towards the quote reaches its 1% tolerance. */
export function isPaidInFull(invoice: Invoice): boolean {
  const quote = paymentQuote(invoice);
  return quote !== undefined && isFullPayment(paidTowardsQuote(invoice, quote), quote.cryptoAmount);
}

/**
 * Open and not paid in full: time running out would expire it, and a
 * subscriber's grace running out makes the subscriber past due (paid in
 * full, it only waits for confirmations).
 */
export function awaitsPayment(invoice: Invoice): boolean {
  return (invoice.status === 'pending' || invoice.status === 'partial') && !isPaidInFull(invoice);
}

/** Paid in full and every counted payment has its confirmations: the invoice may become confirmed. */
function isReadyToConfirm(invoice: Invoice): boolean {
  return (
    (invoice.status === 'pending' || invoice.status === 'partial') &&
    isPaidInFull(invoice) &&
    countedPayments(invoice).every((p) => p.confirmedAt !== null)
  );
}

/**
 * How a newly detected transfer to one of the invoice's addresses is recorded.
 * Wrong token: the token differs from the one quoted for that address, or the
 * address is not the one the invoice is already being paid against. Late: the
 * invoice is closed (expired or cancelled), or the deadline has passed and the
 * expiry timer has not run yet. Exported so the payment command handler can
 * tell the payment aggregate whether the token matches.
 */
export function classifyPayment(
  invoice: Invoice,
  payment: { chain: string; token: string; address: string; detectedAt: string; paidAt?: string },
): { wrongToken: boolean; late: boolean } {
  const assignment = findAssignment(invoice, payment.chain, payment.address);
  const locked = lockedQuote(invoice);
  const wrongToken =
    assignment === undefined || assignment.token !== payment.token || (locked !== undefined && locked !== assignment);
  const open = invoice.status === 'pending' || invoice.status === 'partial';
  const late =
    invoice.status === 'expired' || (open && isAtOrAfter(payment.paidAt ?? payment.detectedAt, invoice.expiresAt));
  return { wrongToken, late };
}

/**
 * The status after the set of payments changed (applied or withdrawn).
 * Expired and settled are final. A confirmed invoice stays confirmed while its
 * confirmed counted payments alone still pay it in full (an extra unconfirmed
 * overpayment does not unconfirm it; a reorg of a needed payment does).
 * Otherwise: nothing counted or paid in full (awaiting confirmations) is
 * pending, something counted below the tolerance is partial.
 */
function statusAfterPaymentsChanged(invoice: Invoice): InvoiceStatus {
  if (invoice.status === 'expired' || invoice.status === 'settled') return invoice.status;
  const quote = paymentQuote(invoice);
  if (invoice.status === 'confirmed' && quote !== undefined) {
    const confirmedTotal = sum(countedPayments(invoice).filter((p) => p.confirmedAt !== null));
    if (isFullPayment(confirmedTotal, quote.cryptoAmount)) return 'confirmed';
  }
  const total = countedTotal(invoice);
  if (total === 0n || isPaidInFull(invoice)) return 'pending';
  return 'partial';
}

function requireInvoice(state: InvoiceState): Invoice {
  if (state === null) throw new DomainError('not_found', 'Invoice not found');
  return state;
}

function requireTime(time: string, name: string): void {
  if (!isValidTime(time)) throw new DomainError('bad_request', `${name} must be an ISO 8601 timestamp`);
}

// ---------------------------------------------------------------- decide

function create(command: Extract<InvoiceCommand, { type: 'CreateInvoice' }>, state: InvoiceState): InvoiceEvent[] {
  if (state !== null) throw new DomainError('conflict', `Invoice ${command.id} already exists`);
  const units = parseUnits(command.amount, FIAT_DECIMALS);
  if (units === undefined || units <= 0n) throw new DomainError('bad_request', 'Amount must be greater than 0');
  if (typeof command.currency !== 'string' || command.currency.trim() === '') {
    throw new DomainError('bad_request', 'Currency is required');
  }
  requireTime(command.createdAt, 'createdAt');
  requireTime(command.expiresAt, 'expiresAt');
  if (isAtOrAfter(command.createdAt, command.expiresAt)) {
    throw new DomainError('bad_request', 'Expires in minutes must be greater than 0');
  }
  return [
    {
      type: 'InvoiceCreated',
      data: {
        id: command.id,
        merchantId: command.merchantId,
        amount: command.amount,
        currency: command.currency,
        description: command.description,
        expiresAt: command.expiresAt,
        webhookUrl: command.webhookUrl,
        metadata: command.metadata,
        createdAt: command.createdAt,
        ...(command.subscriberId === undefined ? {} : { subscriberId: command.subscriberId }),
      },
    },
  ];
}

/**
 * The amount a new address of the invoice would ask for, or the refusal: the
 * invoice must be open and unexpired at the quote. Commands ask it before they
 * reserve a derivation index, so a refused request burns none.
 */
export function quoteForNewAddress(
  invoice: Invoice,
  quote: { quotedAt: string; rate: string; tokenDecimals: number },
): bigint {
  if (invoice.status !== 'pending') {
    throw new DomainError(
      'bad_request',
      `Invoice cannot accept a payment address in its current status: ${invoice.status}`,
    );
  }
  requireTime(quote.quotedAt, 'quotedAt');
  if (isAtOrAfter(quote.quotedAt, invoice.expiresAt)) throw new DomainError('bad_request', 'Invoice has expired');
  try {
    return quoteCryptoAmount(invoice.amount, quote.rate, quote.tokenDecimals);
  } catch (error) {
    throw new DomainError('bad_request', error instanceof Error ? error.message : String(error));
  }
}

/**
 * The rate is fixed for its window (15 minutes). Past it, an address nobody
 * has paid gets a fresh quote; a quote a payment was made against stands.
 */
function requoteAddress(
  command: Extract<InvoiceCommand, { type: 'RequoteAddress' }>,
  invoice: Invoice,
): InvoiceEvent[] {
  const assigned = invoice.addresses.find((a) => a.chain === command.chain && a.token === command.token);
  if (!assigned) throw new DomainError('bad_request', `Invoice has no ${command.token} address on ${command.chain}`);
  requireTime(command.quotedAt, 'quotedAt');
  requireTime(command.rateValidUntil, 'rateValidUntil');
  if (invoice.status !== 'pending' || !isAtOrAfter(command.quotedAt, assigned.rateValidUntil)) return [];
  if (invoice.payments.some((p) => p.chain === assigned.chain && p.address === assigned.address)) return [];
  const cryptoAmount = quoteForNewAddress(invoice, { ...command, tokenDecimals: assigned.tokenDecimals });
  return [
    {
      type: 'AddressRequoted',
      data: {
        chain: assigned.chain,
        token: assigned.token,
        address: assigned.address,
        ...quoteOf(command, cryptoAmount),
      },
    },
  ];
}

/** The provenance fields a command carries, only those present (older callers send none). */
function provenanceOf(command: RateProvenance): RateProvenance {
  return {
    ...(command.rateObservedAt !== undefined && { rateObservedAt: command.rateObservedAt }),
    ...(command.rateSources !== undefined && { rateSources: command.rateSources }),
  };
}

/** The quote a command gives an address, as AddressAssigned and AddressRequoted record it. */
function quoteOf(command: Extract<InvoiceCommand, { type: 'AssignAddress' | 'RequoteAddress' }>, cryptoAmount: bigint) {
  const { rate, quotedAt, rateValidUntil } = command;
  return { rate, cryptoAmount: cryptoAmount.toString(), quotedAt, rateValidUntil, ...provenanceOf(command) };
}

function assignAddress(command: Extract<InvoiceCommand, { type: 'AssignAddress' }>, invoice: Invoice): InvoiceEvent[] {
  // A chain+token that already has an address keeps it and its quote: the
  // repeat is a no-op (a retried checkout selection), and the caller reads the
  // existing address from the state. Re-quoting would need its own event.
  if (invoice.addresses.some((a) => a.chain === command.chain && a.token === command.token)) return [];
  requireTime(command.rateValidUntil, 'rateValidUntil');
  const cryptoAmount = quoteForNewAddress(invoice, command);
  // One address, one chain+token: a transfer to it must say unambiguously what was expected.
  if (invoice.addresses.some((a) => a.chain === command.chain && a.address === command.address)) {
    throw new DomainError('conflict', `Address ${command.address} is already assigned to this invoice`);
  }
  return [
    {
      type: 'AddressAssigned',
      data: {
        chain: command.chain,
        token: command.token,
        tokenDecimals: command.tokenDecimals,
        address: command.address,
        derivationIndex: command.derivationIndex,
        ...quoteOf(command, cryptoAmount),
      },
    },
  ];
}

function cancel(command: Extract<InvoiceCommand, { type: 'CancelInvoice' }>, invoice: Invoice): InvoiceEvent[] {
  if (invoice.status !== 'pending') {
    throw new DomainError('bad_request', `Invoice cannot be cancelled in its current status: ${invoice.status}`);
  }
  // Paid in full and waiting for confirmations, it is still `pending`; cancelling
  // would leave the customer's money on an address nobody settles.
  if (countedTotal(invoice) > 0n) {
    throw new DomainError('bad_request', 'Invoice cannot be cancelled in its current status: detected');
  }
  return [{ type: 'InvoiceCancelled', data: { cancelledAt: command.cancelledAt } }];
}

function expire(command: Extract<InvoiceCommand, { type: 'ExpireInvoice' }>, invoice: Invoice): InvoiceEvent[] {
  // The expiry timer races with payments and may run twice: anything not open is a no-op.
  if (invoice.status !== 'pending' && invoice.status !== 'partial') return [];
  // Paid in full in time, only waiting for confirmations: time running out must not expire it.
  if (isPaidInFull(invoice)) return [];
  requireTime(command.now, 'now');
  if (!isAtOrAfter(command.now, invoice.expiresAt)) {
    throw new DomainError('conflict', `Invoice does not expire before ${invoice.expiresAt}`);
  }
  return [{ type: 'InvoiceExpired', data: { expiredAt: command.now } }];
}

/** The counted payments that are confirmed, as a settlement pays them out. */
function confirmedReceipts(invoice: Invoice, quote: AssignedAddress): Receipts {
  return {
    merchantId: invoice.merchantId,
    address: quote.address,
    derivationIndex: quote.derivationIndex,
    tokenDecimals: quote.tokenDecimals,
    payments: countedPayments(invoice)
      .filter((p) => p.confirmedAt !== null)
      .map((p) => ({
        paymentId: p.paymentId,
        txHash: p.txHash,
        index: p.outputIndex ?? 0,
        amount: p.amount.toString(),
      })),
  };
}

/** What the invoice's settlement pays out now, or undefined before any address was assigned. */
export function settlementReceipts(invoice: Invoice): (Receipts & { chain: string; token: string }) | undefined {
  const quote = paymentQuote(invoice);
  return quote && { chain: quote.chain, token: quote.token, ...confirmedReceipts(invoice, quote) };
}

/** What a confirmation and a later change of its receipts both carry: the chain and token paid with, the total, the receipts. */
const paidWith = (quote: AssignedAddress, totalReceived: bigint, receipts: Receipts) => ({
  chain: quote.chain,
  token: quote.token,
  totalReceived: totalReceived.toString(),
  ...receipts,
});

const receiptsTotal = (receipts: Receipts) => receipts.payments.reduce((total, p) => total + BigInt(p.amount), 0n);

/**
 * Appends InvoiceConfirmed when the events leave the invoice paid in full
 * with every counted payment confirmed; or, on an invoice confirmed before,
 * InvoiceReceiptsChanged when they change what its settlement pays out.
 */
function withConfirmationIfDue(invoice: Invoice, events: InvoiceEvent[], at: string): InvoiceEvent[] {
  const after = events.reduce<Invoice>((state, event) => evolve(state, event) as Invoice, invoice);
  const quote = paymentQuote(after);
  if (quote === undefined) return events;
  const receipts = confirmedReceipts(after, quote);
  if (isReadyToConfirm(after)) {
    const confirmed: InvoiceConfirmed = {
      type: 'InvoiceConfirmed',
      data: { confirmedAt: at, ...paidWith(quote, countedTotal(after), receipts) },
    };
    return [...events, confirmed];
  }
  if (invoice.confirmedAt === null) return events;
  const beforeQuote = paymentQuote(invoice);
  const before = beforeQuote && receiptsTotal(confirmedReceipts(invoice, beforeQuote));
  if (before === receiptsTotal(receipts) && beforeQuote?.address === quote.address) return events;
  const changed: InvoiceReceiptsChanged = {
    type: 'InvoiceReceiptsChanged',
    data: { changedAt: at, ...paidWith(quote, receiptsTotal(receipts), receipts) },
  };
  return [...events, changed];
}

function applyPayment(command: Extract<InvoiceCommand, { type: 'ApplyPayment' }>, invoice: Invoice): InvoiceEvent[] {
  const known = invoice.payments.find((p) => p.paymentId === command.paymentId);
  // Same transfer twice: nothing to do. A withdrawn one seen again (re-mined
  // after a reorg) is applied again.
  if (known !== undefined && isLive(known)) return [];
  if (command.amount <= 0n) throw new DomainError('bad_request', 'Payment amount must be greater than 0');
  if (findAssignment(invoice, command.chain, command.address) === undefined) {
    throw new DomainError('conflict', `Address ${command.address} on ${command.chain} is not assigned to this invoice`);
  }
  requireTime(command.detectedAt, 'detectedAt');
  if (command.paidAt !== undefined) requireTime(command.paidAt, 'paidAt');
  const { wrongToken, late } = classifyPayment(invoice, command);
  const applied: PaymentApplied = {
    type: 'PaymentApplied',
    data: {
      paymentId: command.paymentId,
      chain: command.chain,
      token: command.token,
      tokenDecimals: command.tokenDecimals,
      address: command.address,
      amount: command.amount.toString(),
      txHash: command.txHash,
      detectedAt: command.detectedAt,
      ...(command.paidAt !== undefined && { paidAt: command.paidAt }),
      ...(command.outputIndex !== undefined && { outputIndex: command.outputIndex }),
      wrongToken,
      late,
    },
  };
  // A freshly applied payment is unconfirmed, so it can never confirm the invoice by itself.
  return [applied];
}

function confirmPayment(
  command: Extract<InvoiceCommand, { type: 'ConfirmInvoicePayment' }>,
  invoice: Invoice,
): InvoiceEvent[] {
  const payment = invoice.payments.find((p) => p.paymentId === command.paymentId);
  if (payment === undefined) {
    throw new DomainError('conflict', `Payment ${command.paymentId} has not been applied to this invoice`);
  }
  // Already confirmed, or withdrawn by a reorg before its confirmation arrived: nothing to do.
  if (payment.confirmedAt !== null || !isLive(payment)) return [];
  return withConfirmationIfDue(
    invoice,
    [{ type: 'InvoicePaymentConfirmed', data: { paymentId: command.paymentId, confirmedAt: command.confirmedAt } }],
    command.confirmedAt,
  );
}

function withdrawPayment(
  command: Extract<InvoiceCommand, { type: 'WithdrawPayment' }>,
  invoice: Invoice,
): InvoiceEvent[] {
  const payment = invoice.payments.find((p) => p.paymentId === command.paymentId);
  if (payment === undefined || !isLive(payment)) return [];
  // Taking out an unconfirmed payment can leave the rest paid in full and all confirmed.
  return withConfirmationIfDue(
    invoice,
    [{ type: 'PaymentWithdrawn', data: { paymentId: command.paymentId, withdrawnAt: command.withdrawnAt } }],
    command.withdrawnAt,
  );
}

function settle(command: Extract<InvoiceCommand, { type: 'SettleInvoice' }>, invoice: Invoice): InvoiceEvent[] {
  if (invoice.settlement?.settlementId === command.settlementId) return [];
  // Once paid out, the merchant has the money: a reorg that unconfirmed the
  // invoice meanwhile (its settlement raised it for a person) does not undo that.
  if (invoice.confirmedAt === null || invoice.settlement !== null) {
    throw new DomainError('conflict', `Invoice cannot be settled in its current status: ${invoice.status}`);
  }
  return [
    {
      type: 'InvoiceSettled',
      data: {
        settlementId: command.settlementId,
        settledAmount: command.settledAmount,
        settledCurrency: command.settledCurrency,
        txHash: command.txHash,
        settledAt: command.settledAt,
      },
    },
  ];
}

// ---------------------------------------------------------------- refunds

/** What the invoice received of one asset, and how much of it can still be given back (refunds.md). */
export interface RefundableAsset {
  chain: string;
  token: string;
  tokenDecimals: number;
  /** Live, confirmed payments of this asset, base units. */
  received: bigint;
  /** Refunds paid out. */
  refunded: bigint;
  /** Refunds reserved and not yet paid out. */
  pending: bigint;
  /** received − refunded − pending. */
  refundable: bigint;
  /**
   * What should not have been paid and is not yet refunded: the part above
   * the quote, late payments, wrong-token payments. Refunds count against the
   * excess first, and it never exceeds what is refundable.
   */
  excess: bigint;
}

const sameAsset = (a: { chain: string; token: string }, b: { chain: string; token: string }) =>
  a.chain === b.chain && a.token === b.token;

/** One entry per asset received (live and confirmed), in order of first payment. */
export function refundableOf(invoice: Invoice): RefundableAsset[] {
  const received = invoice.payments.filter((p) => isLive(p) && p.confirmedAt !== null);
  const quote = paymentQuote(invoice);
  const assets: RefundableAsset[] = [];
  for (const payment of received) {
    if (assets.some((a) => sameAsset(a, payment))) continue;
    const ofAsset = received.filter((p) => sameAsset(p, payment));
    const counted = sum(ofAsset.filter(countsTowardTotal));
    const overpaid =
      quote !== undefined && sameAsset(quote, payment) && counted > quote.cryptoAmount
        ? counted - quote.cryptoAmount
        : 0n;
    const claims = invoice.refunds.filter((r) => sameAsset(r, payment));
    const refunded = claims.filter((r) => r.refunded).reduce((t, r) => t + r.amount, 0n);
    const pending = claims.filter((r) => !r.refunded).reduce((t, r) => t + r.amount, 0n);
    const total = sum(ofAsset);
    const refundable = total - refunded - pending;
    const excess = sum(ofAsset.filter((p) => !countsTowardTotal(p))) + overpaid - refunded - pending;
    assets.push({
      chain: payment.chain,
      token: payment.token,
      tokenDecimals: payment.tokenDecimals,
      received: total,
      refunded,
      pending,
      refundable: refundable > 0n ? refundable : 0n,
      excess: excess <= 0n ? 0n : excess < refundable ? excess : refundable,
    });
  }
  return assets;
}

/**
 * The deposit a refund of this asset is paid from before the invoice's
 * settlement is requested (the invoice still open, or confirmed and not yet
 * settling, or closed unconfirmed and never to settle): the refund takes a
 * hold on the settlement's stream, which a settlement requested later takes
 * over (domain/settlement.ts, `PendingHolds`). The asset must have arrived on
 * one address (no one deposit holds it all otherwise); the invoice's
 * reservations (ReserveRefund) keep the refunds of it, racing or not, within
 * what arrived. Another token on that address is no obstacle: a token
 * refund's fee is paid by the fee wallet, never out of the other's coins
 * (EVM, Tron: the top-up gives the whole gas; Solana: the fee wallet is the
 * fee payer).
 */
export function depositBeforeSettlement(
  invoice: Invoice,
  asset: { chain: string; token: string },
): Pick<AssignedAddress, 'address' | 'derivationIndex'> | undefined {
  const paidTo = new Set(invoice.payments.filter((p) => isLive(p) && sameAsset(p, asset)).map((p) => p.address));
  if (paidTo.size !== 1) return undefined;
  const deposit = findAssignment(invoice, asset.chain, [...paidTo][0]!);
  return deposit && { address: deposit.address, derivationIndex: deposit.derivationIndex };
}

/**
 * The deposit's coins of an asset that a refund before the settlement may
 * spend (a chain whose payouts spend coins whole), as payout sources: the
 * live payments the settlement will pay out, or, for an invoice closed
 * unconfirmed, which none will, all that arrived. Payments recorded before
 * their output was are not named, so no refund spends them.
 */
export function coinsBeforeSettlement(invoice: Invoice, asset: { chain: string; token: string }, address: string) {
  const spendable = invoice.status === 'expired' ? isLive : countsTowardTotal;
  return invoice.payments
    .filter((p) => spendable(p) && sameAsset(p, asset) && p.address === address && p.outputIndex !== undefined)
    .map((p) => ({ txHash: p.txHash, index: p.outputIndex!, amount: p.amount.toString() }));
}

/**
 * What a deposit holds of an asset beyond the payments the invoice's
 * settlement pays out: its live, confirmed payments there that are not
 * counted (late ones; another token than the quote's). A refund from the
 * deposit takes from it first (domain/settlement.ts, `HoldForRefund`), so
 * giving back a late payment costs the merchant nothing. A counted payment
 * not yet confirmed is not beyond: the settlement will pay it out.
 */
export const beyondSettlementOf = (invoice: Invoice, asset: { chain: string; token: string }, address: string) =>
  sum(
    invoice.payments.filter(
      (p) =>
        isLive(p) && p.confirmedAt !== null && sameAsset(p, asset) && p.address === address && !countsTowardTotal(p),
    ),
  );

/** What the invoice's other refunds of this asset, reserved and not paid yet, still take (as unpaidHoldsOf for a settlement). */
export const unpaidRefundsOf = (invoice: Invoice, asset: { chain: string; token: string }, refundId: string) =>
  invoice.refunds
    .filter((r) => !r.refunded && r.refundId !== refundId && sameAsset(r, asset))
    .reduce((sum, r) => sum + r.amount, 0n);

/** `none`, `partial`, or `full` once every asset received is refunded whole. */
export function refundStatusOf(invoice: Invoice): 'none' | 'partial' | 'full' {
  const assets = refundableOf(invoice);
  if (!assets.some((a) => a.refunded > 0n)) return 'none';
  return assets.every((a) => a.refunded >= a.received) ? 'full' : 'partial';
}

function reserveRefund(command: Extract<InvoiceCommand, { type: 'ReserveRefund' }>, invoice: Invoice): InvoiceEvent[] {
  if (invoice.refunds.some((r) => r.refundId === command.refundId)) return [];
  if (command.amount <= 0n) throw new DomainError('bad_request', 'Refund amount must be greater than 0');
  const asset = refundableOf(invoice).find((a) => sameAsset(a, command));
  if (asset === undefined) {
    throw new DomainError('bad_request', `The invoice received no ${command.token} on ${command.chain}`);
  }
  if (command.amount > asset.refundable) throw new DomainError('bad_request', 'Refund exceeds the refundable amount');
  return [
    {
      type: 'RefundReserved',
      data: {
        refundId: command.refundId,
        chain: command.chain,
        token: command.token,
        amount: command.amount.toString(),
        reservedAt: command.now,
      },
    },
  ];
}

function releaseRefund(command: Extract<InvoiceCommand, { type: 'ReleaseRefund' }>, invoice: Invoice): InvoiceEvent[] {
  const claim = invoice.refunds.find((r) => r.refundId === command.refundId);
  if (claim === undefined) return [];
  if (claim.refunded) throw new DomainError('conflict', 'A refund paid out cannot be released');
  // Its amount counts towards the quote again (isPaidInFull): an open invoice it left paid in full confirms now.
  return withConfirmationIfDue(
    invoice,
    [{ type: 'RefundReleased', data: { refundId: command.refundId, releasedAt: command.now } }],
    command.now,
  );
}

function recordRefund(command: Extract<InvoiceCommand, { type: 'RecordRefund' }>, invoice: Invoice): InvoiceEvent[] {
  const claim = invoice.refunds.find((r) => r.refundId === command.refundId);
  // Paid out without a claim would break the limit: the refund's process manager reserves first, always.
  if (claim === undefined) throw new DomainError('conflict', `Refund ${command.refundId} holds no reservation`);
  if (claim.refunded) return [];
  return [
    { type: 'InvoiceRefunded', data: { refundId: command.refundId, txHash: command.txHash, refundedAt: command.now } },
  ];
}

function decide(command: InvoiceCommand, state: InvoiceState): InvoiceEvent[] {
  if (command.type === 'CreateInvoice') return create(command, state);
  const invoice = requireInvoice(state);
  switch (command.type) {
    case 'RequoteAddress':
      return requoteAddress(command, invoice);
    case 'AssignAddress':
      return assignAddress(command, invoice);
    case 'CancelInvoice':
      return cancel(command, invoice);
    case 'ExpireInvoice':
      return expire(command, invoice);
    case 'ApplyPayment':
      return applyPayment(command, invoice);
    case 'ConfirmInvoicePayment':
      return confirmPayment(command, invoice);
    case 'WithdrawPayment':
      return withdrawPayment(command, invoice);
    case 'SettleInvoice':
      return settle(command, invoice);
    case 'ReserveRefund':
      return reserveRefund(command, invoice);
    case 'ReleaseRefund':
      return releaseRefund(command, invoice);
    case 'RecordRefund':
      return recordRefund(command, invoice);
  }
}

// ---------------------------------------------------------------- evolve

function updatePayment(invoice: Invoice, paymentId: string, change: Partial<InvoicePayment>): InvoicePayment[] {
  return invoice.payments.map((p) => (p.paymentId === paymentId ? { ...p, ...change } : p));
}

function evolve(state: InvoiceState, event: InvoiceEvent): InvoiceState {
  if (event.type === 'InvoiceCreated') {
    const { subscriberId, ...data } = event.data;
    return {
      ...data,
      subscriberId: subscriberId ?? null,
      updatedAt: data.createdAt,
      status: 'pending',
      cancelled: false,
      addresses: [],
      payments: [],
      confirmedAt: null,
      settlement: null,
      refunds: [],
    };
  }
  // Events only exist after InvoiceCreated; a stream that says otherwise is corrupt.
  if (state === null) throw new Error(`${event.type} before InvoiceCreated`);
  switch (event.type) {
    case 'AddressAssigned':
      return {
        ...state,
        updatedAt: event.data.quotedAt,
        addresses: [...state.addresses, { ...event.data, cryptoAmount: BigInt(event.data.cryptoAmount) }],
      };
    case 'AddressRequoted': {
      const { chain, address, rate, cryptoAmount, quotedAt, rateValidUntil } = event.data;
      return {
        ...state,
        updatedAt: quotedAt,
        addresses: state.addresses.map((a) => {
          if (a.chain !== chain || a.address !== address) return a;
          // The new quote's provenance replaces the old one's; a quote without any has none.
          const { rateObservedAt: _, rateSources: __, ...quoted } = a;
          const requoted = { ...quoted, rate, cryptoAmount: BigInt(cryptoAmount), quotedAt, rateValidUntil };
          return { ...requoted, ...provenanceOf(event.data) };
        }),
      };
    }
    case 'InvoiceCancelled':
      return { ...state, status: 'expired', cancelled: true, updatedAt: event.data.cancelledAt };
    case 'InvoiceExpired':
      return { ...state, status: 'expired', updatedAt: event.data.expiredAt };
    case 'PaymentApplied': {
      const payment: InvoicePayment = {
        ...event.data,
        amount: BigInt(event.data.amount),
        confirmedAt: null,
        withdrawn: false,
      };
      // A payment re-applied after its withdrawal moves to the end: it is the latest again.
      const others = state.payments.filter((p) => p.paymentId !== payment.paymentId);
      const next = { ...state, payments: [...others, payment], updatedAt: event.data.detectedAt };
      return { ...next, status: statusAfterPaymentsChanged(next) };
    }
    case 'InvoicePaymentConfirmed':
      return {
        ...state,
        payments: updatePayment(state, event.data.paymentId, { confirmedAt: event.data.confirmedAt }),
        updatedAt: event.data.confirmedAt,
      };
    case 'PaymentWithdrawn': {
      const next = {
        ...state,
        payments: updatePayment(state, event.data.paymentId, { withdrawn: true }),
        updatedAt: event.data.withdrawnAt,
      };
      return { ...next, status: statusAfterPaymentsChanged(next) };
    }
    case 'InvoiceConfirmed':
      return { ...state, status: 'confirmed', confirmedAt: event.data.confirmedAt, updatedAt: event.data.confirmedAt };
    case 'InvoiceReceiptsChanged':
      return { ...state, updatedAt: event.data.changedAt };
    case 'InvoiceSettled':
      return { ...state, status: 'settled', settlement: { ...event.data }, updatedAt: event.data.settledAt };
    case 'RefundReserved': {
      const { refundId, chain, token, amount, reservedAt } = event.data;
      const claim = { refundId, chain, token, amount: BigInt(amount), refunded: false };
      return { ...state, refunds: [...state.refunds, claim], updatedAt: reservedAt };
    }
    case 'RefundReleased':
      return {
        ...state,
        refunds: state.refunds.filter((r) => r.refundId !== event.data.refundId),
        updatedAt: event.data.releasedAt,
      };
    case 'InvoiceRefunded':
      return {
        ...state,
        refunds: state.refunds.map((r) => (r.refundId === event.data.refundId ? { ...r, refunded: true } : r)),
        updatedAt: event.data.refundedAt,
      };
  }
}

export const invoiceDecider: Decider<InvoiceCommand, InvoiceState, InvoiceEvent> = {
  initialState: null,
  decide,
  evolve,
};

// ---------------------------------------------------------------- read-model view

export type PaymentStatus = 'pending' | 'detected' | 'confirmed' | 'partial' | 'wrong_token' | 'settled' | 'expired';
export type PaymentIssueType = 'underpaid' | 'overpaid' | 'wrong_token';

/** The payment fields of the public status shape (interface.md, "Invoice status"), computed from the state. */
export interface InvoicePaymentView {
  status: InvoiceStatus;
  cancelled: boolean;
  paymentStatus: PaymentStatus;
  /** status of the latest live payment record */
  paymentStatusDetail: 'detected' | 'confirmed' | null;
  paymentIssueType: PaymentIssueType | null;
  /** a payment arrived after expiry or cancellation (the fourth exception; not in the contract's issue types) */
  paidLate: boolean;
  /** chain and token of the payment quote, null before an address was assigned */
  chain: string | null;
  token: string | null;
  /** the quote, 8 decimal places, null before an address was assigned */
  cryptoAmount: string | null;
  /** invoice fiat amount, 8 decimal places */
  fiatAmount: string;
  /** counted total in base units (integer string) */
  totalReceived: string;
  /** counted total, 8 decimal places, rounded down */
  totalReceivedAmount: string;
  totalReceivedCurrency: string;
  /** still owed, 8 decimal places, rounded up; 0 once paid in full; the fiat amount before a quote exists */
  remainingAmount: string;
  /** 0..100; 100 once paid in full (within the tolerance) */
  paymentProgress: number;
  hasDetectedPayment: boolean;
  detectedPaymentAmount: string | null;
  detectedPaymentCurrency: string | null;
  mismatchPayment: { amount: string; currency: string; actualCurrency: string; txHash: string } | null;
  /** settlement hash once settled, else the latest live payment's hash */
  txHash: string | null;
}

const shown = (payment: InvoicePayment): string =>
  formatUnits(payment.amount, payment.tokenDecimals, undefined, 'down');

export function invoicePaymentView(invoice: Invoice): InvoicePaymentView {
  const quote = paymentQuote(invoice);
  const live = invoice.payments.filter(isLive);
  const latest = live.at(-1);
  const latestRightToken = live.filter((p) => !p.wrongToken).at(-1);
  const latestWrongToken = live.filter((p) => p.wrongToken).at(-1);
  const total = countedTotal(invoice);
  // The customer is asked for what refunds gave back too (isPaidInFull).
  const towards = quote === undefined ? 0n : paidTowardsQuote(invoice, quote);
  const full = isPaidInFull(invoice);
  const fiatAmount = formatFiat(invoice.amount) ?? invoice.amount;

  let paymentIssueType: PaymentIssueType | null = null;
  if (latestWrongToken !== undefined) paymentIssueType = 'wrong_token';
  else if (quote !== undefined && total > quote.cryptoAmount) paymentIssueType = 'overpaid';
  else if (total > 0n && !full) paymentIssueType = 'underpaid';

  return {
    status: invoice.status,
    cancelled: invoice.cancelled,
    paymentStatus: paymentStatusOf(invoice, live),
    paymentStatusDetail: latest === undefined ? null : latest.confirmedAt !== null ? 'confirmed' : 'detected',
    paymentIssueType,
    paidLate: live.some((p) => p.late),
    chain: quote?.chain ?? null,
    token: quote?.token ?? null,
    cryptoAmount: quote === undefined ? null : formatUnits(quote.cryptoAmount, quote.tokenDecimals),
    fiatAmount,
    totalReceived: total.toString(),
    totalReceivedAmount:
      quote === undefined ? formatUnits(0n, 0) : formatUnits(total, quote.tokenDecimals, undefined, 'down'),
    totalReceivedCurrency: quote?.token ?? invoice.currency,
    remainingAmount:
      quote === undefined
        ? fiatAmount
        : formatUnits(full || towards >= quote.cryptoAmount ? 0n : quote.cryptoAmount - towards, quote.tokenDecimals),
    paymentProgress: full ? 100 : quote === undefined ? 0 : paymentProgress(towards, quote.cryptoAmount),
    hasDetectedPayment: latestRightToken !== undefined,
    detectedPaymentAmount: latestRightToken === undefined ? null : shown(latestRightToken),
    detectedPaymentCurrency: latestRightToken?.token ?? null,
    mismatchPayment:
      latestWrongToken === undefined
        ? null
        : {
            amount: shown(latestWrongToken),
            currency: expectedToken(invoice, latestWrongToken),
            actualCurrency: latestWrongToken.token,
            txHash: latestWrongToken.txHash,
          },
    txHash: invoice.settlement?.txHash ?? latest?.txHash ?? null,
  };
}

function paymentStatusOf(invoice: Invoice, live: InvoicePayment[]): PaymentStatus {
  if (invoice.status !== 'pending') return invoice.status;
  if (countedTotal(invoice) > 0n) return 'detected';
  if (live.some((p) => p.wrongToken)) return 'wrong_token';
  return 'pending';
}

/**
 * The token a wrong-token payment should have been: its address's token when
 * another token was sent there, else the token the invoice is being paid in
 * (the payment went to another quote's address after the first payment locked it).
 */
function expectedToken(invoice: Invoice, payment: InvoicePayment): string {
  const assignment = findAssignment(invoice, payment.chain, payment.address);
  if (assignment !== undefined && assignment.token !== payment.token) return assignment.token;
  return paymentQuote(invoice)?.token ?? payment.token;
}
