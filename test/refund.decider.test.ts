// Refunds: the invoice's ledger of refund claims (the limit) and the refund
// aggregate's life, given events, when a command, then events.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fold } from '../domain/decider.ts';
import {
  depositBeforeSettlement,
  invoiceDecider,
  invoicePaymentView,
  refundableOf,
  refundStatusOf,
  type Invoice,
  type InvoiceCommand,
  type InvoiceEvent,
} from '../domain/invoice.ts';
import { refundDecider, type RefundCommand, type RefundEvent, type RefundPayer } from '../domain/refund.ts';
import { settlementIdOf } from '../domain/settlement.ts';
import { reactToRefundEvent, releaseOfHold } from '../domain/refund-saga.ts';
import { given } from './support/decider.ts';

const at = (minute: number) => new Date(Date.UTC(2026, 10, 1, 0, minute)).toISOString();
const INVOICE_ID = '5b0f4a52-6d8e-4e0b-9f1c-2a3b4c5d6e7f';
const MERCHANT_ID = '0a1b2c3d-4e5f-4a6b-8c7d-8e9f00112233';
const DEPOSIT = '0x00000000000000000000000000000000000000aa';

/** The invoice's events after these commands, each decided on the state the ones before left. */
function history(...commands: InvoiceCommand[]): InvoiceEvent[] {
  const events: InvoiceEvent[] = [];
  for (const command of commands) events.push(...invoiceDecider.decide(command, fold(invoiceDecider, events)));
  return events;
}
const invoiceOf = (events: InvoiceEvent[]) => fold(invoiceDecider, events) as Invoice;

const create: InvoiceCommand = {
  type: 'CreateInvoice',
  id: INVOICE_ID,
  merchantId: MERCHANT_ID,
  amount: '100',
  currency: 'USD',
  description: null,
  expiresAt: at(15),
  webhookUrl: null,
  metadata: null,
  createdAt: at(0),
};
// 100 USD at 1 USD a USDT: 100 USDT, 100_000_000 base units.
const assign: InvoiceCommand = {
  type: 'AssignAddress',
  chain: 'ethereum',
  token: 'USDT',
  tokenDecimals: 6,
  address: DEPOSIT,
  derivationIndex: 3,
  rate: '1',
  quotedAt: at(1),
  rateValidUntil: at(16),
};
const pay = (n: number, amount: bigint, token = 'USDT', minute = 2): InvoiceCommand[] => [
  {
    type: 'ApplyPayment',
    paymentId: `p${n}`,
    chain: 'ethereum',
    token,
    tokenDecimals: 6,
    address: DEPOSIT,
    amount,
    txHash: `0x${n}`,
    detectedAt: at(minute),
  },
  { type: 'ConfirmInvoicePayment', paymentId: `p${n}`, confirmedAt: at(minute + 1) },
];
const reserve = (refundId: string, amount: bigint, token = 'USDT'): InvoiceCommand => ({
  type: 'ReserveRefund',
  refundId,
  chain: 'ethereum',
  token,
  amount,
  now: at(20),
});

// Paid 120 USDT for a 100 USDT invoice, plus 5 USDC (the wrong token).
const overpaid = history(create, assign, ...pay(1, 120_000_000n), ...pay(2, 5_000_000n, 'USDC', 4));

// 5 USDC (the wrong token) paid to the USDT deposit, and the invoice expired unpaid: no settlement ever.
const expire: InvoiceCommand = { type: 'ExpireInvoice', now: at(15) };
const expiredWrongToken = history(create, assign, ...pay(1, 5_000_000n, 'USDC'), expire);

