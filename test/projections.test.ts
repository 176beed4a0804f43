// The projection engine on PGlite and PostgreSQL: checkpoints, rebuild from
// zero, read-after-write, and one active instance across processes.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { sql } from 'kysely';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { SqlEventStore } from '../adapters/event-store/sql.ts';
import { openPglite, type SqlDatabase } from '../adapters/sql/database.ts';
import { merchantCommands } from '../commands/merchants.ts';
import { StreamFolds } from '../projections/batch.ts';
import { CheckpointMovedError, ProjectionEngine } from '../adapters/event-store/followers.ts';
import { invoiceStatus } from '../projections/invoice-queries.ts';
import { merchantsProjector } from '../projections/merchants.ts';
import { invoicesProjector } from '../projections/invoices.ts';
import { handleCommands } from '../commands/handle.ts';
import { invoiceDecider, invoiceStreamName } from '../domain/invoice.ts';
import { readModelMigrations } from '../projections/schema.ts';
import { settlementsProjector } from '../projections/settlements.ts';
import { liveSideBySide, paidInvoiceLife } from './support/paid-invoice-life.ts';
import { tableRows } from './support/rebuild.ts';
import { freshPostgres } from './support/postgres.ts';

async function dump(database: SqlDatabase) {
  const merchants = await database.db.selectFrom('merchants').selectAll().orderBy('id').execute();
  const keys = await database.db.selectFrom('api_keys').selectAll().orderBy('id').execute();
  return { merchants, keys };
}

