// The event store on SQL (PGlite or PostgreSQL), through kysely.
//
// Global order is (transaction id, position), not position alone: concurrent
// transactions commit out of order, so a reader trusting a sequence could pass
// a gap that a slower transaction fills later and lose that event for good.
// Each row stores its writer's pg_current_xact_id(); readers only take rows
// whose transaction is older than every transaction still running
// (pg_snapshot_xmin), which are all committed, and no new row can ever sort
// before them. The position string is "<transaction id>:<sequence>".
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { sql, type Generated, type Kysely, type Migration } from 'kysely';
import type { SqlDatabase } from '../sql/database.ts';
import { ddl, migrate } from '../sql/migrate.ts';
import { catchUpSubscription } from './catch-up.ts';
import {
  checkExpected,
  type AppendResult,
  type EventMetadata,
  type EventStore,
  type NewEvent,
  type RecordedEvent,
  type SubscribeOptions,
} from './port.ts';

interface EventStoreTables {
  es_events: {
    global_position: Generated<string>;
    transaction_id: Generated<string>;
    stream_id: string;
    stream_revision: number;
    event_id: string;
    event_type: string;
    data: unknown;
    metadata: unknown;
    recorded_at: Generated<Date>;
  };
  es_streams: { stream_id: string; revision: number };
}

export const NOTIFY_CHANNEL = 'es_events_appended';

export const eventStoreMigrations: Record<string, Migration> = {
  '0001_events': ddl(
    `create table es_events (
      global_position bigint generated always as identity primary key,
      transaction_id xid8 not null default pg_current_xact_id(),
      stream_id text not null,
      stream_revision integer not null,
      event_id uuid not null,
      event_type text not null,
      data jsonb not null,
      metadata jsonb not null,
      recorded_at timestamptz not null default now(),
      constraint es_events_stream_revision unique (stream_id, stream_revision),
      constraint es_events_stream_event_id unique (stream_id, event_id)
    )`,
    `create index es_events_global_order on es_events (transaction_id, global_position)`,
    `create table es_streams (
      stream_id text primary key,
      revision integer not null
    )`,
  ),
};

export class SqlEventStore implements EventStore {
  readonly name: string;
  private readonly db: Kysely<EventStoreTables>;
  private readonly appended = new EventEmitter().setMaxListeners(0);
  /** Signs this store's append notifications (see open). */
  private readonly id = randomUUID();
  private stopListening?: () => Promise<void>;

  private constructor(private readonly database: SqlDatabase) {
    this.name = database.engine;
    this.db = database.db as Kysely<EventStoreTables>;
  }

  static async open(database: SqlDatabase): Promise<SqlEventStore> {
    await migrate(database.db, 'es_migrations', eventStoreMigrations);
    const store = new SqlEventStore(database);
    if (database.engine === 'postgres') {
      // Appends from other processes arrive as notifications. This store's
      // own, signed with its id, were announced when they committed: a second
      // wake-up would send every consumer to read the log again for nothing.
      store.stopListening = await database.listen(NOTIFY_CHANNEL, (from) => {
        if (from !== store.id) store.appended.emit('appended');
      });
    }
    return store;
  }