describe('a refund of an invoice that will never be settled', () => {
  it('is paid from the deposit the asset arrived on, at its derivation index, once the invoice closed unconfirmed', () => {
    assert.deepEqual(depositBeforeSettlement(invoiceOf(expiredWrongToken), { chain: 'ethereum', token: 'USDC' }), {
      address: DEPOSIT,
      derivationIndex: 3,
    });
    // An underpayment of the right token on an expired invoice, too.
    const underpaid = history(create, assign, ...pay(1, 30_000_000n), expire);
    assert.equal(depositBeforeSettlement(invoiceOf(underpaid), { chain: 'ethereum', token: 'USDT' })?.address, DEPOSIT);
  });

  it('is that deposit too while the invoice is still open: the hold is taken before any settlement is requested', () => {
    // The right token may yet confirm it: its settlement, requested later, takes the hold over (domain/settlement.ts).
    const open = history(create, assign, ...pay(1, 5_000_000n, 'USDC'));
    assert.deepEqual(depositBeforeSettlement(invoiceOf(open), { chain: 'ethereum', token: 'USDC' }), {
      address: DEPOSIT,
      derivationIndex: 3,
    });
    const underpaid = history(create, assign, ...pay(1, 30_000_000n));
    assert.equal(depositBeforeSettlement(invoiceOf(underpaid), { chain: 'ethereum', token: 'USDT' })?.address, DEPOSIT);
  });

  it('has no such deposit for an asset never received', () => {
    // Nothing of the asset received.
    assert.equal(depositBeforeSettlement(invoiceOf(expiredWrongToken), { chain: 'ethereum', token: 'DAI' }), undefined);
  });

  it('has no one deposit when the asset arrived on two addresses', () => {
    const other = '0x00000000000000000000000000000000000000bb';
    const twice = history(
      create,
      assign,
      { ...assign, token: 'USDC', address: other, derivationIndex: 4, quotedAt: at(2) } as InvoiceCommand,
      ...pay(1, 5_000_000n, 'USDC'),
      { ...(pay(2, 1_000_000n, 'USDC', 4)[0] as InvoiceCommand), address: other } as InvoiceCommand,
      expire,
    );
    assert.equal(depositBeforeSettlement(invoiceOf(twice), { chain: 'ethereum', token: 'USDC' }), undefined);
  });

  it('is that address when it also received another token: each refund pays its own, the fee wallet the gas', () => {
    // USDT underpaid and USDC by mistake on one address: an EVM token refund's gas is the fee wallet's top-up.
    const both = history(create, assign, ...pay(1, 30_000_000n), ...pay(2, 5_000_000n, 'USDC'), expire);
    assert.equal(depositBeforeSettlement(invoiceOf(both), { chain: 'ethereum', token: 'USDC' })?.address, DEPOSIT);
    assert.equal(depositBeforeSettlement(invoiceOf(both), { chain: 'ethereum', token: 'USDT' })?.address, DEPOSIT);
  });

  it('keeps two refunds racing on that deposit within what it received: the second reservation is decided on the first', () => {
    const first = history(create, assign, ...pay(1, 5_000_000n, 'USDC'), expire, reserve('r1', 3_000_000n, 'USDC'));
    given(invoiceDecider, first)
      .when(reserve('r2', 2_000_001n, 'USDC'))
      .thenError('bad_request', 'Refund exceeds the refundable amount');
    given(invoiceDecider, first)
      .when(reserve('r2', 2_000_000n, 'USDC'))
      .then([
        {
          type: 'RefundReserved',
          data: { refundId: 'r2', chain: 'ethereum', token: 'USDC', amount: '2000000', reservedAt: at(20) },
        },
      ]);
  });
});

