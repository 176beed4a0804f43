import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fold } from '../domain/decider.ts';
import {
  type AddressAssigned,
  type Invoice,
  type InvoiceCommand,
  type InvoiceEvent,
  type PaymentApplied,
  beyondSettlementOf,
  classifyPayment,
  coinsBeforeSettlement,
  invoiceDecider,
  invoicePaymentView,
} from '../domain/invoice.ts';
import { given as givenFor, stateAfter } from './support/decider.ts';

const given = (events: InvoiceEvent[]) => givenFor(invoiceDecider, events);
const invoiceAfter = (events: InvoiceEvent[], ...commands: InvoiceCommand[]): Invoice => {
  const state = stateAfter(invoiceDecider, events, ...commands);
  assert.ok(state !== null);
  return state;
};
const viewOf = (events: InvoiceEvent[]) => invoicePaymentView(invoiceAfter(events));

/** Minutes after 2025-01-01T00:00Z as an ISO string. The invoice expires at minute 15. */
const at = (minute: number): string => new Date(Date.UTC(2025, 0, 1, 0, minute)).toISOString();

const INVOICE_ID = '6f1d3c9e-8a2b-4c5d-9e0f-112233445566';
const MERCHANT_ID = '0a1b2c3d-4e5f-4a6b-8c7d-8e9f00112233';
const USDT_ADDRESS = '0x00000000000000000000000000000000000000aa';
const ETH_ADDRESS = '0x00000000000000000000000000000000000000bb';

const createCommand: Extract<InvoiceCommand, { type: 'CreateInvoice' }> = {
  type: 'CreateInvoice',
  id: INVOICE_ID,
  merchantId: MERCHANT_ID,
  amount: '100',
  currency: 'USD',
  description: 'Order 42',
  expiresAt: at(15),
  webhookUrl: null,
  metadata: { orderId: '42' },
  createdAt: at(0),
};

const created: InvoiceEvent = {
  type: 'InvoiceCreated',
  data: {
    id: INVOICE_ID,
    merchantId: MERCHANT_ID,
    amount: '100',
    currency: 'USD',
    description: 'Order 42',
    expiresAt: at(15),
    webhookUrl: null,
    metadata: { orderId: '42' },
    createdAt: at(0),
  },
};

// 100 USD at 1 USD per USDT: 100 USDT = 100_000_000 base units; 99% of it is 99_000_000.
const usdtAssigned: AddressAssigned = {
  type: 'AddressAssigned',
  data: {
    chain: 'ethereum',
    token: 'USDT',
    tokenDecimals: 6,
    address: USDT_ADDRESS,
    derivationIndex: 7,
    rate: '1',
    cryptoAmount: '100000000',
    quotedAt: at(1),
    rateValidUntil: at(16),
  },
};

// 100 USD at 3000 USD per ETH: 0.03333334 ETH.
const ethAssigned: AddressAssigned = {
  type: 'AddressAssigned',
  data: {
    chain: 'ethereum',
    token: 'ETH',
    tokenDecimals: 18,
    address: ETH_ADDRESS,
    derivationIndex: 8,
    rate: '3000',
    cryptoAmount: '33333340000000000',
    quotedAt: at(2),
    rateValidUntil: at(17),
  },
};

type ApplyPayment = Extract<InvoiceCommand, { type: 'ApplyPayment' }>;

/** A USDT payment to the USDT address, detected at minute 5, unless overridden. */
function apply(n: number, amount: bigint, override: Partial<ApplyPayment> = {}): ApplyPayment {
  return {
    type: 'ApplyPayment',
    paymentId: `payment-${n}`,
    chain: 'ethereum',
    token: 'USDT',
    tokenDecimals: 6,
    address: USDT_ADDRESS,
    amount,
    txHash: `0xtx${n}`,
    detectedAt: at(5),
    ...override,
  };
}

function applied(command: ApplyPayment, flags: { wrongToken?: boolean; late?: boolean } = {}): PaymentApplied {
  return {
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
      wrongToken: flags.wrongToken ?? false,
      late: flags.late ?? false,
    },
  };
}