  append: EventStore['append'] = async (streamId, events, expected, options = {}) => {
    if (expected === 'no_stream' && events.length > 0 && !options.beforeCommit) {
      const created = await this.appendToNewStream(streamId, events);
      if (created) return created;
      // The stream exists: the general path tells a repeated append from a conflict.
    }
    const result = await this.db.transaction().execute(async (trx) => {
      // Takes the stream's row lock (creating the row at -1 for a new stream),
      // so appends to one stream run one after another.
      const { revision: current } = await trx
        .insertInto('es_streams')
        .values({ stream_id: streamId, revision: -1 })
        .onConflict((oc) => oc.column('stream_id').doUpdateSet({ revision: sql`es_streams.revision` }))
        .returning('revision')
        .executeTakeFirstOrThrow();

      // A new stream (revision -1) has no event whose id could repeat.
      const ids = events.map((e) => e.id);
      const stored = new Set(
        ids.length === 0 || current < 0
          ? []
          : (
              await trx
                .selectFrom('es_events')
                .select('event_id')
                .where('stream_id', '=', streamId)
                .where('event_id', 'in', ids)
                .execute()
            ).map((r) => r.event_id),
      );
      const fresh = events.filter((e) => !stored.has(e.id));
      if (fresh.length === 0 && events.length > 0) {
        return { nextRevision: current, position: await lastPosition(trx, streamId), written: false };
      }
      checkExpected(streamId, expected, current);
      if (fresh.length === 0) return { nextRevision: current, position: '0:0', written: false };

      // The events, the stream's new revision and the wake-up of listeners
      // in one statement: each statement is a round trip, and an append is
      // on the path of every command.
      const nextRevision = current + fresh.length;
      const rows = await trx
        .with('inserted', (db) =>
          db
            .insertInto('es_events')
            .values(
              fresh.map((event, i) => ({
                stream_id: streamId,
                stream_revision: current + 1 + i,
                event_id: event.id,
                event_type: event.type,
                data: sql`${JSON.stringify(event.data ?? null)}::jsonb`,
                metadata: sql`${JSON.stringify(event.metadata ?? {})}::jsonb`,
              })),
            )
            .returning([
              'global_position',
              sql<string>`transaction_id::text || ':' || global_position::text`.as('position'),
            ]),
        )
        .with('moved', (db) =>
          db.updateTable('es_streams').set({ revision: nextRevision }).where('stream_id', '=', streamId),
        )
        .selectFrom('inserted')
        .select('position')
        .orderBy('global_position')
        // Notifications are sent at commit, one per channel and payload however often asked.
        .$if(this.database.engine === 'postgres', (qb) =>
          qb.select(sql`pg_notify(${NOTIFY_CHANNEL}, ${this.id})`.as('notified')),
        )
        .execute();
      await options.beforeCommit?.();
      return { nextRevision, position: rows.at(-1)!.position, written: true };
    });
    if (result.written) this.appended.emit('appended');
    return result;
  };

  /**
   * A new stream's first append as one statement, in a transaction of its
   * own: the stream's row, its events and the wake-up of listeners. Most
   * appends begin a stream (each payment is a new invoice's), and BEGIN, two
   * statements and COMMIT were four round trips. Writes nothing, and answers
   * undefined, when the stream exists (or is being created by another
   * transaction, which it waits for).
   */
  private async appendToNewStream(streamId: string, events: readonly NewEvent[]): Promise<AppendResult | undefined> {
    const rows = sql.join(
      events.map(
        (event, i) =>
          sql`(${i}::integer, ${event.id}::uuid, ${event.type}::text,
            ${JSON.stringify(event.data ?? null)}::jsonb, ${JSON.stringify(event.metadata ?? {})}::jsonb)`,
      ),
    );
    const notify = this.database.engine === 'postgres' ? sql`, pg_notify(${NOTIFY_CHANNEL}, ${this.id})` : sql``;
    const { rows: written } = await sql<{ position: string }>`
      with stream as (
        insert into es_streams (stream_id, revision) values (${streamId}, ${events.length - 1})
        on conflict (stream_id) do nothing
        returning stream_id
      ), inserted as (
        insert into es_events (stream_id, stream_revision, event_id, event_type, data, metadata)
        select stream.stream_id, e.revision, e.id, e.type, e.data, e.metadata
        from stream, (values ${rows}) as e (revision, id, type, data, metadata)
        returning global_position, transaction_id::text || ':' || global_position::text as position
      )
      select position${notify} from inserted order by global_position`.execute(this.db);
    if (written.length === 0) return undefined;
    this.appended.emit('appended');
    return { nextRevision: events.length - 1, position: written.at(-1)!.position, written: true };
  }

  async readStream(streamId: string, fromRevision = 0): Promise<RecordedEvent[]> {
    const rows = await this.selectEvents()
      .where('stream_id', '=', streamId)
      .where('stream_revision', '>=', fromRevision)
      .orderBy('stream_revision')
      .execute();
    return rows.map(toRecorded);
  }

