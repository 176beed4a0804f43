// The service's configuration, read from the environment (operations.md §1).
// Every problem is reported as one line naming the variable, all at once.
import { getAddress, isAddress } from 'ethers/address';
import { chainNames, findToken, isChainName, type ChainName } from '../domain/catalogue.ts';
import { isValidAddress } from '../adapters/keys/derivation.ts';
import { isRateSourceName, rateSourceNames, type RateSourceName } from '../adapters/rates/sources.ts';

export type AppEnv = 'production' | 'development' | 'test';

export interface Config {
  port: number;
  host: string;
  publicBaseUrl: string;
  appEnv: AppEnv;
  /** Embedded store directory, or `memory://`; also where generated secrets are kept. */
  dataDir: string;
  databaseUrl: string | undefined;
  /** EventStoreDB/KurrentDB connection string: events there, read models in SQL. Unset: events in SQL too. */
  eventStoreUrl: string | undefined;
  /** Unset: generated on first start (not in production). */
  adminToken: string | undefined;
  walletMnemonic: string | undefined;
  chains: ChainName[];
  chainRpcUrls: Partial<Record<ChainName, string>>;
  /** Settings of the EVM chains that have an RPC URL (adapters/chains/evm/index.ts). */
  evm: Partial<Record<ChainName, EvmChainSettings>>;
  /** Tron's settings when it has an RPC URL (adapters/chains/tron/). */
  tron: TronChainSettings | undefined;
  /** Solana's settings when it has an RPC URL (adapters/chains/solana/index.ts). */
  solana: SolanaChainSettings | undefined;
  /** Bitcoin's network (deposit addresses follow it) and node settings (adapters/chains/bitcoin/). */
  bitcoin: BitcoinChainSettings;
  /** Confirmations a payment needs on each chain before it counts as confirmed. */
  requiredConfirmations: Record<ChainName, number>;
  platformFeeBps: number;
  /** `fixed` (the built-in table) or the real price sources whose median quotes (docs/rates.md). */
  rateProvider: 'fixed' | RateSourceName[];
  /** CoinGecko's base URL and optional API key, when RATE_PROVIDER names coingecko. */
  coinGecko: { baseUrl: string | undefined; apiKey: string | undefined };
  /** How the real price sources are asked and their answers combined. */
  rates: {
    /** KRAKEN_API_URL, COINBASE_API_URL, BITSTAMP_API_URL: instead of the public APIs. */
    baseUrls: Partial<Record<RateSourceName, string>>;
    /** RATE_MAX_SPREAD_PERCENT: a decimal string. */
    maxSpreadPercent: string;
    /** RATE_MAX_STALE_SECONDS, in ms. */
    maxStaleMs: number;
    /** RATE_DEADLINE_MS. */
    deadlineMs: number;
  };
  webhookAllowPrivateTargets: boolean;
  /** Delays in ms after each failed webhook attempt; undefined: the built-in schedule of about three days. */
  webhookRetryDelaysMs: number[] | undefined;
  redisUrl: string | undefined;
  publicRateLimit: number;
  /** Open WebSockets allowed per client address, and in all. */
  liveSockets: { perClient: number; total: number };
  rateLimits: boolean;
}

/** CHAIN_<NAME>_CHAIN_ID, CHAIN_<NAME>_TOKENS and CHAIN_<NAME>_TREASURY of ethereum, bsc and polygon. */
export interface EvmChainSettings {
  /** A test network's chain id, accepted instead of the mainnet one. */
  chainId: bigint | undefined;
  /** Token contracts instead of the catalogue's mainnet ones (test networks). */
  tokens: { symbol: string; contract: string; decimals: number }[] | undefined;
  /** Where platform fees go; undefined: the derived treasury. */
  treasury: string | undefined;
}

