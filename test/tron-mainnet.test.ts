// Issue 26, Tron ready for mainnet: the adapter against the test node's
// mainnet conditions. The payout goes before the platform fee and the fee
// only once the payout is final; only a bad signature or an oversized
// transaction is a final refusal; the solidity API on its own port; a node
// that asks for fewer requests is left alone; a block is read whole (every
// transaction's result, TRX sent on by contracts) or read again.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { signTransaction } from 'tronweb/utils';
import { parseTronBlock, trxInToken, type TransactionJson, type TronChain } from '../adapters/chains/tron/index.ts';
import { TransactionRejectedError, type PreparedTransaction } from '../adapters/chains/port.ts';
import { randomTronKey, type TronTestNode } from './support/tron-node.ts';
import { openTestChain, serviceKeyring, startTronNode, TEST_ROUTER, TEST_USDT } from './support/tron-flow.ts';

const keyring = serviceKeyring;
const open = openTestChain;

describe('Tron on mainnet terms', () => {
  let node: TronTestNode;
  let chain: TronChain;
  before(async () => {
    node = await startTronNode();
    chain = await open(node);
    node.fund(chain.treasury, 1n);
  });
  after(async () => {
    chain.close();
    await node.stop();
  });

  /** A deposit address holding exactly a settlement's gross amount. */
  const deposit = (index: number, gross: bigint) => {
    const key = keyring.deriveDepositKey('tron', index);
    node.fund(key.address, gross);
    return { address: key.address, derivationIndex: index };
  };
  const merchantWallet = () => {
    const wallet = randomTronKey().address;
    node.fund(wallet, 1n);
    return wallet;
  };

  /** Broadcasts a token payout while blocks come: its top-up must be mined before the payout goes. */
  async function broadcastWhileMining(chain: TronChain, prepared: PreparedTransaction) {
    let sending = true;
    const mining = (async () => {
      while (sending) {
        node.mine(1);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    await chain.broadcast(prepared).finally(() => (sending = false));
    await mining;
  }

  it('1: sends the payout first and the platform fee only once the payout is final, with the public bandwidth pool spent', async () => {
    node.exhaustPublicBandwidth(); // every byte is burnt from now on
    const network = chain.networkFee('TRX');
    const gross = 30_000_000n;
    const platform = gross / 100n;
    const net = gross - platform - network;
    const from = deposit(101, gross);
    const to = merchantWallet();
    const treasuryBefore = node.balance(chain.treasury);
    const prepared = await chain.prepareTransfer({
      from,
      to,
      token: 'TRX',
      amount: net,
      reference: 'm1/1',
      fees: { platform, network },
    });
    await chain.broadcast(prepared);
    node.mine(1);
    assert.equal(node.balance(to), 1n + net, 'the merchant has exactly the net amount');
    assert.equal(node.balance(chain.treasury), treasuryBefore, 'no fee before the payout is final');
    assert.equal(node.trxTransfers({ from: from.address }).length, 1);

    node.mine(18);
    assert.equal((await chain.transactionStatus(prepared.txHash))?.confirmations, 18, 'not final, and no fee yet');
    assert.equal(node.balance(chain.treasury), treasuryBefore);
    node.mine(1);
    assert.equal((await chain.transactionStatus(prepared.txHash))?.confirmations, 20);
    node.mine(1);
    const burnt = node.trxTransfers({ from: from.address }).reduce((sum, t) => sum + node.feeOf(t.txid), 0n);
    assert.equal(node.balance(chain.treasury) - treasuryBefore, platform + network - burnt);
    assert.equal(node.balance(from.address), 0n);
  });

  it('2: a USDT payout first, then the platform fee, then the TRX its energy did not burn back to the fee wallet', async () => {
    node.fund(chain.feeWallet, 200_000_000n);
    const from = { address: keyring.deriveDepositKey('tron', 104).address, derivationIndex: 104 };
    node.mintToken(TEST_USDT, from.address, 50_000_000n);
    const to = randomTronKey().address;
    const platform = 500_000n;
    const prepared = await chain.prepareTransfer({
      from,
      to,
      token: 'USDT',
      amount: 50_000_000n - platform,
      reference: 'm4/1',
      fees: { platform, network: 0n },
    });
    await broadcastWhileMining(chain, prepared);
    node.mine(1);
    assert.equal(node.tokenBalance(TEST_USDT, to), 50_000_000n - platform);
    assert.equal(node.tokenBalance(TEST_USDT, chain.treasury), 0n, 'no fee before the payout is final');
    node.mine(19);
    assert.equal(
      (await chain.transactionStatus(prepared.txHash))?.confirmations,
      18,
      'the fee call goes; not final until it is mined',
    );
    node.mine(1);
    assert.equal(node.tokenBalance(TEST_USDT, chain.treasury), platform);
    assert.equal(
      (await chain.transactionStatus(prepared.txHash))?.confirmations,
      18,
      'the leftover TRX goes back; not final until it is mined (a settlement a refund left reads the TRX next)',
    );
    node.mine(1);
    assert.equal(node.balance(from.address), 0n, 'the leftover TRX went back');
    const confirmations = (await chain.transactionStatus(prepared.txHash))?.confirmations ?? 0;
    assert.ok(confirmations > 19, `${confirmations}`);
    assert.equal(node.trxTransfers({ from: from.address, to: chain.feeWallet }).length, 1);
  });

  /** Mines the payout to final, then what follows it (the fee call, an undelegation, the leftover's way back). */
  async function settleToken(chain: TronChain, prepared: PreparedTransaction) {
    await broadcastWhileMining(chain, prepared);
    node.mine(20);
    for (let look = 0; look < 5; look++) {
      const status = await chain.transactionStatus(prepared.txHash);
      node.mine(1);
      if ((status?.confirmations ?? 0) > 19) return;
    }
    assert.fail('the payout never counted as final');
  }

  it("2: a USDT settlement's network fee is the TRX the fee wallet loses for it, in USDT at the service's rates", async () => {
    node.exhaustPublicBandwidth(); // every byte burnt, as the quote assumes
    const rates = {
      rate: async (token: string) => ({ rate: token === 'TRX' ? '0.2437' : '0.9998', observedAt: new Date() }),
    };
    const priced = await open(node, { rates });
    try {
      node.fund(priced.feeWallet, 200_000_000n);
      const gross = 30_000_000n;
      const from = { address: keyring.deriveDepositKey('tron', 105).address, derivationIndex: 105 };
      node.mintToken(TEST_USDT, from.address, gross);
      const to = randomTronKey().address; // holds no USDT: the dearer transfer
      const network = await priced.quoteNetworkFee({ from, to, token: 'USDT' });
      assert.equal(priced.networkFee('USDT'), network, 'the last quote is the estimate shown meanwhile');
      const platform = gross / 100n;
      const net = gross - platform - network;
      const feeWalletBefore = node.balance(priced.feeWallet);
      const treasuryBefore = node.tokenBalance(TEST_USDT, priced.treasury);
      const prepared = await priced.prepareTransfer({
        from,
        to,
        token: 'USDT',
        amount: net,
        reference: 'm5/1',
        fees: { platform, network },
      });
      await settleToken(priced, prepared);
      assert.equal(node.tokenBalance(TEST_USDT, to), net, 'the merchant has exactly the net amount');
      assert.equal(
        node.tokenBalance(TEST_USDT, priced.treasury) - treasuryBefore,
        platform + network,
        'the network fee goes with the platform fee',
      );
      assert.equal(node.balance(from.address), 0n, 'the leftover went back');
      const lost = feeWalletBefore - node.balance(priced.feeWallet);
      // The quote takes the leftover's transfer at the largest amount's size: a few bytes over what it burns.
      const slack = 10n * 1000n;
      assert.ok(
        trxInToken(lost, '0.2437', '0.9998', 6) <= network,
        `the fee wallet lost ${lost} sun, no more than the ${network} charged`,
      );
      assert.ok(
        network <= trxInToken(lost + slack, '0.2437', '0.9998', 6),
        `${network} is the ${lost} sun burnt, at the rates`,
      );
    } finally {
      priced.close();
    }
  });

  describe('with the fee wallet staked for energy (CHAIN_TRON_ENERGY_DELEGATION)', () => {
    const rates = { rate: async (token: string) => ({ rate: token === 'TRX' ? '0.25' : '1', observedAt: new Date() }) };
    let staked: TronChain;
    before(async () => {
      staked = await open(node, { rates, energyDelegation: true });
      const fee = keyring.deriveTronServiceKey('fee');
      node.fund(fee.address, 60_000_000_000n);
      await node.freezeForEnergy(
        { address: fee.address, privateKey: Buffer.from(fee.privateKey).toString('hex') },
        50_000_000_000n,
      );
      node.mine(1);
    });
    after(() => staked.close());

    /** A deposit holding `gross` USDT, and its payout to a new merchant, quoted and prepared. */
    async function quotedPayout(index: number, gross: bigint) {
      const from = { address: keyring.deriveDepositKey('tron', index).address, derivationIndex: index };
      node.mintToken(TEST_USDT, from.address, gross);
      const to = randomTronKey().address;
      const platform = gross / 100n;
      const network = await staked.quoteNetworkFee({ from, to, token: 'USDT' });
      const net = gross - platform - network;
      const fees = { platform, network };
      const prepared = await staked.prepareTransfer({
        from,
        to,
        token: 'USDT',
        amount: net,
        reference: `m/${index}`,
        fees,
      });
      return { from, to, platform, network, net, prepared };
    }

    it('2: a USDT payout uses delegated energy, burns none, is quoted its bandwidth only, and the stake comes back', async () => {
      node.exhaustPublicBandwidth();
      const feeWalletBefore = node.balance(staked.feeWallet);
      const stakeBefore = node.energyOf(staked.feeWallet).limit;
      const { from, to, platform, network, net, prepared } = await quotedPayout(107, 30_000_000n);
      await settleToken(staked, prepared);
      assert.equal(node.tokenBalance(TEST_USDT, to), net);
      assert.equal(node.tokenBalance(TEST_USDT, staked.treasury) >= platform + network, true);
      assert.equal(node.delegatedEnergy(staked.feeWallet, from.address), 0n, 'the delegation was taken back');
      assert.equal(node.energyOf(staked.feeWallet).limit, stakeBefore, "the fee wallet's stake is whole again");
      assert.ok(
        node.feeOf(prepared.txHash) < 1_000_000n,
        `no energy burnt: the payout cost its bytes (${node.feeOf(prepared.txHash)} sun)`,
      );
      const lost = feeWalletBefore - node.balance(staked.feeWallet);
      assert.ok(
        trxInToken(lost, '0.25', '1', 6) <= network,
        `the fee wallet lost ${lost} sun, no more than the ${network} charged`,
      );
      // The delegation and its undelegation are quoted at the largest amount's and time's size: 20 bytes at most over.
      assert.ok(
        network <= trxInToken(lost + 20_000n, '0.25', '1', 6),
        `${network} is its bytes and the account's creation`,
      );
      assert.ok(
        network < 1_000_000n,
        `with energy delegated a USDT settlement costs under 4 TRX (${network} USDT base units)`,
      );
    });

    it('2: a crash between the delegation and the payout leaves no delegation behind: the next pass pays and takes it back', async () => {
      const { from, to, net, prepared } = await quotedPayout(108, 20_000_000n);
      // What a process did before it was killed: the top-up and the delegation are mined, the payout never sent.
      const bundle = JSON.parse(prepared.raw);
      node.accept(bundle.topUp.transaction);
      node.mine(1);
      node.accept(bundle.delegate.transaction);
      node.mine(1);
      assert.ok(node.delegatedEnergy(staked.feeWallet, from.address) > 0n);
      const restarted = await open(node, { rates, energyDelegation: true });
      try {
        await settleToken(restarted, prepared); // the engine sends the recorded payout again
        assert.equal(node.tokenBalance(TEST_USDT, to), net);
        assert.equal(node.delegatedEnergy(staked.feeWallet, from.address), 0n, 'taken back on the next pass');
        assert.equal(node.trxTransfers({ from: staked.feeWallet, to: from.address }).length, 1, 'one top-up');
      } finally {
        restarted.close();
      }
    });
  });

  it('2: a USDT settlement is not priced without a rate: the quote fails, to be tried again', async () => {
    const unpriced = await open(node, {
      rates: { rate: async (token: string) => (token === 'TRX' ? undefined : { rate: '1', observedAt: new Date() }) },
    });
    try {
      const from = { address: keyring.deriveDepositKey('tron', 106).address, derivationIndex: 106 };
      node.mintToken(TEST_USDT, from.address, 5_000_000n);
      await assert.rejects(
        unpriced.quoteNetworkFee({ from, to: randomTronKey().address, token: 'USDT' }),
        /no TRX rate in USD/,
      );
      assert.throws(() => unpriced.networkFee('USDT'), /no USDT settlement quoted yet/);
    } finally {
      unpriced.close();
    }
  });

  it('2: TRX priced in a token rounds up to the next base unit, exact otherwise', () => {
    assert.equal(trxInToken(4_000_000n, '0.25', '1', 6), 1_000_000n);
    assert.equal(trxInToken(1n, '0.25', '1', 6), 1n, 'a quarter of a base unit rounds up');
    assert.equal(trxInToken(3_000_001n, '0.1', '1', 18), 300_000_100_000_000_000n);
  });

  it('1: a contract cannot be a settlement wallet, and a payout to one is never prepared', async () => {
    const contract = randomTronKey().address;
    node.deployContract(contract);
    assert.match((await chain.receivingProblem(contract))!, /contract on tron/);
    assert.equal(await chain.receivingProblem(merchantWallet()), undefined);
    assert.equal(
      await chain.receivingProblem(randomTronKey().address),
      undefined,
      'an account yet to be created takes TRX',
    );
    await assert.rejects(open(node, { treasury: contract }), /^Error: CHAIN_TRON_TREASURY: .* is a contract on tron/);
    await assert.rejects(
      chain.prepareTransfer({
        from: deposit(102, 5_000_000n),
        to: contract,
        token: 'TRX',
        amount: 1_000_000n,
        reference: 'm2/1',
      }),
      TransactionRejectedError,
    );
  });

  it('3: a refusal that depends on the state (funds gone) waits for the expiry; a bad signature is final', async () => {
    const from = deposit(103, 10_000_000n);
    const to = merchantWallet();
    const prepared = await chain.prepareTransfer({ from, to, token: 'TRX', amount: 9_000_000n, reference: 'm3/1' });
    // Another backend's view: the funds are elsewhere for now (a payout of an earlier attempt it took).
    const key = keyring.deriveDepositKey('tron', 103);
    await node.sendTrx(
      { address: key.address, privateKey: Buffer.from(key.privateKey).toString('hex') },
      to,
      5_000_000n,
    );
    await assert.rejects(
      chain.broadcast(prepared),
      (e: Error) => !(e instanceof TransactionRejectedError) && /CONTRACT_VALIDATE_ERROR/.test(e.message),
    );
    node.advance(16 * 60_000); // past its expiration, and the 5 minutes a lagging backend may be behind
    node.mine(21); // the solidified chain is past its expiration without it
    await assert.rejects(chain.broadcast(prepared), TransactionRejectedError);

    const forged = structuredClone(
      JSON.parse((await chain.prepareTransfer({ from, to, token: 'TRX', amount: 1_000_000n, reference: 'm3/2' })).raw),
    );
    const stranger = randomTronKey();
    const { signature: _, ...unsigned } = forged.payout as TransactionJson;
    forged.payout = signTransaction(stranger.privateKey, unsigned) as unknown as TransactionJson;
    await assert.rejects(
      chain.broadcast({ txHash: forged.payout.txID, raw: JSON.stringify(forged) }),
      TransactionRejectedError,
    );
  });

  it('5: after a 403 the node is not asked again for 30 s', async () => {
    const limited = await open(node, { retry: { attempts: 4, baseDelayMs: 1 } });
    try {
      node.rateLimit = 2;
      await assert.rejects(
        (async () => {
          for (let i = 0; i < 10; i++) await limited.head();
        })(),
        /rate limited/,
      );
      const refused = node.refusedWhileSuspended;
      for (let i = 0; i < 5; i++) await assert.rejects(limited.head(), /fewer requests/);
      assert.equal(node.refusedWhileSuspended, refused, 'no request while suspended');
    } finally {
      node.rateLimit = undefined;
      node.liftSuspension();
      limited.close();
    }
  });

  it('6: a block whose results a lagging backend does not have yet is read again, never read without them', async () => {
    const payer = randomTronKey();
    node.fund(payer.address, 100_000_000n);
    node.mintToken(TEST_USDT, payer.address, 5_000_000n);
    const to = randomTronKey().address;
    await node.sendToken(payer, TEST_USDT, to, 5_000_000n, { via: TEST_ROUTER });
    node.mine(1);
    const height = node.head.number;
    node.lagging = true;
    try {
      let read = 0;
      for (let i = 0; i < 8; i++) {
        const block = await chain.block(height).catch(() => undefined);
        if (!block) continue;
        read++;
        assert.deepEqual(
          block.transfers.map((t) => [t.to, t.token, t.amount]),
          [[to, 'USDT', 5_000_000n]],
        );
      }
      assert.ok(read > 0, 'read whole at last');
    } finally {
      node.lagging = false;
    }
  });

  it('6: TRX a contract sends on is a payment; a rejected internal transfer is not', async () => {
    const payer = randomTronKey();
    node.fund(payer.address, 100_000_000n);
    const to = randomTronKey().address;
    const txid = await node.forwardTrx(payer, TEST_ROUTER, to, 7_000_000n);
    node.mine(1);
    const block = await chain.block(node.head.number);
    assert.deepEqual(block?.transfers, [{ txHash: txid, index: 0, to, token: 'TRX', amount: 7_000_000n }]);

    const info = node.head.infos[0]!;
    const rejected = {
      ...info,
      internal_transactions: info.internal_transactions!.map((t: object) => ({ ...t, rejected: true })),
    };
    const raw = {
      blockID: node.head.blockID,
      block_header: { raw_data: { number: node.head.number, parentHash: node.head.parentHash } },
      transactions: node.head.transactions,
    };
    assert.deepEqual(parseTronBlock(raw, [rejected], []), []);
  });

  it("6: tells a stale backend by its head's age", async () => {
    await chain.head();
    const age = chain.headAge(node.head.timestamp + 5 * 60_000)!;
    assert.ok(age >= 5 * 60_000, `head age ${age}`);
  });
});

describe('java-tron serves the solidity API on its own port', () => {
  let node: TronTestNode;
  before(async () => {
    node = await startTronNode();
  });
  after(() => node.stop());

  it('4: opens with CHAIN_TRON_SOLIDITY_URL, and names it when the solidity API is not at the RPC URL', async () => {
    assert.notEqual(node.solidityUrl, node.url);
    const chain = await open(node);
    assert.equal((await chain.head()).finalized, node.solidified.number);
    chain.close();
    await assert.rejects(
      open(node, { solidityUrl: undefined }),
      /^Error: CHAIN_TRON_SOLIDITY_URL: the node did not answer/,
    );
  });
});
