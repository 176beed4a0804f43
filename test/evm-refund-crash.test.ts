// Crashes in the middle of a refund payout on a local Hardhat node: the real
// service process is killed (SIGKILL, by its own failpoint) at each step of a
// refund (the deposit's hold taken before the approval is recorded; the
// transaction recorded; broadcast; marked submitted), started again on the
// same data, and the customer receives exactly one transaction of exactly the
// refund's net amount, read from the node to the wei or token base unit; the
// payer spends exactly what the refund says. (test/refund-crash.test.ts does
// the same on the sandbox ledger, test/evm-crash.test.ts for settlements.)
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { id as topicOf, Wallet, zeroPadValue } from 'ethers';
import { startHardhat, type LocalNode } from './support/hardhat.ts';
import { baseUnits, evmFixture, randomWallet, tokenBalance, type EvmFixture } from './support/evm-flow.ts';
import { callService as call } from './support/process.ts';
import { crashHarness } from './support/crash.ts';
import { eventually as until } from './support/merchant.ts';

const ADMIN = 'evm-refund-crash-test-admin-token';

const started = await startHardhat();
const skip = 'skip' in started ? started.skip : false;
if (skip) console.log(`# skipped EVM refund crash tests: ${skip}`);

type Token = 'USDT' | 'ETH';
type Funding = 'deposit' | 'refund_wallet';

const CASES: [failpoint: string, token: Token, funding: Funding][] = [
  ['refund:after-payer', 'USDT', 'deposit'],
  ['refund:after-prepare', 'USDT', 'deposit'],
  ['refund:after-broadcast', 'USDT', 'deposit'],
  ['payout:after-submitted', 'USDT', 'deposit'],
  ['refund:after-payer', 'ETH', 'deposit'],
  ['refund:after-prepare', 'ETH', 'deposit'],
  ['refund:after-broadcast', 'ETH', 'deposit'],
  ['payout:after-submitted', 'ETH', 'deposit'],
  ['refund:after-broadcast', 'USDT', 'refund_wallet'],
  ['refund:after-prepare', 'ETH', 'refund_wallet'],
];

