// The EventStoreDB adapter against faults of a server that speaks
// EventStoreDB's gRPC protocol (test/support/eventstoredb-server.ts), through
// the unmodified official client: each test names the defect of issue 32 it
// would catch.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { EventStoreDbStore, EventStoreUnavailableError, REPEAT_WINDOW } from '../adapters/event-store/eventstoredb.ts';
import type { NewEvent, RecordedEvent } from '../adapters/event-store/port.ts';
import { EsdbCluster } from './support/eventstoredb-server.ts';

const event = (type = 'Happened'): NewEvent => ({ id: randomUUID(), type, data: { n: 1 } });

/** Polls until `condition` holds; fails after `ms`. */
async function until(condition: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`not in time: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

async function withCluster(
  options: { nodes?: number; deadlineMs?: number; discover?: boolean },
  test: (cluster: EsdbCluster, store: EventStoreDbStore) => Promise<void>,
): Promise<void> {
  const cluster = await EsdbCluster.start({ nodes: options.nodes });
  const store = await EventStoreDbStore.open(cluster.url({ discover: options.discover }), {
    deadlineMs: options.deadlineMs ?? 2000,
  });
  try {
    await test(cluster, store);
  } finally {
    await store.close();
    cluster.stop();
  }
}

describe('EventStoreDB: a failed or hung features check (issue 32, item 1)', () => {
  for (const fault of [{ fail: grpc.status.INTERNAL }, { fail: grpc.status.UNKNOWN }, 'hang'] as const) {
    const name = fault === 'hang' ? 'hangs' : `answers ${grpc.status[fault.fail]}`;
    it(`a check that ${name} does not leave appends dead: the client is replaced, reads in between or not`, async () => {
      await withCluster({ deadlineMs: 300 }, async (cluster, store) => {
        const node = cluster.leader();
        node.faults.features = fault;
        const id = `features-${randomUUID()}`;
        for (let i = 0; i < 3; i++) {
          await assert.rejects(store.append(id, [event()], 'any'));
          assert.equal(await store.lastRevision(id), -1, 'reads still work, and say nothing of appends');
        }
        delete node.faults.features;
        const written = await store.append(id, [event()], 'any');
        assert.equal(written.nextRevision, 0);
        assert.ok(
          node.calls.some((call) => call.method === 'BatchAppend'),
          'the append reached the server once the check answered',
        );
      });
    });
  }
});

describe('EventStoreDB: deadlines that cancel the call (item 2, and item 6: stop)', () => {
  it('a read past its deadline is cancelled on the server, not left open', async () => {
    await withCluster({ deadlineMs: 300 }, async (cluster, store) => {
      const node = cluster.leader();
      node.faults.hangReads = true;
      await assert.rejects(store.readStream('hung'), EventStoreUnavailableError);
      await assert.rejects(store.readAll(undefined, 10), EventStoreUnavailableError);
      await until(() => node.openReads === 0, 'the server sees both reads cancelled');
      assert.equal(node.cancelledReads, 2);
    });
  });

  it(
    'stopping a subscription still waiting for its confirmation returns without waiting for the deadline',
    { timeout: 30_000 },
    async () => {
      // A deadline far past the test's own timeout: a stop that waited for it would fail the test.
      await withCluster({ deadlineMs: 120_000 }, async (cluster, store) => {
        const node = cluster.leader();
        node.faults.hangReads = true;
        const subscription = store.subscribe({ handler: () => undefined });
        await until(
          () => node.calls.some((call) => call.method === 'Subscribe'),
          'the subscription reached the server',
        );
        await subscription.stop();
      });
    },
  );
});

describe('EventStoreDB: the leader, and only the leader (item 3)', () => {
  it('after a failover, reads and appends move to the new leader; a lagging follower serves nothing', async () => {
    await withCluster({ nodes: 2, discover: true }, async (cluster, store) => {
      const [first, second] = cluster.nodes as [(typeof cluster.nodes)[0], (typeof cluster.nodes)[0]];
      const id = `failover-${randomUUID()}`;
      await store.append(id, [event('Before')], 'no_stream');
      cluster.failover(second);
      first.lag(); // the demoted node stops replicating
      const after = await store.append(id, [event('After')], 0);
      assert.equal(after.nextRevision, 1);
      assert.equal(await store.lastRevision(id), 1, 'not the stale revision of the demoted node');
      assert.deepEqual(
        (await store.readStream(id)).map((e) => e.type),
        ['Before', 'After'],
      );
      assert.equal(await store.headPosition(), after.position, 'a read-your-writes wait cannot pass early');
      const calls = cluster.nodes.flatMap((node) => node.calls).filter((call) => call.method !== 'GetSupportedMethods');
      assert.ok(calls.length > 0);
      assert.deepEqual(
        calls.filter((call) => !call.requiresLeader),
        [],
        'every read and append asks for the leader',
      );
    });
  });

  it('NotLeader from a node that is not the leader moves the client there (esdb:// to a follower)', async () => {
    const cluster = await EsdbCluster.start({ nodes: 2 });
    const store = await EventStoreDbStore.open(cluster.url({ node: cluster.nodes[1] }), { deadlineMs: 2000 });
    try {
      const id = `follower-${randomUUID()}`;
      await store.append(id, [event()], 'no_stream');
      assert.ok(cluster.nodes[1]!.calls.length > 0, 'the follower was asked first');
      assert.ok(
        cluster.nodes[0]!.calls.some((call) => call.method === 'BatchAppend'),
        'the leader wrote it',
      );
    } finally {
      await store.close();
      cluster.stop();
    }
  });
});

describe('EventStoreDB: reads no more than needed (item 4)', () => {
  it('headPosition reads one event, readAll(x, 1) a couple, not pages of 500', async () => {
    await withCluster({}, async (cluster, store) => {
      const node = cluster.leader();
      const id = `reads-${randomUUID()}`;
      const written = await store.append(
        id,
        Array.from({ length: 60 }, () => event()),
        'no_stream',
      );
      let before = node.eventsRead;
      assert.equal(await store.headPosition(), written.position);
      assert.ok(node.eventsRead - before <= 1, `headPosition read ${node.eventsRead - before} events`);
      before = node.eventsRead;
      const [firstEvent] = await store.readAll(undefined, 1);
      assert.equal(firstEvent!.streamId, id);
      assert.ok(node.eventsRead - before <= 4, `readAll(undefined, 1) read ${node.eventsRead - before} events`);
      before = node.eventsRead;
      assert.equal(await store.countAfter(firstEvent!.position, 5), 5);
      assert.ok(node.eventsRead - before <= 6, `countAfter(x, 5) read ${node.eventsRead - before} events`);
    });
  });

  it('`any` appends go to EventStoreDB as they are: no read first, no retry loop under contention', async () => {
    await withCluster({}, async (cluster, store) => {
      const node = cluster.leader();
      const id = `any-${randomUUID()}`;
      await Promise.all(Array.from({ length: 20 }, () => store.append(id, [event()], 'any')));
      assert.equal(node.calls.filter((call) => call.method === 'Read').length, 1, 'only the connection check read');
      assert.equal(node.calls.filter((call) => call.method === 'BatchAppend').length, 20, 'one write each');
      assert.equal(await store.lastRevision(id), 19);
    });
  });

  it('an exact-revision append reads only its repeat window of the stream, not the whole dedupe window', async () => {
    await withCluster({}, async (cluster, store) => {
      const node = cluster.leader();
      const id = `exact-${randomUUID()}`;
      await store.append(
        id,
        Array.from({ length: 200 }, () => event()),
        'no_stream',
      );
      const before = node.eventsRead;
      await store.append(id, [event()], 199);
      assert.equal(node.eventsRead - before, 1 + REPEAT_WINDOW, 'the batch and the window before it');
    });
  });
});

describe('EventStoreDB: faults the store rides out', () => {
  it('an append applied whose reply was lost is found by the retry, not written twice', async () => {
    await withCluster({}, async (cluster, store) => {
      const id = `lost-${randomUUID()}`;
      const first = event();
      cluster.leader().faults.loseAppendReplies = 1;
      await assert.rejects(store.append(id, [first], 'no_stream'), EventStoreUnavailableError);
      const retry = await store.append(id, [first], 'no_stream');
      assert.equal(retry.written, false);
      assert.deepEqual(
        (await store.readStream(id)).map((e) => e.id),
        [first.id],
      );
    });
  });

  it('a repeat of part of a batch with any is written only for its new events', async () => {
    await withCluster({}, async (_, store) => {
      const id = `partial-${randomUUID()}`;
      const [a, b, c] = [event(), event(), event()];
      await store.append(id, [a, b], 'no_stream');
      // EventStoreDB refuses a batch that repeats only some of its events (CorruptedIdempotency).
      const result = await store.append(id, [b, c], 'any');
      assert.equal(result.nextRevision, 2);
      assert.deepEqual(
        (await store.readStream(id)).map((e) => e.id),
        [a.id, b.id, c.id],
      );
    });
  });

  it('a dropped subscription starts again from its checkpoint: nothing skipped, nothing twice', async () => {
    await withCluster({}, async (cluster, store) => {
      const seen: RecordedEvent[] = [];
      const start = await store.headPosition();
      const subscription = store.subscribe({ after: start, handler: (e) => void seen.push(e) });
      try {
        const id = `drop-${randomUUID()}`;
        await store.append(id, [event('One')], 'no_stream');
        await until(() => seen.length === 1, 'the first event');
        cluster.leader().dropSubscriptions();
        await store.append(id, [event('Two')], 0);
        await until(() => seen.length >= 2, 'the event after the drop');
        await store.append(id, [event('Three')], 1);
        await until(() => seen.length >= 3, 'the next one');
        assert.deepEqual(
          seen.map((e) => e.type),
          ['One', 'Two', 'Three'],
        );
      } finally {
        await subscription.stop();
      }
    });
  });

  it("UNAVAILABLE, access denied and a deleted stream arrive as the store's own errors", async () => {
    await withCluster({}, async (cluster, store) => {
      const node = cluster.leader();
      node.faults.unavailable = 1;
      await assert.rejects(store.readStream('s'), EventStoreUnavailableError);
      node.faults.denyAccess = true;
      await assert.rejects(store.readStream('s'), /EVENTSTORE_URL's user may not do it/);
      node.faults.denyAccess = false;
      cluster.log.tombstone('gone');
      await assert.rejects(store.readStream('gone'), /stream gone was deleted/);
      await assert.rejects(store.append('gone', [event()], 'any'), /stream gone was deleted/);
    });
  });
});

describe('EventStoreDB over TLS', () => {
  it('connects with tls=true and a generated CA (tlsCAFile), and refuses a server its CA did not sign', async () => {
    const { execFileSync } = await import('node:child_process');
    const { mkdtemp, readFile, rm, writeFile } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const dir = await mkdtemp(join(tmpdir(), 'esdb-tls-'));
    // Arguments as one line of words, as they would be typed.
    const openssl = (line: string) => execFileSync('openssl', line.split(' '), { cwd: dir, stdio: 'ignore' });
    const newCa = (name: string) =>
      openssl(`req -x509 -newkey rsa:2048 -nodes -keyout ${name}.key -out ${name}.crt -days 1 -subj /CN=${name}`);
    try {
      // A CA, and a node certificate it signs for 127.0.0.1 (what gossip and the URL name).
      newCa('ca');
      openssl('req -newkey rsa:2048 -nodes -keyout node.key -out node.csr -subj /CN=eventstoredb-node');
      await writeFile(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
      openssl('x509 -req -in node.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out node.crt -days 1 -extfile san.ext');
      newCa('other');
      const credentials = grpc.ServerCredentials.createSsl(null, [
        { cert_chain: await readFile(join(dir, 'node.crt')), private_key: await readFile(join(dir, 'node.key')) },
      ]);
      const cluster = await EsdbCluster.start({ credentials });
      try {
        const url = cluster.url({ query: `tls=true&tlsCAFile=${join(dir, 'ca.crt')}` });
        const store = await EventStoreDbStore.open(url, { deadlineMs: 2000 });
        try {
          const id = `tls-${randomUUID()}`;
          await store.append(id, [event()], 'no_stream');
          assert.equal(await store.lastRevision(id), 0);
        } finally {
          await store.close();
        }
        await assert.rejects(
          EventStoreDbStore.open(cluster.url({ query: `tls=true&tlsCAFile=${join(dir, 'other.crt')}` }), {
            deadlineMs: 1000,
          }),
          /^Error: EVENTSTORE_URL: EventStoreDB did not answer/,
        );
      } finally {
        cluster.stop();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
