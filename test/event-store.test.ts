import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { SqlEventStore } from '../adapters/event-store/sql.ts';
import { openPglite } from '../adapters/sql/database.ts';
import { eventStoreConformance } from './support/event-store-conformance.ts';
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
