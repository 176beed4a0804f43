import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import basex from 'base-x';
import { SandboxLedger } from '../adapters/chains/sandbox/ledger.ts';
import type { Clock } from '../adapters/clock.ts';
import { TransactionRejectedError } from '../adapters/chains/port.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { ChainName } from '../domain/catalogue.ts';
import { DomainError, fold } from '../domain/decider.ts';
import {
  blockAt,
  headBlock,
  ledgerHeight,
  sandboxLedgerDecider,
  sandboxLedgerStreamName,
  type BlockMined,
  type SandboxLedgerCommand,
  type SandboxLedgerEvent,
} from '../adapters/chains/sandbox/decider.ts';
import { given } from './support/decider.ts';

const base58 = basex('123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz');
const decider = sandboxLedgerDecider('ethereum');
const T0 = '2025-01-01T00:00:00.000Z';
const ADDRESS = '0x00000000000000000000000000000000000000aa';

/** Runs commands through the decider, returning every event decided so far. */
function history(...commands: SandboxLedgerCommand[]): SandboxLedgerEvent[] {
  const events: SandboxLedgerEvent[] = [];
  for (const command of commands) events.push(...decider.decide(command, fold(decider, events)));
  return events;
}

const mined = (events: SandboxLedgerEvent[]): BlockMined['data'][] =>
  events.filter((e): e is BlockMined => e.type === 'BlockMined').map((e) => e.data);

const pay = (amount: bigint, txHash?: string): SandboxLedgerCommand => ({
  type: 'MineBlock',
  transfers: [{ to: ADDRESS, token: 'ETH', amount, ...(txHash !== undefined && { txHash }) }],
  timestamp: T0,
});