const confirm = (n: number, minute = 8): InvoiceCommand => ({
  type: 'ConfirmInvoicePayment',
  paymentId: `payment-${n}`,
  confirmedAt: at(minute),
});
const paymentConfirmed = (n: number, minute = 8): InvoiceEvent => ({
  type: 'InvoicePaymentConfirmed',
  data: { paymentId: `payment-${n}`, confirmedAt: at(minute) },
});
/** What a settlement of the USDT quote pays out: the counted, confirmed payments, as [n, base units]. */
const receipts = (payments: [number, string][]) => ({
  merchantId: MERCHANT_ID,
  address: USDT_ADDRESS,
  derivationIndex: 7,
  tokenDecimals: 6,
  payments: payments.map(([n, amount]) => ({ paymentId: `payment-${n}`, txHash: `0xtx${n}`, index: 0, amount })),
});
const invoiceConfirmed = (
  totalReceived: string,
  minute = 8,
  payments: [number, string][] = [[1, totalReceived]],
): InvoiceEvent => ({
  type: 'InvoiceConfirmed',
  data: { confirmedAt: at(minute), chain: 'ethereum', token: 'USDT', totalReceived, ...receipts(payments) },
});
const receiptsChanged = (minute: number, payments: [number, string][]): InvoiceEvent => ({
  type: 'InvoiceReceiptsChanged',
  data: {
    changedAt: at(minute),
    chain: 'ethereum',
    token: 'USDT',
    totalReceived: payments.reduce((total, [, amount]) => total + BigInt(amount), 0n).toString(),
    ...receipts(payments),
  },
});
const withdraw = (n: number, minute = 9): InvoiceCommand => ({
  type: 'WithdrawPayment',
  paymentId: `payment-${n}`,
  withdrawnAt: at(minute),
});
const withdrawn = (n: number, minute = 9): InvoiceEvent => ({
  type: 'PaymentWithdrawn',
  data: { paymentId: `payment-${n}`, withdrawnAt: at(minute) },
});
const cancelled: InvoiceEvent = { type: 'InvoiceCancelled', data: { cancelledAt: at(3) } };
const expired: InvoiceEvent = { type: 'InvoiceExpired', data: { expiredAt: at(15) } };
const settleCommand: InvoiceCommand = {
  type: 'SettleInvoice',
  settlementId: 'settlement-1',
  settledAmount: '99.00000000',
  settledCurrency: 'USDT',
  txHash: '0xsettle',
  settledAt: at(20),
};
const settled: InvoiceEvent = {
  type: 'InvoiceSettled',
  data: {
    settlementId: 'settlement-1',
    settledAmount: '99.00000000',
    settledCurrency: 'USDT',
    txHash: '0xsettle',
    settledAt: at(20),
  },
};

// Histories used across the tests.
const open = [created, usdtAssigned];
const partial = [...open, applied(apply(1, 30_000_000n))];
const paidUnconfirmed = [...open, applied(apply(1, 100_000_000n))];
const confirmedInvoice = [...paidUnconfirmed, paymentConfirmed(1), invoiceConfirmed('100000000')];

describe('invoice: creation', () => {
  it('creates a pending invoice', () => {
    given([]).when(createCommand).then([created]);
    const invoice = invoiceAfter([created]);
    assert.equal(invoice.status, 'pending');
    assert.equal(invoice.cancelled, false);
    assert.equal(invoice.updatedAt, at(0));
    assert.equal(invoice.subscriberId, null);
  });

  it('carries the subscriber of a subscription invoice', () => {
    const [event] = invoiceDecider.decide({ ...createCommand, subscriberId: 'subscriber-1' }, null);
    assert.deepEqual(event, { type: 'InvoiceCreated', data: { ...created.data, subscriberId: 'subscriber-1' } });
    assert.equal(invoiceAfter([event!]).subscriberId, 'subscriber-1');
  });

  it('refuses a second creation of the same invoice', () => {
    given([created]).when(createCommand).thenError('conflict', `Invoice ${INVOICE_ID} already exists`);
  });

  it('refuses an amount that is not a positive decimal', () => {
    for (const amount of ['0', '0.00', '-1', 'abc', '', '1e3', '1.000000001']) {
      given([])
        .when({ ...createCommand, amount })
        .thenError('bad_request', 'Amount must be greater than 0');
    }
  });

  it('refuses a missing currency', () => {
    given([])
      .when({ ...createCommand, currency: ' ' })
      .thenError('bad_request', 'Currency is required');
  });

  it('refuses an expiry not after creation', () => {
    given([])
      .when({ ...createCommand, expiresAt: at(0) })
      .thenError('bad_request', 'Expires in minutes must be greater than 0');
  });

  it('answers not found for any other command on a missing invoice', () => {
    given([])
      .when({ type: 'CancelInvoice', cancelledAt: at(1) })
      .thenError('not_found', 'Invoice not found');
    given([]).when(apply(1, 1n)).thenError('not_found', 'Invoice not found');
  });
});

