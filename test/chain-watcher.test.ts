// The chain watcher against a scripted chain: the ordering guarantees, and
// the providers' lagging and stale nodes, that no test node can stage on
// demand; and the race with expiry, on the sandbox ledger.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { staleTip, type ChainAdapter, type ChainBlock, type ChainHead } from '../adapters/chains/port.ts';
import { SandboxLedger } from '../adapters/chains/sandbox/ledger.ts';
import { systemClock, type Clock } from '../adapters/clock.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { SqlEventStore } from '../adapters/event-store/sql.ts';
import { DepositKeyring, depositAddressesFromKeyring } from '../adapters/keys/derivation.ts';
import { FixedRateProvider } from '../adapters/rates/fixed.ts';
import { openPglite } from '../adapters/sql/database.ts';
import { projectors } from '../api/service.ts';
import { ChainWatcher, type WatcherOptions } from '../commands/chain-watcher.ts';
import { watchListProjector } from '../commands/watch-list.ts';
import { ExpiryScheduler, expiringInvoicesProjector, migrateExpiringInvoices } from '../commands/expiry.ts';
import { invoiceCommands } from '../commands/invoices.ts';
import { merchantCommands } from '../commands/merchants.ts';
import { paymentCommands, paymentsToInvoices } from '../commands/payments.ts';
import { invoiceStreamName } from '../domain/invoice.ts';
import { paymentStreamName } from '../domain/payment.ts';
import { ProjectionEngine, type Reactor } from '../adapters/event-store/followers.ts';
import { readModelMigrations } from '../projections/schema.ts';

const MNEMONIC = 'abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about';

/** Blocks 0 and 1, then block 2 once `chain.mined`, made by `mine` when the watcher first asks for it. */
function scriptedTron(chain: { mined: boolean }, mine: () => Promise<ChainBlock>): ChainAdapter {
  const blocks: ChainBlock[] = [0, 1].map((height) => ({
    height,
    hash: `h${height}`,
    parentHash: `h${height - 1}`,
    timestamp: new Date(),
    transfers: [],
  }));
  return {
    chain: 'tron',
    head: async () => ({ height: chain.mined ? 2 : 1, hash: chain.mined ? 'h2' : 'h1' }),
    block: async (height) => {
      if (height === 2 && chain.mined) return blocks[2] ?? (blocks[2] = await mine());
      return blocks[height];
    },
    onNewBlock: () => () => {},
    networkFee: () => 0n,
    prepareTransfer: () => Promise.reject(new Error('not in this test')),
    broadcast: () => Promise.reject(new Error('not in this test')),
    balanceOf: () => Promise.reject(new Error('not in this test')),
    transactionStatus: async () => undefined,
  };
}

describe('chain watcher', () => {
  it('finds a payment to an address handed out before the block was read, though the read models have not shown it yet', async () => {
    const database = await openPglite('memory://');
    const store = await SqlEventStore.open(database);
    await ProjectionEngine.migrate(database, readModelMigrations);
    await ChainWatcher.migrate(database);
    const projections = new ProjectionEngine(
      database,
      store,
      [...projectors, paymentsToInvoices(store), watchListProjector],
      {
        pollMs: 50,
      },
    );
    projections.start();
    const invoices = invoiceCommands({
      store,
      clock: systemClock,
      rates: await FixedRateProvider.open(store),
      addresses: depositAddressesFromKeyring(DepositKeyring.fromMnemonic(MNEMONIC)),
      enabledChains: ['tron'],
    });
    const merchant = await merchantCommands(store).register({
      name: 'Shop',
      tier: 'pro',
      webhookUrl: null,
      settlementWallets: {},
    });
    await projections.waitFor(merchant.position!);

    let restarted = false;
    // The customer pays while the block is being read: the payment was
    // answered (its events committed) before the block, but the read models
    // stand still until restarted.
    const chain = { mined: false };
    const tron = scriptedTron(chain, async () => {
      const { value } = await invoices.createPayment(merchant.value.id, {
        amount: '10',
        currency: 'USD',
        description: null,
        expiresInMinutes: 15,
        webhookUrl: null,
        metadata: null,
        chain: 'tron',
        token: 'USDT',
      });
      setTimeout(() => {
        restarted = true;
        projections.start();
      }, 200);
      return {
        height: 2,
        hash: 'h2',
        parentHash: 'h1',
        timestamp: new Date(),
        transfers: [
          {
            txHash: 'ab'.repeat(32),
            index: 0,
            to: value.address.address,
            token: 'USDT',
            amount: value.address.cryptoAmount,
          },
        ],
      };
    });
    const errors: unknown[] = [];
    const watcher = new ChainWatcher(tron, database, paymentCommands(store, systemClock), systemClock, {
      requiredConfirmations: 19,
      monitoringWindowMs: 60_000,
      caughtUp: () => projections.caughtUp(30_000),
      paymentsApplied: () => projections.caughtUp(30_000, ['payments-to-invoices']),
      onError: (error) => errors.push(error),
    });
    try {
      while (await watcher.step()); // at the head, block 1
      await projections.stop();
      chain.mined = true;
      while (await watcher.step());
      assert.ok(restarted, 'the watcher waited for the read models before matching the block');
      const detected = await store.readStream(paymentStreamName('tron', 'ab'.repeat(32), 0));
      assert.deepEqual(
        detected.map((e) => e.type),
        ['PaymentDetected'],
      );
      assert.deepEqual(errors, []);
    } finally {
      await projections.stop();
      await store.close();
      await database.close();
    }
  });
});

