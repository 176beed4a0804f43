// Shared steps of the EVM integration tests: a service pointed at the local
// Hardhat node, invoices paid from Hardhat's funded account, and balances
// read on the chain.
import { Wallet, type Contract } from 'ethers';
import { deployToken, HARDHAT_CHAIN_ID, type LocalNode } from './hardhat.ts';

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
