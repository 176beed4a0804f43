import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig } from '../api/config.ts';

const problems = (env: Record<string, string>) => {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
};

describe('configuration', () => {
  it('has the defaults of operations.md with no variable set', () => {
    const config = loadConfig({});
    assert.equal(config.port, 3000);
    assert.equal(config.host, '127.0.0.1');
    assert.equal(config.publicBaseUrl, 'http://localhost:3000');
    assert.equal(config.appEnv, 'development');
    assert.equal(config.dataDir, './data');
    assert.equal(config.databaseUrl, undefined);
    assert.deepEqual(config.chains, ['ethereum', 'bsc', 'polygon', 'solana', 'tron', 'bitcoin']);
    assert.equal(config.platformFeeBps, 100);
    assert.equal(config.publicRateLimit, 600);
    assert.equal(config.rateLimits, true);
    assert.equal(config.webhookAllowPrivateTargets, false);
  });

  it('reads every variable', () => {
    const config = loadConfig({
      PORT: '8080',
      HOST: '0.0.0.0',
      PUBLIC_BASE_URL: 'https://pay.example.com/',
      DATABASE_URL: 'postgres://u@db/pay',
      CHAINS: 'tron, bitcoin',
      CHAIN_ETHEREUM_RPC_URL: 'https://eth.example.com',
      PLATFORM_FEE_BPS: '250',
      REDIS_URL: 'redis://cache:6379',
      PUBLIC_RATE_LIMIT: '100',
      RATE_LIMITS: 'off',
      WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
      WEBHOOK_RETRY_DELAYS: '250ms, 10s,2m,1h,1d,500',
    });
    assert.equal(config.port, 8080);
    assert.deepEqual(config.webhookRetryDelaysMs, [250, 10_000, 120_000, 3_600_000, 86_400_000, 500]);
    assert.equal(config.publicBaseUrl, 'https://pay.example.com');
    assert.deepEqual(config.chains, ['tron', 'bitcoin']);
    assert.equal(config.chainRpcUrls.ethereum, 'https://eth.example.com');
    assert.equal(config.platformFeeBps, 250);
    assert.equal(config.rateLimits, false);
    assert.equal(config.webhookAllowPrivateTargets, true);
  });

  it('reports every problem as one line naming its variable', () => {
    assert.deepEqual(
      problems({
        PORT: 'eighty',
        APP_ENV: 'staging',
        CHAINS: 'ethereum,dogecoin',
        PLATFORM_FEE_BPS: '-1',
        DATABASE_URL: 'mysql://x',
        WEBHOOK_RETRY_DELAYS: '10s,0s,soon',
      }),
      [
        'APP_ENV must be one of production, development, test (got "staging")',
        'PORT must be a whole number from 0 to 65535 (got "eighty")',
        'DATABASE_URL must be a postgres:// or postgresql:// URL',
        'CHAINS has unknown chain dogecoin; known: ethereum, bsc, polygon, solana, tron, bitcoin',
        'WEBHOOK_RETRY_DELAYS must be a comma list of positive durations such as 10s,2m,1h (got "10s,0s,soon")',
        'PLATFORM_FEE_BPS must be a whole number from 0 to 10000 (got "-1")',
      ],
    );
  });

  it('takes a tcp:// or ipc:// endpoint as CHAIN_BITCOIN_ZMQ_URL, and refuses anything else', () => {
    assert.equal(loadConfig({ CHAIN_BITCOIN_ZMQ_URL: 'tcp://10.0.0.7:28332' }).bitcoin.zmqUrl, 'tcp://10.0.0.7:28332');
    assert.equal(loadConfig({}).bitcoin.zmqUrl, undefined);
    assert.deepEqual(problems({ CHAIN_BITCOIN_ZMQ_URL: 'http://10.0.0.7:28332' }), [
      'CHAIN_BITCOIN_ZMQ_URL must be a tcp:// or ipc:// endpoint (Core\'s zmqpubsequence; got "http://10.0.0.7:28332")',
    ]);
  });

  it('demands secrets and refuses unsafe switches in production', () => {
    assert.deepEqual(problems({ APP_ENV: 'production', RATE_LIMITS: 'off', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' }), [
      'ADMIN_TOKEN is required when APP_ENV=production',
      'WALLET_MNEMONIC is required when APP_ENV=production',
      'WEBHOOK_ALLOW_PRIVATE_TARGETS cannot be true when APP_ENV=production',
      'RATE_LIMITS cannot be off when APP_ENV=production',
    ]);
  });

  it('takes RATE_PROVIDER as fixed or a comma list of price sources, three of them by default in production', () => {
    assert.equal(loadConfig({}).rateProvider, 'fixed');
    const production = {
      APP_ENV: 'production',
      ADMIN_TOKEN: 'x'.repeat(32),
      WALLET_MNEMONIC: `${'abandon '.repeat(11)}about`,
    };
    assert.deepEqual(loadConfig(production).rateProvider, ['kraken', 'coinbase', 'coingecko']);
    assert.deepEqual(loadConfig({ RATE_PROVIDER: 'coingecko' }).rateProvider, ['coingecko'], 'a list of one');
    assert.deepEqual(loadConfig({ RATE_PROVIDER: 'Kraken, bitstamp' }).rateProvider, ['kraken', 'bitstamp']);
    const rates = loadConfig({
      RATE_MAX_SPREAD_PERCENT: '1.5',
      RATE_MAX_STALE_SECONDS: '120',
      RATE_DEADLINE_MS: '2000',
      KRAKEN_API_URL: 'http://127.0.0.1:9/kraken',
    }).rates;
    assert.deepEqual(rates, {
      baseUrls: { kraken: 'http://127.0.0.1:9/kraken', coinbase: undefined, bitstamp: undefined },
      maxSpreadPercent: '1.5',
      maxStaleMs: 120_000,
      deadlineMs: 2000,
    });
    assert.deepEqual(problems({ RATE_PROVIDER: 'kraken,binance', RATE_MAX_SPREAD_PERCENT: '0' }), [
      'RATE_PROVIDER must be fixed or a comma list without repeats of kraken, coinbase, bitstamp, coingecko (got "kraken,binance")',
      'RATE_MAX_SPREAD_PERCENT must be a decimal from 0.01 to 100 (got "0")',
    ]);
    assert.equal(problems({ RATE_PROVIDER: 'kraken,kraken' }).length, 1);
    assert.equal(problems({ RATE_PROVIDER: 'fixed,kraken' }).length, 1);
  });

  it('takes CHAIN_TRON_ENERGY_DELEGATION on or off (off by default), naming it otherwise', () => {
    const tron = (extra: Record<string, string>) =>
      loadConfig({ CHAIN_TRON_RPC_URL: 'https://tron.example.com', ...extra }).tron;
    assert.equal(tron({})?.energyDelegation, false);
    assert.equal(tron({ CHAIN_TRON_ENERGY_DELEGATION: 'on' })?.energyDelegation, true);
    assert.deepEqual(problems({ CHAIN_TRON_ENERGY_DELEGATION: 'yes' }), [
      'CHAIN_TRON_ENERGY_DELEGATION must be on or off (got "yes")',
    ]);
  });

  it('disables chains without a node in production, where there is no sandbox', () => {
    const config = loadConfig({
      APP_ENV: 'production',
      ADMIN_TOKEN: 'a-long-enough-admin-token',
      WALLET_MNEMONIC: 'abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about',
      CHAIN_TRON_RPC_URL: 'https://tron.example.com',
    });
    assert.deepEqual(config.chains, ['tron']);
  });
});
