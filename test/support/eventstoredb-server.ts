// A test server that speaks EventStoreDB's gRPC protocol, for the official
// client (@eventstore/db-client) to talk to unmodified. It is built on the
// client package's own generated service definitions (streams, server
// features, gossip) and @grpc/grpc-js, so every byte on the wire is what the
// client's protobuf code writes and reads.
//
// Its rules are EventStoreDB's, each taken from the server's source
// (github.com/EventStore/EventStore, src/EventStore.Core/...), cited where used:
//   - appends: Services/Transport/Grpc/Streams.Append.cs and
//     Streams.BatchAppend.cs (replies, NotLeader as the LeaderInfo trailers,
//     errors as google.rpc.Status with packed details);
//   - expected revisions and idempotency: Services/Storage/ReaderIndex/
//     IndexWriter.cs, CheckCommit (the rules are copied one for one below);
//   - error trailers: Services/Transport/Grpc/RpcExceptions.cs;
//   - reads and subscriptions: Services/Transport/Grpc/Enumerators.*.cs
//     (ReadStreamForwards/Backwards, ReadAllForwards/Backwards,
//     AllSubscription(Filtered): confirmation first, then the events, a
//     checkpoint per window of scanned events, caught-up, then live events).
//
// What it cannot prove (only a real server or cluster can):
//   - positions: here every event's commit and prepare positions are its own
//     log position; a real server gives the events of one append one commit
//     position and different prepare positions. The adapter compares
//     (commit, prepare) pairs, which orders both the same way;
//   - the committed-event cache behind `any` idempotency is a plain bounded
//     map here (IndexWriter's _committedEvents is a BoundedCache by memory);
//   - replication, elections and quorum: a "cluster" is one log with nodes
//     in roles a test sets; a follower serves a snapshot that lags only when
//     a test says so; writes a follower receives without requires-leader are
//     forwarded to the leader as EventStoreDB does;
//   - authentication (users, ACLs): access denial is a switch; timing, load,
//     message sizes, keep-alives, TLS handshakes with a real certificate chain.
import { EventEmitter } from 'node:events';
import * as grpc from '@grpc/grpc-js';
// The client package's generated code (CommonJS: default imports).
import streamsGrpc from '@eventstore/db-client/generated/streams_grpc_pb.js';
import streamsPb from '@eventstore/db-client/generated/streams_pb.js';
import sharedPb from '@eventstore/db-client/generated/shared_pb.js';
import statusPb from '@eventstore/db-client/generated/status_pb.js';
import featuresGrpc from '@eventstore/db-client/generated/serverfeatures_grpc_pb.js';
import featuresPb from '@eventstore/db-client/generated/serverfeatures_pb.js';
import gossipGrpc from '@eventstore/db-client/generated/gossip_grpc_pb.js';
import gossipPb from '@eventstore/db-client/generated/gossip_pb.js';
import anyPb from 'google-protobuf/google/protobuf/any_pb.js';
import emptyPb from 'google-protobuf/google/protobuf/empty_pb.js';

/* eslint-disable @typescript-eslint/no-explicit-any -- generated protobuf classes are untyped here */
type Msg = any;

export interface StoredEvent {
  id: string;
  type: string;
  contentType: string;
  streamId: string;
  revision: number;
  position: bigint;
  /** .NET ticks since the Unix epoch, as the server's "created" metadata. */
  created: bigint;
  data: Uint8Array;
  metadata: Uint8Array;
}

interface Proposed {
  id: string;
  type: string;
  contentType: string;
  data: Uint8Array;
  metadata: Uint8Array;
}

/** EventStoreDB's expected version: a revision, or -1 no stream, -2 any, -4 stream exists (ExpectedVersion.cs). */
type Expected = bigint;
const NO_STREAM = -1n;
const ANY = -2n;
const STREAM_EXISTS = -4n;

type WriteOutcome =
  | { kind: 'written' | 'idempotent'; lastRevision: number; position: bigint }
  | { kind: 'wrong-expected-version'; current: number }
  | { kind: 'deleted' };

/** Bytes a record takes in the log here; only its growth matters. */
const RECORD_SIZE = 137n;

