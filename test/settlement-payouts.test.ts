// A settlement payout against a chain whose broadcast fails: a failure of unknown
// outcome is retried with the same transaction, a rejection with a new one,
// and in neither case does the merchant get two payouts.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  PayoutNotFinalError,
  TransactionRejectedError,
  type ChainAdapter,
  type OutgoingTransfer,
  type PreparedTransaction,
} from '../adapters/chains/port.ts';
import { SandboxLedger } from '../adapters/chains/sandbox/ledger.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { loadSettlement, SettlementPayouts } from '../commands/settlements.ts';
import { merchantDecider, merchantStream } from '../domain/merchant.ts';
import { handleCommand } from '../commands/handle.ts';
import type { ChainName } from '../domain/catalogue.ts';
import { settlementDecider, settlementStreamName } from '../domain/settlement.ts';

const WALLET = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';
const DEPOSIT = 'TDepositAddressOfTheInvoice1111111';
const SETTLEMENT_ID = '6f1c9a8e-2b7d-4c1e-9a53-0d2e8f4b7c11';
const MERCHANT_ID = '3c9d2e1f-4a5b-4c6d-8e7f-9a0b1c2d3e4f';
const clock = { now: () => new Date('2026-11-22T10:00:00.000Z') };
/** One process, its lease on the chain's payouts never lost. */
const HELD = new AbortController().signal;

/**
 * The ledger, with broadcasts that fail in a chosen way a chosen number of
 * times; `asked` gets every payout it is asked to prepare.
 */
function flakyChain(
  ledger: SandboxLedger,
  failures: ('lost-reply' | 'timeout' | 'rejected')[],
  asked: OutgoingTransfer[],
): ChainAdapter {
  return Object.assign(Object.create(ledger) as SandboxLedger, {
    prepareTransfer(transfer: OutgoingTransfer) {
      asked.push(transfer);
      return ledger.prepareTransfer(transfer);
    },
    async broadcast(transaction: PreparedTransaction) {
      const failure = failures.shift();
      if (failure === 'lost-reply') {
        // The worst case: the chain took it, but the answer never came back.
        await ledger.broadcast(transaction);
        throw new Error('socket hang up');
      }
      if (failure === 'timeout') throw new Error('request timed out');
      if (failure === 'rejected') throw new TransactionRejectedError('nonce too low');
      await ledger.broadcast(transaction);
    },
  });
}

async function payoutsWith(failures: ('lost-reply' | 'timeout' | 'rejected')[]) {
  const store = new MemoryEventStore();
  const ledger = await SandboxLedger.open(store, 'tron', clock);
  // The customer's payment: the ledger, as a chain, refuses a payout from an address that holds less.
  await ledger.transfer({ to: DEPOSIT, token: 'USDT', amount: 100_000_000n });
  const asked: OutgoingTransfer[] = [];
  const chain = flakyChain(ledger, failures, asked);
  // The payout goes to the merchant's wallet as the merchant's stream has it.
  await handleCommand(store, merchantDecider, merchantStream(MERCHANT_ID), {
    type: 'RegisterMerchant',
    merchantId: MERCHANT_ID,
    profile: { name: 'Shop', tier: 'free', webhookUrl: null, settlementWallets: { tron: WALLET } },
    webhookSecret: 'whsec_test',
    now: clock.now().toISOString(),
  });
  await handleCommand(store, settlementDecider, settlementStreamName(SETTLEMENT_ID), {
    type: 'RequestSettlement',
    settlementId: SETTLEMENT_ID,
    invoiceId: '0b7e1f3a-5c2d-4e8f-9a61-7d3c2b1e0f4a',
    merchantId: MERCHANT_ID,
    chain: 'tron',
    token: 'USDT',
    tokenDecimals: 6,
    fromAddress: DEPOSIT,
    derivationIndex: 3,
    grossAmount: 100_000_000n,
    networkFee: 0n,
    platformFeeBps: 100,
    merchantWallet: WALLET,
    now: clock.now().toISOString(),
  });
  const deps = {
    store,
    clock,
    chains: new Map<ChainName, ChainAdapter>([['tron', chain]]),
    platformFeeBps: 100,
    requiredConfirmations: { tron: 1 } as Record<ChainName, number>,
  };
  const sweeper = new SettlementPayouts(deps);
  // A clock a day further on at every reading: each retry is due when asked.
  let day = 0;
  const later = { now: () => new Date(Date.parse('2026-11-30T10:00:00.000Z') + day++ * 86_400_000) };
  const retrying = new SettlementPayouts({ ...deps, clock: later });
  const state = () => loadSettlement(store, SETTLEMENT_ID);
  const payouts = () => ledger.transfersTo(WALLET);
  return { sweeper, retrying, state, payouts, ledger, deps, asked };
}