/** CHAIN_TRON_NETWORK, CHAIN_TRON_API_KEY, CHAIN_TRON_TOKENS, CHAIN_TRON_TREASURY and CHAIN_TRON_SOLIDITY_URL. */
export interface TronChainSettings {
  /** `mainnet`, `nile`, `shasta` or a genesis block id: the network the node must be on. */
  network: string;
  apiKey: string | undefined;
  tokens: { symbol: string; contract: string; decimals: number }[] | undefined;
  treasury: string | undefined;
  /** CHAIN_TRON_SOLIDITY_URL: where `/walletsolidity/*` is served (java-tron's solidity port); undefined: the RPC URL. */
  solidityUrl: string | undefined;
  /** CHAIN_TRON_ENERGY_DELEGATION=on: token payouts' energy is delegated from the fee wallet's Stake 2.0 stake. */
  energyDelegation: boolean;
}

/** CHAIN_SOLANA_CLUSTER, CHAIN_SOLANA_TOKENS and CHAIN_SOLANA_TREASURY. */
export interface SolanaChainSettings {
  /** `mainnet-beta`, `devnet`, `testnet` or a genesis hash: the cluster the RPC must serve. */
  cluster: string;
  tokens: { symbol: string; mint: string; decimals: number }[] | undefined;
  treasury: string | undefined;
}

/** CHAIN_BITCOIN_NETWORK, CHAIN_BITCOIN_RPC_COOKIE, CHAIN_BITCOIN_ZMQ_URL, CHAIN_BITCOIN_TREASURY and the fee rate bounds. */
export interface BitcoinChainSettings {
  network: 'main' | 'test' | 'signet' | 'regtest';
  cookieFile: string | undefined;
  /** Core's zmqpubsequence endpoint: the mempool followed by its changes. */
  zmqUrl: string | undefined;
  treasury: string | undefined;
  /** sat/vB bounds of the estimated fee rate. */
  feeRate: { floor: bigint; cap: bigint };
}

export const evmChainNames: readonly ChainName[] = ['ethereum', 'bsc', 'polygon'];

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('\n'));
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

/** DESIGN.md's starting points; solana's 32 is "finalized". */
export const defaultConfirmations: Record<ChainName, number> = {
  bitcoin: 2,
  ethereum: 12,
  bsc: 15,
  polygon: 128,
  tron: 19,
  solana: 32,
};

