// The payout engine: the one way money leaves the service's addresses
// (DESIGN.md, "Payouts"): settlements, and refunds (from a deposit or a
// merchant's refund wallet).
//
// It owns its work queue, `payout_queue`: one row per payout with the time it
// is next due, kept by a projector of the payout events (written in the same
// transaction as its checkpoint, so a crash replays at most one batch) and
// pushed later by the worker after each look that changed nothing. The worker
// takes what is due, oldest due first, so a payout that cannot progress moves
// to the back instead of holding up the rest; it reads no read model and so
// never waits for a projector to catch up.
import { sql, type Kysely, type Migration } from 'kysely';
import {
  PayoutNotFinalError,
  PayoutRefusedError,
  PlatformFeeUncollectedError,
  TransactionRejectedError,
  type ChainAdapter,
  type PreparedTransaction,
  type TransactionStatus,
} from '../adapters/chains/port.ts';
import type { Clock } from '../adapters/clock.ts';
import { failpoint } from '../adapters/failpoints.ts';
import type { RecordedEvent } from '../adapters/event-store/port.ts';
import type { AdvisoryLock, SqlDatabase } from '../adapters/sql/database.ts';
import { ddl, migrate } from '../adapters/sql/migrate.ts';
import type { ChainName } from '../domain/catalogue.ts';
import type { MerchantEvent } from '../domain/merchant.ts';
import type { MarkCompleted, PayoutAttempts } from '../domain/payout-attempt.ts';
import type { RefundEvent } from '../domain/refund.ts';
import type { SettlementEvent, SettlementFailureReason } from '../domain/settlement.ts';
import type { Projector } from '../adapters/event-store/followers.ts';
import { StatusesAtPassStart, type StatusLookup } from './pass-statuses.ts';
import { Periodic, type PeriodicOptions } from './periodic.ts';
import { streams } from '../domain/streams.ts';

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

export const queueMigrations: Record<string, Migration> = {
  '0001_payout_queue': ddl(
    `create table payout_queue (
      payout_id uuid primary key,
      kind text not null,
      merchant_id uuid not null,
      chain text not null,
      state text not null,
      due_at timestamptz not null,
      looks integer not null default 0,
      version integer not null default 0
    )`,
    `create index payout_queue_due on payout_queue (state, due_at)`,
  ),
};

export async function migratePayoutQueue(database: SqlDatabase): Promise<void> {
  await migrate(database.db, 'payout_migrations', queueMigrations);
}

/**
 * The ids of a merchant's payouts of `kind` on `chain` still in the queue:
 * every one approved and not yet completed, canceled or expired (a payout is
 * queued before the worker can prepare it, and leaves only at its end).
 */
export async function queuedPayouts(
  database: SqlDatabase,
  kind: string,
  merchantId: string,
  chain: string,
): Promise<string[]> {
  const rows = await (database.db as Kysely<QueueTables>)
    .selectFrom('payout_queue')
    .select('payout_id')
    .where('kind', '=', kind)
    .where('merchant_id', '=', merchantId)
    .where('chain', '=', chain)
    .execute();
  return rows.map((r) => r.payout_id);
}

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
    if (recorded.type === 'MerchantUpdated') {
      const { changes } = recorded.data as Extract<MerchantEvent, { type: 'MerchantUpdated' }>['data'];
      const chains = Object.keys(changes.settlementWallets ?? {});
      if (chains.length === 0) return;
      await trx
        .updateTable('payout_queue')
        .set({ due_at: recorded.recordedAt, looks: 0, version: sql`version + 1` })
        .where('merchant_id', '=', streams.merchant.idOf(recorded.streamId))
        .where('chain', 'in', chains)
        .where('state', '=', 'open')
        .execute();
      return;
    }
    if (streams.settlement.holds(recorded.streamId)) return applyPayoutEvent(trx, settlementQueueMoves, recorded);
    if (streams.refund.holds(recorded.streamId)) return applyPayoutEvent(trx, refundQueueMoves, recorded);
  },
};

