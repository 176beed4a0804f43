// The payout engine over its own work queue, with settlement as its kind,
// on the sandbox ledger: what it pays, to whom, and that nothing stuck holds
// back the rest. No read model is projected here at all: the engine must not
// need one.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { CompiledQuery } from 'kysely';
import {
  PlatformFeeUncollectedError,
  type ChainAdapter,
  type OutgoingTransfer,
  type PreparedTransaction,
} from '../adapters/chains/port.ts';
import { SandboxLedger } from '../adapters/chains/sandbox/ledger.ts';
import { SqlEventStore } from '../adapters/event-store/sql.ts';
import { openPglite, openPostgres, type SqlDatabase } from '../adapters/sql/database.ts';
import { handleCommand } from '../commands/handle.ts';
import { PayoutEngine, migratePayoutQueue, payoutQueueProjector } from '../commands/payouts.ts';
import { loadSettlement, SettlementPayouts, settlementManager } from '../commands/settlements.ts';
import type { ChainName } from '../domain/catalogue.ts';
import { merchantDecider, merchantStream } from '../domain/merchant.ts';
import { settlementDecider, settlementIdOf, settlementStreamName } from '../domain/settlement.ts';
import { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { readModelMigrations } from '../projections/schema.ts';
import { freshPostgres } from './support/postgres.ts';
import { startCutProxy } from './support/pg-cut-proxy.ts';

const WALLET_A = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';
const WALLET_B = 'TJRabPrwbZy45sbavfcjinPJC18kjpRTv8';

async function harness(
  options: { chain?: (ledger: SandboxLedger) => ChainAdapter; open?: () => Promise<SqlDatabase> } = {},
) {
  // The business clock never runs behind the wall clock (the sandbox's only moves forward), and the
  // queue takes an event's recording time as "due now".
  let ahead = 0;
  const clock = { now: () => new Date(Date.now() + ahead) };
  const open = options.open ?? (() => openPglite('memory://'));
  const database: SqlDatabase = await open();
  const store = await SqlEventStore.open(database);
  await ProjectionEngine.migrate(database, readModelMigrations);
  await migratePayoutQueue(database);
  const ledger = await SandboxLedger.open(store, 'tron', clock);
  const chain = options.chain?.(ledger) ?? ledger;
  const deps = {
    store,
    clock,
    chains: new Map<ChainName, ChainAdapter>([['tron', chain]]),
    platformFeeBps: 100,
    requiredConfirmations: { tron: 1 } as Record<ChainName, number>,
  };
  // Only the queue and the saga's manager follow the log: no read model is ever written.
  const projections = new ProjectionEngine(database, store, [payoutQueueProjector, settlementManager(deps)], {
    pollMs: 20,
    onError: (name, error) => console.error(name, error),
  });
  projections.start();
  const engineOn = (on: SqlDatabase, settlements: SettlementPayouts) =>
    new PayoutEngine(on, [settlements], ['tron'], clock, {
      batch: 100,
      leaseRetryMs: 0,
      onError: (error) => console.error('payout look failed', error),
    });
  const engine = engineOn(database, new SettlementPayouts(deps));
  const closing: (() => Promise<void>)[] = [];
  /**
   * The payout engine of another instance of the service, paying through
   * `through`: with `options.open`, on a database (a connection pool) of its
   * own; the embedded database is one process's, so there it shares this one.
   */
  const instance = async (through: ChainAdapter) => {
    const theirs = options.open ? await open() : database;
    const theirStore = theirs === database ? store : await SqlEventStore.open(theirs);
    const chains = new Map<ChainName, ChainAdapter>([['tron', through]]);
    const other = engineOn(theirs, new SettlementPayouts({ ...deps, store: theirStore, chains }));
    closing.push(async () => {
      await other.stop();
      if (theirs === database) return;
      await theirStore.close();
      await theirs.close();
    });
    return { engine: other, database: theirs };
  };

  const merchantId = randomUUID();
  const merchant = (wallets: Record<string, string>) =>
    handleCommand(store, merchantDecider, merchantStream(merchantId), {
      type: 'RegisterMerchant',
      merchantId,
      profile: { name: 'Shop', tier: 'pro', webhookUrl: null, settlementWallets: wallets },
      webhookSecret: 'whsec_x',
      now: clock.now().toISOString(),
    });
  const setWallets = (wallets: Record<string, string>) =>
    handleCommand(store, merchantDecider, merchantStream(merchantId), {
      type: 'UpdateMerchant',
      changes: { settlementWallets: wallets },
      now: clock.now().toISOString(),
    });
  /** A settlement as the saga asks for one when an invoice is confirmed. */
  const request = async (gross: bigint) => {
    const invoiceId = randomUUID();
    const settlementId = settlementIdOf(invoiceId);
    const deposit = `TDeposit${invoiceId.slice(0, 8)}`;
    // The customer's payment: the ledger, as a chain, refuses a payout from an address that holds less.
    await ledger.transfer({ to: deposit, token: 'USDT', amount: gross });
    await handleCommand(store, settlementDecider, settlementStreamName(settlementId), {
      type: 'RequestSettlement',
      settlementId,
      invoiceId,
      merchantId,
      chain: 'tron',
      token: 'USDT',
      tokenDecimals: 6,
      fromAddress: deposit,
      derivationIndex: 1,
      grossAmount: gross,
      networkFee: 0n,
      platformFeeBps: 100,
      merchantWallet: null,
      now: clock.now().toISOString(),
    });
    return settlementId;
  };
  const settlement = (id: string) => loadSettlement(store, id);
  /** The queue as the log says, then one pass of the engine. */
  const pass = async () => {
    await projections.caughtUp();
    return engine.pass();
  };
  const later = (ms: number) => void (ahead += ms);
  const close = async () => {
    for (const done of closing) await done();
    await engine.stop();
    await projections.stop();
    await store.close();
    await database.close();
  };
  const caughtUp = () => projections.caughtUp();
  return { ledger, merchant, setWallets, request, settlement, pass, caughtUp, instance, later, close };
}

describe('payout engine', () => {
  const open: { close(): Promise<void> }[] = [];
  after(() => Promise.all(open.map((h) => h.close())));

  it('pays to the wallet the merchant has when the payout is prepared, not the one at confirmation', async () => {
    const h = await harness();
    open.push(h);
    await h.merchant({ tron: WALLET_A });
    const id = await h.request(100_000_000n);
    // Rotated (say, the old wallet was compromised) before anything was prepared.
    await h.setWallets({ tron: WALLET_B });
    await h.pass();
    await h.ledger.mine(1);
    await h.pass();
    const s = await h.settlement(id);
    assert.equal(s!.status, 'completed');
    assert.equal(s!.merchantWallet, WALLET_B);
    assert.equal(h.ledger.transfersTo(WALLET_A).length, 0, 'nothing to the old wallet');
    assert.deepEqual(
      h.ledger.transfersTo(WALLET_B).map((t) => t.amount),
      [99_000_000n],
    );
  });

  it('goes on by itself once a wallet is set, whatever the read models show', async () => {
    const h = await harness();
    open.push(h);
    await h.merchant({});
    const id = await h.request(10_000_000n);
    await h.pass();
    const waiting = await h.settlement(id);
    assert.equal(waiting!.status, 'pending');
    assert.equal(waiting!.failureCode, 'no_wallet');
    await h.setWallets({ tron: WALLET_A });
    await h.pass(); // the wallet's event made it due at once
    await h.ledger.mine(1);
    await h.pass();
    assert.equal((await h.settlement(id))!.status, 'completed');
    assert.deepEqual(
      h.ledger.transfersTo(WALLET_A).map((t) => t.amount),
      [9_900_000n],
    );
  });

  it('lets no stuck payout hold back the others: 150 failing, then a good one is paid in the next pass', async () => {
    const stuck = new Set<string>();
    const h = await harness({
      chain: (ledger) =>
        Object.assign(Object.create(ledger) as SandboxLedger, {
          async prepareTransfer(transfer: OutgoingTransfer) {
            if (stuck.has(transfer.reference.split('/')[0]!)) throw new Error('connect ECONNREFUSED');
            return ledger.prepareTransfer(transfer);
          },
        }),
    });
    open.push(h);
    await h.merchant({ tron: WALLET_A });
    for (let i = 0; i < 150; i++) stuck.add(await h.request(1_000_000n + BigInt(i)));
    await h.pass(); // the oldest 100 fail
    h.later(1_000);
    const good = await h.request(50_000_000n);
    await h.pass(); // the other 50 and the good one; the first 100 wait for their retry
    await h.ledger.mine(1);
    h.later(1_000);
    await h.pass();
    assert.equal((await h.settlement(good))!.status, 'completed');
    const failed = await Promise.all([...stuck].map((id) => h.settlement(id)));
    assert.ok(failed.every((s) => s!.status === 'failed' && s!.failureCode === 'node_unavailable'));
    assert.ok(failed.every((s) => s!.failureReason === 'connect ECONNREFUSED' && s!.retryAt !== null));
  });

  it('completes a payout whose platform fee the chain could not collect after it, and raises that for a person', async () => {
    const sent = new Set<string>();
    const words = 'the platform fee call abc failed (OUT_OF_ENERGY), 3 time(s)';
    const h = await harness({
      chain: (ledger) =>
        Object.assign(Object.create(ledger) as SandboxLedger, {
          // Sent once; told again once final, the fee that goes after it cannot be collected.
          async broadcast(prepared: PreparedTransaction) {
            if (sent.has(prepared.txHash)) throw new PlatformFeeUncollectedError(words);
            sent.add(prepared.txHash);
            return ledger.broadcast(prepared);
          },
        }),
    });
    open.push(h);
    await h.merchant({ tron: WALLET_A });
    const id = await h.request(10_000_000n);
    await h.pass();
    await h.ledger.mine(1);
    await h.pass();
    const s = await h.settlement(id);
    assert.equal(s!.status, 'completed', "the merchant's money is out");
    assert.deepEqual(
      s!.attention.map((a) => [a.reason, a.detail]),
      [['platform_fee_uncollected', words]],
    );
    h.later(3_600_000);
    await h.pass();
    assert.equal((await h.settlement(id))!.attention.length, 1, 'raised once');
  });

  it('fails a payout the fees would eat, visibly and for good, and pays nothing', async () => {
    const h = await harness({
      chain: (ledger) => Object.assign(Object.create(ledger) as SandboxLedger, { networkFee: () => 5_000_000n }),
    });
    open.push(h);
    await h.merchant({ tron: WALLET_A });
    const id = await h.request(4_000_000n);
    await h.pass();
    const s = await h.settlement(id);
    assert.equal(s!.status, 'failed');
    assert.equal(s!.failureCode, 'fees_exceed_amount');
    assert.equal(s!.retryAt, null);
    h.later(86_400_000);
    await h.pass();
    assert.equal(h.ledger.transfersTo(WALLET_A).length, 0);
  });
});

/**
 * `ledger` as the chain node an instance pays through, writing each step to
 * `log` as `<instance> prepare|send <payout or transaction>`. Preparing
 * takes a moment, as on a node, so that two engines' looks overlap.
 */
function loggedAs(
  name: string,
  ledger: SandboxLedger,
  log: string[],
  whilePreparing?: () => Promise<void>,
): ChainAdapter {
  return Object.assign(Object.create(ledger) as SandboxLedger, {
    async prepareTransfer(transfer: OutgoingTransfer) {
      log.push(`${name} prepare ${transfer.reference.split('/')[0]}`);
      await (whilePreparing?.() ?? new Promise((resolve) => setTimeout(resolve, 20)));
      return ledger.prepareTransfer(transfer);
    },
    async broadcast(prepared: PreparedTransaction) {
      log.push(`${name} send ${prepared.txHash}`);
      return ledger.broadcast(prepared);
    },
  });
}

/** Ends the PostgreSQL session that holds the advisory lock `key`, as a crash or a cut connection does. */
async function endHolderOf(database: SqlDatabase, key: string) {
  const holder = await database.advisoryLockHolder(key);
  const pid = /PostgreSQL backend (\d+)/.exec(holder ?? '')?.[1];
  assert.ok(pid, `no session holds ${key}: ${holder}`);
  await database.db.executeQuery(CompiledQuery.raw('select pg_terminate_backend($1)', [Number(pid)]));
}

async function until(done: () => Promise<boolean>, ms: number) {
  const deadline = Date.now() + ms;
  while (!(await done())) {
    assert.ok(Date.now() < deadline, `not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const postgres = await freshPostgres();
const databases: [name: string, open: (() => Promise<SqlDatabase>) | undefined][] = [
  ['an embedded database (one process)', undefined],
  ...(postgres ? [['PostgreSQL', () => postgres.open()] as [string, () => Promise<SqlDatabase>]] : []),
];

for (const [name, open] of databases) {
  describe(`payout engines of two instances on ${name}`, () => {
    after(() => (open ? postgres?.drop() : undefined));

    if (open && postgres) {
      it('count a lease lost when its session stops answering, before PostgreSQL frees it', async (t) => {
        const proxy = await startCutProxy(postgres.url);
        const holder = await openPostgres(proxy.url);
        const other = await postgres.open();
        t.after(async () => {
          await proxy.close();
          await holder.close();
          await other.close();
        });
        const lease = await holder.tryAdvisoryLock('payouts:heartbeat');
        assert.ok(lease);
        const started = Date.now();
        proxy.freeze(); // no socket closes: only the holder's questions go unanswered
        await until(async () => lease.lost.aborted, 15_000);
        assert.ok(Date.now() - started <= 11_000, `lost after ${Date.now() - started} ms`);
        // PostgreSQL still holds it for the silent session; once that ends, another takes it.
        assert.equal(await other.tryAdvisoryLock('payouts:heartbeat'), undefined);
        await proxy.close();
        await until(async () => {
          const taken = await other.tryAdvisoryLock('payouts:heartbeat');
          await taken?.release();
          return taken !== undefined;
        }, 10_000);
      });
    }

    it("let one at a time pay a chain's payouts: each prepared once, sent by one", async (t) => {
      const h = await harness({ ...(open && { open }) });
      t.after(() => h.close());
      const log: string[] = [];
      const a = await h.instance(loggedAs('a', h.ledger, log));
      const b = await h.instance(loggedAs('b', h.ledger, log));
      await h.merchant({ tron: WALLET_A });
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) ids.push(await h.request(10_000_000n + BigInt(i)));
      await h.caughtUp();
      await Promise.all([a.engine.pass(), b.engine.pass()]);
      const payer = log[0]?.split(' ')[0];
      assert.ok(
        log.every((step) => step.startsWith(`${payer} `)),
        `one instance pays:\n${log.join('\n')}`,
      );
      assert.deepEqual(
        log.filter((step) => step.includes(' prepare ')).sort(),
        ids.map((id) => `${payer} prepare ${id}`).sort(),
      );
      assert.equal(new Set(log.filter((step) => step.includes(' send '))).size, 4, log.join('\n'));
      await h.ledger.mine(1);
      await h.caughtUp();
      await Promise.all([a.engine.pass(), b.engine.pass()]);
      for (const id of ids) assert.equal((await h.settlement(id))!.status, 'completed');
      assert.equal(h.ledger.transfersTo(WALLET_A).length, 4, 'exactly one transaction per payout');
      assert.ok(log.every((step) => step.startsWith(`${payer} `)));
    });

    it('make the holder drop what it prepared once its lease is lost, mid-look, and the other take over', async (t) => {
      const h = await harness({ ...(open && { open }) });
      t.after(() => h.close());
      const log: string[] = [];
      let lose: (() => Promise<void>) | undefined;
      const a = await h.instance(loggedAs('a', h.ledger, log, () => (lose ? lose() : Promise.resolve())));
      const b = await h.instance(loggedAs('b', h.ledger, log));
      // While `a` prepares its first payout, its lock's session ends (a cut connection, its
      // database restarted) or, in one process, the engine is stopped.
      lose = async () => {
        lose = undefined;
        if (open) await endHolderOf(a.database, 'payouts:tron');
        else await a.engine.stop();
        await new Promise((resolve) => setTimeout(resolve, 200));
      };
      await h.merchant({ tron: WALLET_B });
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push(await h.request(10_000_000n + BigInt(i)));
      await h.caughtUp();
      await a.engine.pass();
      // The look under way prepared its transaction after the lease was gone: `b` may have chosen
      // the same coins meanwhile, so it is neither recorded nor sent; no other look starts.
      assert.deepEqual(log, [`a prepare ${ids[0]}`]);
      assert.deepEqual((await h.settlement(ids[0]!))!.preparedHashes, [], 'nothing recorded');
      await until(async () => {
        await b.engine.pass();
        return log.filter((step) => step.startsWith('b prepare')).length === 3;
      }, 10_000);
      await a.engine.pass(); // `b` holds the lease now
      await h.ledger.mine(1);
      await h.caughtUp();
      await Promise.all([a.engine.pass(), b.engine.pass()]);
      assert.ok(
        log.slice(1).every((step) => step.startsWith('b ')),
        `only b pays once a lost its lease:\n${log.join('\n')}`,
      );
      for (const id of ids) assert.equal((await h.settlement(id))!.status, 'completed');
      assert.equal(h.ledger.transfersTo(WALLET_B).length, 3, 'exactly one transaction per payout');

      // And back: `b` stops, `a` takes the lease again.
      await b.engine.stop();
      const fourth = await h.request(40_000_000n);
      await h.caughtUp();
      await a.engine.pass();
      assert.ok(log.includes(`a prepare ${fourth}`), log.join('\n'));
    });
  });
}