function engineSuite(
  name: string,
  open: () => Promise<{ database: SqlDatabase; reopen?: () => Promise<SqlDatabase>; dispose(): Promise<void> }>,
) {
  describe(`projection engine on ${name}`, () => {
    let subject: Awaited<ReturnType<typeof open>>;
    let store: SqlEventStore;
    let engine: ProjectionEngine;
    before(async () => {
      subject = await open();
      store = await SqlEventStore.open(subject.database);
      await ProjectionEngine.migrate(subject.database, readModelMigrations);
      engine = new ProjectionEngine(subject.database, store, [merchantsProjector], { pollMs: 200 });
      engine.start();
    });
    after(async () => {
      await engine.stop();
      await store.close();
      await subject.dispose();
    });

    it('shows a write once waitFor resolves, and rebuilds the same rows from zero', async () => {
      const commands = merchantCommands(store);
      let last: string | undefined;
      for (let i = 0; i < 20; i++) {
        const m = await commands.register({
          name: `M${i}`,
          tier: i % 2 ? 'pro' : 'free',
          webhookUrl: null,
          settlementWallets: { tron: `T${i}` },
        });
        await commands.update(m.value.id, { status: 'suspended' });
        const key = await commands.issueApiKey(m.value.id, {
          name: 'k',
          permissions: ['invoices:read'],
          expiresAt: null,
        });
        if (i % 3 === 0) last = (await commands.revokeApiKey(key.value.record.id)).position;
        else last = key.position;
      }
      await engine.waitFor(last!);
      const before = await dump(subject.database);
      assert.equal(before.merchants.length, 20);
      assert.equal(before.keys.length, 20);
      assert.equal(before.keys.filter((k: any) => k.revoked_at).length, 7);
      assert.ok(before.merchants.every((m: any) => m.status === 'suspended'));

      await engine.stop();
      const rebuilt = await engine.rebuild();
      assert.ok(rebuilt.events >= 20 * 3);
      assert.deepEqual(await dump(subject.database), before);
      engine.start();
    });

    it('answers a named prepared query again and again, with another value of its parameter each time', async () => {
      const commands = merchantCommands(store);
      const made = [];
      for (const name of ['First', 'Second', 'Third']) {
        made.push(await commands.register({ name, tier: 'free', webhookUrl: null, settlementWallets: {} }));
      }
      await engine.waitFor(made.at(-1)!.position!);
      const db = subject.database.db;
      // A constant parameter before the prepared one: each call binds only its own.
      const nameOf = (id: string) =>
        subject.database.prepared(
          'test-merchant-name',
          (merchantId) =>
            db.selectFrom('merchants').select('name').where('name', '!=', '').where('id', '=', merchantId),
          id,
        );
      // More calls than the pool has connections at once, so connections that prepared it and ones that did not both answer.
      const names = await Promise.all([...made, ...made, ...made, ...made].map((m) => nameOf(m.value.id)));
      assert.deepEqual(
        names.map((rows) => rows.map((r) => r.name)),
        [0, 1, 2, 3].flatMap(() => [['First'], ['Second'], ['Third']]),
      );
      assert.deepEqual(await nameOf(randomUUID()), []);
      await assert.rejects(
        subject.database.prepared('test-no-parameter', () => db.selectFrom('merchants').select('name'), 'x'),
        /must use its parameter exactly once/,
      );
    });

    it('answers the prepared status read after another instance adds a column to invoices', async () => {
      const unknown = () =>
        Promise.all(Array.from({ length: 12 }, () => invoiceStatus(subject.database, randomUUID())));
      assert.deepEqual(await unknown(), Array(12).fill(undefined)); // prepared on every connection of the pool
      await sql`alter table invoices add column added_by_a_newer_version text`.execute(subject.database.db);
      assert.deepEqual(await unknown(), Array(12).fill(undefined));
    });

    it('reports its lag in events and milliseconds', async () => {
      await engine.stop();
      const commands = merchantCommands(store);
      for (let i = 0; i < 3; i++)
        await commands.register({ name: `Lag${i}`, tier: 'free', webhookUrl: null, settlementWallets: {} });
      await new Promise((r) => setTimeout(r, 20));
      const [lagging] = await engine.status();
      assert.equal(lagging!.eventsBehind, 3);
      assert.ok(lagging!.msBehind >= 20);
      engine.start();
      const { position } = await commands.register({
        name: 'Last',
        tier: 'free',
        webhookUrl: null,
        settlementWallets: {},
      });
      await engine.waitFor(position!);
      const [caughtUp] = await engine.status();
      assert.equal(caughtUp!.eventsBehind, 0);
      assert.equal(caughtUp!.msBehind, 0);
    });

    it('refuses to rebuild a projection it does not know', async () => {
      await assert.rejects(engine.rebuild(['nope']), /unknown projection: nope/);
    });

    it('refuses to rebuild a projection while an instance projects it, naming who', async () => {
      // `engine` runs: it holds the merchants projector's lock, and keeps its rows.
      const rowsBefore = await dump(subject.database);
      const rebuilding = new ProjectionEngine(subject.database, store, [merchantsProjector]);
      await assert.rejects(
        rebuilding.rebuild(),
        /^Error: projection merchants is being projected by (this process \(\d+\)|.+ \(PostgreSQL backend \d+( from [^)]+)?\)): stop that instance first$/,
      );
      assert.deepEqual(await dump(subject.database), rowsBefore);
    });

    if (name === 'postgresql') {
      it('runs one active instance of a projector across processes; the other takes over when it stops', async () => {
        const second = await subject.reopen!();
        const secondStore = await SqlEventStore.open(second);
        const standby = new ProjectionEngine(second, secondStore, [merchantsProjector], { pollMs: 100 });
        standby.start();
        try {
          await new Promise((r) => setTimeout(r, 300));
          assert.equal((await standby.status())[0]!.role, 'standby');
          assert.equal((await engine.status())[0]!.role, 'active');
          await engine.stop();
          const { position } = await merchantCommands(secondStore).register({
            name: 'Taken over',
            tier: 'free',
            webhookUrl: null,
            settlementWallets: {},
          });
          await standby.waitFor(position!, 5000);
          assert.equal((await standby.status())[0]!.role, 'active');
          const row = await second.db
            .selectFrom('merchants')
            .select('name')
            .where('name', '=', 'Taken over')
            .executeTakeFirst();
          assert.equal(row?.name, 'Taken over');
        } finally {
          await standby.stop();
          await secondStore.close();
          await second.close();
          engine.start();
        }
      });
    }
  });
}

engineSuite('pglite', async () => {
  const database = await openPglite('memory://');
  return { database, dispose: () => database.close() };
});

const postgres = await freshPostgres();
if (postgres) {
  engineSuite('postgresql', async () => {
    const database = await postgres.open();
    return {
      database,
      reopen: () => postgres.open(),
      async dispose() {
        await database.close();
        await postgres.drop();
      },
    };
  });
}