/** The one transaction log every node of a test cluster serves. */
export class EsdbLog {
  readonly events: StoredEvent[] = [];
  private readonly streams = new Map<string, StoredEvent[]>();
  private readonly tombstoned = new Set<string>();
  /** IndexWriter._committedEvents: event id → stream and number, what `any` idempotency consults. */
  private readonly committed = new Map<string, { streamId: string; revision: number }>();
  private nextPosition = 1000n;
  readonly appended = new EventEmitter().setMaxListeners(0);

  constructor(private readonly committedCacheSize = 100_000) {
    // A fresh server has written its own events before any client's: readers must skip them.
    this.write('$settings', NO_STREAM, [system('$settings')]);
    this.write('$users', NO_STREAM, [system('$User')]);
  }

  stream(streamId: string): readonly StoredEvent[] {
    return this.streams.get(streamId) ?? [];
  }

  isDeleted(streamId: string): boolean {
    return this.tombstoned.has(streamId);
  }

  tombstone(streamId: string): void {
    this.tombstoned.add(streamId);
  }

  /** Forgets what the committed-event cache remembers, as a restarted server has. */
  forgetCommittedEvents(): void {
    this.committed.clear();
  }

  /** Index of the first event at or after `position` in $all. */
  indexAt(position: bigint): number {
    let low = 0;
    let high = this.events.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (this.events[mid]!.position < position) low = mid + 1;
      else high = mid;
    }
    return low;
  }

  /** IndexWriter.CheckCommit, then the write when it says Ok. */
  write(streamId: string, expected: Expected, proposed: readonly Proposed[]): WriteOutcome {
    const decision = this.checkCommit(streamId, expected, proposed);
    if (decision.kind !== 'ok') return decision;
    const stream = this.streams.get(streamId) ?? [];
    this.streams.set(streamId, stream);
    for (const event of proposed) {
      const stored: StoredEvent = {
        ...event,
        streamId,
        revision: stream.length,
        position: this.nextPosition,
        created: BigInt(Date.now()) * 10_000n,
      };
      this.nextPosition += RECORD_SIZE + BigInt(event.data.length);
      stream.push(stored);
      this.events.push(stored);
      this.remember(stored);
    }
    this.appended.emit('appended');
    const last = stream.at(-1)!;
    return { kind: 'written', lastRevision: last.revision, position: last.position };
  }

  private remember(event: StoredEvent): void {
    if (this.committed.size >= this.committedCacheSize) {
      this.committed.delete(this.committed.keys().next().value!);
    }
    this.committed.set(event.id, { streamId: event.streamId, revision: event.revision });
  }

  /**
   * IndexWriter.CheckCommit, rule for rule. CorruptedIdempotency (a batch
   * that repeats only some of its events) is answered as WrongExpectedVersion
   * (RequestManagement: CommitDecision.CorruptedIdempotency → OperationResult.WrongExpectedVersion).
   */
  private checkCommit(
    streamId: string,
    expected: Expected,
    proposed: readonly Proposed[],
  ): WriteOutcome | { kind: 'ok' } {
    if (this.tombstoned.has(streamId)) return { kind: 'deleted' };
    const stream = this.stream(streamId);
    const current = stream.length - 1;
    const wrong = { kind: 'wrong-expected-version', current } as const;
    if (expected === STREAM_EXISTS && current < 0) return wrong;
    if (expected === ANY || expected === STREAM_EXISTS) {
      // Idempotency from the committed-event cache only.
      let end = -1;
      for (const [i, event] of proposed.entries()) {
        const known = this.committed.get(event.id);
        if (!known || known.streamId !== streamId) return i === 0 ? { kind: 'ok' } : wrong;
        end = known.revision;
      }
      if (end === -1) return { kind: 'ok' }; // no data in the transaction
      return this.idempotent(stream, end);
    }
    if (expected < BigInt(current)) {
      // A repeat at the revision it was first written at: the stream's events there must be these.
      let number = Number(expected);
      for (const event of proposed) {
        number += 1;
        if (stream[number]?.id === event.id) continue;
        return wrong; // the first differs: a conflict; a later one: CorruptedIdempotency
      }
      if (number === Number(expected)) return wrong; // no data in the transaction
      return this.idempotent(stream, number);
    }
    if (expected > BigInt(current)) return wrong;
    return { kind: 'ok' };
  }

  private idempotent(stream: readonly StoredEvent[], end: number): WriteOutcome {
    const last = stream[end]!;
    return { kind: 'idempotent', lastRevision: end, position: last.position };
  }
}

