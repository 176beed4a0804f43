// Follows one chain: new blocks become payments to watched deposit addresses,
// confirmations are counted from the head, and a reorg (another hash at a
// stored block's height) takes the payments of dropped blocks back. It trusts
// only positive evidence: a node that does not serve a block (a lagging
// backend behind a load balancer) or says it is stale is waited for, never
// taken for a reorg or for "nothing new on the chain".
// What it has processed is kept in `watched_blocks`, so a restart resumes
// where it stopped and backfills what it missed. A block the node no longer
// has (a pruned Bitcoin node, after a long stop) is passed by its hash and
// kept in `unread_blocks`: the operators' attention list names it, and it is
// read as soon as the node serves it again.
import { sql, type Kysely, type Migration } from 'kysely';
import { DomainError } from '../domain/decider.ts';
import { MEMPOOL_BLOCK_HASH } from '../domain/payment.ts';
import type { Clock } from '../adapters/clock.ts';
import { BlockPrunedError, type ChainAdapter, type ChainBlock, type ChainHead } from '../adapters/chains/port.ts';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { ddl, migrate } from '../adapters/sql/migrate.ts';
import type { ChainName } from '../domain/catalogue.ts';
import type { PaymentCommands, WatchedAddress } from './payments.ts';
import { watchListMigrations, type WatchListTables } from './watch-list.ts';

interface WatcherTables extends WatchListTables {
  watched_blocks: { chain: string; height: number; hash: string };
  unread_blocks: { chain: string; height: number; hash: string };
}

/** A table of blocks by chain and height: those read (`watched_blocks`), those passed unread (`unread_blocks`). */
const blocksTable = (table: string) =>
  ddl(`create table ${table} (
    chain text not null,
    height integer not null,
    hash text not null,
    constraint ${table}_pk primary key (chain, height)
  )`);

export const watcherMigrations: Record<string, Migration> = {
  '0001_watched_blocks': blocksTable('watched_blocks'),
  '0002_unread_blocks': blocksTable('unread_blocks'),
  ...watchListMigrations,
};

/** Blocks the node did not have that are asked for again in one step. */
const UNREAD_RETRIES_PER_STEP = 10;

export interface WatcherOptions {
  requiredConfirmations: number;
  /** How long an expired or cancelled invoice's addresses are still watched for late payments. */
  monitoringWindowMs: number;
  /** Blocks read per step, so a long backfill commits progress as it goes. */
  batchBlocks?: number;
  /** Blocks kept to find reorgs; deeper ones cannot be undone automatically. */
  reorgDepth?: number;
  pollMs?: number;
  /**
   * Waits until its to-do tables (watch-list.ts: the watched addresses and
   * payments) show every event committed so far. It must never miss a
   * payment to an address handed out before the block was read (the API
   * answers before the tables show a new address), nor count confirmations
   * for, or miss the reorg of, a payment it recorded but the tables do not
   * show yet.
   */
  caughtUp: () => Promise<void>;
  /**
   * Waits until every payment event committed so far is carried onto its
   * invoice (the payments-to-invoices reactor has passed it). "Watched
   * through" moves only after it: expiry must not expire an invoice whose
   * payment, seen in time, is not on it yet.
   */
  paymentsApplied: () => Promise<void>;
  onError?: (error: unknown) => void;
}

/**
 * How the watcher's chain stands, for operators: ok (at the node's head),
 * behind (blocks still to read, or the node does not serve them yet), stale
 * (the node says it is not at the chain's present), silent (it does not
 * answer). Anything but ok holds expiry on this chain.
 */
export interface WatcherCondition {
  chain: ChainName;
  state: 'ok' | 'behind' | 'stale' | 'silent';
  /** Business time since which it has been in this state. */
  since: Date;
  detail: string | null;
}

export class ChainWatcher {
  private readonly db: Kysely<WatcherTables>;
  private running?: Promise<void>;
  private stopping = new AbortController();
  private again = false;
  private wake?: () => void;
  private unlisten?: () => void;

  /**
   * Business time up to which every transfer on the chain has been seen and
   * carried onto its invoice; undefined until the first catch-up after start.
   * Expiry waits for it, so an invoice paid in time while the watcher was
   * behind (the service was down) is not expired before its payment is seen.
   */
  caughtUpAt: Date | undefined;

  private current: WatcherCondition;

  constructor(
    readonly chain: ChainAdapter,
    database: SqlDatabase,
    private readonly payments: PaymentCommands,
    private readonly clock: Clock,
    private readonly options: WatcherOptions,
  ) {
    this.db = database.db as Kysely<WatcherTables>;
    this.current = { chain: chain.chain, state: 'behind', since: clock.now(), detail: 'not caught up since start' };
  }

