// Runs the consumers of the event log, each from its own checkpoint, one
// instance of each across processes (advisory lock; the others stand by):
// - projectors write their rows and their new checkpoint in one transaction,
//   so a crash replays at most one batch, harmlessly (projectors upsert);
// - process managers (reactors) issue commands for events, then move their
//   checkpoint; a crash in between repeats the reactions, which derive their
//   event ids from the causing event, so nothing is appended twice.
// It sits with the event store, not in projections/, because both sides
// follow the log through it: projections/ its projectors, commands/ its
// process managers and the payout queue. It knows neither: the read models'
// migrations are passed to `migrate`.
import { sql, type Kysely, type Migration } from 'kysely';
import type { EventStore, RecordedEvent } from './port.ts';
import type { SqlDatabase } from '../sql/database.ts';
import { ddl, migrate } from '../sql/migrate.ts';
import { followAppends } from './catch-up.ts';

export interface Projector<Prepared = unknown> {
  readonly name: string;
  /** The read-model tables this projector owns; a rebuild empties them. */
  readonly tables: readonly string[];
  /**
   * Reads what `apply` needs for a batch (e.g. whole streams to fold), before
   * the batch's transaction opens: inside it, only `trx` may be used.
   */
  prepare?(batch: readonly RecordedEvent[], store: EventStore): Promise<Prepared>;
  /** Writes what `event` changes, through `trx` only (PGlite has one connection). */
  apply?(trx: Kysely<any>, event: RecordedEvent, prepared: Prepared): Promise<void>;
  /**
   * Writes what the whole batch changes, in place of `apply` event by event:
   * for a projector whose rows can be written many at a time (a statement
   * per row is most of a rebuild's time).
   */
  applyBatch?(trx: Kysely<any>, batch: readonly RecordedEvent[], prepared: Prepared): Promise<void>;
}

export interface Reactor {
  readonly name: string;
  /** Reacts to one event, idempotently: it may see the same event again after a crash. */
  react(event: RecordedEvent): Promise<void>;
}

type Consumer = Projector | Reactor;
const isProjector = (consumer: Consumer): consumer is Projector => 'tables' in consumer;

export interface ProjectorStatus {
  name: string;
  /** `active` here, or `standby` while another process holds the projector. */
  role: 'active' | 'standby';
  checkpoint: string | null;
  eventsBehind: number;
  msBehind: number;
}

interface CheckpointTables {
  projection_checkpoints: { name: string; position: string; updated_at: Date };
}

export const checkpointMigrations: Record<string, Migration> = {
  '0001_checkpoints': ddl(
    `create table projection_checkpoints (
      name text primary key,
      "position" text not null,
      updated_at timestamptz not null
    )`,
  ),
};

export interface EngineOptions {
  batchSize?: number;
  pollMs?: number;
  /** Called after each committed batch, e.g. for metrics. */
  onBatch?: (projector: string, events: number) => void;
  onError?: (projector: string, error: unknown) => void;
}

const LAG_CAP = 100_000;

/** The advisory lock of a consumer: one instance at a time runs it, and a rebuild holds it. */
const lockKey = (name: string) => `projector:${name}`;

export class ProjectionEngine {
  private readonly db: Kysely<CheckpointTables>;
  private readonly checkpoints = new Map<string, string | undefined>();
  private readonly active = new Set<string>();
  private readonly progressed = new Set<() => void>();
  /** Reads of the log under way, by checkpoint: consumers woken by one append share one read. */
  private readonly reads = new Map<string, Promise<RecordedEvent[]>>();
  private running = false;
  private stopping?: AbortController;
  private loops: Promise<void>[] = [];

  constructor(
    private readonly database: SqlDatabase,
    private readonly store: EventStore,
    readonly consumers: readonly Consumer[],
    private readonly options: EngineOptions = {},
  ) {
    this.db = database.db as Kysely<CheckpointTables>;
    // A name is a checkpoint and a lock: two consumers sharing one would stall each other.
    const names = consumers.map((c) => c.name);
    const twice = names.find((name, i) => names.indexOf(name) !== i);
    if (twice) throw new Error(`Two consumers of the event log are named ${twice}`);
    const writesNothing = consumers.find((c) => isProjector(c) && !c.apply && !c.applyBatch);
    if (writesNothing) throw new Error(`Projector ${writesNothing.name} has neither apply nor applyBatch`);
  }

  get projectors(): Projector[] {
    return this.consumers.filter(isProjector);
  }

