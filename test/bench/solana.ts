// The Solana chain path against the Solana test node (test/support/solana-node.ts,
// every transaction run by the real runtime):
// 1. one block of 2,000 transactions (1,000 SOL transfers and 1,000 USDT
//    transfers, each to a new owner) against 1,000,000 watched addresses
//    (see chain-block.ts for what is measured);
// 2. detection with 1,000 and 10,000 open invoices: a block every 400 ms (a
//    slot) with one payment to an open invoice's address, watched by a
//    ChainWatcher over the adapter as the service runs it; the latency from
//    the block's sealing to the watcher's detect(), and the RPC calls per
//    minute the watching costs. Reading blocks, the calls do not grow with the
//    open invoices; polling getSignaturesForAddress per open address would
//    need three calls (the address and its two token accounts) per invoice
//    per round, printed beside for comparison.
import { randomBytes } from 'node:crypto';
import { Keypair } from '@solana/web3.js';
import bs58 from 'bs58';
import { sql } from 'kysely';
import { SolanaChain } from '../../adapters/chains/solana/index.ts';
import { systemClock } from '../../adapters/clock.ts';
import { SqlEventStore } from '../../adapters/event-store/sql.ts';
import { DepositKeyring, generateMnemonic } from '../../adapters/keys/derivation.ts';
import { ChainWatcher } from '../../commands/chain-watcher.ts';
import { paymentCommands } from '../../commands/payments.ts';
import { ProjectionEngine } from '../../adapters/event-store/followers.ts';
import { readModelMigrations } from '../../projections/schema.ts';
import { SettlementPayouts } from '../../commands/settlements.ts';
import { requestSolSettlements, solanaPayouts, startSolanaNode } from '../support/solana-flow.ts';
import type { SolanaTestNode } from '../support/solana-node.ts';
import { runBlockBench } from './chain-block.ts';
import { insertWatched } from './evm.ts';
import { count, formatMs, percentile, progress, scaled, timed, type BenchSuite, type BenchTarget } from './support.ts';
import { formatSeconds, markdownTable } from './table.ts';

const SOL_TRANSFERS = 1_000;
const TOKEN_TRANSFERS = 1_000;
const SLOT_MS = 400;
const PAYMENTS = 25;
/** How long the payout engine is watched over open sweeps, each way. */
const SWEEPER_MS = 20_000;
/** Mainnet's block rate: a slot every 400 ms, about 150 blocks a minute. */
const MAINNET_BLOCKS_PER_MINUTE = 150;
/**
 * What a Solana RPC lets one client use a minute: the public mainnet-beta
 * endpoint (solana.com/docs/references/clusters: 100 requests per 10 s per
 * IP, 40 per 10 s for one method, 100 MB per 30 s), and a paid endpoint's
 * default (docs.p2p.org: 50 requests per second per client; other providers
 * differ, and bill by credits).
 */
const LIMITS = [
  { name: 'public mainnet-beta', requests: 600, oneMethod: 240, megabytes: 200 },
  { name: 'paid endpoint (50 req/s)', requests: 3_000, oneMethod: 3_000, megabytes: Infinity },
];

const randomAddresses = (n: number) => Array.from({ length: n }, () => bs58.encode(randomBytes(32)));

interface RawBlock {
  transactions: {
    transaction: { accountKeys: { pubkey: string }[] };
    meta: { preBalances: number[]; postBalances: number[]; postTokenBalances: { owner?: string }[] };
  }[];
}