describe('projection checkpoints', () => {
  it('resume where they stopped after a restart of the engine', async () => {
    const database = await openPglite('memory://');
    const store = await SqlEventStore.open(database);
    await ProjectionEngine.migrate(database, readModelMigrations);
    let applied = 0;
    const counting: typeof merchantsProjector = {
      ...merchantsProjector,
      name: 'counting',
      applyBatch: async (trx, batch, prepared) => {
        applied += batch.length;
        await merchantsProjector.applyBatch!(trx, batch, prepared);
      },
    };
    const commands = merchantCommands(store);
    const first = new ProjectionEngine(database, store, [counting], { pollMs: 100 });
    first.start();
    const a = await commands.register({ name: 'A', tier: 'free', webhookUrl: null, settlementWallets: {} });
    await first.waitFor(a.position!);
    await first.stop();
    const b = await commands.register({ name: randomUUID(), tier: 'free', webhookUrl: null, settlementWallets: {} });
    const second = new ProjectionEngine(database, store, [counting], { pollMs: 100 });
    second.start();
    await second.waitFor(b.position!);
    await second.stop();
    assert.equal(applied, 2, 'each event applied once across the restart');
    await store.close();
    await database.close();
  });

  it("are waited for by name, a reactor's too; a name no consumer has is an error, not a wait for nothing", async () => {
    const database = await openPglite('memory://');
    const store = await SqlEventStore.open(database);
    await ProjectionEngine.migrate(database, readModelMigrations);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const reactor = { name: 'held-reactor', react: () => held };
    const engine = new ProjectionEngine(database, store, [merchantsProjector, reactor], { pollMs: 50 });
    engine.start();
    try {
      const a = await merchantCommands(store).register({
        name: 'A',
        tier: 'free',
        webhookUrl: null,
        settlementWallets: {},
      });
      await engine.waitFor(a.position!, 10_000, [merchantsProjector.name]);
      await assert.rejects(engine.waitFor(a.position!, 200, [reactor.name]), /did not reach/);
      release();
      await engine.waitFor(a.position!, 10_000, [reactor.name]);
      await assert.rejects(
        engine.waitFor(a.position!, 200, ['no-such-consumer']),
        /no consumer .* named no-such-consumer/,
      );
    } finally {
      release();
      await engine.stop();
      await store.close();
      await database.close();
    }
  });
});

describe('projection checkpoints moved by another instance', () => {
  it('are never moved back: the stale batch rolls back and the engine goes on from where the other left off', async () => {
    const database = await openPglite('memory://');
    const store = await SqlEventStore.open(database);
    await ProjectionEngine.migrate(database, readModelMigrations);
    await sql`create table probe (event_id text primary key)`.execute(database.db);
    const append = async (n: number) =>
      (await store.append(`probe-${randomUUID()}`, [{ id: randomUUID(), type: `Probe${n}`, data: {} }], 'no_stream'))
        .position!;
    await append(1);
    const second = await append(2);
    let interfered = false;
    const probe = {
      name: 'probe',
      tables: ['probe'],
      // Between this instance's read and its commit, "another instance" has
      // already projected the first two events and moved the checkpoint past them.
      async prepare() {
        if (!interfered) {
          interfered = true;
          await database.db
            .insertInto('projection_checkpoints' as any)
            .values({ name: 'probe', position: second, updated_at: new Date() } as any)
            .execute();
        }
      },
      async apply(trx: any, event: { id: string }) {
        await trx.insertInto('probe').values({ event_id: event.id }).execute();
      },
    };
    const errors: unknown[] = [];
    const engine = new ProjectionEngine(database, store, [probe], { pollMs: 50, onError: (_, e) => errors.push(e) });
    engine.start();
    try {
      const third = await append(3);
      await engine.waitFor(third);
      assert.equal(await engine.checkpointOf('probe'), third);
      const rows = await database.db
        .selectFrom('probe' as any)
        .select('event_id')
        .execute();
      assert.equal(rows.length, 1, 'only the event after the other instance’s checkpoint was applied here');
      assert.ok(errors.some((e) => e instanceof CheckpointMovedError));
    } finally {
      await engine.stop();
      await store.close();
      await database.close();
    }
  });
});

describe('projection batches', () => {
  it('never end inside an append: a full batch takes the rest of its last stream’s append', async () => {
    const database = await openPglite('memory://');
    const store = await SqlEventStore.open(database);
    await ProjectionEngine.migrate(database, readModelMigrations);
    const append = async (streamId: string, types: string[]) =>
      (
        await store.append(
          streamId,
          types.map((type) => ({ id: randomUUID(), type, data: {} })),
          'no_stream',
        )
      ).position!;
    await append('a', ['A1', 'A2']);
    await append('b', ['B1', 'B2']); // a batch of three would end after B1
    const last = await append('c', ['C1']);
    const batches: string[][] = [];
    const recording = {
      name: 'recording',
      tables: [],
      async prepare(batch: readonly { type: string }[]) {
        batches.push(batch.map((e) => e.type));
      },
      async apply() {},
    };
    const engine = new ProjectionEngine(database, store, [recording], { batchSize: 3, pollMs: 50 });
    engine.start();
    try {
      await engine.waitFor(last);
      assert.deepEqual(batches, [['A1', 'A2', 'B1', 'B2'], ['C1']]);
    } finally {
      await engine.stop();
      await store.close();
      await database.close();
    }
  });
});