export function loadConfig(env: Env = process.env): Config {
  const problems: string[] = [];
  const value = (name: string) => {
    const v = env[name]?.trim();
    return v === undefined || v === '' ? undefined : v;
  };
  const integer = (name: string, fallback: number, min: number, max: number) => {
    const raw = value(name);
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!/^\d+$/.test(raw) || n < min || n > max) {
      problems.push(`${name} must be a whole number from ${min} to ${max} (got "${raw}")`);
      return fallback;
    }
    return n;
  };
  /** A comma list of durations such as `10s,2m,1h` (ms when unitless), in milliseconds. */
  const durations = (name: string): number[] | undefined => {
    const raw = value(name);
    if (raw === undefined) return undefined;
    const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
    const parsed = raw.split(',').map((part) => {
      const m = /^(\d{1,9})(ms|s|m|h|d)?$/.exec(part.trim());
      return m ? Number(m[1]) * units[m[2] ?? 'ms']! : undefined;
    });
    if (parsed.some((d) => d === undefined || d <= 0)) {
      problems.push(`${name} must be a comma list of positive durations such as 10s,2m,1h (got "${raw}")`);
      return undefined;
    }
    return parsed as number[];
  };
  const oneOf = <T extends string>(name: string, allowed: readonly T[], fallback: T): T => {
    const raw = value(name);
    if (raw === undefined) return fallback;
    if (!(allowed as readonly string[]).includes(raw)) {
      problems.push(`${name} must be one of ${allowed.join(', ')} (got "${raw}")`);
      return fallback;
    }
    return raw as T;
  };
  const url = (name: string, protocols: readonly string[]) => {
    const raw = value(name);
    if (raw === undefined) return undefined;
    try {
      const parsed = new URL(raw);
      if (!protocols.includes(parsed.protocol)) throw new Error('protocol');
      return raw;
    } catch {
      problems.push(`${name} must be a ${protocols.map((p) => p.replace(':', '://')).join(' or ')} URL`);
      return undefined;
    }
  };

  const appEnv = oneOf<AppEnv>('APP_ENV', ['production', 'development', 'test'], 'development');
  const production = appEnv === 'production';
  const port = integer('PORT', 3000, 0, 65535);
  const host = value('HOST') ?? '127.0.0.1';
  const publicBaseUrl = (url('PUBLIC_BASE_URL', ['http:', 'https:']) ?? `http://localhost:${port}`).replace(/\/+$/, '');
  const dataDir = value('DATA_DIR') ?? './data';
  const databaseUrl = url('DATABASE_URL', ['postgres:', 'postgresql:']);
  // Only the scheme is checked here (without loading the gRPC client); the
  // client reads the rest at start-up and a problem stops it with one line.
  const eventStoreUrl = value('EVENTSTORE_URL');
  if (eventStoreUrl !== undefined && !/^(esdb|kurrentdb)(\+discover)?:\/\/./i.test(eventStoreUrl)) {
    problems.push(
      'EVENTSTORE_URL must be an esdb://, esdb+discover://, kurrentdb:// or kurrentdb+discover:// connection string',
    );
  }

  const adminToken = value('ADMIN_TOKEN');
  if (adminToken !== undefined && adminToken.length < 16) problems.push('ADMIN_TOKEN must be at least 16 characters');
  if (production && adminToken === undefined) problems.push('ADMIN_TOKEN is required when APP_ENV=production');
  const walletMnemonic = value('WALLET_MNEMONIC');
  if (production && walletMnemonic === undefined) problems.push('WALLET_MNEMONIC is required when APP_ENV=production');

  const chainRpcUrls: Partial<Record<ChainName, string>> = {};
  const requiredConfirmations = { ...defaultConfirmations };
  for (const chain of chainNames) {
    const rpc = url(`CHAIN_${chain.toUpperCase()}_RPC_URL`, ['http:', 'https:', 'ws:', 'wss:']);
    if (rpc) chainRpcUrls[chain] = rpc;
    requiredConfirmations[chain] = integer(
      `CHAIN_${chain.toUpperCase()}_CONFIRMATIONS`,
      defaultConfirmations[chain],
      1,
      10_000,
    );
  }
  const evm: Partial<Record<ChainName, EvmChainSettings>> = {};
  for (const chain of evmChainNames) {
    const prefix = `CHAIN_${chain.toUpperCase()}`;
    const rawId = value(`${prefix}_CHAIN_ID`);
    let chainId: bigint | undefined;
    if (rawId !== undefined) {
      if (/^\d{1,15}$/.test(rawId) && BigInt(rawId) > 0n) chainId = BigInt(rawId);
      else problems.push(`${prefix}_CHAIN_ID must be a positive whole number (got "${rawId}")`);
    }
    const tokens = chainTokensOf(chain, value(`${prefix}_TOKENS`), evmTokenList, problems)?.map(
      ({ symbol, address, decimals }) => ({ symbol, contract: getAddress(address), decimals }),
    );
    const rawTreasury = value(`${prefix}_TREASURY`);
    let treasury: string | undefined;
    if (rawTreasury !== undefined) {
      if (/^0x[0-9a-fA-F]{40}$/.test(rawTreasury) && isAddress(rawTreasury)) treasury = getAddress(rawTreasury);
      else problems.push(`${prefix}_TREASURY must be a 0x address (got "${rawTreasury}")`);
    }
    if (chainRpcUrls[chain]) evm[chain] = { chainId, tokens, treasury };
  }

  let tron: TronChainSettings | undefined;
  {
    const network = value('CHAIN_TRON_NETWORK') ?? 'mainnet';
    if (!['mainnet', 'nile', 'shasta'].includes(network) && !/^[0-9a-fA-F]{64}$/.test(network)) {
      problems.push(`CHAIN_TRON_NETWORK must be mainnet, nile, shasta or a 64-hex genesis block id (got "${network}")`);
    }
    const tokens = chainTokensOf('tron', value('CHAIN_TRON_TOKENS'), tronTokenList, problems)?.map(
      ({ symbol, address, decimals }) => ({ symbol, contract: address, decimals }),
    );
    const treasury = value('CHAIN_TRON_TREASURY');
    if (treasury !== undefined && !isValidAddress('tron', treasury)) {
      problems.push(`CHAIN_TRON_TREASURY must be a Tron T-address (got "${treasury}")`);
    }
    const rpc = chainRpcUrls.tron;
    if (rpc && !/^https?:/.test(rpc))
      problems.push("CHAIN_TRON_RPC_URL must be an http:// or https:// URL (the node's HTTP API)");
    const solidityUrl = value('CHAIN_TRON_SOLIDITY_URL');
    if (solidityUrl !== undefined && !/^https?:/.test(solidityUrl)) {
      problems.push(
        "CHAIN_TRON_SOLIDITY_URL must be an http:// or https:// URL (the node's solidity HTTP API, port 8091 by default)",
      );
    }
    const delegation = value('CHAIN_TRON_ENERGY_DELEGATION') ?? 'off';
    if (delegation !== 'on' && delegation !== 'off') {
      problems.push(`CHAIN_TRON_ENERGY_DELEGATION must be on or off (got "${delegation.slice(0, 40)}")`);
    }
    if (rpc) {
      tron = {
        network: network.toLowerCase(),
        apiKey: value('CHAIN_TRON_API_KEY'),
        tokens,
        treasury,
        solidityUrl,
        energyDelegation: delegation === 'on',
      };
    }
  }

  let solana: SolanaChainSettings | undefined;
  {
    const cluster = value('CHAIN_SOLANA_CLUSTER') ?? 'mainnet-beta';
    if (!['mainnet-beta', 'devnet', 'testnet'].includes(cluster) && !isValidAddress('solana', cluster)) {
      problems.push(
        `CHAIN_SOLANA_CLUSTER must be mainnet-beta, devnet, testnet or a base58 genesis hash (got "${cluster}")`,
      );
    }
    const tokens = chainTokensOf('solana', value('CHAIN_SOLANA_TOKENS'), solanaTokenList, problems)?.map(
      ({ symbol, address, decimals }) => ({ symbol, mint: address, decimals }),
    );
    const treasury = value('CHAIN_SOLANA_TREASURY');
    if (treasury !== undefined && !isValidAddress('solana', treasury)) {
      problems.push(`CHAIN_SOLANA_TREASURY must be a base58 Solana address (got "${treasury}")`);
    }
    const rpc = chainRpcUrls.solana;
    if (rpc && !/^https?:/.test(rpc))
      problems.push('CHAIN_SOLANA_RPC_URL must be an http:// or https:// URL (the JSON-RPC endpoint)');
    if (rpc) solana = { cluster, tokens, treasury };
  }

  const bitcoinNetwork = oneOf('CHAIN_BITCOIN_NETWORK', ['main', 'test', 'signet', 'regtest'] as const, 'main');
  const bitcoinTreasury = value('CHAIN_BITCOIN_TREASURY');
  const derivationNetwork = ({ main: 'mainnet', test: 'testnet', signet: 'testnet', regtest: 'regtest' } as const)[
    bitcoinNetwork
  ];
  if (
    bitcoinTreasury !== undefined &&
    !isValidAddress('bitcoin', bitcoinTreasury, { bitcoinNetwork: derivationNetwork })
  ) {
    problems.push(`CHAIN_BITCOIN_TREASURY must be a ${bitcoinNetwork} Bitcoin address (got "${bitcoinTreasury}")`);
  }
  const bitcoin: BitcoinChainSettings = {
    network: bitcoinNetwork,
    cookieFile: value('CHAIN_BITCOIN_RPC_COOKIE'),
    zmqUrl: value('CHAIN_BITCOIN_ZMQ_URL'),
    treasury: bitcoinTreasury,
    feeRate: {
      floor: BigInt(integer('CHAIN_BITCOIN_FEE_RATE_FLOOR', 1, 1, 10_000)),
      cap: BigInt(integer('CHAIN_BITCOIN_FEE_RATE_CAP', 500, 1, 100_000)),
    },
  };
  if (bitcoin.feeRate.cap < bitcoin.feeRate.floor) {
    problems.push('CHAIN_BITCOIN_FEE_RATE_CAP must not be below CHAIN_BITCOIN_FEE_RATE_FLOOR');
  }
  if (bitcoin.zmqUrl !== undefined && !/^(tcp|ipc):\/\/\S+$/.test(bitcoin.zmqUrl)) {
    problems.push(
      `CHAIN_BITCOIN_ZMQ_URL must be a tcp:// or ipc:// endpoint (Core's zmqpubsequence; got "${bitcoin.zmqUrl}")`,
    );
  }
  if (chainRpcUrls.bitcoin && !/^https?:/.test(chainRpcUrls.bitcoin)) {
    problems.push("CHAIN_BITCOIN_RPC_URL must be an http:// or https:// URL (Bitcoin Core's JSON-RPC)");
  }

  let chains: ChainName[] = [...chainNames];
  const chainList = value('CHAINS');
  if (chainList !== undefined) {
    const named = chainList
      .split(',')
      .map((c) => c.trim().toLowerCase())
      .filter(Boolean);
    const unknown = named.filter((c) => !isChainName(c));
    if (unknown.length > 0) {
      problems.push(`CHAINS has unknown chain ${unknown.join(', ')}; known: ${chainNames.join(', ')}`);
    }
    chains = chainNames.filter((c) => named.includes(c));
    if (chains.length === 0 && unknown.length === 0) problems.push('CHAINS must name at least one chain');
  }
  // In production there is no sandbox ledger: a chain without a node is off.
  if (production) chains = chains.filter((c) => chainRpcUrls[c] !== undefined);

  const flag = (name: string, fallback: boolean) => {
    const raw = value(name)?.toLowerCase();
    if (raw === undefined) return fallback;
    if (['true', '1', 'yes', 'on'].includes(raw)) return true;
    if (['false', '0', 'no', 'off'].includes(raw)) return false;
    problems.push(`${name} must be true or false (got "${raw}")`);
    return fallback;
  };
  const webhookAllowPrivateTargets = flag('WEBHOOK_ALLOW_PRIVATE_TARGETS', false);
  if (production && webhookAllowPrivateTargets) {
    problems.push('WEBHOOK_ALLOW_PRIVATE_TARGETS cannot be true when APP_ENV=production');
  }
  const webhookRetryDelaysMs = durations('WEBHOOK_RETRY_DELAYS');
  const rateLimits = oneOf('RATE_LIMITS', ['on', 'off'], 'on') === 'on';
  if (production && !rateLimits) problems.push('RATE_LIMITS cannot be off when APP_ENV=production');

  const config: Config = {
    port,
    host,
    publicBaseUrl,
    appEnv,
    dataDir,
    databaseUrl,
    eventStoreUrl,
    adminToken,
    walletMnemonic,
    chains,
    chainRpcUrls,
    evm,
    tron,
    solana,
    bitcoin,
    requiredConfirmations,
    platformFeeBps: integer('PLATFORM_FEE_BPS', 100, 0, 10_000),
    // Production defaults to three real sources: a built-in table would quote stale prices, one source is an outage.
    rateProvider: rateProviderOf(value('RATE_PROVIDER'), production, problems),
    coinGecko: { baseUrl: url('COINGECKO_API_URL', ['http:', 'https:']), apiKey: value('COINGECKO_API_KEY') },
    rates: {
      baseUrls: {
        kraken: url('KRAKEN_API_URL', ['http:', 'https:']),
        coinbase: url('COINBASE_API_URL', ['http:', 'https:']),
        bitstamp: url('BITSTAMP_API_URL', ['http:', 'https:']),
      },
      maxSpreadPercent: spreadPercentOf(value('RATE_MAX_SPREAD_PERCENT'), problems),
      maxStaleMs: integer('RATE_MAX_STALE_SECONDS', 600, 0, 86_400) * 1000,
      deadlineMs: integer('RATE_DEADLINE_MS', 3_000, 100, 60_000),
    },
    webhookAllowPrivateTargets,
    webhookRetryDelaysMs,
    redisUrl: url('REDIS_URL', ['redis:', 'rediss:']),
    publicRateLimit: integer('PUBLIC_RATE_LIMIT', 600, 1, 1_000_000),
    liveSockets: {
      perClient: integer('LIVE_SOCKETS_PER_CLIENT', 20, 1, 100_000),
      total: integer('LIVE_SOCKETS_TOTAL', 10_000, 1, 1_000_000),
    },
    rateLimits,
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/** The production default of RATE_PROVIDER. */
export const DEFAULT_RATE_SOURCES: RateSourceName[] = ['kraken', 'coinbase', 'coingecko'];

/** RATE_PROVIDER: `fixed`, or a comma list of known sources without repeats. */
/** How a chain's CHAIN_<CHAIN>_TOKENS names its token addresses: the pattern, the word shown, the full check. */
interface TokenListFormat {
  address: string;
  shown: string;
  isAddress: (address: string) => boolean;
}
const evmTokenList: TokenListFormat = { address: '0x[0-9a-fA-F]{40}', shown: '0xContract', isAddress };
const tronTokenList: TokenListFormat = {
  address: 'T[1-9A-HJ-NP-Za-km-z]{33}',
  shown: 'Taddress',
  isAddress: (address) => isValidAddress('tron', address),
};
const solanaTokenList: TokenListFormat = {
  address: '[1-9A-HJ-NP-Za-km-z]{32,44}',
  shown: 'mint',
  isAddress: (address) => isValidAddress('solana', address),
};

/**
 * CHAIN_<CHAIN>_TOKENS, a comma list of SYMBOL=address:decimals; undefined when unset. Each entry
 * must name one of the catalogue's tokens of that chain with the catalogue's decimals.
 */
function chainTokensOf(
  chain: ChainName,
  raw: string | undefined,
  format: TokenListFormat,
  problems: string[],
): { symbol: string; address: string; decimals: number }[] | undefined {
  if (raw === undefined) return undefined;
  const name = `CHAIN_${chain.toUpperCase()}_TOKENS`;
  const pattern = new RegExp(`^\\s*([A-Za-z]+)=(${format.address}):(\\d{1,2})\\s*$`);
  const tokens = [];
  for (const part of raw.split(',')) {
    const m = pattern.exec(part);
    const known = m && findToken(chain, m[1]!);
    if (!m || !known || known.contractAddress === null || !format.isAddress(m[2]!)) {
      problems.push(
        `${name} must be a comma list of SYMBOL=${format.shown}:decimals of ${chain}'s tokens (got "${part.trim()}")`,
      );
    } else if (Number(m[3]) !== known.decimals) {
      problems.push(`${name}: ${known.symbol} has ${known.decimals} decimals on ${chain}, not ${m[3]}`);
    } else {
      tokens.push({ symbol: known.symbol, address: m[2]!, decimals: known.decimals });
    }
  }
  return tokens;
}

function rateProviderOf(raw: string | undefined, production: boolean, problems: string[]): Config['rateProvider'] {
  const fallback = production ? DEFAULT_RATE_SOURCES : 'fixed';
  if (raw === undefined) return fallback;
  if (raw === 'fixed') return 'fixed';
  const names = raw.split(',').map((n) => n.trim().toLowerCase());
  const unknown = names.filter((n) => !isRateSourceName(n));
  if (unknown.length > 0 || new Set(names).size !== names.length) {
    problems.push(
      `RATE_PROVIDER must be fixed or a comma list without repeats of ${rateSourceNames.join(', ')} (got "${raw}")`,
    );
    return fallback;
  }
  return names as RateSourceName[];
}

/** RATE_MAX_SPREAD_PERCENT: a decimal from 0.01 to 100, default 2. */
function spreadPercentOf(raw: string | undefined, problems: string[]): string {
  if (raw === undefined) return '2';
  const n = Number(raw);
  if (!/^\d{1,3}(\.\d{1,4})?$/.test(raw) || n < 0.01 || n > 100) {
    problems.push(`RATE_MAX_SPREAD_PERCENT must be a decimal from 0.01 to 100 (got "${raw}")`);
    return '2';
  }
  return raw;
}
