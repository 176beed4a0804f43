// The Tron chain path against the Tron test node (test/support/tron-node.ts):
// one block of 2,000 transactions (1,000 TRX transfers and 1,000 USDT
// transfer() calls, every one signed and checked by the node) against
// 1,000,000 watched addresses (see chain-block.ts for what is measured).
// Then the request budget (issue 26): what the service asks the node in a
// minute of 3 s blocks, idle, with 1,000 open invoices, and with settlements
// being paid out, beside TronGrid's limits.
import { createHash, randomBytes } from 'node:crypto';
import basex from 'base-x';
import { TronChain, TRC20_TRANSFER_TOPIC } from '../../adapters/chains/tron/index.ts';
import { DepositKeyring, generateMnemonic } from '../../adapters/keys/derivation.ts';
import { randomTronKey } from '../support/tron-node.ts';
import { startTronNode, TEST_USDT } from '../support/tron-flow.ts';
import { runBlockBench } from './chain-block.ts';
import { count, progress, scaled, timed, type BenchSuite } from './support.ts';
import { formatSeconds, markdownTable } from './table.ts';
import { sleep } from '../../adapters/chains/node.ts';
import { merchantWithKey } from '../support/merchant.ts';
import { baseUnits } from '../support/evm-flow.ts';
import { startTronService, stopTronService } from '../support/tron-flow.ts';

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
      progress(
        'tron',
        `block ${height}: ${count(recipients.length)} transactions signed and taken in ${formatSeconds(signing)}`,
      );
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

/** BENCH_ONLY=tron-requests runs it alone (it takes about four minutes: three minutes of blocks and the set-up). */
export const tronRequestsSuite: BenchSuite = { name: 'tron-requests', run: () => requestBudget() };

const BLOCK_MS = 3000;
/** TronGrid's free key: 100,000 requests a day, 15 a second (developers.tron.network, Rate Limits). */
const TRONGRID_FREE_PER_DAY = 100_000;

/**
 * Requests the service sends the node in a window of 3 s blocks (each with a
 * USDT transfer, as every mainnet block has contract calls): idle, with
 * 1,000 open invoices (watched addresses), and with settlements being paid
 * out (their payouts prepared, sent, followed to final, their fees sent).
 */
async function requestBudget(): Promise<void> {
  const windowMs = scaled(60_000, 10_000);
  const openInvoices = scaled(1_000);
  const settlements = scaled(10);
  const { node, svc, payer } = await startTronService();
  try {
    const sent = () => [...node.requests.values()].reduce((sum, n) => sum + n, 0);
    const window = async () => {
      const before = sent();
      const started = Date.now();
      while (Date.now() - started < windowMs) {
        await node.sendToken(payer, TEST_USDT, randomTronKey().address, 1n);
        node.mine(1);
        await sleep(BLOCK_MS);
      }
      return ((sent() - before) * 60_000) / (Date.now() - started);
    };
    await sleep(2 * BLOCK_MS); // start-up
    const idle = await window();
    progress('tron', `idle: ${idle.toFixed(0)} requests a minute`);

    const { key, merchant } = await merchantWithKey(svc);
    const admin = (method: string, path: string, body?: unknown) =>
      svc.call(method, path, { token: svc.adminToken, body });
    await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, {
      settlementWallets: { tron: randomTronKey().address },
    });
    const pay = (amount: string) =>
      svc.call('POST', '/api/v1/payments', { token: key, body: { amount, currency: 'USD', chain: 'tron' } });
    for (let i = 0; i < openInvoices; i++) await pay('10');
    const withInvoices = await window();
    progress('tron', `${count(openInvoices)} open invoices: ${withInvoices.toFixed(0)} requests a minute`);

    // Settlements: TRX invoices paid and confirmed (solidified), their payouts under way through the window.
    const [wallets] = (await admin('GET', '/admin/v1/wallets')).body.data as { treasury: string }[];
    node.fund(wallets!.treasury, 1n);
    for (let i = 0; i < settlements; i++) {
      const p = (await pay('20')).body.data as { address: string; cryptoAmount: string };
      await node.sendTrx(payer, p.address, baseUnits(p.cryptoAmount, 6));
    }
    node.mine(21);
    const withSettlements = await window();
    progress('tron', `${settlements} settlements: ${withSettlements.toFixed(0)} requests a minute`);

    const row = (state: string, perMinute: number) => [
      state,
      perMinute.toFixed(0),
      (perMinute / 60).toFixed(2),
      count(Math.round(perMinute * 60 * 24)),
      `${((perMinute * 60 * 24 * 100) / TRONGRID_FREE_PER_DAY).toFixed(0)}%`,
    ];
    console.log(
      `\n### Tron: requests to the node, ${formatSeconds(windowMs)} windows of 3 s blocks (test node)\n\n` +
        markdownTable(
          ['the service', 'a minute', 'a second', 'a day', 'of a free key (100,000/day, 15/s)'],
          [
            row('idle', idle),
            row(`${count(openInvoices)} open invoices`, withInvoices),
            row(`and ${settlements} settlements paying out`, withSettlements),
          ],
        ) +
        `\n\nEach settlement paying out adds about ${((withSettlements - withInvoices) / settlements).toFixed(1)} requests a minute while it lasts (about a minute: 20 blocks to final). TronGrid's paid plans raise the daily quota and the rate per key; their figures are in the TronGrid console, not published as fixed numbers.\n`,
    );
  } finally {
    await stopTronService(node, svc);
  }
}
