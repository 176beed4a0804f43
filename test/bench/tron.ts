// The Tron chain path against the Tron test node (test/support/tron-node.ts):
// one block of 2,000 transactions (1,000 TRX transfers and 1,000 USDT
// transfer() calls, every one signed and checked by the node) and
// 1,000,000 watched addresses (BENCH_SCALE scales the addresses):
//
// (a) TronChain.block(height): the two HTTP calls, parsing, base58 recipients,
//     beside the same two calls made with plain fetch and JSON.parse and the
//     recipients taken out in hex;
// (b) the watcher's matching query for the block's recipients, beside a plain
//     `address = any($1)` select, on each database engine.
import { createHash, randomBytes } from 'node:crypto';
import basex from 'base-x';
import { sql } from 'kysely';
import { TronChain, TRC20_TRANSFER_TOPIC } from '../../adapters/chains/tron.ts';
import { systemClock } from '../../adapters/clock.ts';
import { SqlEventStore } from '../../adapters/event-store/sql.ts';
import { DepositKeyring, generateMnemonic } from '../../adapters/keys/derivation.ts';
import { ChainWatcher } from '../../commands/chain-watcher.ts';
import { paymentCommands, type WatchedAddress } from '../../commands/payments.ts';
import { ProjectionEngine } from '../../projections/engine.ts';
import { readModelMigrations } from '../../projections/schema.ts';
import { randomTronKey } from '../support/tron-node.ts';
import { startTronNode, TEST_USDT } from '../support/tron-flow.ts';
import { insertWatched } from './evm.ts';
import { count, formatMs, median, progress, scaled, timed, type BenchSuite, type BenchTarget } from './support.ts';
import { formatRatio, formatSeconds, markdownTable } from './table.ts';

const WATCHED_ADDRESSES = scaled(1_000_000, 1_000);
const TRX_TRANSFERS = 1_000;
const TOKEN_TRANSFERS = 1_000;
/** Recipients of the block that are watched. */
const WATCHED_IN_BLOCK = 10;
const ROUNDS = 10;

const base58 = basex('123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz');
const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest();

/** Random Tron addresses: a 0x41 byte, 20 random ones, and the double-SHA-256 checksum, in base58. */
function randomTronAddresses(n: number): string[] {
  const bytes = randomBytes(n * 20);
  return Array.from({ length: n }, (_, i) => {
    const payload = Buffer.concat([Buffer.from([0x41]), bytes.subarray(i * 20, i * 20 + 20)]);
    return base58.encode(Buffer.concat([payload, sha256(sha256(payload)).subarray(0, 4)]));
  });
}

interface RawBlock {
  transactions?: { raw_data: { contract: { type: string; parameter: { value: { to_address?: string } } }[] } }[];
}
interface RawInfo {
  log?: { topics?: string[] }[];
}

async function post<T>(url: string, path: string, body: object): Promise<T> {
  const response = await fetch(url + path, { method: 'POST', body: JSON.stringify(body) });
  return (await response.json()) as T;
}

/** The baseline of block(height): the same two calls, parsed JSON, the recipients in hex. */
async function rawRecipients(url: string, height: number): Promise<string[]> {
  const [block, infos] = await Promise.all([
    post<RawBlock>(url, '/wallet/getblockbynum', { num: height }),
    post<RawInfo[]>(url, '/wallet/gettransactioninfobyblocknum', { num: height }),
  ]);
  const to = new Set<string>();
  for (const tx of block.transactions ?? []) {
    const contract = tx.raw_data.contract[0]!;
    if (contract.type === 'TransferContract') to.add(contract.parameter.value.to_address!);
  }
  for (const info of infos) {
    for (const log of info.log ?? []) if (log.topics?.[0] === TRC20_TRANSFER_TOPIC) to.add('41' + log.topics[2]!.slice(24));
  }
  return [...to];
}

