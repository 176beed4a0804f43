// Shared steps of the EVM integration tests: a service pointed at the local
// Hardhat node, invoices paid from Hardhat's funded account, and balances
// read on the chain.
import { after, before } from 'node:test';
import { Wallet, type Contract } from 'ethers';
import { deployToken, HARDHAT_CHAIN_ID, startHardhat, type LocalNode } from './hardhat.ts';
import { startTestService, type RunningService } from './service.ts';

export const SERVICE_MNEMONIC =
  'abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about';

export interface EvmFixture {
  node: LocalNode;
  usdt: Contract;
  usdc: Contract;
  /** The service's environment for the local node. */
  env: Record<string, string>;
}

export async function evmFixture(node: LocalNode, extra: Record<string, string> = {}): Promise<EvmFixture> {
  const usdt = await deployToken(node, 'USDT', 6);
  const usdc = await deployToken(node, 'USDC', 6);
  const env = {
    CHAINS: 'ethereum',
    CHAIN_ETHEREUM_RPC_URL: node.url,
    CHAIN_ETHEREUM_CHAIN_ID: String(HARDHAT_CHAIN_ID),
    CHAIN_ETHEREUM_TOKENS: `USDT=${await usdt.getAddress()}:6,USDC=${await usdc.getAddress()}:6`,
    CHAIN_ETHEREUM_CONFIRMATIONS: '3',
    WALLET_MNEMONIC: SERVICE_MNEMONIC,
    RATE_LIMITS: 'off',
    ...extra,
  };
  return { node, usdt, usdc, env };
}

/** The Hardhat node for a suite, or why its tests skip (said once, naming `tests`). */
export async function hardhatOrSkip(tests: string): Promise<{ node: LocalNode; skip: string | false }> {
  const started = await startHardhat();
  const skip = 'skip' in started ? started.skip : false;
  if (skip) console.log(`# skipped ${tests}: ${skip}`);
  return { node: started as LocalNode, skip };
}

/**
 * Inside a describe: the fixture and a service on it before the tests
 * (handed to `ready`), the service and the node stopped after them.
 */
export function serviceOnNode(node: LocalNode, ready: (fx: EvmFixture, svc: RunningService) => void): void {
  let svc: RunningService | undefined;
  before(async () => {
    const fx = await evmFixture(node);
    svc = await startTestService(fx.env);
    ready(fx, svc);
  });
  after(async () => {
    await svc?.close();
    await node.stop();
  });
}

/** A decimal string of the API (8 places shown) in base units of a token with `decimals`. */
export function baseUnits(amount: string, decimals: number): bigint {
  const [whole, fraction = ''] = amount.split('.');
  const cut = fraction.slice(decimals);
  if (/[^0]/.test(cut)) throw new Error(`${amount} has more than ${decimals} decimals`);
  return BigInt(whole! + fraction.slice(0, decimals).padEnd(decimals, '0'));
}

export const randomWallet = () => Wallet.createRandom().address;

export async function tokenBalance(token: Contract, address: string): Promise<bigint> {
  return (await token.getFunction('balanceOf')(address)) as bigint;
}
