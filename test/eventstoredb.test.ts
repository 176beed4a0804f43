// The EventStoreDB adapter. No EventStoreDB server can run on this machine
// (no Docker; not in npm or Debian), so the shared conformance suite runs
// only when TEST_EVENTSTORE_URL names one, e.g.
//   TEST_EVENTSTORE_URL='esdb://127.0.0.1:2113?tls=false' npm test
// and says so when it does not. What needs no server is tested here always:
// connection strings, positions, the mapping of every error the client
// documents, and deadlines against a socket that never answers.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import {
  AccessDeniedError,
  MaxAppendSizeExceededError,
  StreamDeletedError,
  UnavailableError,
  WrongExpectedVersionError,
} from '@eventstore/db-client';
import {
  clientConnectionString,
  comparePositions,
  concurrencyError,
  connectionStringProblem,
  decodePosition,
  encodePosition,
  EventStoreDbStore,
  EventStoreUnavailableError,
  fromClientError,
} from '../adapters/event-store/eventstoredb.ts';
import { ConcurrencyError } from '../adapters/event-store/port.ts';
import { loadConfig } from '../api/config.ts';
import { eventStoreConformance } from './support/event-store-conformance.ts';
import { EsdbCluster } from './support/eventstoredb-server.ts';

const serverUrl = process.env.TEST_EVENTSTORE_URL;
if (serverUrl) {
  eventStoreConformance('eventstoredb', async () => {
    const store = await EventStoreDbStore.open(serverUrl);
    return { store, dispose: () => store.close() };
  });
} else {
  // No real server here: the suite runs through the unmodified client against
  // the test server that speaks EventStoreDB's gRPC protocol.
  eventStoreConformance('eventstoredb (gRPC protocol test server)', async () => {
    const cluster = await EsdbCluster.start();
    const store = await EventStoreDbStore.open(cluster.url());
    return {
      store,
      async dispose() {
        await store.close();
        cluster.stop();
      },
    };
  });
}

