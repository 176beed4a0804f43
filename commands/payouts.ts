// The payout engine: the one way money leaves a deposit address (DESIGN.md,
// "Payouts"). Settlement is its first user; refunds will be its second.
//
// It owns its work queue, `payout_queue`: one row per payout with the time it
// is next due, kept by a projector of the payout events (written in the same
// transaction as its checkpoint, so a crash replays at most one batch) and
// pushed later by the worker after each look that changed nothing. The worker
// takes what is due, oldest due first, so a payout that cannot progress moves
// to the back instead of holding up the rest; it reads no read model and so
// never waits for a projector to catch up.
import { sql, type Kysely, type Migration } from 'kysely';
import type { Clock } from '../adapters/clock.ts';
import type { RecordedEvent } from '../adapters/event-store/port.ts';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { migrate } from '../adapters/sql/migrate.ts';
import type { ChainName } from '../domain/catalogue.ts';
import type { MerchantEvent } from '../domain/merchant.ts';
import type { SettlementEvent } from '../domain/settlement.ts';
import type { Projector } from '../projections/engine.ts';
import { Periodic, type PeriodicOptions } from './periodic.ts';

export interface PayoutQueueTable {
  payout_id: string;
  kind: string;
  merchant_id: string;
  chain: string;
  /** `open`: the worker looks at it when due; `parked`: nothing to do until an event changes it. */
  state: 'open' | 'parked';
  due_at: Date;
  /** Looks that changed nothing, for the back-off between them. */
  looks: number;
  /** Moved by every write of the projector: the worker's own writes give way to an event's. */
  version: number;
}

interface QueueTables {
  payout_queue: PayoutQueueTable;
}