  /** The watcher's view of its chain as of its last step: cheap, read as often as wanted. */
  condition(): WatcherCondition {
    return { ...this.current };
  }

  private note(state: WatcherCondition['state'], detail: string | null = null): void {
    const since = state === this.current.state ? this.current.since : this.clock.now();
    this.current = { chain: this.name, state, since, detail };
  }

  /** A question to the node; one it does not answer makes the chain silent. */
  private async ask<T>(question: () => Promise<T>): Promise<T> {
    try {
      return await question();
    } catch (error) {
      this.note('silent', error instanceof Error ? error.message.slice(0, 200) : 'no answer');
      throw error;
    }
  }

  static migrate(database: SqlDatabase) {
    return migrate(database.db, 'watcher_migrations', watcherMigrations);
  }

  private get name(): ChainName {
    return this.chain.chain;
  }

  start(): void {
    this.stopping = new AbortController();
    this.unlisten = this.chain.onNewBlock(() => this.poke());
    this.running = this.loop(this.stopping.signal);
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    this.unlisten?.();
    this.wake?.();
    await this.running;
  }

  /** Asks for a step soon (a new block, a new address). */
  poke(): void {
    this.again = true;
    this.wake?.();
  }

  private async loop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      this.again = false;
      let more = false;
      try {
        more = await this.step();
      } catch (error) {
        this.options.onError?.(error);
      }
      if (more || this.again || signal.aborted) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, this.options.pollMs ?? 1000);
        const self = this;
        function done() {
          clearTimeout(timer);
          self.wake = undefined;
          resolve();
        }
        this.wake = done;
      });
    }
  }

  /** One pass: undo a reorg, read new blocks, count confirmations. True when more blocks wait. */
  async step(): Promise<boolean> {
    // Whatever was mined before this moment is at or below the head read next.
    const startedAt = this.clock.now();
    await this.options.caughtUp();
    const head = await this.ask(() => this.chain.head());
    let last = await this.lastProcessed();
    if (last === undefined) {
      // A chain seen for the first time: no deposit address can have been
      // paid before it was watched, so start at its head, which is read next
      // (an address handed out while the first step ran may be paid in it).
      const headBlock = await this.ask(() => this.chain.block(head.height));
      if (!headBlock || head.height === 0) await this.remember({ height: head.height, hash: head.hash });
      else await this.remember({ height: head.height - 1, hash: headBlock.parentHash });
      return true;
    }
    const forkPoint = await this.undoReorg(last);
    if (!forkPoint) {
      this.note('behind', `the node does not serve a block it served before (at or below ${last.height})`);
      return false;
    }
    last = forkPoint;
    if (head.height < last.height) {
      // A lagging backend answered the head: what it has not seen yet is not gone.
      this.note('behind', `the node's head ${head.height} is below block ${last.height}, already read`);
      return false;
    }
    const to = Math.min(head.height, last.height + (this.options.batchBlocks ?? 100));
    let unserved: number | undefined;
    for (let height = last.height + 1; height <= to; height++) {
      const block = await this.readBlock(height);
      if (!block) {
        unserved = height;
        break;
      }
      if (block instanceof BlockPrunedError) {
        // Its payments cannot be read here: noted for operators, and the chain followed past it by its hash.
        await this.db
          .insertInto('unread_blocks')
          .values({ chain: this.name, height: block.height, hash: block.hash })
          .onConflict((oc) => oc.columns(['chain', 'height']).doUpdateSet({ hash: block.hash }))
          .execute();
        await this.remember(block);
        last = block;
        continue;
      }
      if (block.parentHash !== last.hash) {
        // The chain moved under us between reads; the next step sees the reorg.
        return true;
      }
      await this.detectPayments(block, head);
      await this.remember(block);
      last = block;
    }
    await this.readUnread(head);
    await this.countConfirmations(head);
    if (last.height < head.height) {
      this.note(
        'behind',
        unserved === undefined
          ? `at block ${last.height} of ${head.height}`
          : `the node does not serve block ${unserved} (head ${head.height}) yet`,
      );
      return unserved === undefined;
    }
    if (this.chain.mempool) await this.watchMempool(head);
    if (head.stale) {
      // Its head is not the chain's: a payment made since may be in a block it lacks.
      this.note('stale', head.stale);
      return false;
    }
    // Every transfer made before `startedAt` is now recorded, and once the
    // reactor has applied them, on its invoice.
    await this.options.caughtUp();
    await this.options.paymentsApplied().catch((error: unknown) => {
      this.note('behind', 'the payments it recorded are not on their invoices yet');
      throw error;
    });
    this.caughtUpAt = startedAt;
    const unread = await this.unreadSummary();
    if (unread) this.note('behind', unread);
    else this.note('ok');
    return false;
  }

  /** The block at `height`; the node's word that it no longer has it (pruned); undefined when it does not serve it now. */
  private readBlock(height: number): Promise<ChainBlock | BlockPrunedError | undefined> {
    return this.ask(() =>
      this.chain.block(height).catch((error: unknown) => {
        if (error instanceof BlockPrunedError) return error;
        throw error;
      }),
    );
  }

  /**
   * Asks again for the lowest blocks passed unread: once the node has one
   * again (an operator fetched it, or pointed the service at a node that has
   * it), its payments are detected like any block's.
   */
  private async readUnread(head: ChainHead) {
    const unread = await this.db
      .selectFrom('unread_blocks')
      .select(['height', 'hash'])
      .where('chain', '=', this.name)
      .orderBy('height')
      .limit(UNREAD_RETRIES_PER_STEP)
      .execute();
    for (const { height } of unread) {
      const block = await this.readBlock(height);
      if (!block || block instanceof BlockPrunedError) return;
      await this.detectPayments(block, head);
      await this.db.deleteFrom('unread_blocks').where('chain', '=', this.name).where('height', '=', height).execute();
    }
  }

  /** For the attention list: which blocks are passed unread, or undefined when none. */
  private async unreadSummary(): Promise<string | undefined> {
    const row = await this.db
      .selectFrom('unread_blocks')
      .select((eb) => [
        eb.fn.min('height').as('lowest'),
        eb.fn.max('height').as('highest'),
        eb.fn.countAll().as('count'),
      ])
      .where('chain', '=', this.name)
      .executeTakeFirst();
    if (!row || Number(row.count) === 0) return undefined;
    return `${Number(row.count)} blocks from ${row.lowest} to ${row.highest} are pruned on the node: payments in them are not seen until the node has them again`;
  }

  private async lastProcessed(): Promise<{ height: number; hash: string } | undefined> {
    return this.db
      .selectFrom('watched_blocks')
      .select(['height', 'hash'])
      .where('chain', '=', this.name)
      .orderBy('height', 'desc')
      .limit(1)
      .executeTakeFirst();
  }

  private async remember(block: { height: number; hash: string }) {
    await this.db
      .insertInto('watched_blocks')
      .values({ chain: this.name, height: block.height, hash: block.hash })
      .onConflict((oc) => oc.columns(['chain', 'height']).doUpdateSet({ hash: block.hash }))
      .execute();
    // Only the last blocks are needed to find a reorg.
    await this.db
      .deleteFrom('watched_blocks')
      .where('chain', '=', this.name)
      .where('height', '<', block.height - (this.options.reorgDepth ?? 256))
      .execute();
  }

  /**
   * Walks back to the last stored block the node still serves with the same
   * hash; payments in the blocks after it are withdrawn. Undefined, and
   * nothing withdrawn, when the node does not serve a block it walks past:
   * only another hash is evidence of a reorg.
   */
  private async undoReorg(last: { height: number; hash: string }) {
    const stored = await this.db
      .selectFrom('watched_blocks')
      .select(['height', 'hash'])
      .where('chain', '=', this.name)
      .orderBy('height', 'desc')
      .execute();
    let forkPoint: { height: number; hash: string } | undefined;
    for (const block of stored) {
      const current = await this.readBlock(block.height);
      if (!current) return undefined;
      if (current.hash === block.hash) {
        forkPoint = block;
        break;
      }
    }
    if (forkPoint?.height === last.height) return last;
    if (!forkPoint)
      throw new Error(`${this.name}: reorg deeper than the ${stored.length} blocks kept; needs an operator`);
    const dropped = await this.db
      .selectFrom('watched_payments')
      .select(['tx_hash', 'output_index', 'block_hash'])
      .where('chain', '=', this.name)
      .where('block_number', '>', forkPoint.height)
      .execute();
    for (const p of dropped) await this.payments.recordReorg(this.name, p.tx_hash, p.output_index, p.block_hash);
    for (const table of ['watched_blocks', 'unread_blocks'] as const) {
      await this.db.deleteFrom(table).where('chain', '=', this.name).where('height', '>', forkPoint.height).execute();
    }
    return forkPoint;
  }

  /**
   * A block's depth below the head; on a chain with finality, a block that is
   * not final yet stays one short of the required depth, so its payments
   * confirm only once the chain holds them final.
   */
  private confirmationsOf(height: number, head: ChainHead): number {
    const depth = head.height - height + 1;
    if (head.finalized === undefined || height <= head.finalized) return depth;
    return Math.min(depth, Math.max(0, this.options.requiredConfirmations - 1));
  }

  private async detectPayments(block: ChainBlock, head: ChainHead) {
    if (block.transfers.length === 0) return;
    const watched = await this.watchedAmong([...new Set(block.transfers.map((t) => t.to))]);
    for (const transfer of block.transfers) {
      const address = watched.get(transfer.to);
      // A zero-value transfer (an EVM token can emit one) pays nothing.
      if (!address || transfer.amount <= 0n) continue;
      try {
        await this.payments.detect(
          this.name,
          block,
          transfer,
          address,
          block.hash === MEMPOOL_BLOCK_HASH ? 0 : this.confirmationsOf(block.height, head),
          // A payment counts as confirmed no sooner than the chain lets it be paid out.
          Math.max(this.options.requiredConfirmations, transfer.spendableAfter ?? 0),
        );
      } catch (error) {
        // A refusal is deterministic: retrying the block would refuse again
        // and stop the chain's watching. It is reported, and the block goes on.
        if (!(error instanceof DomainError)) throw error;
        this.options.onError?.(error);
      }
    }
  }

  /**
   * Payments in the mempool, at 0 confirmations; one seen there before that
   * is neither there nor mined any more (replaced, evicted) is withdrawn.
   * Only once caught up with the head, so that a payment mined meanwhile is
   * found in its block, not taken for gone.
   */
  private async watchMempool(head: ChainHead) {
    const transfers = await this.ask(() => this.chain.mempool!());
    const pending: ChainBlock = {
      height: -1,
      hash: MEMPOOL_BLOCK_HASH,
      parentHash: '',
      timestamp: this.clock.now(),
      transfers,
    };
    await this.detectPayments(pending, head);
    const seen = new Set(transfers.map((t) => `${t.txHash}:${t.index}`));
    const waiting = await this.db
      .selectFrom('watched_payments')
      .select(['tx_hash', 'output_index'])
      .where('chain', '=', this.name)
      .where('status', '=', 'detected')
      .where('block_hash', '=', MEMPOOL_BLOCK_HASH)
      .execute();
    const gone = waiting.filter((p) => !seen.has(`${p.tx_hash}:${p.output_index}`));
    // A block found since the head was read may hold them: the next step reads it first.
    if (gone.length === 0 || (await this.ask(() => this.chain.head())).hash !== head.hash) return;
    for (const p of gone) {
      await this.payments.recordReorg(this.name, p.tx_hash, p.output_index, MEMPOOL_BLOCK_HASH);
    }
  }

  /** Which of these addresses are watched: one query per block, never one per address. */
  private async watchedAmong(addresses: string[]): Promise<Map<string, WatchedAddress>> {
    // The block was read before this: an address a customer could have paid
    // in it was handed out, and so committed, before now.
    await this.options.caughtUp();
    const since = new Date(this.clock.now().getTime() - this.options.monitoringWindowMs);
    // One index lookup with one array parameter: a block's recipients among
    // the addresses, each with its invoice's closing time.
    const found = await this.db
      .selectFrom('watched_addresses')
      .select(['address', 'invoice_id'])
      .where('chain', '=', this.name)
      .where(sql<boolean>`address = any(${addresses}::text[])`)
      // Open invoices always; closed ones for the monitoring window, to see late payments.
      .where((eb) => eb.or([eb('closed_at', 'is', null), eb('closed_at', '>=', since)]))
      .execute();
    return new Map(found.map((r) => [r.address, { invoiceId: r.invoice_id, chain: this.name, address: r.address }]));
  }

  private async countConfirmations(head: ChainHead) {
    const open = await this.db
      .selectFrom('watched_payments')
      .select(['tx_hash', 'output_index', 'block_number', 'confirmations'])
      .where('chain', '=', this.name)
      .where('status', '=', 'detected')
      .where('block_number', '<=', head.height)
      .where('block_hash', '!=', MEMPOOL_BLOCK_HASH)
      .execute();
    for (const p of open) {
      const confirmations = this.confirmationsOf(p.block_number, head);
      if (confirmations > p.confirmations) {
        await this.payments.updateConfirmations(this.name, p.tx_hash, p.output_index, confirmations);
      }
    }
  }
}
