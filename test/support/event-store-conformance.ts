// One conformance suite for every event-store adapter: each adapter's test
// file calls it with a factory for a fresh, empty store.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import {
  ConcurrencyError,
  type EventStore,
  type NewEvent,
  type RecordedEvent,
} from '../../adapters/event-store/port.ts';

export interface StoreUnderTest {
  store: EventStore;
  dispose(): Promise<void>;
}

const event = (type = 'Happened', data: unknown = { n: 1 }): NewEvent => ({ id: randomUUID(), type, data });
const stream = () => `test-${randomUUID()}`;

/** Waits until `condition` holds, polling; fails the test after `ms`. */
async function eventually(condition: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

export function eventStoreConformance(name: string, open: () => Promise<StoreUnderTest>): void {
  describe(`event store conformance: ${name}`, () => {
    let subject: StoreUnderTest;
    let store: EventStore;
    before(async () => {
      subject = await open();
      store = subject.store;
    });
    after(async () => subject.dispose());

    it('appends to a new stream with no_stream and reads it back in order', async () => {
      assert.equal(
        await store.headPosition(),
        await lastPosition(store),
        'the head of a store at rest (undefined when empty)',
      );
      const id = stream();
      const events = [event('A', { a: 1 }), event('B', { b: 'two', nested: { ok: true } })];
      const result = await store.append(id, events, 'no_stream');
      assert.equal(result.nextRevision, 1);
      assert.equal(await store.headPosition(), result.position);
      assert.equal(result.written, true);
      const read = await store.readStream(id);
      assert.deepEqual(
        read.map((e) => [e.id, e.type, e.revision, e.streamId, e.data]),
        [
          [events[0]!.id, 'A', 0, id, { a: 1 }],
          [events[1]!.id, 'B', 1, id, { b: 'two', nested: { ok: true } }],
        ],
      );
      assert.ok(read[0]!.recordedAt instanceof Date);
      assert.equal(result.position, read[1]!.position);
    });

    it('refuses no_stream on an existing stream with a ConcurrencyError', async () => {
      const id = stream();
      await store.append(id, [event()], 'no_stream');
      await assert.rejects(store.append(id, [event()], 'no_stream'), (error: unknown) => {
        assert.ok(error instanceof ConcurrencyError);
        assert.match(error.message, /expected no stream, found revision 0/);
        return true;
      });
    });

    it('checks an exact expected revision', async () => {
      const id = stream();
      await store.append(id, [event(), event()], 'no_stream');
      await assert.rejects(store.append(id, [event()], 0), ConcurrencyError);
      await assert.rejects(store.append(id, [event()], 2), ConcurrencyError);
      const ok = await store.append(id, [event()], 1);
      assert.equal(ok.nextRevision, 2);
      await assert.rejects(store.append(stream(), [event()], 0), /found no stream/);
    });

    it('checks stream_exists and accepts anything with any', async () => {
      const id = stream();
      await assert.rejects(store.append(id, [event()], 'stream_exists'), ConcurrencyError);
      assert.equal((await store.append(id, [event()], 'any')).nextRevision, 0);
      assert.equal((await store.append(id, [event()], 'stream_exists')).nextRevision, 1);
      assert.equal((await store.append(id, [event()], 'any')).nextRevision, 2);
    });

    it('does not store an event id twice in a stream, even with a stale expected revision', async () => {
      const id = stream();
      const first = event();
      await store.append(id, [first], 'no_stream');
      const repeat = await store.append(id, [first], 'no_stream');
      assert.equal(repeat.written, false);
      assert.equal(repeat.nextRevision, 0);
      const second = event();
      await store.append(id, [first, second], 'any');
      assert.deepEqual(
        (await store.readStream(id)).map((e) => e.id),
        [first.id, second.id],
      );
    });

    it('does not store an event id twice when the repeat comes at the current revision, after other events', async () => {
      // A process manager's replayed step, its event id derived from the event that caused it, decided again
      // on a stream that has moved on since (refund-saga-replay: the reservation after its release).
      const id = stream();
      const first = event();
      await store.append(id, [first], 'no_stream');
      await store.append(id, [event()], 0);
      const repeat = await store.append(id, [first], 1);
      assert.equal(repeat.written, false);
      const third = event();
      assert.equal((await store.append(id, [first, third], 1)).nextRevision, 2);
      assert.equal((await store.readStream(id)).filter((e) => e.id === first.id).length, 1);
    });

    it('reads a stream from a revision, and an unknown stream as empty', async () => {
      const id = stream();
      assert.equal(await store.lastRevision(id), -1);
      await store.append(id, [event('A'), event('B'), event('C')], 'no_stream');
      assert.equal(await store.lastRevision(id), 2);
      assert.deepEqual(
        (await store.readStream(id, 1)).map((e) => e.type),
        ['B', 'C'],
      );
      assert.deepEqual(await store.readStream(stream()), []);
    });

    it('serialises concurrent appends with any to one stream without losing one', async () => {
      const id = stream();
      await Promise.all(Array.from({ length: 20 }, () => store.append(id, [event()], 'any')));
      const read = await store.readStream(id);
      assert.deepEqual(
        read.map((e) => e.revision),
        Array.from({ length: 20 }, (_, i) => i),
      );
    });

    it('lets exactly one of two racing no_stream appends win', async () => {
      const id = stream();
      const results = await Promise.allSettled([
        store.append(id, [event()], 'no_stream'),
        store.append(id, [event()], 'no_stream'),
      ]);
      assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
      const failure = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      assert.ok(failure.reason instanceof ConcurrencyError);
    });

    it('reads all from a position in global order, with comparable positions', async () => {
      const start = await lastPosition(store);
      const a = stream();
      const b = stream();
      await store.append(a, [event('A1')], 'any');
      await store.append(b, [event('B1'), event('B2')], 'any');
      await store.append(a, [event('A2')], 'any');
      const all = await store.readAll(start, 100);
      assert.deepEqual(
        all.map((e) => e.type),
        ['A1', 'B1', 'B2', 'A2'],
      );
      for (let i = 1; i < all.length; i++) {
        assert.ok(store.comparePositions(all[i - 1]!.position, all[i]!.position) < 0);
      }
      assert.equal(store.comparePositions(all[0]!.position, all[0]!.position), 0);
      assert.deepEqual(
        (await store.readAll(all[1]!.position, 2)).map((e) => e.type),
        ['B2', 'A2'],
      );
      assert.equal(await store.countAfter(start, 100), 4);
      assert.equal(await store.countAfter(start, 3), 3);
      assert.equal(await store.countAfter(all[3]!.position, 100), 0);
      assert.equal(await store.headPosition(), all[3]!.position);
    });

    it('delivers past and new events to a subscriber from a checkpoint', async () => {
      const start = await lastPosition(store);
      const id = stream();
      await store.append(id, [event('Before')], 'no_stream');
      const seen: RecordedEvent[] = [];
      const subscription = store.subscribe({ after: start, handler: (e) => void seen.push(e) });
      try {
        await eventually(() => seen.length === 1);
        await store.append(id, [event('After1'), event('After2')], 0);
        await eventually(() => seen.length === 3);
        assert.deepEqual(
          seen.map((e) => e.type),
          ['Before', 'After1', 'After2'],
        );
      } finally {
        await subscription.stop();
      }
    });

    it('redelivers an event whose handler failed, and nothing after it first', async () => {
      const start = await lastPosition(store);
      await store.append(stream(), [event('X'), event('Y')], 'no_stream');
      const seen: string[] = [];
      let failures = 0;
      const subscription = store.subscribe({
        after: start,
        handler: (e) => {
          if (e.type === 'X' && failures === 0) {
            failures++;
            throw new Error('handler failed once');
          }
          seen.push(e.type);
        },
      });
      try {
        await eventually(() => seen.length === 2);
        assert.deepEqual(seen, ['X', 'Y']);
      } finally {
        await subscription.stop();
      }
    });

    it('never skips the event of a slow transaction that began before a fast one', async () => {
      const start = await lastPosition(store);
      const seen: string[] = [];
      const subscription = store.subscribe({ after: start, handler: (e) => void seen.push(e.type) });
      try {
        let release!: () => void;
        const gate = new Promise<void>((r) => (release = r));
        let slowWritten!: () => void;
        const slowHasWritten = new Promise<void>((r) => (slowWritten = r));
        const slow = store.append(stream(), [event('Slow')], 'no_stream', {
          beforeCommit: async () => {
            slowWritten();
            await gate;
          },
        });
        await slowHasWritten;
        // On PostgreSQL the fast one commits now, while the slow one is open;
        // an embedded store with one connection queues it behind the slow one.
        const fast = store.append(stream(), [event('Fast')], 'no_stream');
        const committedFirst = await Promise.race([fast, new Promise<undefined>((r) => setTimeout(r, 300))]);
        if (committedFirst) {
          // readAll holds it back behind the slow one; the head does not.
          assert.equal(await store.headPosition(), committedFirst.position);
        }
        await new Promise((r) => setTimeout(r, 100)); // let the subscriber poll in between
        release();
        await Promise.all([slow, fast]);
        await eventually(() => seen.length >= 2);
        await new Promise((r) => setTimeout(r, 50));
        assert.deepEqual([...seen].sort(), ['Fast', 'Slow']);
        const all = await store.readAll(start, 10);
        assert.deepEqual(
          seen,
          all.map((e) => e.type),
        );
      } finally {
        await subscription.stop();
      }
    });

    it('8 concurrent writers x 500 events reach a live subscriber exactly once, in order', async () => {
      const start = await lastPosition(store);
      const seen: RecordedEvent[] = [];
      const subscription = store.subscribe({ after: start, handler: (e) => void seen.push(e) });
      try {
        const writers = Array.from({ length: 8 }, async (_, w) => {
          const id = stream();
          for (let i = 0; i < 500; i++) {
            await store.append(id, [event('Written', { w, i })], i === 0 ? 'no_stream' : i - 1);
          }
        });
        await Promise.all(writers);
        await eventually(() => seen.length >= 4000, 60_000);
        await new Promise((r) => setTimeout(r, 100));
        assert.equal(seen.length, 4000);
        assert.equal(new Set(seen.map((e) => e.id)).size, 4000);
        for (let i = 1; i < seen.length; i++) {
          assert.ok(store.comparePositions(seen[i - 1]!.position, seen[i]!.position) < 0, `out of order at ${i}`);
        }
        const perWriter = new Map<number, number[]>();
        for (const e of seen) {
          const { w, i } = e.data as { w: number; i: number };
          perWriter.set(w, [...(perWriter.get(w) ?? []), i]);
        }
        for (const indexes of perWriter.values()) {
          assert.deepEqual(
            indexes,
            Array.from({ length: 500 }, (_, i) => i),
          );
        }
        const all = [];
        let position = start;
        for (;;) {
          const batch = await store.readAll(position, 1000);
          if (batch.length === 0) break;
          all.push(...batch);
          position = batch.at(-1)!.position;
        }
        assert.deepEqual(
          seen.map((e) => e.id),
          all.map((e) => e.id),
        );
      } finally {
        await subscription.stop();
      }
    });
  });
}

async function lastPosition(store: EventStore): Promise<string | undefined> {
  let position: string | undefined;
  for (;;) {
    const batch = await store.readAll(position, 1000);
    if (batch.length === 0) return position;
    position = batch.at(-1)!.position;
  }
}