const queueMigrations: Record<string, Migration> = {
  '0001_payout_queue': {
    async up(db) {
      await db.schema
        .createTable('payout_queue')
        .addColumn('payout_id', 'uuid', (c) => c.primaryKey())
        .addColumn('kind', 'text', (c) => c.notNull())
        .addColumn('merchant_id', 'uuid', (c) => c.notNull())
        .addColumn('chain', 'text', (c) => c.notNull())
        .addColumn('state', 'text', (c) => c.notNull())
        .addColumn('due_at', 'timestamptz', (c) => c.notNull())
        .addColumn('looks', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('version', 'integer', (c) => c.notNull().defaultTo(0))
        .execute();
      await db.schema.createIndex('payout_queue_due').on('payout_queue').columns(['state', 'due_at']).execute();
    },
  },
};

export async function migratePayoutQueue(database: SqlDatabase): Promise<void> {
  await migrate(database.db, 'payout_migrations', queueMigrations);
}

const settlementIdOfStream = (streamId: string) => streamId.slice('settlement-'.length);

/**
 * Keeps `payout_queue` as the payout events say: a new payout is due at
 * once, a failure when its retry is, a final failure is parked, a completed
 * payout leaves; a merchant who sets a wallet makes their waiting payouts on
 * that chain due at once.
 */
// "Due now" is the event's recording time (wall time): the business clock the
// worker compares with is the wall clock, or the sandbox's, which only runs ahead of it.
export const payoutQueueProjector: Projector = {
  name: 'payout-queue',
  tables: ['payout_queue'],
  async apply(trx: Kysely<QueueTables>, recorded: RecordedEvent) {
    const now = recorded.recordedAt;
    if (recorded.type === 'MerchantUpdated') {
      const { changes } = recorded.data as Extract<MerchantEvent, { type: 'MerchantUpdated' }>['data'];
      const chains = Object.keys(changes.settlementWallets ?? {});
      if (chains.length === 0) return;
      await trx
        .updateTable('payout_queue')
        .set({ due_at: now, looks: 0, version: sql`version + 1` })
        .where('merchant_id', '=', recorded.streamId.slice('merchant-'.length))
        .where('chain', 'in', chains)
        .where('state', '=', 'open')
        .execute();
      return;
    }
    if (!recorded.streamId.startsWith('settlement-')) return;
    const payoutId = settlementIdOfStream(recorded.streamId);
    const event = { type: recorded.type, data: recorded.data } as SettlementEvent;
    switch (event.type) {
      case 'SettlementRequested':
        await trx
          .insertInto('payout_queue')
          .values({
            payout_id: payoutId,
            kind: 'settlement',
            merchant_id: event.data.merchantId,
            chain: event.data.chain,
            state: 'open',
            due_at: now,
            looks: 0,
            version: 0,
          })
          .onConflict((oc) => oc.column('payout_id').doNothing())
          .execute();
        return;
      case 'SettlementCompleted':
        await trx.deleteFrom('payout_queue').where('payout_id', '=', payoutId).execute();
        return;
      case 'SettlementFailed': {
        const { retryAt } = event.data;
        await setDue(trx, payoutId, retryAt === null ? 'parked' : 'open', retryAt === null ? now : new Date(retryAt));
        return;
      }
      case 'SettlementAttentionRaised':
      case 'SettlementAttentionResolved':
        return; // for a person; it changes nothing the worker could do
      default:
        // Anything else moved the payout on (re-priced, a wallet, a transaction, a retry): look now.
        await setDue(trx, payoutId, 'open', now);
    }
  },
};

function setDue(trx: Kysely<QueueTables>, payoutId: string, state: 'open' | 'parked', due: Date) {
  return trx
    .updateTable('payout_queue')
    .set({ state, due_at: due, looks: 0, version: sql`version + 1` })
    .where('payout_id', '=', payoutId)
    .execute();
}

/** What one look at a payout found: when to look again, if nothing recorded changes it first. */
export interface PayoutLook {
  /** null: nothing to do until an event says otherwise. */
  lookAgainInMs: number | null;
}

/** One kind of payout (a settlement; later a refund): moves one payout as far as it can go now. */
export interface PayoutKind {
  readonly kind: string;
  advance(payoutId: string): Promise<PayoutLook>;
  /**
   * The payouts of this kind the engine is about to look at, one chain's in
   * one pass, before the first look: a kind may ask the chain about all of
   * them at once here and answer its looks from that. A failure here only
   * costs the saving: each look then asks for itself.
   */
  beforeLooks?(payoutIds: readonly string[]): Promise<void>;
}

/** Growing pauses between looks that failed with no event to show for it (a node down). */
const LOOK_BACKOFF_MS = [2_000, 10_000, 30_000, 60_000, 5 * 60_000];

export interface PayoutEngineOptions extends PeriodicOptions {
  /** Payouts looked at per pass, per chain. */
  batch?: number;
}

export class PayoutEngine {
  private readonly periodic: Periodic;
  private readonly db: Kysely<QueueTables>;

  constructor(
    database: SqlDatabase,
    private readonly kinds: readonly PayoutKind[],
    private readonly chains: readonly ChainName[],
    private readonly clock: Clock,
    private readonly options: PayoutEngineOptions = {},
  ) {
    this.db = database.db as Kysely<QueueTables>;
    this.periodic = new Periodic(() => this.pass(), options);
  }

  start() {
    this.periodic.start();
  }

  async stop() {
    await this.periodic.stop();
  }

  poke() {
    this.periodic.poke();
  }

  /** Looks at every payout due now, each chain's in due order and the chains side by side. */
  async pass(): Promise<number> {
    const limit = this.options.batch ?? 50;
    const looked = await Promise.all(
      this.chains.map(async (chain) => {
        const due = await this.db
          .selectFrom('payout_queue')
          .select(['payout_id', 'kind', 'looks', 'version'])
          .where('state', '=', 'open')
          .where('chain', '=', chain)
          .where('due_at', '<=', this.clock.now())
          .orderBy('due_at')
          .limit(limit)
          .execute();
        await this.beforeLooks(due);
        for (const row of due) await this.look(row);
        return due.length;
      }),
    );
    return looked.reduce((a, b) => a + b, 0);
  }

  /** Tells each kind which of its payouts the looks that follow are for. */
  private async beforeLooks(due: readonly Pick<PayoutQueueTable, 'payout_id' | 'kind'>[]): Promise<void> {
    for (const kind of this.kinds) {
      const ids = due.filter((row) => row.kind === kind.kind).map((row) => row.payout_id);
      if (ids.length === 0 || !kind.beforeLooks) continue;
      try {
        await kind.beforeLooks(ids);
      } catch (error) {
        this.options.onError?.(error);
      }
    }
  }

  private async look(row: Pick<PayoutQueueTable, 'payout_id' | 'kind' | 'looks' | 'version'>): Promise<void> {
    const kind = this.kinds.find((k) => k.kind === row.kind);
    let next: number | null;
    try {
      if (!kind) throw new Error(`no payout kind ${row.kind}`);
      next = (await kind.advance(row.payout_id)).lookAgainInMs;
    } catch (error) {
      this.options.onError?.(error);
      next = LOOK_BACKOFF_MS[Math.min(row.looks, LOOK_BACKOFF_MS.length - 1)]!;
    }
    // Only if no event moved it meanwhile: the projector's due time wins.
    await this.db
      .updateTable('payout_queue')
      .set({
        ...(next === null
          ? { state: 'parked' as const }
          : { due_at: new Date(this.clock.now().getTime() + next), looks: row.looks + 1 }),
      })
      .where('payout_id', '=', row.payout_id)
      .where('version', '=', row.version)
      .execute();
  }
}
