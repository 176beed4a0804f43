// `npm start`: the service as a process. Configuration errors stop it with one
// line each; SIGTERM and SIGINT stop it gracefully.
import { ConfigError, loadConfig, type Config } from './config.ts';
import { lockDataDir } from './data-dir-lock.ts';
import { serviceLogger } from './logger.ts';
import { loadSecrets } from './secrets-file.ts';
import { startService, type Service } from './service.ts';

async function main() {
  let config: Config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      for (const problem of error.problems) console.error(`configuration error: ${problem}`);
      process.exit(1);
    }
    throw error;
  }
  const logger = serviceLogger(process.env.LOG_LEVEL ?? (config.appEnv === 'test' ? 'warn' : 'info'));
  const secrets = await loadSecrets(config);
  if (secrets.generated.walletMnemonic && config.dataDir !== 'memory://') {
    logger.warn(
      `WALLET_MNEMONIC is not set: a development wallet seed was generated and kept in ${config.dataDir}/secrets.json`,
    );
  }

  let service: Service;
  let unlockDataDir = () => {};
  try {
    if (!config.databaseUrl && config.dataDir !== 'memory://') unlockDataDir = await lockDataDir(config.dataDir);
    service = await startService(config, secrets, logger);
  } catch (error) {
    console.error(`start-up failed: ${(error as Error).message}`);
    process.exit(1);
  }
  try {
    const firstStart = (await service.store.readAll(undefined, 1)).length === 0;
    if (firstStart && config.appEnv !== 'production') await printWelcome(service, config, secrets.adminToken);
    await service.app.listen({ port: config.port, host: config.host });
  } catch (error) {
    // The workers are running by now (watchers, payout engine, webhooks): they are
    // stopped, and the data directory released, before the process goes.
    console.error(`start-up failed: ${(error as Error).message}`);
    const force = setTimeout(() => process.exit(1), 15_000).unref();
    await service.close().catch(() => undefined);
    unlockDataDir();
    clearTimeout(force);
    process.exit(1);
  }
  logger.info({ url: config.publicBaseUrl, database: service.database.engine }, 'service listening');

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down: draining requests');
    const force = setTimeout(() => process.exit(1), 15_000).unref();
    try {
      await service.close();
      unlockDataDir();
      clearTimeout(force);
      process.exit(0);
    } catch (error) {
      logger.error({ err: error }, 'shutdown failed');
      process.exit(1);
    }
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

/** Once, on an empty store: a demo merchant and what a newcomer needs to try the API. */
async function printWelcome(service: Service, config: Config, adminToken: string) {
  const merchants = service.merchants;
  const { value: merchant } = await merchants.register({
    name: 'Demo Shop',
    tier: 'pro',
    webhookUrl: null,
    settlementWallets: {},
  });
  const { value: issued, position } = await merchants.issueApiKey(merchant.id, {
    name: 'demo',
    permissions: null,
    expiresAt: null,
  });
  if (position) await service.projections.waitFor(position);
  const base = config.publicBaseUrl;
  // Printed to the terminal once, deliberately, and never written to the logs.
  process.stdout.write(
    [
      '',
      `Crypto invoicing service (development) at ${base}`,
      `  admin token:           ${adminToken}`,
      `  demo merchant:         ${merchant.name} (${merchant.id})`,
      `  demo API key:          ${issued.key}`,
      `  demo webhook secret:   ${merchant.webhookSecret}`,
      '',
      'Create a payment of 25 USD in USDT on Tron, then pay it in the sandbox and watch its status:',
      `  curl -s -X POST ${base}/api/v1/payments -H "Authorization: Bearer ${issued.key}" -H "Content-Type: application/json" \\`,
      `       -d '{"amount":"25.00","currency":"USD","chain":"tron","token":"USDT"}'`,
      `  curl -s -X POST ${base}/dev/v1/chains/tron/transfers -H "Authorization: Bearer ${adminToken}" -H "Content-Type: application/json" \\`,
      `       -d '{"to":"<address from above>","amount":"<cryptoAmount from above>","token":"USDT"}'`,
      `  curl -s ${base}/api/v1/invoices/<paymentId>/status`,
      '',
    ].join('\n') + '\n',
  );
}

await main();
