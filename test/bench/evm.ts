// The EVM chain path on a local Hardhat 2 node, on PGlite and on PostgreSQL:
//
// 1. One block of 300 native transfers and 1,000 token Transfer logs against
//    1,000,000 watched addresses (BENCH_SCALE scales the addresses): the
//    adapter's block(height) beside the same two JSON-RPC calls made with
//    plain fetch, the watcher's matching query beside a plain
//    `address = any($2)` select, and a whole ChainWatcher.step() beside both
//    plain versions in a row.
// 2. Detection latency of the running service (startTestService pointed at
//    the node): from `evm_mine` returning to PaymentDetected in the store,
//    beside a plain poller of the node with the same 1 s interval.
//
// The suite skips, saying why, when the node cannot start.
import { randomBytes, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Interface, getAddress, type Contract } from 'ethers';
import { sql, type Kysely } from 'kysely';
import { EvmChain, TRANSFER_TOPIC, type EvmToken } from '../../adapters/chains/evm/index.ts';
import type { ChainBlock } from '../../adapters/chains/port.ts';
import { systemClock } from '../../adapters/clock.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { SqlEventStore } from '../../adapters/event-store/sql.ts';
import { DepositKeyring, depositAddressesFromKeyring, generateMnemonic } from '../../adapters/keys/derivation.ts';
import { FixedRateProvider } from '../../adapters/rates/fixed.ts';
import { projectors } from '../../api/service.ts';
import { watchListProjector } from '../../commands/watch-list.ts';
import { ChainWatcher } from '../../commands/chain-watcher.ts';
import { invoiceCommands } from '../../commands/invoices.ts';
import { merchantCommands } from '../../commands/merchants.ts';
import { paymentCommands, paymentsToInvoices, type WatchedAddress } from '../../commands/payments.ts';
import { migrateWebhookDeliveries } from '../../commands/webhook-delivery.ts';
import { paymentStreamName } from '../../domain/payment.ts';
import { ProjectionEngine } from '../../adapters/event-store/followers.ts';
import { readModelMigrations } from '../../projections/schema.ts';
import { subscriberWebhooks, webhookEvents } from '../../projections/webhook-outboxes.ts';
import { baseUnits, evmFixture, randomWallet, type EvmFixture } from '../support/evm-flow.ts';
import { compileTestToken, HARDHAT_CHAIN_ID, startHardhat, type LocalNode } from '../support/hardhat.ts';
import { merchantWithKey } from '../support/merchant.ts';
import { freshPostgres } from '../support/postgres.ts';
import { startTestService } from '../support/service.ts';
import {
  count,
  formatMs,
  median,
  percentile,
  progress,
  scaled,
  timed,
  wasInterrupted,
  type BenchSuite,
  type BenchTarget,
} from './support.ts';
import { formatRatio, formatSeconds, markdownTable } from './table.ts';

// Sizes. Only the watched addresses follow BENCH_SCALE; the block is always the same.
const WATCHED_ADDRESSES = scaled(1_000_000, 1_000);
const NATIVE_TRANSFERS = 300;
const TOKEN_TRANSFERS = 1_000;
const TRANSFERS_PER_TOKEN_TX = 100;
/** Recipients in each block that are deposit addresses of real invoices (per kind). */
const WATCHED_PER_KIND = 5;
/** Blocks built and measured per database; one ChainWatcher.step() each. */
const BLOCKS = 5;
/** block(height) and matching-query samples per block, each side, alternating who goes first. */
const ROUNDS = 10;
const INSERT_BATCH = 5_000;
const LATENCY_WARMUP = 2;
const LATENCY_TRIALS = 20;
/** The service's watcher and its head poll run every second; so does the baseline poller. */
const POLL_MS = 1_000;
const DETECTION_TIMEOUT_MS = 30_000;
const MONITORING_WINDOW_MS = 24 * 60 * 60 * 1000;
const CHAIN = 'ethereum';

const hex = (n: number | bigint) => '0x' + n.toString(16);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------
// Plain JSON-RPC over fetch: the baselines, and the node's test methods.

interface RawTx {
  hash: string;
  to: string | null;
  value: string;
}
interface RawBlock {
  number: string;
  hash: string;
  parentHash: string;
  transactions: RawTx[];
}
interface RawLog {
  topics: string[];
  transactionHash: string;
  logIndex: string;
}

let rpcId = 0;

async function rpc<T>(url: string, method: string, params: unknown[] = []): Promise<T> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcId, method, params }),
  });
  const body = (await response.json()) as { result?: T; error?: { message: string } };
  if (body.error) throw new Error(`${method}: ${body.error.message}`);
  return body.result as T;
}

