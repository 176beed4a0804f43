// The settlement decider: given events, when a command, then events.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  payoutSources,
  platformFeeOf,
  requestedSettlement,
  settlementDecider,
  settlementIdOf,
  sourcesBeforeRequest,
  type PendingHolds,
  type SettlementCommand,
  type SettlementEvent,
} from '../domain/settlement.ts';
import { given } from './support/decider.ts';

const T0 = '2026-11-22T10:00:00.000Z';
const T1 = '2026-11-22T10:01:00.000Z';
const id = settlementIdOf('6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10');
const request = (wallet: string | null, gross = 100_000_000n): SettlementCommand => ({
  type: 'RequestSettlement',
  settlementId: id,
  invoiceId: '6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10',
  merchantId: 'c83280d0-085e-47c7-a874-6e4fc2a47207',
  chain: 'tron',
  token: 'USDT',
  tokenDecimals: 6,
  fromAddress: 'TDeposit',
  derivationIndex: 7,
  grossAmount: gross,
  networkFee: 0n,
  platformFeeBps: 100,
  merchantWallet: wallet,
  now: T0,
});
const requested = (wallet: string | null): SettlementEvent => ({
  type: 'SettlementRequested',
  data: {
    settlementId: id,
    invoiceId: '6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10',
    merchantId: 'c83280d0-085e-47c7-a874-6e4fc2a47207',
    chain: 'tron',
    token: 'USDT',
    tokenDecimals: 6,
    fromAddress: 'TDeposit',
    derivationIndex: 7,
    grossAmount: '100000000',
    platformFee: '1000000',
    networkFee: '0',
    netAmount: '99000000',
    platformFeeBps: 100,
    merchantWallet: wallet,
    requestedAt: T0,
  },
});
const prepared = (txHash = '0xaa', attempt = 1): SettlementEvent => ({
  type: 'SettlementTransactionPrepared',
  data: { attempt, txHash, raw: '{}', preparedAt: T0 },
});
const submitted = (txHash = '0xaa', attempt = 1): SettlementEvent => ({
  type: 'SettlementSubmitted',
  data: { attempt, txHash, submittedAt: T0 },
});
const failed: SettlementEvent = {
  type: 'SettlementFailed',
  data: { attempt: 1, reason: 'node down', code: 'node_unavailable', retryAt: T1, failedAt: T0 },
};
const rejected: SettlementEvent = {
  type: 'SettlementFailed',
  data: {
    attempt: 1,
    reason: 'insufficient funds',
    code: 'rejected_by_network',
    rejected: true,
    retryAt: T1,
    failedAt: T0,
  },
};
const failedFor = (code: 'fees_exceed_amount' | 'payment_reversed', reason: string, at = T0): SettlementEvent => ({
  type: 'SettlementFailed',
  data: { attempt: 1, reason, code, retryAt: null, failedAt: at },
});
const FEES = 'The amount received does not cover the fees';
const REVERSED = 'The payments of this settlement were withdrawn by a reorganisation of the chain';
const repriced = (gross: string, platform: string, network: string, net: string, at = T1): SettlementEvent => ({
  type: 'SettlementRepriced',
  data: {
    grossAmount: gross,
    platformFee: platform,
    networkFee: network,
    netAmount: net,
    cause: 'receipts_changed',
    repricedAt: at,
  },
});
const receipts = (gross: bigint, at = T1): SettlementCommand => ({
  type: 'RepriceForReceipts',
  grossAmount: gross,
  now: at,
});
const retried: SettlementEvent = { type: 'SettlementRetried', data: { attempt: 2, retriedAt: T1 } };
/** A refund from the deposit asking its settlement to hold `amount` of `token`. */
const holdFor = (refundId: string, amount: bigint, token = 'USDT'): SettlementCommand => ({
  type: 'HoldForRefund',
  refundId,
  token,
  fromAddress: 'TDeposit',
  amount,
  now: T1,
});

/** The settlement the events leave (they request one). */
/** 0xaa completed in block 9, 19 deep, at T1. */
const completed: SettlementEvent = {
  type: 'SettlementCompleted',
  data: {
    txHash: '0xaa',
    blockNumber: 9,
    confirmations: 19,
    completedAt: T1,
    invoiceId: '6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10',
    netAmount: '99000000',
    token: 'USDT',
    tokenDecimals: 6,
  },
};
const settled = (events: readonly SettlementEvent[]) => requestedSettlement(given(settlementDecider, events).state)!;