describe('EventStoreDB connection strings', () => {
  it("reads KurrentDB's scheme as the same protocol, and keeps TLS, credentials and options", () => {
    assert.equal(clientConnectionString('kurrentdb://node1:2113?tls=false'), 'esdb://node1:2113?tls=false');
    assert.equal(
      clientConnectionString('kurrentdb+discover://admin:changeit@a:2113,b:2113,c:2113?tlsVerifyCert=true'),
      'esdb+discover://admin:changeit@a:2113,b:2113,c:2113?tlsVerifyCert=true',
    );
    assert.equal(
      clientConnectionString('esdb://admin:changeit@localhost:2113?tls=true&defaultDeadline=5000'),
      'esdb://admin:changeit@localhost:2113?tls=true&defaultDeadline=5000',
    );
  });

  it("refuses what the client cannot read, with the client's own words", () => {
    assert.match(connectionStringProblem('http://localhost:2113')!, /expected esdb:\/\/ or esdb\+discover:\/\//);
    assert.match(
      connectionStringProblem('esdb://localhost:2113?nodePreference=sideways')!,
      /expected leader or follower/,
    );
    assert.equal(connectionStringProblem('esdb://localhost:2113?tls=false'), undefined);
  });

  it('is checked by the configuration, without loading the client', () => {
    const base = { APP_ENV: 'development', DATA_DIR: 'memory://' };
    assert.equal(
      loadConfig({ ...base, EVENTSTORE_URL: 'esdb://localhost:2113?tls=false' }).eventStoreUrl,
      'esdb://localhost:2113?tls=false',
    );
    assert.equal(loadConfig(base).eventStoreUrl, undefined);
    assert.throws(() => loadConfig({ ...base, EVENTSTORE_URL: 'postgres://localhost/events' }), {
      message:
        /EVENTSTORE_URL must be an esdb:\/\/, esdb\+discover:\/\/, kurrentdb:\/\/ or kurrentdb\+discover:\/\/ connection string/,
    });
  });
});

describe('EventStoreDB positions', () => {
  it('encode the commit/prepare pair and compare by commit, then prepare, beyond 2^53', () => {
    const big = { commit: 2n ** 60n + 1n, prepare: 2n ** 60n };
    assert.equal(encodePosition(big), `${2n ** 60n + 1n}/${2n ** 60n}`);
    assert.deepEqual(decodePosition(encodePosition(big)), big);
    assert.ok(comparePositions('10/5', '11/0') < 0);
    assert.ok(comparePositions('11/7', '11/6') > 0);
    assert.equal(comparePositions(encodePosition(big), encodePosition(big)), 0);
    assert.ok(comparePositions(`${2n ** 60n}/0`, `${2n ** 60n + 1n}/0`) < 0, 'compared as integers, not floats');
  });

  it("refuses another store's position (a checkpoint left from the SQL store) instead of misreading it", () => {
    assert.throws(() => decodePosition('4321:17'), { message: 'Not a position of the EventStoreDB store: 4321:17' });
  });
});

describe('EventStoreDB errors', () => {
  /** A gRPC error as the client receives it. */
  const grpc = (code: number, details: string, metadata: Record<string, string> = {}) =>
    Object.assign(new Error(`${code} ${details}`), { code, details, metadata: { getMap: () => metadata } });

  it('a wrong expected version is the port ConcurrencyError with the caller’s expectation and the actual revision', () => {
    const conflict = new WrongExpectedVersionError(undefined, { streamName: 'invoice-1', expected: 3n, current: 5n });
    const mapped = concurrencyError(conflict, 3);
    assert.ok(mapped instanceof ConcurrencyError);
    assert.equal(mapped.message, 'Concurrency conflict on stream invoice-1: expected revision 3, found revision 5');
    const none = new WrongExpectedVersionError(undefined, {
      streamName: 'invoice-2',
      expected: 'stream_exists',
      current: 'no_stream',
    });
    assert.equal(
      concurrencyError(none, 'stream_exists').message,
      'Concurrency conflict on stream invoice-2: expected stream exists, found no stream',
    );
  });

  it('unreachable, too slow, cancelled or not the leader: EventStoreUnavailableError, to be retried', () => {
    for (const [error, words] of [
      [grpc(14, 'No connection established'), /did not answer append to s: 14 No connection established/],
      [grpc(4, 'Deadline exceeded'), /did not answer append to s/],
      [grpc(10, 'Aborted'), /did not answer append to s/],
      [grpc(1, 'Cancelled on server'), /did not answer append to s/],
      [new UnavailableError(undefined, 'gone'), /did not answer append to s: gone/],
      [
        grpc(5, 'Leader info available', {
          exception: 'not-leader',
          'leader-endpoint-host': 'node2',
          'leader-endpoint-port': '2113',
        }),
        /needs the leader.*leader: node2:2113.*nodePreference=leader/,
      ],
    ] as const) {
      const mapped = fromClientError(error, 'append to s');
      assert.ok(mapped instanceof EventStoreUnavailableError, String(error));
      assert.match(mapped.message, words);
    }
  });

  it('access denied, a deleted stream, an append too large, anything else: one clear sentence', () => {
    assert.match(
      fromClientError(new AccessDeniedError(undefined, 'denied'), 'append to s').message,
      /refused append to s: EVENTSTORE_URL's user may not do it/,
    );
    assert.match(fromClientError(grpc(16, 'Unauthenticated'), 'read of s').message, /EVENTSTORE_URL's user may not/);
    assert.match(
      fromClientError(StreamDeletedError.fromStreamName('invoice-9'), 'read of invoice-9').message,
      /stream invoice-9 was deleted, and this service never deletes one/,
    );
    assert.match(
      fromClientError(MaxAppendSizeExceededError.fromMaxAppendSize(1048576), 'append to s').message,
      /over its maximum append size of 1048576 bytes/,
    );
    const other = fromClientError(new Error('something else'), 'read of $all');
    assert.equal(other.message, 'EventStoreDB read of $all failed: something else');
    assert.ok(!(other instanceof EventStoreUnavailableError));
  });
});

describe('EventStoreDB deadlines, with no server', () => {
  // A socket that accepts and never says a word: without a deadline every call would wait forever.
  let silent: net.Server;
  let port: number;
  const held: net.Socket[] = [];
  before(async () => {
    silent = net.createServer((socket) => void held.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    port = (silent.address() as net.AddressInfo).port;
  });
  after(async () => {
    for (const socket of held) socket.destroy();
    await new Promise<void>((resolve) => silent.close(() => resolve()));
  });

  it('start-up against a server that never answers stops with one line naming EVENTSTORE_URL', async () => {
    await assert.rejects(EventStoreDbStore.open(`esdb://127.0.0.1:${port}?tls=false`, { deadlineMs: 300 }), {
      message: /^EVENTSTORE_URL: EventStoreDB did not answer read of connection-check/,
    });
  });

  it('every call ends at its deadline as EventStoreUnavailableError', async () => {
    const store = new EventStoreDbStore(
      (await import('@eventstore/db-client')).EventStoreDBClient.connectionString(`esdb://127.0.0.1:${port}?tls=false`),
      { deadlineMs: 300 },
    );
    try {
      const calls = [
        store.append('s', [{ id: '6f1c2b9e-7a8d-4e3f-9b0a-1c2d3e4f5a6b', type: 'T', data: {} }], 'any'),
        store.readStream('s'),
        store.lastRevision('s'),
        store.readAll(undefined, 10),
        store.countAfter('1/1', 10),
      ];
      // Each awaited at once: they all end at about the same moment.
      await Promise.all(calls.map((call) => assert.rejects(call, EventStoreUnavailableError)));
    } finally {
      await store.close();
    }
  });

  it('a subscription that cannot reach the server reports it and keeps trying until stopped', async () => {
    const store = new EventStoreDbStore(
      (await import('@eventstore/db-client')).EventStoreDBClient.connectionString(`esdb://127.0.0.1:${port}?tls=false`),
      { deadlineMs: 300 },
    );
    const errors: unknown[] = [];
    const subscription = store.subscribe({ handler: () => undefined, onError: (e) => void errors.push(e) });
    const deadline = Date.now() + 20_000;
    while (errors.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await subscription.stop();
    await store.close();
    assert.ok(errors.length > 0, 'the failure was reported');
  });
});