/** One HTTP request carrying several calls (the node answers them in order). */
async function rpcBatch(url: string, calls: readonly { method: string; params: unknown[] }[]): Promise<unknown[]> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(calls.map((c) => ({ jsonrpc: '2.0', id: ++rpcId, ...c }))),
  });
  const body = (await response.json()) as { id: number; result?: unknown; error?: { message: string } }[];
  const failed = body.find((b) => b.error);
  if (failed) throw new Error(`batch call failed: ${failed.error!.message}`);
  return body.map((b) => b.result);
}

/** The baseline of block(height): the block with its transactions and the tokens' Transfer logs, parsed JSON. */
async function rawBlockAndLogs(url: string, height: number, tokens: readonly string[]) {
  const block = await rpc<RawBlock>(url, 'eth_getBlockByNumber', [hex(height), true]);
  const logs = await rpc<RawLog[]>(url, 'eth_getLogs', [
    { fromBlock: hex(height), toBlock: hex(height), address: tokens, topics: [TRANSFER_TOPIC] },
  ]);
  return { block, logs };
}

/** Recipients the plain way: value-carrying transactions and the logs' `to` topic, checksummed as stored. */
function rawRecipients({ block, logs }: { block: RawBlock; logs: RawLog[] }): string[] {
  const to = new Set<string>();
  for (const tx of block.transactions) if (tx.to && BigInt(tx.value) > 0n) to.add(tx.to.toLowerCase());
  for (const log of logs) if (log.topics.length === 3) to.add('0x' + log.topics[2]!.slice(26));
  return [...to].map((address) => getAddress(address));
}

/**
 * Random addresses, lower-case, or with the mixed case of EIP-55 checksums
 * (random, not computed: no keccak for a million addresses that are never paid).
 */
function randomAddresses(n: number, mixedCase = false): string[] {
  const bytes = randomBytes(n * 20).toString('hex');
  if (!mixedCase) return Array.from({ length: n }, (_, i) => '0x' + bytes.slice(i * 40, i * 40 + 40));
  const coin = randomBytes(n * 40);
  const out = new Array<string>(n);
  for (let i = 0; i < n; i++) {
    let address = '0x';
    for (let j = 0; j < 40; j++) {
      const c = bytes[i * 40 + j]!;
      address += c >= 'a' && coin[i * 40 + j]! & 1 ? c.toUpperCase() : c;
    }
    out[i] = address;
  }
  return out;
}

// ---------------------------------------------------------------------------
// The chain: tokens, and blocks of 300 native transfers and 1,000 token logs.

interface Chain {
  node: LocalNode;
  fx: EvmFixture;
  version: string;
  tokens: EvmToken[];
  usdt: string;
  /** Hardhat accounts (unlocked on the node): one sends the big blocks, one pays the latency invoices. */
  bulkSender: string;
  payer: string;
  token: Interface;
}

const GAS_PRICE = { maxFeePerGas: hex(100n * 10n ** 9n), maxPriorityFeePerGas: hex(10n ** 9n) };

async function prepareChain(node: LocalNode): Promise<Chain> {
  const fx = await evmFixture(node);
  const token = new Interface((await compileTestToken()).abi);
  const addressOf = async (c: Contract) => getAddress(await c.getAddress());
  const tokens: EvmToken[] = [
    { symbol: 'USDT', contract: await addressOf(fx.usdt), decimals: 6 },
    { symbol: 'USDC', contract: await addressOf(fx.usdc), decimals: 6 },
  ];
  const accounts = await node.rpc<string[]>('eth_accounts');
  const [bulkSender, payer] = [accounts[1]!, accounts[2]!];
  // Automine is still on: each mint is mined as it is sent.
  for (const to of [bulkSender, payer]) {
    await node.rpc('eth_sendTransaction', [
      {
        from: to,
        to: tokens[0]!.contract,
        data: token.encodeFunctionData('mint', [to, 10n ** 18n]),
        gas: hex(100_000),
      },
    ]);
  }
  const version = await node.rpc<string>('web3_clientVersion');
  // From here on blocks are mined only when asked for.
  await node.rpc('evm_setAutomine', [false]);
  return { node, fx, version, tokens, usdt: tokens[0]!.contract, bulkSender, payer, token };
}

interface BulkBlock {
  height: number;
  hash: string;
  transactions: number;
  logs: number;
}

/**
 * Sends 300 native transfers and 1,000 token transfers (in transferMany
 * transactions of 100) from one account, the watched recipients among random
 * ones, then mines them into one block with `evm_mine`.
 */
