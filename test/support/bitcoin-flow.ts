// The service on its own Bitcoin test node, for the Bitcoin service suites:
// a payer with `coins` confirmed coins of 0.2 BTC each (one per payment made
// before the next block: a payment's change is unconfirmed).
import { startTestService, type RunningService } from './service.ts';
import { SERVICE_MNEMONIC } from './evm-flow.ts';
import { BitcoinTestNode, randomBitcoinKey, type BitcoinKey } from './bitcoin-node.ts';

export async function startBitcoinService(
  coins: number,
  env: Record<string, string> = {},
  node?: BitcoinTestNode,
): Promise<{ node: BitcoinTestNode; svc: RunningService; payer: BitcoinKey }> {
  node ??= await new BitcoinTestNode().start();
  const payer = randomBitcoinKey();
  for (let i = 0; i < coins; i++) node.fund(payer.address, 20_000_000n);
  const svc = await startTestService({
    CHAINS: 'bitcoin',
    CHAIN_BITCOIN_RPC_URL: node.rpcUrl,
    CHAIN_BITCOIN_NETWORK: 'regtest',
    WALLET_MNEMONIC: SERVICE_MNEMONIC,
    RATE_LIMITS: 'off',
    ...env,
  });
  return { node, svc, payer };
}

export async function stopBitcoinService(node: BitcoinTestNode | undefined, svc: RunningService | undefined) {
  await svc?.close();
  await node?.stop();
}
