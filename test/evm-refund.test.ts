// Refunds paid on a local Hardhat node (Ethereum's adapter with a test chain
// id and test token contracts), over the service's HTTP API, each payout
// read back from the node and checked to the base unit: a USDT overpayment's
// excess from the deposit before a pending settlement pays the rest; a
// settled USDT invoice refunded from the merchant's refund wallet once it is
// funded; an ETH overpayment's excess from the deposit, the payer spending
// exactly the refund's network fee; a settled ETH invoice refunded from the
// refund wallet, funded with exactly the refund's amount and left empty.
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { AbiCoder, getAddress } from 'ethers';
import { TRANSFER_TOPIC } from '../adapters/chains/evm/index.ts';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import type { RunningService } from './support/service.ts';
import { baseUnits, randomWallet, tokenBalance, type EvmFixture } from './support/evm-flow.ts';
import { hardhatOrSkip, serviceOnNode } from './support/evm-service.ts';
import { refundFlow } from './support/refund-flow.ts';
import { formatUnits } from '../domain/money.ts';
import { loadState } from '../commands/handle.ts';
import { refundDecider, refundStreamName } from '../domain/refund.ts';

const { node, skip } = await hardhatOrSkip('EVM refund tests');

describe('refunds paid on a local EVM node', { skip }, () => {
  let fx: EvmFixture;
  let svc: RunningService;
  let flow: ReturnType<typeof refundFlow>;
  const mine = () => node.mine(1);
  serviceOnNode(node, (f, s) => {
    [fx, svc] = [f, s];
    flow = refundFlow(s, 'ethereum', mine);
  });
  before(async () => {
    // The fee wallet tops deposit addresses and refund wallets up with the gas of token payouts.
    const feeWallet = (await flow.admin('GET', '/admin/v1/wallets')).body.data[0].feeWallet as string;
    await (await node.payer.sendTransaction({ to: feeWallet, value: 10n ** 18n })).wait();
  });

  const payUsdt = async (to: string, units: bigint) => (await fx.usdt.getFunction('transfer')(to, units)).wait();

  /** The USDT Transfer logs of a transaction: from, to, amount. */
  async function usdtTransfers(txHash: string) {
    const receipt = (await node.provider.getTransactionReceipt(txHash))!;
    assert.equal(receipt.status, 1);
    assert.equal(receipt.to, await fx.usdt.getAddress(), 'a token payout calls the token contract');
    return receipt.logs
      .filter((l) => l.topics[0] === TRANSFER_TOPIC)
      .map((l) => ({
        from: getAddress('0x' + l.topics[1]!.slice(26)),
        to: getAddress('0x' + l.topics[2]!.slice(26)),
        amount: AbiCoder.defaultAbiCoder().decode(['uint256'], l.data)[0] as bigint,
      }));
  }

  /** A fresh settlement wallet for the merchant, the invoice's settlement completed to it, and its amounts. */
  async function settledTo(merchantId: string, paymentId: string, key: string) {
    const merchantWallet = randomWallet();
    assert.equal((await flow.setWallet(merchantId, merchantWallet)).status, 200);
    await eventuallyMining(
      mine,
      () => flow.settlementOf(paymentId, key),
      (s) => s?.status === 'completed',
      90_000,
    );
    return { merchantWallet, priced: await flow.settlementPriced(paymentId, key) };
  }

  /** An ETH invoice paid by `pay` (`assets` of them seen), then expired before it was ever confirmed. */
  async function expiredUnconfirmed(
    key: string,
    pay: (invoice: { address: string; cryptoAmount: string }) => Promise<unknown>,
    assets: number,
  ) {
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '15', currency: 'USD', chain: 'ethereum', expiresInMinutes: 1 },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const p = created.body.data as { paymentId: string; address: string; cryptoAmount: string };
    await pay(p);
    await eventuallyMining(
      mine,
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/refundable`, { token: key })).body.data,
      (seen) => seen?.length === assets,
    );
    await flow.admin('POST', '/dev/v1/clock/advance', { seconds: 61 });
    await eventually(
      async () => (await flow.invoiceOf(p.paymentId, key)).status,
      (status) => status === 'expired',
    );
    assert.equal(await flow.settlementOf(p.paymentId, key), undefined, 'never confirmed: no settlement');
    return p;
  }

  it("a USDT overpayment's excess, below a sweep's dust threshold, is paid from the deposit; the settlement then pays the rest", async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await flow.invoice(key, 'USDT', '20');
    // Half a token: a sweep that small is not made, a refund is.
    const received = baseUnits(p.cryptoAmount, 6) + 500_000n;
    await payUsdt(p.address, received);
    await flow.confirmed(p.paymentId, key);
    assert.equal((await flow.settlementOf(p.paymentId, key))?.status, 'pending', 'no settlement wallet yet');

    const customer = randomWallet();
    const approved = await flow.refund(key, p.paymentId, { kind: 'excess', destination: customer });
    assert.equal(approved.fundedFrom, 'deposit');
    const done = await flow.completed(approved.id, key);
    assert.equal(done.networkFee, '0.000000', "the fee wallet pays a token payout's gas");
    const net = baseUnits(done.netAmount, 6);
    assert.equal(net, 500_000n);
    assert.equal(await tokenBalance(fx.usdt, customer), net);
    assert.deepEqual(await usdtTransfers(done.transactionHash), [
      { from: getAddress(p.address), to: customer, amount: net },
    ]);
    assert.equal(await tokenBalance(fx.usdt, p.address), received - net, 'the rest stays for the settlement');

    const { merchantWallet, priced } = await settledTo(merchant.id, p.paymentId, key);
    // The platform fee (1%) stays on all that was received: it is not given back.
    const platformFee = received / 100n;
    assert.equal(BigInt(priced.platformFee), platformFee);
    assert.equal(await tokenBalance(fx.usdt, merchantWallet), received - net - platformFee);
    assert.equal(await tokenBalance(fx.usdt, p.address), 0n);
  });

  it('a USDT underpayment refunded from the deposit while the invoice is open; the whole quote then paid, the settlement pays received − refund − the platform fee', async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await flow.invoice(key, 'USDT', '20');
    const quoted = baseUnits(p.cryptoAmount, 6);
    const first = 5_000_000n;
    await payUsdt(p.address, first);
    await eventuallyMining(
      mine,
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/refundable`, { token: key })).body.data,
      (assets) => assets?.[0]?.refundable === '5.000000',
    );
    const customer = randomWallet();
    const approved = await flow.refund(key, p.paymentId, { amount: '5', destination: customer });
    assert.equal(approved.fundedFrom, 'deposit');
    assert.equal(await flow.settlementOf(p.paymentId, key), undefined, 'still open: no settlement yet');
    const done = await flow.completed(approved.id, key);
    assert.deepEqual(await usdtTransfers(done.transactionHash), [
      { from: getAddress(p.address), to: customer, amount: first },
    ]);
    assert.equal(await tokenBalance(fx.usdt, p.address), 0n);

    // The refunded 5 pays nothing towards the quote: paid whole, the invoice confirms, its settlement starting
    // from the refund paid before it.
    await payUsdt(p.address, quoted);
    await flow.confirmed(p.paymentId, key);
    const { merchantWallet } = await settledTo(merchant.id, p.paymentId, key);
    // Received: 5 + the quote; the platform fee (1%) on all of it, not given back.
    const platformFee = (first + quoted) / 100n;
    assert.equal(await tokenBalance(fx.usdt, merchantWallet), quoted - platformFee);
    assert.equal(await tokenBalance(fx.usdt, customer), first, 'the refund paid once');
    assert.equal(await tokenBalance(fx.usdt, p.address), 0n);
  });

  it('a settled USDT invoice is refunded from the refund wallet once it is funded', async () => {
    const { key, merchant } = await merchantWithKey(svc);
    await flow.setWallet(merchant.id, randomWallet());
    const p = await flow.invoice(key, 'USDT', '10');
    await payUsdt(p.address, baseUnits(p.cryptoAmount, 6));
    await flow.settled(p.paymentId, key);

    const customer = randomWallet();
    const approved = await flow.refund(key, p.paymentId, { amount: '4', destination: customer });
    assert.equal(approved.fundedFrom, 'refund_wallet');
    assert.equal(approved.status, 'awaiting_funds');
    const wallets = await flow.refundWallets(key);
    const wallet = wallets.find((w) => w.chain === 'ethereum')!;
    assert.equal(wallet.balances.USDT, '0.000000');
    await payUsdt(wallet.address, 4_000_000n);
    await eventually(
      () => flow.refundWallets(key),
      (ws) => ws.find((w) => w.chain === 'ethereum')?.balances.USDT === '4.000000',
    );

    const done = await flow.completed(approved.id, key);
    const net = baseUnits(done.netAmount, 6);
    assert.equal(net, 4_000_000n);
    assert.equal(await tokenBalance(fx.usdt, customer), net);
    assert.deepEqual(await usdtTransfers(done.transactionHash), [
      { from: getAddress(wallet.address), to: customer, amount: net },
    ]);
    assert.equal(await tokenBalance(fx.usdt, wallet.address), 0n);
  });

  it("an ETH overpayment's excess is refunded to the wei; the payer spends exactly the network fee", async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await flow.invoice(key, undefined, '25');
    const excess = 10n ** 16n;
    const received = baseUnits(p.cryptoAmount, 18) + excess;
    await (await node.payer.sendTransaction({ to: p.address, value: received })).wait();
    await flow.confirmed(p.paymentId, key);

    const customer = randomWallet();
    const approved = await flow.refund(key, p.paymentId, { kind: 'excess', destination: customer });
    assert.equal(approved.fundedFrom, 'deposit');
    const done = await flow.completed(approved.id, key);
    const amount = baseUnits(done.amount, 18);
    const networkFee = baseUnits(done.networkFee, 18);
    const net = baseUnits(done.netAmount, 18);
    assert.equal(amount, excess);
    assert.ok(networkFee > 0n);
    assert.equal(net, amount - networkFee);
    assert.equal(await node.provider.getBalance(customer), net);
    const tx = (await node.provider.getTransaction(done.transactionHash))!;
    assert.equal(tx.from, getAddress(p.address));
    assert.equal(tx.to, customer);
    assert.equal(tx.value, net);
    const receipt = (await node.provider.getTransactionReceipt(done.transactionHash))!;
    assert.equal(receipt.gasUsed * receipt.gasPrice, networkFee, 'one transfer, its gas exactly the fee');
    assert.equal(await node.provider.getBalance(p.address), received - amount);

    // The settlement pays out all the rest: the deposit address keeps nothing.
    const { merchantWallet, priced } = await settledTo(merchant.id, p.paymentId, key);
    assert.equal(BigInt(priced.platformFee), received / 100n);
    assert.equal(
      await node.provider.getBalance(merchantWallet),
      received - amount - BigInt(priced.platformFee) - BigInt(priced.networkFee),
    );
    assert.equal(await node.provider.getBalance(p.address), 0n);
  });

  it('a wrong-token USDT payment on an ETH invoice that expired unconfirmed is refunded from its deposit, no settlement needed; two refunds racing, each paid once', async () => {
    const { key } = await merchantWithKey(svc);
    const received = 7_654_321n;
    const p = await expiredUnconfirmed(key, ({ address }) => payUsdt(address, received), 1);

    // Two refunds approved at once, together all it received: both from the deposit, each once.
    const customer = randomWallet();
    const parts = [4_000_000n, received - 4_000_000n];
    const approved = await Promise.all(
      parts.map((units) =>
        flow.refund(key, p.paymentId, {
          chain: 'ethereum',
          token: 'USDT',
          amount: formatUnits(units, 6, 6),
          destination: customer,
        }),
      ),
    );
    for (const a of approved) assert.equal(a.fundedFrom, 'deposit');
    const done = await Promise.all(approved.map((a) => flow.completed(a.id, key)));
    for (const [i, d] of done.entries()) {
      assert.equal(baseUnits(d.netAmount, 6), parts[i]);
      assert.deepEqual(await usdtTransfers(d.transactionHash), [
        { from: getAddress(p.address), to: customer, amount: parts[i] },
      ]);
    }
    assert.equal(await tokenBalance(fx.usdt, customer), received);
    assert.equal(await tokenBalance(fx.usdt, p.address), 0n, "the customer's coins left the deposit the way they came");
  });

  it("a wrong-token USDT payment on an ETH invoice is refunded from the deposit, its gas all the fee wallet's; the settlement then pays the merchant and the treasury exactly", async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await flow.invoice(key, undefined, '25');
    const received = baseUnits(p.cryptoAmount, 18);
    await (await node.payer.sendTransaction({ to: p.address, value: received })).wait();
    const wrong = 3_210_000n;
    await payUsdt(p.address, wrong);
    await flow.confirmed(p.paymentId, key);
    await eventuallyMining(
      mine,
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/refundable`, { token: key })).body.data,
      (assets) => assets?.some((a: { token: string }) => a.token === 'USDT'),
    );

    const customer = randomWallet();
    const approved = await flow.refund(key, p.paymentId, {
      chain: 'ethereum',
      token: 'USDT',
      amount: formatUnits(wrong, 6, 6),
      destination: customer,
    });
    assert.equal(approved.fundedFrom, 'deposit');
    const done = await flow.completed(approved.id, key);
    assert.equal(baseUnits(done.netAmount, 6), wrong);
    assert.equal(await tokenBalance(fx.usdt, customer), wrong);
    assert.deepEqual(await usdtTransfers(done.transactionHash), [
      { from: getAddress(p.address), to: customer, amount: wrong },
    ]);
    assert.ok((await node.provider.getBalance(p.address)) >= received, "the settlement's ETH paid none of the gas");

    const treasury = (await flow.admin('GET', '/admin/v1/wallets')).body.data[0].treasury as string;
    const treasuryBefore = await node.provider.getBalance(treasury);
    const { merchantWallet, priced } = await settledTo(merchant.id, p.paymentId, key);
    assert.equal(BigInt(priced.platformFee), received / 100n);
    assert.equal(await node.provider.getBalance(merchantWallet), BigInt(priced.netAmount));
    assert.equal(
      BigInt(priced.netAmount),
      received - BigInt(priced.platformFee) - BigInt(priced.networkFee),
      'the merchant is paid all the ETH received less the fees',
    );
    assert.equal(
      (await node.provider.getBalance(treasury)) - treasuryBefore,
      BigInt(priced.platformFee),
      'the platform fee whole',
    );
  });

  it('an ETH invoice underpaid in ETH, also paid USDT by mistake, expired unconfirmed: both refunded from its deposit, exactly', async () => {
    const { key } = await merchantWithKey(svc);
    // Half the ETH the invoice asks for (it expires unconfirmed), and USDT by mistake.
    let eth = 0n;
    const usdt = 2_345_678n;
    const p = await expiredUnconfirmed(
      key,
      async ({ address, cryptoAmount }) => {
        eth = baseUnits(cryptoAmount, 18) / 2n;
        await (await node.payer.sendTransaction({ to: address, value: eth })).wait();
        await payUsdt(address, usdt);
      },
      2,
    );

    // Both approved at once: each from the deposit, whichever goes first.
    const customer = randomWallet();
    const [ethRefund, usdtRefund] = await Promise.all([
      flow.refund(key, p.paymentId, {
        chain: 'ethereum',
        token: 'ETH',
        amount: formatUnits(eth, 18, 18),
        destination: customer,
      }),
      flow.refund(key, p.paymentId, {
        chain: 'ethereum',
        token: 'USDT',
        amount: formatUnits(usdt, 6, 6),
        destination: customer,
      }),
    ]);
    assert.equal(ethRefund.fundedFrom, 'deposit');
    assert.equal(usdtRefund.fundedFrom, 'deposit');
    const [ethDone, usdtDone] = await Promise.all([ethRefund, usdtRefund].map((r) => flow.completed(r.id, key)));

    assert.equal(baseUnits(usdtDone.netAmount, 6), usdt);
    assert.equal(await tokenBalance(fx.usdt, customer), usdt);
    assert.deepEqual(await usdtTransfers(usdtDone.transactionHash), [
      { from: getAddress(p.address), to: customer, amount: usdt },
    ]);
    const net = baseUnits(ethDone.netAmount, 18);
    assert.equal(net, eth - baseUnits(ethDone.networkFee, 18));
    assert.equal(await node.provider.getBalance(customer), net);
    const tx = (await node.provider.getTransaction(ethDone.transactionHash))!;
    assert.equal(tx.from, getAddress(p.address));
    assert.equal(tx.value, net);
    assert.equal(await tokenBalance(fx.usdt, p.address), 0n);
  });

  /** A merchant with a settlement wallet and a 12 USD ETH invoice paid in full and settled. */
  async function settledEthInvoice() {
    const { key, merchant } = await merchantWithKey(svc);
    await flow.setWallet(merchant.id, randomWallet());
    const p = await flow.invoice(key, undefined, '12');
    await (await node.payer.sendTransaction({ to: p.address, value: baseUnits(p.cryptoAmount, 18) })).wait();
    await flow.settled(p.paymentId, key);
    return { key, p };
  }

  it('a settled ETH invoice is refunded from the refund wallet, funded with exactly the amount and left empty', async () => {
    const { key, p } = await settledEthInvoice();

    const customer = randomWallet();
    const approved = await flow.refund(key, p.paymentId, { amount: '0.001', destination: customer });
    assert.equal(approved.fundedFrom, 'refund_wallet');
    assert.equal(approved.status, 'awaiting_funds');
    const amount = baseUnits(approved.amount, 18);
    const wallet = (await flow.refundWallets(key)).find((w) => w.chain === 'ethereum')!;
    // One wei short waits; the last wei lets it go.
    await (await node.payer.sendTransaction({ to: wallet.address, value: amount - 1n })).wait();
    await mine();
    // Longer than the refund engine's look at a waiting wallet (5 s): it has seen the balance and still waits.
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    assert.equal((await flow.refundOf(approved.id, key)).status, 'awaiting_funds');
    await (await node.payer.sendTransaction({ to: wallet.address, value: 1n })).wait();

    const done = await flow.completed(approved.id, key);
    const net = baseUnits(done.netAmount, 18);
    const networkFee = baseUnits(done.networkFee, 18);
    assert.equal(net + networkFee, amount);
    assert.equal(await node.provider.getBalance(customer), net);
    const tx = (await node.provider.getTransaction(done.transactionHash))!;
    assert.equal(tx.from, getAddress(wallet.address));
    assert.equal(tx.to, customer);
    assert.equal(tx.value, net);
    const receipt = (await node.provider.getTransactionReceipt(done.transactionHash))!;
    assert.equal(receipt.gasUsed * receipt.gasPrice, networkFee, 'one transfer, its gas exactly the fee');
    assert.equal(await node.provider.getBalance(wallet.address), 0n, 'the refund wallet spent exactly what it held');
  });

  it('two equal refunds to one customer from the refund wallet, approved while blocks are slow: each paid once, in turn, none failed', async () => {
    const { key, p } = await settledEthInvoice();
    const wallet = (await flow.refundWallets(key)).find((w) => w.chain === 'ethereum')!;
    await (await node.payer.sendTransaction({ to: wallet.address, value: 10n ** 16n })).wait();

    // A block only when the test mines one: the first refund is still pending when the second is prepared.
    await node.rpc('evm_setAutomine', [false]);
    try {
      const customer = randomWallet();
      const body = { amount: '0.001', destination: customer };
      const refunds = [await flow.refund(key, p.paymentId, body), await flow.refund(key, p.paymentId, body)];
      // Longer than the payout engine takes to look at both (a look a pass, passes every second or sooner) before a block.
      await new Promise((resolve) => setTimeout(resolve, 4_000));
      const done = await Promise.all(refunds.map((r) => flow.completed(r.id, key)));

      assert.notEqual(done[0].transactionHash, done[1].transactionHash);
      const net = baseUnits(done[0].netAmount, 18);
      assert.equal(await node.provider.getBalance(customer), 2n * net, 'paid twice, once for each');
      for (const r of refunds) {
        const state = await loadState(svc.service.store, refundDecider, refundStreamName(r.id));
        assert.equal(state?.attempts, 1, 'the second waited for the first: no attempt failed');
      }
    } finally {
      await node.rpc('evm_setAutomine', [true]);
    }
  });
});
