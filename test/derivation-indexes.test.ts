// Derivation indexes handed out in blocks: unique across processes sharing a
// store (several DerivationIndexes on one store, many callers each), a
// restart's new block never reuses the old one's unused indexes, and blocks
// never meet the indexes earlier versions reserved one by one.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { SqlEventStore } from '../adapters/event-store/sql.ts';
import { openPglite } from '../adapters/sql/database.ts';
import { BLOCK_BASE, BLOCK_SIZE, blockStart, DerivationIndexes } from '../commands/derivation-indexes.ts';
import { freshPostgres } from './support/postgres.ts';

function derivationIndexesOn(label: string, open: () => Promise<{ store: EventStore; close(): Promise<void> }>) {
  describe(`derivation indexes on ${label}`, () => {
    it('never hands out one index twice, across processes and concurrent callers', async () => {
      const { store, close } = await open();
      try {
        const processes = [new DerivationIndexes(store), new DerivationIndexes(store), new DerivationIndexes(store)];
        const taken = await Promise.all(Array.from({ length: 600 }, (_, i) => processes[i % processes.length]!.next()));
        assert.equal(new Set(taken).size, taken.length, 'no index twice');
        assert.ok(
          taken.every((index) => index >= BLOCK_BASE),
          'apart from the one-by-one indexes below 2^30',
        );
        // Each process drew from whole blocks of its own.
        const blocks = new Set(taken.map((index) => Math.floor((index - BLOCK_BASE) / BLOCK_SIZE)));
        assert.ok(
          blocks.size >= Math.ceil(600 / BLOCK_SIZE) && blocks.size <= Math.ceil(600 / BLOCK_SIZE) + processes.length,
        );
      } finally {
        await close();
      }
    });

    it("gives a restarted process a new block: the old one's unused indexes are a gap, never reused", async () => {
      const { store, close } = await open();
      try {
        const before = new DerivationIndexes(store);
        const first = await before.next();
        const block = (first - BLOCK_BASE) / BLOCK_SIZE;
        assert.ok(Number.isInteger(block), 'a block starts on its boundary');
        assert.equal(first, blockStart(block));
        assert.equal(await before.next(), first + 1);
        const restarted = new DerivationIndexes(store); // the same store, a new process
        assert.equal(await restarted.next(), blockStart(block + 1));
      } finally {
        await close();
      }
    });
  });
}

derivationIndexesOn('the memory store', async () => ({ store: new MemoryEventStore(), close: async () => undefined }));
derivationIndexesOn('PGlite', async () => {
  const database = await openPglite('memory://');
  const store = await SqlEventStore.open(database);
  return { store, close: () => database.close() };
});

const postgres = await freshPostgres();
if (postgres) {
  derivationIndexesOn('PostgreSQL', async () => {
    const database = await postgres.open();
    return { store: await SqlEventStore.open(database), close: () => database.close() };
  });
  after(() => postgres.drop());
}