/**
 * What a payout event does to the payout's row: `enqueue` a new payout, due at
 * once; `leave` at its end; `dueAfterFailure`; `lookNow` when it moved on;
 * `none` when it changes nothing the worker could do.
 */
type QueueMove = 'enqueue' | 'leave' | 'dueAfterFailure' | 'lookNow' | 'none';

/** The moves an event's data allows: a new payout names its merchant and chain, a failure its retry. */
type QueueMoveOf<Data> =
  | 'leave'
  | 'lookNow'
  | 'none'
  | (Data extends { merchantId: string; chain: string } ? 'enqueue' : never)
  | (Data extends { retryAt: string | null } ? 'dueAfterFailure' : never);

/** One kind of payout's queue rule: the move each event type makes, `otherwise` for the rest. */
interface PayoutQueueMoves<Event extends { type: string; data: unknown }> {
  kind: string;
  idOf: (streamId: string) => string;
  moves: { [Type in Event['type']]?: QueueMoveOf<Extract<Event, { type: Type }>['data']> };
  otherwise: QueueMove;
}

const settlementQueueMoves: PayoutQueueMoves<SettlementEvent> = {
  kind: 'settlement',
  idOf: streams.settlement.idOf,
  moves: {
    SettlementRequested: 'enqueue',
    SettlementCompleted: 'leave',
    SettlementRefundedInFull: 'leave',
    SettlementFailed: 'dueAfterFailure',
    // For a person; it changes nothing the worker could do.
    SettlementAttentionRaised: 'none',
    SettlementAttentionResolved: 'none',
  },
  // Anything else moved the payout on (re-priced, a wallet, a transaction, a retry): look now.
  otherwise: 'lookNow',
};

/** A refund is a payout from its approval to its end (refunds.md); before that there is nothing to pay. */
const refundQueueMoves: PayoutQueueMoves<RefundEvent> = {
  kind: 'refund',
  idOf: streams.refund.idOf,
  moves: {
    RefundApproved: 'enqueue',
    RefundCompleted: 'leave',
    RefundCanceled: 'leave',
    RefundExpired: 'leave',
    RefundFailed: 'dueAfterFailure',
    // The look that recorded it set when to ask the wallet again.
    RefundAwaitingFunds: 'none',
    RefundFunded: 'lookNow',
    RefundPayerChanged: 'lookNow',
    RefundTransactionPrepared: 'lookNow',
    RefundSubmitted: 'lookNow',
    RefundRetried: 'lookNow',
  },
  // Before its approval: not a payout yet.
  otherwise: 'none',
};

async function applyPayoutEvent<Event extends { type: string; data: unknown }>(
  trx: Kysely<QueueTables>,
  rule: PayoutQueueMoves<Event>,
  recorded: RecordedEvent,
) {
  const now = recorded.recordedAt;
  const payoutId = rule.idOf(recorded.streamId);
  // What each move reads of the data is there: QueueMoveOf allows it only on events that have it.
  const data = recorded.data as { merchantId: string; chain: string; retryAt: string | null };
  switch (rule.moves[recorded.type as Event['type']] ?? rule.otherwise) {
    case 'enqueue':
      await enqueue(trx, payoutId, rule.kind, data, now);
      return;
    case 'leave':
      await trx.deleteFrom('payout_queue').where('payout_id', '=', payoutId).execute();
      return;
    case 'dueAfterFailure':
      await dueAfterFailure(trx, payoutId, data.retryAt, now);
      return;
    case 'lookNow':
      await setDue(trx, payoutId, 'open', now);
      return;
    case 'none':
      return;
  }
}

/** A new payout, due at once (once only: a replayed event finds it there). */
function enqueue(
  trx: Kysely<QueueTables>,
  payoutId: string,
  kind: string,
  { merchantId, chain }: { merchantId: string; chain: string },
  now: Date,
) {
  return trx
    .insertInto('payout_queue')
    .values({
      payout_id: payoutId,
      kind,
      merchant_id: merchantId,
      chain,
      state: 'open',
      due_at: now,
      looks: 0,
      version: 0,
    })
    .onConflict((oc) => oc.column('payout_id').doNothing())
    .execute();
}

