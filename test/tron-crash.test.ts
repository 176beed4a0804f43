// Crashes against the Tron test node, with the real service process killed
// (SIGKILL) and restarted: a kill while payments are being detected (and
// payments made while it is down) misses none and counts none twice; a kill
// between a sweep's signing and its broadcast, or between its broadcast and
// its record, sends exactly one payout; so does a kill there in a refund
// from a deposit, whose settlement then pays exactly the rest; and a kill at
// each step of a USDT refund from the merchant's refund wallet, then a second
// refund from that wallet prepared while the first one's top-up is still on
// it (the restarted process never saw that top-up go out): each customer paid
// once, the fee wallet's TRX all back, the merchant's TRX there to the sun.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { baseUnits } from './support/evm-flow.ts';
import { callService as call } from './support/process.ts';
import { crashHarness } from './support/crash.ts';
import { eventually as until, eventuallyMining } from './support/merchant.ts';
import { randomTronKey, type TronKey, type TronTestNode } from './support/tron-node.ts';
import { startTronNode, TEST_USDT, tronEnv } from './support/tron-flow.ts';
import { settlementAmounts } from './support/settlement.ts';

const ADMIN = 'tron-crash-test-admin-token';

describe('crashes on the Tron test node', () => {
  let node: TronTestNode;
  let payer: TronKey;
  before(async () => {
    node = await startTronNode();
    payer = randomTronKey();
    node.fund(payer.address, 1_000_000_000_000n);
    node.mintToken(TEST_USDT, payer.address, 1_000_000_000n);
  });
  after(() => node.stop());

  const service = crashHarness('tron-crash', () => tronEnv(node, { ADMIN_TOKEN: ADMIN }));
  const { start, kill, withDataDir } = service;
  async function merchant(url: string, wallet?: string) {
    const m = (
      await call(url, 'POST', '/admin/v1/merchants', ADMIN, {
        name: 'Tron',
        ...(wallet && { settlementWallets: { tron: wallet } }),
      })
    ).body.data;
    return (await call(url, 'POST', `/admin/v1/merchants/${m.id}/api-keys`, ADMIN, {})).body.data.key as string;
  }
  /** Until the process has died at its failpoint, mining so that it gets there. */
  const killed = () => service.untilKilled(() => node.mine(1));
  /** The fee wallet funded for token payouts' energy, and the treasury an existing account. */
  async function fundServiceWallets(url: string) {
    const [{ feeWallet, treasury }] = (await call(url, 'GET', '/admin/v1/wallets', ADMIN)).body.data;
    await node.sendTrx(payer, feeWallet, 200_000_000n);
    if (node.balance(treasury) === 0n) await node.sendTrx(payer, treasury, 1_000_000n);
  }
  async function invoice(url: string, key: string, token?: string) {
    const res = await call(url, 'POST', '/api/v1/payments', key, {
      amount: '20',
      currency: 'USD',
      chain: 'tron',
      ...(token && { token }),
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
  }
  async function pay(p: { address: string; cryptoAmount: string }, token?: string) {
    if (token) await node.sendToken(payer, TEST_USDT, p.address, baseUnits(p.cryptoAmount, 6));
    else await node.sendTrx(payer, p.address, baseUnits(p.cryptoAmount, 6));
  }
  const status = async (url: string, id: string) => (await call(url, 'GET', `/api/v1/invoices/${id}/status`)).body.data;
  /** Mines a block at each look, so that confirmations and sweeps move on. */
  const mineUntil = (url: string, id: string, done: (s: any) => boolean) =>
    until(
      async () => {
        const s = await status(url, id);
        if (!done(s)) node.mine(1);
        return s;
      },
      done,
      90_000,
    );

  it('a kill during detection, and payments while the service is down, miss nothing', async () => {
    await withDataDir(async () => {
      let url = await start();
      const key = await merchant(url, randomTronKey().address);
      const invoices: { token: string | undefined; p: Awaited<ReturnType<typeof invoice>> }[] = [];
      for (let i = 0; i < 6; i++) {
        const token = i % 2 === 0 ? undefined : 'USDT';
        invoices.push({ token, p: await invoice(url, key, token) });
      }
      // Two paid and seen; two more paid as the process dies; two while it is down.
      for (const { p, token } of invoices.slice(0, 2)) await pay(p, token);
      node.mine(1);
      await until(
        () => status(url, invoices[0]!.p.paymentId),
        (s) => s.hasDetectedPayment,
      );
      for (const { p, token } of invoices.slice(2, 4)) await pay(p, token);
      node.mine(1);
      await kill();
      for (const { p, token } of invoices.slice(4)) await pay(p, token);
      node.mine(3);

      url = await start();
      for (const { p } of invoices) {
        await mineUntil(url, p.paymentId, (s) => ['confirmed', 'settled'].includes(s.status));
        const types = ((await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/events`, key)).body.data as any[]).map(
          (e) => e.type,
        );
        assert.equal(types.filter((t) => t === 'PaymentDetected').length, 1, `${p.paymentId} detected once`);
        assert.equal(types.filter((t) => t === 'PaymentApplied').length, 1, `${p.paymentId} counted once`);
      }
    });
  });

  for (const [failpoint, token] of [
    ['settlement:after-prepare', 'USDT'],
    ['settlement:after-broadcast', 'USDT'],
    ['settlement:after-prepare', undefined],
    ['settlement:after-broadcast', undefined],
  ] as const) {
    it(`a kill at ${failpoint} (${token ?? 'TRX'}) and a restart send exactly one payout`, async () => {
      await withDataDir(async () => {
        let url = await start({ FAILPOINTS: failpoint });
        await fundServiceWallets(url);
        const wallet = randomTronKey().address;
        await node.sendTrx(payer, wallet, 1_000_000n);
        const key = await merchant(url, wallet);
        const p = await invoice(url, key, token);
        await pay(p, token);
        // Confirmation leads to the payout, where the failpoint kills the process.
        await killed();

        url = await start();
        const settled = await mineUntil(url, p.paymentId, (s) => s.status === 'settled');
        const events = (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/events`, key)).body.data as any[];
        const net = BigInt(settlementAmounts(events).netAmount);
        if (token) {
          assert.deepEqual(
            node.tokenTransfersTo(TEST_USDT, wallet),
            [{ txid: settled.txHash, amount: net }],
            'paid once, exactly',
          );
        } else {
          const payouts = node.trxTransfers({ from: p.address, to: wallet });
          assert.deepEqual(payouts, [{ txid: settled.txHash, amount: net }], 'paid once, exactly');
        }
        assert.equal(events.filter((e) => e.type === 'SettlementTransactionPrepared').length, 1, 'one attempt');
        assert.equal(events.filter((e) => e.type === 'InvoiceSettled').length, 1);
      });
    });
  }
  for (const [failpoint, token] of [
    ['refund:after-prepare', 'USDT'],
    ['refund:after-broadcast', 'USDT'],
    ['refund:after-broadcast', undefined],
  ] as const) {
    it(`a kill at ${failpoint} of a deposit refund (${token ?? 'TRX'}) and a restart pay the customer once; the settlement then pays the rest`, async () => {
      await withDataDir(async () => {
        let url = await start({ FAILPOINTS: failpoint });
        await fundServiceWallets(url);
        const key = await merchant(url); // no wallet yet: the settlement waits, and the refund comes from the deposit
        const p = await invoice(url, key, token);
        const excess = token ? 5_000_000n : 10_000_000n;
        const received = baseUnits(p.cryptoAmount, 6) + excess;
        if (token) await node.sendToken(payer, TEST_USDT, p.address, received);
        else await node.sendTrx(payer, p.address, received);
        await mineUntil(url, p.paymentId, (s) => s.status === 'confirmed');
        const customer = randomTronKey().address;
        if (!token) await node.sendTrx(payer, customer, 1_000_000n); // a TRX refund pays an existing account
        const created = await call(url, 'POST', `/api/v1/invoices/${p.paymentId}/refunds`, key, {
          kind: 'excess',
          destination: customer,
        });
        assert.equal(created.status, 201, JSON.stringify(created.body));
        const refundId = created.body.data.id as string;
        const approved = await call(url, 'POST', `/api/v1/refunds/${refundId}/approve`, key);
        assert.equal(approved.body.data.fundedFrom, 'deposit');
        await killed();

        url = await start();
        const done = await until(
          async () => {
            const refund = (await call(url, 'GET', `/api/v1/refunds/${refundId}`, key)).body.data;
            if (refund.status !== 'completed') node.mine(1);
            return refund;
          },
          (r) => r.status === 'completed',
          90_000,
        );
        const net = baseUnits(done.netAmount, 6);
        const paid = token
          ? node.tokenTransfersTo(TEST_USDT, customer)
          : node.trxTransfers({ from: p.address, to: customer });
        assert.deepEqual(paid, [{ txid: done.transactionHash, amount: net }], 'paid once, exactly');
        const refundEvents = (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/events`, key)).body.data as any[];
        assert.equal(refundEvents.filter((e) => e.type === 'RefundTransactionPrepared').length, 1, 'one attempt');

        const wallet = randomTronKey().address;
        await node.sendTrx(payer, wallet, 1_000_000n);
        const merchantId = (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}`, key)).body.data.merchantId;
        await call(url, 'PATCH', `/admin/v1/merchants/${merchantId}`, ADMIN, { settlementWallets: { tron: wallet } });
        const settled = await mineUntil(url, p.paymentId, (s) => s.status === 'settled');
        const events = (await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/events`, key)).body.data as any[];
        const amounts = settlementAmounts(events);
        const rest = received - baseUnits(done.amount, 6) - BigInt(amounts.platformFee) - BigInt(amounts.networkFee);
        assert.equal(BigInt(amounts.netAmount), rest, 'the settlement is re-priced without the refund');
        const payouts = token
          ? node.tokenTransfersTo(TEST_USDT, wallet)
          : node.trxTransfers({ from: p.address, to: wallet });
        assert.deepEqual(payouts, [{ txid: settled.txHash, amount: rest }]);
      });
    });
  }
  // Where the refund-wallet refund dies: the payout engine's failpoints, and two moments inside the adapter's own
  // steps (the fee wallet's top-up offered to the node, not mined; the leftover's way back offered, not mined),
  // where the test kills the process as it waits for the next block.
  for (const step of [
    'refund:after-prepare',
    'top-up offered',
    'refund:after-broadcast',
    'payout:after-submitted',
    'leftover offered',
  ] as const) {
    it(`a kill at ${step} of a USDT refund from the refund wallet, then a second one from it: each paid once, the fee wallet's TRX all back, the merchant's TRX kept to the sun`, async () => {
      await withDataDir(async () => {
        let url = await start();
        await fundServiceWallets(url);
        const [{ feeWallet }] = (await call(url, 'GET', '/admin/v1/wallets', ADMIN)).body.data;
        const settlementWallet = randomTronKey().address;
        await node.sendTrx(payer, settlementWallet, 1_000_000n);
        const key = await merchant(url, settlementWallet);
        const p = await invoice(url, key, 'USDT');
        await pay(p, 'USDT');
        await mineUntil(url, p.paymentId, (s) => s.status === 'settled');
        const refundWallet = ((await call(url, 'GET', '/api/v1/refund-wallets', key)).body.data as any[]).find(
          (w) => w.chain === 'tron',
        ).address as string;
        // The merchant's TRX for TRX refunds: never the fee's, whatever the restarts. (Each test's fresh data
        // directory derives the same wallets, which earlier tests on this node used.)
        await node.sendTrx(payer, refundWallet, 50_000_000n);
        node.mine(1);
        const kept = node.balance(refundWallet);
        const feeBefore = node.balance(feeWallet);
        const earlier = {
          out: node.trxTransfers({ from: feeWallet, to: refundWallet }).length,
          back: node.trxTransfers({ from: refundWallet, to: feeWallet }).length,
        };

        await service.stop();
        url = await start(step.includes(':') ? { FAILPOINTS: step } : {});
        const refund = async (units: bigint) => {
          const customer = randomTronKey().address;
          const created = await call(url, 'POST', `/api/v1/invoices/${p.paymentId}/refunds`, key, {
            amount: String(units / 1_000_000n),
            destination: customer,
          });
          assert.equal(created.status, 201, JSON.stringify(created.body));
          const id = created.body.data.id as string;
          const approved = (await call(url, 'POST', `/api/v1/refunds/${id}/approve`, key)).body.data;
          assert.equal(approved.status, 'awaiting_funds');
          await node.sendToken(payer, TEST_USDT, refundWallet, units);
          node.mine(1);
          return { id, customer, units };
        };
        const first = await refund(4_000_000n);
        /** Mining, until the refund's payout is in a block. */
        const untilPaid = (r: { customer: string }) =>
          eventuallyMining(
            () => node.mine(1),
            async () => node.tokenTransfersTo(TEST_USDT, r.customer).length,
            (n) => n > 0,
            90_000,
          );
        if (step.includes(':')) {
          await killed();
        } else if (step === 'top-up offered') {
          // The node applies what it takes to its pending state: the top-up is offered, the process waits for it.
          await until(
            async () => node.balance(refundWallet),
            (trx) => trx > kept,
            60_000,
          );
          await kill();
        } else {
          await untilPaid(first);
          node.mine(19); // the payout solidified: its leftover goes back next, and no block mines it
          await until(
            async () => node.balance(refundWallet),
            (trx) => trx === kept,
            60_000,
          );
          await kill();
        }

        // What it offered is mined while it is down: a restarted process that finds the first payout on the chain
        // never sends it again, so only the recorded bundle tells it of that payout's top-up.
        node.mine(1);
        url = await start();
        // The first refund's payout mined, not final: its top-up's rest is still on the wallet as the second is made.
        await untilPaid(first);
        const second = await refund(3_000_000n);
        const preparedOf = async (id: string) =>
          ((await call(url, 'GET', `/api/v1/invoices/${p.paymentId}/events`, key)).body.data as any[]).filter(
            (e) => e.type === 'RefundTransactionPrepared' && e.streamId.endsWith(id),
          );
        await until(
          () => preparedOf(second.id),
          (events) => events.length > 0,
          60_000,
        );
        const completed = async (id: string) => {
          const r = (await call(url, 'GET', `/api/v1/refunds/${id}`, key)).body.data;
          if (r.status !== 'completed') node.mine(1);
          return r;
        };
        const done = [];
        for (const r of [first, second])
          done.push(
            await until(
              () => completed(r.id),
              (d) => d.status === 'completed',
              90_000,
            ),
          );
        node.mine(1); // a way back sent as the payout completed (a process that restarted does not wait for it)

        for (const [i, r] of [first, second].entries()) {
          assert.deepEqual(
            node.tokenTransfersTo(TEST_USDT, r.customer),
            [{ txid: done[i].transactionHash, amount: r.units }],
            'paid once, exactly',
          );
          assert.equal((await preparedOf(r.id)).length, 1, 'one attempt');
        }
        assert.equal(node.tokenBalance(TEST_USDT, refundWallet), 0n);
        assert.equal(node.balance(refundWallet), kept, "the refund wallet keeps exactly the merchant's TRX");
        const out = node.trxTransfers({ from: feeWallet, to: refundWallet }).slice(earlier.out);
        const back = node.trxTransfers({ from: refundWallet, to: feeWallet }).slice(earlier.back);
        assert.equal(out.length, 2, 'one top-up a refund');
        assert.equal(back.length, 2, 'one way back a refund');
        const charges = [...out, ...back, ...done.map((d) => ({ txid: d.transactionHash as string }))].reduce(
          (sum, t) => sum + node.feeOf(t.txid),
          0n,
        );
        assert.equal(
          feeBefore - node.balance(feeWallet),
          charges,
          "the fee wallet's TRX all back but the chain's charges",
        );
      });
    });
  }
});