  async lastRevision(streamId: string): Promise<number> {
    const row = await this.db
      .selectFrom('es_streams')
      .select('revision')
      .where('stream_id', '=', streamId)
      .executeTakeFirst();
    return row?.revision ?? -1;
  }

  async readAll(after: string | undefined, limit: number): Promise<RecordedEvent[]> {
    const [transactionId, sequence] = parsePosition(after);
    const rows = await this.selectEvents()
      .where(sql<boolean>`(transaction_id, global_position) > (${transactionId}::xid8, ${sequence}::bigint)`)
      .where(sql<boolean>`transaction_id < pg_snapshot_xmin(pg_current_snapshot())`)
      .orderBy('transaction_id')
      .orderBy('global_position')
      .limit(limit)
      .execute();
    return rows.map(toRecorded);
  }

  async headPosition(): Promise<string | undefined> {
    const row = await this.db
      .selectFrom('es_events')
      .select(sql<string>`transaction_id::text || ':' || global_position::text`.as('position'))
      .orderBy('transaction_id', 'desc')
      .orderBy('global_position', 'desc')
      .limit(1)
      .executeTakeFirst();
    return row?.position;
  }

  async countAfter(after: string | undefined, cap: number): Promise<number> {
    const [transactionId, sequence] = parsePosition(after);
    const row = await this.db
      .selectFrom((qb) =>
        qb
          .selectFrom('es_events')
          .select(sql`1`.as('one'))
          .where(sql<boolean>`(transaction_id, global_position) > (${transactionId}::xid8, ${sequence}::bigint)`)
          .where(sql<boolean>`transaction_id < pg_snapshot_xmin(pg_current_snapshot())`)
          .limit(cap)
          .as('pending'),
      )
      .select(sql<number>`count(*)::int`.as('count'))
      .executeTakeFirstOrThrow();
    return row.count;
  }

  comparePositions(a: string, b: string): number {
    const [ta, sa] = parsePosition(a);
    const [tb, sb] = parsePosition(b);
    return ta === tb ? compareBig(sa, sb) : compareBig(ta, tb);
  }

  onAppended(listener: () => void): () => void {
    this.appended.on('appended', listener);
    return () => this.appended.off('appended', listener);
  }

  subscribe(options: SubscribeOptions) {
    return catchUpSubscription(this, options, { pollMs: this.database.engine === 'postgres' ? 500 : 1000 });
  }

  async close(): Promise<void> {
    await this.stopListening?.();
  }

  private selectEvents() {
    return this.db
      .selectFrom('es_events')
      .select([
        'event_id',
        'event_type',
        'stream_id',
        'stream_revision',
        'recorded_at',
        'data',
        'metadata',
        sql<string>`transaction_id::text || ':' || global_position::text`.as('position'),
      ]);
  }
}

async function lastPosition(trx: Kysely<EventStoreTables>, streamId: string): Promise<string> {
  const row = await trx
    .selectFrom('es_events')
    .select(sql<string>`transaction_id::text || ':' || global_position::text`.as('position'))
    .where('stream_id', '=', streamId)
    .orderBy('stream_revision', 'desc')
    .limit(1)
    .executeTakeFirstOrThrow();
  return row.position;
}

function parsePosition(position: string | undefined): [string, string] {
  if (position === undefined || position === '') return ['0', '0'];
  const match = /^(\d+):(\d+)$/.exec(position);
  if (!match) throw new Error(`Not a position of the SQL event store: ${position}`);
  return [match[1]!, match[2]!];
}

function compareBig(a: string, b: string): number {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

function toRecorded(row: {
  event_id: string;
  event_type: string;
  stream_id: string;
  stream_revision: number;
  recorded_at: Date;
  data: unknown;
  metadata: unknown;
  position: string;
}): RecordedEvent {
  return {
    id: row.event_id,
    type: row.event_type,
    streamId: row.stream_id,
    revision: row.stream_revision,
    position: row.position,
    recordedAt: new Date(row.recorded_at),
    data: row.data,
    metadata: (row.metadata ?? {}) as EventMetadata,
  };
}