describe('sandbox ledger decider', () => {
  it('starts with an empty genesis block at height 0', () => {
    const state = decider.initialState;
    assert.equal(ledgerHeight(state), 0);
    assert.deepEqual(headBlock(state).transfers, []);
    assert.equal(blockAt(state, 0)?.hash, headBlock(state).hash);
    assert.equal(blockAt(state, 1), undefined);
  });

  it('mines blocks whose heights count up and whose parent hashes chain to the block before', () => {
    const events = history(pay(5n), { type: 'MineEmptyBlocks', count: 3, timestamp: T0 });
    const blocks = mined(events);
    assert.deepEqual(
      blocks.map((b) => b.height),
      [1, 2, 3, 4],
    );
    assert.equal(blocks[0]!.parentHash, decider.initialState.genesis.hash);
    for (let i = 1; i < blocks.length; i++) assert.equal(blocks[i]!.parentHash, blocks[i - 1]!.hash);
    assert.equal(new Set(blocks.map((b) => b.hash)).size, 4);
    const [transfer] = blocks[0]!.transfers;
    assert.deepEqual(
      { ...transfer, txHash: undefined },
      { txHash: undefined, index: 0, to: ADDRESS, token: 'ETH', amount: '5' },
    );
    // Events are stored as JSON: the amount is an integer string, never a bigint.
    assert.deepEqual(JSON.parse(JSON.stringify(events)), events);
  });

  it('never lets block time run backwards', () => {
    const events = history({ ...pay(1n), timestamp: '2025-06-01T00:00:00.000Z' }, { ...pay(2n), timestamp: T0 });
    assert.deepEqual(
      mined(events).map((b) => b.timestamp),
      ['2025-06-01T00:00:00.000Z', '2025-06-01T00:00:00.000Z'],
    );
  });

  it('drops the last blocks on a reorg, and the next block at a dropped height has another hash', () => {
    const before = history(pay(5n), pay(6n));
    given(decider, before)
      .when({ type: 'Reorg', depth: 1, timestamp: T0 })
      .then([{ type: 'BlocksDropped', data: { fromHeight: 2, depth: 1, droppedAt: T0 } }]);
    const dropped = mined(before)[1]!;
    const after = [...before, ...decider.decide({ type: 'Reorg', depth: 1, timestamp: T0 }, fold(decider, before))];
    assert.equal(ledgerHeight(fold(decider, after)), 1);
    // The very same transfer (same order, same time) mined again at height 2.
    const remined = decider.decide(pay(6n), fold(decider, after))[0] as BlockMined;
    assert.equal(remined.data.height, 2);
    assert.equal(remined.data.parentHash, dropped.parentHash);
    assert.notEqual(remined.data.hash, dropped.hash);
    assert.notEqual(remined.data.transfers[0]!.txHash, dropped.transfers[0]!.txHash);
  });

  it('frees the transaction hashes of dropped blocks, so the transaction can be mined again, in a block of another hash', () => {
    const events = history(pay(5n, '0xabc'), { type: 'Reorg', depth: 1, timestamp: T0 }, pay(5n, '0xabc'));
    assert.equal(ledgerHeight(fold(decider, events)), 1);
    assert.equal(headBlock(fold(decider, events)).transfers[0]!.txHash, '0xabc');
    // Same height, parent, time and transfer: only the nonce tells the two blocks apart.
    const [first, second] = mined(events);
    assert.notEqual(first!.hash, second!.hash);
  });

  it('gives an empty block mined after a reorg another hash than the dropped empty block', () => {
    const empty: SandboxLedgerCommand = { type: 'MineEmptyBlocks', count: 1, timestamp: T0 };
    const [dropped, remined] = mined(history(empty, { type: 'Reorg', depth: 1, timestamp: T0 }, empty));
    assert.equal(remined!.height, dropped!.height);
    assert.notEqual(remined!.hash, dropped!.hash);
  });

  it('keeps earlier states unchanged when later ones extend the chain (pure fold)', () => {
    const events = history(pay(1n), pay(2n), { type: 'Reorg', depth: 1, timestamp: T0 }, pay(3n));
    const atTwo = fold(decider, events.slice(0, 2));
    const latest = fold(decider, events);
    assert.equal(headBlock(atTwo).transfers[0]!.amount, '2');
    assert.equal(headBlock(latest).transfers[0]!.amount, '3');
    assert.equal(ledgerHeight(atTwo), 2);
  });

  it('refuses a bad reorg depth', () => {
    const two = history(pay(1n), pay(2n));
    for (const depth of [0, 3, 1.5, -1]) {
      given(decider, two)
        .when({ type: 'Reorg', depth, timestamp: T0 })
        .thenError('bad_request', "depth must be a whole number from 1 to 2 (the ethereum sandbox ledger's height)");
    }
    given(decider, [])
      .when({ type: 'Reorg', depth: 1, timestamp: T0 })
      .thenError('bad_request', 'There is no block to drop: the ethereum sandbox ledger holds only its genesis block');
  });

  it('refuses a bad block count', () => {
    for (const count of [0, 10_001, 2.5, Number.NaN]) {
      given(decider, [])
        .when({ type: 'MineEmptyBlocks', count, timestamp: T0 })
        .thenError('bad_request', 'count must be a whole number from 1 to 10000');
    }
    assert.equal(
      decider.decide({ type: 'MineEmptyBlocks', count: 10_000, timestamp: T0 }, decider.initialState).length,
      10_000,
    );
  });

  it('refuses a transaction hash already on the chain, a bad token and a non-positive amount', () => {
    const events = history(pay(1n, '0xABC'));
    given(decider, events).when(pay(2n, '0xabc')).thenError('conflict', 'Transaction 0xabc is already on the chain');
    given(decider, [])
      .when({ type: 'MineBlock', transfers: [{ to: ADDRESS, token: 'SOL', amount: 1n }], timestamp: T0 })
      .thenError('bad_request', 'Token SOL is not supported on ethereum');
    given(decider, []).when(pay(0n)).thenError('bad_request', 'Amount must be greater than 0');
    given(decider, [])
      .when(pay(1n, 'has space'))
      .thenError('bad_request', 'txHash must be 1 to 128 printable characters without spaces');
  });

  it('refuses a payout that sends more than its address holds, as a real node does; several in a block add up', () => {
    const payout = (...amounts: bigint[]): SandboxLedgerCommand => ({
      type: 'MineBlock',
      transfers: amounts.map((amount) => ({ to: '0xcustomer', token: 'ETH', amount, from: ADDRESS })),
      timestamp: T0,
    });
    const funded = history(pay(10n));
    given(decider, funded)
      .when(payout(11n))
      .thenError('conflict', `insufficient funds: ${ADDRESS} holds 10 ETH, the payout sends 11`);
    given(decider, funded)
      .when(payout(6n, 5n))
      .thenError('conflict', `insufficient funds: ${ADDRESS} holds 10 ETH, the payout sends 11`);
    // Another token's coins do not pay for it.
    given(decider, [])
      .when(payout(1n))
      .thenError('conflict', `insufficient funds: ${ADDRESS} holds 0 ETH, the payout sends 1`);
    const spent = history(pay(10n), payout(6n, 4n));
    assert.deepEqual(
      mined(spent)[1]!.transfers.map((t) => t.amount),
      ['6', '4'],
    );
    given(decider, spent)
      .when(payout(1n))
      .thenError('conflict', `insufficient funds: ${ADDRESS} holds 0 ETH, the payout sends 1`);
  });
});