describe('the invoices projector', () => {
  it('writes every column as the events hold it: JSON, text, amounts past 2^53, millisecond times', async () => {
    const database = await openPglite('memory://');
    const store = await SqlEventStore.open(database);
    await ProjectionEngine.migrate(database, readModelMigrations);
    const engine = new ProjectionEngine(database, store, [invoicesProjector], { pollMs: 50 });
    engine.start();
    try {
      const id = randomUUID();
      const metadata = { order: { id: 'A-1', lines: [1, 'two', null, true] }, quote: 'it\'s "quoted" \\ ünïcödé' };
      const { events, position } = await handleCommands(
        store,
        invoiceDecider,
        invoiceStreamName(id),
        [
          {
            type: 'CreateInvoice',
            id,
            merchantId: randomUUID(),
            amount: '123456.78',
            currency: 'USD',
            description: 'Ünïcödé, "quotes" and a \\ backslash',
            expiresAt: '2026-11-25T10:15:30.123Z',
            webhookUrl: null,
            metadata,
            createdAt: '2026-11-25T10:00:00.007Z',
          },
          {
            type: 'AssignAddress',
            chain: 'ethereum',
            token: 'ETH',
            tokenDecimals: 18,
            address: '0x52908400098527886E0F7030069857D2E4169EE7',
            derivationIndex: 7,
            rate: '0.00000123',
            quotedAt: '2026-11-25T10:00:00.007Z',
            rateValidUntil: '2026-11-25T10:05:00.999Z',
          },
        ],
        { newStream: true },
      );
      await engine.waitFor(position!);
      const invoice = await database.db
        .selectFrom('invoices')
        .selectAll()
        .where('id', '=', id)
        .executeTakeFirstOrThrow();
      assert.deepEqual(invoice.metadata, metadata);
      assert.equal(invoice.description, 'Ünïcödé, "quotes" and a \\ backslash');
      assert.equal(invoice.amount, '123456.78');
      assert.equal(invoice.mismatch_payment, null);
      assert.equal(invoice.cancelled, false);
      assert.equal(new Date(invoice.expires_at).toISOString(), '2026-11-25T10:15:30.123Z');
      assert.equal(new Date(invoice.created_at).toISOString(), '2026-11-25T10:00:00.007Z');
      const assigned = events.find((e) => e.type === 'AddressAssigned')!.data as { cryptoAmount: string };
      assert.ok(BigInt(assigned.cryptoAmount) > 2n ** 53n);
      const address = await database.db
        .selectFrom('invoice_addresses')
        .selectAll()
        .where('invoice_id', '=', id)
        .executeTakeFirstOrThrow();
      assert.equal(String(address.crypto_amount), assigned.cryptoAmount);
      assert.equal(invoice.crypto_amount, '100371365853.65853659');
      assert.equal(address.derivation_index, 7);
      assert.equal(new Date(address.rate_valid_until).toISOString(), '2026-11-25T10:05:00.999Z');
    } finally {
      await engine.stop();
      await store.close();
      await database.close();
    }
  });
});