async function mineBulkBlock(
  chain: Chain,
  watchedNative: readonly { address: string; amount: bigint }[],
  watchedToken: readonly { address: string; amount: bigint }[],
): Promise<BulkBlock> {
  const { node, bulkSender, usdt, token } = chain;
  let nonce = Number(await node.rpc<string>('eth_getTransactionCount', [bulkSender, 'pending']));
  const spread = <T>(others: T[], chosen: readonly T[]) => {
    const step = Math.floor(others.length / (chosen.length + 1));
    chosen.forEach((c, i) => (others[(i + 1) * step] = c));
    return others;
  };
  const native = spread(
    randomAddresses(NATIVE_TRANSFERS).map((address, i) => ({ address, amount: 10n ** 12n + BigInt(i) })),
    watchedNative,
  );
  const tokenTransfers = spread(
    randomAddresses(TOKEN_TRANSFERS).map((address, i) => ({ address, amount: 1_000n + BigInt(i) })),
    watchedToken,
  );
  const calls: { method: string; params: unknown[] }[] = native.map((t) => ({
    method: 'eth_sendTransaction',
    params: [
      { from: bulkSender, to: t.address, value: hex(t.amount), gas: hex(21_000), nonce: hex(nonce++), ...GAS_PRICE },
    ],
  }));
  for (let i = 0; i < tokenTransfers.length; i += TRANSFERS_PER_TOKEN_TX) {
    const part = tokenTransfers.slice(i, i + TRANSFERS_PER_TOKEN_TX);
    const data = token.encodeFunctionData('transferMany', [part.map((t) => t.address), part.map((t) => t.amount)]);
    calls.push({
      method: 'eth_sendTransaction',
      params: [{ from: bulkSender, to: usdt, data, gas: hex(4_000_000), nonce: hex(nonce++), ...GAS_PRICE }],
    });
  }
  await rpcBatch(node.url, calls);
  await node.rpc('evm_mine');
  const { block, logs } = await rawBlockAndLogs(node.url, Number(await node.rpc<string>('eth_blockNumber')), [usdt]);
  const ours = block.transactions.filter((t) => t.to !== null).length;
  if (ours < calls.length || logs.length !== TOKEN_TRANSFERS) {
    throw new Error(
      `block ${Number(block.number)} holds ${ours} transactions and ${logs.length} logs, not ${calls.length} and ${TOKEN_TRANSFERS}`,
    );
  }
  return { height: Number(block.number), hash: block.hash, transactions: block.transactions.length, logs: logs.length };
}

// ---------------------------------------------------------------------------
// 1. One block against many watched addresses.

type PairKey = 'block' | 'match' | 'step';

interface BlockReport {
  target: BenchTarget;
  samples: Record<PairKey, { ours: number[]; baseline: number[] }>;
  fill?: { rows: number; ms: number };
  recipients?: number;
  matched?: number[];
  error?: string;
  ms?: number;
}

const BLOCK_MEASURES: readonly { key: PairKey; label: string }[] = [
  { key: 'block', label: '(a) EvmChain.block(height): RPC + parsing' },
  { key: 'match', label: "(b) the watcher's matching query, the block's recipients" },
  { key: 'step', label: '(c) ChainWatcher.step() on the block' },
];

/**
 * Rows for the watched addresses: one invoice each, and its address, in the
 * read models and in the watchers' own watch list, `INSERT_BATCH` per statement.
 */
export async function insertWatched(
  db: Kysely<any>,
  rows: number,
  onProgress: (done: number) => void,
  { chain = CHAIN, addresses = (n: number) => randomAddresses(n, true) } = {},
): Promise<void> {
  const merchantId = randomUUID();
  for (let done = 0; done < rows; done += INSERT_BATCH) {
    const n = Math.min(INSERT_BATCH, rows - done);
    const ids = Array.from({ length: n }, () => randomUUID());
    const indexes = Array.from({ length: n }, (_, i) => 1_000_000_000 + done + i);
    await sql`
      insert into invoices (id, merchant_id, amount, currency, status, cancelled, expires_at, chain, token,
                            crypto_amount, payment_status, paid_late, total_received_amount, total_received_currency,
                            remaining_amount, payment_progress, has_detected_payment, created_at, updated_at)
      select id, ${merchantId}::uuid, '25', 'USD', 'pending', false, now() + interval '15 minutes', ${chain}, 'USDT',
             '25.00000000', 'pending', false, '0', 'USDT', '25.00000000', 0, false, now(), now()
        from unnest(${ids}::uuid[]) as t(id)`.execute(db);
    await sql`
      insert into invoice_addresses (chain, address, invoice_id, token, token_decimals, derivation_index, rate,
                                     crypto_amount, quoted_at, rate_valid_until)
      select ${chain}, address, id, 'USDT', 6, derivation_index, '1', 25000000, now(), now() + interval '15 minutes'
        from unnest(${addresses(n)}::text[], ${ids}::uuid[], ${indexes}::int[]) as t(address, id, derivation_index)`.execute(
      db,
    );
    await sql`
      insert into watched_addresses (chain, address, invoice_id)
      select chain, address, invoice_id from invoice_addresses where invoice_id = any(${ids}::uuid[])`.execute(db);
    if ((done / INSERT_BATCH) % 40 === 39) onProgress(done + n);
  }
}