  /** Creates the checkpoint table and then the read models' own migrations. */
  static async migrate(database: SqlDatabase, readModelMigrations: Record<string, Migration>): Promise<void> {
    await migrate(database.db, 'projection_migrations', checkpointMigrations);
    await migrate(database.db, 'read_model_migrations', readModelMigrations);
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.stopping = new AbortController();
    this.loops = this.consumers.map((c) => this.supervise(c, this.stopping!.signal));
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.stopping?.abort();
    await Promise.all(this.loops);
  }

  /**
   * Resolves once every projector (or the named consumers: projectors, or
   * reactors whose reactions must have happened) has passed `position`, so
   * that a read after a write sees it. Rejects after `timeoutMs`.
   */
  async waitFor(position: string, timeoutMs = 10_000, names?: readonly string[]): Promise<void> {
    const wanted = this.named(names);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let behind = false;
      for (const consumer of wanted) {
        const checkpoint = await this.checkpointOf(consumer.name);
        if (checkpoint === undefined || this.store.comparePositions(checkpoint, position) < 0) behind = true;
      }
      if (!behind) return;
      const left = deadline - Date.now();
      if (left <= 0) throw new ReadModelsBehindError(position, timeoutMs);
      // Woken by local progress; polled when another process projects.
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.progressed.delete(done);
          resolve();
        };
        const timer = setTimeout(done, Math.min(left, 25));
        this.progressed.add(done);
      });
    }
  }

  /**
   * Resolves once every projector (or the named consumers) has seen every event
   * committed before the call, including one an older transaction still
   * holds back from readers.
   */
  async caughtUp(timeoutMs = 10_000, names?: readonly string[]): Promise<void> {
    const head = await this.store.headPosition();
    if (head !== undefined) await this.waitFor(head, timeoutMs, names);
  }

  /** Every projector, or the named consumers; a name that is none of them is an error, not a wait for nothing. */
  private named(names: readonly string[] | undefined): readonly Consumer[] {
    if (!names) return this.projectors;
    const unknown = names.filter((name) => !this.consumers.some((c) => c.name === name));
    if (unknown.length > 0) throw new Error(`no consumer of the event log is named ${unknown.join(', ')}`);
    return this.consumers.filter((c) => names.includes(c.name));
  }

  /** Where a consumer has read to, as its checkpoint says. */
  async checkpointOf(name: string): Promise<string | undefined> {
    return this.active.has(name) ? this.checkpoints.get(name) : this.readCheckpoint(this.db, name);
  }

  async status(): Promise<ProjectorStatus[]> {
    return Promise.all(
      this.consumers.map(async (p) => {
        const role = this.active.has(p.name) ? 'active' : 'standby';
        const checkpoint =
          role === 'active' ? this.checkpoints.get(p.name) : await this.readCheckpoint(this.db, p.name);
        const eventsBehind = await this.store.countAfter(checkpoint, LAG_CAP);
        let msBehind = 0;
        if (eventsBehind > 0) {
          const [next] = await this.store.readAll(checkpoint, 1);
          if (next) msBehind = Math.max(0, Date.now() - next.recordedAt.getTime());
        }
        return { name: p.name, role, checkpoint: checkpoint ?? null, eventsBehind, msBehind };
      }),
    );
  }

  /**
   * Empties the read models of the named projectors (all when none is named),
   * resets their checkpoints and replays the whole log into them: read once,
   * each batch written for all of them in one transaction. Returns the events
   * replayed. It holds their projector locks throughout, so it refuses,
   * naming the holder, while any instance projects into them (emptied under
   * a running service, its chain watchers would find no address to match
   * and its API no key nor invoice), and no instance starts to meanwhile.
   */
  async rebuild(names?: readonly string[]): Promise<{ events: number; ms: number }> {
    const chosen = this.projectors.filter((p) => !names || names.length === 0 || names.includes(p.name));
    const unknown = (names ?? []).filter((n) => !this.projectors.some((p) => p.name === n));
    if (unknown.length > 0) throw new Error(`unknown projection: ${unknown.join(', ')}`);
    return this.holdingLocks(chosen, new AbortController().signal, (lost) => this.replay(chosen, lost));
  }

  /** Runs `work` holding the lock of each of `projectors`, or throws naming who holds one. */
  private async holdingLocks<T>(
    projectors: readonly Projector[],
    lost: AbortSignal,
    work: (lost: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const [first, ...rest] = projectors;
    if (!first) return work(lost);
    let result: T | undefined;
    const key = lockKey(first.name);
    const ran = await this.database.withAdvisoryLock(key, async (lostThis) => {
      result = await this.holdingLocks(rest, AbortSignal.any([lost, lostThis]), work);
    });
    if (ran) return result as T;
    const holder = (await this.database.advisoryLockHolder(key)) ?? 'another instance';
    throw new Error(`projection ${first.name} is being projected by ${holder}: stop that instance first`);
  }

  private async replay(chosen: readonly Projector[], lockLost: AbortSignal): Promise<{ events: number; ms: number }> {
    const started = Date.now();
    await this.database.db.transaction().execute(async (trx) => {
      for (const projector of chosen) {
        for (const table of projector.tables) await sql`delete from ${sql.table(table)}`.execute(trx);
        await trx.deleteFrom('projection_checkpoints').where('name', '=', projector.name).execute();
      }
    });
    for (const projector of chosen) this.checkpoints.set(projector.name, undefined);
    // The next batch is read while this one is written: PostgreSQL reads on
    // one connection and writes on another, on a core each.
    const limit = this.options.batchSize ?? 500;
    let events = 0;
    let next = this.store.readAll(undefined, limit);
    for (;;) {
      const read = await next;
      if (lockLost.aborted)
        throw new Error('the rebuild lost its projector locks (its connection dropped); run it again');
      if (read.length === 0) break;
      const batch = read.length >= limit ? await this.withLastAppendWhole(read) : read;
      next = this.store.readAll(batch.at(-1)!.position, limit);
      // A failed write leaves the prefetched read unawaited: it settles, unseen.
      next.catch(() => undefined);
      const applied = await this.commitProjected(chosen, batch);
      if (applied === 0) break; // another instance moved a checkpoint: it goes on from there
      events += applied;
    }
    return { events, ms: Date.now() - started };
  }

  private async supervise(projector: Consumer, signal: AbortSignal): Promise<void> {
    const pollMs = this.options.pollMs ?? 1000;
    while (!signal.aborted) {
      try {
        const ran = await this.database.withAdvisoryLock(lockKey(projector.name), (lost) =>
          this.run(projector, signal, lost),
        );
        if (!ran) await sleep(pollMs * 2, signal); // another process is active; try later
      } catch (error) {
        this.options.onError?.(projector.name, error);
        await sleep(pollMs, signal);
      } finally {
        this.active.delete(projector.name);
      }
    }
  }

  private async run(projector: Consumer, stop: AbortSignal, lockLost: AbortSignal): Promise<void> {
    this.checkpoints.set(projector.name, await this.readCheckpoint(this.db, projector.name));
    this.active.add(projector.name);
    const signal = AbortSignal.any([stop, lockLost]);
    await followAppends(this.store, () => this.catchUpOnce(projector), {
      batchSize: this.options.batchSize ?? 500,
      pollMs: this.options.pollMs ?? 1000,
      signal,
      // A failed batch rolled back whole; it is read again after a pause.
      onError: (error) => this.options.onError?.(projector.name, error),
    });
  }

  /** Applies one batch after the checkpoint; returns how many events it applied. */
  private async catchUpOnce(consumer: Consumer): Promise<number> {
    const checkpoint = this.checkpoints.get(consumer.name);
    const limit = this.options.batchSize ?? 500;
    const read = await this.readShared(checkpoint, limit);
    if (read.length === 0) return 0;
    if (!isProjector(consumer)) return this.commitReactions(consumer, read);
    const batch = read.length >= limit ? await this.withLastAppendWhole(read) : read;
    return this.commitProjected([consumer], batch);
  }

  /** Applies `batch` to every one of `projectors` in one transaction with their new checkpoints. */
  private commitProjected(projectors: readonly Projector[], batch: readonly RecordedEvent[]): Promise<number> {
    return this.commit(projectors, batch, async (position) => {
      const prepared = await Promise.all(projectors.map((p) => p.prepare?.(batch, this.store)));
      await this.database.db.transaction().execute(async (trx) => {
        for (const [i, projector] of projectors.entries()) {
          if (projector.applyBatch) await projector.applyBatch(trx, batch, prepared[i]);
          else for (const event of batch) await projector.apply!(trx, event, prepared[i]);
          await this.moveCheckpoint(trx, projector.name, this.checkpoints.get(projector.name), position);
        }
      });
    });
  }

  /** Reacts to each event of `batch`, then moves the reactor's checkpoint. */
  private commitReactions(reactor: Reactor, batch: readonly RecordedEvent[]): Promise<number> {
    return this.commit([reactor], batch, async (position) => {
      for (const event of batch) await reactor.react(event);
      await this.moveCheckpoint(this.db, reactor.name, this.checkpoints.get(reactor.name), position);
    });
  }

  /**
   * Runs `write`, which handles `batch` (the events right after each
   * consumer's checkpoint) and moves their checkpoints to its last position;
   * returns the batch's length, or 0 when another instance had moved one.
   */
  private async commit(
    consumers: readonly Consumer[],
    batch: readonly RecordedEvent[],
    write: (position: string) => Promise<void>,
  ): Promise<number> {
    const position = batch.at(-1)!.position;
    try {
      await write(position);
    } catch (error) {
      if (!(error instanceof CheckpointMovedError)) throw error;
      // Another instance went on while this one had lost its lock: its rows
      // stand (a projector's batch rolled back), and this one goes on from there.
      this.options.onError?.(error.consumer, error);
      for (const c of consumers) this.checkpoints.set(c.name, await this.readCheckpoint(this.db, c.name));
      return 0;
    }
    for (const c of consumers) {
      this.checkpoints.set(c.name, position);
      this.options.onBatch?.(c.name, batch.length);
    }
    for (const notify of [...this.progressed]) notify();
    return batch.length;
  }

  /**
   * The events after `checkpoint`, read once for every consumer at that
   * checkpoint (they all wake on the same append). A consumer that joins a
   * read under way may miss an event appended after it began; so an empty
   * answer it joined is read again, its own, and a non-empty one is followed
   * by another read anyway (followAppends goes on while batches come).
   * Consumers must not change the events they are given.
   */
  private readShared(checkpoint: string | undefined, limit: number): Promise<RecordedEvent[]> {
    const key = `${checkpoint ?? ''}|${limit}`;
    const pending = this.reads.get(key);
    if (pending) return pending.then((batch) => (batch.length > 0 ? batch : this.store.readAll(checkpoint, limit)));
    const reading = this.store.readAll(checkpoint, limit).finally(() => this.reads.delete(key));
    this.reads.set(key, reading);
    return reading;
  }

  /**
   * A full batch may end inside an append, e.g. between a payment's invoice
   * and its address: it is extended with the events right after it of the
   * same stream, so that a read model never shows half of one append (an
   * append's events are contiguous in the log).
   */
  private async withLastAppendWhole(read: readonly RecordedEvent[]): Promise<RecordedEvent[]> {
    const batch = [...read]; // the read is shared with other consumers
    const stream = batch.at(-1)!.streamId;
    for (;;) {
      const next = await this.store.readAll(batch.at(-1)!.position, 16);
      const other = next.findIndex((event) => event.streamId !== stream);
      batch.push(...(other === -1 ? next : next.slice(0, other)));
      if (other !== -1 || next.length === 0) return batch;
    }
  }

  /**
   * Compare-and-set: the checkpoint moves from `from` to `to` only if it is
   * still at `from`. The advisory lock keeps one instance active; this keeps
   * an instance that lost it unnoticed from moving the checkpoint back.
   */
  private async moveCheckpoint(db: Kysely<any>, name: string, from: string | undefined, to: string): Promise<void> {
    const checkpoints = db as Kysely<CheckpointTables>;
    const updatedAt = new Date();
    const moved =
      from === undefined
        ? (
            await checkpoints
              .insertInto('projection_checkpoints')
              .values({ name, position: to, updated_at: updatedAt })
              .onConflict((oc) => oc.column('name').doNothing())
              .executeTakeFirst()
          ).numInsertedOrUpdatedRows
        : (
            await checkpoints
              .updateTable('projection_checkpoints')
              .set({ position: to, updated_at: updatedAt })
              .where('name', '=', name)
              .where('position', '=', from)
              .executeTakeFirst()
          ).numUpdatedRows;
    if (!moved) throw new CheckpointMovedError(name);
  }

  private async readCheckpoint(db: Kysely<CheckpointTables>, name: string): Promise<string | undefined> {
    const row = await db
      .selectFrom('projection_checkpoints')
      .select('position')
      .where('name', '=', name)
      .executeTakeFirst();
    return row?.position;
  }
}

/** The read models had not reached a position when the wait for it ended. */
export class ReadModelsBehindError extends Error {
  constructor(position: string, timeoutMs: number) {
    super(`read models did not reach position ${position} in ${timeoutMs} ms`);
    this.name = 'ReadModelsBehindError';
  }
}

/** The checkpoint was not where this instance left it: another instance moved it. */
export class CheckpointMovedError extends Error {
  constructor(readonly consumer: string) {
    super(`the checkpoint of ${consumer} was moved by another instance; going on from there`);
    this.name = 'CheckpointMovedError';
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done);
  });
}
