// Refunds paid on the Tron test node, over the service's HTTP API, each
// payout read back from the node (its block and its result), its signed
// content checked against its id and decoded, and checked to the base unit:
// a USDT overpayment's excess from the deposit before a pending settlement
// pays exactly the re-priced rest; a settled USDT invoice refunded from the
// merchant's refund wallet once it is funded, the merchant's TRX there left
// untouched; a USDT deposit's settlement leaving a wrong-token TRX payment on
// it untouched; a TRX overpayment's excess from
// the deposit and a TRX refund from the refund wallet, the payer spending
// exactly the refund's amount; a TRX refund to an address with no account
// yet waits for it; with every byte burnt, a TRX refund from the deposit
// burns none of its settlement's rest.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { decodeParams, fromHex, txCheck } from 'tronweb/utils';
import { TRC20_TRANSFER_TOPIC, type TransactionInfoJson, type TransactionJson } from '../adapters/chains/tron/index.ts';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { refundFlow } from './support/refund-flow.ts';
import type { RunningService } from './support/service.ts';
import { baseUnits } from './support/evm-flow.ts';
import { randomTronKey, type TronKey, type TronTestNode } from './support/tron-node.ts';
import { startTronService, stopTronService, TEST_USDT } from './support/tron-flow.ts';

