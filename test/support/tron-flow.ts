// Shared steps of the Tron integration tests: a test node with a USDT
// contract, the service's environment for it, and amounts in base units.
import { TronChain, type TronChainOptions } from '../../adapters/chains/tron/index.ts';
import { DepositKeyring } from '../../adapters/keys/derivation.ts';
import { randomTronKey, TronTestNode, type TronKey } from './tron-node.ts';
import { startTestService, type RunningService } from './service.ts';
import { SERVICE_MNEMONIC } from './evm-flow.ts';

/** The service's keys (the same mnemonic as the service under test). */
export const serviceKeyring = DepositKeyring.fromMnemonic(SERVICE_MNEMONIC);

/** The test node's USDT contract (Nile's USDT address; the node runs its own token there). */
export const TEST_USDT = 'TXYZopYRdj2D9XRtbG411XZZ3kM5VkAeBf';
/** A contract that pays tokens on the caller's behalf (see TronTestNode's routers). */
export const TEST_ROUTER = 'TNuoKL1ni8aoshfFL1ASca1Gou9RXwAzfn';

export async function startTronNode(): Promise<TronTestNode> {
  const node = await new TronTestNode({
    tokens: [{ contract: TEST_USDT, symbol: 'USDT', decimals: 6 }],
    routers: [TEST_ROUTER],
  }).start();
  node.mine(30); // a solidified block to refer to
  return node;
}

/** The service's environment for the test node. */
export function tronEnv(node: TronTestNode, extra: Record<string, string> = {}): Record<string, string> {
  return {
    CHAINS: 'tron',
    CHAIN_TRON_RPC_URL: node.url,
    CHAIN_TRON_SOLIDITY_URL: node.solidityUrl,
    CHAIN_TRON_NETWORK: node.genesisId,
    CHAIN_TRON_TOKENS: `USDT=${TEST_USDT}:6`,
    WALLET_MNEMONIC: SERVICE_MNEMONIC,
    RATE_LIMITS: 'off',
    ...extra,
  };
}

/** The adapter on the test node, reading the head at every call (no wait for a block's time). */
export function openTestChain(node: TronTestNode, extra: Partial<TronChainOptions> = {}): Promise<TronChain> {
  return TronChain.open({
    rpcUrl: node.url,
    solidityUrl: node.solidityUrl,
    headMs: 0,
    solidifiedMs: 0,
    network: node.genesisId,
    tokens: [{ symbol: 'USDT', contract: TEST_USDT, decimals: 6 }],
    keyring: serviceKeyring,
    confirmations: 19,
    retry: { attempts: 2, baseDelayMs: 10 },
    ...extra,
  });
}

/** A test node, a payer holding TRX and USDT on it, and the service on the node. */
export async function startTronService(): Promise<{ node: TronTestNode; svc: RunningService; payer: TronKey }> {
  const node = await startTronNode();
  const payer = randomTronKey();
  node.fund(payer.address, 10_000_000_000_000n);
  node.mintToken(TEST_USDT, payer.address, 10_000_000_000n);
  return { node, payer, svc: await startTestService(tronEnv(node)) };
}

export async function stopTronService(node: TronTestNode | undefined, svc: RunningService | undefined): Promise<void> {
  await svc?.close();
  await node?.stop();
}