describe('the invoice refund ledger', () => {
  it('reports per asset what was received and what is refundable, the excess being the overpaid part and wrong tokens', () => {
    assert.deepEqual(refundableOf(invoiceOf(overpaid)), [
      {
        chain: 'ethereum',
        token: 'USDT',
        tokenDecimals: 6,
        received: 120_000_000n,
        refunded: 0n,
        pending: 0n,
        refundable: 120_000_000n,
        excess: 20_000_000n,
      },
      {
        chain: 'ethereum',
        token: 'USDC',
        tokenDecimals: 6,
        received: 5_000_000n,
        refunded: 0n,
        pending: 0n,
        refundable: 5_000_000n,
        excess: 5_000_000n,
      },
    ]);
  });

  it('counts only confirmed, live payments as received', () => {
    const unconfirmed = history(create, assign, pay(1, 100_000_000n)[0]!);
    assert.deepEqual(refundableOf(invoiceOf(unconfirmed)), []);
    const afterReorg = history(create, assign, ...pay(1, 120_000_000n), ...pay(2, 5_000_000n, 'USDC', 4), {
      type: 'WithdrawPayment',
      paymentId: 'p2',
      withdrawnAt: at(9),
    });
    assert.deepEqual(
      refundableOf(invoiceOf(afterReorg)).map((a) => a.token),
      ['USDT'],
    );
  });

  it('reserves a refund up to what is refundable, and refuses beyond it', () => {
    given(invoiceDecider, overpaid)
      .when(reserve('r1', 120_000_000n))
      .then([
        {
          type: 'RefundReserved',
          data: { refundId: 'r1', chain: 'ethereum', token: 'USDT', amount: '120000000', reservedAt: at(20) },
        },
      ]);
    given(invoiceDecider, overpaid)
      .when(reserve('r1', 120_000_001n))
      .thenError('bad_request', 'Refund exceeds the refundable amount');
  });

  it('counts pending refunds against the limit, so that two refunds never add up to more than was received', () => {
    const first = [...overpaid, ...invoiceDecider.decide(reserve('r1', 100_000_000n), invoiceOf(overpaid))];
    given(invoiceDecider, first)
      .when(reserve('r2', 20_000_001n))
      .thenError('bad_request', 'Refund exceeds the refundable amount');
    given(invoiceDecider, first)
      .when(reserve('r2', 20_000_000n))
      .then([
        {
          type: 'RefundReserved',
          data: { refundId: 'r2', chain: 'ethereum', token: 'USDT', amount: '20000000', reservedAt: at(20) },
        },
      ]);
    // The same refund reserved again (a retried request) is one reservation.
    given(invoiceDecider, first).when(reserve('r1', 100_000_000n)).then([]);
  });

  it('keeps the limit per asset, and refuses an asset never received', () => {
    given(invoiceDecider, overpaid)
      .when(reserve('r1', 5_000_001n, 'USDC'))
      .thenError('bad_request', 'Refund exceeds the refundable amount');
    given(invoiceDecider, overpaid)
      .when(reserve('r1', 1n, 'DAI'))
      .thenError('bad_request', 'The invoice received no DAI on ethereum');
    given(invoiceDecider, overpaid)
      .when(reserve('r1', 0n))
      .thenError('bad_request', 'Refund amount must be greater than 0');
  });

  it('gives a released reservation back, and counts a refunded one for good', () => {
    const reserved = history(create, assign, ...pay(1, 120_000_000n), reserve('r1', 30_000_000n));
    const released = history(create, assign, ...pay(1, 120_000_000n), reserve('r1', 30_000_000n), {
      type: 'ReleaseRefund',
      refundId: 'r1',
      now: at(21),
    });
    assert.equal(refundableOf(invoiceOf(reserved))[0]!.refundable, 90_000_000n);
    assert.equal(refundableOf(invoiceOf(reserved))[0]!.pending, 30_000_000n);
    assert.equal(refundableOf(invoiceOf(released))[0]!.refundable, 120_000_000n);

    const refunded = history(create, assign, ...pay(1, 120_000_000n), reserve('r1', 30_000_000n), {
      type: 'RecordRefund',
      refundId: 'r1',
      txHash: '0xr1',
      now: at(22),
    });
    const [usdt] = refundableOf(invoiceOf(refunded));
    assert.deepEqual(
      { refunded: usdt!.refunded, pending: usdt!.pending, refundable: usdt!.refundable, excess: usdt!.excess },
      { refunded: 30_000_000n, pending: 0n, refundable: 90_000_000n, excess: 0n },
    );
    assert.equal(refundStatusOf(invoiceOf(refunded)), 'partial');
    given(invoiceDecider, refunded)
      .when({ type: 'ReleaseRefund', refundId: 'r1', now: at(23) })
      .thenError('conflict', 'A refund paid out cannot be released');
    given(invoiceDecider, refunded)
      .when({ type: 'RecordRefund', refundId: 'r1', txHash: '0xr1', now: at(23) })
      .then([]);
    given(invoiceDecider, refunded)
      .when({ type: 'RecordRefund', refundId: 'r9', txHash: '0xr9', now: at(23) })
      .thenError('conflict', 'Refund r9 holds no reservation');
  });

  it('pays nothing towards an open invoice with what its refunds give back, and counts it again once released', () => {
    // 40 USDT paid, the 40 refunded while the invoice is open, then 60 paid: 60 of the 100, not confirmed.
    const refundedThenRest = history(
      create,
      assign,
      ...pay(1, 40_000_000n),
      reserve('r1', 40_000_000n),
      ...pay(2, 60_000_000n, 'USDT', 5),
    );
    assert.equal(invoiceOf(refundedThenRest).status, 'partial');
    // The customer is asked for the 40 still owed, and is shown 60 of 100 paid.
    const view = invoicePaymentView(invoiceOf(refundedThenRest));
    assert.deepEqual([view.remainingAmount, view.paymentProgress], ['40.00000000', 60]);
    assert.equal(
      invoiceOf(
        history(
          ...[create, assign, ...pay(1, 40_000_000n), reserve('r1', 40_000_000n)],
          ...pay(2, 60_000_000n, 'USDT', 5),
          ...pay(3, 40_000_000n, 'USDT', 7),
        ),
      ).status,
      'confirmed',
    );
    // The refund canceled: its 40 counts again, and the invoice paid in full confirms with the release.
    const events = invoiceDecider.decide(
      { type: 'ReleaseRefund', refundId: 'r1', now: at(21) },
      invoiceOf(refundedThenRest),
    );
    assert.deepEqual(
      events.map((e) => e.type),
      ['RefundReleased', 'InvoiceConfirmed'],
    );
    // 100 paid in time (not yet confirmed) and 10 late: refunding the late 10 leaves the 100 paid in full.
    const lateRefunded = history(
      create,
      assign,
      pay(1, 100_000_000n)[0]!,
      ...pay(2, 10_000_000n, 'USDT', 16),
      reserve('r1', 10_000_000n),
      pay(1, 100_000_000n)[1]!,
    );
    assert.equal(invoiceOf(lateRefunded).status, 'confirmed');
    // Once confirmed, a refund never takes the confirmation back.
    const confirmed = history(create, assign, ...pay(1, 100_000_000n), reserve('r1', 100_000_000n));
    assert.equal(invoiceOf(confirmed).status, 'confirmed');
  });

  it('says none, partial or full', () => {
    assert.equal(refundStatusOf(invoiceOf(overpaid)), 'none');
    const whole = history(create, assign, ...pay(1, 100_000_000n), reserve('r1', 100_000_000n), {
      type: 'RecordRefund',
      refundId: 'r1',
      txHash: '0xr1',
      now: at(22),
    });
    assert.equal(refundStatusOf(invoiceOf(whole)), 'full');
  });
});