/** A clock the test moves by hand. */
function handClock(start = new Date('2026-01-01T12:00:00Z')) {
  let now = start.getTime();
  return {
    now: () => new Date(now),
    set: (minutes: number) => void (now = start.getTime() + minutes * 60_000),
  } satisfies Clock & Record<string, unknown>;
}

/**
 * The service's pieces on an in-memory database: the read models, the
 * payments-to-invoices reactor (which a test may hold, as a slow one), a
 * merchant, and a watcher of `chain` wired as api/service.ts wires it.
 */
async function serviceOn(
  chainOn: (store: EventStore) => ChainAdapter | Promise<ChainAdapter>,
  clock: Clock,
  requiredConfirmations: number,
) {
  const database = await openPglite('memory://');
  const store = await SqlEventStore.open(database);
  const chain = await chainOn(store);
  await ProjectionEngine.migrate(database, readModelMigrations);
  await ChainWatcher.migrate(database);
  await migrateExpiringInvoices(database);
  const carry = paymentsToInvoices(store);
  let held: Promise<void> | undefined;
  const slowCarry: Reactor = {
    name: carry.name,
    react: async (event) => {
      await held;
      return carry.react(event);
    },
  };
  const projections = new ProjectionEngine(
    database,
    store,
    [...projectors, slowCarry, expiringInvoicesProjector, watchListProjector],
    {
      pollMs: 50,
    },
  );
  projections.start();
  const invoices = invoiceCommands({
    store,
    clock,
    rates: await FixedRateProvider.open(store),
    addresses: depositAddressesFromKeyring(DepositKeyring.fromMnemonic(MNEMONIC)),
    enabledChains: [chain.chain],
  });
  const merchant = await merchantCommands(store).register({
    name: 'Shop',
    tier: 'pro',
    webhookUrl: null,
    settlementWallets: {},
  });
  const errors: unknown[] = [];
  const options: WatcherOptions = {
    requiredConfirmations,
    monitoringWindowMs: 60_000,
    caughtUp: () => projections.caughtUp(30_000, [watchListProjector.name]),
    // Short, so that a held reactor fails the step instead of stalling the test.
    paymentsApplied: () => projections.caughtUp(300, [carry.name]),
    onError: (error) => errors.push(error),
  };
  const watcher = new ChainWatcher(chain, database, paymentCommands(store, clock), clock, options);
  const expiry = new ExpiryScheduler(database.db, invoices, clock, {
    watchedThrough: () => watcher.caughtUpAt,
    caughtUp: () => projections.caughtUp(30_000, [expiringInvoicesProjector.name]),
  });
  return {
    store,
    watcher,
    expiry,
    errors,
    /** Holds the reactor until `release` is called. */
    hold() {
      let release!: () => void;
      held = new Promise<void>((resolve) => (release = resolve));
      return () => {
        held = undefined;
        release();
      };
    },
    /** Steps until the watcher has nothing more to read; a step that fails is recorded in `errors`. */
    async steps() {
      while (await watcher.step().catch((error) => void errors.push(error)));
    },
    async pay(amountUsd = '10') {
      const { value } = await invoices.createPayment(merchant.value.id, {
        amount: amountUsd,
        currency: 'USD',
        description: null,
        expiresInMinutes: 15,
        webhookUrl: null,
        metadata: null,
        chain: chain.chain,
        token: 'USDT',
      });
      return {
        id: value.invoice.id,
        expiresAt: value.invoice.expiresAt,
        address: value.address.address,
        amount: value.address.cryptoAmount,
      };
    },
    async types(stream: string) {
      await projections.caughtUp(30_000, ['invoices', carry.name]);
      return (await store.readStream(stream)).map((e) => e.type);
    },
    async close() {
      held = undefined;
      await projections.stop();
      await store.close();
      await database.close();
    },
  };
}