function system(type: string): Proposed {
  return {
    id: crypto.randomUUID(),
    type,
    contentType: 'application/json',
    data: Buffer.from('{}'),
    metadata: new Uint8Array(),
  };
}

// ---------------------------------------------------------------------------
// Faults a test can inject into one node.

export interface NodeFaults {
  /** ServerFeatures.GetSupportedMethods answers this status code (INTERNAL or UNKNOWN as a proxy would), or hangs. */
  features?: { fail: grpc.status } | 'hang';
  /** The next this many calls (any method) end with UNAVAILABLE, doing nothing. */
  unavailable?: number;
  /** The next this many appends are applied, and their reply is lost (the call ends UNAVAILABLE). */
  loseAppendReplies?: number;
  /** Only appends to streams whose name matches count for loseAppendReplies. */
  loseRepliesOf?: RegExp;
  /** Reads never answer and subscriptions are never confirmed, until the client cancels or its deadline passes. */
  hangReads?: boolean;
  /** Every call is refused as EventStoreDB refuses a user without the right (RpcExceptions.AccessDenied). */
  denyAccess?: boolean;
}

type Role = 'leader' | 'follower';

const requiresLeader = (metadata: grpc.Metadata) => metadata.get('requires-leader')[0]?.toString() === 'true';

/** One node of a test cluster: a gRPC server in a role, over the shared log. */
export class EsdbNode {
  role: Role = 'follower';
  readonly faults: NodeFaults = {};
  /** Every call received, with whether it asked for the leader. */
  readonly calls: { method: string; requiresLeader: boolean }[] = [];
  /** Reads the client cancelled (its own cancel or its deadline). */
  cancelledReads = 0;
  /** Reads still open now. */
  openReads = 0;
  /** Events sent by reads (not subscriptions): what a read costs. */
  eventsRead = 0;
  /** A follower's lag: it serves $all and streams only up to this many events of the log. */
  private visible: number | undefined;
  private readonly subscriptions = new Set<grpc.ServerWritableStream<Msg, Msg>>();
  private server?: grpc.Server;
  port = 0;

  constructor(
    readonly cluster: EsdbCluster,
    readonly name: string,
  ) {}

