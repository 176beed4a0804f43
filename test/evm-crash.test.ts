// Crashes against a local Hardhat node, with the real service process
// killed (SIGKILL) and restarted: a kill while payments are being detected
// (and payments made while it is down) misses none and counts none twice;
// a kill between a sweep's broadcast and its record, or between its record
// and its broadcast, sends exactly one payout.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { id as topicOf, zeroPadValue } from 'ethers';
import { startHardhat, type LocalNode } from './support/hardhat.ts';
import { baseUnits, evmFixture, randomWallet, tokenBalance, type EvmFixture } from './support/evm-flow.ts';
import { callService as call } from './support/process.ts';
import { crashHarness } from './support/crash.ts';
import { eventually as until } from './support/merchant.ts';
import { settlementAmounts } from './support/settlement.ts';

const ADMIN = 'evm-crash-test-admin-token';

const started = await startHardhat();
const skip = 'skip' in started ? started.skip : false;
if (skip) console.log(`# skipped EVM crash tests: ${skip}`);

describe('crashes on a local EVM node', { skip }, () => {
  const node = started as LocalNode;
  let fx: EvmFixture;
  before(async () => {
    fx = await evmFixture(node, { ADMIN_TOKEN: ADMIN });
  });
  after(async () => {
    await node.stop();
  });

  const service = crashHarness('evm-crash', () => fx.env);
  const { start, kill, withDataDir } = service;
  async function merchant(url: string, wallet: string) {
    const m = (
      await call(url, 'POST', '/admin/v1/merchants', ADMIN, { name: 'EVM', settlementWallets: { ethereum: wallet } })
    ).body.data;
    return (await call(url, 'POST', `/admin/v1/merchants/${m.id}/api-keys`, ADMIN, {})).body.data.key as string;
  }
  async function invoice(url: string, key: string, token?: string) {
    const res = await call(url, 'POST', '/api/v1/payments', key, {
      amount: '20',
      currency: 'USD',
      chain: 'ethereum',
      ...(token && { token }),
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
  }
  async function pay(p: { address: string; cryptoAmount: string }, token?: string) {
    if (token) await (await fx.usdt.getFunction('transfer')(p.address, baseUnits(p.cryptoAmount, 6))).wait();
    else await (await node.payer.sendTransaction({ to: p.address, value: baseUnits(p.cryptoAmount, 18) })).wait();
  }
  const history = async (url: string, key: string, id: string) =>
    ((await call(url, 'GET', `/api/v1/invoices/${id}/events`, key)).body.data as { type: string }[]).map((e) => e.type);

  it('a kill during detection, and payments while the service is down, miss nothing', async () => {
    await withDataDir(async () => {
      let url = await start();
      const key = await merchant(url, randomWallet());
      const invoices: { token: string | undefined; p: Awaited<ReturnType<typeof invoice>> }[] = [];
      for (let i = 0; i < 6; i++) {
        const token = i % 2 === 0 ? undefined : 'USDT';
        invoices.push({ token, p: await invoice(url, key, token) });
      }
      // Two paid and seen; two more paid as the process dies; two while it is down.
      for (const { p, token } of invoices.slice(0, 2)) await pay(p, token);
      await until(
        async () => (await call(url, 'GET', `/api/v1/invoices/${invoices[0]!.p.paymentId}/status`)).body.data,
        (s) => s.hasDetectedPayment,
      );
      for (const { p, token } of invoices.slice(2, 4)) await pay(p, token);
      await kill();
      for (const { p, token } of invoices.slice(4)) await pay(p, token);
      await node.mine(1);

      url = await start();
      for (const { p } of invoices) {
        await until(
          async () => (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/status`)).body.data,
          (s) => s.hasDetectedPayment,
        );
      }
      await node.mine(3);
      for (const { p } of invoices) {
        await until(
          async () => (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/status`)).body.data,
          (s) => ['confirmed', 'settled'].includes(s.status),
        );
        const types = await history(url, key, p.paymentId);
        assert.equal(types.filter((t) => t === 'PaymentDetected').length, 1, `${p.paymentId} detected once`);
        assert.equal(types.filter((t) => t === 'PaymentApplied').length, 1, `${p.paymentId} counted once`);
      }
    });
  });

  for (const [failpoint, token] of [
    ['settlement:after-broadcast', 'USDT'],
    ['settlement:after-prepare', 'USDT'],
    ['settlement:after-broadcast', undefined],
  ] as const) {
    it(`a kill at ${failpoint} (${token ?? 'ETH'}) and a restart send exactly one payout`, async () => {
      await withDataDir(async () => {
        let url = await start({ FAILPOINTS: failpoint });
        const feeWallet = (await call(url, 'GET', '/admin/v1/wallets', ADMIN)).body.data[0].feeWallet;
        await (await node.payer.sendTransaction({ to: feeWallet, value: 10n ** 18n })).wait();
        const wallet = randomWallet();
        const key = await merchant(url, wallet);
        const p = await invoice(url, key, token);
        await pay(p, token);
        await node.mine(2);
        // Confirmation leads to the payout, where the failpoint kills the process.
        await service.killedWithin(30_000);

        url = await start();
        const settled = await until(
          async () => {
            await node.mine(1);
            return (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/status`)).body.data;
          },
          (s) => s.status === 'settled',
        );
        const events = (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/events`, key)).body.data as any[];
        const requested = settlementAmounts(events);
        const net = BigInt(requested.netAmount);
        if (token) {
          assert.equal(await tokenBalance(fx.usdt, wallet), net, 'paid once, exactly');
          const logs = await node.provider.getLogs({
            address: await fx.usdt.getAddress(),
            topics: [topicOf('Transfer(address,address,uint256)'), null, zeroPadValue(wallet, 32)],
            fromBlock: 0,
          });
          assert.equal(logs.length, 1, 'exactly one payout transaction');
          assert.equal(logs[0]!.transactionHash, settled.txHash);
        } else {
          assert.equal(await node.provider.getBalance(wallet), net, 'paid once, exactly');
        }
        assert.equal(events.filter((e) => e.type === 'SettlementTransactionPrepared').length, 1, 'one attempt');
        assert.equal(events.filter((e) => e.type === 'InvoiceSettled').length, 1);
      });
    });
  }
});
