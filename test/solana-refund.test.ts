// Refunds paid on the Solana test node (the real runtime behind a JSON-RPC
// façade), over the service's HTTP API, each payout read back from the node
// (getTransaction), its instructions decoded and checked to the base unit:
// a SOL overpayment's excess and a USDT overpayment's excess (paid into two
// token accounts of the deposit) from the deposit before the pending
// settlement pays exactly the re-priced rest; a late SOL payment too small to
// stay on the deposit holding the settlement back until it is refunded from
// the deposit; settled USDC and SOL invoices
// refunded from the merchant's refund wallet once it is funded, and one
// waiting for funds again when another refund spent from that wallet first.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Keypair, Message, SystemInstruction, SystemProgram, Transaction } from '@solana/web3.js';
import {
  ASSOCIATED_TOKEN_PROGRAM_ID,
  TOKEN_PROGRAM_ID,
  TokenInstruction,
  decodeTransferCheckedInstruction,
} from '@solana/spl-token';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import type { RunningService } from './support/service.ts';
import { baseUnits } from './support/evm-flow.ts';
import type { SolanaTestNode } from './support/solana-node.ts';
import { startSolanaService, stopSolanaService } from './support/solana-flow.ts';
import { refundFlow } from './support/refund-flow.ts';

const COMPUTE_BUDGET = 'ComputeBudget111111111111111111111111111111';

/** A payout's moves, decoded from its instructions: SOL by System transfer, tokens by transferChecked. */
type Move =
  | { sol: bigint; from: string; to: string }
  | { token: string; amount: bigint; from: string; to: string; authority: string }
  | { createsAccount: string; owner: string; payer: string };

/** What the node answers a transaction whose payer it has never seen credited: refused for good. */
const NO_PRIOR_CREDIT = {
  code: -32002,
  message: 'Transaction simulation failed: Attempt to debit an account but found no record of a prior credit.',
};