  get endpoint(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Serves only what the log holds now, until `catchUp`: a follower behind its leader. */
  lag(): void {
    this.visible = this.cluster.log.events.length;
  }

  catchUp(): void {
    this.visible = undefined;
    this.cluster.log.appended.emit('appended');
  }

  private get log(): EsdbLog {
    return this.cluster.log;
  }

  private visibleEvents(): number {
    return this.visible ?? this.log.events.length;
  }

  private visibleStream(streamId: string): readonly StoredEvent[] {
    const stream = this.log.stream(streamId);
    if (this.visible === undefined) return stream;
    const limit = this.visible;
    return stream.filter((event) => this.log.indexAt(event.position) < limit);
  }

  async start(port = 0, credentials = grpc.ServerCredentials.createInsecure()): Promise<void> {
    const server = new grpc.Server();
    server.addService(streamsGrpc.StreamsService, {
      read: (call: grpc.ServerWritableStream<Msg, Msg>) => this.read(call),
      append: (call: grpc.ServerReadableStream<Msg, Msg>, reply: grpc.sendUnaryData<Msg>) => this.append(call, reply),
      batchAppend: (call: grpc.ServerDuplexStream<Msg, Msg>) => this.batchAppend(call),
      delete: (_: unknown, reply: grpc.sendUnaryData<Msg>) => reply(unimplemented()),
      tombstone: (_: unknown, reply: grpc.sendUnaryData<Msg>) => reply(unimplemented()),
    });
    server.addService(featuresGrpc.ServerFeaturesService, {
      getSupportedMethods: (call: grpc.ServerUnaryCall<Msg, Msg>, reply: grpc.sendUnaryData<Msg>) =>
        this.supportedMethods(call, reply),
    });
    server.addService(gossipGrpc.GossipService, {
      read: (_: unknown, reply: grpc.sendUnaryData<Msg>) => reply(null, this.cluster.gossip()),
    });
    this.port = await new Promise<number>((resolve, reject) =>
      server.bindAsync(`127.0.0.1:${port}`, credentials, (error, bound) => (error ? reject(error) : resolve(bound))),
    );
    this.server = server;
  }

  /** Stops at once, as a crashed node: open calls end UNAVAILABLE. */
  stop(): void {
    for (const call of this.subscriptions) call.destroy();
    this.subscriptions.clear();
    this.server?.forceShutdown();
    this.server = undefined;
  }

  /** Ends every open subscription with UNAVAILABLE (a dropped connection), or with `error`. */
  dropSubscriptions(error: Partial<grpc.StatusObject> = { code: grpc.status.UNAVAILABLE, details: 'dropped' }): void {
    for (const call of this.subscriptions) call.emit('error', error);
    this.subscriptions.clear();
  }

  /** The checks every call meets first; an error to end the call with, or undefined. */
  private refuse(
    method: string,
    metadata: grpc.Metadata,
    leaderOnly = requiresLeader(metadata),
  ): Partial<grpc.StatusObject> | undefined {
    this.calls.push({ method, requiresLeader: requiresLeader(metadata) });
    if (this.faults.unavailable) {
      this.faults.unavailable--;
      return { code: grpc.status.UNAVAILABLE, details: 'Server Is Not Ready' };
    }
    if (this.faults.denyAccess) return accessDenied();
    // Streams.cs GetRequiresLeader + RpcExceptions.LeaderInfo: a follower names the leader.
    if (leaderOnly && this.role !== 'leader') return notLeader(this.cluster.leader());
    return undefined;
  }

  // ----- ServerFeatures (Services/Transport/Grpc/ServerFeatures.cs) -----

  private supportedMethods(call: grpc.ServerUnaryCall<Msg, Msg>, reply: grpc.sendUnaryData<Msg>): void {
    this.calls.push({ method: 'GetSupportedMethods', requiresLeader: false });
    const fault = this.faults.features;
    if (fault === 'hang') return; // never answers: the client has no deadline for this call
    if (fault) return reply({ code: fault.fail, details: 'upstream proxy error' });
    const methods = [
      ['event_store.client.streams.streams', 'read', []],
      ['event_store.client.streams.streams', 'append', []],
      ['event_store.client.streams.streams', 'batchappend', []],
      ['event_store.client.gossip.gossip', 'read', []],
      ['event_store.client.server_features.serverfeatures', 'getsupportedmethods', []],
    ] as const;
    const answer = new featuresPb.SupportedMethods();
    answer.setEventStoreServerVersion('23.10.0');
    answer.setMethodsList(
      methods.map(([service, method, features]) => {
        const supported = new featuresPb.SupportedMethod();
        supported.setServiceName(service);
        supported.setMethodName(method);
        supported.setFeaturesList([...features]);
        return supported;
      }),
    );
    reply(null, answer);
  }

  // ----- Streams.Append (Streams.Append.cs) -----

  private append(call: grpc.ServerReadableStream<Msg, Msg>, reply: grpc.sendUnaryData<Msg>): void {
    let options: Msg;
    const proposed: Proposed[] = [];
    call.on('data', (request: Msg) => {
      if (request.hasOptions()) options = request.getOptions();
      else proposed.push(fromProposed(request.getProposedMessage()));
    });
    call.on('end', () => {
      // A follower forwards a write to its leader unless the client asked for the leader itself.
      const refused = this.refuse('Append', call.metadata);
      if (refused) return reply(refused);
      const streamId = Buffer.from(options.getStreamIdentifier().getStreamName_asU8()).toString('utf8');
      const expected = appendExpected(options);
      const outcome = this.log.write(streamId, expected, proposed);
      if (this.loseReply(streamId)) return reply({ code: grpc.status.UNAVAILABLE, details: 'connection reset' });
      const response = new streamsPb.AppendResp();
      if (outcome.kind === 'deleted') return reply(streamDeleted(streamId));
      if (outcome.kind === 'wrong-expected-version') {
        // 21.10+: the conflict is in the reply's body, not a trailer.
        const wrong = new streamsPb.AppendResp.WrongExpectedVersion();
        if (outcome.current >= 0) wrong.setCurrentRevision(String(outcome.current));
        else wrong.setCurrentNoStream(new sharedPb.Empty());
        if (expected >= 0n) wrong.setExpectedRevision(String(expected));
        else if (expected === NO_STREAM) wrong.setExpectedNoStream(new sharedPb.Empty());
        else if (expected === STREAM_EXISTS) wrong.setExpectedStreamExists(new sharedPb.Empty());
        else wrong.setExpectedAny(new sharedPb.Empty());
        response.setWrongExpectedVersion(wrong);
        return reply(null, response);
      }
      const success = new streamsPb.AppendResp.Success();
      success.setCurrentRevision(String(outcome.lastRevision));
      const position = new streamsPb.AppendResp.Position();
      position.setCommitPosition(String(outcome.position));
      position.setPreparePosition(String(outcome.position));
      success.setPosition(position);
      response.setSuccess(success);
      reply(null, response);
    });
  }

  private loseReply(streamId: string): boolean {
    if (!this.faults.loseAppendReplies || this.faults.loseRepliesOf?.test(streamId) === false) return false;
    this.faults.loseAppendReplies--;
    return true;
  }

  // ----- Streams.BatchAppend (Streams.BatchAppend.cs) -----

  private batchAppend(call: grpc.ServerDuplexStream<Msg, Msg>): void {
    const pending = new Map<string, { options: Msg; proposed: Proposed[] }>();
    let ended = false;
    const end = (error: Partial<grpc.StatusObject>) => {
      if (ended) return;
      ended = true;
      call.emit('error', error);
    };
    call.on('data', (request: Msg) => {
      if (ended) return;
      const refused = this.refuse('BatchAppend', call.metadata);
      // BatchAppendWorker.ConvertMessage: NotHandled with leader info throws RpcExceptions.LeaderInfo, ending the call.
      if (refused) return end(refused);
      const correlation = request.getCorrelationId().getString();
      if (request.hasOptions()) pending.set(correlation, { options: request.getOptions(), proposed: [] });
      const write = pending.get(correlation);
      if (!write) return;
      write.proposed.push(...request.getProposedMessagesList().map(fromProposed));
      if (!request.getIsFinal()) return;
      pending.delete(correlation);
      const streamName = write.options.getStreamIdentifier();
      const streamId = Buffer.from(streamName.getStreamName_asU8()).toString('utf8');
      const expected = batchExpected(write.options);
      const outcome = this.log.write(streamId, expected, write.proposed);
      if (this.loseReply(streamId)) return end({ code: grpc.status.UNAVAILABLE, details: 'connection reset' });
      const response = new streamsPb.BatchAppendResp();
      response.setCorrelationId(request.getCorrelationId());
      response.setStreamIdentifier(streamName);
      if (outcome.kind === 'deleted') {
        response.setError(
          rpcStatus(9, `Event stream '${streamId}' is deleted.`, 'StreamDeleted', new sharedPb.StreamDeleted()),
        );
      } else if (outcome.kind === 'wrong-expected-version') {
        // Status.WrongExpectedVersion: FAILED_PRECONDITION with a packed event_store.client.WrongExpectedVersion.
        const wrong = new sharedPb.WrongExpectedVersion();
        if (outcome.current >= 0) wrong.setCurrentStreamRevision(String(outcome.current));
        else wrong.setCurrentNoStream(new emptyPb.Empty());
        if (expected >= 0n) wrong.setExpectedStreamPosition(String(expected));
        else if (expected === NO_STREAM) wrong.setExpectedNoStream(new emptyPb.Empty());
        else if (expected === STREAM_EXISTS) wrong.setExpectedStreamExists(new emptyPb.Empty());
        else wrong.setExpectedAny(new emptyPb.Empty());
        response.setError(rpcStatus(9, 'WrongExpectedVersion', 'WrongExpectedVersion', wrong));
      } else {
        const success = new streamsPb.BatchAppendResp.Success();
        success.setCurrentRevision(String(outcome.lastRevision));
        const position = new sharedPb.AllStreamPosition();
        position.setCommitPosition(String(outcome.position));
        position.setPreparePosition(String(outcome.position));
        success.setPosition(position);
        response.setSuccess(success);
      }
      call.write(response);
    });
    call.on('end', () => {
      if (!ended) call.end();
    });
    call.on('error', () => undefined);
  }

  // ----- Streams.Read (Streams.Read.cs and Enumerators.*) -----

  private read(call: grpc.ServerWritableStream<Msg, Msg>): void {
    const options = call.request.getOptions();
    const subscription = options.hasSubscription();
    const refused = this.refuse(subscription ? 'Subscribe' : 'Read', call.metadata);
    if (refused) return void call.emit('error', refused);
    call.on('error', () => undefined);
    if (subscription) return this.subscribe(call, options);
    this.openReads++;
    let open = true;
    const close = () => {
      if (!open) return;
      open = false;
      this.openReads--;
    };
    call.on('cancelled', () => {
      if (open) this.cancelledReads++;
      close();
    });
    if (this.faults.hangReads) return;
    const count = options.hasCount() ? Number(options.getCount()) : Number.MAX_SAFE_INTEGER;
    const backwards = options.getReadDirection() === 1;
    const filter = eventFilter(options);
    if (options.hasStream()) {
      const streamOptions = options.getStream();
      const streamId = Buffer.from(streamOptions.getStreamIdentifier().getStreamName_asU8()).toString('utf8');
      if (this.log.isDeleted(streamId)) {
        close();
        return void call.emit('error', streamDeleted(streamId));
      }
      const stream = this.visibleStream(streamId);
      if (stream.length === 0) {
        // Enumerators.ReadStream*: a missing stream is one StreamNotFound message (21.10+).
        const notFound = new streamsPb.ReadResp.StreamNotFound();
        notFound.setStreamIdentifier(streamOptions.getStreamIdentifier());
        const response = new streamsPb.ReadResp();
        response.setStreamNotFound(notFound);
        call.write(response);
      } else {
        // Stream reads include the revision they start from, in both directions.
        const last = stream.length - 1;
        const from = streamOptions.hasRevision()
          ? Number(streamOptions.getRevision())
          : streamOptions.hasEnd()
            ? last
            : backwards
              ? last
              : 0;
        const chosen = backwards ? stream.slice(0, Math.min(from, last) + 1).reverse() : stream.slice(from);
        for (const event of chosen.slice(0, count)) {
          this.eventsRead++;
          call.write(readEvent(event, false));
        }
      }
      close();
      return void call.end();
    }
    // $all. Forwards from a position includes the event there; backwards
    // from a position reads the log before it (TFChunkReader's backward read
    // starts at the record that ends there).
    const all = options.getAll();
    const limit = this.visibleEvents();
    let index: number;
    if (all.hasPosition()) {
      const position = BigInt(all.getPosition().getCommitPosition());
      index = backwards ? this.log.indexAt(position) - 1 : this.log.indexAt(position);
    } else if (all.hasEnd()) index = backwards ? limit - 1 : limit;
    else index = backwards ? -1 : 0;
    let sent = 0;
    while (sent < count && index >= 0 && index < limit) {
      const event = this.log.events[index]!;
      index += backwards ? -1 : 1;
      if (!filter(event)) continue;
      this.eventsRead++;
      call.write(readEvent(event, true));
      sent++;
    }
    close();
    call.end();
  }

  /** Enumerators.AllSubscription(Filtered): confirmation, the past events, checkpoints, caught-up, then live ones. */
  private subscribe(call: grpc.ServerWritableStream<Msg, Msg>, options: Msg): void {
    const all = options.getAll();
    if (!all) return void call.emit('error', unimplemented());
    const filter = eventFilter(options);
    const filterOptions = options.hasFilter() ? options.getFilter() : undefined;
    // A checkpoint every (checkpointIntervalMultiplier × max search window) events looked at.
    const window = filterOptions
      ? Math.max(1, filterOptions.getCheckpointintervalmultiplier()) *
        (filterOptions.hasMax() ? filterOptions.getMax() : 32)
      : Number.POSITIVE_INFINITY;
    // A subscription from a position starts after the event there.
    let next = all.hasPosition()
      ? this.log.indexAt(BigInt(all.getPosition().getCommitPosition()) + 1n)
      : all.hasEnd()
        ? this.visibleEvents()
        : 0;
    this.subscriptions.add(call);
    call.on('cancelled', () => this.subscriptions.delete(call));
    if (this.faults.hangReads) return; // never confirmed
    const confirmation = new streamsPb.ReadResp.SubscriptionConfirmation();
    confirmation.setSubscriptionId(crypto.randomUUID());
    const confirm = new streamsPb.ReadResp();
    confirm.setConfirmation(confirmation);
    call.write(confirm);
    let scanned = 0;
    let caughtUp = false;
    const pump = () => {
      if (!this.subscriptions.has(call)) return;
      const limit = this.visibleEvents();
      while (next < limit) {
        const event = this.log.events[next++]!;
        if (filter(event)) call.write(readEvent(event, true));
        if (++scanned >= window) {
          scanned = 0;
          call.write(checkpoint(event.position));
        }
      }
      if (!caughtUp) {
        caughtUp = true;
        const response = new streamsPb.ReadResp();
        response.setCaughtUp(new streamsPb.ReadResp.CaughtUp());
        call.write(response);
      }
    };
    const onAppended = () => pump();
    this.log.appended.on('appended', onAppended);
    const stop = () => {
      this.subscriptions.delete(call);
      this.log.appended.off('appended', onAppended);
    };
    call.on('cancelled', stop);
    call.on('close', stop);
    call.on('finish', stop);
    pump();
  }
}

/** A leader and followers over one log, with gossip for esdb+discover://. */
export class EsdbCluster {
  readonly log: EsdbLog;
  readonly nodes: EsdbNode[];

