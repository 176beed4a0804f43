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
import { SolanaChain } from '../../adapters/chains/solana.ts';
import { systemClock } from '../../adapters/clock.ts';
import { SqlEventStore } from '../../adapters/event-store/sql.ts';
import { DepositKeyring, generateMnemonic } from '../../adapters/keys/derivation.ts';
import { ChainWatcher } from '../../commands/chain-watcher.ts';
import { paymentCommands } from '../../commands/payments.ts';
import { ProjectionEngine } from '../../projections/engine.ts';
import { readModelMigrations } from '../../projections/schema.ts';
import { startSolanaNode } from '../support/solana-flow.ts';
import type { SolanaTestNode } from '../support/solana-node.ts';
import { runBlockBench } from './chain-block.ts';
import { insertWatched } from './evm.ts';
import { count, formatMs, percentile, progress, scaled, timed, type BenchSuite, type BenchTarget } from './support.ts';
import { formatSeconds, markdownTable } from './table.ts';

const SOL_TRANSFERS = 1_000;
const TOKEN_TRANSFERS = 1_000;
const SLOT_MS = 400;
const PAYMENTS = 25;

const randomAddresses = (n: number) => Array.from({ length: n }, () => bs58.encode(randomBytes(32)));

interface RawBlock {
  transactions: {
    transaction: { message: { accountKeys: string[] } };
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
      // The same getBlock, parsed by JSON.parse, the recipients read from the same balances.
      async rawRecipients(h) {
        const response = await fetch(node.url, {
          method: 'POST',
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'getBlock',
            params: [
              h,
              {
                commitment: 'confirmed',
                encoding: 'json',
                transactionDetails: 'full',
                rewards: false,
                maxSupportedTransactionVersion: 0,
              },
            ],
          }),
        });
        const { result } = (await response.json()) as { result: RawBlock };
        const to = new Set<string>();
        for (const { transaction, meta } of result.transactions) {
          transaction.message.accountKeys.forEach((key, i) => {
            if (meta.postBalances[i]! > meta.preBalances[i]!) to.add(key);
          });
          for (const b of meta.postTokenBalances) if (b.owner) to.add(b.owner);
        }
        return [...to];
      },
    },
    targets,
  );
}

interface DetectionReport {
  label: string;
  open: number;
  latencies: number[];
  callsPerMinute: number;
  perAddressCallsPerRound: number;
}

async function detection(node: SolanaTestNode, target: BenchTarget, open: number): Promise<DetectionReport> {
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
      const signature = await node.sendSol(payer, address, 10_000_000n);
      node.mine();
      sealedAt.set(signature, performance.now());
      await new Promise((resolve) => setTimeout(resolve, SLOT_MS));
    }
    const deadline = Date.now() + 10_000;
    while (latencies.length < paid.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const minutes = (performance.now() - started) / 60_000;
    const callsPerMinute = (node.calls.length - callsBefore) / minutes;
    await watcher.stop();
    if (latencies.length < paid.length)
      throw new Error(`${target.label}: ${latencies.length} of ${paid.length} payments detected`);
    return { label: target.label, open, latencies, callsPerMinute, perAddressCallsPerRound: 3 * open };
  } finally {
    adapter.close();
    await store.close();
    await fresh.dispose();
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
    } finally {
      await node.stop();
    }
  },
};