const T0 = at(30);
const T1 = at(31);
const REFUND_ID = '9e8d7c6b-5a49-4837-a625-141312111009';
const createRefund = (destination: string | null = null, amount = 20_000_000n): RefundCommand => ({
  type: 'CreateRefund',
  refundId: REFUND_ID,
  invoiceId: INVOICE_ID,
  merchantId: MERCHANT_ID,
  chain: 'ethereum',
  token: 'USDT',
  tokenDecimals: 6,
  amount,
  networkFee: 1_500_000n,
  fiatAmount: '20.00',
  fiatCurrency: 'USD',
  reason: 'Overpaid',
  destination,
  claimToken: 'c'.repeat(43),
  claimExpiresAt: at(60 * 24 * 30),
  now: T0,
});
const created = (destination: string | null = null): RefundEvent => ({
  type: 'RefundCreated',
  data: {
    refundId: REFUND_ID,
    invoiceId: INVOICE_ID,
    merchantId: MERCHANT_ID,
    chain: 'ethereum',
    token: 'USDT',
    tokenDecimals: 6,
    amount: '20000000',
    networkFee: '1500000',
    netAmount: '18500000',
    fiatAmount: '20.00',
    fiatCurrency: 'USD',
    reason: 'Overpaid',
    destination,
    claimToken: 'c'.repeat(43),
    claimExpiresAt: at(60 * 24 * 30),
    createdAt: T0,
  },
});
const CUSTOMER = '0x00000000000000000000000000000000000000cc';
const claimed: RefundEvent = { type: 'RefundClaimed', data: { destination: CUSTOMER, claimedAt: T1 } };
const payer: RefundPayer = { fundedFrom: 'refund_wallet', fromAddress: '0xwallet', derivationIndex: 0 };
const approved = (funded: boolean): RefundEvent => ({
  type: 'RefundApproved',
  data: { ...payer, merchantId: MERCHANT_ID, chain: 'ethereum', funded, approvedAt: T1 },
});
const fromDeposit: RefundEvent = {
  type: 'RefundApproved',
  data: { ...payer, fundedFrom: 'deposit', merchantId: MERCHANT_ID, chain: 'ethereum', funded: true, approvedAt: T1 },
};
const prepared = (txHash = '0xaa', attempt = 1): RefundEvent => ({
  type: 'RefundTransactionPrepared',
  data: { attempt, txHash, raw: '{}', preparedAt: T1 },
});
const statusAfter = (events: RefundEvent[]) => fold(refundDecider, events)?.status;