/** Waits until every projector and reactor has caught up with the log and the log has stopped growing. */
export async function quiesce(projections: ProjectionEngine): Promise<void> {
  const deadline = Date.now() + 60_000;
  let idle = 0;
  while (idle < 2) {
    if (Date.now() > deadline) throw new Error('the projections did not catch up in 60 s');
    const behind = (await projections.status()).some((s) => s.eventsBehind > 0);
    idle = behind ? 0 : idle + 1;
    await sleep(behind ? 25 : 100);
  }
}

async function measureBlocks(chain: Chain, target: BenchTarget, report: BlockReport): Promise<void> {
  const label = target.label;
  const started = performance.now();
  const fresh = await target.open();
  const { database } = fresh;
  const db = database.db;
  const closers: (() => Promise<void> | void)[] = [];
  try {
    const store = await SqlEventStore.open(database);
    closers.push(() => store.close());
    await ProjectionEngine.migrate(database, readModelMigrations);
    await ChainWatcher.migrate(database);
    await migrateWebhookDeliveries(database);
    // The service's projectors (read models and webhook outboxes) and the reactor that carries payments onto invoices.
    const projections = new ProjectionEngine(database, store, [
      ...projectors,
      webhookEvents,
      subscriberWebhooks('http://127.0.0.1'),
      paymentsToInvoices(store),
      watchListProjector,
    ]);
    projections.start();
    closers.push(() => projections.stop());

    const keyring = DepositKeyring.fromMnemonic(generateMnemonic());
    const invoices = invoiceCommands({
      store,
      clock: systemClock,
      rates: await FixedRateProvider.open(store),
      addresses: depositAddressesFromKeyring(keyring),
      enabledChains: [CHAIN],
    });
    const merchant = await merchantCommands(store).register({
      name: 'Bench shop',
      tier: 'pro',
      webhookUrl: null,
      settlementWallets: { [CHAIN]: randomWallet() },
    });
    await projections.waitFor(merchant.position!, 30_000);

    // The watched addresses: real invoices' (created per block, below) and the rest straight into the read model.
    const fillers = WATCHED_ADDRESSES - BLOCKS * WATCHED_PER_KIND * 2;
    const fillMs = await timed(() =>
      insertWatched(db, fillers, (done) => progress(label, `${count(done)} of ${count(fillers)} rows inserted`)),
    );
    await sql`analyze invoice_addresses`.execute(db);
    await sql`analyze watched_addresses`.execute(db);
    await sql`analyze invoices`.execute(db);
    report.fill = { rows: fillers, ms: fillMs };
    progress(label, `${count(fillers)} invoices and addresses inserted in ${formatSeconds(fillMs)}`);

    const adapterOptions = {
      chain: CHAIN,
      rpcUrl: chain.node.url,
      chainId: HARDHAT_CHAIN_ID,
      tokens: chain.tokens,
      keyring,
      platformFeeBps: 100,
    } as const;
    const adapter = await EvmChain.open(adapterOptions);
    closers.push(() => adapter.close());
    const errors: unknown[] = [];
    const watcher = new ChainWatcher(adapter, database, paymentCommands(store, systemClock), systemClock, {
      requiredConfirmations: 3,
      monitoringWindowMs: MONITORING_WINDOW_MS,
      caughtUp: () => projections.caughtUp(30_000, [watchListProjector.name]),
      paymentsApplied: () => projections.caughtUp(30_000, ['payments-to-invoices']),
      onError: (error) => errors.push(error),
    });
    // The private query the watcher runs once per block (commands/chain-watcher.ts).
    const matching = watcher as unknown as { watchedAmong(addresses: string[]): Promise<Map<string, WatchedAddress>> };
    if (typeof matching.watchedAmong !== 'function') throw new Error('ChainWatcher has no watchedAmong any more');
    // Caught up with the head, as a running watcher is when a block comes.
    while (await watcher.step());

    const tokenAddresses = chain.tokens.map((t) => t.contract);
    const rawMatch = (addresses: string[]) =>
      sql<{ address: string }>`
        select address from invoice_addresses where chain = ${CHAIN} and address = any(${addresses}::text[])`.execute(
        db,
      );
    report.matched = [];
    for (let b = 0; b < BLOCKS && !wasInterrupted(); b++) {
      const payments = [];
      for (const token of ['ETH', 'USDT'] as const) {
        for (let i = 0; i < WATCHED_PER_KIND; i++) {
          const { value, position } = await invoices.createPayment(merchant.value.id, {
            amount: '25',
            currency: 'USD',
            description: null,
            expiresInMinutes: 15,
            webhookUrl: null,
            metadata: null,
            chain: CHAIN,
            token: token === 'ETH' ? undefined : token,
          });
          payments.push({ token, address: value.address.address, amount: value.address.cryptoAmount, position });
        }
      }
      await quiesce(projections);
      const block = await mineBulkBlock(
        chain,
        payments.filter((p) => p.token === 'ETH'),
        payments.filter((p) => p.token === 'USDT'),
      );

      // (c) and its baseline, once each, alternating who reads the new block first.
      let stepMs = 0;
      let stepBaselineMs = 0;
      const step = async () => {
        stepMs = await timed(async () => {
          if (await watcher.step()) throw new Error('the watcher is behind the head');
        });
        // The reactor carries the payments onto their invoices; the baseline does not wait behind it.
        await quiesce(projections);
      };
      const plainStep = async () => {
        let found = 0;
        stepBaselineMs = await timed(async () => {
          const raw = await rawBlockAndLogs(chain.node.url, block.height, tokenAddresses);
          found = (await rawMatch(rawRecipients(raw))).rows.length;
        });
        if (found !== WATCHED_PER_KIND * 2) throw new Error(`the plain step found ${found} watched recipients`);
      };
      for (const run of b % 2 === 0 ? [step, plainStep] : [plainStep, step]) await run();
      report.samples.step.ours.push(stepMs);
      report.samples.step.baseline.push(stepBaselineMs);
      const rows = await sql<{ n: number }>`
        select count(*)::int as n from payments where block_number = ${block.height}`.execute(db);
      report.matched.push(rows.rows[0]!.n);

      // The block's recipients as the watcher asks for them (checksummed, distinct).
      const parsed = (await adapter.block(block.height)) as ChainBlock;
      if (parsed.transfers.length !== NATIVE_TRANSFERS + TOKEN_TRANSFERS) {
        throw new Error(`block(${block.height}) gave ${parsed.transfers.length} transfers`);
      }
      const recipients = [...new Set(parsed.transfers.map((t) => t.to))];
      report.recipients = recipients.length;
      const expected = WATCHED_PER_KIND * 2;
      const found = await matching.watchedAmong(recipients);
      const plain = await rawMatch(recipients);
      if (found.size !== expected || plain.rows.length !== expected) {
        throw new Error(`block ${block.height}: ${found.size} and ${plain.rows.length} of ${expected} watched found`);
      }

      for (let round = 0; round < ROUNDS; round++) {
        const sides = {
          ours: async () => {
            // A fresh adapter each time: block() keeps the blocks it parsed.
            const fresh = await EvmChain.open(adapterOptions);
            try {
              report.samples.block.ours.push(await timed(() => fresh.block(block.height)));
            } finally {
              fresh.close();
            }
          },
          baseline: async () =>
            report.samples.block.baseline.push(
              await timed(() => rawBlockAndLogs(chain.node.url, block.height, tokenAddresses)),
            ),
        };
        for (const side of round % 2 === 0 ? (['ours', 'baseline'] as const) : (['baseline', 'ours'] as const)) {
          await sides[side]();
        }
      }
      for (let round = 0; round < ROUNDS; round++) {
        const sides = {
          ours: async () => report.samples.match.ours.push(await timed(() => matching.watchedAmong(recipients))),
          baseline: async () => report.samples.match.baseline.push(await timed(() => rawMatch(recipients))),
        };
        for (const side of round % 2 === 0 ? (['ours', 'baseline'] as const) : (['baseline', 'ours'] as const)) {
          await sides[side]();
        }
      }
      progress(
        label,
        `block ${block.height} (${block.transactions} txs, ${block.logs} logs, ${recipients.length} recipients): ` +
          `step ${formatMs(stepMs)} (plain ${formatMs(stepBaselineMs)}), ` +
          `block() p50 ${formatMs(median(report.samples.block.ours.slice(-ROUNDS)))}, ` +
          `match p50 ${formatMs(median(report.samples.match.ours.slice(-ROUNDS)))}`,
      );
    }
    if (errors.length > 0) throw new Error(`the watcher reported: ${String(errors[0])}`);
    const short = report.matched.filter((n) => n !== WATCHED_PER_KIND * 2);
    if (short.length > 0) {
      throw new Error(`payments recorded per block: ${report.matched.join(', ')} (not ${WATCHED_PER_KIND * 2} each)`);
    }
  } finally {
    for (const close of closers.reverse()) await close();
    await fresh.dispose();
    report.ms = performance.now() - started;
  }
}