/** A failure is looked at again when its retry is due; a final one is parked until an event reopens it. */
const dueAfterFailure = (trx: Kysely<QueueTables>, payoutId: string, retryAt: string | null, now: Date) =>
  retryAt === null ? setDue(trx, payoutId, 'parked', now) : setDue(trx, payoutId, 'open', new Date(retryAt));

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

/** One kind of payout (a settlement, a refund): moves one payout as far as it can go now. */
export interface PayoutKind {
  readonly kind: string;
  /**
   * `lease` aborts once this instance no longer holds the payout's chain
   * (PayoutEngine): from then on another may be paying it, so nothing new is recorded.
   */
  advance(payoutId: string, lease: AbortSignal): Promise<PayoutLook>;
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
  /** How long a chain's payouts wait after another instance was found paying them before this one asks again. */
  leaseRetryMs?: number;
}

/**
 * Pays out what is due, each chain's payouts in one instance at a time: an
 * instance looks at a chain's payouts only while it holds that chain's lease
 * (a session-level advisory lock, docs/operations.md), since two at once
 * could prepare one payout twice, or give two refunds from one refund wallet
 * the same coin (each choosing before the other's record is written). The
 * lease is checked before each look, and again before a look records the
 * transaction it prepared (advancePayout), preparing being the one step
 * that can outlast the lease's margin.
 */
export class PayoutEngine extends Periodic {
  private readonly db: Kysely<QueueTables>;
  private readonly leases = new Map<ChainName, AdvisoryLock>();
  /** When, by the wall clock, to ask again for a chain's lease another instance held. */
  private readonly askAgainAt = new Map<ChainName, number>();

  constructor(
    private readonly database: SqlDatabase,
    private readonly kinds: readonly PayoutKind[],
    private readonly chains: readonly ChainName[],
    private readonly clock: Clock,
    private readonly options: PayoutEngineOptions = {},
  ) {
    super(options);
    this.db = database.db as Kysely<QueueTables>;
  }

  /** Looks at every payout due now, each chain's in due order and the chains side by side. */
  async pass(): Promise<number> {
    const limit = this.options.batch ?? 50;
    const looked = await Promise.all(
      this.chains.map(async (chain) => {
        const lease = await this.leaseOn(chain);
        if (!lease) return 0;
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
        let done = 0;
        for (const row of due) {
          // Lost (its session dropped or stopped answering): another instance may be paying these now.
          if (lease.lost.aborted) break;
          await this.look(row, lease.lost);
          done++;
        }
        return done;
      }),
    );
    return looked.reduce((a, b) => a + b, 0);
  }

  /** Stops after the pass under way, and gives up the leases for another instance to take at once. */
  override async stop(): Promise<void> {
    await super.stop();
    const held = [...this.leases.values()];
    this.leases.clear();
    await Promise.all(held.map((lease) => lease.release()));
  }

