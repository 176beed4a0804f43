import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import pg from 'pg';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { NOTIFY_CHANNEL, SqlEventStore } from '../adapters/event-store/sql.ts';
import { openPglite } from '../adapters/sql/database.ts';
import { eventStoreConformance } from './support/event-store-conformance.ts';
import { eventually } from './support/merchant.ts';
import { freshPostgres } from './support/postgres.ts';

eventStoreConformance('memory', async () => {
  const store = new MemoryEventStore();
  return { store, dispose: () => store.close() };
});

eventStoreConformance('pglite', async () => {
  const database = await openPglite('memory://');
  const store = await SqlEventStore.open(database);
  return {
    store,
    async dispose() {
      await store.close();
      await database.close();
    },
  };
});

const postgres = await freshPostgres();
if (postgres) {
  eventStoreConformance('postgresql', async () => {
    const database = await postgres.open();
    const store = await SqlEventStore.open(database);
    return {
      store,
      async dispose() {
        await store.close();
        await database.close();
        await postgres.drop();
      },
    };
  });
}

const wakeUps = await freshPostgres();
if (wakeUps) {
  describe('append wake-ups on PostgreSQL', () => {
    it("wake this process's consumers once for its own append, and another process's by notification", async () => {
      const here = await wakeUps.open();
      // What this store's listener is handed, to replay a notification to it.
      let deliver: ((payload: string) => void) | undefined;
      const listen = here.listen.bind(here);
      here.listen = (channel, onNotify) => {
        deliver = onNotify;
        return listen(channel, onNotify);
      };
      const local = await SqlEventStore.open(here);
      const there = await wakeUps.open();
      const remote = await SqlEventStore.open(there);
      const watcher = new pg.Client({ connectionString: wakeUps.url });
      try {
        await watcher.connect();
        const payloads: string[] = [];
        watcher.on('notification', (message) => payloads.push(message.payload ?? ''));
        await watcher.query(`listen ${NOTIFY_CHANNEL}`);
        let wakes = 0;
        local.onAppended(() => wakes++);
        const event = () => ({ id: randomUUID(), type: 'Appended', data: {} });
        await local.append('wake-a', [event()], 'no_stream'); // a new stream's one statement
        await local.append('wake-a', [event()], 0); // the general path
        assert.equal(wakes, 2, 'each of its own appends wakes its consumers when it commits');
        const [own] = await eventually(
          async () => payloads,
          (seen) => seen.length === 2,
        );
        assert.equal(payloads[1], own, 'both notifications are signed by the store that appended');
        deliver!(own!); // its own notification coming back: no second wake-up
        assert.equal(wakes, 2);
        deliver!('another process'); // anyone else's wakes its consumers
        assert.equal(wakes, 3);
        await remote.append('wake-b', [event()], 'no_stream');
        await eventually(
          async () => wakes,
          (count) => count === 4,
        );
      } finally {
        await watcher.end();
        await Promise.all([local.close(), remote.close()]);
        await Promise.all([here.close(), there.close()]);
        await wakeUps.drop();
      }
    });
  });
}