describe('settlement payouts with a failing broadcast', () => {
  it('sends the same transaction again after an unknown outcome, and pays once', async () => {
    const { sweeper, retrying, state, payouts } = await payoutsWith(['lost-reply', 'timeout']);
    await sweeper.advance(SETTLEMENT_ID, HELD);
    const first = await state();
    assert.equal(first!.status, 'failed');
    assert.equal(first!.rejected, false);
    const txHash = first!.prepared!.txHash;

    // The payout is found on the chain and adopted; its final repeat (what a payout
    // leaves to do once final) times out, so it completes at the next look, not before.
    await assert.rejects(retrying.advance(SETTLEMENT_ID, HELD), /request timed out/);
    assert.equal((await state())!.status, 'submitted');
    await retrying.advance(SETTLEMENT_ID, HELD);
    const after = await state();
    assert.equal(after!.status, 'completed');
    assert.equal(after!.txHash, txHash);
    assert.deepEqual(after!.preparedHashes, [txHash], 'no second transaction was ever prepared');
    assert.equal(payouts().length, 1);
    assert.equal(payouts()[0]!.amount, 99_000_000n);
  });

  it('retries a timed-out broadcast with the same transaction', async () => {
    const { sweeper, retrying, state, payouts } = await payoutsWith(['timeout', 'timeout']);
    await sweeper.advance(SETTLEMENT_ID, HELD);
    const txHash = (await state())!.prepared!.txHash;
    await retrying.advance(SETTLEMENT_ID, HELD);
    assert.equal((await state())!.status, 'failed', 'the second send timed out too');
    await retrying.advance(SETTLEMENT_ID, HELD);
    const after = await state();
    assert.equal(after!.status, 'submitted');
    assert.deepEqual(after!.preparedHashes, [txHash]);
    assert.equal(payouts().length, 1);
  });

  it('prepares a new transaction only after the chain rejected the first', async () => {
    const { sweeper, retrying, state, payouts } = await payoutsWith(['rejected']);
    await sweeper.advance(SETTLEMENT_ID, HELD);
    const first = await state();
    assert.equal(first!.rejected, true);
    await retrying.advance(SETTLEMENT_ID, HELD);
    const after = await state();
    assert.equal(after!.status, 'submitted');
    assert.equal(after!.preparedHashes.length, 2);
    assert.equal(after!.txHash, after!.preparedHashes[1]);
    assert.equal(payouts().length, 1);
  });

  it("gives the new attempt the refused attempt's transaction, so that the chain is asked what of it was mined", async () => {
    // EVM: a refused bundle's platform fee step may be mined all the same; the new attempt must not pay it again.
    const { sweeper, retrying, state, asked } = await payoutsWith(['rejected']);
    await sweeper.advance(SETTLEMENT_ID, HELD);
    const refused = (await state())!.prepared!.raw;
    assert.equal(asked[0]!.refusedAttempts, undefined, 'a first attempt has none');
    await retrying.advance(SETTLEMENT_ID, HELD);
    assert.equal(asked.length, 2);
    assert.deepEqual(asked[1]!.refusedAttempts, [refused]);
    assert.deepEqual((await state())!.refusedAttempts, [refused]);
  });
});