describe('invoice: address assignment', () => {
  const assign = (override: Partial<Extract<InvoiceCommand, { type: 'AssignAddress' }>> = {}): InvoiceCommand => ({
    type: 'AssignAddress',
    chain: 'ethereum',
    token: 'USDT',
    tokenDecimals: 6,
    address: USDT_ADDRESS,
    derivationIndex: 7,
    rate: '1',
    quotedAt: at(1),
    rateValidUntil: at(16),
    ...override,
  });

  it('assigns an address with the quote computed from the rate', () => {
    given([created]).when(assign()).then([usdtAssigned]);
    const invoice = invoiceAfter([created, usdtAssigned]);
    assert.equal(invoice.addresses[0]?.cryptoAmount, 100_000_000n);
    assert.equal(invoice.updatedAt, at(1));
  });

  it('quotes an 18-decimal token rounded up to 1e-8', () => {
    given([created, usdtAssigned])
      .when(
        assign({
          token: 'ETH',
          tokenDecimals: 18,
          address: ETH_ADDRESS,
          derivationIndex: 8,
          rate: '3000',
          quotedAt: at(2),
          rateValidUntil: at(17),
        }),
      )
      .then([ethAssigned]);
    assert.equal(viewOf([created, usdtAssigned, ethAssigned]).cryptoAmount, '0.03333334');
  });

  it('is a no-op for a chain and token that already have an address, whatever address is offered', () => {
    given(open).when(assign()).then([]);
    given(open)
      .when(assign({ address: '0xother', derivationIndex: 9 }))
      .then([]);
  });

  it('refuses one address for two tokens', () => {
    given(open)
      .when(assign({ token: 'USDC' }))
      .thenError('conflict', `Address ${USDT_ADDRESS} is already assigned to this invoice`);
  });

  it('refuses an address outside pending', () => {
    given(partial)
      .when(assign({ token: 'ETH', address: ETH_ADDRESS }))
      .thenError('bad_request', 'Invoice cannot accept a payment address in its current status: partial');
    given([created, cancelled])
      .when(assign())
      .thenError('bad_request', 'Invoice cannot accept a payment address in its current status: expired');
  });

  it('refuses an address once the deadline has passed', () => {
    given([created])
      .when(assign({ quotedAt: at(15) }))
      .thenError('bad_request', 'Invoice has expired');
  });

  it('refuses an unusable rate', () => {
    given([created])
      .when(assign({ rate: '0' }))
      .thenError('bad_request', "Exchange rate must be a positive decimal, got '0'");
  });
});

describe('invoice: cancellation', () => {
  it('cancels a pending invoice into expired, flagged as cancelled', () => {
    given(open)
      .when({ type: 'CancelInvoice', cancelledAt: at(3) })
      .then([cancelled]);
    const invoice = invoiceAfter([...open, cancelled]);
    assert.equal(invoice.status, 'expired');
    assert.equal(invoice.cancelled, true);
    assert.equal(invoice.updatedAt, at(3));
  });

  it('refuses any other status with the exact contract message', () => {
    const cases: [InvoiceEvent[], string][] = [
      [partial, 'partial'],
      [confirmedInvoice, 'confirmed'],
      [[...confirmedInvoice, settled], 'settled'],
      [[...open, expired], 'expired'],
      [[...open, cancelled], 'expired'],
      // Paid in full, waiting for confirmations: still `pending`, but the money is there.
      [paidUnconfirmed, 'detected'],
    ];
    for (const [history, status] of cases) {
      given(history)
        .when({ type: 'CancelInvoice', cancelledAt: at(4) })
        .thenError('bad_request', `Invoice cannot be cancelled in its current status: ${status}`);
    }
  });
});

describe('invoice: expiry', () => {
  it('expires a pending invoice exactly at expiresAt', () => {
    given(open)
      .when({ type: 'ExpireInvoice', now: at(15) })
      .then([expired]);
    const invoice = invoiceAfter([...open, expired]);
    assert.equal(invoice.status, 'expired');
    assert.equal(invoice.cancelled, false);
  });

  it('expires a partially paid invoice, which stays underpaid', () => {
    given(partial)
      .when({ type: 'ExpireInvoice', now: at(16) })
      .then([{ type: 'InvoiceExpired', data: { expiredAt: at(16) } }]);
    const view = viewOf([...partial, expired]);
    assert.equal(view.paymentStatus, 'expired');
    assert.equal(view.paymentIssueType, 'underpaid');
    assert.equal(view.totalReceivedAmount, '30.00000000');
  });

  it('refuses to expire before expiresAt', () => {
    given(open)
      .when({ type: 'ExpireInvoice', now: '2025-01-01T00:14:59.999Z' })
      .thenError('conflict', `Invoice does not expire before ${at(15)}`);
  });

  it('does not expire an invoice paid in full in time that only waits for confirmations', () => {
    given(paidUnconfirmed)
      .when({ type: 'ExpireInvoice', now: at(15) })
      .then([]);
  });

  it('is a no-op outside pending and partial', () => {
    given(confirmedInvoice)
      .when({ type: 'ExpireInvoice', now: at(15) })
      .then([]);
    given([...confirmedInvoice, settled])
      .when({ type: 'ExpireInvoice', now: at(30) })
      .then([]);
    given([...open, expired])
      .when({ type: 'ExpireInvoice', now: at(16) })
      .then([]);
    given([...open, cancelled])
      .when({ type: 'ExpireInvoice', now: at(16) })
      .then([]);
  });
});