describe('read models of paid invoices', () => {
  it('are the same rows live and rebuilt in batches of any size: payments reorged and mined again, settlements retried', async () => {
    const database = await openPglite('memory://');
    const store = await SqlEventStore.open(database);
    await ProjectionEngine.migrate(database, readModelMigrations);
    const projectors = [invoicesProjector, settlementsProjector];
    const live = new ProjectionEngine(database, store, projectors, { pollMs: 50 });
    live.start();
    const tables = projectors.flatMap((p) => p.tables);
    const snapshot = () => tableRows(database.db, tables);
    try {
      const merchantId = randomUUID();
      const lives = Array.from({ length: 12 }, (_, i) =>
        paidInvoiceLife(store, merchantId, i, {
          confirmations: 4,
          ...(i % 3 === 1 && { reorgAt: 2 }),
          ...(i % 4 === 2 && { settlementFailsOnce: true }),
        }),
      );
      await liveSideBySide(lives, 5);
      await live.caughtUp();
      await live.stop();
      const projected = await snapshot();
      const payments = await database.db.selectFrom('payments').selectAll().execute();
      assert.equal(payments.length, 12);
      assert.ok(payments.every((p) => p.status === 'confirmed' && p.confirmations === 4 && p.confirmed_at !== null));
      // Mined again after the reorg: the block of the second detection.
      assert.equal(payments.filter((p) => p.block_number % 10 === 1).length, 4);
      const settlements = await database.db.selectFrom('settlements').selectAll().execute();
      assert.ok(settlements.every((s) => s.status === 'completed' && s.amount === '8.900000'));
      assert.deepEqual(settlements.map((s) => s.attempt).sort(), [...Array(9).fill(1), 2, 2, 2]);
      const invoices = await database.db.selectFrom('invoices').select('settled_amount').execute();
      assert.ok(invoices.every((i) => i.settled_amount !== null));
      for (const batchSize of [1, 7, 500]) {
        const rebuild = new ProjectionEngine(database, store, projectors, { batchSize });
        await rebuild.rebuild();
        assert.deepEqual(await snapshot(), projected, `rebuilt in batches of ${batchSize}`);
      }
    } finally {
      await live.stop();
      await store.close();
      await database.close();
    }
  });
});

describe('stream folds remembered between batches', () => {
  // A counter stream: each event adds its `n`; the fold is the sum and how many were folded.
  const counter = {
    initialState: { sum: 0, folded: 0 },
    evolve: (state: { sum: number; folded: number }, event: { data: { n: number } }) => ({
      sum: state.sum + event.data.n,
      folded: state.folded + 1,
    }),
  };
  const setUp = async (scale = 1) => {
    const store = new MemoryEventStore();
    const { position } = await store.append(
      'counter-a',
      [1, 2, 3, 4, 5, 6].map((n) => ({ id: randomUUID(), type: 'Counted', data: { n: n * scale } })),
      'no_stream',
    );
    const log = await store.readAll(undefined, 100);
    assert.equal(log.at(-1)!.position, position);
    let reads = 0;
    const readStream = store.readStream.bind(store);
    store.readStream = (streamId: string) => {
      reads++;
      return readStream(streamId);
    };
    return { store, log, reads: () => reads };
  };

  it('folds on from the state of the batch before, and reads the stream when batches skip or go back', async () => {
    const { store, log, reads } = await setUp();
    const folds = new StreamFolds((s) => s.startsWith('counter-'), counter, 10);
    const sumOf = async (from: number, to: number) =>
      (await folds.ofBatch(log.slice(from, to), store)).get('counter-a');
    assert.deepEqual(await sumOf(0, 2), { sum: 3, folded: 2 }); // begins the stream: no read
    assert.deepEqual(await sumOf(2, 3), { sum: 6, folded: 3 }); // on from the remembered state
    assert.equal(reads(), 0);
    assert.deepEqual(await sumOf(4, 5), { sum: 15, folded: 5 }); // revision 3 was never folded here
    assert.equal(reads(), 1);
    assert.deepEqual(await sumOf(3, 4), { sum: 10, folded: 4 }); // back: a batch replayed
    assert.equal(reads(), 2);
    assert.deepEqual(await sumOf(4, 6), { sum: 21, folded: 6 });
    assert.equal(reads(), 2);
  });

  it('forgets the least recently folded stream past its capacity, and keeps each store apart', async () => {
    const { store, log, reads } = await setUp();
    const folds = new StreamFolds((s) => s.startsWith('counter-'), counter, 1);
    await folds.ofBatch(log.slice(0, 3), store);
    const other = await store.append(
      'counter-b',
      [{ id: randomUUID(), type: 'Counted', data: { n: 100 } }],
      'no_stream',
    );
    const [b] = await store.readAll(log.at(-1)!.position, 10);
    assert.equal(b!.position, other.position);
    await folds.ofBatch([b!], store); // counter-a is forgotten
    assert.deepEqual((await folds.ofBatch(log.slice(3, 4), store)).get('counter-a'), { sum: 10, folded: 4 });
    assert.equal(reads(), 1);
    const elsewhere = await setUp(10); // the same stream name in another store
    assert.deepEqual((await folds.ofBatch(elsewhere.log.slice(4, 5), elsewhere.store)).get('counter-a'), {
      sum: 150,
      folded: 5,
    });
    assert.equal(elsewhere.reads(), 1);
  });
});
