// The chain watcher against a scripted chain: the ordering guarantees that no
// test node can stage on demand.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ChainAdapter, ChainBlock } from '../adapters/chains/port.ts';
import { systemClock } from '../adapters/clock.ts';
import { SqlEventStore } from '../adapters/event-store/sql.ts';
import { DepositKeyring, depositAddressesFromKeyring } from '../adapters/keys/derivation.ts';
import { FixedRateProvider } from '../adapters/rates/fixed.ts';
import { openPglite } from '../adapters/sql/database.ts';
import { projectors } from '../api/service.ts';
import { ChainWatcher } from '../commands/chain-watcher.ts';
import { invoiceCommands } from '../commands/invoices.ts';
import { merchantCommands } from '../commands/merchants.ts';
import { paymentCommands, paymentsToInvoices } from '../commands/payments.ts';
import { paymentStreamName } from '../domain/payment.ts';
import { ProjectionEngine } from '../projections/engine.ts';
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
    transactionStatus: async () => undefined,
  };
}

describe('chain watcher', () => {
  it('finds a payment to an address handed out before the block was read, though the read models have not shown it yet', async () => {
    const database = await openPglite('memory://');
    const store = await SqlEventStore.open(database);
    await ProjectionEngine.migrate(database, readModelMigrations);
    await ChainWatcher.migrate(database);
    const projections = new ProjectionEngine(database, store, [...projectors, paymentsToInvoices(store)], {
      pollMs: 50,
    });
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