describe('invoice: payments and the 1% tolerance', () => {
  it('a full payment counts once detected: pending until confirmed, then confirmed', () => {
    const payment = apply(1, 100_000_000n);
    given(open)
      .when(payment)
      .then([applied(payment)]);

    const view = viewOf(paidUnconfirmed);
    assert.equal(view.status, 'pending');
    assert.equal(view.paymentStatus, 'detected');
    assert.equal(view.paymentStatusDetail, 'detected');
    assert.equal(view.hasDetectedPayment, true);
    assert.equal(view.detectedPaymentAmount, '100.00000000');
    assert.equal(view.detectedPaymentCurrency, 'USDT');
    assert.equal(view.totalReceived, '100000000');
    assert.equal(view.totalReceivedAmount, '100.00000000');
    assert.equal(view.remainingAmount, '0.00000000');
    assert.equal(view.paymentProgress, 100);
    assert.equal(view.paymentIssueType, null);
    assert.equal(view.txHash, '0xtx1');

    given(paidUnconfirmed)
      .when(confirm(1))
      .then([paymentConfirmed(1), invoiceConfirmed('100000000')]);
    const after = viewOf(confirmedInvoice);
    assert.equal(after.status, 'confirmed');
    assert.equal(after.paymentStatus, 'confirmed');
    assert.equal(after.paymentStatusDetail, 'confirmed');
    assert.equal(invoiceAfter(confirmedInvoice).confirmedAt, at(8));
  });

  it('exactly 1% under counts as full payment', () => {
    const payment = apply(1, 99_000_000n);
    const history = [...open, applied(payment)];
    const view = viewOf(history);
    assert.equal(view.status, 'pending');
    assert.equal(view.paymentProgress, 100);
    assert.equal(view.remainingAmount, '0.00000000');
    assert.equal(view.paymentIssueType, null);
    given(history)
      .when(confirm(1))
      .then([paymentConfirmed(1), invoiceConfirmed('99000000')]);
  });

  it('one base unit under the tolerance is partial and never confirms', () => {
    const payment = apply(1, 98_999_999n);
    const history = [...open, applied(payment)];
    const view = viewOf(history);
    assert.equal(view.status, 'partial');
    assert.equal(view.paymentStatus, 'partial');
    assert.equal(view.paymentIssueType, 'underpaid');
    assert.equal(view.paymentProgress, 98);
    assert.equal(view.remainingAmount, '1.00000100');
    given(history)
      .when(confirm(1))
      .then([paymentConfirmed(1)]);
    assert.equal(invoiceAfter([...history, paymentConfirmed(1)]).status, 'partial');
  });

  it('several partial payments add up, and confirm only when every one is confirmed', () => {
    const p1 = apply(1, 30_000_000n);
    const p2 = apply(2, 30_000_000n, { detectedAt: at(6) });
    const p3 = apply(3, 40_000_000n, { detectedAt: at(7) });

    given(open)
      .when(p1)
      .then([applied(p1)]);
    given([...open, applied(p1)])
      .when(p2)
      .then([applied(p2)]);
    const twoPaid = [...open, applied(p1), applied(p2)];
    const two = viewOf(twoPaid);
    assert.equal(two.status, 'partial');
    assert.equal(two.totalReceivedAmount, '60.00000000');
    assert.equal(two.remainingAmount, '40.00000000');
    assert.equal(two.paymentProgress, 60);
    assert.equal(two.detectedPaymentAmount, '30.00000000');
    assert.equal(two.txHash, '0xtx2');

    given(twoPaid)
      .when(p3)
      .then([applied(p3)]);
    const allPaid = [...twoPaid, applied(p3)];
    assert.equal(viewOf(allPaid).status, 'pending');
    assert.equal(viewOf(allPaid).totalReceived, '100000000');

    given(allPaid)
      .when(confirm(1))
      .then([paymentConfirmed(1)]);
    given([...allPaid, paymentConfirmed(1)])
      .when(confirm(3, 9))
      .then([paymentConfirmed(3, 9)]);
    given([...allPaid, paymentConfirmed(1), paymentConfirmed(3, 9)])
      .when(confirm(2, 10))
      .then([
        paymentConfirmed(2, 10),
        invoiceConfirmed('100000000', 10, [
          [1, '30000000'],
          [2, '30000000'],
          [3, '40000000'],
        ]),
      ]);
  });

  it('records an overpayment and confirms it', () => {
    const payment = apply(1, 150_000_000n);
    const history = [...open, applied(payment)];
    const view = viewOf(history);
    assert.equal(view.paymentIssueType, 'overpaid');
    assert.equal(view.totalReceivedAmount, '150.00000000');
    assert.equal(view.remainingAmount, '0.00000000');
    assert.equal(view.paymentProgress, 100);
    given(history)
      .when(confirm(1))
      .then([paymentConfirmed(1), invoiceConfirmed('150000000')]);
  });

  it('counts a payment after confirmation as overpayment without leaving confirmed', () => {
    const extra = apply(2, 20_000_000n, { detectedAt: at(10) });
    given(confirmedInvoice)
      .when(extra)
      .then([applied(extra)]);
    const history = [...confirmedInvoice, applied(extra)];
    assert.equal(invoiceAfter(history).status, 'confirmed');
    assert.equal(viewOf(history).paymentIssueType, 'overpaid');
    assert.equal(viewOf(history).totalReceivedAmount, '120.00000000');
    // What its settlement pays out grew: the settlement follows (re-priced, or raised once paid out).
    given(history)
      .when(confirm(2, 11))
      .then([
        paymentConfirmed(2, 11),
        receiptsChanged(11, [
          [1, '100000000'],
          [2, '20000000'],
        ]),
      ]);
  });

  it('is idempotent: the same payment applied twice, or confirmed twice, decides nothing', () => {
    given(paidUnconfirmed).when(apply(1, 100_000_000n)).then([]);
    given(confirmedInvoice).when(confirm(1, 12)).then([]);
  });

  it('refuses a zero payment, an unknown address and an unknown payment confirmation', () => {
    given(open).when(apply(1, 0n)).thenError('bad_request', 'Payment amount must be greater than 0');
    given(open)
      .when(apply(1, 5n, { address: '0xelsewhere' }))
      .thenError('conflict', 'Address 0xelsewhere on ethereum is not assigned to this invoice');
    given(open).when(confirm(9)).thenError('conflict', 'Payment payment-9 has not been applied to this invoice');
  });

  it('shows an ETH quote and remainder with 8 decimals, rounded up', () => {
    const payment = apply(1, 10_000_000_000_000_001n, { token: 'ETH', tokenDecimals: 18, address: ETH_ADDRESS });
    const history = [created, ethAssigned, applied(payment)];
    const view = viewOf(history);
    assert.equal(view.cryptoAmount, '0.03333334');
    assert.equal(view.totalReceivedAmount, '0.01000000');
    // 0.03333334 - 0.010000000000000001 = 0.023333339999999999, shown rounded up
    assert.equal(view.remainingAmount, '0.02333334');
    assert.equal(view.totalReceivedCurrency, 'ETH');
    assert.equal(view.paymentProgress, 29);
  });

  it('shows the fiat amount as remaining before any address exists', () => {
    const view = viewOf([created]);
    assert.deepEqual(
      { ...view },
      {
        status: 'pending',
        cancelled: false,
        paymentStatus: 'pending',
        paymentStatusDetail: null,
        paymentIssueType: null,
        paidLate: false,
        chain: null,
        token: null,
        cryptoAmount: null,
        fiatAmount: '100.00000000',
        totalReceived: '0',
        totalReceivedAmount: '0.00000000',
        totalReceivedCurrency: 'USD',
        remainingAmount: '100.00000000',
        paymentProgress: 0,
        hasDetectedPayment: false,
        detectedPaymentAmount: null,
        detectedPaymentCurrency: null,
        mismatchPayment: null,
        txHash: null,
      },
    );
  });
});