describe('refunds paid on the Solana test node', () => {
  let node: SolanaTestNode;
  let svc: RunningService;
  let payer: Keypair;
  let feeWallet: string;
  let flow: ReturnType<typeof refundFlow>;
  before(async () => {
    ({ node, svc, payer } = await startSolanaService());
    flow = refundFlow(svc, 'solana', () => node.mine(1));
    const [solana] = (await flow.admin('GET', '/admin/v1/wallets')).body.data;
    feeWallet = solana.feeWallet;
    await node.sendSol(payer, feeWallet, 2_000_000_000n);
    await node.sendSol(payer, solana.treasury, 1_000_000n); // the treasury exists, as a real one would
    await node.mine();
  });
  after(() => stopSolanaService(node, svc));

  const newWallet = () => Keypair.generate().publicKey.toBase58();
  /** Lamports as a decimal string of SOL, as the API takes amounts. */
  const sol = (lamports: bigint) =>
    `${lamports / 1_000_000_000n}.${(lamports % 1_000_000_000n).toString().padStart(9, '0')}`;
  const tokenAccount = (owner: string, symbol: string) => node.tokenAccount(owner, symbol).toBase58();

  /** The node's rent-exempt minimum of an account with no data (the runtime's, as the adapter asks it). */
  async function rentExemptMinimum(): Promise<bigint> {
    const answer = await fetch(node.url, {
      method: 'POST',
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'getMinimumBalanceForRentExemption', params: [0] }),
    });
    return BigInt(((await answer.json()) as { result: number }).result);
  }

  /**
   * The refund's transaction as the node gives it (getTransaction, confirmed):
   * its fee payer, its fee, and its instructions decoded (compute budget left out).
   */
  async function payout(signature: string): Promise<{ feePayer: string; fee: bigint; moves: Move[] }> {
    const answer = (await (
      await fetch(node.url, {
        method: 'POST',
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'getTransaction',
          params: [signature, { commitment: 'confirmed', encoding: 'json' }],
        }),
      })
    ).json()) as {
      result: { meta: { err: unknown; fee: number }; transaction: { message: any; signatures: string[] } };
    };
    const { meta, transaction } = answer.result;
    assert.equal(meta.err, null);
    const tx = Transaction.populate(new Message(transaction.message), transaction.signatures);
    const moves: Move[] = [];
    for (const ix of tx.instructions) {
      const program = ix.programId.toBase58();
      if (program === COMPUTE_BUDGET) continue;
      if (ix.programId.equals(SystemProgram.programId)) {
        assert.equal(SystemInstruction.decodeInstructionType(ix), 'Transfer');
        const { fromPubkey, toPubkey, lamports } = SystemInstruction.decodeTransfer(ix);
        moves.push({ sol: lamports, from: fromPubkey.toBase58(), to: toPubkey.toBase58() });
      } else if (ix.programId.equals(TOKEN_PROGRAM_ID)) {
        assert.equal(ix.data[0], TokenInstruction.TransferChecked, 'a token payout moves by transferChecked only');
        const { keys, data } = decodeTransferCheckedInstruction(ix);
        const symbol = node.tokens.find((t) => t.mint === keys.mint.pubkey.toBase58())!.symbol;
        moves.push({
          token: symbol,
          amount: data.amount,
          from: keys.source.pubkey.toBase58(),
          to: keys.destination.pubkey.toBase58(),
          authority: keys.owner.pubkey.toBase58(),
        });
      } else {
        // CreateIdempotent (1): payer, the account, its owner, the mint, System, Token.
        assert.ok(ix.programId.equals(ASSOCIATED_TOKEN_PROGRAM_ID), `unexpected program ${program}`);
        assert.deepEqual([...ix.data], [1]);
        moves.push({
          createsAccount: ix.keys[1]!.pubkey.toBase58(),
          owner: ix.keys[2]!.pubkey.toBase58(),
          payer: ix.keys[0]!.pubkey.toBase58(),
        });
      }
    }
    return { feePayer: tx.feePayer!.toBase58(), fee: BigInt(meta.fee), moves };
  }

  /**
   * Once the merchant has a wallet, the settlement pays it exactly what the
   * refund left, less the platform fee on all that was received (refunds.md:
   * it is not given back) and the settlement's own network fee.
   */
  async function settlesTheRest(
    merchantId: string,
    key: string,
    invoiceId: string,
    { received, refunded, token }: { received: bigint; refunded: bigint; token: string },
  ) {
    const merchantWallet = newWallet();
    assert.equal((await flow.setWallet(merchantId, merchantWallet)).status, 200);
    await flow.settled(invoiceId, key);
    const { transactionHash } = await flow.settlementOf(invoiceId, key);
    const priced = await flow.settlementPriced(invoiceId, key);
    assert.equal(BigInt(priced.platformFee), received / 100n);
    const rest = received - refunded - BigInt(priced.platformFee) - BigInt(priced.networkFee);
    assert.equal(BigInt(priced.netAmount), rest);
    assert.deepEqual(node.paymentsTo(merchantWallet, token), [{ signature: transactionHash, amount: rest }]);
  }

  it("a SOL overpayment's excess is paid from the deposit; the settlement then pays exactly the re-priced rest", async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await flow.invoice(key, undefined, '25');
    const excess = 10_000_000n; // 0.01 SOL: above a new wallet's rent-exempt minimum
    const received = baseUnits(p.cryptoAmount, 9) + excess;
    await node.sendSol(payer, p.address, received);
    await node.mine();
    await flow.confirmed(p.paymentId, key);
    assert.equal((await flow.settlementOf(p.paymentId, key))?.status, 'pending', 'no settlement wallet yet');

    const customer = newWallet();
    // Read before the approval: the payout is sent from it on, and the node runs a transaction as it takes it.
    const feeBefore = await node.balance(feeWallet);
    const approved = await flow.refund(key, p.paymentId, { kind: 'excess', destination: customer });
    assert.equal(approved.fundedFrom, 'deposit');
    const done = await flow.completed(approved.id, key);
    const amount = baseUnits(done.amount, 9);
    const networkFee = baseUnits(done.networkFee, 9);
    const net = baseUnits(done.netAmount, 9);
    assert.equal(amount, excess);
    assert.equal(networkFee, 10_000n, 'two signatures at 5,000 lamports (no priority fee on an idle node)');
    assert.equal(net, amount - networkFee);

    const tx = await payout(done.transactionHash);
    assert.equal(tx.feePayer, feeWallet, 'the fee wallet pays the fee');
    assert.deepEqual(tx.moves, [
      { sol: net, from: p.address, to: customer },
      { sol: networkFee, from: p.address, to: feeWallet },
    ]);
    assert.equal(tx.fee, networkFee, 'the quoted fee is what the runtime charged');
    assert.equal(await node.balance(customer), net);
    assert.equal(await node.balance(p.address), received - amount, 'the rest stays for the settlement');
    assert.equal(await node.balance(feeWallet), feeBefore, 'the fee wallet paid the fee and got it back');

    await settlesTheRest(merchant.id, key, p.paymentId, { received, refunded: amount, token: 'SOL' });
    assert.equal(await node.balance(p.address), 0n, 'the settlement took the rest whole');
  });

  it("a refund whose payout fails is on the operator's attention list with its reason, until it completes", async () => {
    const { key } = await merchantWithKey(svc);
    const p = await flow.invoice(key, undefined, '25');
    await node.sendSol(payer, p.address, baseUnits(p.cryptoAmount, 9) + 10_000_000n);
    await node.mine();
    await flow.confirmed(p.paymentId, key);
    node.failNextSends.push(NO_PRIOR_CREDIT);
    const approved = await flow.refund(key, p.paymentId, { kind: 'excess', destination: newWallet() });
    const listed = async () => {
      await svc.service.projections.caughtUp();
      const items = (await flow.admin('GET', '/admin/v1/attention')).body.data as any[];
      return items.filter((i) => i.kind === 'refund_failed' && i.subject === approved.id);
    };
    const [item] = await eventually(listed, (items) => items.length === 1);
    assert.equal(item.reason, 'rejected_by_network');
    assert.equal(item.chain, 'solana');
    assert.match(item.detail, /found no record of a prior credit/);

    await flow.admin('POST', '/dev/v1/clock/advance', { seconds: 11 }); // its retry is due
    await flow.completed(approved.id, key);
    assert.deepEqual(await listed(), [], 'paid: off the list');
  });

  it('a SOL refund that would leave its deposit under the rent-exempt minimum is paid from the refund wallet; the settlement pays the whole deposit', async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await flow.invoice(key, undefined, '25');
    const received = baseUnits(p.cryptoAmount, 9);
    await node.sendSol(payer, p.address, received);
    await node.mine();
    await flow.confirmed(p.paymentId, key);

    // All but half the minimum: from the deposit, the runtime would refuse it at every retry (a rent-paying account).
    const amount = received - (await rentExemptMinimum()) / 2n;
    const customer = newWallet();
    const approved = await flow.refund(key, p.paymentId, { amount: sol(amount), destination: customer });
    assert.equal(approved.fundedFrom, 'refund_wallet', JSON.stringify(approved));
    assert.equal(approved.status, 'awaiting_funds');
    const wallet = (await flow.refundWallets(key)).find((w) => w.chain === 'solana')!;
    await node.sendSol(payer, wallet.address, amount);
    await node.mine();

    const done = await flow.completed(approved.id, key);
    const net = baseUnits(done.netAmount, 9);
    const networkFee = baseUnits(done.networkFee, 9);
    assert.equal(baseUnits(done.amount, 9), amount);
    const tx = await payout(done.transactionHash);
    assert.deepEqual(tx.moves, [
      { sol: net, from: wallet.address, to: customer },
      { sol: networkFee, from: wallet.address, to: feeWallet },
    ]);
    assert.equal(await node.balance(customer), net);
    assert.equal(await node.balance(wallet.address), 0n, 'the refund wallet paid exactly the amount');
    assert.equal(await node.balance(p.address), received, 'the deposit gave nothing to the refund');

    // Not held, not re-priced: the merchant gets all received less the platform fee and the sweep's fee.
    await settlesTheRest(merchant.id, key, p.paymentId, { received, refunded: 0n, token: 'SOL' });
    assert.equal(await node.balance(p.address), 0n, 'the settlement took the deposit whole');
  });

  /** A SOL invoice of 25 USD paid half, then expired unconfirmed: its key, its payment and what it received. */
  async function halfPaidExpired() {
    const { key } = await merchantWithKey(svc);
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '25', currency: 'USD', chain: 'solana', expiresInMinutes: 1 },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const p = created.body.data as { paymentId: string; address: string; cryptoAmount: string };
    const received = baseUnits(p.cryptoAmount, 9) / 2n;
    await node.sendSol(payer, p.address, received);
    await node.mine();
    await eventuallyMining(
      () => node.mine(1),
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/refundable`, { token: key })).body.data,
      (assets) => assets?.[0]?.token === 'SOL',
    );
    await flow.admin('POST', '/dev/v1/clock/advance', { seconds: 61 });
    await eventually(
      async () => (await flow.invoiceOf(p.paymentId, key)).status,
      (status) => status === 'expired',
    );
    return { key, p, received };
  }

  it('two SOL refunds of a never-settled deposit that together would leave it under the rent minimum are paid from the refund wallet', async () => {
    // No settlement will ever spend from the deposit.
    const { key, p, received } = await halfPaidExpired();

    // Each alone leaves the deposit above the minimum; both leave it under, which the runtime refuses.
    const first = received / 2n;
    const second = received - first - (await rentExemptMinimum()) / 2n;
    const create = async (lamports: bigint) => {
      const res = await svc.call('POST', `/api/v1/invoices/${p.paymentId}/refunds`, {
        token: key,
        body: { amount: sol(lamports), destination: newWallet() },
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      return res.body.data.id as string;
    };
    const ids = [await create(first), await create(second)];
    for (const id of ids) {
      const approved = await svc.call('POST', `/api/v1/refunds/${id}/approve`, { token: key });
      assert.equal(approved.status, 200, JSON.stringify(approved.body));
      assert.equal(approved.body.data.fundedFrom, 'refund_wallet', JSON.stringify(approved.body.data));
    }
    assert.equal(await node.balance(p.address), received, 'the deposit gave nothing');
  });

  it('a SOL refund taking its deposit whole, paid again before the refund goes out, is paid: the fee wallet tops the deposit up to the rent-exempt minimum', async () => {
    // Refunded in full from the deposit, which that leaves at 0.
    const { key, p, received } = await halfPaidExpired();
    // Its first transaction refused by the node (tried again in 10 s); meanwhile the customer pays again.
    node.failNextSends.push(NO_PRIOR_CREDIT);
    const customer = newWallet();
    const approved = await flow.refund(key, p.paymentId, { kind: 'full', destination: customer });
    assert.equal(approved.fundedFrom, 'deposit');
    await eventually(
      () => flow.refundOf(approved.id, key),
      (r) => r.status === 'failed',
    );
    const late = 500_000n;
    await node.sendSol(payer, p.address, late);
    await node.mine();
    const feeBefore = await node.balance(feeWallet);

    await flow.admin('POST', '/dev/v1/clock/advance', { seconds: 11 }); // its retry is due
    const done = await flow.completed(approved.id, key);
    assert.equal(baseUnits(done.amount, 9), received);
    const net = baseUnits(done.netAmount, 9);
    const networkFee = baseUnits(done.networkFee, 9);
    const rentExempt = await rentExemptMinimum();
    const tx = await payout(done.transactionHash);
    assert.deepEqual(tx.moves, [
      { sol: net, from: p.address, to: customer },
      { sol: networkFee, from: p.address, to: feeWallet },
      { sol: rentExempt - late, from: feeWallet, to: p.address },
    ]);
    assert.equal(await node.balance(customer), net, 'the customer gets exactly the refund');
    assert.equal(await node.balance(p.address), rentExempt, 'the late payment stays, with what makes it rent-exempt');
    assert.equal(feeBefore - (await node.balance(feeWallet)), rentExempt - late, "the top-up is the fee wallet's");
  });

  it('a late SOL payment too small to stay on the deposit holds the settlement back, never given away; refunded from the deposit, the settlement then pays its own amounts', async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '25', currency: 'USD', chain: 'solana', expiresInMinutes: 1 },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const p = created.body.data as { paymentId: string; address: string; cryptoAmount: string };
    const received = baseUnits(p.cryptoAmount, 9);
    await node.sendSol(payer, p.address, received);
    await node.mine();
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/status`)).body.data,
      (status) => status?.hasDetectedPayment === true,
    );
    // The deadline passes (the node's blocks stamped with the business clock): what comes now is late.
    const now = (await flow.admin('POST', '/dev/v1/clock/advance', { seconds: 61 })).body.data.now as string;
    node.clockAheadSeconds = Math.ceil((Date.parse(now) - Date.now()) / 1000);
    const late = 500_000n; // under the rent-exempt minimum: a sweep leaving it alone on the deposit is refused
    assert.ok(late < (await rentExemptMinimum()));
    await node.sendSol(payer, p.address, late);
    await node.mine();
    await flow.confirmed(p.paymentId, key);
    await eventuallyMining(
      () => node.mine(1),
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/refundable`, { token: key })).body.data,
      (assets) => assets?.[0]?.excess === sol(late),
    );
    await node.mine(40); // the late payment confirmed: beyond the settlement's payments
    const priced = await flow.settlementPriced(p.paymentId, key);

    const merchantWallet = newWallet();
    assert.equal((await flow.setWallet(merchant.id, merchantWallet)).status, 200);
    const failed = await eventually(
      () => flow.settlementOf(p.paymentId, key),
      (s) => s?.status === 'failed',
    );
    assert.equal(failed.failureReason, 'rejected_by_network', 'tried again: a refund of the late payment unblocks it');
    const attention = (await flow.admin('GET', '/admin/v1/attention')).body.data as any[];
    const listed = attention.find((a) => a.subject === failed.id);
    assert.equal(listed?.kind, 'settlement_failed', "on the operator's list");
    assert.match(listed.detail, /leaves it 500000: under the rent-exempt minimum .*late payment/);
    assert.equal(await node.balance(p.address), received + late, 'nothing given away');

    // To the customer's wallet, which holds SOL (a new one refuses less than the minimum too).
    const customer = newWallet();
    await node.sendSol(payer, customer, 1_000_000_000n);
    await node.mine();
    const approved = await flow.refund(key, p.paymentId, { kind: 'excess', destination: customer });
    assert.equal(approved.fundedFrom, 'deposit', 'nothing prepared: the deposit pays it');
    const done = await flow.completed(approved.id, key);
    assert.equal(baseUnits(done.amount, 9), late);
    assert.equal(await node.balance(customer), 1_000_000_000n + late - baseUnits(done.networkFee, 9));
    assert.equal(await node.balance(p.address), received);

    await flow.admin('POST', '/dev/v1/clock/advance', { seconds: 61 }); // the settlement's next attempt is due
    await flow.settled(p.paymentId, key);
    const { transactionHash } = await flow.settlementOf(p.paymentId, key);
    assert.deepEqual(await flow.settlementPriced(p.paymentId, key), priced, 'the refund took nothing of it');
    assert.deepEqual(node.paymentsTo(merchantWallet), [
      { signature: transactionHash, amount: BigInt(priced.netAmount) },
    ]);
    assert.equal(await node.balance(p.address), 0n);
  });

  it("a USDT overpayment's excess is paid from the deposit's two token accounts; the settlement then pays the rest", async () => {
    const { key, merchant } = await merchantWithKey(svc);
    const p = await flow.invoice(key, 'USDT', '20');
    const invoiced = baseUnits(p.cryptoAmount, 6);
    // 2 USDT into the deposit's associated account, the rest and 5 USDT over into one a wallet made for it.
    await node.sendToken(payer, p.address, 'USDT', 2_000_000n);
    const other = await node.sendTokenToNewAccount(payer, p.address, 'USDT', invoiced - 2_000_000n + 5_000_000n);
    await node.mine();
    const received = invoiced + 5_000_000n;
    await flow.confirmed(p.paymentId, key);

    const customer = newWallet();
    assert.equal(await node.exists(tokenAccount(customer, 'USDT')), false, 'the customer has no USDT account yet');
    const [feeBefore, depositSol] = [await node.balance(feeWallet), await node.balance(p.address)];
    const approved = await flow.refund(key, p.paymentId, { kind: 'excess', destination: customer });
    assert.equal(approved.fundedFrom, 'deposit');
    const done = await flow.completed(approved.id, key);
    assert.equal(done.networkFee, '0.000000', 'the fee wallet pays the fee and the rent in SOL');
    const net = baseUnits(done.netAmount, 6);
    assert.equal(net, 5_000_000n);

    const tx = await payout(done.transactionHash);
    const associated = tokenAccount(p.address, 'USDT');
    const customerAccount = tokenAccount(customer, 'USDT');
    assert.equal(tx.feePayer, feeWallet);
    assert.deepEqual(tx.moves, [
      { createsAccount: customerAccount, owner: customer, payer: feeWallet },
      { token: 'USDT', amount: 2_000_000n, from: associated, to: customerAccount, authority: p.address },
      { token: 'USDT', amount: 3_000_000n, from: other.account.toBase58(), to: customerAccount, authority: p.address },
    ]);
    assert.equal(await node.tokenBalance(customer, 'USDT'), net);
    const rent = await node.balance(customerAccount);
    assert.equal(
      feeBefore - (await node.balance(feeWallet)),
      tx.fee + rent,
      "the fee wallet paid the fee and the account's rent",
    );
    assert.equal(await node.balance(p.address), depositSol, 'the deposit address spent no SOL');
    assert.equal(await node.exists(other.account), true, 'no account of the deposit is closed');
    assert.equal(await node.tokenBalance(p.address, 'USDT'), 0n);
    assert.equal(await node.exists(associated), true);

    await settlesTheRest(merchant.id, key, p.paymentId, { received, refunded: net, token: 'USDT' });
    assert.equal(await node.exists(associated), false, "the settlement closed the deposit's accounts");
    assert.equal(await node.exists(other.account), false);
  });

  it('a settled USDC invoice is refunded from the refund wallet once it is funded', async () => {
    const { key, merchant } = await merchantWithKey(svc);
    await flow.setWallet(merchant.id, newWallet());
    const p = await flow.invoice(key, 'USDC', '10');
    await node.sendToken(payer, p.address, 'USDC', baseUnits(p.cryptoAmount, 6));
    await node.mine();
    await flow.settled(p.paymentId, key);

    // The customer has a USDC account already: the idempotent creation finds it, and no rent is paid.
    const customer = Keypair.generate();
    await node.mintTokens(customer.publicKey, 'USDC', 1n);
    await node.mine();
    const feeBefore = await node.balance(feeWallet);
    const approved = await flow.refund(key, p.paymentId, { amount: '4', destination: customer.publicKey.toBase58() });
    assert.equal(approved.fundedFrom, 'refund_wallet');
    assert.equal(approved.status, 'awaiting_funds');
    const wallet = (await flow.refundWallets(key)).find((w) => w.chain === 'solana')!;
    assert.equal(wallet.balances.USDC, '0.000000');
    await node.sendToken(payer, wallet.address, 'USDC', 4_500_000n);
    await node.mine();
    await eventually(
      () => flow.refundWallets(key),
      (ws) => ws.find((w) => w.chain === 'solana')?.balances.USDC === '4.500000',
    );

    const done = await flow.completed(approved.id, key);
    const net = baseUnits(done.netAmount, 6);
    assert.equal(net, 4_000_000n);
    const tx = await payout(done.transactionHash);
    const customerAccount = tokenAccount(customer.publicKey.toBase58(), 'USDC');
    assert.equal(tx.feePayer, feeWallet);
    assert.deepEqual(tx.moves, [
      { createsAccount: customerAccount, owner: customer.publicKey.toBase58(), payer: feeWallet },
      {
        token: 'USDC',
        amount: net,
        from: tokenAccount(wallet.address, 'USDC'),
        to: customerAccount,
        authority: wallet.address,
      },
    ]);
    assert.equal(await node.tokenBalance(customer.publicKey, 'USDC'), 1n + net);
    assert.equal(feeBefore - (await node.balance(feeWallet)), tx.fee, 'the fee wallet paid the fee only');
    assert.equal(await node.tokenBalance(wallet.address, 'USDC'), 500_000n, 'the rest stays in the refund wallet');
  });

  /** A settled 10 USD SOL invoice and its 0.01 SOL refund approved, waiting for the empty refund wallet. */
  async function settledSolRefund() {
    const { key, merchant } = await merchantWithKey(svc);
    await flow.setWallet(merchant.id, newWallet());
    const p = await flow.invoice(key, undefined, '10');
    await node.sendSol(payer, p.address, baseUnits(p.cryptoAmount, 9));
    await node.mine();
    await flow.settled(p.paymentId, key);

    const customer = newWallet();
    const approved = await flow.refund(key, p.paymentId, { amount: '0.01', destination: customer });
    assert.equal(approved.fundedFrom, 'refund_wallet');
    assert.equal(approved.status, 'awaiting_funds');
    const wallet = (await flow.refundWallets(key)).find((w) => w.chain === 'solana')!;
    return { key, customer, approved, wallet, invoiceId: p.paymentId };
  }

  it('a SOL refund that would leave its refund wallet under the rent-exempt minimum waits for funds, then completes', async () => {
    const { key, customer, approved, wallet } = await settledSolRefund();
    const amount = 10_000_000n;
    const half = (await rentExemptMinimum()) / 2n;
    // The amount and half the minimum: the runtime would refuse a payout that leaves the wallet rent-paying.
    await node.sendSol(payer, wallet.address, amount + half);
    await node.mine();
    // The engine looks at a waiting refund every 5 s: two looks find it still unable to pay, and nothing failed.
    const waitUntil = Date.now() + 11_000;
    while (Date.now() < waitUntil) {
      await node.mine();
      const refund = await flow.refundOf(approved.id, key);
      assert.equal(refund.status, 'awaiting_funds', JSON.stringify(refund));
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    await node.sendSol(payer, wallet.address, half + 1n);
    await node.mine();
    const done = await flow.completed(approved.id, key);
    assert.equal(baseUnits(done.amount, 9), amount);
    assert.equal(await node.balance(customer), baseUnits(done.netAmount, 9));
    assert.equal(await node.balance(wallet.address), 2n * half + 1n, 'left with the minimum');
  });

  it('a SOL refund whose refund wallet another refund spent from before it was prepared waits for funds again, then completes', async () => {
    const { key, approved: first, wallet, invoiceId } = await settledSolRefund();
    const second = await flow.refund(key, invoiceId, { amount: '0.01', destination: newWallet() });
    assert.equal(second.status, 'awaiting_funds');
    const amount = 10_000_000n;
    const half = (await rentExemptMinimum()) / 2n;
    // Both refunds and half the minimum: each refund alone leaves the wallet rent-exempt, both leave it
    // rent-paying. The first payout sent is refused by the node for good, so it is prepared again, after
    // its retry delay, once the other has landed: then it would leave the wallet under the minimum.
    node.failNextSends.push(NO_PRIOR_CREDIT);
    await node.sendSol(payer, wallet.address, 2n * amount + half);
    await node.mine();
    const [victim, other] = await eventually(
      async () => Promise.all([flow.refundOf(first.id, key), flow.refundOf(second.id, key)]),
      (refunds) => refunds.some((r) => r.status === 'failed') && refunds.some((r) => r.transactionHash !== null),
    ).then((refunds) => (refunds[0]!.status === 'failed' ? refunds : [refunds[1]!, refunds[0]!]));
    await flow.completed(other!.id, key);
    assert.equal(await node.balance(wallet.address), amount + half);

    // The wallet can no longer pay it: it waits for funds, as at its approval, rather than failing for good.
    await eventually(
      () => flow.refundOf(victim!.id, key),
      (r) => r.status === 'awaiting_funds',
    );
    await node.sendSol(payer, wallet.address, half + 1n);
    await node.mine();
    const done = await flow.completed(victim!.id, key);
    assert.equal(baseUnits(done.amount, 9), amount);
    assert.equal(await node.balance(wallet.address), 2n * half + 1n, 'left with the minimum');
  });

  it('a settled SOL invoice is refunded from the refund wallet once it is funded, the wallet keeping the rest', async () => {
    const { key, customer, approved, wallet } = await settledSolRefund();
    const funded = 12_000_000n;
    const feeBefore = await node.balance(feeWallet);
    await node.sendSol(payer, wallet.address, funded);
    await node.mine();

    const done = await flow.completed(approved.id, key);
    const amount = baseUnits(done.amount, 9);
    const networkFee = baseUnits(done.networkFee, 9);
    const net = baseUnits(done.netAmount, 9);
    assert.equal(amount, 10_000_000n);
    assert.equal(net, amount - networkFee);
    const tx = await payout(done.transactionHash);
    assert.equal(tx.feePayer, feeWallet);
    assert.deepEqual(tx.moves, [
      { sol: net, from: wallet.address, to: customer },
      { sol: networkFee, from: wallet.address, to: feeWallet },
    ]);
    assert.equal(tx.fee, networkFee);
    assert.equal(await node.balance(customer), net);
    assert.equal(await node.balance(wallet.address), funded - amount);
    assert.equal(await node.balance(feeWallet), feeBefore);
  });
});
