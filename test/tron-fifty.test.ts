// Issue 26's run: 50 invoices, TRX and USDT, each to its own merchant, on a
// chain whose public free-bandwidth pool runs out halfway and whose node
// turns into a lagging load-balanced backend at the same moment; a contract
// offered as a settlement wallet is refused. Every invoice settles exactly
// once, and each merchant receives exactly its settlement's net amount.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { merchantWithKey } from './support/merchant.ts';
import type { RunningService } from './support/service.ts';
import { baseUnits } from './support/evm-flow.ts';
import { randomTronKey, type TronKey, type TronTestNode } from './support/tron-node.ts';
import { startTronService, stopTronService, TEST_USDT } from './support/tron-flow.ts';
import { settlementAmounts, untilAllSettled } from './support/settlement.ts';

const INVOICES = 50;

describe('fifty Tron invoices on mainnet terms', () => {
  let node: TronTestNode, svc: RunningService, payer: TronKey;
  before(async () => ({ node, svc, payer } = await startTronService()));
  after(() => stopTronService(node, svc));

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;

  it('settles every invoice once, each merchant getting exactly the net amount', async () => {
    const [wallets] = (await admin('GET', '/admin/v1/wallets')).body.data as { feeWallet: string; treasury: string }[];
    await node.sendTrx(payer, wallets!.feeWallet, 2_000_000_000n);
    await node.sendTrx(payer, wallets!.treasury, 1_000_000n);
    node.mine(1);

    const contract = randomTronKey().address;
    node.deployContract(contract);
    const refused = await merchantWithKey(svc);
    const answer = await admin('PATCH', `/admin/v1/merchants/${refused.merchant.id}`, {
      settlementWallets: { tron: contract },
    });
    assert.equal(answer.status, 400);

    const invoices: { id: string; key: string; wallet: string; token: 'TRX' | 'USDT'; address: string }[] = [];
    for (let i = 0; i < INVOICES; i++) {
      const token = i % 2 === 0 ? 'TRX' : 'USDT';
      const wallet = randomTronKey().address;
      if (i % 5 !== 0) node.fund(wallet, 1n); // most merchants' accounts exist; some are created by their payout
      const { key, merchant } = await merchantWithKey(svc);
      const patched = await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, {
        settlementWallets: { tron: wallet },
      });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      const res = await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount: String(20 + i), currency: 'USD', chain: 'tron', ...(token === 'USDT' && { token }) },
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      const p = res.body.data as { paymentId: string; address: string; cryptoAmount: string };
      const units = baseUnits(p.cryptoAmount, 6);
      if (token === 'TRX') await node.sendTrx(payer, p.address, units);
      else await node.sendToken(payer, TEST_USDT, p.address, units);
      invoices.push({ id: p.paymentId, key, wallet, token, address: p.address });
      if (i === INVOICES / 2) {
        node.exhaustPublicBandwidth();
        node.lagging = true;
      }
      if (i % 5 === 4) node.mine(1);
    }

    // The last failure of a few stuck invoices says why, should the run not settle them all.
    const whyNot = async (stuck: string[]) => {
      const reasons = await Promise.all(
        invoices
          .filter((p) => stuck.includes(p.id))
          .slice(0, 3)
          .map(async (p) => {
            const events = (await svc.call('GET', `/api/v1/invoices/${p.id}/events`, { token: p.key })).body
              .data as any[];
            return `${p.token}: ${JSON.stringify(events.filter((e) => /Fail/.test(e.type)).at(-1)?.data ?? events.at(-1)?.type)}`;
          }),
      );
      return reasons.join('; ');
    };
    await untilAllSettled(
      status,
      invoices.map((p) => p.id),
      () => node.mine(1),
      whyNot,
    );
    node.lagging = false;
    node.mine(25); // the platform fees and leftovers sent at the end go through

    for (const p of invoices) {
      const events = (await svc.call('GET', `/api/v1/invoices/${p.id}/events`, { token: p.key })).body.data as any[];
      const net = BigInt(settlementAmounts(events).netAmount);
      const paid =
        p.token === 'TRX'
          ? node.trxTransfers({ from: p.address, to: p.wallet }).map((t) => t.amount)
          : node.tokenTransfersTo(TEST_USDT, p.wallet).map((t) => t.amount);
      assert.deepEqual(paid, [net], `${p.token} invoice ${p.id}: paid once, exactly`);
      assert.equal(events.filter((e) => e.type === 'SettlementCompleted').length, 1);
    }
  });
});
