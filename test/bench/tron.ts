// The Tron chain path against the Tron test node (test/support/tron-node.ts):
// one block of 2,000 transactions (1,000 TRX transfers and 1,000 USDT
// transfer() calls, every one signed and checked by the node) against
// 1,000,000 watched addresses (see chain-block.ts for what is measured).
import { createHash, randomBytes } from 'node:crypto';
import basex from 'base-x';
import { TronChain, TRC20_TRANSFER_TOPIC } from '../../adapters/chains/tron.ts';
import { DepositKeyring, generateMnemonic } from '../../adapters/keys/derivation.ts';
import { randomTronKey } from '../support/tron-node.ts';
import { startTronNode, TEST_USDT } from '../support/tron-flow.ts';
import { runBlockBench } from './chain-block.ts';
import { count, progress, timed, type BenchSuite } from './support.ts';
import { formatSeconds } from './table.ts';

const TRX_TRANSFERS = 1_000;
const TOKEN_TRANSFERS = 1_000;

const base58 = basex('123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz');
const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest();

/** Random Tron addresses: a 0x41 byte, 20 random ones, and the double-SHA-256 checksum, in base58. */
function randomTronAddresses(n: number): string[] {
  const bytes = randomBytes(n * 20);
  return Array.from({ length: n }, (_, i) => {
    const payload = Buffer.concat([Buffer.from([0x41]), bytes.subarray(i * 20, i * 20 + 20)]);
    return base58.encode(Buffer.concat([payload, sha256(sha256(payload)).subarray(0, 4)]));
  });
}

interface RawBlock {
  transactions?: { raw_data: { contract: { type: string; parameter: { value: { to_address?: string } } }[] } }[];
}
interface RawInfo {
  log?: { topics?: string[] }[];
}

async function post<T>(url: string, path: string, body: object): Promise<T> {
  const response = await fetch(url + path, { method: 'POST', body: JSON.stringify(body) });
  return (await response.json()) as T;
}

export const tronSuite: BenchSuite = {
  name: 'tron',
  async run({ targets }) {
    const node = await startTronNode();
    try {
      const payer = randomTronKey();
      node.fund(payer.address, 10n ** 15n);
      node.mintToken(TEST_USDT, payer.address, 10n ** 15n);
      const recipients = randomTronAddresses(TRX_TRANSFERS + TOKEN_TRANSFERS);
      const signing = await timed(async () => {
        for (const [i, to] of recipients.entries()) {
          if (i < TRX_TRANSFERS) await node.sendTrx(payer, to, 1_000_000n + BigInt(i));
          else await node.sendToken(payer, TEST_USDT, to, 1_000n + BigInt(i));
        }
      });
      node.mine(1);
      const height = node.head.number;
      progress('tron', `block ${height}: ${count(recipients.length)} transactions signed and taken in ${formatSeconds(signing)}`);
      const options = {
        rpcUrl: node.url,
        network: node.genesisId,
        tokens: [{ symbol: 'USDT', contract: TEST_USDT, decimals: 6 }],
        keyring: DepositKeyring.fromMnemonic(generateMnemonic()),
        confirmations: 19,
      };
      await runBlockBench(
        {
          chain: 'tron',
          node: 'test/support/tron-node.ts (java-tron HTTP API), 127.0.0.1',
          block: { height, recipients, transactions: recipients.length },
          openAdapter: () => TronChain.open(options),
          randomAddresses: randomTronAddresses,
          // The same two calls, parsed JSON, the recipients left in hex.
          async rawRecipients(h) {
            const [block, infos] = await Promise.all([
              post<RawBlock>(node.url, '/wallet/getblockbynum', { num: h }),
              post<RawInfo[]>(node.url, '/wallet/gettransactioninfobyblocknum', { num: h }),
            ]);
            const to = new Set<string>();
            for (const tx of block.transactions ?? []) {
              const contract = tx.raw_data.contract[0]!;
              if (contract.type === 'TransferContract') to.add(contract.parameter.value.to_address!);
            }
            for (const info of infos) {
              for (const log of info.log ?? []) {
                if (log.topics?.[0] === TRC20_TRANSFER_TOPIC) to.add('41' + log.topics[2]!.slice(24));
              }
            }
            return [...to];
          },
        },
        targets,
      );
    } finally {
      await node.stop();
    }
  },
};
