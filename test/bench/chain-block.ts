// One big block of a chain against many watched addresses, for any chain with
// a test node: (a) the adapter's block(height) beside the node's JSON read
// and parsed raw, (b) the watcher's matching query for the block's
// recipients beside a plain `address = any($1)` select, on each engine.
import { sql } from 'kysely';
import type { ChainAdapter } from '../../adapters/chains/port.ts';
import { systemClock } from '../../adapters/clock.ts';
import { SqlEventStore } from '../../adapters/event-store/sql.ts';
import { ChainWatcher } from '../../commands/chain-watcher.ts';
import { paymentCommands, type WatchedAddress } from '../../commands/payments.ts';
import type { ChainName } from '../../domain/catalogue.ts';
import { ProjectionEngine } from '../../adapters/event-store/followers.ts';
import { readModelMigrations } from '../../projections/schema.ts';
import { insertWatched } from './evm.ts';
import { count, formatMs, median, progress, scaled, timed, type BenchTarget } from './support.ts';
import { formatRatio, formatSeconds, markdownTable } from './table.ts';

const ROUNDS = 10;

export interface BlockBench {
  chain: ChainName;
  /** The node, and a line saying what it is. */
  node: string;
  /** The block's height and every recipient in it (the first `watched` of them are made watched). */
  block: { height: number; recipients: string[]; transactions: number };
  /** A fresh adapter (block() remembers what it parsed). */
  openAdapter(): Promise<ChainAdapter & { close(): void }>;
  /** The baseline: the same calls with plain fetch and JSON.parse, the recipients as the node writes them. */
  rawRecipients(height: number): Promise<string[]>;
  /** Random addresses of the chain, for the watched rows. */
  randomAddresses(n: number): string[];
}

export async function runBlockBench(bench: BlockBench, targets: readonly BenchTarget[]): Promise<void> {
  const watchedAddresses = scaled(1_000_000, 1_000);
  const { height, recipients } = bench.block;
  const block = { ours: [] as number[], baseline: [] as number[] };
  for (let round = 0; round < ROUNDS; round++) {
    const sides = {
      ours: async () => {
        const adapter = await bench.openAdapter();
        try {
          block.ours.push(
            await timed(async () => {
              const parsed = await adapter.block(height);
              if ((parsed?.transfers.length ?? 0) < recipients.length) throw new Error('the adapter missed transfers');
            }),
          );
        } finally {
          adapter.close();
        }
      },
      baseline: async () => block.baseline.push(await timed(() => bench.rawRecipients(height))),
    };
    for (const side of round % 2 === 0 ? (['ours', 'baseline'] as const) : (['baseline', 'ours'] as const)) {
      await sides[side]();
    }
  }
  const step = Math.floor(recipients.length / 10);
  const watched = recipients.filter((_, i) => i % step === 0).slice(0, 10);
  const rows: string[][] = [
    [
      `(a) block(height) vs the same JSON parsed raw`,
      formatMs(median(block.ours)),
      formatMs(median(block.baseline)),
      formatRatio(median(block.ours), median(block.baseline)),
    ],
  ];
  for (const target of targets) {
    if (target.skipped) {
      rows.push([`(b) matching, ${target.label}`, target.skipped, '', '']);
      continue;
    }
    const samples = await measureMatch(bench, target, watchedAddresses, watched);
    rows.push([
      `(b) the watcher's matching query, ${target.label}`,
      formatMs(median(samples.ours)),
      formatMs(median(samples.baseline)),
      formatRatio(median(samples.ours), median(samples.baseline)),
    ]);
  }
  console.log(
    `\n## ${bench.chain}: a block of ${count(bench.block.transactions)} transactions against ${count(watchedAddresses)} watched addresses\n`,
  );
  console.log(`- node: ${bench.node}; ${ROUNDS} rounds each, medians`);
  console.log(markdownTable(['measure', 'ours (p50)', 'baseline (p50)', 'ratio'], rows));
}

async function measureMatch(bench: BlockBench, target: BenchTarget, rows: number, watched: string[]) {
  const fresh = await target.open();
  const { database } = fresh;
  const db = database.db;
  const adapter = await bench.openAdapter();
  const store = await SqlEventStore.open(database);
  try {
    await ProjectionEngine.migrate(database, readModelMigrations);
    await ChainWatcher.migrate(database);
    let first = true;
    const fillMs = await timed(() =>
      insertWatched(db, rows, (done) => progress(target.label, `${count(done)} rows inserted`), {
        chain: bench.chain,
        addresses: (n) => {
          const batch = bench.randomAddresses(n);
          if (first) batch.splice(0, watched.length, ...watched);
          first = false;
          return batch;
        },
      }),
    );
    await sql`analyze invoice_addresses`.execute(db);
    await sql`analyze watched_addresses`.execute(db);
    progress(target.label, `${count(rows)} ${bench.chain} addresses inserted in ${formatSeconds(fillMs)}`);
    const watcher = new ChainWatcher(adapter, database, paymentCommands(store, systemClock), systemClock, {
      requiredConfirmations: 1,
      monitoringWindowMs: 24 * 60 * 60 * 1000,
      caughtUp: async () => undefined,
      paymentsApplied: async () => undefined,
    });
    // The private query the watcher runs once per block (commands/chain-watcher.ts).
    const matching = watcher as unknown as { watchedAmong(addresses: string[]): Promise<Map<string, WatchedAddress>> };
    const recipients = [...new Set(bench.block.recipients)];
    const plain = (addresses: string[]) =>
      sql<{
        address: string;
      }>`select address from invoice_addresses where chain = ${bench.chain} and address = any(${addresses}::text[])`.execute(
        db,
      );
    const found = await matching.watchedAmong(recipients);
    if (found.size !== watched.length) throw new Error(`${target.label}: matched ${found.size} of ${watched.length}`);
    const samples = { ours: [] as number[], baseline: [] as number[] };
    for (let round = 0; round < ROUNDS; round++) {
      const ours = async () => samples.ours.push(await timed(() => matching.watchedAmong(recipients)));
      const baseline = async () => samples.baseline.push(await timed(() => plain(recipients)));
      for (const run of round % 2 === 0 ? [ours, baseline] : [baseline, ours]) await run();
    }
    return samples;
  } finally {
    adapter.close();
    await store.close();
    await fresh.dispose();
  }
}