/**
 * A Tron chain whose provider load-balances over backends that are not all
 * at the head, or whose one node is stale: `lag` is how many of the newest
 * blocks the answering backend does not have yet (its head is older, and it
 * answers "no block" for heights it served a moment ago, as java-tron's
 * /wallet/getblock answers {} for a number above its head:
 * framework/src/main/java/org/tron/core/services/http/GetBlockServlet.java);
 * `blockLag` hides blocks from block() only (the head came from a fresher
 * backend); `stale` is what head() reports of the node.
 */
function laggingTron(clock: Clock) {
  const blocks: ChainBlock[] = [];
  const mine = (transfers: ChainBlock['transfers'] = [], timestamp = clock.now()) => {
    const height = blocks.length;
    blocks.push({
      height,
      hash: `h${height}`,
      parentHash: `h${height - 1}`,
      timestamp,
      transfers,
    });
  };
  mine();
  mine();
  const node = { lag: 0, blockLag: 0, stale: undefined as string | undefined, down: false, mine };
  const adapter: ChainAdapter = {
    chain: 'tron',
    head: async (): Promise<ChainHead> => {
      // What the adapters' retried RPC throws once its attempts are spent (adapters/chains/node.ts).
      if (node.down) throw new Error('tron: fetch failed (connect ECONNREFUSED)');
      const top = blocks[blocks.length - 1 - node.lag]!;
      return { height: top.height, hash: top.hash, ...(node.stale && { stale: node.stale }) };
    },
    block: async (height) => (height < blocks.length - node.lag - node.blockLag ? blocks[height] : undefined),
    onNewBlock: () => () => {},
    networkFee: () => 0n,
    prepareTransfer: () => Promise.reject(new Error('not in this test')),
    broadcast: () => Promise.reject(new Error('not in this test')),
    balanceOf: () => Promise.reject(new Error('not in this test')),
    transactionStatus: async () => undefined,
  };
  return { node, adapter };
}