// ---------------------------------------------------------------------------
// 2. Detection latency of the running service.

interface LatencyReport {
  target: BenchTarget;
  service: number[];
  poller: number[];
  error?: string;
}

/**
 * A plain watcher of the node: eth_blockNumber every second and, on a new
 * block, the block with its transactions and the tokens' logs, looking for
 * the transaction it is told to wait for.
 */
function startPoller(url: string, tokens: readonly string[]) {
  let last = -1;
  let busy = false;
  let wanted: { txHash: string; seen: (at: number) => void } | undefined;
  const tick = async () => {
    if (busy) return;
    busy = true;
    try {
      const head = Number(await rpc<string>(url, 'eth_blockNumber'));
      if (last < 0) last = head;
      for (let height = last + 1; height <= head; height++) {
        const { block, logs } = await rawBlockAndLogs(url, height, tokens);
        const hashes = new Set([
          ...block.transactions.filter((t) => t.to && BigInt(t.value) > 0n).map((t) => t.hash),
          ...logs.map((l) => l.transactionHash),
        ]);
        if (wanted && hashes.has(wanted.txHash)) {
          wanted.seen(performance.now());
          wanted = undefined;
        }
        last = height;
      }
    } catch {
      // The next tick tries again.
    } finally {
      busy = false;
    }
  };
  const timer = setInterval(() => void tick(), POLL_MS);
  return {
    prime: tick,
    /** Resolves with the time the poller saw `txHash` in a block. */
    waitFor(txHash: string): Promise<number> {
      return new Promise((resolve, reject) => {
        const timeout = setTimeout(() => {
          wanted = undefined;
          reject(new Error(`the plain poller did not see ${txHash} in ${DETECTION_TIMEOUT_MS / 1000} s`));
        }, DETECTION_TIMEOUT_MS);
        wanted = {
          txHash,
          seen: (at) => {
            clearTimeout(timeout);
            resolve(at);
          },
        };
      });
    },
    stop: () => clearInterval(timer),
  };
}

