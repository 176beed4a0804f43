import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fold } from '../domain/decider.ts';
import {
  type PaymentCommand,
  type PaymentDetected,
  type PaymentEvent,
  MEMPOOL_BLOCK_HASH,
  PAYMENT_ID_NAMESPACE,
  paymentDecider,
  paymentId,
  paymentStreamName,
} from '../domain/payment.ts';
import { given as givenFor } from './support/decider.ts';

const given = (events: PaymentEvent[]) => givenFor(paymentDecider, events);

const at = (minute: number): string => new Date(Date.UTC(2025, 0, 1, 0, minute)).toISOString();

const TX = '0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060';
const ID = paymentId('ethereum', TX, 3);
const INVOICE_ID = '6f1d3c9e-8a2b-4c5d-9e0f-112233445566';

type DetectPayment = Extract<PaymentCommand, { type: 'DetectPayment' }>;

const detect = (override: Partial<DetectPayment> = {}): DetectPayment => ({
  type: 'DetectPayment',
  chain: 'ethereum',
  token: 'USDT',
  tokenDecimals: 6,
  amount: 100_000_000n,
  toAddress: '0xaa',
  txHash: TX,
  outputIndex: 3,
  blockNumber: 1000,
  blockHash: '0xblock1000',
  invoiceId: INVOICE_ID,
  tokenMatchesInvoice: true,
  confirmations: 1,
  requiredConfirmations: 12,
  detectedAt: at(5),
  ...override,
});

const detected = (override: Partial<PaymentDetected['data']> = {}): PaymentDetected => ({
  type: 'PaymentDetected',
  data: {
    paymentId: ID,
    invoiceId: INVOICE_ID,
    chain: 'ethereum',
    token: 'USDT',
    tokenDecimals: 6,
    amount: '100000000',
    toAddress: '0xaa',
    txHash: TX,
    outputIndex: 3,
    blockNumber: 1000,
    blockHash: '0xblock1000',
    wrongToken: false,
    confirmations: 1,
    requiredConfirmations: 12,
    detectedAt: at(5),
    ...override,
  },
});

const confirmationsUpdated = (confirmations: number, minute: number): PaymentEvent => ({
  type: 'PaymentConfirmationsUpdated',
  data: { paymentId: ID, confirmations, observedAt: at(minute) },
});
const confirmed = (confirmations: number, minute: number): PaymentEvent => ({
  type: 'PaymentConfirmed',
  data: { paymentId: ID, invoiceId: INVOICE_ID, confirmations, confirmedAt: at(minute) },
});
const reorged = (blockHash: string, minute: number): PaymentEvent => ({
  type: 'PaymentReorged',
  data: { paymentId: ID, invoiceId: INVOICE_ID, blockHash, reorgedAt: at(minute) },
});