describe('crashes during a refund payout on a local EVM node', { skip }, () => {
  const node = started as LocalNode;
  let fx: EvmFixture;
  before(async () => {
    fx = await evmFixture(node, { ADMIN_TOKEN: ADMIN, PLATFORM_FEE_BPS: '100' });
  });
  after(async () => {
    await node.stop();
  });

  // A mnemonic of its own per case: each data directory derives its addresses from index 0 again, and
  // an address another case left coins on would blur what this one's payer spent.
  let mnemonic = '';
  const service = crashHarness('evm-refund-crash', () => ({ ...fx.env, WALLET_MNEMONIC: mnemonic }));
  const decimals = (token: Token) => (token === 'USDT' ? 6 : 18);
  const balanceOf = (token: Token, address: string) =>
    token === 'USDT' ? tokenBalance(fx.usdt, address) : node.provider.getBalance(address);
  async function send(token: Token, to: string, units: bigint) {
    if (token === 'USDT') await (await fx.usdt.getFunction('transfer')(to, units)).wait();
    else await (await node.payer.sendTransaction({ to, value: units })).wait();
  }

  for (const [failpoint, token, funding] of CASES) {
    it(`a kill at ${failpoint} (${token} from the ${funding}) and a restart pay the customer once, exactly`, () =>
      service.withDataDir(async () => {
        mnemonic = Wallet.createRandom().mnemonic!.phrase;
        // From the deposit the process may die of the failpoint from its start: only the refund reaches it
        // (no settlement wallet, so the settlement never prepares). From a refund wallet the settlement
        // must be paid out first, and it passes through payout:after-submitted too.
        let url = await service.start(funding === 'deposit' ? { FAILPOINTS: failpoint } : {});
        const feeWallet = (await call(url, 'GET', '/admin/v1/wallets', ADMIN)).body.data[0].feeWallet;
        await send('ETH', feeWallet, 10n ** 18n);
        const merchant = (
          await call(url, 'POST', '/admin/v1/merchants', ADMIN, {
            name: 'EVM refund crash',
            ...(funding === 'refund_wallet' && { settlementWallets: { ethereum: randomWallet() } }),
          })
        ).body.data;
        const key = (await call(url, 'POST', `/admin/v1/merchants/${merchant.id}/api-keys`, ADMIN, {})).body.data.key;
        const created = await call(url, 'POST', '/api/v1/payments', key, {
          amount: '20',
          currency: 'USD',
          chain: 'ethereum',
          ...(token === 'USDT' && { token }),
        });
        assert.equal(created.status, 201, JSON.stringify(created.body));
        const p = created.body.data as { paymentId: string; address: string; cryptoAmount: string };
        const excess = token === 'USDT' ? 3_000_000n : 10n ** 16n;
        const received = baseUnits(p.cryptoAmount, decimals(token)) + excess;
        await send(token, p.address, received);
        const status = () => call(url, 'GET', `/api/v1/invoices/${p.paymentId}/status`).then((r) => r.body.data);
        await until(
          async () => (await node.mine(1), status()),
          (s) => s.status === (funding === 'deposit' ? 'confirmed' : 'settled'),
          60_000,
        );

        const customer = randomWallet();
        const refund = (
          await call(url, 'POST', `/api/v1/invoices/${p.paymentId}/refunds`, key, {
            kind: 'excess',
            destination: customer,
          })
        ).body.data;
        assert.equal(refund.status, 'awaiting_approval', JSON.stringify(refund));
        const amount = baseUnits(refund.amount, decimals(token));
        assert.equal(amount, excess);
        let payer = p.address;
        if (funding === 'refund_wallet') {
          const wallets = (await call(url, 'GET', '/api/v1/refund-wallets', key)).body.data;
          payer = wallets.find((w: { chain: string }) => w.chain === 'ethereum').address;
          await send(token, payer, amount);
          await service.stop();
          url = await service.start({ FAILPOINTS: failpoint });
        }
        const payerBefore = await balanceOf(token, payer);

        await call(url, 'POST', `/api/v1/refunds/${refund.id}/approve`, key).catch(() => undefined);
        await service.killedWithin(30_000);

        url = await service.start();
        // Approving again is harmless; where the kill came before the approval was recorded, it is the approval.
        const approved = await call(url, 'POST', `/api/v1/refunds/${refund.id}/approve`, key);
        assert.equal(approved.status, 200, JSON.stringify(approved.body));
        assert.equal(approved.body.data.fundedFrom, funding);
        const done = await until(
          async () => {
            await node.mine(1);
            return (await call(url, 'GET', `/api/v1/refunds/${refund.id}`, key)).body.data;
          },
          (r) => r.status === 'completed',
          90_000,
        );

        const net = baseUnits(done.netAmount, decimals(token));
        const fee = baseUnits(done.networkFee, decimals(token));
        assert.equal(net + fee, amount);
        assert.equal(await balanceOf(token, customer), net, 'the customer received the net amount, once');
        if (token === 'USDT') {
          const logs = await node.provider.getLogs({
            address: await fx.usdt.getAddress(),
            topics: [topicOf('Transfer(address,address,uint256)'), null, zeroPadValue(customer, 32)],
            fromBlock: 0,
          });
          assert.equal(logs.length, 1, 'exactly one payout transaction');
          assert.equal(logs[0]!.transactionHash, done.transactionHash);
          // The fee wallet pays a token payout's gas: the payer's tokens go down by exactly the refund.
          assert.equal(await balanceOf(token, payer), payerBefore - net);
        } else {
          const tx = (await node.provider.getTransaction(done.transactionHash))!;
          assert.equal(tx.to, customer);
          assert.equal(tx.value, net);
          // One transfer, its gas exactly the quoted fee: the payer spent exactly the refund's amount.
          assert.equal(await balanceOf(token, payer), payerBefore - amount);
        }
        const events = (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/events`, key)).body.data as {
          type: string;
        }[];
        assert.equal(events.filter((e) => e.type === 'RefundTransactionPrepared').length, 1, 'one attempt');
        assert.equal(events.filter((e) => e.type === 'RefundCompleted').length, 1);
      }));
  }
});