  private constructor(size: number, committedCacheSize?: number) {
    this.log = new EsdbLog(committedCacheSize);
    this.nodes = Array.from({ length: size }, (_, i) => new EsdbNode(this, `node${i + 1}`));
    this.nodes[0]!.role = 'leader';
  }

  static async start(
    options: { nodes?: number; committedCacheSize?: number; credentials?: grpc.ServerCredentials } = {},
  ): Promise<EsdbCluster> {
    const cluster = new EsdbCluster(options.nodes ?? 1, options.committedCacheSize);
    for (const node of cluster.nodes) await node.start(0, options.credentials);
    return cluster;
  }

  leader(): EsdbNode {
    return this.nodes.find((node) => node.role === 'leader')!;
  }

  /** The leader steps down and `to` is elected: calls that need the leader move there. */
  failover(to: EsdbNode): void {
    for (const node of this.nodes) {
      const demoted = node.role === 'leader' && node !== to;
      node.role = node === to ? 'leader' : 'follower';
      // Assumed, not taken from the server's source: subscriptions that asked
      // for the leader end when their node steps down, naming the new leader.
      if (demoted) node.dropSubscriptions(notLeader(to));
    }
  }

  /** Gossip.Read: every member, its state and endpoint (Gossip.Read.cs). */
  gossip(): Msg {
    const info = new gossipPb.ClusterInfo();
    info.setMembersList(
      this.nodes.map((node, i) => {
        const member = new gossipPb.MemberInfo();
        const id = new sharedPb.UUID();
        id.setString(`00000000-0000-4000-8000-00000000000${i}`);
        member.setInstanceId(id);
        member.setTimeStamp(String(Date.now()));
        member.setState(
          node.role === 'leader' ? gossipPb.MemberInfo.VNodeState.LEADER : gossipPb.MemberInfo.VNodeState.FOLLOWER,
        );
        member.setIsAlive(true);
        const endpoint = new gossipPb.EndPoint();
        endpoint.setAddress('127.0.0.1');
        endpoint.setPort(node.port);
        member.setHttpEndPoint(endpoint);
        return member;
      }),
    );
    return info;
  }