export const tronSuite: BenchSuite = {
  name: 'tron',
  async run({ targets }) {
    const node = await startTronNode();
    const keyring = DepositKeyring.fromMnemonic(generateMnemonic());
    const options = {
      rpcUrl: node.url,
      network: node.genesisId,
      tokens: [{ symbol: 'USDT', contract: TEST_USDT, decimals: 6 }],
      keyring,
      confirmations: 19,
    };
    try {
      const payer = randomTronKey();
      node.fund(payer.address, 10n ** 15n);
      node.mintToken(TEST_USDT, payer.address, 10n ** 15n);
      const recipients = randomTronAddresses(TRX_TRANSFERS + TOKEN_TRANSFERS);
      const signing = await timed(async () => {
        for (const [i, to] of recipients.entries()) {
          if (i < TRX_TRANSFERS) await node.sendTrx(payer, to, 1_000_000n + BigInt(i));
          else await node.sendToken(payer, TEST_USDT, to, 1_000n + BigInt(i));
        }
      });
      node.mine(1);
      const height = node.head.number;
      progress('tron', `block ${height}: ${count(recipients.length)} transactions signed and taken in ${formatSeconds(signing)}`);

      // (a) block(height) beside the plain calls, alternating who goes first.
      const block = { ours: [] as number[], baseline: [] as number[] };
      for (let round = 0; round < ROUNDS; round++) {
        const sides = {
          ours: async () => {
            const fresh = await TronChain.open(options); // block() keeps what it parsed
            try {
              block.ours.push(
                await timed(async () => {
                  const parsed = await fresh.block(height);
                  if (parsed?.transfers.length !== recipients.length) throw new Error('the adapter missed transfers');
                }),
              );
            } finally {
              fresh.close();
            }
          },
          baseline: async () => block.baseline.push(await timed(() => rawRecipients(node.url, height))),
        };
        for (const side of round % 2 === 0 ? (['ours', 'baseline'] as const) : (['baseline', 'ours'] as const)) {
          await sides[side]();
        }
      }

      // (b) the watcher's matching query on each engine.
      const watched = recipients.filter((_, i) => i % Math.floor(recipients.length / WATCHED_IN_BLOCK) === 0);
      const matchRows: string[][] = [];
      for (const target of targets) {
        if (target.skipped) {
          matchRows.push([`(b) matching, ${target.label}`, target.skipped, '', '']);
          continue;
        }
        const samples = await measureMatch(target, options, recipients, watched.slice(0, WATCHED_IN_BLOCK));
        matchRows.push([
          `(b) the watcher's matching query, ${target.label}`,
          formatMs(median(samples.ours)),
          formatMs(median(samples.baseline)),
          formatRatio(median(samples.ours), median(samples.baseline)),
        ]);
      }

      console.log(`\n## Tron: a block of ${count(recipients.length)} transactions against ${count(WATCHED_ADDRESSES)} watched addresses\n`);
      console.log(`- node: test/support/tron-node.ts (java-tron HTTP API), 127.0.0.1; ${ROUNDS} rounds each, medians`);
      console.log(
        markdownTable(
          ['measure', 'ours (p50)', 'baseline (p50)', 'ratio'],
          [
            [
              '(a) TronChain.block(height) vs the same JSON parsed raw',
              formatMs(median(block.ours)),
              formatMs(median(block.baseline)),
              formatRatio(median(block.ours), median(block.baseline)),
            ],
            ...matchRows,
          ],
        ),
      );
    } finally {
      await node.stop();
    }
  },
};

async function measureMatch(
  target: BenchTarget,
  options: Parameters<typeof TronChain.open>[0],
  recipients: string[],
  watched: string[],
): Promise<{ ours: number[]; baseline: number[] }> {
  const fresh = await target.open();
  const { database } = fresh;
  const db = database.db;
  const adapter = await TronChain.open(options);
  const store = await SqlEventStore.open(database);
  try {
    await ProjectionEngine.migrate(database, readModelMigrations);
    await ChainWatcher.migrate(database);
    const fillers = WATCHED_ADDRESSES - watched.length;
    let first = true;
    const fillMs = await timed(() =>
      insertWatched(db, fillers + watched.length, (done) => progress(target.label, `${count(done)} rows inserted`), {
        chain: 'tron',
        addresses: (n) => {
          const batch = randomTronAddresses(n);
          if (first) batch.splice(0, watched.length, ...watched);
          first = false;
          return batch;
        },
      }),
    );
    await sql`analyze invoice_addresses`.execute(db);
    progress(target.label, `${count(fillers + watched.length)} Tron addresses inserted in ${formatSeconds(fillMs)}`);
    const watcher = new ChainWatcher(adapter, database, paymentCommands(store, systemClock), systemClock, {
      requiredConfirmations: 19,
      monitoringWindowMs: 24 * 60 * 60 * 1000,
      settle: async () => undefined,
    });
    // The private query the watcher runs once per block (commands/chain-watcher.ts).
    const matching = watcher as unknown as { watchedAmong(addresses: string[]): Promise<Map<string, WatchedAddress>> };
    const plain = (addresses: string[]) =>
      sql<{ address: string }>`select address from invoice_addresses where chain = 'tron' and address = any(${addresses}::text[])`.execute(
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