describe('invoice: exceptions', () => {
  it('records a wrong token, never counts it, and shows the mismatch', () => {
    const payment = apply(1, 50_000_000n, { token: 'USDC' });
    given(open)
      .when(payment)
      .then([applied(payment, { wrongToken: true })]);
    const history = [...open, applied(payment, { wrongToken: true })];
    const view = viewOf(history);
    assert.equal(view.status, 'pending');
    assert.equal(view.paymentStatus, 'wrong_token');
    assert.equal(view.paymentIssueType, 'wrong_token');
    assert.equal(view.hasDetectedPayment, false);
    assert.equal(view.totalReceived, '0');
    assert.deepEqual(view.mismatchPayment, {
      amount: '50.00000000',
      currency: 'USDT',
      actualCurrency: 'USDC',
      txHash: '0xtx1',
    });
    given(history)
      .when(confirm(1))
      .then([paymentConfirmed(1)]);
  });

  it('a wrong token does not stop the right one from confirming the invoice', () => {
    const wrong = apply(1, 50_000_000n, { token: 'USDC' });
    const right = apply(2, 100_000_000n);
    const history = [...open, applied(wrong, { wrongToken: true }), applied(right)];
    given(history)
      .when(confirm(2))
      .then([paymentConfirmed(2), invoiceConfirmed('100000000', 8, [[2, '100000000']])]);
  });

  it('locks the invoice to the quote of its first counted payment', () => {
    const history = [created, usdtAssigned, ethAssigned];
    // Before any payment, a payment to an earlier address still counts.
    const first = apply(1, 50_000_000n);
    given(history)
      .when(first)
      .then([applied(first)]);
    // After it, a payment to the other quote's address is a mismatch: amounts in two tokens do not add up.
    const other = apply(2, 20_000_000_000_000_000n, { token: 'ETH', tokenDecimals: 18, address: ETH_ADDRESS });
    given([...history, applied(first)])
      .when(other)
      .then([applied(other, { wrongToken: true })]);
    const view = viewOf([...history, applied(first), applied(other, { wrongToken: true })]);
    assert.equal(view.token, 'USDT');
    assert.equal(view.totalReceivedAmount, '50.00000000');
    assert.deepEqual(view.mismatchPayment, {
      amount: '0.02000000',
      currency: 'USDT',
      actualCurrency: 'ETH',
      txHash: '0xtx2',
    });
  });

  it('records a payment after expiry as paid late; it stays expired', () => {
    const payment = apply(1, 100_000_000n, { detectedAt: at(20) });
    const history = [...open, expired];
    given(history)
      .when(payment)
      .then([applied(payment, { late: true })]);
    const after = [...history, applied(payment, { late: true })];
    const view = viewOf(after);
    assert.equal(view.status, 'expired');
    assert.equal(view.paymentStatus, 'expired');
    assert.equal(view.paidLate, true);
    assert.equal(view.hasDetectedPayment, true);
    assert.equal(view.detectedPaymentAmount, '100.00000000');
    assert.equal(view.totalReceived, '0');
    assert.equal(view.txHash, '0xtx1');
    given(after)
      .when(confirm(1, 25))
      .then([paymentConfirmed(1, 25)]);
    assert.equal(invoiceAfter([...after, paymentConfirmed(1, 25)]).status, 'expired');
  });

  it('records a payment to a cancelled invoice as paid late; it stays expired and cancelled', () => {
    const payment = apply(1, 100_000_000n, { detectedAt: at(4) });
    const history = [...open, cancelled];
    given(history)
      .when(payment)
      .then([applied(payment, { late: true })]);
    const invoice = invoiceAfter([...history, applied(payment, { late: true })]);
    assert.equal(invoice.status, 'expired');
    assert.equal(invoice.cancelled, true);
    assert.equal(invoicePaymentView(invoice).paidLate, true);
  });

  it('counts a payment seen at the deadline as late even before the expiry timer ran', () => {
    const payment = apply(1, 100_000_000n, { detectedAt: at(15) });
    given(open)
      .when(payment)
      .then([applied(payment, { late: true })]);
    assert.equal(invoiceAfter([...open, applied(payment, { late: true })]).status, 'pending');
  });

  it('judges lateness by when the chain says it was paid, not when the watcher saw it', () => {
    // Mined at minute 14, seen at minute 40 (the service was down): in time.
    const inTime = apply(1, 100_000_000n, { detectedAt: at(40), paidAt: at(14) });
    given(open)
      .when(inTime)
      .then([{ ...applied(inTime), data: { ...applied(inTime).data, paidAt: at(14) } }]);
    // Mined at the deadline, seen at once: late.
    const atDeadline = apply(1, 100_000_000n, { detectedAt: at(15), paidAt: at(15) });
    given(open)
      .when(atDeadline)
      .then([
        {
          ...applied(atDeadline, { late: true }),
          data: { ...applied(atDeadline, { late: true }).data, paidAt: at(15) },
        },
      ]);
  });

  it('classifies a transfer for the payment aggregate', () => {
    const invoice = invoiceAfter(open);
    assert.deepEqual(
      classifyPayment(invoice, { chain: 'ethereum', token: 'USDT', address: USDT_ADDRESS, detectedAt: at(5) }),
      {
        wrongToken: false,
        late: false,
      },
    );
    assert.deepEqual(
      classifyPayment(invoice, { chain: 'ethereum', token: 'USDC', address: USDT_ADDRESS, detectedAt: at(15) }),
      {
        wrongToken: true,
        late: true,
      },
    );
  });
});

