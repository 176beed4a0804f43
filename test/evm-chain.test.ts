// The service on a local Hardhat node (Ethereum's adapter with a test chain
// id and test token contracts), over its real HTTP API: payments in ETH and
// in USDT are detected, confirmed after the required blocks, and settled to
// the merchant's wallet net of fees, exact to the wei and to the base unit;
// the token sweep goes through the fee wallet's gas top-up; a reorg that
// drops a detected payment withdraws it.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { eventually, merchantWithKey } from './support/merchant.ts';
import type { RunningService } from './support/service.ts';
import { baseUnits, randomWallet, tokenBalance, type EvmFixture } from './support/evm-flow.ts';
import { hardhatOrSkip, serviceOnNode } from './support/evm-service.ts';
import { settlementAmounts } from './support/settlement.ts';

const { node, skip } = await hardhatOrSkip('EVM service tests');

describe('payments and settlement on a local EVM node', { skip }, () => {
  let fx: EvmFixture;
  let svc: RunningService;
  serviceOnNode(node, (f, s) => ([fx, svc] = [f, s]));

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;
  const settlementOf = async (id: string, key: string) =>
    (await svc.call('GET', `/api/v1/invoices/${id}/settlement`, { token: key })).body.data;
  /** The settlement's amounts in base units, as the invoice's history last priced them. */
  const requested = async (id: string, key: string) => {
    const events = (await svc.call('GET', `/api/v1/invoices/${id}/events`, { token: key })).body.data;
    const d = settlementAmounts(events);
    return {
      gross: BigInt(d.grossAmount),
      platformFee: BigInt(d.platformFee),
      networkFee: BigInt(d.networkFee),
      net: BigInt(d.netAmount),
    };
  };
  const wallets = async () => (await admin('GET', '/admin/v1/wallets')).body.data as any[];

  async function invoice(key: string, token?: string, amount = '25') {
    const res = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount, currency: 'USD', chain: 'ethereum', ...(token && { token }) },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
  }

  /** Mines one block at a time until `done`. */
  async function mineUntil<T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 30_000) {
    return eventually(
      async () => {
        const v = await read();
        if (!done(v)) await node.mine(1);
        return v;
      },
      done,
      ms,
    );
  }

  it('lists the fee wallet and the treasury with their balances', async () => {
    const [eth] = await wallets();
    assert.equal(eth.chain, 'ethereum');
    assert.match(eth.feeWallet, /^0x[0-9a-fA-F]{40}$/);
    assert.match(eth.treasury, /^0x[0-9a-fA-F]{40}$/);
    assert.notEqual(eth.feeWallet, eth.treasury);
    assert.equal(eth.feeWalletBalance, '0.000000000000000000');
    assert.equal(typeof eth.nextDerivationIndex, 'number');
    await (await node.payer.sendTransaction({ to: eth.feeWallet, value: 10n ** 18n })).wait();
    assert.equal((await wallets())[0].feeWalletBalance, '1.000000000000000000');
    assert.equal((await svc.call('GET', '/admin/v1/wallets')).status, 401);
  });

  it('refuses a contract as a settlement wallet when it is configured, not at its first sweep', async () => {
    const { merchant } = await merchantWithKey(svc);
    const contract = await fx.usdt.getAddress();
    const res = await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, {
      settlementWallets: { ethereum: contract },
    });
    assert.equal(res.status, 400);
    assert.equal(
      res.body.message,
      `settlementWallets.ethereum: ${contract} is a contract on ethereum: payouts carry a plain transfer's 21,000 gas, so they go to plain accounts (an externally owned address)`,
    );
    const plain = randomWallet();
    assert.equal(
      (await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { ethereum: plain } })).status,
      200,
    );
  });

  it('an ETH payment is detected, confirmed after 3 blocks and settled to the wei', async () => {
    const merchantWallet = randomWallet();
    const { key, merchant } = await merchantWithKey(svc);
    await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { ethereum: merchantWallet } });
    const [{ treasury }] = await wallets();
    const treasuryBefore = await node.provider.getBalance(treasury);
    const p = await invoice(key);
    const wei = baseUnits(p.cryptoAmount, 18);
    await (await node.payer.sendTransaction({ to: p.address, value: wei })).wait();

    const detected = await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment,
    );
    assert.equal(detected.paymentStatus, 'detected');
    assert.notEqual(detected.status, 'confirmed', 'one block is not three confirmations');
    await node.mine(2);
    await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'confirmed' || s.status === 'settled',
    );

    const settled = await mineUntil(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    const settlement = await settlementOf(p.paymentId, key);
    assert.equal(settlement.status, 'completed');
    const { gross, platformFee, networkFee, net } = await requested(p.paymentId, key);
    assert.equal(baseUnits(settlement.amount, 18), net);
    assert.equal(gross, wei);
    assert.equal(platformFee, wei / 100n);
    assert.ok(networkFee > 0n);
    assert.equal(net, gross - platformFee - networkFee);
    // On the chain: the merchant got the net amount, the treasury the platform fee, the deposit address nothing left.
    assert.equal(await node.provider.getBalance(merchantWallet), net);
    assert.equal(baseUnits(settled.settledAmount, 18), net);
    assert.equal(await node.provider.getBalance(treasury), treasuryBefore + platformFee);
    assert.equal(await node.provider.getBalance(p.address), 0n);
    const payout = await node.provider.getTransactionReceipt(settled.txHash);
    assert.equal(payout!.to, merchantWallet);
    // The network fee recorded is exactly what the two transactions paid.
    assert.equal(payout!.gasUsed * payout!.gasPrice * 2n, networkFee);
  });

  it('a USDT payment is settled after a gas top-up from the fee wallet, to the base unit', async () => {
    const merchantWallet = randomWallet();
    const { key, merchant } = await merchantWithKey(svc);
    await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { ethereum: merchantWallet } });
    const [{ feeWallet, treasury }] = await wallets();
    const feeBefore = await node.provider.getBalance(feeWallet);
    const treasuryBefore = await tokenBalance(fx.usdt, treasury);
    const p = await invoice(key, 'USDT', '40');
    const units = baseUnits(p.cryptoAmount, 6);
    await (await fx.usdt.getFunction('transfer')(p.address, units)).wait();
    await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment,
    );
    await node.mine(2);
    const settled = await mineUntil(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    const settlement = await settlementOf(p.paymentId, key);
    const { platformFee, networkFee, net } = await requested(p.paymentId, key);
    assert.equal(baseUnits(settlement.amount, 6), net);
    assert.equal(networkFee, 0n, 'token gas is paid by the fee wallet');
    assert.equal(platformFee, units / 100n);
    assert.equal(net, units - platformFee);
    assert.equal(await tokenBalance(fx.usdt, merchantWallet), net);
    assert.equal(baseUnits(settled.settledAmount, 6), net);
    assert.equal(await tokenBalance(fx.usdt, treasury), treasuryBefore + platformFee);
    assert.equal(await tokenBalance(fx.usdt, p.address), 0n);
    // The fee wallet paid the top-up (and its own gas); the deposit address keeps at most dust of it.
    const feeAfter = await node.provider.getBalance(feeWallet);
    assert.ok(feeAfter < feeBefore, 'the fee wallet topped the deposit address up');
    const dust = await node.provider.getBalance(p.address);
    assert.ok(dust < feeBefore - feeAfter, `dust ${dust} is less than the top-up`);

    // The watcher reads blocks in order: once a later payment is seen, the
    // top-up's block has been read, and the top-up was not taken for a payment.
    const later = await invoice(key, 'USDT', '2');
    await (await fx.usdt.getFunction('transfer')(later.address, baseUnits(later.cryptoAmount, 6))).wait();
    await eventually(
      () => status(later.paymentId),
      (s) => s.hasDetectedPayment,
    );
    const after = await status(p.paymentId);
    assert.equal(after.paymentIssueType, null, 'the gas top-up is not a wrong-token payment');
    assert.equal(after.mismatchPayment, null);

    // A refund of it, once approved, waits for the merchant's refund wallet to hold it (test/evm-refund.test.ts pays one).
    const customer = randomWallet();
    const refund = await svc.call('POST', `/api/v1/invoices/${p.paymentId}/refunds`, {
      token: key,
      body: { amount: '1', destination: customer },
    });
    assert.equal(refund.status, 201, JSON.stringify(refund.body));
    const approve = await svc.call('POST', `/api/v1/refunds/${refund.body.data.id}/approve`, { token: key });
    assert.equal(approve.status, 200, JSON.stringify(approve.body));
    assert.equal(approve.body.data.fundedFrom, 'refund_wallet');
    assert.equal(approve.body.data.status, 'awaiting_funds');
    assert.equal(await tokenBalance(fx.usdt, customer), 0n);
  });

  it('a reorg that drops a detected payment withdraws it; it never confirms', async () => {
    const { key } = await merchantWithKey(svc);
    const p = await invoice(key, 'USDC', '12');
    const snapshot = await node.rpc<string>('evm_snapshot');
    await (await fx.usdc.getFunction('transfer')(p.address, baseUnits(p.cryptoAmount, 6))).wait();
    await eventually(
      () => status(p.paymentId),
      (s) => s.hasDetectedPayment,
    );
    assert.equal(await node.rpc('evm_revert', [snapshot]), true);
    node.payer.reset();
    await node.mine(3); // a longer chain without the payment
    const after = await eventually(
      () => status(p.paymentId),
      (s) => !s.hasDetectedPayment,
    );
    assert.equal(after.status, 'pending');
    await node.mine(3);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await status(p.paymentId)).status, 'pending', 'a withdrawn payment never confirms');
    const events = (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/events`, { token: key })).body.data;
    assert.deepEqual(
      events.map((e: any) => e.type),
      ['InvoiceCreated', 'AddressAssigned', 'PaymentDetected', 'PaymentApplied', 'PaymentReorged', 'PaymentWithdrawn'],
    );
  });
});
