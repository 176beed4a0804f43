// Shared steps of the Solana integration tests: a test node with the
// catalogue's USDT and USDC mints, and the service's environment for it.
import { Keypair } from '@solana/web3.js';
import { findToken } from '../../domain/catalogue.ts';
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