describe('invoice: reorgs', () => {
  it('takes a counted payment back out: back to pending, and its late confirmation does not confirm', () => {
    given(paidUnconfirmed)
      .when(withdraw(1))
      .then([withdrawn(1)]);
    const history = [...paidUnconfirmed, withdrawn(1)];
    const view = viewOf(history);
    assert.equal(view.status, 'pending');
    assert.equal(view.paymentStatus, 'pending');
    assert.equal(view.totalReceived, '0');
    assert.equal(view.hasDetectedPayment, false);
    assert.equal(view.txHash, null);
    given(history).when(confirm(1)).then([]);
  });

  it('re-evaluates a paid invoice into partial when one of its payments is withdrawn', () => {
    const history = [...partial, applied(apply(2, 70_000_000n))];
    assert.equal(invoiceAfter(history).status, 'pending');
    given(history)
      .when(withdraw(2))
      .then([withdrawn(2)]);
    const view = viewOf([...history, withdrawn(2)]);
    assert.equal(view.status, 'partial');
    assert.equal(view.remainingAmount, '70.00000000');
  });

  it('takes a confirmed invoice back to pending when its payment is reorged out', () => {
    given(confirmedInvoice)
      .when(withdraw(1, 10))
      .then([withdrawn(1, 10), receiptsChanged(10, [])]);
    assert.equal(invoiceAfter([...confirmedInvoice, withdrawn(1, 10)]).status, 'pending');
  });

  it('keeps a confirmed invoice confirmed when only an unconfirmed extra payment is withdrawn', () => {
    const history = [...confirmedInvoice, applied(apply(2, 10_000_000n, { detectedAt: at(10) }))];
    given(history)
      .when(withdraw(2, 11))
      .then([withdrawn(2, 11)]);
    assert.equal(invoiceAfter([...history, withdrawn(2, 11)]).status, 'confirmed');
  });

  it('confirms when the withdrawn payment was the only unconfirmed one and the rest pays in full', () => {
    const history = [...paidUnconfirmed, applied(apply(2, 10_000_000n, { detectedAt: at(6) })), paymentConfirmed(1)];
    assert.equal(invoiceAfter(history).status, 'pending');
    given(history)
      .when(withdraw(2))
      .then([withdrawn(2), invoiceConfirmed('100000000', 9)]);
  });

  it('applies a withdrawn payment again when it is re-mined', () => {
    const history = [...paidUnconfirmed, withdrawn(1)];
    const again = apply(1, 100_000_000n, { detectedAt: at(10) });
    given(history)
      .when(again)
      .then([applied(again)]);
    const after = [...history, applied(again)];
    assert.equal(viewOf(after).totalReceived, '100000000');
    given(after)
      .when(confirm(1, 12))
      .then([paymentConfirmed(1, 12), invoiceConfirmed('100000000', 12)]);
  });

  it('is idempotent: withdrawing twice or an unknown payment decides nothing', () => {
    given([...paidUnconfirmed, withdrawn(1)])
      .when(withdraw(1, 10))
      .then([]);
    given(paidUnconfirmed).when(withdraw(5)).then([]);
  });
});

