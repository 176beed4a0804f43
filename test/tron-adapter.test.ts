// The Tron adapter against the test node, and the test node against what a
// real java-tron node refuses: signatures, tampering, duplicates, expired
// transactions, unknown reference blocks, balances, and the fee schedule.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { fromHex, signTransaction } from 'tronweb/utils';
import { parseTronBlock, type TransactionJson, type TronChain } from '../adapters/chains/tron/index.ts';
import {
  PayoutNotFinalError,
  PlatformFeeUncollectedError,
  TransactionRejectedError,
  type PreparedTransaction,
} from '../adapters/chains/port.ts';
import { randomTronKey, TRON_FEES, type TronKey, type TronTestNode } from './support/tron-node.ts';
import { openTestChain, serviceKeyring, startTronNode, TEST_USDT } from './support/tron-flow.ts';

describe('the Tron test node refuses what a real node refuses', () => {
  let node: TronTestNode;
  let payer: TronKey;
  before(async () => {
    node = await startTronNode();
    payer = randomTronKey();
    node.fund(payer.address, 100_000_000n);
  });
  after(() => node.stop());

  const broadcast = async (tx: unknown) => {
    const response = await fetch(node.url + '/wallet/broadcasttransaction', {
      method: 'POST',
      body: JSON.stringify(tx),
    });
    const answer = (await response.json()) as { result?: boolean; code?: string; txid: string; message?: string };
    return { ...answer, text: answer.message ? Buffer.from(answer.message, 'hex').toString() : undefined };
  };
  const header = (overrides: Partial<Record<string, unknown>> = {}) => ({
    ref_block_bytes: (node.solidified.number & 0xffff).toString(16).padStart(4, '0'),
    ref_block_hash: node.solidified.blockID.slice(16, 32),
    expiration: node.head.timestamp + 60_000,
    timestamp: node.head.timestamp,
    ...overrides,
  });
  const transfer = async (from: TronKey, to: string, sun: number, overrides = {}) =>
    (await node.builder.sendTrx(to, sun, from.address, {
      blockHeader: header(overrides) as any,
    })) as unknown as TransactionJson;
  const signed = (key: TronKey, tx: TransactionJson) =>
    signTransaction(key.privateKey, tx) as unknown as TransactionJson;

  it('takes a correctly signed transfer once, and answers a repeat as a duplicate', async () => {
    const tx = signed(payer, await transfer(payer, randomTronKey().address, 1_000_000));
    assert.deepEqual(await broadcast(tx), { result: true, txid: tx.txID, text: undefined });
    const again = await broadcast(tx);
    assert.equal(again.code, 'DUP_TRANSACTION_ERROR');
  });

  it('refuses a transaction signed by another key, or changed after signing', async () => {
    const stranger = randomTronKey();
    const forged = signed(stranger, await transfer(payer, stranger.address, 1_000_000));
    const refused = await broadcast(forged);
    assert.equal(refused.code, 'SIGERROR');
    assert.match(refused.text!, /is signed by T\w+ but it is not contained of permission/);

    const tampered = signed(payer, await transfer(payer, stranger.address, 1_000_000));
    (tampered.raw_data.contract[0]!.parameter.value as { amount: number }).amount = 90_000_000;
    assert.equal((await broadcast(tampered)).code, 'SIGERROR');
    assert.equal((await broadcast({ ...tampered, signature: [] })).code, 'SIGERROR');
  });

  it('refuses an expired transaction, one valid for more than a day, and one from another fork', async () => {
    const to = randomTronKey().address;
    const expired = await broadcast(signed(payer, await transfer(payer, to, 1, { expiration: node.head.timestamp })));
    assert.equal(expired.code, 'TRANSACTION_EXPIRATION_ERROR');
    const far = await broadcast(
      signed(payer, await transfer(payer, to, 1, { expiration: node.head.timestamp + 2 * 86_400_000 })),
    );
    assert.equal(far.code, 'TRANSACTION_EXPIRATION_ERROR');
    const tapos = await broadcast(signed(payer, await transfer(payer, to, 1, { ref_block_hash: 'ab'.repeat(8) })));
    assert.equal(tapos.code, 'TAPOS_ERROR');
  });

  it('refuses what the sender cannot pay, and a sender with no account', async () => {
    const poor = randomTronKey();
    node.fund(poor.address, 500_000n);
    const known = randomTronKey();
    node.fund(known.address, 1n);
    const over = await broadcast(signed(poor, await transfer(poor, known.address, 600_000)));
    assert.equal(over.code, 'CONTRACT_VALIDATE_ERROR');
    assert.match(over.text!, /balance is not sufficient/);
    // A new account costs 1 TRX on top of the amount.
    const creating = await broadcast(signed(poor, await transfer(poor, randomTronKey().address, 100_000)));
    assert.equal(creating.code, 'CONTRACT_VALIDATE_ERROR');
    const nobody = randomTronKey();
    const ghost = await broadcast(signed(nobody, await transfer(nobody, known.address, 1)));
    assert.equal(ghost.code, 'CONTRACT_VALIDATE_ERROR');
    assert.match(ghost.text!, /no OwnerAccount/);
  });

  it('charges the mainnet fee schedule: account creation, free bandwidth, then burnt bandwidth', async () => {
    const sender = randomTronKey();
    node.fund(sender.address, 50_000_000n);
    const fresh = randomTronKey().address;
    const create = await node.sendTrx(sender, fresh, 1_000_000n);
    node.mine(1);
    assert.equal(
      node.feeOf(create),
      BigInt(TRON_FEES.getCreateNewAccountFeeInSystemContract + TRON_FEES.getCreateAccountFee),
    );
    // Two transfers fit in the 600 free bytes of a day; the third burns its bytes at 1,000 sun each.
    const fees = [];
    for (let i = 0; i < 3; i++) {
      const txid = await node.sendTrx(sender, fresh, 1_000n + BigInt(i));
      node.mine(1);
      fees.push(node.feeOf(txid));
    }
    assert.deepEqual(fees.slice(0, 2), [0n, 0n]);
    assert.ok(fees[2]! > 250_000n && fees[2]! < 300_000n && fees[2]! % 1000n === 0n, `burnt ${fees[2]}`);
  });
});