/** Resolves with the time a read of the payment's stream first shows PaymentDetected; checked on every append. */
function detectedInStore(store: EventStore, streamId: Promise<string>): Promise<number> {
  return new Promise((resolve, reject) => {
    let id: string | undefined;
    let checking = false;
    let again = false;
    const finish = (error?: unknown, at?: number) => {
      stop();
      clearInterval(poll);
      clearTimeout(timeout);
      if (error) reject(error);
      else resolve(at!);
    };
    const check = async () => {
      if (!id) return;
      if (checking) {
        again = true;
        return;
      }
      checking = true;
      try {
        do {
          again = false;
          const events = await store.readStream(id);
          if (events.some((e) => e.type === 'PaymentDetected')) return finish(undefined, performance.now());
        } while (again);
      } catch (error) {
        finish(error);
      } finally {
        checking = false;
      }
    };
    const stop = store.onAppended(() => void check());
    const poll = setInterval(() => void check(), 250);
    const timeout = setTimeout(
      () => finish(new Error(`no PaymentDetected in ${DETECTION_TIMEOUT_MS / 1000} s`)),
      DETECTION_TIMEOUT_MS,
    );
    streamId.then((value) => {
      id = value;
      void check();
    }, finish);
  });
}

async function measureLatency(chain: Chain, target: BenchTarget, report: LatencyReport): Promise<void> {
  const label = target.label;
  const { node, payer, usdt, token } = chain;
  const postgres = target.engine === 'postgres' ? await freshPostgres() : undefined;
  if (target.engine === 'postgres' && !postgres) throw new Error('could not create a PostgreSQL database');
  const svc = await startTestService({ ...chain.fx.env, ...(postgres && { DATABASE_URL: postgres.url }) });
  const poller = startPoller(node.url, [usdt]);
  try {
    const { key, merchant } = await merchantWithKey(svc);
    await svc.call('PATCH', `/admin/v1/merchants/${merchant.id}`, {
      token: svc.adminToken,
      body: { settlementWallets: { [CHAIN]: randomWallet() } },
    });
    // The fee wallet pays the gas of token sweeps; the payments confirm (3 blocks) and are settled meanwhile.
    const [wallet] = (await svc.call('GET', '/admin/v1/wallets', { token: svc.adminToken })).body.data;
    await node.rpc('eth_sendTransaction', [
      { from: payer, to: wallet.feeWallet, value: hex(10n ** 19n), gas: hex(21_000), ...GAS_PRICE },
    ]);
    await node.rpc('evm_mine');
    await poller.prime();
    for (let trial = 0; trial < LATENCY_WARMUP + LATENCY_TRIALS && !wasInterrupted(); trial++) {
      const symbol = trial % 2 === 0 ? 'ETH' : 'USDT';
      const created = await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount: '25', currency: 'USD', chain: CHAIN, ...(symbol === 'USDT' && { token: 'USDT' }) },
      });
      if (created.status !== 201) throw new Error(`POST /api/v1/payments: ${JSON.stringify(created.body)}`);
      const { address, cryptoAmount } = created.body.data as { address: string; cryptoAmount: string };
      const tx =
        symbol === 'ETH'
          ? { from: payer, to: address, value: hex(baseUnits(cryptoAmount, 18)), gas: hex(21_000) }
          : {
              from: payer,
              to: usdt,
              data: token.encodeFunctionData('transfer', [address, baseUnits(cryptoAmount, 6)]),
              gas: hex(100_000),
            };
      const txHash = await node.rpc<string>('eth_sendTransaction', [{ ...tx, ...GAS_PRICE }]);
      // Mined at a random moment of the pollers' one-second cycles.
      await sleep(Math.random() * POLL_MS);
      let resolveMined!: (v: void) => void;
      const mined = new Promise<void>((resolve) => (resolveMined = resolve));
      const streamId = mined.then(async () => {
        const receipt = await node.rpc<{ logs: { logIndex: string }[] }>('eth_getTransactionReceipt', [txHash]);
        return paymentStreamName(CHAIN, txHash, symbol === 'ETH' ? 0 : Number(receipt.logs[0]!.logIndex));
      });
      const inStore = detectedInStore(svc.service.store, streamId);
      const polled = poller.waitFor(txHash);
      await node.rpc('evm_mine');
      const minedAt = performance.now();
      resolveMined();
      const [serviceAt, pollerAt] = await Promise.all([inStore, polled]);
      if (trial < LATENCY_WARMUP) continue;
      report.service.push(serviceAt - minedAt);
      report.poller.push(pollerAt - minedAt);
    }
    progress(
      label,
      `detection p50 ${formatMs(median(report.service))}, p95 ${formatMs(percentile(report.service, 95))} ` +
        `(poller p50 ${formatMs(median(report.poller))})`,
    );
  } finally {
    poller.stop();
    // Pending settlement transactions (a sweep waiting for its gas top-up) are mined, and later ones at once.
    await node.rpc('evm_setAutomine', [true]);
    await node.rpc('evm_mine');
    await svc.close();
    await node.rpc('evm_setAutomine', [false]);
    await postgres?.drop();
  }
}