describe('chain watcher: only positive evidence', () => {
  it('waits out a node that lags (an older head, no block where one was served): nothing withdrawn, one confirmation', async () => {
    const clock = handClock();
    const { node, adapter } = laggingTron(clock);
    const svc = await serviceOn(() => adapter, clock, 2);
    try {
      await svc.steps(); // at the head, block 1
      const invoice = await svc.pay();
      const txHash = 'cd'.repeat(32);
      node.mine([{ txHash, index: 0, to: invoice.address, token: 'USDT', amount: invoice.amount }]);
      node.mine();
      await svc.steps(); // blocks 2 and 3: the payment has its 2 confirmations
      assert.ok((await svc.types(invoiceStreamName(invoice.id))).includes('InvoiceConfirmed'));

      // The answering backend is two blocks behind: its head is block 1, and it
      // has neither the payment's block 2 nor block 3.
      node.lag = 2;
      await svc.steps();
      assert.equal(svc.watcher.condition().state, 'behind');
      // The head from a backend at the tip, the blocks from one that is behind.
      node.lag = 0;
      node.mine();
      node.blockLag = 3;
      await svc.steps();
      assert.equal(svc.watcher.condition().state, 'behind');
      // All backends caught up.
      node.blockLag = 0;
      await svc.steps();
      assert.equal(svc.watcher.condition().state, 'ok');

      assert.deepEqual(await svc.types(paymentStreamName('tron', txHash, 0)), ['PaymentDetected', 'PaymentConfirmed']);
      const invoiceEvents = await svc.types(invoiceStreamName(invoice.id));
      assert.equal(invoiceEvents.filter((t) => t === 'InvoiceConfirmed').length, 1, invoiceEvents.join(','));
      assert.deepEqual(svc.errors, []);
    } finally {
      await svc.close();
    }
  });

  it('takes a stale node for no news: watched-through stands still and expiry waits, until the node recovers', async () => {
    const clock = handClock();
    const { node, adapter } = laggingTron(clock);
    const svc = await serviceOn(() => adapter, clock, 2);
    try {
      await svc.steps();
      const invoice = await svc.pay(); // due at minute 15
      await svc.steps();
      const watchedAt = svc.watcher.caughtUpAt;
      assert.deepEqual(watchedAt, clock.now());
      assert.equal(svc.watcher.condition().state, 'ok');

      node.stale = 'its newest block is 7200 s old';
      clock.set(20);
      await svc.steps();
      assert.deepEqual(svc.watcher.caughtUpAt, watchedAt, 'a stale node does not show the chain up to now');
      assert.deepEqual(svc.watcher.condition(), {
        chain: 'tron',
        state: 'stale',
        since: clock.now(),
        detail: 'its newest block is 7200 s old',
      });
      assert.equal(await svc.expiry.expireDue(), 0, 'the invoice is not expired on the word of a stale node');

      node.down = true;
      await svc.steps();
      assert.equal(svc.watcher.condition().state, 'silent');
      assert.match(svc.watcher.condition().detail ?? '', /ECONNREFUSED/);
      assert.deepEqual(svc.watcher.caughtUpAt, watchedAt);
      node.down = false;
      svc.errors.length = 0;

      // Back with the chain, and the payment made in time (minute 14) in a block it had not had.
      node.stale = undefined;
      const txHash = 'ef'.repeat(32);
      const minute14 = new Date(new Date(invoice.expiresAt).getTime() - 60_000);
      node.mine([{ txHash, index: 0, to: invoice.address, token: 'USDT', amount: invoice.amount }], minute14);
      clock.set(21);
      await svc.steps();
      assert.equal(svc.watcher.condition().state, 'ok');
      assert.deepEqual(svc.watcher.caughtUpAt, clock.now());
      await svc.expiry.expireDue();
      const events = await svc.types(invoiceStreamName(invoice.id));
      assert.ok(events.includes('PaymentApplied') && !events.includes('InvoiceExpired'), events.join(','));
      assert.deepEqual(svc.errors, []);
    } finally {
      await svc.close();
    }
  });

  it('moves watched-through only once the payments it recorded are on their invoices: a slow reactor does not let expiry win', async () => {
    const clock = handClock();
    const svc = await serviceOn((store) => SandboxLedger.open(store, 'tron', clock), clock, 2);
    try {
      await svc.steps();
      const invoice = await svc.pay(); // due at minute 15
      await svc.steps();

      const release = svc.hold(); // the reactor is slow
      clock.set(14);
      const ledger = svc.watcher.chain as SandboxLedger;
      const { txHash } = await ledger.transfer({ to: invoice.address, token: 'USDT', amount: invoice.amount });
      await svc.steps(); // detected in time
      clock.set(16);
      await svc.steps();
      assert.deepEqual(svc.watcher.condition().detail, 'the payments it recorded are not on their invoices yet');
      await svc.expiry.expireDue();
      release();

      await svc.steps();
      await svc.expiry.expireDue();
      await ledger.mine(1);
      await svc.steps();
      const events = await svc.types(invoiceStreamName(invoice.id));
      assert.ok(!events.includes('InvoiceExpired'), events.join(','));
      assert.ok(events.includes('InvoiceConfirmed'), events.join(','));
      const applied = (await svc.store.readStream(invoiceStreamName(invoice.id))).find(
        (e) => e.type === 'PaymentApplied',
      );
      assert.equal((applied?.data as { late?: boolean }).late ?? false, false, 'applied in time, not late');
      assert.deepEqual((await svc.types(paymentStreamName('tron', txHash, 0))).slice(0, 1), ['PaymentDetected']);
    } finally {
      await svc.close();
    }
  });
});

describe('the chain port', () => {
  it('takes an account chain node whose newest block is over 10 minutes old for stale', () => {
    const now = Date.parse('2026-01-01T12:00:00Z');
    assert.equal(staleTip(new Date(now - 10 * 60_000), now), undefined);
    assert.equal(staleTip(new Date(now - 10 * 60_000 - 1000), now), 'its newest block is 601 s old');
  });
});
