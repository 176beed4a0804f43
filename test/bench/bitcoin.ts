// The Bitcoin chain path against the Bitcoin test node
// (test/support/bitcoin-node.ts): one block of 3,000 transactions, every one
// signed and validated by the node, against 1,000,000 watched addresses (see
// chain-block.ts for what is measured).
import { randomBytes } from 'node:crypto';
import * as bitcoin from 'bitcoinjs-lib';
import { BitcoinChain } from '../../adapters/chains/bitcoin/index.ts';
import { DepositKeyring, generateMnemonic } from '../../adapters/keys/derivation.ts';
import { BitcoinTestNode, randomBitcoinKey } from '../support/bitcoin-node.ts';
import { runBlockBench } from './chain-block.ts';
import { count, progress, timed, type BenchSuite } from './support.ts';
import { formatSeconds } from './table.ts';

const TRANSACTIONS = 3_000;

/** Random P2WPKH regtest addresses (bech32 of 20 random bytes). */
function randomBitcoinAddresses(n: number): string[] {
  const bytes = randomBytes(n * 20);
  return Array.from(
    { length: n },
    (_, i) => bitcoin.payments.p2wpkh({ hash: bytes.subarray(i * 20, i * 20 + 20), network: bitcoin.networks.regtest }).address!,
  );
}

export const bitcoinSuite: BenchSuite = {
  name: 'bitcoin',
  async run({ targets }) {
    const node = await new BitcoinTestNode().start();
    try {
      const payer = randomBitcoinKey();
      for (let i = 0; i < TRANSACTIONS; i++) node.fund(payer.address, 100_000_000n);
      const recipients = randomBitcoinAddresses(TRANSACTIONS);
      const signing = await timed(async () => {
        for (const [i, address] of recipients.entries()) node.pay(payer, [{ address, sats: 1_000_000n + BigInt(i) }]);
      });
      node.mine(1);
      const height = node.tip.height;
      progress('bitcoin', `block ${height}: ${count(TRANSACTIONS)} transactions signed and validated in ${formatSeconds(signing)}`);
      const keyring = DepositKeyring.fromMnemonic(generateMnemonic(), { bitcoinNetwork: 'regtest' });
      const authorization = 'Basic ' + Buffer.from(`${node.user}:${node.password}`).toString('base64');
      const call = async <T>(method: string, params: unknown[]) => {
        const response = await fetch(node.url, {
          method: 'POST',
          headers: { authorization },
          body: JSON.stringify({ jsonrpc: '1.0', id: 1, method, params }),
        });
        return ((await response.json()) as { result: T }).result;
      };
      await runBlockBench(
        {
          chain: 'bitcoin',
          node: 'test/support/bitcoin-node.ts (Bitcoin Core JSON-RPC, regtest), 127.0.0.1',
          // Every payment has a change output back to the payer: the block has twice as many outputs.
          block: { height, recipients, transactions: TRANSACTIONS },
          openAdapter: () => BitcoinChain.open({ rpcUrl: node.rpcUrl, network: 'regtest', keyring }),
          randomAddresses: randomBitcoinAddresses,
          // getblockhash and getblock (verbosity 2), JSON.parse (amounts as doubles), the output addresses.
          async rawRecipients(h) {
            const hash = await call<string>('getblockhash', [h]);
            const block = await call<{ tx: { vout: { scriptPubKey: { address?: string } }[] }[] }>('getblock', [hash, 2]);
            return [...new Set(block.tx.flatMap((tx) => tx.vout.map((o) => o.scriptPubKey.address!).filter(Boolean)))];
          },
        },
        targets,
      );
    } finally {
      await node.stop();
    }
  },
};