describe('two processes paying one settlement', () => {
  it('send only the transaction the stream recorded, so the merchant is paid once', async () => {
    const { sweeper, state, payouts, ledger, deps } = await payoutsWith([]);
    // Each process signs its own transaction (say, with its own fee quote),
    // and both have signed before either records.
    let waiting: (() => void)[] = [];
    const ownSigner = (tag: string): ChainAdapter =>
      Object.assign(Object.create(ledger) as SandboxLedger, {
        async prepareTransfer(transfer: OutgoingTransfer) {
          const prepared = await ledger.prepareTransfer({ ...transfer, reference: `${transfer.reference}/${tag}` });
          await new Promise<void>((resolve) => {
            waiting.push(resolve);
            if (waiting.length === 2) for (const go of waiting) go();
          });
          return prepared;
        },
        broadcast: (transaction: PreparedTransaction) => ledger.broadcast(transaction),
        transactionStatus: (txHash: string) => ledger.transactionStatus(txHash),
      });
    const other = new SettlementPayouts({
      ...deps,
      chains: new Map<ChainName, ChainAdapter>([['tron', ownSigner('b')]]),
    });
    const first = new SettlementPayouts({
      ...deps,
      chains: new Map<ChainName, ChainAdapter>([['tron', ownSigner('a')]]),
    });
    await Promise.all([first.advance(SETTLEMENT_ID, HELD), other.advance(SETTLEMENT_ID, HELD)]);
    waiting = [];
    await sweeper.advance(SETTLEMENT_ID, HELD);
    const after = await state();
    assert.equal(after!.preparedHashes.length, 1, 'one transaction recorded');
    assert.equal(payouts().length, 1, 'one payout');
    assert.equal(payouts()[0]!.txHash, after!.preparedHashes[0]);
  });
});

describe('a payout a restarted process finds on the chain, final', () => {
  it('completes only once the chain, told of it again, has done what it leaves to do', async () => {
    const { sweeper, state, ledger, deps } = await payoutsWith([]);
    await sweeper.advance(SETTLEMENT_ID, HELD);
    assert.equal((await state())!.status, 'submitted');
    // The restarted adapter knows nothing of the payout until it is broadcast again (Tron: a token payout's
    // leftover TRX, which then goes back to the fee wallet and is mined a look later).
    let leftover: 'unknown' | 'on its way' = 'unknown';
    const restarted = Object.assign(Object.create(ledger) as SandboxLedger, {
      async broadcast(transaction: PreparedTransaction) {
        await ledger.broadcast(transaction);
        if (leftover === 'on its way') return;
        leftover = 'on its way';
        throw new PayoutNotFinalError('its leftover is not back yet');
      },
      transactionStatus: (txHash: string) => ledger.transactionStatus(txHash),
    });
    const after = new SettlementPayouts({ ...deps, chains: new Map<ChainName, ChainAdapter>([['tron', restarted]]) });
    await after.advance(SETTLEMENT_ID, HELD);
    assert.equal((await state())!.status, 'submitted', 'not final while the leftover is on its way');
    await after.advance(SETTLEMENT_ID, HELD);
    assert.equal((await state())!.status, 'completed');
  });
});

describe('a settlement re-priced while its payout is being built', () => {
  it('never records the transaction built for the old amount; the next look pays the new one', async () => {
    const { state, payouts, ledger, deps } = await payoutsWith([]);
    await ledger.transfer({ to: DEPOSIT, token: 'USDT', amount: 50_000_000n }); // a second payment, counted
    let receipts = false;
    const slow = Object.assign(Object.create(ledger) as SandboxLedger, {
      async prepareTransfer(transfer: OutgoingTransfer) {
        const prepared = await ledger.prepareTransfer(transfer);
        // The second payment confirms while the first transaction is being built.
        if (!receipts) {
          receipts = true;
          await handleCommand(deps.store, settlementDecider, settlementStreamName(SETTLEMENT_ID), {
            type: 'RepriceForReceipts',
            grossAmount: 150_000_000n,
            now: clock.now().toISOString(),
          });
        }
        return prepared;
      },
      broadcast: (transaction: PreparedTransaction) => ledger.broadcast(transaction),
      transactionStatus: (txHash: string) => ledger.transactionStatus(txHash),
    });
    const sweeper = new SettlementPayouts({ ...deps, chains: new Map<ChainName, ChainAdapter>([['tron', slow]]) });
    await sweeper.advance(SETTLEMENT_ID, HELD);
    assert.deepEqual((await state())!.preparedHashes, [], 'the transaction for 99 is never recorded');
    await sweeper.advance(SETTLEMENT_ID, HELD);
    assert.equal((await state())!.preparedHashes.length, 1);
    assert.deepEqual(
      payouts().map((p) => p.amount),
      [148_500_000n],
      '150 less the 1% fee',
    );
  });
});