/** A business clock the test moves by hand. */
function manualClock(start = Date.parse(T0)): Clock & { advance(ms: number): void } {
  let now = start;
  return { now: () => new Date(now), advance: (ms) => void (now += ms) };
}

const openLedger = (store: MemoryEventStore, chain: ChainName = 'ethereum', clock: Clock = manualClock()) =>
  SandboxLedger.open(store, chain, clock);

describe('SandboxLedger over an event store', () => {
  it('answers the genesis block on a fresh ledger', async () => {
    const ledger = await openLedger(new MemoryEventStore());
    const head = await ledger.head();
    assert.equal(head.height, 0);
    assert.equal((await ledger.block(0))?.hash, head.hash);
    assert.equal(await ledger.block(1), undefined);
  });

  it('mines a block holding the transfer, with the bigint amount preserved', async () => {
    const clock = manualClock();
    const ledger = await openLedger(new MemoryEventStore(), 'ethereum', clock);
    const amount = 123_456_789_012_345_678_901_234_567_890n; // beyond any JS number's precision
    clock.advance(12_000);
    const { txHash, blockNumber } = await ledger.transfer({ to: ADDRESS, token: 'ETH', amount });
    assert.equal(blockNumber, 1);
    const block = await ledger.block(1);
    assert.ok(block);
    assert.deepEqual(block.transfers, [{ txHash, index: 0, to: ADDRESS, token: 'ETH', amount }]);
    assert.equal(block.timestamp.toISOString(), '2025-01-01T00:00:12.000Z');
    assert.deepEqual(await ledger.head(), { height: 1, hash: block.hash });
  });

  it('rejects the broadcast of a payout its address cannot fund, and sends it once funded', async () => {
    const ledger = await openLedger(new MemoryEventStore());
    const payout = await ledger.prepareTransfer({
      from: { address: ADDRESS, derivationIndex: 1 },
      to: '0xcustomer',
      token: 'USDT',
      amount: 5n,
      reference: 'refund/1',
      fees: { platform: 0n, network: 0n },
    });
    await ledger.transfer({ to: ADDRESS, token: 'USDT', amount: 4n });
    await assert.rejects(ledger.broadcast(payout), (error: Error) => {
      assert.ok(error instanceof TransactionRejectedError);
      assert.match(error.message, /insufficient funds/);
      return true;
    });
    assert.equal(await ledger.transactionStatus(payout.txHash), undefined);
    await ledger.transfer({ to: ADDRESS, token: 'USDT', amount: 1n });
    await ledger.broadcast(payout);
    assert.ok(await ledger.transactionStatus(payout.txHash));
    assert.equal(await ledger.balanceOf(ADDRESS, 'USDT'), 0n);
  });

  it('adds confirmations by mining empty blocks', async () => {
    const ledger = await openLedger(new MemoryEventStore());
    await ledger.transfer({ to: ADDRESS, token: 'USDT', amount: 1_000_000n });
    assert.equal(await ledger.mine(5), 6);
    assert.equal(await ledger.mine(), 7);
    assert.equal((await ledger.head()).height, 7);
    assert.deepEqual((await ledger.block(7))?.transfers, []);
  });

  it('mines up to 10000 blocks in one call, chained, and refuses counts outside 1..10000 whole', async () => {
    const store = new MemoryEventStore();
    const ledger = await openLedger(store);
    assert.equal(await ledger.mine(2_500), 2_500);
    for (let height = 1; height <= 2_500; height++) {
      assert.equal((await ledger.block(height))?.parentHash, (await ledger.block(height - 1))?.hash);
    }
    for (const count of [0, 10_001, 1.5]) {
      await assert.rejects(ledger.mine(count), {
        name: 'DomainError',
        message: 'count must be a whole number from 1 to 10000',
      });
    }
    assert.equal((await store.readStream(sandboxLedgerStreamName('ethereum'))).length, 2_500);
    assert.equal(await ledger.mine(10_000), 12_500);
  });

  it('removes the dropped blocks and their transfers on a reorg', async () => {
    const ledger = await openLedger(new MemoryEventStore());
    await ledger.mine(2);
    const { blockNumber } = await ledger.transfer({ to: ADDRESS, token: 'ETH', amount: 7n });
    const dropped = await ledger.block(blockNumber);
    assert.equal(await ledger.reorg(1), 2);
    assert.equal((await ledger.head()).height, 2);
    // The ledger says the dropped height is empty now, as a node says a slot
    // was skipped: another hash there is the watcher's evidence of the reorg.
    const gone = await ledger.block(3);
    assert.deepEqual(gone?.transfers, []);
    assert.equal(gone?.hash, (await ledger.head()).hash);
    assert.notEqual(gone?.hash, dropped?.hash);
    assert.equal(await ledger.block(4), undefined, 'above anything it held: not served');
    const { blockNumber: again } = await ledger.transfer({ to: ADDRESS, token: 'ETH', amount: 8n });
    assert.equal(again, 3);
    assert.notEqual((await ledger.block(3))?.hash, dropped?.hash);
    await assert.rejects(ledger.reorg(4), {
      name: 'DomainError',
      message: "depth must be a whole number from 1 to 3 (the ethereum sandbox ledger's height)",
    });
  });

  it('keeps its chain across a restart', async () => {
    const store = new MemoryEventStore();
    const ledger = await openLedger(store);
    await ledger.transfer({ to: ADDRESS, token: 'ETH', amount: 1n });
    await ledger.mine(3);
    await ledger.reorg(1);
    await ledger.transfer({ to: ADDRESS, token: 'ETH', amount: 2n });
    const reopened = await openLedger(store);
    assert.deepEqual(await reopened.head(), await ledger.head());
    for (let height = 0; height <= 4; height++)
      assert.deepEqual(await reopened.block(height), await ledger.block(height));
    // And it carries on from there.
    assert.equal(await reopened.mine(1), 5);
  });

  it('sees blocks another instance mined on the same stream, and decides again on a conflict', async () => {
    const store = new MemoryEventStore();
    const first = await openLedger(store);
    const second = await openLedger(store);
    await first.mine(2);
    const { blockNumber } = await second.transfer({ to: ADDRESS, token: 'ETH', amount: 1n });
    assert.equal(blockNumber, 3);
    assert.equal((await first.head()).height, 3);
    assert.equal((await store.readStream(sandboxLedgerStreamName('ethereum'))).length, 3);
  });

  it('refuses a caller-chosen transaction hash that is already on the chain', async () => {
    const ledger = await openLedger(new MemoryEventStore());
    const txHash = `0x${'ab'.repeat(32)}`;
    assert.equal((await ledger.transfer({ to: ADDRESS, token: 'ETH', amount: 1n, txHash })).txHash, txHash);
    await assert.rejects(
      ledger.transfer({ to: ADDRESS, token: 'ETH', amount: 1n, txHash }),
      (error: unknown) =>
        error instanceof DomainError &&
        error.kind === 'conflict' &&
        error.message === `Transaction ${txHash} is already on the chain`,
    );
    assert.equal((await ledger.head()).height, 1);
  });

  const formats: {
    chain: ChainName;
    token: string;
    block: (hash: string) => boolean;
    tx: (hash: string) => boolean;
  }[] = [
    {
      chain: 'ethereum',
      token: 'ETH',
      block: (h) => /^0x[0-9a-f]{64}$/.test(h),
      tx: (h) => /^0x[0-9a-f]{64}$/.test(h),
    },
    { chain: 'tron', token: 'TRX', block: (h) => /^[0-9a-f]{64}$/.test(h), tx: (h) => /^[0-9a-f]{64}$/.test(h) },
    { chain: 'bitcoin', token: 'BTC', block: (h) => /^[0-9a-f]{64}$/.test(h), tx: (h) => /^[0-9a-f]{64}$/.test(h) },
    {
      chain: 'solana',
      token: 'SOL',
      block: (h) => base58.decode(h).length === 32,
      // A Solana transaction is named by its 64-byte signature.
      tx: (h) => base58.decode(h).length === 64,
    },
  ];
  for (const { chain, token, block, tx } of formats) {
    it(`writes ${chain} block and transaction hashes the way ${chain} does`, async () => {
      const ledger = await openLedger(new MemoryEventStore(), chain);
      const { txHash, blockNumber } = await ledger.transfer({ to: 'recipient', token, amount: 1n });
      const mined = await ledger.block(blockNumber);
      assert.ok(mined);
      for (const hash of [mined.hash, mined.parentHash, (await ledger.block(0))!.hash])
        assert.ok(block(hash), `block hash ${hash}`);
      assert.ok(tx(txHash), `transaction hash ${txHash}`);
    });
  }

  it('calls onNewBlock listeners after each mined block and reorg, until stopped', async () => {
    const ledger = await openLedger(new MemoryEventStore());
    let calls = 0;
    const stop = ledger.onNewBlock(() => calls++);
    await ledger.transfer({ to: ADDRESS, token: 'ETH', amount: 1n });
    await ledger.mine(2);
    await ledger.reorg(1);
    assert.equal(calls, 3);
    stop();
    await ledger.mine(1);
    assert.equal(calls, 3);
  });

  it('puts 20 concurrent transfers into 20 distinct blocks', async () => {
    const store = new MemoryEventStore();
    const ledger = await openLedger(store);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => ledger.transfer({ to: ADDRESS, token: 'ETH', amount: BigInt(i + 1) })),
    );
    const heights = results.map((r) => r.blockNumber);
    assert.equal(new Set(heights).size, 20);
    assert.deepEqual(
      [...heights].sort((a, b) => a - b),
      Array.from({ length: 20 }, (_, i) => i + 1),
    );
    assert.equal((await ledger.head()).height, 20);
    const amounts = new Set<bigint>();
    for (const { blockNumber, txHash } of results) {
      const block = await ledger.block(blockNumber);
      assert.equal(block?.transfers.length, 1);
      assert.equal(block.transfers[0]!.txHash, txHash);
      amounts.add(block.transfers[0]!.amount);
    }
    assert.equal(amounts.size, 20);
    // The stream agrees: a restart sees the same 20 blocks.
    assert.deepEqual(await (await openLedger(store)).head(), await ledger.head());
  });
});
