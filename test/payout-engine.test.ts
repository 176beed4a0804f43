// The payout engine over its own work queue, with settlement as its kind,
// on the sandbox ledger: what it pays, to whom, and that nothing stuck holds
// back the rest. No read model is projected here at all: the engine must not
// need one.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, it } from 'node:test';
import type { ChainAdapter, OutgoingTransfer } from '../adapters/chains/port.ts';
import { SandboxLedger } from '../adapters/chains/sandbox/ledger.ts';
import { SqlEventStore } from '../adapters/event-store/sql.ts';
import { openPglite, type SqlDatabase } from '../adapters/sql/database.ts';
import { handleCommand, loadState } from '../commands/handle.ts';
import { PayoutEngine, migratePayoutQueue, payoutQueueProjector } from '../commands/payouts.ts';
import { SettlementPayouts, settlementManager } from '../commands/settlements.ts';
import type { ChainName } from '../domain/catalogue.ts';
import { merchantDecider, merchantStream } from '../domain/merchant.ts';
import { settlementDecider, settlementIdOf, settlementStreamName } from '../domain/settlement.ts';
import { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { readModelMigrations } from '../projections/schema.ts';

const WALLET_A = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';
const WALLET_B = 'TJRabPrwbZy45sbavfcjinPJC18kjpRTv8';

async function harness(options: { chain?: (ledger: SandboxLedger) => ChainAdapter } = {}) {
  // The business clock never runs behind the wall clock (the sandbox's only moves forward), and the
  // queue takes an event's recording time as "due now".
  let ahead = 0;
  const clock = { now: () => new Date(Date.now() + ahead) };
  const database: SqlDatabase = await openPglite('memory://');
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
  const engine = new PayoutEngine(database, [new SettlementPayouts(deps)], ['tron'], clock, {
    batch: 100,
    onError: (error) => console.error('payout look failed', error),
  });

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
  const settlement = (id: string) => loadState(store, settlementDecider, settlementStreamName(id));
  /** The queue as the log says, then one pass of the engine. */
  const pass = async () => {
    await projections.caughtUp();
    return engine.pass();
  };
  const later = (ms: number) => void (ahead += ms);
  const close = async () => {
    await projections.stop();
    await store.close();
    await database.close();
  };
  return { ledger, merchant, setWallets, request, settlement, pass, later, close };
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