describe('the refund aggregate', () => {
  it('is created waiting for the customer, or for the merchant when the address is known', () => {
    given(refundDecider, []).when(createRefund()).then([created()]);
    assert.equal(statusAfter([created()]), 'awaiting_destination');
    assert.equal(statusAfter([created(CUSTOMER)]), 'awaiting_approval');
    given(refundDecider, [created()]).when(createRefund()).then([]);
  });

  it('is refused when the network fee would take it all', () => {
    given(refundDecider, [])
      .when(createRefund(null, 1_500_000n))
      .thenError('bad_request', 'Refund amount must be above the network fee');
  });

  it('takes the customer address until approved, and refuses it once the link has expired', () => {
    given(refundDecider, [created()]).when({ type: 'GiveDestination', destination: CUSTOMER, now: T1 }).then([claimed]);
    given(refundDecider, [created(), claimed])
      .when({ type: 'GiveDestination', destination: '0xother', now: T1 })
      .then([{ type: 'RefundClaimed', data: { destination: '0xother', claimedAt: T1 } }]);
    given(refundDecider, [created(), claimed, approved(true)])
      .when({ type: 'GiveDestination', destination: '0xother', now: T1 })
      .thenError('conflict', 'The refund address can no longer be changed');
    given(refundDecider, [created()])
      .when({ type: 'GiveDestination', destination: CUSTOMER, now: at(60 * 24 * 31) })
      .thenError('not_found', 'Refund not found');
  });

  it('is approved once: a repeat is harmless, and an unclaimed refund cannot be approved', () => {
    given(refundDecider, [created(), claimed])
      .when({ type: 'Approve', payer, funded: false, now: T1 })
      .then([approved(false)]);
    assert.equal(statusAfter([created(), claimed, approved(false)]), 'awaiting_funds');
    assert.equal(statusAfter([created(), claimed, approved(true)]), 'sending');
    given(refundDecider, [created(), claimed, approved(false)])
      .when({ type: 'Approve', payer, funded: true, now: T1 })
      .then([]);
    given(refundDecider, [created()])
      .when({ type: 'Approve', payer, funded: true, now: T1 })
      .thenError('conflict', 'The customer has not given an address yet');
  });

  it('waits for funds, then goes on by itself', () => {
    given(refundDecider, [created(), claimed, approved(false)])
      .when({ type: 'MarkFunded', now: T1 })
      .then([{ type: 'RefundFunded', data: { fundedAt: T1 } }]);
    given(refundDecider, [created(), claimed, approved(true)])
      .when({ type: 'MarkFunded', now: T1 })
      .then([]);
  });

  it('waits for funds again when its refund wallet cannot pay after all, but only with nothing of its attempt on its way', () => {
    const lacking = 'leaves the payer under the rent-exempt minimum';
    const awaiting: RefundEvent = { type: 'RefundAwaitingFunds', data: { reason: lacking, awaitingSince: T1 } };
    const funded: RefundEvent = { type: 'RefundFunded', data: { fundedAt: T1 } };
    const rejected: RefundEvent = {
      type: 'RefundFailed',
      data: {
        invoiceId: INVOICE_ID,
        attempt: 1,
        reason: 'refused',
        code: 'rejected_by_network',
        rejected: true,
        retryAt: T1,
        failedAt: T1,
      },
    };
    const retried: RefundEvent = { type: 'RefundRetried', data: { attempt: 2, retriedAt: T1 } };
    for (const before of [
      [created(), claimed, approved(false), funded],
      [created(), claimed, approved(true), prepared(), rejected, retried],
    ]) {
      given(refundDecider, before).when({ type: 'AwaitFunds', reason: lacking, now: T1 }).then([awaiting]);
      assert.equal(statusAfter([...before, awaiting]), 'awaiting_funds');
      given(refundDecider, [...before, awaiting])
        .when({ type: 'MarkFunded', now: T1 })
        .then([funded]);
    }
    given(refundDecider, [created(), claimed, approved(true), awaiting])
      .when({ type: 'AwaitFunds', reason: lacking, now: T1 })
      .then([]);
    given(refundDecider, [created(), claimed, approved(true), prepared()])
      .when({ type: 'AwaitFunds', reason: lacking, now: T1 })
      .thenError('conflict', 'Refund can no longer wait for funds');
    given(refundDecider, [created(), claimed, fromDeposit])
      .when({ type: 'AwaitFunds', reason: lacking, now: T1 })
      .thenError('conflict', 'Refund can no longer wait for funds');
  });

  it('approved from the deposit, moves to the refund wallet only while nothing of it was ever prepared', () => {
    const fromDeposit: RefundEvent = {
      type: 'RefundApproved',
      data: {
        ...payer,
        fromAddress: DEPOSIT,
        fundedFrom: 'deposit',
        merchantId: MERCHANT_ID,
        chain: 'ethereum',
        funded: true,
        approvedAt: T1,
      },
    };
    const reason = 'The deposit no longer held the refund';
    const move = (funded: boolean): RefundCommand => ({ type: 'PayFromRefundWallet', payer, funded, reason, now: T1 });
    const moved = (funded: boolean): RefundEvent => ({
      type: 'RefundPayerChanged',
      data: { ...payer, funded, reason, changedAt: T1 },
    });
    const before = [created(), claimed, fromDeposit];
    given(refundDecider, before)
      .when(move(false))
      .then([moved(false)]);
    const after = fold(refundDecider, [...before, moved(false)])!;
    assert.equal(after.status, 'awaiting_funds');
    assert.deepEqual(after.payer, payer);
    assert.equal(statusAfter([...before, moved(true)]), 'sending');
    // Once: moved already, nothing more.
    given(refundDecider, [...before, moved(true)])
      .when(move(true))
      .then([]);
    // A transaction from the deposit prepared (even one refused since): it may still land, the deposit keeps it.
    given(refundDecider, [...before, prepared()])
      .when(move(true))
      .thenError('conflict', 'The refund is no longer waiting to be paid from the deposit');
    given(refundDecider, [created(), claimed])
      .when(move(true))
      .thenError('conflict', 'The refund is no longer waiting to be paid from the deposit');
  });

  it('gives back a hold by itself only for a refund not approved past the grace, ended unpaid, or paid from its wallet', () => {
    const now = new Date(at(40));
    const stateOf = (events: RefundEvent[]) => fold(refundDecider, events);
    // Not approved: only a hold taken 5 minutes before now or earlier, as the settlement's stream decides.
    assert.deepEqual(releaseOfHold(REFUND_ID, stateOf([created(), claimed]), now), {
      type: 'ReleaseUnapprovedHold',
      refundId: REFUND_ID,
      heldBefore: at(35),
      now: at(40),
    });
    // Approved from the deposit, on its way or paid: its payout and the saga have it.
    assert.equal(releaseOfHold(REFUND_ID, stateOf([created(), claimed, fromDeposit]), now), undefined);
    assert.equal(releaseOfHold(REFUND_ID, null, now), undefined);
    const released = { type: 'ReleaseRefund', refundId: REFUND_ID, paid: false, now: at(40) };
    const canceled: RefundEvent = { type: 'RefundCanceled', data: { invoiceId: INVOICE_ID, canceledAt: T1 } };
    assert.deepEqual(releaseOfHold(REFUND_ID, stateOf([created(), claimed, canceled]), now), released);
    // Approved from the refund wallet (by another request): a hold on the deposit is not its own.
    assert.deepEqual(releaseOfHold(REFUND_ID, stateOf([created(), claimed, approved(true)]), now), released);
  });

  it('can be canceled only before sending, and then gives its reservation back', () => {
    const canceled: RefundEvent = { type: 'RefundCanceled', data: { invoiceId: INVOICE_ID, canceledAt: T1 } };
    for (const before of [[created()], [created(), claimed], [created(), claimed, approved(false)]]) {
      given(refundDecider, before).when({ type: 'Cancel', now: T1 }).then([canceled]);
    }
    given(refundDecider, [created(), canceled]).when({ type: 'Cancel', now: T1 }).then([]);
    given(refundDecider, [created(), claimed, approved(true)])
      .when({ type: 'Cancel', now: T1 })
      .thenError('conflict', 'Refund can no longer be canceled');
  });

  it('can be canceled once failed before any transaction was made for it, never after one was', () => {
    const canceled: RefundEvent = { type: 'RefundCanceled', data: { invoiceId: INVOICE_ID, canceledAt: T1 } };
    // A transfer the token contract reverts (a blacklisted address) is refused when its gas is estimated.
    const failedPreparing: RefundEvent = {
      type: 'RefundFailed',
      data: {
        invoiceId: INVOICE_ID,
        attempt: 1,
        reason: 'execution reverted',
        code: 'node_unavailable',
        retryAt: T1,
        failedAt: T1,
      },
    };
    const beforeAny = [created(), claimed, approved(true), failedPreparing];
    given(refundDecider, beforeAny).when({ type: 'Cancel', now: T1 }).then([canceled]);
    // Once canceled, the engine's next attempt finds nothing to retry or prepare.
    given(refundDecider, [...beforeAny, canceled])
      .when({ type: 'Retry', now: T1 })
      .then([]);
    given(refundDecider, [...beforeAny, canceled])
      .when({ type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T1 })
      .then([]);
    // A refused transaction may still be mined (Bitcoin's replaced one): not cancelable.
    const refused = { ...failedPreparing, data: { ...failedPreparing.data, rejected: true } } as RefundEvent;
    const retried: RefundEvent = { type: 'RefundRetried', data: { attempt: 2, retriedAt: T1 } };
    given(refundDecider, [created(), claimed, approved(true), prepared(), refused, retried, failedPreparing])
      .when({ type: 'Cancel', now: T1 })
      .thenError('conflict', 'Refund can no longer be canceled');
  });

  it('expires only when the link was never used', () => {
    const late = at(60 * 24 * 30);
    given(refundDecider, [created()])
      .when({ type: 'Expire', now: late })
      .then([{ type: 'RefundExpired', data: { invoiceId: INVOICE_ID, expiredAt: late } }]);
    given(refundDecider, [created()]).when({ type: 'Expire', now: T1 }).then([]);
    given(refundDecider, [created(), claimed]).when({ type: 'Expire', now: late }).then([]);
  });

  it('records its transaction before it is sent, sends the same one again after an unknown outcome, and a new one only after a rejection', () => {
    const sending = [created(), claimed, approved(true)];
    given(refundDecider, sending)
      .when({ type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T1 })
      .then([prepared()]);
    given(refundDecider, [...sending, prepared()])
      .when({ type: 'PrepareTransaction', txHash: '0xbb', raw: '{}', now: T1 })
      .then([]);

    const timedOut: RefundEvent = {
      type: 'RefundFailed',
      data: {
        invoiceId: INVOICE_ID,
        attempt: 1,
        reason: 'timeout',
        code: 'node_unavailable',
        retryAt: T1,
        failedAt: T1,
      },
    };
    const retried: RefundEvent = { type: 'RefundRetried', data: { attempt: 2, retriedAt: T1 } };
    const afterUnknown = fold(refundDecider, [...sending, prepared(), timedOut, retried]);
    assert.deepEqual(afterUnknown?.prepared, { txHash: '0xaa', raw: '{}' });

    const rejected: RefundEvent = {
      type: 'RefundFailed',
      data: {
        invoiceId: INVOICE_ID,
        attempt: 1,
        reason: 'nonce too low',
        code: 'rejected_by_network',
        rejected: true,
        retryAt: T1,
        failedAt: T1,
      },
    };
    const afterRejection = [...sending, prepared(), rejected, retried];
    assert.equal(fold(refundDecider, afterRejection)?.prepared, null);
    given(refundDecider, afterRejection)
      .when({ type: 'PrepareTransaction', txHash: '0xbb', raw: '{}', now: T1 })
      .then([prepared('0xbb', 2)]);
    // Whichever transaction lands is the one payout; one never prepared is not this refund's.
    given(refundDecider, [...afterRejection, prepared('0xbb', 2)])
      .when({ type: 'MarkCompleted', txHash: '0xaa', blockNumber: 7, confirmations: 12, now: T1 })
      .then([
        {
          type: 'RefundCompleted',
          data: {
            invoiceId: INVOICE_ID,
            fundedFrom: 'refund_wallet',
            txHash: '0xaa',
            blockNumber: 7,
            confirmations: 12,
            completedAt: T1,
          },
        },
      ]);
    given(refundDecider, [...afterRejection, prepared('0xbb', 2)])
      .when({ type: 'MarkCompleted', txHash: '0xcc', blockNumber: 7, confirmations: 12, now: T1 })
      .thenError('conflict', "Transaction 0xcc is not one of this refund's");
  });
});

