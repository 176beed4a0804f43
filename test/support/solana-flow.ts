// Shared steps of the Solana integration tests: a test node with the
// catalogue's USDT and USDC mints, and the service's environment for it.
import { randomUUID } from 'node:crypto';
import { Keypair } from '@solana/web3.js';
import type { SolanaChain } from '../../adapters/chains/solana/index.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { DepositKeyring } from '../../adapters/keys/derivation.ts';
import type { Clock } from '../../adapters/clock.ts';
import { SqlEventStore } from '../../adapters/event-store/sql.ts';
import { openPglite } from '../../adapters/sql/database.ts';
import { handleCommand } from '../../commands/handle.ts';
import { PayoutEngine, migratePayoutQueue, payoutQueueProjector, type PayoutKind } from '../../commands/payouts.ts';
import { SettlementPayouts, type SettlementDeps } from '../../commands/settlements.ts';
import { findToken, type ChainName } from '../../domain/catalogue.ts';
import { merchantDecider, merchantStream } from '../../domain/merchant.ts';
import { settlementDecider, settlementIdOf, settlementStreamName } from '../../domain/settlement.ts';
import { ProjectionEngine } from '../../adapters/event-store/followers.ts';
import { readModelMigrations } from '../../projections/schema.ts';
import { SERVICE_MNEMONIC } from './evm-flow.ts';
import { startTestService, type RunningService } from './service.ts';
import { SolanaTestNode } from './solana-node.ts';

export const USDT_MINT = findToken('solana', 'USDT')!.contractAddress!;
export const USDC_MINT = findToken('solana', 'USDC')!.contractAddress!;

export async function startSolanaNode(options: { finalizedLag?: number } = {}): Promise<SolanaTestNode> {
  const node = await new SolanaTestNode({
    ...options,
    tokens: [
      { symbol: 'USDT', mint: USDT_MINT, decimals: 6 },
      { symbol: 'USDC', mint: USDC_MINT, decimals: 6 },
    ],
  }).start();
  await node.mine(40); // a finalized block to refer to
  return node;
}

/** The service's environment for the test node (mainnet-beta's genesis hash, the catalogue's mints). */
export function solanaEnv(node: SolanaTestNode, extra: Record<string, string> = {}): Record<string, string> {
  return {
    CHAINS: 'solana',
    CHAIN_SOLANA_RPC_URL: node.url,
    WALLET_MNEMONIC: SERVICE_MNEMONIC,
    RATE_LIMITS: 'off',
    ...extra,
  };
}

/** A test node, a payer holding SOL, USDT and USDC, and the service on that node. */
export async function startSolanaService(): Promise<{ node: SolanaTestNode; svc: RunningService; payer: Keypair }> {
  const node = await startSolanaNode();
  const payer = Keypair.generate();
  await node.airdrop(payer.publicKey, 10_000_000_000_000n);
  await node.mintTokens(payer.publicKey, 'USDT', 100_000_000_000n);
  await node.mintTokens(payer.publicKey, 'USDC', 100_000_000_000n);
  await node.mine();
  return { node, payer, svc: await startTestService(solanaEnv(node)) };
}

export async function stopSolanaService(node: SolanaTestNode | undefined, svc: RunningService | undefined) {
  await svc?.close();
  await node?.stop();
}

/**
 * `count` SOL settlements as the saga requests them, each for its own
 * merchant (a new wallet) and its own deposit address (derivation indexes
 * from `firstIndex`), funded with `gross` lamports on the node (mined in the
 * next block). Answers the settlement ids and the merchants' wallets.
 */
export async function requestSolSettlements(
  {
    store,
    node,
    chain,
    keyring,
  }: { store: EventStore; node: SolanaTestNode; chain: SolanaChain; keyring: DepositKeyring },
  { count, gross, firstIndex, now }: { count: number; gross: bigint; firstIndex: number; now: () => string },
): Promise<{ settlementIds: string[]; wallets: string[] }> {
  const settlementIds: string[] = [];
  const wallets: string[] = [];
  for (let i = 0; i < count; i++) {
    const merchantId = randomUUID();
    const wallet = Keypair.generate().publicKey.toBase58();
    wallets.push(wallet);
    await handleCommand(store, merchantDecider, merchantStream(merchantId), {
      type: 'RegisterMerchant',
      merchantId,
      profile: { name: `Shop ${i}`, tier: 'pro', webhookUrl: null, settlementWallets: { solana: wallet } },
      webhookSecret: 'whsec_x',
      now: now(),
    });
    const index = firstIndex + i;
    const deposit = keyring.deriveDepositKey('solana', index).address;
    await node.airdrop(deposit, gross);
    const invoiceId = randomUUID();
    const settlementId = settlementIdOf(invoiceId);
    settlementIds.push(settlementId);
    await handleCommand(store, settlementDecider, settlementStreamName(settlementId), {
      type: 'RequestSettlement',
      settlementId,
      invoiceId,
      merchantId,
      chain: 'solana',
      token: 'SOL',
      tokenDecimals: 9,
      fromAddress: deposit,
      derivationIndex: index,
      grossAmount: gross,
      networkFee: chain.networkFee('SOL'),
      platformFeeBps: 100,
      merchantWallet: null,
      now: now(),
    });
  }
  node.mine();
  return { settlementIds, wallets };
}

/**
 * The payout engine over a Solana adapter as the service runs it, on a fresh
 * PGlite: its queue projected from the log, settlement its kind (or the kinds
 * given). `pass` waits for the queue to show the log, then runs one pass.
 */
export async function solanaPayouts(
  chain: SolanaChain,
  options: { clock: Clock; kinds?: (deps: SettlementDeps) => PayoutKind[]; onError?: (error: unknown) => void },
) {
  const database = await openPglite('memory://');
  const store = await SqlEventStore.open(database);
  await ProjectionEngine.migrate(database, readModelMigrations);
  await migratePayoutQueue(database);
  const projections = new ProjectionEngine(database, store, [payoutQueueProjector], { pollMs: 20 });
  projections.start();
  const deps: SettlementDeps = {
    store,
    clock: options.clock,
    chains: new Map<ChainName, SolanaChain>([['solana', chain]]),
    platformFeeBps: 100,
    requiredConfirmations: { solana: 32 } as Record<ChainName, number>,
  };
  const engine = new PayoutEngine(
    database,
    options.kinds?.(deps) ?? [new SettlementPayouts(deps)],
    ['solana'],
    options.clock,
    { ...(options.onError && { onError: options.onError }) },
  );
  return {
    store,
    engine,
    async pass() {
      await projections.caughtUp();
      return engine.pass();
    },
    async close() {
      await engine.stop();
      await projections.stop();
      await store.close();
      await database.close();
    },
  };
}