describe('the Tron adapter', () => {
  let node: TronTestNode;
  let chain: TronChain;
  const keyring = serviceKeyring;
  before(async () => {
    node = await startTronNode();
    chain = await openTestChain(node);
    node.fund(chain.treasury, 1n);
  });
  after(async () => {
    chain.close();
    await node.stop();
  });

  const deposit = (index: number) => {
    const key = keyring.deriveDepositKey('tron', index);
    node.fund(key.address, 20_000_000n);
    return { address: key.address, derivationIndex: index };
  };

  /** A TRX payout of `amount` from deposit `index` to a new wallet (an account holding 1 sun), prepared. */
  const trxPayout = async (index: number, amount: bigint, fees: { platform: bigint; network: bigint }) => {
    const from = deposit(index);
    const to = randomTronKey().address;
    node.fund(to, 1n);
    const prepared = await chain.prepareTransfer({ from, to, token: 'TRX', amount, reference: `s${index}/1`, fees });
    return { from, to, prepared };
  };

  /** Sends a token payout as the engine does, a block every 50 ms meanwhile: it waits for its top-up to be mined. */
  const broadcastMining = async (payer: TronChain, prepared: PreparedTransaction) => {
    let sending = true;
    const sent = payer.broadcast(prepared).finally(() => (sending = false));
    while (sending) {
      node.mine(1);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await sent;
  };

  /** A USDT payout of all deposit `index` holds (`held`) less `fees`, prepared, the fee wallet funded for it. */
  const tokenPayout = async (
    payer: TronChain,
    index: number,
    held: bigint,
    fees: { platform: bigint; network: bigint },
    payout?: 'refund',
  ) => {
    const from = { address: keyring.deriveDepositKey('tron', index).address, derivationIndex: index };
    node.mintToken(TEST_USDT, from.address, held);
    node.fund(payer.feeWallet, 2_000_000_000n);
    const prepared = await payer.prepareTransfer({
      from,
      to: randomTronKey().address,
      token: 'USDT',
      amount: held - fees.platform - fees.network,
      reference: `${payout === 'refund' ? 'r' : 's'}${index}/1`,
      fees,
      ...(payout && { payout }),
    });
    return { from, prepared };
  };

  it('prepares the same transactions for the same reference, and a repeated broadcast is harmless', async () => {
    const from = deposit(1);
    const to = randomTronKey().address;
    node.fund(to, 1n);
    const transfer = {
      from,
      to,
      token: 'TRX',
      amount: 19_000_000n,
      reference: 's1/1',
      fees: { platform: 1_000_000n, network: 0n },
    };
    const prepared = await chain.prepareTransfer(transfer);
    assert.deepEqual(await chain.prepareTransfer(transfer), prepared);
    await chain.broadcast(prepared);
    await chain.broadcast(prepared);
    node.mine(1);
    await chain.broadcast(prepared);
    assert.equal(node.balance(to), 19_000_001n);
    assert.equal(node.balance(from.address), 1_000_000n, 'the fee waits for the payout to be final');
    node.mine(19);
    await chain.broadcast(prepared);
    await chain.broadcast(prepared);
    node.mine(1);
    assert.equal(node.balance(from.address), 0n);
  });

  it("a payment to the deposit after its payout's fee went stays there, however often the payout is told again", async () => {
    const { from, prepared } = await trxPayout(6, 19_000_000n, { platform: 1_000_000n, network: 0n });
    await chain.broadcast(prepared);
    node.mine(20);
    // The payout engine's look: final (the fee goes), then the payout told once more as it completes.
    assert.ok((await chain.transactionStatus(prepared.txHash))!.confirmations >= 19);
    node.mine(1);
    assert.equal(node.balance(from.address), 0n);
    node.fund(from.address, 5_000_000n); // the customer pays again, late
    await chain.broadcast(prepared);
    assert.ok((await chain.transactionStatus(prepared.txHash))!.confirmations >= 19);
    await chain.broadcast(prepared);
    node.mine(1);
    assert.equal(node.balance(from.address), 5_000_000n, 'the late payment is not taken as a second fee');
  });

  it('pays a merchant wallet that does not exist yet the exact amount; creating it comes out of the treasury share', async () => {
    const from = deposit(2);
    const to = randomTronKey().address;
    const treasuryBefore = node.balance(chain.treasury);
    const prepared = await chain.prepareTransfer({
      from,
      to,
      token: 'TRX',
      amount: 18_000_000n,
      reference: 's2/1',
      fees: { platform: 2_000_000n - chain.networkFee('TRX'), network: chain.networkFee('TRX') },
    });
    await chain.broadcast(prepared);
    node.mine(20);
    assert.equal((await chain.transactionStatus(prepared.txHash))?.confirmations, 20);
    node.mine(1);
    assert.equal(node.balance(to), 18_000_000n);
    assert.equal(node.balance(from.address), 0n);
    const creation = BigInt(TRON_FEES.getCreateNewAccountFeeInSystemContract + TRON_FEES.getCreateAccountFee);
    assert.equal(node.balance(chain.treasury) - treasuryBefore, 20_000_000n - 18_000_000n - creation);
  });

  it('two token payouts from one payer needing as much TRX, prepared on one head, never share a top-up', async () => {
    const from = deposit(5);
    node.mintToken(TEST_USDT, from.address, 10_000_000n);
    // Two refunds from one refund wallet: the second is told of the first's recorded bundle.
    const refund = (amount: bigint, reference: string, othersPrepared?: string[]) =>
      chain.prepareTransfer({
        from,
        to: randomTronKey().address,
        token: 'USDT',
        amount,
        reference,
        fees: { platform: 0n, network: 0n },
        payout: 'refund',
        ...(othersPrepared && { othersPrepared }),
      });
    const first = await refund(3_000_000n, 'r5/1');
    const second = await refund(4_000_000n, 'r5/2', [first.raw]);
    const [a, b] = [first, second].map(
      (p) => JSON.parse(p.raw).topUp as { need: string; transaction: { txID: string } },
    );
    assert.equal(a!.need, b!.need, 'as much TRX for each (both to an address holding none)');
    assert.notEqual(a!.transaction.txID, b!.transaction.txID, "the second's top-up is its own transaction");
  });

  it('two payouts alike (payer, customer, amount), prepared on one head, are two transactions, TRX and USDT', async () => {
    const trxFrom = deposit(11);
    const customer = randomTronKey().address;
    node.fund(customer, 1n);
    const tokenFrom = { address: keyring.deriveDepositKey('tron', 12).address, derivationIndex: 12 };
    node.mintToken(TEST_USDT, tokenFrom.address, 10_000_000n);
    node.fund(chain.feeWallet, 2_000_000_000n);
    // Two refunds from one refund wallet: each is told of the others' recorded bundles.
    for (const [from, token, amount] of [
      [trxFrom, 'TRX', 5_000_000n],
      [tokenFrom, 'USDT', 3_000_000n],
    ] as const) {
      const refund = (reference: string, othersPrepared?: string[]) =>
        chain.prepareTransfer({
          from,
          to: customer,
          token,
          amount,
          reference,
          fees: { platform: 0n, network: token === 'TRX' ? 300_000n : 0n },
          payout: 'refund',
          ...(othersPrepared && { othersPrepared }),
        });
      const first = await refund(`${token}/A/1`);
      const second = await refund(`${token}/B/1`, [first.raw]);
      const third = await refund(`${token}/C/1`, [first.raw, second.raw]);
      assert.equal(new Set([first.txHash, second.txHash, third.txHash]).size, 3, `${token}: three transactions`);
      const expirations = [first, second, third].map(
        (p) => (JSON.parse(p.raw) as { payout: TransactionJson }).payout.raw_data.expiration,
      );
      assert.equal(new Set(expirations).size, 1, `${token}: built on one head`);
    }
  });

  it('two token payouts from one payer that burnt alike each send their own leftover back, though the two are equal', async () => {
    const key = keyring.deriveDepositKey('tron', 9);
    const from = { address: key.address, derivationIndex: 9 };
    node.mintToken(TEST_USDT, from.address, 10_000_000n);
    node.fund(chain.feeWallet, 100_000_000n);
    // Its free daily bandwidth spent, as a busy refund wallet's is: both payouts' bytes are burnt alike.
    node.fund(from.address, 3_000_000n);
    const signer = { address: key.address, privateKey: Buffer.from(key.privateKey).toString('hex') };
    for (let i = 0; i < 3; i++) await node.sendTrx(signer, chain.treasury, 1n);
    node.mine(1);
    const own = node.balance(from.address);
    const refund = (reference: string, othersPrepared?: string[]) =>
      chain.prepareTransfer({
        from,
        to: randomTronKey().address,
        token: 'USDT',
        amount: 3_000_000n,
        reference,
        fees: { platform: 0n, network: 0n },
        payout: 'refund',
        ...(othersPrepared && { othersPrepared }),
      });
    const first = await refund('r9/1');
    const second = await refund('r9/2', [first.raw]);
    // Each payout waits for its top-up to be mined before it goes.
    let sending = true;
    const sent = Promise.all([chain.broadcast(first), chain.broadcast(second)]).finally(() => (sending = false));
    while (sending) {
      node.mine(1);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await sent;
    node.mine(20);
    // Final on one block: each sends back what its top-up did not burn, the same amount built on the same header.
    for (const payout of [first, second]) assert.ok((await chain.transactionStatus(payout.txHash))!.confirmations < 19);
    node.mine(1);
    for (const payout of [first, second])
      assert.ok((await chain.transactionStatus(payout.txHash))!.confirmations >= 19);
    const back = node.trxTransfers({ from: from.address, to: chain.feeWallet });
    assert.equal(back.length, 2, 'two ways back');
    assert.equal(node.balance(from.address), own, "nothing of the fee wallet's left on the payer");
  });

  it("a leftover's way back lost before it was mined (a fork) is sent again once it can never be mined", async () => {
    const { from, prepared } = await tokenPayout(chain, 10, 5_000_000n, { platform: 0n, network: 0n }, 'refund');
    await broadcastMining(chain, prepared);
    node.mine(20);
    const final = async () => (await chain.transactionStatus(prepared.txHash))!.confirmations >= 19;
    assert.equal(await final(), false, 'its leftover goes back first');
    node.mine(1);
    node.fork(1); // the block with the way back is replaced by one without it
    node.mine(1);
    assert.equal(await final(), false, 'the way back is not on the chain');
    assert.equal(node.trxTransfers({ from: from.address, to: chain.feeWallet }).length, 0);
    // Past its expiration on the solidified chain it can never be mined: the leftover is worked out again.
    node.advance(16 * 60_000); // past its expiration, and the 5 minutes a lagging backend may be behind
    node.mine(20);
    assert.equal(await final(), false);
    assert.equal(await final(), false, 'sent again');
    node.mine(1);
    assert.equal(await final(), true);
    assert.equal(node.trxTransfers({ from: from.address, to: chain.feeWallet }).length, 1);
    assert.equal(node.balance(from.address), 0n, "nothing of the fee wallet's left on the payer");
  });

  describe("a USDT settlement's platform fee call mined out of energy", () => {
    // The chain's energy price raised (by proposal) after the adapter read it, which it does every 10 minutes:
    // the fee call's fee_limit and the TRX its top-up left fall short. java-tron mines the call all the same,
    // failed (receipt and contractRet OUT_OF_ENERGY, the TRX it could use burnt, no token moved), as the test
    // node does (VMActuator, ReceiptCapsule.payEnergyBill).
    const settle = async (payer: TronChain, index: number) => {
      const fees = { platform: 500_000n, network: 1_000_000n };
      const { from, prepared } = await tokenPayout(payer, index, 10_000_000n, fees);
      await broadcastMining(payer, prepared);
      node.mine(20);
      return { from: from.address, prepared };
    };
    /** The payout engine's looks, a block between each, until the payout is final: then told once more. */
    const untilFinal = async (payer: TronChain, prepared: PreparedTransaction, between = () => {}) => {
      for (let look = 0; look < 40; look++) {
        if ((await payer.transactionStatus(prepared.txHash))!.confirmations >= 19) return payer.broadcast(prepared);
        between();
        node.mine(1);
      }
      assert.fail('not final after 40 looks');
    };
    const topUps = (payer: TronChain, from: string) => node.trxTransfers({ from: payer.feeWallet, to: from });
    /** What the fee wallet's TRX paid on the chain for this payout: every charge of its transactions. */
    const charges = (payer: TronChain, from: string) =>
      [...topUps(payer, from), ...node.calls(from), ...node.trxTransfers({ from, to: payer.feeWallet })].reduce(
        (sum, tx) => sum + node.feeOf(tx.txid),
        0n,
      );
    const treasuryUsdt = (payer: TronChain) => node.tokenBalance(TEST_USDT, payer.treasury);

    it('is sent again with the TRX it lacks at the prices read anew: the treasury gets the fee once, the fee wallet its TRX back', async () => {
      const payer = await openTestChain(node);
      try {
        const { from, prepared } = await settle(payer, 20);
        const [treasury, feeWallet] = [treasuryUsdt(payer), node.balance(payer.feeWallet)];
        node.fees.getEnergyFee = 200;
        await untilFinal(payer, prepared);
        assert.deepEqual(
          node.calls(from).map((c) => c.result),
          ['SUCCESS', 'OUT_OF_ENERGY', 'SUCCESS'],
        );
        assert.equal(treasuryUsdt(payer) - treasury, 1_500_000n, 'the platform and network fees, once');
        assert.equal(node.tokenBalance(TEST_USDT, from), 0n);
        assert.equal(topUps(payer, from).length, 2, "the payout's top-up, and one for the call sent again");
        assert.equal(node.balance(from), 0n, "nothing of the fee wallet's left on the deposit");
        // Read after the payout's top-up went: its amount and its charge (creating the deposit's account) added back.
        const [topUp] = topUps(payer, from);
        const spent = feeWallet + topUp!.amount + node.feeOf(topUp!.txid) - node.balance(payer.feeWallet);
        assert.equal(spent, charges(payer, from), "the fee wallet lost the chain's charges, to the sun");
      } finally {
        node.fees.getEnergyFee = TRON_FEES.getEnergyFee;
        payer.close();
      }
    });

    for (const [index, killed, atCalls, atTopUps] of [
      [21, 'after it failed', 2, 1],
      [22, 'after the TRX it lacked was sent', 2, 2],
      [23, 'after it was sent again', 3, 2],
    ] as const) {
      it(`a restart ${killed} sends the fee once, with one top-up for it at most`, async () => {
        const first = await openTestChain(node);
        const { from, prepared } = await settle(first, index);
        const treasury = treasuryUsdt(first);
        node.fees.getEnergyFee = 200;
        try {
          for (let look = 0; node.calls(from).length < atCalls || topUps(first, from).length < atTopUps; look++) {
            assert.ok(look < 20, 'the first process never got there');
            await first.transactionStatus(prepared.txHash);
            node.mine(1);
          }
          first.close(); // killed: what it remembered is gone
          const second = await openTestChain(node);
          try {
            // After the restart the engine finds the payout final and tells it once more: the fee is still to go.
            await untilFinal(second, prepared).catch(async (error) => {
              if (!(error instanceof PayoutNotFinalError)) throw error;
              await untilFinal(second, prepared);
            });
            assert.deepEqual(
              node.calls(from).map((c) => c.result),
              ['SUCCESS', 'OUT_OF_ENERGY', 'SUCCESS'],
            );
            assert.equal(treasuryUsdt(second) - treasury, 1_500_000n, 'the fees, once');
            assert.equal(topUps(second, from).length, 2, 'one top-up for the call sent again');
            // Not known after a restart: what the top-up for the call sent again gave, which may stay there.
            assert.ok(node.balance(from) <= topUps(second, from)[1]!.amount);
          } finally {
            second.close();
          }
        } finally {
          node.fees.getEnergyFee = TRON_FEES.getEnergyFee;
        }
      });
    }

    it('failing each time it is sent again, is given up visibly: the payout completes, the fee stays on the deposit', async () => {
      const payer = await openTestChain(node);
      try {
        const { from, prepared } = await settle(payer, 24);
        const treasury = treasuryUsdt(payer);
        // The price rises at every block: each call is built at a price already old when it runs.
        const rise = () => void (node.fees.getEnergyFee += 100);
        rise();
        await assert.rejects(
          untilFinal(payer, prepared, rise),
          (error: Error) =>
            error instanceof PlatformFeeUncollectedError &&
            /OUT_OF_ENERGY/.test(error.message) &&
            error.message.includes(from) &&
            error.message.includes('1500000'),
        );
        assert.deepEqual(
          node.calls(from).map((c) => c.result),
          ['SUCCESS', 'OUT_OF_ENERGY', 'OUT_OF_ENERGY', 'OUT_OF_ENERGY'],
          'sent again twice, then given up',
        );
        assert.equal(treasuryUsdt(payer), treasury);
        assert.equal(node.tokenBalance(TEST_USDT, from), 1_500_000n);
        // Each failed call burnt all its fee_limit let it; what is left is less than a way back's own bytes.
        assert.ok(node.balance(from) < 300_000n, `${node.balance(from)} sun left on the deposit`);
        // Told again (the engine's next look, should it not have recorded it yet): said again, nothing sent.
        await assert.rejects(payer.broadcast(prepared), PlatformFeeUncollectedError);
        assert.equal(node.calls(from).length, 4);
      } finally {
        node.fees.getEnergyFee = TRON_FEES.getEnergyFee;
        payer.close();
      }
    });
  });

  it('refuses a payout larger than the deposit holds', async () => {
    const from = deposit(3);
    await assert.rejects(
      chain.prepareTransfer({
        from,
        to: randomTronKey().address,
        token: 'TRX',
        amount: 25_000_000n,
        reference: 's3/1',
      }),
      TransactionRejectedError,
    );
  });

  it('an expired payout that was never mined is refused only once the solidified chain is past it; the next attempt pays once', async () => {
    const from = deposit(4);
    const to = randomTronKey().address;
    node.fund(to, 1n);
    const transfer = { from, to, token: 'TRX', amount: 15_000_000n, fees: { platform: 0n, network: 0n } };
    const first = await chain.prepareTransfer({ ...transfer, reference: 's4/1' });
    // Sixteen minutes pass before it is ever sent (the service was down): its ten, and the five a lagging backend
    // may be behind.
    node.advance(16 * 60_000);
    node.mine(1);
    await assert.rejects(chain.broadcast(first), (e: Error) => !(e instanceof TransactionRejectedError));
    node.mine(20); // the solidified block is past the expiration too
    await assert.rejects(chain.broadcast(first), TransactionRejectedError);
    assert.equal(await chain.transactionStatus(first.txHash), undefined);

    const second = await chain.prepareTransfer({ ...transfer, reference: 's4/2' });
    assert.notEqual(second.txHash, first.txHash);
    await chain.broadcast(second);
    node.mine(1);
    assert.equal(node.balance(to), 15_000_001n);
    assert.equal((await chain.transactionStatus(second.txHash))?.blockNumber, node.head.number);
    // The first can never be taken now.
    const stale = (JSON.parse(first.raw) as { payout: TransactionJson }).payout;
    assert.equal(node.balance(to), 15_000_001n);
    assert.throws(() => node.accept(stale), /expiration/i);
  });

  it('never declares a payout mined just before its expiration refused through a lagging backend', async () => {
    const { to, prepared } = await trxPayout(13, 15_000_000n, { platform: 0n, network: 0n });
    const { expiration } = (JSON.parse(prepared.raw) as { payout: TransactionJson }).payout.raw_data;
    // Mined in the last seconds before its expiration.
    node.advance(600_000 - 10_000);
    node.mine(1);
    await chain.broadcast(prepared);
    node.mine(1);
    const minedAt = node.head.number;
    assert.ok(node.head.timestamp < expiration);
    const lagged = async () => {
      // The heads read (the solidified block past the expiration); then every read reaches a backend 25 blocks
      // behind, which has neither the block with the payout nor its solidified view.
      await chain.transactionStatus(prepared.txHash);
      Object.assign(node, { lagging: true, lagBlocks: 25, lagEvery: 1 });
      try {
        await chain.broadcast(prepared);
      } catch (error) {
        assert.ok(!(error instanceof TransactionRejectedError), (error as Error).message);
      } finally {
        Object.assign(node, { lagging: false, lagBlocks: 3, lagEvery: 4 });
      }
    };
    // Resent each block from the one whose solidified block is past the expiration, until a backend 25 blocks
    // behind has solidified it.
    node.advance(20_000);
    node.mine(20);
    assert.ok(node.solidified.timestamp > expiration);
    while (node.solidified.number - 25 < minedAt) {
      await lagged();
      node.mine(1);
    }
    assert.equal(node.balance(to), 15_000_001n, 'paid once');
    assert.equal((await chain.transactionStatus(prepared.txHash))?.blockNumber, minedAt);
  });

  it('reads a block whose token call has no result yet again rather than half', () => {
    const block = {
      blockID: '00'.repeat(32),
      block_header: { raw_data: { number: 7, parentHash: '00'.repeat(32), timestamp: 0 } },
      transactions: [
        {
          txID: 'aa'.repeat(32),
          ret: [{ contractRet: 'SUCCESS' }],
          raw_data: {
            contract: [
              {
                type: 'TriggerSmartContract',
                parameter: {
                  value: {
                    owner_address: '41' + '11'.repeat(20),
                    contract_address: '41' + 'ee'.repeat(20),
                    data: 'a9059cbb' + '00'.repeat(64),
                  },
                },
              },
            ],
            expiration: 0,
          },
          raw_data_hex: '',
        },
      ],
    };
    const tokens = [{ symbol: 'USDT', contract: fromHex('41' + 'ee'.repeat(20)), decimals: 6 }];
    assert.throws(() => parseTronBlock(block, [], tokens), /no result of token transfer/);
    assert.throws(() => parseTronBlock(block, [{ id: 'bb'.repeat(32) }], tokens), /not in this block/);
  });
});