describe("a refund's coins on a UTXO chain", () => {
  const spent = [{ txHash: 'aa', index: 0, amount: '30000000' }];
  const coinsOf = (txHash: string, change: string) => ({ spent, change: { txHash, index: 1, amount: change } });
  const deposit: RefundEvent = {
    type: 'RefundApproved',
    data: {
      fundedFrom: 'deposit',
      fromAddress: 'bc1deposit',
      derivationIndex: 3,
      merchantId: MERCHANT_ID,
      chain: 'bitcoin',
      funded: true,
      approvedAt: T1,
    },
  };
  const preparedWith = (txHash: string, attempt: number, change: string): RefundEvent => ({
    type: 'RefundTransactionPrepared',
    data: { attempt, txHash, raw: '{}', coins: coinsOf(txHash, change), preparedAt: T1 },
  });
  const completed: RefundEvent = {
    type: 'RefundCompleted',
    data: {
      invoiceId: INVOICE_ID,
      fundedFrom: 'deposit',
      coins: coinsOf('a1', '9999694'),
      txHash: 'a1',
      blockNumber: 7,
      confirmations: 3,
      completedAt: T1,
    },
  };

  it('records what each transaction spends and gives back, and completes with the mined one’s', () => {
    const sending = [created(), claimed, deposit];
    given(refundDecider, sending)
      .when({ type: 'PrepareTransaction', txHash: 'a1', raw: '{}', coins: coinsOf('a1', '9999694'), now: T1 })
      .then([preparedWith('a1', 1, '9999694')]);
    // The first was refused by the chain; its replacement spends the same coins at a higher fee.
    const rejected: RefundEvent = {
      type: 'RefundFailed',
      data: {
        invoiceId: INVOICE_ID,
        fundedFrom: 'deposit',
        attempt: 1,
        reason: 'stuck',
        code: 'rejected_by_network',
        rejected: true,
        retryAt: T1,
        failedAt: T1,
      },
    };
    const retried: RefundEvent = { type: 'RefundRetried', data: { attempt: 2, retriedAt: T1 } };
    const both = [...sending, preparedWith('a1', 1, '9999694'), rejected, retried, preparedWith('b2', 2, '9999388')];
    assert.deepEqual(Object.keys(fold(refundDecider, both)!.coins), ['a1', 'b2']);
    // Whichever is mined, the settlement is told its change.
    given(refundDecider, both)
      .when({ type: 'MarkCompleted', txHash: 'a1', blockNumber: 7, confirmations: 3, now: T1 })
      .then([completed]);
  });

  it("hands the settlement the refund's change in place of the coins it spent", () => {
    assert.deepEqual(reactToRefundEvent(REFUND_ID, completed).at(-1), {
      to: 'settlement',
      settlementId: settlementIdOf(INVOICE_ID),
      command: { type: 'ReleaseRefund', refundId: REFUND_ID, paid: true, coins: coinsOf('a1', '9999694'), now: T1 },
    });
  });
});