  /** esdb:// to one node, or esdb+discover:// over all of them. */
  url(options: { node?: EsdbNode; discover?: boolean; query?: string } = {}): string {
    const query = options.query ?? 'tls=false';
    if (options.discover) {
      return `esdb+discover://${this.nodes.map((node) => node.endpoint).join(',')}?${query}&discoveryInterval=20`;
    }
    return `esdb://${(options.node ?? this.leader()).endpoint}?${query}`;
  }

  stop(): void {
    for (const node of this.nodes) node.stop();
  }
}

// ---------------------------------------------------------------------------

function fromProposed(message: Msg): Proposed {
  const metadata = message.getMetadataMap();
  return {
    id: message.getId().getString(),
    type: metadata.get('type'),
    contentType: metadata.get('content-type') ?? 'application/octet-stream',
    data: message.getData_asU8(),
    metadata: message.getCustomMetadata_asU8(),
  };
}

function appendExpected(options: Msg): Expected {
  if (options.hasRevision()) return BigInt(options.getRevision());
  if (options.hasNoStream()) return NO_STREAM;
  if (options.hasStreamExists()) return STREAM_EXISTS;
  return ANY;
}

function batchExpected(options: Msg): Expected {
  if (options.hasStreamPosition()) return BigInt(options.getStreamPosition());
  if (options.hasNoStream()) return NO_STREAM;
  if (options.hasStreamExists()) return STREAM_EXISTS;
  return ANY;
}

/** The read's filter on event type or stream name, by regex or prefixes; everything without one. */
function eventFilter(options: Msg): (event: StoredEvent) => boolean {
  if (!options.hasFilter()) return () => true;
  const filter = options.getFilter();
  const onType = filter.hasEventType();
  const expression = onType ? filter.getEventType() : filter.getStreamIdentifier();
  const prefixes: string[] = expression.getPrefixList();
  const regex = expression.getRegex() ? new RegExp(expression.getRegex()) : undefined;
  return (event) => {
    const subject = onType ? event.type : event.streamId;
    if (prefixes.length > 0 && !prefixes.some((prefix) => subject.startsWith(prefix))) return false;
    return regex ? regex.test(subject) : true;
  };
}

function readEvent(event: StoredEvent, withCommitPosition: boolean): Msg {
  const recorded = new streamsPb.ReadResp.ReadEvent.RecordedEvent();
  const id = new sharedPb.UUID();
  id.setString(event.id);
  recorded.setId(id);
  const stream = new sharedPb.StreamIdentifier();
  stream.setStreamName(Buffer.from(event.streamId, 'utf8'));
  recorded.setStreamIdentifier(stream);
  recorded.setStreamRevision(String(event.revision));
  recorded.setCommitPosition(String(event.position));
  recorded.setPreparePosition(String(event.position));
  const metadata = recorded.getMetadataMap();
  metadata.set('type', event.type);
  metadata.set('content-type', event.contentType);
  metadata.set('created', String(event.created));
  recorded.setData(event.data);
  recorded.setCustomMetadata(event.metadata);
  const read = new streamsPb.ReadResp.ReadEvent();
  read.setEvent(recorded);
  if (withCommitPosition) read.setCommitPosition(String(event.position));
  else read.setNoPosition(new sharedPb.Empty());
  const response = new streamsPb.ReadResp();
  response.setEvent(read);
  return response;
}

function checkpoint(position: bigint): Msg {
  const point = new streamsPb.ReadResp.Checkpoint();
  point.setCommitPosition(String(position));
  point.setPreparePosition(String(position));
  const response = new streamsPb.ReadResp();
  response.setCheckpoint(point);
  return response;
}

/** A google.rpc.Status with its details packed as event_store.client.<name> (BatchAppendResp's Status helpers). */
function rpcStatus(code: number, message: string, name: string, details: Msg): Msg {
  const status = new statusPb.Status();
  status.setCode(code);
  status.setMessage(message);
  const any = new anyPb.Any();
  any.pack(details.serializeBinary(), `event_store.client.${name}`);
  status.setDetails(any);
  return status;
}

const trailers = (entries: Record<string, string>) => {
  const metadata = new grpc.Metadata();
  for (const [key, value] of Object.entries(entries)) metadata.set(key, value);
  return metadata;
};

/** RpcExceptions.LeaderInfo. */
function notLeader(leader: EsdbNode): Partial<grpc.StatusObject> {
  return {
    code: grpc.status.NOT_FOUND,
    details: 'Leader info available',
    metadata: trailers({
      exception: 'not-leader',
      'leader-endpoint-host': '127.0.0.1',
      'leader-endpoint-port': String(leader.port),
    }),
  };
}

/** RpcExceptions.AccessDenied. */
function accessDenied(): Partial<grpc.StatusObject> {
  return {
    code: grpc.status.PERMISSION_DENIED,
    details: 'Access Denied',
    metadata: trailers({ exception: 'access-denied' }),
  };
}

/** RpcExceptions.StreamDeleted. */
function streamDeleted(streamId: string): Partial<grpc.StatusObject> {
  return {
    code: grpc.status.FAILED_PRECONDITION,
    details: `Event stream '${streamId}' is deleted.`,
    metadata: trailers({ exception: 'stream-deleted', 'stream-name': streamId }),
  };
}

function unimplemented(): Partial<grpc.StatusObject> {
  return { code: grpc.status.UNIMPLEMENTED, details: 'not served by the test server' };
}