describe('settlement decider', () => {
  it('requests a settlement net of the platform fee, once per invoice', () => {
    given(settlementDecider, [])
      .when(request('TWallet'))
      .then([requested('TWallet')]);
    given(settlementDecider, [requested('TWallet')])
      .when(request('TWallet'))
      .then([]);
    // Confirmed again on another address (the first payment reorged out, another token paid): not
    // added up in the wrong units, but raised for a person, once.
    const elsewhere: SettlementEvent = {
      type: 'SettlementAttentionRaised',
      data: { reason: 'paid_elsewhere', grossAmount: '100000000', raisedAt: T0 },
    };
    given(settlementDecider, [requested('TWallet')])
      .when({ ...request('TWallet'), fromAddress: 'TOther' } as SettlementCommand)
      .then([elsewhere]);
    given(settlementDecider, [requested('TWallet'), elsewhere])
      .when({ ...request('TWallet'), fromAddress: 'TOther' } as SettlementCommand)
      .then([]);
    // Asked again with other receipts (the invoice confirmed again after a reorg): re-priced.
    given(settlementDecider, [requested('TWallet')])
      .when(request('TWallet', 50_000_000n))
      .then([repriced('50000000', '500000', '0', '49500000', T0)]);
  });

  it('rounds the platform fee down, never charging more than the rate', () => {
    assert.equal(platformFeeOf(199n, 100), 1n);
    assert.equal(platformFeeOf(100n, 100), 1n);
    assert.equal(platformFeeOf(99n, 100), 0n);
    assert.equal(platformFeeOf(10_000n, 250), 250n);
  });

  it('records a payout the fees would eat, failed for good with its reason, instead of refusing it unseen', () => {
    const small = { ...request('TWallet', 1n), networkFee: 1n } as SettlementCommand;
    const [created, fail] = settlementDecider.decide(small, null);
    assert.equal(created!.type, 'SettlementRequested');
    assert.deepEqual(fail, failedFor('fees_exceed_amount', FEES));
    const state = settled([created!, fail!]);
    assert.equal(state.status, 'failed');
    assert.equal(state.failureCode, 'fees_exceed_amount');
    assert.equal(state.retryAt, null);
    given(settlementDecider, [created!, fail!]).when({ type: 'Retry', now: T1 }).then([]);
  });

  it('prices the network fee when the payout is prepared, and fails visibly when it takes everything', () => {
    given(settlementDecider, [requested('TWallet')])
      .when({ type: 'PriceNetworkFee', networkFee: 2_000_000n, now: T1 })
      .then([
        {
          type: 'SettlementRepriced',
          data: {
            grossAmount: '100000000',
            platformFee: '1000000',
            networkFee: '2000000',
            netAmount: '97000000',
            cause: 'network_fee',
            repricedAt: T1,
          },
        },
      ]);
    given(settlementDecider, [requested('TWallet')])
      .when({ type: 'PriceNetworkFee', networkFee: 0n, now: T1 })
      .then([]);
    const eaten = settlementDecider.decide(
      { type: 'PriceNetworkFee', networkFee: 99_000_000n, now: T1 },
      given(settlementDecider, [requested('TWallet')]).state,
    );
    assert.deepEqual(eaten[1], failedFor('fees_exceed_amount', FEES, T1));
    // Once a transaction is prepared its fee is what it is, for its replacements too.
    given(settlementDecider, [requested('TWallet'), prepared(), rejected, retried])
      .when({ type: 'PriceNetworkFee', networkFee: 5n, now: T1 })
      .then([]);
    given(settlementDecider, [requested('TWallet'), prepared()])
      .when({ type: 'PriceNetworkFee', networkFee: 5n, now: T1 })
      .then([]);
  });

  it("waits for a wallet, takes the merchant's current one until a transaction is prepared, then keeps it", () => {
    given(settlementDecider, [requested(null)])
      .when({ type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T0 })
      .thenError('conflict', 'The merchant has no wallet for this chain');
    assert.equal(settled([requested(null)]).failureCode, 'no_wallet');
    given(settlementDecider, [requested(null)])
      .when({ type: 'SetWallet', merchantWallet: 'TNew', now: T1 })
      .then([{ type: 'SettlementWalletSet', data: { merchantWallet: 'TNew', setAt: T1 } }]);
    // A wallet replaced before anything was prepared (a compromised one rotated) is the one paid.
    given(settlementDecider, [requested('TOld')])
      .when({ type: 'SetWallet', merchantWallet: 'TNew', now: T1 })
      .then([{ type: 'SettlementWalletSet', data: { merchantWallet: 'TNew', setAt: T1 } }]);
    given(settlementDecider, [requested('TOld')])
      .when({ type: 'SetWallet', merchantWallet: 'TOld', now: T1 })
      .then([]);
    given(settlementDecider, [requested('TOld'), prepared()])
      .when({ type: 'SetWallet', merchantWallet: 'TNew', now: T1 })
      .then([]);
  });

  it('follows the receipts until prepared: re-priced, failed when a reorg took everything, reopened when it comes back', () => {
    given(settlementDecider, [requested('TWallet')])
      .when(receipts(120_000_000n))
      .then([repriced('120000000', '1200000', '0', '118800000')]);
    given(settlementDecider, [requested('TWallet')])
      .when(receipts(100_000_000n))
      .then([]);
    given(settlementDecider, [requested('TWallet')])
      .when(receipts(0n))
      .then([repriced('0', '0', '0', '0'), failedFor('payment_reversed', REVERSED, T1)]);
    const reversed = [requested('TWallet'), repriced('0', '0', '0', '0'), failedFor('payment_reversed', REVERSED, T1)];
    assert.equal(settled(reversed).failureCode, 'payment_reversed');
    // The payment is mined again: the settlement goes on.
    const back = settled([...reversed, repriced('100000000', '1000000', '0', '99000000')]);
    assert.equal(back.status, 'pending');
    assert.equal(back.failureCode, null);
    assert.equal(back.netAmount, 99_000_000n);
  });

  it('is taken off the attention list by an operator who says what was done, and only when on it', () => {
    const raised: SettlementEvent = {
      type: 'SettlementAttentionRaised',
      data: { reason: 'payment_reversed', grossAmount: '0', raisedAt: T1 },
    };
    const history = [requested('TWallet'), prepared(), submitted(), raised];
    given(settlementDecider, history)
      .when({ type: 'ResolveAttention', note: 'refunded by hand', now: T1 })
      .then([{ type: 'SettlementAttentionResolved', data: { note: 'refunded by hand', resolvedAt: T1 } }]);
    given(settlementDecider, [requested('TWallet')])
      .when({ type: 'ResolveAttention', note: 'x', now: T1 })
      .thenError('conflict', 'Nothing about this settlement needs attention');
  });

  it('raises a change of receipts after the payout was prepared for a person, once', () => {
    const raised = (reason: string, gross: string): SettlementEvent => ({
      type: 'SettlementAttentionRaised',
      data: { reason, grossAmount: gross, raisedAt: T1 } as never,
    });
    given(settlementDecider, [requested('TWallet'), prepared()])
      .when(receipts(0n))
      .then([raised('payment_reversed', '0')]);
    given(settlementDecider, [requested('TWallet'), prepared(), submitted()])
      .when(receipts(130_000_000n))
      .then([raised('received_after_payout', '130000000')]);
    given(settlementDecider, [requested('TWallet'), prepared(), raised('payment_reversed', '0')])
      .when(receipts(0n))
      .then([]);
  });

  it('records the transaction before it is sent, and only one per attempt', () => {
    given(settlementDecider, [requested('TWallet')])
      .when({ type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T0 })
      .then([prepared()]);
    given(settlementDecider, [requested('TWallet'), prepared()])
      .when({ type: 'PrepareTransaction', txHash: '0xbb', raw: '{}', now: T0 })
      .then([]);
    // Only if it pays what the settlement pays now: one built before a re-pricing or a new wallet is not recorded.
    const built = (netAmount: bigint, merchantWallet: string): SettlementCommand => ({
      type: 'PrepareTransaction',
      txHash: '0xaa',
      raw: '{}',
      paying: { netAmount, merchantWallet },
      now: T0,
    });
    given(settlementDecider, [requested('TWallet')])
      .when(built(99_000_000n, 'TWallet'))
      .then([prepared()]);
    given(settlementDecider, [requested('TWallet')])
      .when(built(98_000_000n, 'TWallet'))
      .then([]);
    given(settlementDecider, [requested('TWallet')])
      .when(built(99_000_000n, 'TOther'))
      .then([]);
  });

  it('is submitted only with a transaction it prepared', () => {
    given(settlementDecider, [requested('TWallet'), prepared()])
      .when({ type: 'MarkSubmitted', txHash: '0xaa', now: T0 })
      .then([submitted()]);
    given(settlementDecider, [requested('TWallet'), prepared()])
      .when({ type: 'MarkSubmitted', txHash: '0xcc', now: T0 })
      .then([]);
  });

  it('completes with any attempt transaction that reached the chain, once', () => {
    const history = [requested('TWallet'), prepared('0xaa'), failed, retried, prepared('0xbb', 2)];
    given(settlementDecider, history)
      .when({ type: 'MarkCompleted', txHash: '0xaa', blockNumber: 9, confirmations: 19, now: T1 })
      .then([completed]);
    given(settlementDecider, [...history, submitted('0xaa', 2)])
      .when({ type: 'MarkSubmitted', txHash: '0xaa', now: T1 })
      .then([]);
    given(settlementDecider, history)
      .when({ type: 'MarkCompleted', txHash: '0xdd', blockNumber: 9, confirmations: 19, now: T1 })
      .thenError('conflict', "Transaction 0xdd is not one of this settlement's");
  });

  it('completes, and raises for a person in the same write, a payout whose platform fee the chain could not collect', () => {
    const words = 'the platform fee call 0xfe failed (OUT_OF_ENERGY), 3 time(s)';
    const history = [requested('TWallet'), prepared('0xaa'), submitted('0xaa')];
    const raised: SettlementEvent = {
      type: 'SettlementAttentionRaised',
      data: { reason: 'platform_fee_uncollected', grossAmount: '100000000', detail: words, raisedAt: T1 },
    };
    const mark = { type: 'MarkCompleted', txHash: '0xaa', blockNumber: 9, confirmations: 19, now: T1 } as const;
    given(settlementDecider, history)
      .when({ ...mark, platformFeeUncollected: words })
      .then([completed, raised]);
    given(settlementDecider, [...history, completed, raised])
      .when({ ...mark, platformFeeUncollected: words })
      .then([]);
    assert.equal(settled([...history, completed, raised]).status, 'completed');
    given(settlementDecider, [...history, completed, raised])
      .when({ type: 'ResolveAttention', note: 'fee collected by hand', now: T1 })
      .then([{ type: 'SettlementAttentionResolved', data: { note: 'fee collected by hand', resolvedAt: T1 } }]);
  });

  it('fails with a retry time, and a retry starts the next attempt with no transaction', () => {
    const scenario = given(settlementDecider, [requested('TWallet'), prepared()]);
    scenario
      .when({ type: 'MarkFailed', reason: 'insufficient funds', rejected: true, retryAt: T1, now: T0 })
      .then([rejected]);
    const after = given(settlementDecider, [requested('TWallet'), prepared(), rejected, retried]);
    assert.equal(requestedSettlement(after.state)!.status, 'pending');
    assert.equal(requestedSettlement(after.state)!.attempt, 2);
    assert.equal(requestedSettlement(after.state)!.prepared, null);
    assert.deepEqual(requestedSettlement(after.state)!.preparedHashes, ['0xaa']);
    given(settlementDecider, [requested('TWallet')])
      .when({ type: 'Retry', now: T1 })
      .then([]);
  });

  it('after an unknown outcome, retries with the same transaction and prepares no other', () => {
    given(settlementDecider, [requested('TWallet'), prepared()])
      .when({ type: 'MarkFailed', reason: 'node down', rejected: false, retryAt: T1, now: T0 })
      .then([failed]);
    const after = given(settlementDecider, [requested('TWallet'), prepared(), failed, retried]);
    assert.equal(requestedSettlement(after.state)!.status, 'pending');
    assert.deepEqual(requestedSettlement(after.state)!.prepared, { txHash: '0xaa', raw: '{}' });
    after.when({ type: 'PrepareTransaction', txHash: '0xbb', raw: '{}', now: T1 }).then([]);
    after.when({ type: 'MarkSubmitted', txHash: '0xaa', now: T0 }).then([submitted('0xaa', 2)]);
  });

  it('holds back for a refund paid from its deposit: re-priced without it (the platform fee kept), nothing prepared until it is out', () => {
    const hold: SettlementCommand = {
      type: 'HoldForRefund',
      refundId: 'r1',
      token: 'USDT',
      fromAddress: 'TDeposit',
      amount: 20_000_000n,
      now: T1,
    };
    const held: SettlementEvent = {
      type: 'SettlementRefundHeld',
      data: { refundId: 'r1', amount: '20000000', heldAt: T1 },
    };
    const repriced = (cause: 'refund_held' | 'refund_released', net: string): SettlementEvent => ({
      type: 'SettlementRepriced',
      data: {
        grossAmount: '100000000',
        platformFee: '1000000',
        networkFee: '0',
        netAmount: net,
        cause,
        repricedAt: T1,
      },
    });
    given(settlementDecider, [requested(null)])
      .when(hold)
      .then([held, repriced('refund_held', '79000000')]);
    // Held once per refund; another address, or more than is left is refused.
    given(settlementDecider, [requested(null), held])
      .when(hold)
      .then([]);
    given(settlementDecider, [requested(null)])
      .when({ ...hold, fromAddress: 'TOther' })
      .thenError('conflict', 'The settlement pays out another address');
    given(settlementDecider, [requested(null), held])
      .when({ ...hold, refundId: 'r2', amount: 80_000_001n })
      .thenError('conflict', 'The deposit holds less than the refund');
    // Once a payout is prepared the refund must be paid another way.
    given(settlementDecider, [requested('TWallet'), prepared()])
      .when(hold)
      .thenError('conflict', 'The settlement is already being paid out');
    // Refused by the chain and retried, it may still be mined (a Bitcoin payout declared stuck, still in a mempool):
    // what it pays is what it was prepared for, so no refund comes out of the deposit, and new receipts go to a person.
    given(settlementDecider, [requested('TWallet'), prepared(), rejected, retried])
      .when(hold)
      .thenError('conflict', 'The settlement is already being paid out');
    given(settlementDecider, [requested('TWallet'), prepared(), rejected, retried])
      .when({ type: 'RepriceForReceipts', grossAmount: 150_000_000n, now: T1 })
      .then([
        {
          type: 'SettlementAttentionRaised',
          data: { reason: 'received_after_payout', grossAmount: '150000000', raisedAt: T1 },
        },
      ]);
    // While the refund is on its way nothing is prepared; once it is paid, the payout goes on without its amount.
    given(settlementDecider, [requested('TWallet'), held])
      .when({ type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T1 })
      .then([]);
    const paid: SettlementEvent = {
      type: 'SettlementRefundReleased',
      data: { refundId: 'r1', paid: true, releasedAt: T1 },
    };
    given(settlementDecider, [requested('TWallet'), held])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T1 })
      .then([paid]);
    given(settlementDecider, [requested('TWallet'), held, paid])
      .when({ type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T0 })
      .then([prepared('0xaa')]);
    // Never to be paid: the amount comes back to the merchant.
    given(settlementDecider, [requested('TWallet'), held])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: false, now: T1 })
      .then([
        { type: 'SettlementRefundReleased', data: { refundId: 'r1', paid: false, releasedAt: T1 } },
        repriced('refund_released', '99000000'),
      ]);
  });

  it("on a UTXO chain, pays one refund at a time from the deposit, and then pays out each refund's change instead of the coins it spent", () => {
    const payment = { txHash: 'aa', index: 0, amount: '60000000' };
    const later = { txHash: 'bb', index: 1, amount: '40000000' };
    const withCoins: SettlementEvent = {
      ...requested('bc1merchant'),
      data: { ...requested('bc1merchant').data, sources: [payment, later] },
    } as SettlementEvent;
    const hold = (refundId: string): SettlementCommand => ({
      type: 'HoldForRefund',
      refundId,
      token: 'USDT',
      fromAddress: 'TDeposit',
      amount: 10_000_000n,
      oneAtATime: true,
      now: T1,
    });
    const held = (refundId: string): SettlementEvent => ({
      type: 'SettlementRefundHeld',
      data: { refundId, amount: '10000000', heldAt: T1 },
    });
    // Two at once would spend the same coins: the second is paid another way.
    given(settlementDecider, [withCoins, held('r1')])
      .when(hold('r2'))
      .thenError('conflict', 'Another refund from the deposit is on its way');
    // The refund spent both coins; its change came back to the deposit.
    const first = { spent: [payment, later], change: { txHash: 'cc', index: 1, amount: '89999700' } };
    const paid: SettlementEvent = {
      type: 'SettlementRefundReleased',
      data: { refundId: 'r1', paid: true, coins: first, releasedAt: T1 },
    };
    given(settlementDecider, [withCoins, held('r1')])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, coins: first, now: T1 })
      .then([paid]);
    const afterFirst = settled([withCoins, held('r1'), paid]);
    assert.deepEqual(payoutSources(afterFirst), [first.change]);
    // A second refund, once the first is out, spends that change; the settlement then pays out its change.
    assert.equal(settled([withCoins, held('r1'), paid]).status, 'pending');
    const second = { spent: [first.change], change: { txHash: 'dd', index: 1, amount: '79999400' } };
    const afterSecond = settled([
      withCoins,
      held('r1'),
      paid,
      held('r2'),
      { type: 'SettlementRefundReleased', data: { refundId: 'r2', paid: true, coins: second, releasedAt: T1 } },
    ]);
    assert.deepEqual(payoutSources(afterSecond), [second.change]);
    // A refund whose rest was dust gave nothing back: nothing of the deposit is left to pay out.
    const dust = settled([
      withCoins,
      held('r1'),
      {
        type: 'SettlementRefundReleased',
        data: { refundId: 'r1', paid: true, coins: { spent: [payment, later], change: null }, releasedAt: T1 },
      },
    ]);
    assert.deepEqual(payoutSources(dust), []);
    // A refund never paid spent nothing: its coins are not recorded.
    given(settlementDecider, [withCoins, held('r1')])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: false, coins: first, now: T1 })
      .then([
        { type: 'SettlementRefundReleased', data: { refundId: 'r1', paid: false, releasedAt: T1 } },
        {
          type: 'SettlementRepriced',
          data: {
            grossAmount: '100000000',
            platformFee: '1000000',
            networkFee: '0',
            netAmount: '99000000',
            cause: 'refund_released',
            repricedAt: T1,
          },
        },
      ]);
    // Without a recorded payment list (an older settlement) there is nothing to name.
    assert.equal(payoutSources(settled([requested(null)])), undefined);
  });

  it("holds for a wrong-token payment's refund from its deposit: nothing re-priced, nothing prepared until it is out", () => {
    const hold = holdFor('w1', 500_000_000n, 'TRX');
    const held: SettlementEvent = {
      type: 'SettlementRefundHeld',
      data: { refundId: 'w1', amount: '500000000', token: 'TRX', heldAt: T1 },
    };
    // More than the settlement's own amount: the invoice's reservation bounds it, not the settlement.
    given(settlementDecider, [requested('TWallet')])
      .when(hold)
      .then([held]);
    const waiting = settled([requested('TWallet'), held]);
    assert.equal(waiting.netAmount, 99_000_000n, 'the USDT payout is not touched');
    given(settlementDecider, [requested('TWallet'), held])
      .when({ type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T1 })
      .then([]);
    // Never to be paid, or paid: the settlement goes on with its amount as it was.
    for (const paid of [true, false]) {
      const released: SettlementEvent = {
        type: 'SettlementRefundReleased',
        data: { refundId: 'w1', paid, releasedAt: T1 },
      };
      given(settlementDecider, [requested('TWallet'), held])
        .when({ type: 'ReleaseRefund', refundId: 'w1', paid, now: T1 })
        .then([released]);
      given(settlementDecider, [requested('TWallet'), held, released])
        .when({ type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T0 })
        .then([prepared('0xaa')]);
    }
    // Once the payout is prepared, the deposit's other token is refunded another way.
    given(settlementDecider, [requested('TWallet'), prepared()])
      .when(hold)
      .thenError('conflict', 'The settlement is already being paid out');
  });

  it('refunded in full from the deposit: waits for the refunds, not failed, and ends completed with nothing to pay', () => {
    const hold = holdFor;
    const held = (refundId: string, amount: string): SettlementEvent => ({
      type: 'SettlementRefundHeld',
      data: { refundId, amount, heldAt: T1 },
    });
    const nothingLeft: SettlementEvent = {
      type: 'SettlementRepriced',
      data: {
        grossAmount: '100000000',
        platformFee: '0',
        networkFee: '0',
        netAmount: '0',
        cause: 'refund_held',
        repricedAt: T1,
      },
    };
    const paid = (refundId: string): SettlementEvent => ({
      type: 'SettlementRefundReleased',
      data: { refundId, paid: true, releasedAt: T1 },
    });
    const closed: SettlementEvent = { type: 'SettlementRefundedInFull', data: { closedAt: T1 } };
    // The hold of everything fails nothing: the refund is on its way.
    given(settlementDecider, [requested(null)])
      .when(hold('r1', 100_000_000n))
      .then([held('r1', '100000000'), nothingLeft]);
    // Once it is out, nothing is left to settle: completed, not failed.
    const whole = [requested('TWallet'), held('r1', '100000000'), nothingLeft];
    given(settlementDecider, whole)
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T1 })
      .then([paid('r1'), closed]);
    const ended = settled([...whole, paid('r1'), closed]);
    assert.equal(ended.status, 'completed');
    assert.equal(ended.netAmount, 0n);
    assert.equal(ended.failureCode, null);
    assert.equal(ended.txHash, null);
    assert.equal(ended.completedAt, T1);
    given(settlementDecider, [...whole, paid('r1'), closed])
      .when({ type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T1 })
      .then([]);
    // Two refunds taking it all: the first one out leaves the settlement waiting for the second.
    const halves = [requested('TWallet'), held('r1', '40000000'), held('r2', '60000000'), nothingLeft];
    given(settlementDecider, halves)
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T1 })
      .then([paid('r1')]);
    given(settlementDecider, [...halves, paid('r1')])
      .when({ type: 'ReleaseRefund', refundId: 'r2', paid: true, now: T1 })
      .then([paid('r2'), closed]);
    // A settlement failed for it before (recorded so earlier) ends the same way.
    given(settlementDecider, [...whole, failedFor('fees_exceed_amount', FEES, T1)])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T1 })
      .then([paid('r1'), closed]);
  });

  it('keeps the platform fee on what was received but never more than a refund leaves, failing when nothing is left', () => {
    given(settlementDecider, [requested(null)])
      .when({
        type: 'HoldForRefund',
        refundId: 'r1',
        token: 'USDT',
        fromAddress: 'TDeposit',
        amount: 99_500_000n,
        now: T1,
      })
      .then([
        { type: 'SettlementRefundHeld', data: { refundId: 'r1', amount: '99500000', heldAt: T1 } },
        {
          type: 'SettlementRepriced',
          data: {
            grossAmount: '100000000',
            platformFee: '500000',
            networkFee: '0',
            netAmount: '0',
            cause: 'refund_held',
            repricedAt: T1,
          },
        },
        {
          type: 'SettlementFailed',
          data: { attempt: 1, reason: FEES, code: 'fees_exceed_amount', retryAt: null, failedAt: T1 },
        },
      ]);
  });

  it('takes a refund first from what the deposit holds beyond its payments (a late one): only the rest is re-priced', () => {
    const held = (refundId: string, amount: string, fromSettlement?: string): SettlementEvent => ({
      type: 'SettlementRefundHeld',
      data: { refundId, amount, ...(fromSettlement !== undefined && { fromSettlement }), heldAt: T1 },
    });
    const heldRepriced = (net: string): SettlementEvent =>
      ({
        ...repriced('100000000', '1000000', '0', net),
        data: { ...repriced('100000000', '1000000', '0', net).data, cause: 'refund_held' },
      }) as SettlementEvent;
    // 100 paid in time, 10 late: refunding the 10 leaves the settlement whole; it only waits for the refund.
    given(settlementDecider, [requested('TWallet')])
      .when({ ...holdFor('r1', 10_000_000n), beyond: 10_000_000n } as SettlementCommand)
      .then([held('r1', '10000000', '0')]);
    given(settlementDecider, [requested('TWallet'), held('r1', '10000000', '0')])
      .when({ type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T1 })
      .then([]);
    const paidOut = { type: 'SettlementRefundReleased', data: { refundId: 'r1', paid: true, releasedAt: T1 } } as const;
    given(settlementDecider, [requested('TWallet'), held('r1', '10000000', '0')])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T1 })
      .then([paidOut]);
    assert.equal(settled([requested('TWallet'), held('r1', '10000000', '0'), paidOut]).netAmount, 99_000_000n);
    // Given back unpaid: nothing of the settlement's came back, nothing to re-price.
    given(settlementDecider, [requested('TWallet'), held('r1', '10000000', '0')])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: false, now: T1 })
      .then([{ type: 'SettlementRefundReleased', data: { refundId: 'r1', paid: false, releasedAt: T1 } }]);
    // 15 with 10 beyond: 5 from the settlement.
    given(settlementDecider, [requested('TWallet')])
      .when({ ...holdFor('r1', 15_000_000n), beyond: 10_000_000n } as SettlementCommand)
      .then([held('r1', '15000000', '5000000'), heldRepriced('94000000')]);
    // Two refunds share the one beyond: 6 then 6 of 10 beyond, the second gives 2 of the settlement's.
    const first = [requested('TWallet'), held('r1', '6000000', '0')];
    given(settlementDecider, first)
      .when({ ...holdFor('r2', 6_000_000n), beyond: 10_000_000n } as SettlementCommand)
      .then([held('r2', '6000000', '2000000'), heldRepriced('97000000')]);
    // The deposit holds the settlement's 100 and 10 beyond: 110 fits, 110 and 1 does not.
    given(settlementDecider, [requested('TWallet')])
      .when({ ...holdFor('r1', 110_000_001n), beyond: 10_000_000n } as SettlementCommand)
      .thenError('conflict', 'The deposit holds less than the refund');
    given(settlementDecider, [requested('TWallet')])
      .when({ ...holdFor('r1', 110_000_000n), beyond: 10_000_000n } as SettlementCommand)
      .then([
        held('r1', '110000000', '100000000'),
        { ...heldRepriced('0'), data: { ...heldRepriced('0').data, platformFee: '0' } } as SettlementEvent,
      ]);
  });
});