async function blockSuite(node: SolanaTestNode, targets: readonly BenchTarget[]) {
  const payer = Keypair.generate();
  await node.airdrop(payer.publicKey, 10n ** 14n);
  await node.mintTokens(payer.publicKey, 'USDT', 10n ** 15n);
  node.mine();
  const recipients = randomAddresses(SOL_TRANSFERS + TOKEN_TRANSFERS);
  const signing = await timed(async () => {
    for (const [i, to] of recipients.entries()) {
      if (i < SOL_TRANSFERS) await node.sendSol(payer, to, 1_000_000n + BigInt(i));
      else await node.sendToken(payer, to, 'USDT', 1_000n + BigInt(i));
    }
  });
  node.mine();
  const slot = node.headSlot;
  blockBytes = {
    full: await answerBytes(node, slot, 'full'),
    accounts: await answerBytes(node, slot, 'accounts'),
    none: await answerBytes(node, slot, 'none'),
  };
  progress(
    'solana',
    `slot ${slot}: ${count(recipients.length)} transactions signed and run in ${formatSeconds(signing)}`,
  );
  await runBlockBench(
    {
      chain: 'solana',
      node: 'test/support/solana-node.ts (Solana JSON-RPC over litesvm), 127.0.0.1',
      block: { height: slot, recipients, transactions: recipients.length },
      openAdapter: () =>
        SolanaChain.open({ rpcUrl: node.url, keyring: DepositKeyring.fromMnemonic(generateMnemonic()) }),
      randomAddresses,
      // The same getBlock ("accounts"), parsed by JSON.parse, the recipients read from the same balances.
      async rawRecipients(h) {
        const response = await getBlockAnswer(node, h, 'accounts');
        const { result } = (await response.json()) as { result: RawBlock };
        const to = new Set<string>();
        for (const { transaction, meta } of result.transactions) {
          transaction.accountKeys.forEach(({ pubkey }, i) => {
            if (meta.postBalances[i]! > meta.preBalances[i]!) to.add(pubkey);
          });
          for (const b of meta.postTokenBalances) if (b.owner) to.add(b.owner);
        }
        return [...to];
      },
    },
    targets,
  );
}

/** getBlock's answer for a slot with these transaction details, as the adapter asks for it. */
function getBlockAnswer(node: SolanaTestNode, slot: number, transactionDetails: string): Promise<Response> {
  return fetch(node.url, {
    method: 'POST',
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'getBlock',
      params: [
        slot,
        {
          commitment: 'confirmed',
          encoding: 'json',
          transactionDetails,
          rewards: false,
          maxSupportedTransactionVersion: 0,
        },
      ],
    }),
  });
}

/** The bytes of getBlock's answer for a slot with these transaction details. */
async function answerBytes(node: SolanaTestNode, slot: number, transactionDetails: string): Promise<number> {
  return (await (await getBlockAnswer(node, slot, transactionDetails)).arrayBuffer()).byteLength;
}

/** The 2,000-transaction block's getBlock answer, by transaction details. */
let blockBytes: { full: number; accounts: number; none: number } | undefined;

interface DetectionReport {
  label: string;
  open: number;
  /** Skipped slots before each payment's slot. */
  skippedBefore: number;
  latencies: number[];
  callsPerMinute: number;
  /** getBlock calls a minute, the method the public endpoint's per-method limit meets first. */
  blockCallsPerMinute: number;
  perAddressCallsPerRound: number;
}

/**
 * Detection while the node makes a slot every 400 ms, a payment in each
 * produced slot; with `skippedBefore`, that many slots (400 ms each) pass
 * without a block before each payment's slot, so every payment is in the slot
 * right after a skipped one, while the skipped slots are far from finalized
 * (a validator answers getBlock on them with -32004 until then).
 */