  /** This instance's lease on `chain`'s payouts, kept from pass to pass; undefined while another holds it. */
  private async leaseOn(chain: ChainName): Promise<AdvisoryLock | undefined> {
    const held = this.leases.get(chain);
    if (held && !held.lost.aborted) return held;
    if (held) {
      this.leases.delete(chain);
      await held.release();
    }
    if ((this.askAgainAt.get(chain) ?? 0) > Date.now()) return undefined;
    const lease = await this.database.tryAdvisoryLock(`payouts:${chain}`);
    if (lease) this.leases.set(chain, lease);
    else this.askAgainAt.set(chain, Date.now() + (this.options.leaseRetryMs ?? 5_000));
    return lease;
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

  private async look(
    row: Pick<PayoutQueueTable, 'payout_id' | 'kind' | 'looks' | 'version'>,
    lease: AbortSignal,
  ): Promise<void> {
    const kind = this.kinds.find((k) => k.kind === row.kind);
    let next: number | null;
    try {
      if (!kind) throw new Error(`no payout kind ${row.kind}`);
      next = (await kind.advance(row.payout_id, lease)).lookAgainInMs;
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

/** How soon a payout on its way is looked at again for its confirmations. */
export const CONFIRMATION_LOOK_MS = 2_000;
/** Growing delays between attempts of a failed payout. */
export const RETRY_DELAYS_MS = [10_000, 60_000, 5 * 60_000, 30 * 60_000, 2 * 3600_000, 6 * 3600_000];

/** Where a payout (a settlement, a refund) stands, in the words its steps need. */
export interface PayoutStanding extends Pick<PayoutAttempts, 'preparedHashes' | 'prepared' | 'txHash' | 'retryAt'> {
  id: string;
  chain: string;
  /** `sending`: this attempt's transaction is not broadcast yet; `done`: nothing more to do. */
  phase: 'sending' | 'submitted' | 'failed' | 'done';
}

/** What a kind of payout records at each step, on its own stream. */
export interface PayoutRecorder<P extends PayoutStanding> extends PayoutSteps<P> {
  /** The kind's name, also the prefix of its failpoints. */
  readonly kind: string;
  load(id: string): Promise<P | undefined>;
  /**
   * Prices and prepares the current attempt's transaction, not yet recorded
   * (a refusal is recorded as a failure); `waitMs` when it cannot now (null:
   * not until an event says otherwise).
   */
  prepare(payout: P, chain: ChainAdapter): Promise<{ transaction: PreparedTransaction } | { waitMs: number | null }>;
  /**
   * Records `transaction` as the attempt's. Only what the stream then holds
   * is ever sent: null when that is not it to send now (another process
   * recorded its own first, or the payout moved on).
   */
  record(payout: P, transaction: PreparedTransaction): Promise<PreparedTransaction | null>;
}

/** The steps every kind records alike (see recordedSteps). */
export interface PayoutSteps<P> {
  markSubmitted(payout: P, txHash: string): Promise<unknown>;
  /** `platformFeeUncollected`: the chain's words for a platform fee that never reached the treasury. */
  markCompleted(
    payout: P,
    txHash: string,
    onChain: TransactionStatus,
    platformFeeUncollected?: string,
  ): Promise<unknown>;
  retry(payout: P): Promise<unknown>;
  recordFailure(payout: P, error: unknown): Promise<unknown>;
}

/** The commands every payout's decider takes alike for these steps (see domain/payout-attempt.ts). */
type PayoutStepCommand<Code> =
  | { type: 'MarkSubmitted'; txHash: string; now: string }
  | MarkCompleted
  | { type: 'Retry'; now: string }
  | { type: 'MarkFailed'; reason: string; code: Code; rejected: boolean; retryAt: string | null; now: string };

/**
 * The steps every kind of payout records alike, each a command `act` sends
 * to the payout's own stream. A failure is recorded in words, by its code
 * (`codeOf`: those the kind knows), whether the chain refused the
 * transaction for good, and when the next attempt is due.
 */
export function recordedSteps<P extends Pick<PayoutStanding, 'id'> & Pick<PayoutAttempts, 'attempt'>, Code>(
  act: (id: string, command: PayoutStepCommand<Code>) => Promise<unknown>,
  clock: () => Clock,
  codeOf: (error: unknown) => Code & SettlementFailureReason,
): PayoutSteps<P> {
  const now = () => clock().now().toISOString();
  return {
    markSubmitted: (p, txHash) => act(p.id, { type: 'MarkSubmitted', txHash, now: now() }),
    markCompleted: (p, txHash, { blockNumber, confirmations }, platformFeeUncollected) =>
      act(p.id, {
        type: 'MarkCompleted',
        txHash,
        blockNumber,
        confirmations,
        ...(platformFeeUncollected && { platformFeeUncollected }),
        now: now(),
      }),
    retry: (p) => act(p.id, { type: 'Retry', now: now() }),
    recordFailure: (p, error) => {
      const code = codeOf(error);
      return act(p.id, {
        type: 'MarkFailed',
        reason: error instanceof Error ? error.message : String(error),
        code,
        rejected: error instanceof TransactionRejectedError,
        retryAt: retryAtAfter(code, p.attempt, clock()),
        now: now(),
      });
    },
  };
}

/**
 * One look at a payout, the same for every kind: if any transaction it ever
 * prepared is on the chain, that is the payout, followed to its
 * confirmations; a failure is retried when due (the same transaction again
 * after an unknown outcome); a broadcast one not on the chain is sent again;
 * otherwise the attempt's transaction is prepared, recorded, then sent.
 */
async function advancePayout<P extends PayoutStanding>(
  id: string,
  recorder: PayoutRecorder<P>,
  chains: ReadonlyMap<ChainName, ChainAdapter>,
  requiredConfirmations: Record<ChainName, number>,
  clock: Clock,
  /** Aborted once this instance no longer holds the chain's payouts (PayoutEngine's lease). */
  lease: AbortSignal,
  /** Where a transaction stands: asked of the chain, or answered from the pass's one question (pass-statuses.ts). */
  statusOf: StatusLookup = (txHash, chain) => chain.transactionStatus(txHash),
): Promise<PayoutLook> {
  const payout = await recorder.load(id);
  if (!payout || payout.phase === 'done') return { lookAgainInMs: null };
  const chain = chains.get(payout.chain as ChainName);
  if (!chain) return { lookAgainInMs: 60_000 };

  for (const txHash of payout.preparedHashes) {
    const onChain = await statusOf(txHash, chain);
    if (!onChain) continue;
    if (payout.phase !== 'submitted' || payout.txHash !== txHash) {
      if (payout.phase === 'failed') await recorder.retry(payout);
      await recorder.markSubmitted(payout, txHash);
    }
    const required = requiredConfirmations[payout.chain as ChainName];
    if (onChain.confirmations >= required) {
      // Sent once more, which the chain takes as a repeat: what a payout leaves to do once it is
      // final (Tron's platform fee, a token payout's leftover TRX back) is done even by a process
      // that restarted since, which learns of it only now (PayoutNotFinalError until it is done):
      // the payout completes only after it. Should it fail, the look is tried again. A platform fee
      // the chain could not collect completes it all the same (the merchant's money is out), with that said.
      let feeUncollected: string | undefined;
      if (payout.prepared?.txHash === txHash) {
        try {
          await chain.broadcast(payout.prepared);
        } catch (error) {
          if (error instanceof PayoutNotFinalError) return { lookAgainInMs: CONFIRMATION_LOOK_MS };
          if (!(error instanceof PlatformFeeUncollectedError)) throw error;
          feeUncollected = error.message;
        }
      }
      await recorder.markCompleted(payout, txHash, onChain, feeUncollected);
      return { lookAgainInMs: null };
    }
    return { lookAgainInMs: CONFIRMATION_LOOK_MS };
  }

  if (payout.phase === 'failed') {
    if (payout.retryAt === null) return { lookAgainInMs: null }; // final: only an event reopens it
    const wait = Date.parse(payout.retryAt) - clock.now().getTime();
    if (wait > 0) return { lookAgainInMs: wait };
    await recorder.retry(payout);
    return advancePayout(id, recorder, chains, requiredConfirmations, clock, lease, statusOf);
  }
  if (payout.phase === 'submitted') {
    // Broadcast but not on the chain (dropped, or removed by a reorg): send the same transaction again.
    if (payout.prepared) await broadcastOrRecord(payout, payout.prepared, chain, recorder);
    return { lookAgainInMs: CONFIRMATION_LOOK_MS };
  }
  let prepared = payout.prepared;
  if (!prepared) {
    const made = await recorder.prepare(payout, chain);
    if ('waitMs' in made) return { lookAgainInMs: made.waitMs };
    // Preparing can outlast the lease's margin (a node slow to answer, a top-up waited for), and
    // the instance that took the chain over may have chosen the same coins meanwhile: its payouts
    // are its own now. Dropped unrecorded, this transaction is never sent.
    if (lease.aborted) return { lookAgainInMs: 0 };
    const recorded = await recorder.record(payout, made.transaction);
    if (!recorded) return { lookAgainInMs: 0 };
    prepared = recorded;
    failpoint(`${recorder.kind}:after-prepare`);
  }
  if (await broadcastOrRecord(payout, prepared, chain, recorder)) {
    failpoint(`${recorder.kind}:after-broadcast`);
    await recorder.markSubmitted(payout, prepared.txHash);
    failpoint('payout:after-submitted');
  }
  return { lookAgainInMs: CONFIRMATION_LOOK_MS };
}

/** What every kind's looks need (advancePayout). */
export interface PayoutLookDeps {
  clock: Clock;
  chains: ReadonlyMap<ChainName, ChainAdapter>;
  requiredConfirmations: Record<ChainName, number>;
}

/**
 * A kind of payout that records its steps on its own stream (its `recorder`)
 * and looks at each payout by advancePayout, the one place where a pass's
 * transactions are asked of each chain at once before the looks
 * (pass-statuses.ts) and each look takes its payout's answer.
 */
export abstract class RecordedPayoutKind<P extends PayoutStanding, D extends PayoutLookDeps> implements PayoutKind {
  abstract readonly kind: string;
  protected abstract readonly recorder: PayoutRecorder<P>;
  /** Where each payout's prepared transactions stood when the pass began, from one question per chain. */
  private readonly statuses: StatusesAtPassStart;

  constructor(protected readonly deps: D) {
    this.statuses = new StatusesAtPassStart(deps.chains);
  }

  /** Asks once per chain about the transactions of the payouts among `ids` still to be paid. */
  async beforeLooks(ids: readonly string[]): Promise<void> {
    const payouts: P[] = [];
    for (const id of ids) {
      const payout = await this.recorder.load(id);
      if (payout && payout.phase !== 'done') payouts.push(payout);
    }
    await this.statuses.ask(payouts);
  }

  advance(payoutId: string, lease: AbortSignal): Promise<PayoutLook> {
    const { chains, requiredConfirmations, clock } = this.deps;
    const statusOf = this.statuses.take(payoutId);
    return advancePayout(payoutId, this.recorder, chains, requiredConfirmations, clock, lease, statusOf);
  }

  protected now(): string {
    return this.deps.clock.now().toISOString();
  }
}

/** True when the chain took the transaction; a failure is recorded with the time of the next attempt. */
async function broadcastOrRecord<P extends PayoutStanding>(
  payout: P,
  prepared: PreparedTransaction,
  chain: ChainAdapter,
  recorder: PayoutRecorder<P>,
): Promise<boolean> {
  try {
    await chain.broadcast(prepared);
    return true;
  } catch (error) {
    // On the chain already: the look that finds it final completes it.
    if (error instanceof PayoutNotFinalError || error instanceof PlatformFeeUncollectedError) return true;
    await recorder.recordFailure(payout, error);
    return false;
  }
}

/** The failure code of an error from preparing or sending a payout. */
export function failureCodeOf(error: unknown): SettlementFailureReason {
  if (error instanceof PayoutRefusedError) return error.reason;
  if (error instanceof TransactionRejectedError) return 'rejected_by_network';
  return 'node_unavailable';
}

/** When the next attempt after a failure of `attempt` is due, or null when no attempt changes it. */
export function retryAtAfter(code: SettlementFailureReason, attempt: number, clock: Clock): string | null {
  // Too little left after the chain's own costs: no attempt changes that.
  if (code === 'fees_exceed_amount') return null;
  const delay = RETRY_DELAYS_MS[Math.min(attempt - 1, RETRY_DELAYS_MS.length - 1)]!;
  return new Date(clock.now().getTime() + delay).toISOString();
}