describe('refunds paid on the Tron test node', () => {
  let node: TronTestNode, svc: RunningService, payer: TronKey;
  let feeWallet: string, treasury: string;
  let flow: ReturnType<typeof refundFlow>;
  before(async () => {
    ({ node, svc, payer } = await startTronService());
    flow = refundFlow(svc, 'tron', mine);
    ({ feeWallet, treasury } = (await admin('GET', '/admin/v1/wallets')).body.data[0]);
    // The fee wallet tops payers up with a token refund's energy; the treasury exists, as a real one would.
    await node.sendTrx(payer, feeWallet, 500_000_000n);
    await node.sendTrx(payer, treasury, 1_000_000n);
    node.mine(1);
  });
  after(() => stopTronService(node, svc));

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const mine = () => node.mine(1);
  const settlementPriced = async (id: string, key: string) => {
    const d = await flow.settlementPriced(id, key);
    return { platformFee: BigInt(d.platformFee), networkFee: BigInt(d.networkFee), net: BigInt(d.netAmount) };
  };
  const refundWallet = async (key: string) =>
    ((await svc.call('GET', '/api/v1/refund-wallets', { token: key })).body.data as any[]).find(
      (w) => w.chain === 'tron',
    ) as { address: string; balances: Record<string, string | null> };

  const nodeCall = async <T>(path: string, body: object): Promise<T> =>
    (await (await fetch(node.url + path, { method: 'POST', body: JSON.stringify(body) })).json()) as T;

  /**
   * A transaction as the node has it: its block's copy, whose signed bytes
   * must hash to its id and match its JSON, and its result.
   */
  async function onChain(txid: string) {
    const info = await nodeCall<TransactionInfoJson>('/wallet/gettransactioninfobyid', { value: txid });
    assert.equal(info.id, txid, `${txid} is on the chain`);
    const block = await nodeCall<{ transactions: TransactionJson[] }>('/wallet/getblockbynum', {
      num: info.blockNumber,
    });
    const tx = block.transactions.find((t) => t.txID === txid)!;
    assert.equal(createHash('sha256').update(Buffer.from(tx.raw_data_hex, 'hex')).digest('hex'), txid);
    assert.ok(txCheck(tx as any), 'the JSON is what was signed');
    assert.equal(tx.raw_data.contract.length, 1);
    const contract = tx.raw_data.contract[0]!;
    return { tx, info, type: contract.type, value: contract.parameter.value as Record<string, string | number> };
  }

  /**
   * A USDT transfer() call, decoded from the chain: from `from` to `to` of
   * exactly `amount`, and the one Transfer it logged says the same.
   */
  async function assertUsdtPayout(txid: string, from: string, to: string, amount: bigint) {
    const { type, value, info } = await onChain(txid);
    assert.equal(type, 'TriggerSmartContract');
    assert.equal(fromHex(String(value.contract_address)), TEST_USDT, 'the call is to the token contract');
    assert.equal(info.receipt?.result, 'SUCCESS');
    const data = String(value.data);
    assert.equal(data.slice(0, 8), 'a9059cbb', 'transfer(address,uint256)');
    const [recipient, units] = decodeParams([], ['address', 'uint256'], '0x' + data.slice(8)) as unknown as [
      string,
      bigint,
    ];
    const logs = (info.log ?? []).map((l) => ({
      topic: l.topics![0],
      from: fromHex('41' + l.topics![1]!.slice(24)),
      to: fromHex('41' + l.topics![2]!.slice(24)),
      amount: BigInt('0x' + l.data),
    }));
    assert.deepEqual(
      { from: fromHex(String(value.owner_address)), to: fromHex(recipient), amount: BigInt(units), logs },
      { from, to, amount, logs: [{ topic: TRC20_TRANSFER_TOPIC, from, to, amount }] },
    );
  }

  /** The merchant's wallet (an account with 1 TRX) set, and the invoice's settlement paid and its fee sent. */
  async function settledToNewWallet(merchantId: string, key: string, invoiceId: string) {
    const wallet = randomTronKey().address;
    await node.sendTrx(payer, wallet, 1_000_000n);
    await flow.setWallet(merchantId, wallet);
    const settled = await eventuallyMining(
      mine,
      () => flow.settlementOf(invoiceId, key),
      (s) => s?.status === 'completed',
      90_000,
    );
    node.mine(1); // the settlement's platform fee, sent once its payout is final
    return { wallet, settled, priced: await settlementPriced(invoiceId, key) };
  }

  /** A TRX TransferContract, decoded from the chain, and the TRX it burnt. */
  async function trxPayout(txid: string) {
    const { type, value, info } = await onChain(txid);
    assert.equal(type, 'TransferContract');
    return {
      from: fromHex(String(value.owner_address)),
      to: fromHex(String(value.to_address)),
      amount: BigInt(value.amount!),
      fee: BigInt(info.fee ?? 0),
    };
  }

  /** What the fee wallet's TRX to `payer` and back cost it: the top-up's and the way back's charges, and the call's burn. */
  function feeWalletSpentOn(payer: string, payoutTx: string) {
    const out = node.trxTransfers({ from: feeWallet, to: payer });
    const back = node.trxTransfers({ from: payer, to: feeWallet });
    assert.equal(out.length, 1, 'one top-up');
    assert.equal(back.length, 1, 'one way back');
    return node.feeOf(out[0]!.txid) + node.feeOf(payoutTx) + node.feeOf(back[0]!.txid);
  }

  it("a USDT overpayment's excess is paid from the deposit; the settlement then pays exactly the re-priced rest", async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await flow.invoice(key, 'USDT', '20');
    const received = baseUnits(p.cryptoAmount, 6) + 5_000_000n;
    await node.sendToken(payer, TEST_USDT, p.address, received);
    await flow.confirmed(p.paymentId, key);
    assert.equal((await flow.settlementOf(p.paymentId, key))?.status, 'pending', 'no settlement wallet yet');

    const customer = randomTronKey().address; // holds nothing: its call uses the most energy
    const feeBefore = node.balance(feeWallet);
    const approved = await flow.refund(key, p.paymentId, { kind: 'excess', destination: customer });
    assert.equal(approved.fundedFrom, 'deposit');
    assert.equal(approved.networkFee, '0.000000', "the fee wallet's TRX pays a token refund's energy");
    const done = await flow.completed(approved.id, key);
    const net = baseUnits(done.netAmount, 6);
    assert.equal(net, 5_000_000n);
    await assertUsdtPayout(done.transactionHash, p.address, customer, net);
    assert.deepEqual(node.tokenTransfersTo(TEST_USDT, customer), [{ txid: done.transactionHash, amount: net }]);
    assert.equal(node.tokenBalance(TEST_USDT, p.address), received - net, 'the rest stays for the settlement');
    // The energy came from the fee wallet, and what it did not burn went back, mined before the refund completed.
    assert.ok(node.feeOf(done.transactionHash) > 0n, 'the call burnt TRX for its energy');
    assert.equal(node.balance(p.address), 0n, 'the deposit keeps none of the TRX');
    assert.equal(feeBefore - node.balance(feeWallet), feeWalletSpentOn(p.address, done.transactionHash));

    const merchantWallet = randomTronKey().address;
    assert.equal((await flow.setWallet(merchant.id, merchantWallet)).status, 200);
    const settled = await eventuallyMining(
      mine,
      () => flow.settlementOf(p.paymentId, key),
      (s) => s?.status === 'completed',
      90_000,
    );
    const priced = await settlementPriced(p.paymentId, key);
    assert.equal(priced.platformFee, received / 100n, 'the platform fee stays on all that was received');
    assert.equal(priced.net, received - net - priced.platformFee - priced.networkFee, 're-priced without the refund');
    assert.deepEqual(node.tokenTransfersTo(TEST_USDT, merchantWallet), [
      { txid: settled.transactionHash, amount: priced.net },
    ]);
    assert.equal(node.tokenBalance(TEST_USDT, p.address), 0n);
  });

  /** A settled 10-USD invoice paid in `token`; its merchant's wallet (for TRX an account with 1 TRX) set first. */
  async function settledInvoice(token: 'TRX' | 'USDT') {
    const { key, merchant } = await merchantWithKey(svc);
    const merchantWallet = randomTronKey().address;
    if (token === 'TRX') await node.sendTrx(payer, merchantWallet, 1_000_000n);
    await flow.setWallet(merchant.id, merchantWallet);
    const p = await flow.invoice(key, token === 'USDT' ? 'USDT' : undefined, '10');
    const units = baseUnits(p.cryptoAmount, 6);
    await (token === 'USDT'
      ? node.sendToken(payer, TEST_USDT, p.address, units)
      : node.sendTrx(payer, p.address, units));
    await eventuallyMining(
      mine,
      () => flow.invoiceOf(p.paymentId, key),
      (i) => i.status === 'settled',
      90_000,
    );
    return { key, p };
  }
  const settledUsdtInvoice = () => settledInvoice('USDT');
  const settledTrxInvoice = () => settledInvoice('TRX');

  // The merchant's TRX kept in the refund wallet for TRX refunds (more than the call's energy would burn) is
  // never spent on a USDT refund: the fee wallet pays its energy.
  for (const kept of [0n, 50_000_000n]) {
    it(`a settled USDT invoice is refunded from the refund wallet once it is funded (holding ${kept} sun of TRX)`, async () => {
      const { key, p } = await settledUsdtInvoice();

      const customer = randomTronKey().address;
      const approved = await flow.refund(key, p.paymentId, { amount: '4', destination: customer });
      assert.equal(approved.fundedFrom, 'refund_wallet');
      assert.equal(approved.status, 'awaiting_funds');
      const wallet = await refundWallet(key);
      assert.equal(wallet.balances.USDT, '0.000000');
      if (kept > 0n) await node.sendTrx(payer, wallet.address, kept);
      const feeBefore = node.balance(feeWallet);
      await node.sendToken(payer, TEST_USDT, wallet.address, 4_000_000n);
      node.mine(1);
      await eventually(
        () => refundWallet(key),
        (w) => w.balances.USDT === '4.000000',
      );

      const done = await flow.completed(approved.id, key);
      const net = baseUnits(done.netAmount, 6);
      assert.equal(net, 4_000_000n);
      await assertUsdtPayout(done.transactionHash, wallet.address, customer, net);
      assert.equal(node.tokenBalance(TEST_USDT, customer), net);
      assert.equal(node.tokenBalance(TEST_USDT, wallet.address), 0n);
      assert.equal(node.balance(wallet.address), kept, "the refund wallet keeps exactly the merchant's TRX");
      assert.equal(feeBefore - node.balance(feeWallet), feeWalletSpentOn(wallet.address, done.transactionHash));
    });
  }

  it('two USDT refunds at once from one refund wallet both complete, each its own transaction of its exact amount, each leftover back', async () => {
    const { key, p } = await settledUsdtInvoice();
    const refunds = [
      { customer: randomTronKey().address, units: 3_000_000n },
      { customer: randomTronKey().address, units: 4_000_000n },
    ];
    const approved = [];
    for (const { customer, units } of refunds) {
      const refund = await flow.refund(key, p.paymentId, { amount: String(units / 1_000_000n), destination: customer });
      assert.equal(refund.status, 'awaiting_funds');
      approved.push(refund);
    }
    const wallet = await refundWallet(key);
    const feeBefore = node.balance(feeWallet);
    // Funded once for both: the engine's next look finds both payable and pays them side by side.
    await node.sendToken(payer, TEST_USDT, wallet.address, 7_000_000n);
    node.mine(1);
    const done = await Promise.all(approved.map((r) => flow.completed(r.id, key)));
    assert.notEqual(done[0].transactionHash, done[1].transactionHash);
    for (const [i, { customer, units }] of refunds.entries()) {
      assert.equal(baseUnits(done[i].netAmount, 6), units);
      await assertUsdtPayout(done[i].transactionHash, wallet.address, customer, units);
      assert.equal(node.tokenBalance(TEST_USDT, customer), units);
    }
    assert.equal(node.tokenBalance(TEST_USDT, wallet.address), 0n);
    // Each sent back its own top-up's leftover, whichever was prepared while the other's was on the wallet.
    assert.equal(node.balance(wallet.address), 0n, 'no TRX of the fee wallet stays on the refund wallet');
    const out = node.trxTransfers({ from: feeWallet, to: wallet.address });
    const back = node.trxTransfers({ from: wallet.address, to: feeWallet });
    assert.deepEqual([out.length, back.length], [2, 2], 'a top-up and a way back each');
    const charges = [...out, ...back, ...done.map((d) => ({ txid: d.transactionHash as string }))].reduce(
      (sum, t) => sum + node.feeOf(t.txid),
      0n,
    );
    assert.equal(feeBefore - node.balance(feeWallet), charges, "the fee wallet's TRX all back but the chain's charges");
  });

  it('two equal TRX refunds to one customer from one refund wallet are two transactions: the customer is paid twice', async () => {
    const { key, p } = await settledTrxInvoice();
    const customer = randomTronKey().address;
    await node.sendTrx(payer, customer, 1_000_000n);
    node.mine(1);
    const customerBefore = node.balance(customer);
    // Alike in all: payer, customer, amount (the engine prepares both on one cached head).
    const approved = [];
    for (let i = 0; i < 2; i++)
      approved.push(await flow.refund(key, p.paymentId, { amount: '3', destination: customer }));
    const wallet = await refundWallet(key);
    await node.sendTrx(payer, wallet.address, 6_000_000n);
    node.mine(1);
    const done = await Promise.all(approved.map((r) => flow.completed(r.id, key)));
    node.mine(1);
    assert.notEqual(done[0].transactionHash, done[1].transactionHash);
    const net = done.reduce((sum, d) => sum + baseUnits(d.netAmount, 6), 0n);
    assert.equal(node.balance(customer) - customerBefore, net, 'the customer got both');
    for (const d of done) assert.equal((await trxPayout(d.transactionHash)).to, customer);
    // Built apart at once, not refused by the engine as a twin and built again later.
    const events = (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/events`, { token: key })).body.data as any[];
    assert.deepEqual(
      events.filter((e) => e.type === 'RefundFailed').map((e) => e.data.reason),
      [],
    );
  });

  it("a USDT deposit's settlement leaves a wrong-token TRX payment on it to the sun", async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const merchantWallet = randomTronKey().address;
    await flow.setWallet(merchant.id, merchantWallet);
    const p = await flow.invoice(key, 'USDT', '10');
    const wrong = 30_000_000n;
    await node.sendTrx(payer, p.address, wrong);
    node.mine(1);
    await node.sendToken(payer, TEST_USDT, p.address, baseUnits(p.cryptoAmount, 6));
    await eventuallyMining(
      mine,
      () => flow.settlementOf(p.paymentId, key),
      (s) => s?.status === 'completed',
      90_000,
    );
    assert.equal(node.tokenBalance(TEST_USDT, p.address), 0n);
    assert.equal(node.balance(p.address), wrong, "the customer's TRX is untouched");
  });

  it("a TRX overpayment's excess is refunded to the sun; the deposit spends exactly the refund's amount", async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await flow.invoice(key, undefined, '25');
    const excess = 10_000_000n;
    const received = baseUnits(p.cryptoAmount, 6) + excess;
    await node.sendTrx(payer, p.address, received);
    await flow.confirmed(p.paymentId, key);

    const customer = randomTronKey().address;
    await node.sendTrx(payer, customer, 1_000_000n); // an existing account (see the next test for one without)
    const customerBefore = node.balance(customer);
    const treasuryBefore = node.balance(treasury);
    const approved = await flow.refund(key, p.paymentId, { kind: 'excess', destination: customer });
    assert.equal(approved.fundedFrom, 'deposit');
    const done = await flow.completed(approved.id, key);
    node.mine(1); // what the fee left over, sent to the treasury once the payout was final
    const amount = baseUnits(done.amount, 6);
    const networkFee = baseUnits(done.networkFee, 6);
    const net = baseUnits(done.netAmount, 6);
    assert.equal(amount, excess);
    assert.ok(networkFee > 0n, "one transfer's bytes");
    assert.equal(net, amount - networkFee);
    const payout = await trxPayout(done.transactionHash);
    assert.deepEqual({ ...payout, fee: undefined }, { from: p.address, to: customer, amount: net, fee: undefined });
    assert.equal(node.balance(customer) - customerBefore, net);
    assert.equal(node.balance(p.address), received - amount, 'the deposit spent exactly the refund');
    // The chain charged the payout less than quoted (its bytes were free): the rest went to the treasury.
    const leftover = node.trxTransfers({ from: p.address, to: treasury });
    assert.equal(leftover.length, 1);
    const charged = payout.fee + node.feeOf(leftover[0]!.txid);
    assert.equal(node.balance(treasury) - treasuryBefore, networkFee - charged);

    const { wallet: merchantWallet, settled, priced } = await settledToNewWallet(merchant.id, key, p.paymentId);
    assert.equal(priced.platformFee, received / 100n);
    assert.equal(priced.net, received - amount - priced.platformFee - priced.networkFee);
    assert.deepEqual(await trxPayout(settled.transactionHash).then((t) => ({ ...t, fee: undefined })), {
      from: p.address,
      to: merchantWallet,
      amount: priced.net,
      fee: undefined,
    });
    assert.equal(node.balance(merchantWallet) - 1_000_000n, priced.net);
    assert.equal(node.balance(p.address), 0n);
  });

  it('a TRX refund from the refund wallet spends exactly its amount; to an address with no account it waits', async () => {
    const { key, p } = await settledTrxInvoice();

    const customer = randomTronKey().address; // no account yet: creating it costs 1.1 TRX, more than the fee
    const approved = await flow.refund(key, p.paymentId, { amount: '5', destination: customer });
    assert.equal(approved.fundedFrom, 'refund_wallet');
    const wallet = await refundWallet(key);
    await node.sendTrx(payer, wallet.address, 5_000_000n);
    node.mine(1);
    const failures = await eventuallyMining(
      mine,
      async () =>
        ((await svc.call('GET', `/api/v1/invoices/${p.paymentId}/events`, { token: key })).body.data as any[]).filter(
          (e) => e.type === 'RefundFailed',
        ),
      (f) => f.length > 0,
    );
    assert.match(failures[0].data.reason, /does not exist on Tron yet/);
    assert.equal(failures[0].data.code, 'rejected_by_network', 'tried again');
    assert.equal(node.balance(wallet.address), 5_000_000n, 'nothing was sent');

    await node.sendTrx(payer, customer, 1_000_000n); // the customer's account now exists: the next attempt pays
    const customerBefore = node.balance(customer);
    const done = await flow.completed(approved.id, key);
    node.mine(1);
    const net = baseUnits(done.netAmount, 6);
    const payout = await trxPayout(done.transactionHash);
    assert.deepEqual(
      { ...payout, fee: undefined },
      { from: wallet.address, to: customer, amount: net, fee: undefined },
    );
    assert.equal(node.balance(customer) - customerBefore, net);
    assert.equal(node.balance(wallet.address), 0n, 'the refund wallet spent exactly the refund');
  });
  // Last: the chain's public free-bandwidth pool stays spent for the rest of this node's life.
  it("with every byte burnt, a TRX refund from the deposit burns none of the settlement's rest", async () => {
    node.exhaustPublicBandwidth();
    const { key, merchant } = await merchantWithKey(svc);
    const p = await flow.invoice(key, undefined, '25');
    const received = baseUnits(p.cryptoAmount, 6) + 10_000_000n;
    await node.sendTrx(payer, p.address, received);
    await flow.confirmed(p.paymentId, key);
    const customer = randomTronKey().address;
    await node.sendTrx(payer, customer, 1_000_000n);
    const approved = await flow.refund(key, p.paymentId, { kind: 'excess', destination: customer });
    const done = await flow.completed(approved.id, key);
    node.mine(1);
    const amount = baseUnits(done.amount, 6);
    const networkFee = baseUnits(done.networkFee, 6);
    const payout = await trxPayout(done.transactionHash);
    assert.equal(payout.amount, amount - networkFee);
    assert.ok(payout.fee > 0n && payout.fee <= networkFee, `its bytes burnt (${payout.fee} sun), within the quote`);
    // What the quote left over (its largest size less this transfer's) cannot pay a transfer's bytes: it stays.
    const leftover = networkFee - payout.fee;
    assert.ok(leftover < 10_000n, `${leftover} sun: a few bytes`);
    assert.deepEqual(node.trxTransfers({ from: p.address, to: treasury }), []);
    assert.equal(node.balance(p.address), received - amount + leftover);

    const { wallet: merchantWallet, settled, priced } = await settledToNewWallet(merchant.id, key, p.paymentId);
    assert.equal(priced.net, received - amount - priced.platformFee - priced.networkFee);
    assert.deepEqual(node.trxTransfers({ from: p.address, to: merchantWallet }), [
      { txid: settled.transactionHash, amount: priced.net },
    ]);
    // The settlement's fee transfer paid its own bytes from the fees: the deposit keeps only the refund's few bytes.
    assert.equal(node.balance(p.address), leftover);
  });
});
