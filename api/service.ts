// The composition root: opens the stores, starts the projectors, process
// managers, chain watchers and timers, and builds the HTTP application.
// main.ts runs it as a process; tests run it in-process.
import { hostname } from 'node:os';
import type { FastifyBaseLogger } from 'fastify';
import { SandboxLedger } from '../adapters/chains/sandbox/ledger.ts';
import { secretSealer } from '../adapters/secrets.ts';
import { HttpError } from './errors.ts';
import type { EvmChain } from '../adapters/chains/evm/index.ts';
import { blockStart, DERIVATION_BLOCK_STREAM } from '../commands/derivation-indexes.ts';
import type { SolanaChain } from '../adapters/chains/solana/index.ts';
import type { TronChain } from '../adapters/chains/tron/index.ts';
import type { BitcoinChain } from '../adapters/chains/bitcoin/index.ts';
import { formatUnits } from '../domain/money.ts';
import { findChain } from '../domain/catalogue.ts';
import type { OperatorWallet } from './routes/admin.ts';
import { systemClock, type Clock } from '../adapters/clock.ts';
import { withAppendCounter } from '../adapters/event-store/instrumented.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { SqlEventStore } from '../adapters/event-store/sql.ts';
import {
  bitcoinNetworkOf,
  DepositKeyring,
  depositAddressesFromKeyring,
  isValidAddress,
} from '../adapters/keys/derivation.ts';
import { FixedRateProvider } from '../adapters/rates/fixed.ts';
import type { RateProvider } from '../adapters/rates/port.ts';
import { openRateSources } from '../adapters/rates/sources.ts';
import { SandboxClock } from '../adapters/sandbox-clock.ts';
import { openPglite, openPostgres, type SqlDatabase } from '../adapters/sql/database.ts';
import { ChainWatcher, type WatcherCondition } from '../commands/chain-watcher.ts';
import { watchListProjector } from '../commands/watch-list.ts';
import { ExpiryScheduler, expiringInvoicesProjector, migrateExpiringInvoices } from '../commands/expiry.ts';
import { SettlementPayouts, settlementManager } from '../commands/settlements.ts';
import { PayoutEngine, migratePayoutQueue, payoutQueueProjector } from '../commands/payouts.ts';
import type { ChainAdapter } from '../adapters/chains/port.ts';
import { WebhookDeliveryWorker, migrateWebhookDeliveries } from '../commands/webhook-delivery.ts';
import { subscriptionCommands, subscriptionManager } from '../commands/subscriptions.ts';
import { RenewalScheduler, migrateRenewals, renewalsProjector } from '../commands/renewals.ts';
import { subscriptionsProjector } from '../projections/subscriptions.ts';
import { settlementsProjector } from '../projections/settlements.ts';
import { refundsProjector } from '../projections/refunds.ts';
import { holdsToRelease, refundHoldsProjector } from '../projections/refund-holds.ts';
import { activityProjector } from '../projections/activity.ts';
import { RefundPayouts, refundCommands, refundManager } from '../commands/refunds.ts';
import { RefundExpiry, migrateRefundClaims, refundClaimsProjector } from '../commands/refund-expiry.ts';
import { RefundHoldRelease } from '../commands/refund-holds.ts';
import { LiveInvoiceStatus } from '../projections/live-status.ts';
import { invoiceCommands } from '../commands/invoices.ts';
import { merchantCommands, type MerchantCommands } from '../commands/merchants.ts';
import { paymentCommands, paymentsToInvoices } from '../commands/payments.ts';
import type { ChainName } from '../domain/catalogue.ts';
import { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { invoicesProjector } from '../projections/invoices.ts';
import { merchantsProjector } from '../projections/merchants.ts';
import { refundWebhooks, subscriberWebhooks, webhookEvents } from '../projections/webhook-outboxes.ts';
import { readModelMigrations } from '../projections/schema.ts';
import { buildApp, type App } from './app.ts';
import type { Config } from './config.ts';
import { createMetrics } from './metrics.ts';
import { createRateLimiter } from './rate-limit.ts';
import type { Sandbox } from './routes/sandbox.ts';

export const projectors = [
  merchantsProjector,
  invoicesProjector,
  settlementsProjector,
  subscriptionsProjector,
  refundsProjector,
  refundHoldsProjector,
  activityProjector,
];

/** Expired and cancelled invoices' addresses are watched this long for late payments. */
const MONITORING_WINDOW_MS = 24 * 60 * 60 * 1000;

export interface Service {
  app: App;
  store: EventStore;
  merchants: MerchantCommands;
  projections: ProjectionEngine;
  database: SqlDatabase;
  sandbox: Sandbox | undefined;
  /** The payout engine (settlements, refunds); tests run a pass of it at a moment of their choosing. */
  payouts: PayoutEngine;
  /** Gives back the refund holds an approval left behind (commands/refund-holds.ts). */
  holdRelease: RefundHoldRelease;
  /** How each watched chain stands (ok, behind, stale, silent), for GET /admin/v1/attention. */
  chainConditions(): WatcherCondition[];
  /** Stops accepting requests, lets the running ones finish, stops the workers, then closes the stores. */
  close(): Promise<void>;
}

/**
 * `applicationName` names this process on PostgreSQL (pg_stat_activity), so
 * that a refused rebuild can say which instance projects.
 */
export async function openDatabase(
  config: Pick<Config, 'databaseUrl' | 'dataDir'>,
  applicationName?: string,
): Promise<SqlDatabase> {
  return config.databaseUrl ? openPostgres(config.databaseUrl, { applicationName }) : openPglite(config.dataDir);
}

/**
 * A new refund's network fee, quoted once and never again: a chain that
 * cannot quote it yet (an EVM node not asked for its fees) answers 503, so
 * the refund is not recorded with a fee of 0 that its payout could never pay.
 */
export const refundNetworkFee =
  (chains: ReadonlyMap<ChainName, ChainAdapter>) =>
  (chain: string, token: string, coins: number): bigint => {
    const adapter = chains.get(chain as ChainName);
    if (!adapter) throw new HttpError(503, `The ${chain} chain is not enabled`);
    try {
      return adapter.networkFee(token, 'refund', coins);
    } catch {
      throw new HttpError(503, `The ${chain} network fee cannot be quoted yet; try again shortly`);
    }
  };

/** How a service process is named to PostgreSQL: the host last, where PostgreSQL's 63 bytes may cut it. */
export const instanceName = (port: number) => `invoicing service pid ${process.pid} port ${port} host ${hostname()}`;

export async function startService(
  config: Config,
  secrets: { adminToken: string; walletMnemonic: string },
  logger: FastifyBaseLogger | boolean,
): Promise<Service> {
  const log = typeof logger === 'object' ? logger : undefined;
  // Chains with a node: their chain ids are checked before anything is opened.
  // Bitcoin deposit addresses carry the prefix of the configured network.
  const derivation = { bitcoinNetwork: bitcoinNetworkOf[config.bitcoin.network] };
  const keyring = DepositKeyring.fromMnemonic(secrets.walletMnemonic, derivation);
  /** The chains with a real node, which have a treasury (and most a fee wallet). */
  const nodeChains = new Map<ChainName, EvmChain | TronChain | BitcoinChain | SolanaChain>();
  // A chain's adapter and its library (ethers' providers and wallets,
  // tronweb, spl-token and @solana/web3.js: ~100 MB resident together) are
  // loaded only when the chain has a node; the sandbox needs none of them.
  const hasNode = (...chains: ChainName[]) => chains.some((chain) => config.chainRpcUrls[chain]);
  try {
    if (hasNode('ethereum', 'bsc', 'polygon')) {
      const { openEvmChains } = await import('../adapters/chains/evm/index.ts');
      for (const [name, chain] of await openEvmChains(config, keyring)) nodeChains.set(name, chain);
    }
    const tron = hasNode('tron')
      ? await (await import('../adapters/chains/tron/index.ts')).openTronChain(config, keyring)
      : undefined;
    if (tron) nodeChains.set('tron', tron);
    const bitcoin = hasNode('bitcoin')
      ? await (await import('../adapters/chains/bitcoin/index.ts')).openBitcoinChain(config, keyring)
      : undefined;
    if (bitcoin) nodeChains.set('bitcoin', bitcoin);
    const solana = hasNode('solana')
      ? await (await import('../adapters/chains/solana/index.ts')).openSolanaChain(config, keyring)
      : undefined;
    if (solana) nodeChains.set('solana', solana);
  } catch (error) {
    for (const chain of nodeChains.values()) chain.close();
    throw error;
  }
  const database = await openDatabase(config, instanceName(config.port));
  const metrics = createMetrics();
  const store = withAppendCounter(await openEventStore(config, database), () => metrics.appends.inc());
  await ProjectionEngine.migrate(database, readModelMigrations);
  await ChainWatcher.migrate(database);
  await migrateWebhookDeliveries(database);
  await migratePayoutQueue(database);
  await migrateRefundClaims(database);
  await migrateExpiringInvoices(database);
  await migrateRenewals(database);

  const production = config.appEnv === 'production';
  const sandboxClock = production ? undefined : await SandboxClock.open(store);
  const clock: Clock = sandboxClock ?? systemClock;
  // Chains without a node run on the sandbox ledger (never in production).
  const sandboxChains = config.chains.filter((c) => !config.chainRpcUrls[c]);
  const ledgers = new Map<ChainName, SandboxLedger>();
  if (!production) {
    for (const chain of sandboxChains) ledgers.set(chain, await SandboxLedger.open(store, chain, clock));
  }
  const fixedRates = config.rateProvider === 'fixed' ? await FixedRateProvider.open(store) : undefined;
  // The median of the real sources named (docs/rates.md); its disagreements go to the attention list.
  const realRates =
    config.rateProvider === 'fixed'
      ? undefined
      : openRateSources(config.rateProvider, {
          ...config.rates,
          baseUrls: { ...config.rates.baseUrls, coingecko: config.coinGecko.baseUrl },
          coinGeckoApiKey: config.coinGecko.apiKey,
          onError: (source, error) => log?.warn({ err: error, source }, 'exchange rates could not be fetched'),
        });
  const rates: RateProvider = fixedRates ?? realRates!;
  // Tron's token settlements burn TRX, charged in the token at these rates.
  (nodeChains.get('tron') as TronChain | undefined)?.useRates(rates);

  // The API side derives addresses watch-only from account public keys; the
  // keyring (the signer's side) is only asked for Solana's hardened paths.
  const depositAddresses = depositAddressesFromKeyring(keyring, derivation);
  const invoices = invoiceCommands({
    store,
    clock,
    rates,
    addresses: depositAddresses,
    enabledChains: config.chains,
  });
  const subscriptions = subscriptionCommands({ store, clock, invoices });
  const subscriberHooks = subscriberWebhooks(config.publicBaseUrl);
  const refundHooks = refundWebhooks(config.publicBaseUrl);

  const settlementDeps = {
    store,
    clock,
    chains: new Map<ChainName, ChainAdapter>([...ledgers, ...nodeChains]),
    platformFeeBps: config.platformFeeBps,
    requiredConfirmations: config.requiredConfirmations,
    onRefused: (error: Error, event: { type: string; streamId: string }) =>
      log?.warn({ err: error, event: event.type, stream: event.streamId }, 'settlement command refused'),
  };
  const webhookPolicy = { production, allowPrivateTargets: config.webhookAllowPrivateTargets };
  const webhooks = new WebhookDeliveryWorker(database, {
    policy: webhookPolicy,
    ...(config.webhookRetryDelaysMs && { schedule: config.webhookRetryDelaysMs }),
    onError: (error) => log?.error({ err: error }, 'webhook delivery failed'),
  });
  // Started once the watchers are: it pays out what the log says is due.
  const payouts = new PayoutEngine(
    database,
    [
      new SettlementPayouts(settlementDeps),
      new RefundPayouts({ ...settlementDeps, database, addresses: depositAddresses }),
    ],
    [...settlementDeps.chains.keys()],
    clock,
    { onError: (error) => log?.error({ err: error }, 'payout step failed') },
  );
  const carryPayments = paymentsToInvoices(store);
  const projections = new ProjectionEngine(
    database,
    store,
    [
      ...projectors,
      carryPayments,
      settlementManager(settlementDeps),
      payoutQueueProjector,
      refundClaimsProjector,
      expiringInvoicesProjector,
      renewalsProjector,
      watchListProjector,
      webhookEvents,
      subscriptionManager(store, subscriptions),
      subscriberHooks,
      refundHooks,
      refundManager(store, (error, event) =>
        log?.warn({ err: error, event: event.type, stream: event.streamId }, 'refund command refused'),
      ),
    ],
    {
      onBatch: (name, events) => {
        metrics.projected.inc({ projection: name }, events);
        // The outbox has new rows: send them now rather than at the next poll.
        if ([webhookEvents.name, subscriberHooks.name, refundHooks.name].includes(name)) webhooks.poke();
        // Payouts became due: look at them now rather than at the next poll.
        if (name === payoutQueueProjector.name) payouts.poke();
      },
      onError: (name, error) => log?.error({ err: error, projection: name }, 'projection failed'),
    },
  );
  metrics.watch(projections, database.db);
  projections.start();
  webhooks.start();

  const payments = paymentCommands(store, clock);
  const watchers = [...settlementDeps.chains.values()].map(
    (ledger) =>
      new ChainWatcher(ledger, database, payments, clock, {
        requiredConfirmations: config.requiredConfirmations[ledger.chain],
        monitoringWindowMs: MONITORING_WINDOW_MS,
        pollMs: 1000,
        // Its own to-do tables: the watched deposit addresses and payments.
        caughtUp: () => projections.caughtUp(30_000, [watchListProjector.name]),
        paymentsApplied: () => projections.caughtUp(30_000, [carryPayments.name]),
        onError: (error) => log?.error({ err: error, chain: ledger.chain }, 'chain watcher step failed'),
      }),
  );
  for (const watcher of watchers) watcher.start();
  const expiry = new ExpiryScheduler(database.db, invoices, clock, {
    onError: (error) => log?.error({ err: error }, 'expiry failed'),
    caughtUp: () => projections.caughtUp(30_000, [expiringInvoicesProjector.name]),
    // A chain nobody watches here has nothing to wait for.
    watchedThrough: (chain) => {
      const watcher = watchers.find((w) => w.chain.chain === chain);
      return watcher ? watcher.caughtUpAt : new Date(8.64e15);
    },
  });
  expiry.start();
  payouts.start();
  const renewals = new RenewalScheduler(database.db, subscriptions, clock, {
    onError: (error) => log?.error({ err: error }, 'subscription renewal failed'),
  });
  renewals.start();
  for (const chain of settlementDeps.chains.values()) chain.onNewBlock(() => payouts.poke());
  // GET /admin/v1/wallets: the fee wallet and treasury of each chain with a node.
  const wallets = async (): Promise<OperatorWallet[]> => {
    // The first index of the next block a process will reserve (commands/derivation-indexes.ts).
    const nextDerivationIndex = blockStart((await store.lastRevision(DERIVATION_BLOCK_STREAM)) + 1);
    return Promise.all(
      config.chains.map(async (chain) => {
        const node = nodeChains.get(chain);
        const w = node && (await node.wallets());
        const decimals = findChain(chain)!.supportedTokens[0]!.decimals;
        return {
          chain,
          feeWallet: w?.feeWallet ?? null,
          feeWalletBalance: w?.feeWalletBalance != null ? formatUnits(w.feeWalletBalance, decimals, decimals) : null,
          treasury: w?.treasury ?? null,
          treasuryBalance: w?.treasuryBalance != null ? formatUnits(w.treasuryBalance, decimals, decimals) : null,
          nextDerivationIndex,
        };
      }),
    );
  };

  // A merchant's settlement wallet is checked when it is configured, not at
  // its first sweep: its form on its chain, then, where a node is there to
  // ask, whether it can take a payout.
  const settlementWalletProblem = async (chain: ChainName, address: string) => {
    if (!isValidAddress(chain, address, derivation)) return `"${address}" is not a ${chain} address`;
    const node: ChainAdapter | undefined = nodeChains.get(chain);
    return node?.receivingProblem?.(address);
  };

  const refunds = refundCommands({
    store,
    clock,
    chains: settlementDeps.chains,
    addresses: depositAddresses,
    database,
    networkFee: refundNetworkFee(settlementDeps.chains),
    // The customer's address must take a payout as a merchant's wallet must (on Solana: a wallet, not a token account).
    destinationProblem: (chain, address) => settlementWalletProblem(chain as ChainName, address),
  });
  const refundExpiry = new RefundExpiry(database.db, refunds, clock, {
    onError: (error) => log?.error({ err: error }, 'refund expiry failed'),
  });
  refundExpiry.start();
  // Holds an approval left behind, given back past the grace (projections/refund-holds.ts finds them).
  const holdRelease = new RefundHoldRelease(store, (now) => holdsToRelease(database.db, now, 100), clock, {
    pollMs: 5_000,
    onError: (error) => log?.error({ err: error }, 'refund hold release failed'),
  });
  holdRelease.start();

  const sandbox: Sandbox | undefined = sandboxClock && {
    ledgers,
    clock: sandboxClock,
    rates: fixedRates,
    clockAdvanced: () => {
      expiry.poke();
      renewals.poke();
      refundExpiry.poke();
      holdRelease.poke();
      for (const watcher of watchers) watcher.poke();
    },
  };

  const live = new LiveInvoiceStatus(store, projections, database, (error) =>
    log?.error({ err: error }, 'live status failed'),
  );
  await live.start();

  const rateLimiter = config.rateLimits
    ? await createRateLimiter({ publicLimit: config.publicRateLimit, redisUrl: config.redisUrl })
    : undefined;
  const app = await buildApp({
    // GET /admin/v1/attention: the pairs the price sources disagreed about lately.
    rateDisagreements: () => realRates?.recentDisagreements() ?? [],
    // GET /admin/v1/attention: the chains whose node is behind, stale or silent.
    chainConditions: () =>
      watchers.map((w) => {
        const c = w.condition();
        return { chain: c.chain, state: c.state, since: c.since.toISOString(), detail: c.detail };
      }),
    wallets,
    settlementWalletProblem,
    config,
    clock,
    invoices,
    subscriptions,
    refunds,
    sandbox,
    live,
    webhooks: { worker: webhooks, policy: webhookPolicy },
    adminToken: secrets.adminToken,
    totpSealer: secretSealer(keyring.totpSealingKey()),
    database,
    store,
    projections,
    readModels: projectors.map((p) => p.name),
    metrics,
    rateLimiter,
    logger,
  });
  return {
    app,
    store,
    merchants: merchantCommands(store),
    projections,
    database,
    sandbox,
    payouts,
    holdRelease,
    chainConditions: () => watchers.map((w) => w.condition()),
    async close() {
      await app.close();
      await live.stop();
      await expiry.stop();
      await renewals.stop();
      await refundExpiry.stop();
      await holdRelease.stop();
      await payouts.stop();
      await webhooks.stop();
      await Promise.all(watchers.map((w) => w.stop()));
      await projections.stop();
      await rateLimiter?.close();
      await store.close();
      await database.close();
      for (const chain of nodeChains.values()) chain.close();
    },
  };
}

/**
 * Events in EventStoreDB when EVENTSTORE_URL is set (its client loaded only
 * then), else in the SQL database beside the read models.
 */
export async function openEventStore(
  config: Pick<Config, 'eventStoreUrl'>,
  database: SqlDatabase,
): Promise<EventStore> {
  if (!config.eventStoreUrl) return SqlEventStore.open(database);
  const { EventStoreDbStore } = await import('../adapters/event-store/eventstoredb.ts');
  return EventStoreDbStore.open(config.eventStoreUrl);
}