// ---------------------------------------------------------------------------

function printBlockReport(chain: Chain, reports: readonly BlockReport[], targets: readonly BenchTarget[]): void {
  console.log(
    `\n## EVM: one block of ${count(NATIVE_TRANSFERS)} native transfers and ${count(TOKEN_TRANSFERS)} token logs ` +
      `against ${count(WATCHED_ADDRESSES)} watched addresses\n`,
  );
  console.log(`- node: ${chain.version} (Hardhat 2), 127.0.0.1`);
  for (const target of targets) {
    const report = reports.find((r) => r.target === target);
    if (target.skipped || !report) {
      console.log(`- ${target.label}: ${target.skipped ?? 'not measured'}`);
      continue;
    }
    const fill = report.fill
      ? `; ${count(report.fill.rows)} invoices + addresses inserted in ${formatSeconds(report.fill.ms)} ` +
        `(${count(INSERT_BATCH)} rows per statement)`
      : '';
    const took = report.ms === undefined ? '' : `; took ${formatSeconds(report.ms)}`;
    console.log(`- ${target.label}: fresh database${fill}${took}`);
    if (report.matched?.length) console.log(`  - payments recorded per block: ${report.matched.join(', ')}`);
    if (report.error) console.log(`  - error: ${report.error}`);
  }
  const cells = (report: BlockReport | undefined, key: PairKey) => {
    if (!report || report.target.skipped) return ['skipped', 'skipped', '–'];
    const { ours, baseline } = report.samples[key];
    if (ours.length === 0) return report.error ? ['error', 'error', '–'] : ['–', '–', '–'];
    return [formatMs(median(ours)), formatMs(median(baseline)), formatRatio(median(ours), median(baseline))];
  };
  const [lite, postgres] = targets.map((t) => reports.find((r) => r.target === t));
  const recipients = reports.find((r) => r.recipients)?.recipients;
  console.log('');
  console.log(
    markdownTable(
      [
        'measure (median)',
        'PGlite ours',
        'PGlite baseline',
        'ratio',
        'PostgreSQL ours',
        'PostgreSQL baseline',
        'ratio',
      ],
      BLOCK_MEASURES.map((m) => [m.label, ...cells(lite, m.key), ...cells(postgres, m.key)]),
    ),
  );
  const watched = WATCHED_PER_KIND * 2;
  const distinct = recipients === undefined ? '' : `${count(recipients)} distinct recipients, `;
  const notes = [
    'Times are medians; ratio = ours ÷ baseline (above 1: ours is slower).',
    `- Each block: ${count(NATIVE_TRANSFERS)} ETH transfers and ${TOKEN_TRANSFERS / TRANSFERS_PER_TOKEN_TX} transferMany ` +
      `transactions of ${TRANSFERS_PER_TOKEN_TX} USDT transfers,`,
    '  mined together by evm_mine with automine off; ' +
      `${distinct}${watched} of them deposit addresses of real invoices (${WATCHED_PER_KIND} ETH, ${WATCHED_PER_KIND} USDT).`,
    `  The other ${count(WATCHED_ADDRESSES - BLOCKS * watched)} watched addresses and their invoices are inserted ` +
      `straight into invoice_addresses, invoices and the watchers' watched_addresses`,
    `  (unnest, ${count(INSERT_BATCH)} rows per statement), then analyzed.`,
    '- (a) ours: a fresh EvmChain (empty block cache) per call, the block at the head: eth_getBlockByNumber (header),',
    '  eth_getBlockByNumber with transactions, eth_getLogs, checksummed parsing.',
    '  Baseline: fetch of eth_getBlockByNumber with transactions and eth_getLogs of the block, JSON-parsed, nothing else.',
    "- (b) ours: the watcher's matching, after waiting for its watch list to show every committed append: the recipients",
    '  among watched_addresses (address = any($2)) of open or recently closed invoices.',
    '  Baseline: select address from invoice_addresses where chain = $1 and address = any($2).',
    "- (c) ours: ChainWatcher.step() of a watcher caught up to the block's parent: head, reorg check, block(), the matching",
    `  query, PaymentDetected appended for each of the ${watched} watched transfers, waiting for the read models; the service's`,
    '  projectors and the payments-to-invoices reactor run alongside. Baseline: the (a) baseline, the recipients picked',
    '  out of the JSON (checksummed, as stored), then the (b) baseline.',
    `- ${BLOCKS} blocks per database; (a) and (b) ${ROUNDS} calls per block each side, alternating who goes first; ` +
      '(c) and its baseline once per block, alternating.',
  ];
  console.log(`\n${notes.join('\n')}`);
}