describe('invoice: settlement', () => {
  it('settles a confirmed invoice', () => {
    given(confirmedInvoice).when(settleCommand).then([settled]);
    const invoice = invoiceAfter([...confirmedInvoice, settled]);
    assert.equal(invoice.status, 'settled');
    assert.equal(invoice.updatedAt, at(20));
    const view = invoicePaymentView(invoice);
    assert.equal(view.paymentStatus, 'settled');
    assert.equal(view.txHash, '0xsettle');
  });

  it('is idempotent for the same settlement', () => {
    given([...confirmedInvoice, settled])
      .when(settleCommand)
      .then([]);
  });

  it('settles an invoice paid out before a reorg unconfirmed it: the merchant has the money', () => {
    const reorged = [...confirmedInvoice, withdrawn(1, 10), receiptsChanged(10, [])];
    given(reorged).when(settleCommand).then([settled]);
    assert.equal(invoiceAfter([...reorged, settled]).status, 'settled');
  });

  it('refuses to settle an invoice that is not confirmed', () => {
    given(paidUnconfirmed)
      .when(settleCommand)
      .thenError('conflict', 'Invoice cannot be settled in its current status: pending');
    given([...confirmedInvoice, settled])
      .when({ ...settleCommand, settlementId: 'settlement-2' } as InvoiceCommand)
      .thenError('conflict', 'Invoice cannot be settled in its current status: settled');
  });
});

describe('invoice: evolve', () => {
  it('refuses events before InvoiceCreated', () => {
    assert.throws(() => fold(invoiceDecider, [usdtAssigned]), /AddressAssigned before InvoiceCreated/);
  });
});