describe('paymentId', () => {
  it('is a deterministic UUIDv5 of chain, tx hash and output index', () => {
    assert.equal(PAYMENT_ID_NAMESPACE, 'a9d7d292-d32c-4981-aa64-803e6756124f');
    assert.equal(paymentId('ethereum', TX, 3), ID);
    assert.match(ID, /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.notEqual(paymentId('ethereum', TX, 4), ID);
    assert.notEqual(paymentId('bsc', TX, 3), ID);
    assert.notEqual(paymentId('ethereum', TX.replace('0x5', '0x6'), 3), ID);
  });

  it('names the stream', () => {
    assert.equal(paymentStreamName('bitcoin', 'abcd', 0), 'payment-bitcoin-abcd-0');
  });
});

describe('payment: detection', () => {
  it('records a detected transfer', () => {
    given([]).when(detect()).then([detected()]);
    const state = fold(paymentDecider, [detected()]);
    assert.equal(state?.status, 'detected');
    assert.equal(state?.amount, 100_000_000n);
    assert.equal(state?.confirmations, 1);
  });

  it('records a wrong token as a detected payment flagged wrongToken', () => {
    given([])
      .when(detect({ token: 'USDC', tokenMatchesInvoice: false }))
      .then([detected({ token: 'USDC', wrongToken: true })]);
  });

  it('confirms at once when first seen with the required confirmations', () => {
    given([])
      .when(detect({ confirmations: 12 }))
      .then([detected({ confirmations: 12 }), confirmed(12, 5)]);
  });

  it('is idempotent: the same transfer in the same block seen twice decides nothing', () => {
    given([detected()]).when(detect()).then([]);
    given([detected(), confirmed(12, 8)])
      .when(detect({ confirmations: 20, detectedAt: at(9) }))
      .then([]);
  });

  it('records the old block as reorged when the transfer shows up in another block', () => {
    given([detected()])
      .when(detect({ blockNumber: 1001, blockHash: '0xblock1001b', detectedAt: at(7) }))
      .then([reorged('0xblock1000', 7), detected({ blockNumber: 1001, blockHash: '0xblock1001b', detectedAt: at(7) })]);
  });

  it('detects a reorged payment again when it is re-mined, for the same invoice', () => {
    given([detected(), reorged('0xblock1000', 6)])
      .when(detect({ blockNumber: 1002, blockHash: '0xblock1002', detectedAt: at(7), invoiceId: 'ignored' }))
      .then([detected({ blockNumber: 1002, blockHash: '0xblock1002', detectedAt: at(7) })]);
  });

  it('refuses zero-value transfers and bad confirmation counts', () => {
    given([])
      .when(detect({ amount: 0n }))
      .thenError('bad_request', 'Payment amount must be greater than 0');
    given([])
      .when(detect({ confirmations: -1 }))
      .thenError('bad_request', 'Confirmations must be non-negative integers');
    given([])
      .when(detect({ requiredConfirmations: 1.5 }))
      .thenError('bad_request', 'Confirmations must be non-negative integers');
  });

  it('refuses a transfer that belongs to another stream', () => {
    given([detected()])
      .when(detect({ outputIndex: 4 }))
      .thenError('conflict', `Transfer ${TX}:4 does not belong to payment ${ID}`);
  });
});

describe('payment: confirmations', () => {
  const update = (confirmations: number, minute: number): PaymentCommand => ({
    type: 'UpdateConfirmations',
    confirmations,
    observedAt: at(minute),
  });

  it('records a growing count below the requirement', () => {
    given([detected()])
      .when(update(5, 6))
      .then([confirmationsUpdated(5, 6)]);
    assert.equal(fold(paymentDecider, [detected(), confirmationsUpdated(5, 6)])?.confirmations, 5);
  });

  it('confirms exactly at the required count', () => {
    given([detected(), confirmationsUpdated(11, 7)])
      .when(update(12, 8))
      .then([confirmed(12, 8)]);
    const state = fold(paymentDecider, [detected(), confirmed(12, 8)]);
    assert.equal(state?.status, 'confirmed');
    assert.equal(state?.confirmedAt, at(8));
  });

  it('confirms when a jump passes the requirement', () => {
    given([detected()])
      .when(update(30, 8))
      .then([confirmed(30, 8)]);
  });

  it('ignores counts that do not grow, and anything after confirmation or reorg', () => {
    given([detected(), confirmationsUpdated(5, 6)])
      .when(update(5, 7))
      .then([]);
    given([detected(), confirmationsUpdated(5, 6)])
      .when(update(4, 7))
      .then([]);
    given([detected(), confirmed(12, 8)])
      .when(update(13, 9))
      .then([]);
    given([detected(), reorged('0xblock1000', 6)])
      .when(update(12, 9))
      .then([]);
  });

  it('answers not found for an unknown payment', () => {
    given([]).when(update(1, 6)).thenError('not_found', 'Payment not found');
  });
});

describe('payment: reorgs', () => {
  const reorg = (blockHash: string, minute: number): PaymentCommand => ({
    type: 'RecordReorg',
    blockHash,
    reorgedAt: at(minute),
  });

  it('records a reorg of the block holding the payment', () => {
    given([detected(), confirmationsUpdated(3, 6)])
      .when(reorg('0xblock1000', 7))
      .then([reorged('0xblock1000', 7)]);
    const state = fold(paymentDecider, [detected(), confirmationsUpdated(3, 6), reorged('0xblock1000', 7)]);
    assert.equal(state?.status, 'reorged');
    assert.equal(state?.confirmations, 0);
  });

  it('records a deep reorg of a confirmed payment', () => {
    given([detected(), confirmed(12, 8)])
      .when(reorg('0xblock1000', 9))
      .then([reorged('0xblock1000', 9)]);
  });

  it('ignores a reorg of another block, and a repeated reorg', () => {
    given([detected()]).when(reorg('0xsomeotherblock', 7)).then([]);
    given([detected(), reorged('0xblock1000', 7)])
      .when(reorg('0xblock1000', 8))
      .then([]);
  });

  it('answers not found for an unknown payment', () => {
    given([]).when(reorg('0xblock1000', 7)).thenError('not_found', 'Payment not found');
  });

  it('refuses events before PaymentDetected', () => {
    assert.throws(() => fold(paymentDecider, [confirmed(12, 8)]), /PaymentConfirmed before PaymentDetected/);
  });
});

describe('a payment seen in the mempool', () => {
  const inMempool = { blockNumber: -1, blockHash: MEMPOOL_BLOCK_HASH, confirmations: 0 };
  const mined = (confirmations: number, minute: number): PaymentEvent => ({
    type: 'PaymentMined',
    data: { paymentId: ID, blockNumber: 1000, blockHash: '0xblock1000', confirmations, minedAt: at(minute) },
  });

  it('is detected at 0 confirmations', () => {
    given([]).when(detect(inMempool)).then([detected(inMempool)]);
  });

  it('gets its block when mined, and is confirmed at once when that block is already deep enough', () => {
    given([detected(inMempool)])
      .when(detect({ detectedAt: at(9) }))
      .then([mined(1, 9)]);
    given([detected(inMempool)])
      .when(detect({ confirmations: 12, detectedAt: at(9) }))
      .then([mined(12, 9), confirmed(12, 9)]);
    const state = fold(paymentDecider, [detected(inMempool), mined(1, 9)]);
    assert.deepEqual([state?.blockNumber, state?.blockHash, state?.confirmations], [1000, '0xblock1000', 1]);
  });

  it('seen in the mempool again once mined, stays in its block', () => {
    given([detected(inMempool), mined(1, 9)]).when(detect({ ...inMempool, detectedAt: at(10) })).then([]);
  });

  it('gone from the mempool (replaced, evicted), is withdrawn like a reorged one', () => {
    given([detected(inMempool)])
      .when({ type: 'RecordReorg', blockHash: MEMPOOL_BLOCK_HASH, reorgedAt: at(7) })
      .then([
        {
          type: 'PaymentReorged',
          data: { paymentId: ID, invoiceId: INVOICE_ID, blockHash: MEMPOOL_BLOCK_HASH, reorgedAt: at(7) },
        },
      ]);
    // Once mined, a mempool withdrawal no longer concerns it.
    given([detected(inMempool), mined(1, 9)])
      .when({ type: 'RecordReorg', blockHash: MEMPOOL_BLOCK_HASH, reorgedAt: at(10) })
      .then([]);
  });
});