describe('the refund saga', () => {
  const release = (now: string) => [
    { to: 'invoice', invoiceId: INVOICE_ID, command: { type: 'ReleaseRefund', refundId: REFUND_ID, now } },
  ];

  it("reserves a new refund's amount on its invoice", () => {
    assert.deepEqual(reactToRefundEvent(REFUND_ID, created()), [
      {
        to: 'invoice',
        invoiceId: INVOICE_ID,
        command: {
          type: 'ReserveRefund',
          refundId: REFUND_ID,
          chain: 'ethereum',
          token: 'USDT',
          amount: 20_000_000n,
          now: T0,
        },
      },
    ]);
  });

  it('gives the reservation back only when the refund can never be paid, and records it once paid', () => {
    const failed = (retryAt: string | null): RefundEvent => ({
      type: 'RefundFailed',
      data: { invoiceId: INVOICE_ID, attempt: 1, reason: 'fees', code: 'fees_exceed_amount', retryAt, failedAt: T1 },
    });
    assert.deepEqual(reactToRefundEvent(REFUND_ID, failed(null)), release(T1));
    assert.deepEqual(reactToRefundEvent(REFUND_ID, failed(T1)), []);
    assert.deepEqual(
      reactToRefundEvent(REFUND_ID, { type: 'RefundCanceled', data: { invoiceId: INVOICE_ID, canceledAt: T1 } }),
      [
        ...release(T1),
        // A hold an approval took before it crashed is given back with it.
        {
          to: 'settlement',
          settlementId: settlementIdOf(INVOICE_ID),
          command: { type: 'ReleaseRefund', refundId: REFUND_ID, paid: false, now: T1 },
        },
      ],
    );
    assert.deepEqual(
      reactToRefundEvent(REFUND_ID, { type: 'RefundExpired', data: { invoiceId: INVOICE_ID, expiredAt: T1 } }),
      release(T1),
    );
    assert.deepEqual(reactToRefundEvent(REFUND_ID, approved(true)), []);
    assert.deepEqual(reactToRefundEvent(REFUND_ID, claimed), []);
    const completed: RefundEvent = {
      type: 'RefundCompleted',
      data: { invoiceId: INVOICE_ID, txHash: '0xaa', blockNumber: 7, confirmations: 12, completedAt: T1 },
    };
    assert.deepEqual(reactToRefundEvent(REFUND_ID, completed), [
      {
        to: 'invoice',
        invoiceId: INVOICE_ID,
        command: { type: 'RecordRefund', refundId: REFUND_ID, txHash: '0xaa', now: T1 },
      },
    ]);
  });

  it('paid from the deposit, it lets the held settlement go on: without its amount once paid, with it when never to be paid', () => {
    const settlement = settlementIdOf(INVOICE_ID);
    const completed: RefundEvent = {
      type: 'RefundCompleted',
      data: {
        invoiceId: INVOICE_ID,
        fundedFrom: 'deposit',
        txHash: '0xaa',
        blockNumber: 7,
        confirmations: 12,
        completedAt: T1,
      },
    };
    assert.deepEqual(reactToRefundEvent(REFUND_ID, completed).at(-1), {
      to: 'settlement',
      settlementId: settlement,
      command: { type: 'ReleaseRefund', refundId: REFUND_ID, paid: true, now: T1 },
    });
    const failedForGood: RefundEvent = {
      type: 'RefundFailed',
      data: {
        invoiceId: INVOICE_ID,
        fundedFrom: 'deposit',
        attempt: 1,
        reason: 'fees',
        code: 'fees_exceed_amount',
        retryAt: null,
        failedAt: T1,
      },
    };
    assert.deepEqual(reactToRefundEvent(REFUND_ID, failedForGood), [
      ...release(T1),
      {
        to: 'settlement',
        settlementId: settlement,
        command: { type: 'ReleaseRefund', refundId: REFUND_ID, paid: false, now: T1 },
      },
    ]);
  });
});