describe('invoice: requotes after the rate window', () => {
  // An invoice open for two hours; its USDT quote is valid from minute 1 to 16.
  const long = [{ ...created, data: { ...created.data, expiresAt: at(120) } } as InvoiceEvent, usdtAssigned];
  const requote = (minute: number, rate = '0.8'): InvoiceCommand => ({
    type: 'RequoteAddress',
    chain: 'ethereum',
    token: 'USDT',
    rate,
    quotedAt: at(minute),
    rateValidUntil: at(minute + 15),
  });

  it('keeps the quote within its window', () => {
    given(long).when(requote(15)).then([]);
  });

  it('quotes an unpaid address afresh from the end of the window, at the same address', () => {
    // 100 USD at 0.8 USD per USDT.
    const requoted: InvoiceEvent = {
      type: 'AddressRequoted',
      data: {
        chain: 'ethereum',
        token: 'USDT',
        address: USDT_ADDRESS,
        rate: '0.8',
        cryptoAmount: '125000000',
        quotedAt: at(16),
        rateValidUntil: at(31),
      },
    };
    given(long).when(requote(16)).then([requoted]);
    const [address] = invoiceAfter([...long, requoted]).addresses;
    assert.equal(address!.cryptoAmount, 125_000_000n);
    assert.equal(address!.derivationIndex, 7);
  });

  it('keeps a quote a payment was made against, and refuses past expiry', () => {
    given([...long, applied(apply(1, 30_000_000n))])
      .when(requote(20))
      .then([]);
    given(long).when(requote(120)).thenError('bad_request', 'Invoice has expired');
  });
});

describe('invoice: what a deposit holds beyond its settlement', () => {
  const usdt = { chain: 'ethereum', token: 'USDT' };
  const late = apply(2, 10_000_000n, { detectedAt: at(20) });
  it('is its live, confirmed payments there that are not counted: a late one, not a counted one still unconfirmed', () => {
    const history = [...paidUnconfirmed, applied(late, { late: true })];
    // Neither confirmed: the 100 will be the settlement's, the late 10 cannot be refunded yet.
    assert.equal(beyondSettlementOf(invoiceAfter(history), usdt, USDT_ADDRESS), 0n);
    const confirmedLate = [...history, paymentConfirmed(2, 25)];
    assert.equal(beyondSettlementOf(invoiceAfter(confirmedLate), usdt, USDT_ADDRESS), 10_000_000n);
    assert.equal(
      beyondSettlementOf(invoiceAfter([...confirmedLate, paymentConfirmed(1)]), usdt, USDT_ADDRESS),
      10_000_000n,
    );
    assert.equal(beyondSettlementOf(invoiceAfter(confirmedLate), usdt, '0xother'), 0n);
    assert.equal(beyondSettlementOf(invoiceAfter(confirmedLate), { ...usdt, token: 'ETH' }, USDT_ADDRESS), 0n);
    const withdrawn: InvoiceEvent = { type: 'PaymentWithdrawn', data: { paymentId: 'payment-2', withdrawnAt: at(26) } };
    assert.equal(beyondSettlementOf(invoiceAfter([...confirmedLate, withdrawn]), usdt, USDT_ADDRESS), 0n);
  });
});

describe('invoice: the coins a refund spends before the settlement is requested', () => {
  const usdt = { chain: 'ethereum', token: 'USDT' };
  const withOutput = (event: PaymentApplied, outputIndex: number): PaymentApplied => ({
    ...event,
    data: { ...event.data, outputIndex },
  });
  const paid = withOutput(applied(apply(1, 100_000_000n)), 0);
  const late = withOutput(applied(apply(2, 10_000_000n, { detectedAt: at(20) }), { late: true }), 1);
  const coinOf = (n: number, index: number, amount: string) => ({ txHash: `0xtx${n}`, index, amount });

  it('are the payments the settlement will pay out, never a late one it will not', () => {
    const confirmedThenLate = [...open, paid, paymentConfirmed(1), invoiceConfirmed('100000000'), late];
    assert.deepEqual(coinsBeforeSettlement(invoiceAfter(confirmedThenLate), usdt, USDT_ADDRESS), [
      coinOf(1, 0, '100000000'),
    ]);
    // A payment recorded before its output was is not named: nothing spends a coin it cannot name.
    assert.deepEqual(coinsBeforeSettlement(invoiceAfter([...open, applied(apply(1, 5n))]), usdt, USDT_ADDRESS), []);
  });

  it('are all that arrived for an invoice closed unconfirmed, which no settlement will pay out', () => {
    const partial = withOutput(applied(apply(1, 30_000_000n)), 0);
    const closed = invoiceAfter([...open, partial, expired, late]);
    assert.deepEqual(coinsBeforeSettlement(closed, usdt, USDT_ADDRESS), [
      coinOf(1, 0, '30000000'),
      coinOf(2, 1, '10000000'),
    ]);
    assert.deepEqual(coinsBeforeSettlement(closed, usdt, '0xother'), []);
  });
});