function printLatencyReport(reports: readonly LatencyReport[], targets: readonly BenchTarget[]): void {
  console.log('\n## EVM: payment detection latency (evm_mine returns → PaymentDetected in the store)\n');
  const rows = targets.map((target) => {
    const report = reports.find((r) => r.target === target);
    if (target.skipped || !report) return [target.label, '0', 'skipped', 'skipped', 'skipped', 'skipped', '–', '–'];
    if (report.service.length === 0) return [target.label, '0', 'error', 'error', 'error', 'error', '–', '–'];
    const [s50, s95, p50, p95] = [
      median(report.service),
      percentile(report.service, 95),
      median(report.poller),
      percentile(report.poller, 95),
    ];
    return [
      target.label,
      String(report.service.length),
      formatMs(s50),
      formatMs(s95),
      formatMs(p50),
      formatMs(p95),
      formatRatio(s50, p50),
      formatRatio(s95, p95),
    ];
  });
  console.log(
    markdownTable(
      ['database', 'payments', 'service p50', 'service p95', 'poller p50', 'poller p95', 'ratio p50', 'ratio p95'],
      rows,
    ),
  );
  const notes = [
    'Ratio = service ÷ poller (above 1: the service is slower).',
    '- The service runs in this process (startTestService, CHAIN_ETHEREUM_RPC_URL the node). Payments alternate ETH and USDT:',
    '  each is created over the API, sent, and mined alone at a random moment of the one-second polling cycles',
    `  (${LATENCY_WARMUP} warm-up payments first, not counted).`,
    "- Service: from evm_mine returning until a read of the payment's stream shows PaymentDetected (read on every append).",
    '  Its watcher steps when its head poll (every 1 s) sees a new block, or when its own 1 s loop comes round.',
    `- Poller (baseline): here, eth_blockNumber every ${POLL_MS / 1000} s, then the new block and its token logs by fetch.`,
    '- Earlier payments confirm (3 blocks) and are settled meanwhile, so the service does that work too.',
  ];
  console.log(`\n${notes.join('\n')}`);
  for (const report of reports) if (report.error) console.log(`- ${report.target.label}: error: ${report.error}`);
}

export const evmSuite: BenchSuite = {
  name: 'EVM block processing and detection latency',
  async run({ targets }) {
    const started = await startHardhat();
    if ('skip' in started) {
      console.log(`\n## EVM block processing and detection latency\n\nskipped: ${started.skip}`);
      return;
    }
    const node = started;
    try {
      const chain = await prepareChain(node);
      const blockReports: BlockReport[] = [];
      for (const target of targets) {
        if (target.skipped || wasInterrupted()) continue;
        const report: BlockReport = {
          target,
          samples: {
            block: { ours: [], baseline: [] },
            match: { ours: [], baseline: [] },
            step: { ours: [], baseline: [] },
          },
        };
        blockReports.push(report);
        try {
          await measureBlocks(chain, target, report);
        } catch (error) {
          report.error = error instanceof Error ? error.message : String(error);
          progress(target.label, `failed: ${report.error}`);
        }
      }
      printBlockReport(chain, blockReports, targets);
      const latencyReports: LatencyReport[] = [];
      for (const target of targets) {
        if (target.skipped || wasInterrupted()) continue;
        const report: LatencyReport = { target, service: [], poller: [] };
        latencyReports.push(report);
        try {
          await measureLatency(chain, target, report);
        } catch (error) {
          report.error = error instanceof Error ? error.message : String(error);
          progress(target.label, `failed: ${report.error}`);
        }
      }
      printLatencyReport(latencyReports, targets);
      if ([...blockReports, ...latencyReports].some((r) => r.error)) process.exitCode = 1;
    } finally {
      await node.stop();
    }
  },
};