describe('settlement decider: refunds held before the settlement is requested', () => {
  /** A refund from the deposit held while the invoice is still open: no settlement names the deposit yet. */
  const holdBefore = (refundId: string, amount: bigint, at = { chain: 'tron', fromAddress: 'TDeposit' }) => ({
    command: {
      type: 'HoldForRefund',
      refundId,
      token: 'USDT',
      amount,
      ...at,
      now: T0,
    } satisfies SettlementCommand as SettlementCommand,
    event: {
      type: 'SettlementRefundHeld',
      data: { refundId, amount: amount.toString(), token: 'USDT', ...at, heldAt: T0 },
    } satisfies SettlementEvent as SettlementEvent,
  });
  const r1 = holdBefore('r1', 20_000_000n);
  const paidBefore: SettlementEvent = {
    type: 'SettlementRefundReleased',
    data: { refundId: 'r1', paid: true, releasedAt: T0 },
  };
  const heldRepriced = (platform: string, net: string): SettlementEvent => ({
    type: 'SettlementRepriced',
    data: {
      grossAmount: '100000000',
      platformFee: platform,
      networkFee: '0',
      netAmount: net,
      cause: 'refund_held',
      repricedAt: T0,
    },
  });
  const prepare: SettlementCommand = { type: 'PrepareTransaction', txHash: '0xaa', raw: '{}', now: T0 };

  it('takes a hold on a stream with no settlement, once, naming the deposit; the stream still has no settlement', () => {
    given(settlementDecider, []).when(r1.command).then([r1.event]);
    given(settlementDecider, [r1.event]).when(r1.command).then([]);
    // Without the deposit's chain there is nothing to hold it on (the settlement's own path names none).
    given(settlementDecider, [])
      .when({ ...r1.command, chain: undefined } as SettlementCommand)
      .thenError('not_found', 'Settlement not found');
    assert.equal(requestedSettlement(given(settlementDecider, [r1.event]).state), null);
    // Nothing but holds and releases before a request.
    given(settlementDecider, [r1.event]).when(prepare).thenError('not_found', 'Settlement not found');
  });

  it('marks a hold paid, or gives it back, before any request; the settlement starts from what is left', () => {
    given(settlementDecider, [r1.event])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T0 })
      .then([paidBefore]);
    given(settlementDecider, [r1.event, paidBefore])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T0 })
      .then([]);
    const givenBack: SettlementEvent = {
      type: 'SettlementRefundReleased',
      data: { refundId: 'r1', paid: false, releasedAt: T0 },
    };
    given(settlementDecider, [r1.event])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: false, now: T0 })
      .then([givenBack]);
    // Paid before the request: re-priced without it (the platform fee on all received), nothing to wait for.
    given(settlementDecider, [r1.event, paidBefore])
      .when(request('TWallet'))
      .then([requested('TWallet'), heldRepriced('1000000', '79000000')]);
    given(settlementDecider, [r1.event, paidBefore, requested('TWallet'), heldRepriced('1000000', '79000000')])
      .when(prepare)
      .then([prepared('0xaa')]);
    // Given back before the request: the settlement is the whole deposit's.
    given(settlementDecider, [r1.event, givenBack])
      .when(request('TWallet'))
      .then([requested('TWallet')]);
  });

  it("gives back a hold its refund's payout never found once it is older than the grace; an approved one only the refund's end releases", () => {
    const T2 = '2026-11-22T10:06:00.000Z';
    const givenBack: SettlementEvent = {
      type: 'SettlementRefundReleased',
      data: { refundId: 'r1', paid: false, releasedAt: T2 },
    };
    const approved: SettlementEvent = {
      type: 'SettlementRefundHoldApproved',
      data: { refundId: 'r1', approvedAt: T1 },
    };
    const leftBehind = (heldBefore: string): SettlementCommand => ({
      type: 'ReleaseUnapprovedHold',
      refundId: 'r1',
      heldBefore,
      now: T2,
    });
    // Taken at T0: given back when asked for holds taken by T0 or later; a younger one may be an approval on its way.
    given(settlementDecider, [r1.event]).when(leftBehind(T0)).then([givenBack]);
    given(settlementDecider, [r1.event]).when(leftBehind('2026-11-22T09:59:59.000Z')).then([]);
    given(settlementDecider, [r1.event, givenBack]).when(leftBehind(T2)).then([]);
    given(settlementDecider, []).when(leftBehind(T2)).then([]);
    // The refund's payout finds its hold and marks it, once: then it is no longer given back by itself.
    const find: SettlementCommand = { type: 'ApproveRefundHold', refundId: 'r1', now: T1 };
    given(settlementDecider, [r1.event]).when(find).then([approved]);
    given(settlementDecider, [r1.event, approved]).when(find).then([]);
    given(settlementDecider, [r1.event, approved]).when(leftBehind(T2)).then([]);
    // None to find (given back): the payout must take it again, or pay from elsewhere.
    given(settlementDecider, [r1.event, givenBack])
      .when(find)
      .thenError('conflict', 'The deposit no longer holds this refund');
    // Taken again by the payout: approved from the start.
    given(settlementDecider, [r1.event, givenBack])
      .when({ ...r1.command, approved: true, now: T2 } as SettlementCommand)
      .then([{ ...r1.event, data: { ...r1.event.data, approved: true, heldAt: T2 } } as SettlementEvent]);
    // The mark goes with the hold when the settlement is requested: still not given back by itself.
    const started = [r1.event, approved, requested('TWallet'), heldRepriced('1000000', '79000000')];
    given(settlementDecider, started).when(leftBehind(T2)).then([]);
    given(settlementDecider, started).when(find).then([]);
    // Unapproved when requested: given back as ReleaseRefund would, the settlement re-priced to the whole deposit.
    const unapproved = [r1.event, requested('TWallet'), heldRepriced('1000000', '79000000')];
    const back = given(settlementDecider, unapproved).state;
    assert.deepEqual(
      settlementDecider.decide(leftBehind(T2), back),
      settlementDecider.decide({ type: 'ReleaseRefund', refundId: 'r1', paid: false, now: T2 }, back),
    );
    given(settlementDecider, unapproved)
      .when(find)
      .then([{ ...approved }]);
  });

  it('a settlement requested while a hold is unpaid starts re-priced, waits for the refund, then goes on', () => {
    given(settlementDecider, [r1.event])
      .when(request('TWallet'))
      .then([requested('TWallet'), heldRepriced('1000000', '79000000')]);
    const started = [r1.event, requested('TWallet'), heldRepriced('1000000', '79000000')];
    assert.equal(settled(started).netAmount, 79_000_000n);
    given(settlementDecider, started).when(prepare).then([]);
    const paidAfter: SettlementEvent = {
      type: 'SettlementRefundReleased',
      data: { refundId: 'r1', paid: true, releasedAt: T1 },
    };
    given(settlementDecider, started)
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T1 })
      .then([paidAfter]);
    given(settlementDecider, [...started, paidAfter])
      .when(prepare)
      .then([prepared('0xaa')]);
    // Never paid: its amount comes back to the merchant.
    given(settlementDecider, started)
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: false, now: T1 })
      .then([
        { type: 'SettlementRefundReleased', data: { refundId: 'r1', paid: false, releasedAt: T1 } },
        {
          ...repriced('100000000', '1000000', '0', '99000000'),
          data: { ...repriced('100000000', '1000000', '0', '99000000').data, cause: 'refund_released' },
        } as SettlementEvent,
      ]);
    // Holds after the request add up with those from before: no more than what is left.
    given(settlementDecider, started)
      .when(holdFor('r2', 80_000_001n))
      .thenError('conflict', 'The deposit holds less than the refund');
  });

  it('ends refunded in full when the refunds took everything, at once or when the last is out', () => {
    const all = holdBefore('r1', 100_000_000n);
    const allPaid: SettlementEvent = {
      type: 'SettlementRefundReleased',
      data: { refundId: 'r1', paid: true, releasedAt: T0 },
    };
    const closed: SettlementEvent = { type: 'SettlementRefundedInFull', data: { closedAt: T0 } };
    given(settlementDecider, [all.event, allPaid])
      .when(request('TWallet'))
      .then([requested('TWallet'), heldRepriced('0', '0'), closed]);
    given(settlementDecider, [all.event])
      .when(request('TWallet'))
      .then([requested('TWallet'), heldRepriced('0', '0')]);
    const waiting = [all.event, requested('TWallet'), heldRepriced('0', '0')];
    assert.equal(settled(waiting).status, 'pending', 'not failed for its fees while the refund is out');
    given(settlementDecider, waiting)
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T1 })
      .then([
        { type: 'SettlementRefundReleased', data: { refundId: 'r1', paid: true, releasedAt: T1 } },
        { type: 'SettlementRefundedInFull', data: { closedAt: T1 } },
      ]);
  });

  it('is neither held back nor re-priced by a hold on another deposit or chain', () => {
    for (const at of [
      { chain: 'tron', fromAddress: 'TOther' },
      { chain: 'ethereum', fromAddress: 'TDeposit' },
    ]) {
      const elsewhere = holdBefore('r1', 20_000_000n, at);
      given(settlementDecider, [elsewhere.event])
        .when(request('TWallet'))
        .then([requested('TWallet')]);
      const started = [elsewhere.event, requested('TWallet')];
      assert.deepEqual(settled(started).refundHolds, []);
      given(settlementDecider, started)
        .when(prepare)
        .then([prepared('0xaa')]);
      given(settlementDecider, started).when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T1 }).then([]);
    }
  });

  it('waits for, but is not re-priced by, another token held on its own deposit (a wrong-token payment)', () => {
    const trx: SettlementEvent = {
      type: 'SettlementRefundHeld',
      data: { refundId: 'w1', amount: '5000000', token: 'TRX', chain: 'tron', fromAddress: 'TDeposit', heldAt: T0 },
    };
    given(settlementDecider, [trx])
      .when(request('TWallet'))
      .then([requested('TWallet')]);
    const started = [trx, requested('TWallet')];
    assert.deepEqual(settled(started).refundHolds, [
      { refundId: 'w1', amount: 5_000_000n, paid: false, token: 'TRX', heldAt: T0 },
    ]);
    given(settlementDecider, started).when(prepare).then([]);
  });

  it('takes a pre-request refund first from what the deposit holds beyond its payments, and the request takes that over', () => {
    const beyond = (refundId: string, amount: bigint) => ({
      command: { ...holdBefore(refundId, amount).command, beyond: 10_000_000n } as SettlementCommand,
      event: holdBefore(refundId, amount).event,
    });
    const withPart = (event: SettlementEvent, fromSettlement: string) =>
      ({
        ...event,
        data: { ...event.data, fromSettlement } as unknown as SettlementEvent['data'],
      }) as SettlementEvent;
    // All of it beyond: the settlement starts whole, only waiting for the refund.
    const late = withPart(beyond('r1', 10_000_000n).event, '0');
    given(settlementDecider, []).when(beyond('r1', 10_000_000n).command).then([late]);
    given(settlementDecider, [late])
      .when(request('TWallet'))
      .then([requested('TWallet')]);
    given(settlementDecider, [late, requested('TWallet')])
      .when(prepare)
      .then([]);
    given(settlementDecider, [late, requested('TWallet')])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, now: T1 })
      .then([{ type: 'SettlementRefundReleased', data: { refundId: 'r1', paid: true, releasedAt: T1 } }]);
    // A second refund shares what is left beyond: 15 with 0 of 10 left, all of it from the settlement.
    const second = beyond('r2', 15_000_000n).event;
    given(settlementDecider, [late])
      .when(beyond('r2', 15_000_000n).command)
      .then([beyond('r2', 15_000_000n).event]);
    given(settlementDecider, [late, second])
      .when(request('TWallet'))
      .then([requested('TWallet'), heldRepriced('1000000', '84000000')]);
    // 25 with 10 beyond: 15 out of the settlement once requested.
    const part = withPart(beyond('r1', 25_000_000n).event, '15000000');
    given(settlementDecider, []).when(beyond('r1', 25_000_000n).command).then([part]);
    given(settlementDecider, [part])
      .when(request('TWallet'))
      .then([requested('TWallet'), heldRepriced('1000000', '84000000')]);
  });

  it('on a UTXO chain, a refund held before the request spends the payments the request will name; the settlement then pays out its change', () => {
    const a = { txHash: 'aa', index: 0, amount: '60000000' };
    const b = { txHash: 'bb', index: 1, amount: '40000000' };
    // One at a time: a second refund from the deposit while the first is on its way is paid another way.
    given(settlementDecider, [r1.event])
      .when({ ...holdBefore('r2', 1n).command, oneAtATime: true } as SettlementCommand)
      .thenError('conflict', 'Another refund from the deposit is on its way');
    const coins = { spent: [a], change: { txHash: 'cc', index: 1, amount: '39999700' } };
    const paid: SettlementEvent = {
      type: 'SettlementRefundReleased',
      data: { refundId: 'r1', paid: true, coins, releasedAt: T0 },
    };
    given(settlementDecider, [r1.event])
      .when({ type: 'ReleaseRefund', refundId: 'r1', paid: true, coins, now: T0 })
      .then([paid]);
    // The next refund before the request spends what the first left: its change, and the coin it did not spend.
    const pending = given(settlementDecider, [r1.event, paid]).state as PendingHolds;
    const deposit = { chain: 'tron', fromAddress: 'TDeposit' };
    assert.deepEqual(sourcesBeforeRequest([a, b], pending, deposit), [b, coins.change]);
    assert.deepEqual(sourcesBeforeRequest([a, b], pending, { ...deposit, fromAddress: 'TOther' }), [a, b]);
    // The settlement, requested with both payments, pays out the same coins.
    const withCoins = {
      ...requested('TWallet'),
      data: { ...requested('TWallet').data, sources: [a, b] },
    } as SettlementEvent;
    const started = requestedSettlement(given(settlementDecider, [r1.event, paid, withCoins]).state)!;
    assert.deepEqual(payoutSources(started), [b, coins.change]);
  });

  it('refuses, once requested, a hold on another chain than its own', () => {
    given(settlementDecider, [requested('TWallet')])
      .when({ ...holdFor('r1', 1n), chain: 'ethereum' } as SettlementCommand)
      .thenError('conflict', 'The settlement pays out another address');
  });
});