async function detection(
  node: SolanaTestNode,
  target: BenchTarget,
  open: number,
  skippedBefore = 0,
): Promise<DetectionReport> {
  const fresh = await target.open();
  const { database } = fresh;
  const store = await SqlEventStore.open(database);
  const adapter = await SolanaChain.open({
    rpcUrl: node.url,
    keyring: DepositKeyring.fromMnemonic(generateMnemonic()),
  });
  const payer = Keypair.generate();
  await node.airdrop(payer.publicKey, 10n ** 12n);
  node.mine();
  const paid = randomAddresses(PAYMENTS);
  try {
    await ProjectionEngine.migrate(database, readModelMigrations);
    await ChainWatcher.migrate(database);
    let first = true;
    await insertWatched(database.db, open, () => undefined, {
      chain: 'solana',
      addresses: (n) => {
        const batch = randomAddresses(n);
        if (first) batch.splice(0, paid.length, ...paid);
        first = false;
        return batch;
      },
    });
    await sql`analyze invoice_addresses`.execute(database.db);
    await sql`analyze watched_addresses`.execute(database.db);
    const sealedAt = new Map<string, number>();
    const latencies: number[] = [];
    const commands = paymentCommands(store, systemClock);
    const watcher = new ChainWatcher(
      adapter,
      database,
      {
        ...commands,
        async detect(...args: Parameters<typeof commands.detect>) {
          const sealed = sealedAt.get(args[2].txHash);
          if (sealed !== undefined) latencies.push(performance.now() - sealed);
          return commands.detect(...args);
        },
      },
      systemClock,
      {
        requiredConfirmations: 32,
        monitoringWindowMs: 24 * 60 * 60 * 1000,
        caughtUp: async () => undefined,
        paymentsApplied: async () => undefined,
      },
    );
    watcher.start();
    await new Promise((resolve) => setTimeout(resolve, 2_000)); // its first step, at the head
    const callsBefore = node.calls.length;
    const started = performance.now();
    for (const address of paid) {
      for (let skipped = 0; skipped < skippedBefore; skipped++) {
        node.skip();
        await new Promise((resolve) => setTimeout(resolve, SLOT_MS));
      }
      const signature = await node.sendSol(payer, address, 10_000_000n);
      node.mine();
      sealedAt.set(signature, performance.now());
      await new Promise((resolve) => setTimeout(resolve, SLOT_MS));
    }
    const deadline = Date.now() + 10_000;
    while (latencies.length < paid.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const minutes = (performance.now() - started) / 60_000;
    const watching = node.calls.slice(callsBefore);
    const callsPerMinute = watching.length / minutes;
    const blockCallsPerMinute = watching.filter((m) => m === 'getBlock').length / minutes;
    await watcher.stop();
    if (latencies.length < paid.length)
      throw new Error(`${target.label}: ${latencies.length} of ${paid.length} payments detected`);
    return {
      label: target.label,
      open,
      skippedBefore,
      latencies,
      callsPerMinute,
      blockCallsPerMinute,
      perAddressCallsPerRound: 3 * open,
    };
  } finally {
    adapter.close();
    await store.close();
    await fresh.dispose();
  }
}

/** Requests a minute the payout engine makes while sweeps wait for finality, one way of asking. */
interface SweeperMeasure {
  requests: number;
  statusCalls: number;
}

interface SweeperReport {
  open: number;
  /** One getSignatureStatuses per pass (beforeLooks), the head once. */
  batched: SweeperMeasure;
  /** Each look asks for its own sweep's status and the head (before). */
  perSweep: SweeperMeasure;
}

/**
 * The payout engine as the service runs it (a pass every second, a sweep
 * looked at again every 2 s) over `open` SOL sweeps that
 * landed and wait to be final, a block every 400 ms: the requests a minute
 * with the statuses asked once per pass, then with each look asking for its
 * own (the kind without beforeLooks, as before).
 */
async function sweeper(node: SolanaTestNode, open: number): Promise<SweeperReport> {
  const keyring = DepositKeyring.fromMnemonic(generateMnemonic());
  const chain = await SolanaChain.open({ rpcUrl: node.url, keyring });
  const lag = node.finalizedLag;
  try {
    await node.airdrop(chain.feeWallet, 10n ** 12n);
    node.mine();
    const measure = async (perSweep: boolean): Promise<SweeperMeasure> => {
      const payouts = await solanaPayouts(chain, {
        clock: systemClock,
        // Without beforeLooks: each look asks for itself.
        ...(perSweep && {
          kinds: (deps) => {
            const settlement = new SettlementPayouts(deps);
            return [
              { kind: settlement.kind, advance: (id: string, lease: AbortSignal) => settlement.advance(id, lease) },
            ];
          },
        }),
      });
      try {
        await requestSolSettlements(
          { store: payouts.store, node, chain, keyring },
          { count: open, gross: 100_000_000n, firstIndex: perSweep ? open : 0, now: () => new Date().toISOString() },
        );
        await payouts.pass(); // each sweep prepared and sent
        node.mine();
        // Landed, and final only after the measurement: the sweeps stay open.
        node.finalizedLag = 1_000_000;
        const producing = setInterval(() => node.mine(), SLOT_MS);
        const from = node.calls.length;
        const started = performance.now();
        payouts.engine.start();
        await new Promise((resolve) => setTimeout(resolve, SWEEPER_MS));
        await payouts.engine.stop();
        clearInterval(producing);
        const minutes = (performance.now() - started) / 60_000;
        const calls = node.calls.slice(from);
        return {
          requests: calls.length / minutes,
          statusCalls: calls.filter((m) => m === 'getSignatureStatuses').length / minutes,
        };
      } finally {
        node.finalizedLag = lag;
        node.mine(lag + 1);
        await payouts.close();
      }
    };
    return { open, batched: await measure(false), perSweep: await measure(true) };
  } finally {
    node.finalizedLag = lag;
    chain.close();
  }
}

export const solanaSuite: BenchSuite = {
  name: 'solana',
  async run({ targets }) {
    const node = await startSolanaNode();
    try {
      await blockSuite(node, targets);
      const reports: DetectionReport[] = [];
      for (const target of targets) {
        if (target.skipped) continue;
        for (const open of [scaled(1_000, 100), scaled(10_000, 100)]) {
          progress('solana', `${target.label}: detection with ${count(open)} open invoices`);
          reports.push(await detection(node, target, open));
        }
      }
      console.log(`\n## solana: detection with open invoices (a block every ${SLOT_MS} ms, ${PAYMENTS} payments)\n`);
      console.log(
        "- latency: from the block sealed on the node to the watcher's detect(); the watcher polls the head every second, as the service does",
      );
      console.log(
        '- RPC calls per minute while watching; beside it, what polling getSignaturesForAddress would cost per round (address + 2 token accounts per open invoice), before any getTransaction',
      );
      console.log(
        markdownTable(
          [
            'database',
            'open invoices',
            'latency p50',
            'latency p99',
            'RPC calls / min (blocks)',
            'per-address polling: calls / round',
          ],
          reports.map((r) => [
            r.label,
            count(r.open),
            formatMs(percentile(r.latencies, 50)),
            formatMs(percentile(r.latencies, 99)),
            count(Math.round(r.callsPerMinute)),
            count(r.perAddressCallsPerRound),
          ]),
        ),
      );
      const afterSkipped: DetectionReport[] = [];
      const first = targets.find((t) => !t.skipped);
      for (const skippedBefore of first ? [1, 4] : []) {
        progress('solana', `${first!.label}: detection with ${skippedBefore} skipped slots before each payment`);
        afterSkipped.push(await detection(node, first!, scaled(1_000, 100), skippedBefore));
      }
      printSkippedSlots([...reports.filter((r) => r.label === first?.label).slice(0, 1), ...afterSkipped]);
      const sweepers: SweeperReport[] = [];
      // Not scaled: the sweeps' cost does not depend on the database's size, and 50 take seconds to make.
      for (const open of [10, 50]) {
        progress('solana', `the payout engine over ${open} open sweeps`);
        sweepers.push(await sweeper(node, open));
      }
      printSweepers(sweepers);
      printBandwidth(reports, sweepers.at(-1));
    } finally {
      await node.stop();
    }
  },
};

/**
 * Requests and bytes a minute at mainnet's block rate, beside what an RPC
 * allows: the requests as measured while watching (a block every 400 ms), the
 * bytes as one block of 2,000 transactions (mainnet carries about 1,000 to
 * 1,500 besides votes) read with "accounts" plus its hash check with "none",
 * against reading it in full and again in full each step (the first version).
 */
function printSkippedSlots(reports: DetectionReport[]) {
  if (reports.length === 0) return;
  console.log(
    `\n## solana: detection after skipped slots (a slot every ${SLOT_MS} ms, ${PAYMENTS} payments a row, ${reports[0]!.label}, ${count(reports[0]!.open)} open invoices)\n`,
  );
  console.log(
    "- latency: from the payment's block confirmed on the test node (sealed: its confirmed slot) to the watcher's detect(); each payment in the slot right after the skipped ones, which are far from final (the node answers getBlock on them with -32004)",
  );
  console.log(
    markdownTable(
      ['skipped slots before each payment', 'payments', 'latency p50', 'latency p95', 'latency max'],
      reports.map((r) => [
        String(r.skippedBefore),
        String(r.latencies.length),
        formatMs(percentile(r.latencies, 50)),
        formatMs(percentile(r.latencies, 95)),
        formatMs(Math.max(...r.latencies)),
      ]),
    ),
  );
}

function printSweepers(reports: SweeperReport[]) {
  if (reports.length === 0) return;
  console.log(
    `\n## solana: the payout engine's requests while sweeps wait to be final (a block every ${SLOT_MS} ms, ${SWEEPER_MS / 1000} s each way)\n`,
  );
  console.log(
    "- the engine as the service runs it: a pass every second, a sweep looked at again every 2 s; each open sweep landed, not final. Its own requests only: the head poll that wakes it at each new block is the watcher's, counted with detection",
  );
  console.log(
    markdownTable(
      [
        'open sweeps',
        'requests / min (one status call per pass)',
        'getSignatureStatuses / min',
        'requests / min (a call per sweep, before)',
        'getSignatureStatuses / min (before)',
      ],
      reports.map((r) => [
        String(r.open),
        count(Math.round(r.batched.requests)),
        count(Math.round(r.batched.statusCalls)),
        count(Math.round(r.perSweep.requests)),
        count(Math.round(r.perSweep.statusCalls)),
      ]),
    ),
  );
}

function printBandwidth(reports: DetectionReport[], sweeping: SweeperReport | undefined) {
  if (!blockBytes || reports.length === 0) return;
  const watching = Math.max(...reports.map((r) => r.callsPerMinute));
  const requests = watching + (sweeping?.batched.requests ?? 0);
  const requestsBefore = watching + (sweeping?.perSweep.requests ?? 0);
  const blockCalls = Math.max(...reports.map((r) => r.blockCallsPerMinute));
  const mb = (bytes: number) => (bytes * MAINNET_BLOCKS_PER_MINUTE) / 1e6;
  const ours = mb(blockBytes.accounts + blockBytes.none);
  const before = mb(2 * blockBytes.full);
  console.log(
    `\n## solana: requests and bytes per minute at mainnet's block rate (${MAINNET_BLOCKS_PER_MINUTE} blocks/min)\n`,
  );
  console.log(
    `- requests: watching (the most of the detection runs) and the payout engine with ${sweeping?.open ?? 0} sweeps open`,
  );
  console.log(
    `- getBlock answer for the 2,000-transaction block: full ${count(blockBytes.full)} B, accounts ${count(blockBytes.accounts)} B, none ${count(blockBytes.none)} B`,
  );
  console.log(
    markdownTable(
      ['reading', 'requests / min', 'getBlock / min', 'MB / min', ...LIMITS.map((l) => `fits ${l.name}`)],
      [
        ['accounts + none; one status call per pass (now)', requests, blockCalls, ours] as const,
        ['full, read again each step; a call per sweep (before)', requestsBefore, blockCalls, before] as const,
      ].map(([label, req, calls, megabytes]) => [
        label,
        count(Math.round(req)),
        count(Math.round(calls)),
        megabytes.toFixed(1),
        ...LIMITS.map((l) => (req <= l.requests && calls <= l.oneMethod && megabytes <= l.megabytes ? 'yes' : 'no')),
      ]),
    ),
  );
  console.log(
    `- limits a minute: ${LIMITS.map((l) => `${l.name}: ${count(l.requests)} requests, ${count(l.oneMethod)} of one method, ${Number.isFinite(l.megabytes) ? `${l.megabytes} MB` : 'bytes unmetered'}`).join('; ')}`,
  );
}
