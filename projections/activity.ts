// Projects the events a person, the operator or an API key asked for (those
// whose metadata names an `actor`, commands/handle.ts) into `activity`: one
// row per event with whose merchant it is, for the dashboard's Activity page
// (dashboard.md: "who cancelled or refunded ... in an activity page"). What
// the service did by itself names no actor and is not here.
import { sql, type Kysely } from 'kysely';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import type { Actor } from '../commands/handle.ts';
import { upsertRows } from './batch.ts';
import type { Projector } from '../adapters/event-store/followers.ts';
import { newestFirst, type Page } from './paging.ts';
import type { ActivityTable, ReadModelTables } from './schema.ts';

const actorOf = (event: RecordedEvent) => event.metadata.actor as Actor | undefined;
const merchantIdIn = (data: unknown) => (data as { merchantId?: unknown } | null)?.merchantId;

/**
 * Whose merchant a stream is: its first event names it (a merchant's, a
 * user's, a key's, an invoice's, a refund's…), except a merchant's own stream,
 * named by it. Remembered, as it never changes (at most `capacity` streams).
 */
class StreamMerchants {
  private readonly known = new Map<string, string | undefined>();
  constructor(private readonly capacity = 10_000) {}

  async of(event: RecordedEvent, batch: readonly RecordedEvent[], store: EventStore): Promise<string | undefined> {
    if (event.streamId.startsWith('merchant-')) return event.streamId.slice('merchant-'.length);
    if (this.known.has(event.streamId)) return this.known.get(event.streamId);
    const first =
      batch.find((e) => e.streamId === event.streamId && e.revision === 0) ??
      (await store.readStream(event.streamId))[0];
    const id = merchantIdIn(first?.data);
    const merchantId = typeof id === 'string' ? id : undefined;
    this.known.set(event.streamId, merchantId);
    if (this.known.size > this.capacity) this.known.delete(this.known.keys().next().value!);
    return merchantId;
  }
}
const streamMerchants = new WeakMap<EventStore, StreamMerchants>();

export const activityProjector: Projector<ActivityTable[]> = {
  name: 'activity',
  tables: ['activity'],

  async prepare(batch, store) {
    let merchants = streamMerchants.get(store);
    if (!merchants) streamMerchants.set(store, (merchants = new StreamMerchants()));
    const rows: ActivityTable[] = [];
    for (const event of batch) {
      const actor = actorOf(event);
      if (!actor) continue;
      const merchantId = await merchants.of(event, batch, store);
      if (merchantId) rows.push(activityRowOf(event, merchantId, actor));
    }
    return rows;
  },

  // An event's row never changes: a batch replayed after a crash keeps the rows it wrote.
  async applyBatch(trx: Kysely<ReadModelTables>, _batch, rows: ActivityTable[]) {
    await upsertRows(trx, 'activity', ['id'], rows, 'keep');
  },
};

/**
 * A word more on what an event changed, where its type alone does not say:
 * a merchant's changed fields (names only: a wallet or URL is read in
 * Settings), a user's new role.
 */
function detailOf(event: RecordedEvent): string | null {
  const data = event.data as { changes?: Record<string, unknown>; role?: string };
  if (event.type === 'MerchantUpdated') return Object.keys(data.changes ?? {}).join(', ') || null;
  if (event.type === 'UserRoleChanged') return data.role ?? null;
  return null;
}

function activityRowOf(event: RecordedEvent, merchantId: string, actor: Actor): ActivityTable {
  return {
    id: event.id,
    merchant_id: merchantId,
    stream_id: event.streamId,
    event_type: event.type,
    actor_type: actor.type,
    actor_id: actor.type === 'user' ? actor.userId : actor.type === 'api_key' ? actor.keyId : null,
    actor_email: actor.type === 'user' ? actor.email : null,
    detail: detailOf(event),
    created_at: event.recordedAt,
  };
}

/** A page of a merchant's activity, newest first, with each API key's prefix (the actor as people know it). */
export async function listActivity(db: Kysely<ReadModelTables>, merchantId: string, page: Page) {
  const { rows, total } = await newestFirst(db.selectFrom('activity').where('merchant_id', '=', merchantId), page);
  const keyIds = [...new Set(rows.filter((r) => r.actor_type === 'api_key').map((r) => r.actor_id!))];
  const keys =
    keyIds.length === 0
      ? []
      : await db
          .selectFrom('api_keys')
          .select(['id', 'key_prefix', 'name'])
          .where(sql.ref('id'), 'in', keyIds)
          .execute();
  const keyOf = new Map(keys.map((k) => [k.id, k]));
  return {
    rows: rows.map((r) => ({ ...r, key: r.actor_type === 'api_key' ? keyOf.get(r.actor_id!) : undefined })),
    total,
  };
}
