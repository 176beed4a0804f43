// The EVM chain adapter against a local Hardhat node: chain id check, block
// parsing (native transfers, token logs with their log indexes, batches of
// logs checked against block hashes), a reorg seen through block hashes, and
// settlement bundles that are the same when prepared again and harmless when
// broadcast again, and a new attempt after a refused payout step that does
// not pay the platform fee twice; behind a provider whose reads lag, a
// payout that landed is never taken as refused, one whose nonce another
// transaction took still is.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { hexlify, Transaction, Wallet, type Contract } from 'ethers';
import { EvmChain } from '../adapters/chains/evm/index.ts';
import { TransactionRejectedError, type OutgoingTransfer, type PreparedTransaction } from '../adapters/chains/port.ts';
import { DepositKeyring } from '../adapters/keys/derivation.ts';
import { deployToken, HARDHAT_CHAIN_ID, laggingProxy, startHardhat, type LocalNode } from './support/hardhat.ts';

const MNEMONIC = 'abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about';
const keyring = DepositKeyring.fromMnemonic(MNEMONIC);

const started = await startHardhat();
const skip = 'skip' in started ? started.skip : false;
if (skip) console.log(`# skipped EVM adapter tests: ${skip}`);

describe('EVM chain adapter on a local Hardhat node', { skip }, () => {
  const node = started as LocalNode;
  let usdt: Contract;
  let usdc: Contract;
  let chain: EvmChain;

  before(async () => {
    usdt = await deployToken(node, 'USDT', 6);
    usdc = await deployToken(node, 'USDC', 6);
    chain = await EvmChain.open({
      chain: 'ethereum',
      rpcUrl: node.url,
      chainId: HARDHAT_CHAIN_ID,
      tokens: [
        { symbol: 'USDT', contract: await usdt.getAddress(), decimals: 6 },
        { symbol: 'USDC', contract: await usdc.getAddress(), decimals: 6 },
      ],
      keyring,
      platformFeeBps: 100,
      logBatchBlocks: 4,
    });
  });
  after(async () => {
    chain?.close();
    await node.stop();
  });

  it('refuses a node of another chain id with one line naming the variable', async () => {
    await assert.rejects(EvmChain.open({ chain: 'ethereum', rpcUrl: node.url, keyring, platformFeeBps: 100 }), {
      message:
        'CHAIN_ETHEREUM_RPC_URL is a node of chain id 31337, not ethereum mainnet (1); set CHAIN_ETHEREUM_CHAIN_ID=31337 if this test network is meant',
    });
    await assert.rejects(
      EvmChain.open({ chain: 'bsc', rpcUrl: node.url, chainId: 97n, keyring, platformFeeBps: 100 }),
      /^Error: CHAIN_BSC_CHAIN_ID is 97 but CHAIN_BSC_RPC_URL is a node of chain id 31337$/,
    );
    await assert.rejects(
      EvmChain.open({
        chain: 'polygon',
        rpcUrl: 'http://127.0.0.1:9',
        keyring,
        platformFeeBps: 100,
        retry: { attempts: 2, baseDelayMs: 10 },
      }),
      /^Error: CHAIN_POLYGON_RPC_URL: the node did not answer/,
    );
    // Over a WebSocket too: a refused socket is an answer-less node, not a crash.
    await assert.rejects(
      EvmChain.open({
        chain: 'polygon',
        rpcUrl: 'ws://127.0.0.1:9',
        keyring,
        platformFeeBps: 100,
        retry: { attempts: 2, baseDelayMs: 10 },
      }),
      /^Error: CHAIN_POLYGON_RPC_URL: the node did not answer/,
    );
  });

  it('refuses a contract as the treasury at start-up, with one line naming the variable', async () => {
    const contract = await usdt.getAddress();
    await assert.rejects(
      EvmChain.open({
        chain: 'ethereum',
        rpcUrl: node.url,
        chainId: HARDHAT_CHAIN_ID,
        keyring,
        platformFeeBps: 100,
        treasury: contract,
      }),
      {
        message: `CHAIN_ETHEREUM_TREASURY: ${contract} is a contract on ethereum: payouts carry a plain transfer's 21,000 gas, so they go to plain accounts (an externally owned address)`,
      },
    );
    const plain = Wallet.createRandom().address;
    const opened = await EvmChain.open({
      chain: 'ethereum',
      rpcUrl: node.url,
      chainId: HARDHAT_CHAIN_ID,
      keyring,
      platformFeeBps: 100,
      treasury: plain,
    });
    assert.equal(opened.treasury, plain);
    opened.close();
  });

  it('reads native transfers (index 0) and token transfers (index = log index) of a block', async () => {
    const [a, b, c, d] = [0, 1, 2, 3].map(() => Wallet.createRandom().address) as [string, string, string, string];
    const native = await (await node.payer.sendTransaction({ to: a, value: 1234567890123n })).wait();
    const single = await (await usdt.getFunction('transfer')(b, 5_000_000n)).wait();
    const many = await (await usdc.getFunction('transferMany')([c, d, c], [1n, 2n, 3n])).wait();

    const nativeBlock = (await chain.block(native!.blockNumber))!;
    assert.deepEqual(nativeBlock.transfers, [
      { txHash: native!.hash, index: 0, to: a, token: 'ETH', amount: 1234567890123n },
    ]);
    assert.equal(nativeBlock.hash, native!.blockHash);

    const singleBlock = (await chain.block(single.blockNumber))!;
    assert.deepEqual(singleBlock.transfers, [
      { txHash: single.hash, index: single.logs[0].index, to: b, token: 'USDT', amount: 5_000_000n },
    ]);
    const manyBlock = (await chain.block(many.blockNumber))!;
    assert.deepEqual(
      manyBlock.transfers.map((t) => [t.to, t.token, t.amount, t.index]),
      [
        [c, 'USDC', 1n, 0],
        [d, 'USDC', 2n, 1],
        [c, 'USDC', 3n, 2],
      ],
    );
    assert.equal(manyBlock.parentHash, singleBlock.hash);
    assert.equal((await chain.head()).height, many.blockNumber);
    assert.equal(await chain.block(many.blockNumber + 1), undefined);
  });

  it('reads every block of a range in log batches, including blocks without any log', async () => {
    const to = Wallet.createRandom().address;
    const heights: number[] = [];
    for (let i = 1; i <= 9; i++) {
      const r = await (await usdt.getFunction('transfer')(to, BigInt(i))).wait();
      heights.push(r.blockNumber);
      if (i % 3 === 0) await node.mine(2); // empty blocks between
    }
    let total = 0n;
    for (let h = heights[0]!; h <= heights.at(-1)!; h++) {
      for (const t of (await chain.block(h))!.transfers) if (t.to === to) total += t.amount;
    }
    assert.equal(total, 45n);
  });

  it('sees a reorg: after evm_revert the height has another hash and the transfer is gone', async () => {
    const to = Wallet.createRandom().address;
    const snapshot = await node.rpc<string>('evm_snapshot');
    const receipt = await (await usdt.getFunction('transfer')(to, 77n)).wait();
    const before = (await chain.block(receipt.blockNumber))!;
    assert.equal(before.transfers[0]!.to, to);
    assert.equal(await node.rpc('evm_revert', [snapshot]), true);
    node.payer.reset();
    await node.mine(1);
    const after = (await chain.block(receipt.blockNumber))!;
    assert.notEqual(after.hash, before.hash);
    assert.deepEqual(after.transfers, []);
  });

  /** A deposit paid 0.1 ETH, and its settlement's sweep: the platform fee (1 %) and the payout, priced now. */
  async function nativeSettlement(derivationIndex: number, reference: string) {
    const key = keyring.deriveDepositKey('ethereum', derivationIndex);
    const merchant = Wallet.createRandom().address;
    const gross = 10n ** 17n;
    await (await node.payer.sendTransaction({ to: key.address, value: gross })).wait();
    await chain.head(); // a fresh fee quote
    const network = chain.networkFee('ETH');
    const platform = gross / 100n;
    const transfer = {
      from: { address: key.address, derivationIndex },
      to: merchant,
      token: 'ETH',
      amount: gross - platform - network,
      reference,
      fees: { platform, network },
    };
    return { key, merchant, platform, transfer };
  }

  it('prepares the same bundle for the same reference and takes a repeated broadcast as done', async () => {
    const { key, merchant, transfer } = await nativeSettlement(900, 'adapter-test/1');
    const prepared = await chain.prepareTransfer(transfer);
    assert.deepEqual(await chain.prepareTransfer(transfer), prepared);
    assert.equal(await chain.transactionStatus(prepared.txHash), undefined);
    await chain.broadcast(prepared);
    await chain.broadcast(prepared); // a repeat after an unknown outcome
    const status = await chain.transactionStatus(prepared.txHash);
    assert.ok(status && status.confirmations >= 1);
    assert.equal(await chain.balanceOf(merchant), transfer.amount);
    assert.equal(await chain.balanceOf(key.address), 0n, 'the deposit address keeps nothing');
  });

  it("pays a native refund as one transfer at the quoted price, the payer spending exactly the refund's fee", async () => {
    const key = keyring.deriveDepositKey('ethereum', 901);
    const customer = Wallet.createRandom().address;
    const held = 10n ** 17n;
    await (await node.payer.sendTransaction({ to: key.address, value: held })).wait();
    await chain.head(); // a fresh fee quote, the same for both questions below
    const network = chain.networkFee('ETH', 'refund');
    // A settlement with a platform fee is two transfers; a refund is one, and its fee is one's gas.
    assert.equal(network * 2n, chain.networkFee('ETH'));
    const amount = 3n * 10n ** 16n;
    const prepared = await chain.prepareTransfer({
      from: { address: key.address, derivationIndex: 901 },
      to: customer,
      token: 'ETH',
      amount,
      reference: 'adapter-test/refund',
      fees: { platform: 0n, network },
    });
    await chain.broadcast(prepared);
    const receipt = (await node.provider.getTransactionReceipt(prepared.txHash))!;
    assert.equal(receipt.gasUsed * receipt.gasPrice, network);
    assert.equal(await chain.balanceOf(customer), amount);
    assert.equal(await chain.balanceOf(key.address), held - amount - network, 'nothing else left the payer');
  });

  it("pays a token refund's gas all from the fee wallet, never from the ETH the payer holds for another payout", async () => {
    const key = keyring.deriveDepositKey('ethereum', 902);
    const customer = Wallet.createRandom().address;
    // The deposit's ETH is its settlement's (or an ETH refund's); its USDT a wrong-token payment, refunded first.
    const held = 10n ** 17n;
    await (await node.payer.sendTransaction({ to: key.address, value: held })).wait();
    await (await usdt.getFunction('transfer')(key.address, 5_000_000n)).wait();
    await (await node.payer.sendTransaction({ to: chain.feeWallet, value: 10n ** 18n })).wait();
    await chain.head();
    const refund = {
      from: { address: key.address, derivationIndex: 902 },
      to: customer,
      token: 'USDT',
      amount: 5_000_000n,
      reference: 'adapter-test/token-refund',
      fees: { platform: 0n, network: 0n },
      payout: 'refund' as const,
    };
    const prepared = await chain.prepareTransfer(refund);
    const feeWalletBefore = await chain.balanceOf(chain.feeWallet);
    await chain.broadcast(prepared);
    const feeNonce = await node.provider.getTransactionCount(chain.feeWallet);
    await chain.broadcast(prepared); // a repeat after an unknown outcome: no second top-up
    assert.equal(await node.provider.getTransactionCount(chain.feeWallet), feeNonce);
    assert.equal(await chain.balanceOf(customer, 'USDT'), 5_000_000n);
    const receipt = (await node.provider.getTransactionReceipt(prepared.txHash))!;
    const gas = receipt.gasUsed * receipt.gasPrice;
    const given = feeWalletBefore - (await chain.balanceOf(chain.feeWallet));
    // The fee wallet gave the whole gas (and paid its top-up's own); what the call did not burn stays there.
    assert.ok(given > gas);
    const after = await chain.balanceOf(key.address);
    assert.ok(after >= held, `the payer's own ${held} wei paid none of the gas (it holds ${after})`);

    // So the other payout of that ETH is paid whole: here a refund of all of it but its own fee.
    const network = chain.networkFee('ETH', 'refund');
    const other = Wallet.createRandom().address;
    const eth = await chain.prepareTransfer({
      from: refund.from,
      to: other,
      token: 'ETH',
      amount: held - network,
      reference: 'adapter-test/eth-refund',
      fees: { platform: 0n, network },
      payout: 'refund',
    });
    await chain.broadcast(eth);
    assert.equal(await chain.balanceOf(other), held - network);
    assert.equal(await chain.balanceOf(key.address), after - held, "what is left is the top-up's unburnt gas");
  });

  /**
   * The attempt's platform fee step mined, its payout step then refused (the
   * base fee rose above the bundle's fee cap, as in a fee spike), and a late
   * payment reaching the deposit before the next attempt.
   */
  async function feeMinedPayoutRefused(transfer: OutgoingTransfer, latePayment: () => Promise<unknown>) {
    const first = await chain.prepareTransfer(transfer);
    const [feeStep] = (JSON.parse(first.raw) as { steps: string[] }).steps;
    await node.rpc('eth_sendRawTransaction', [feeStep]);
    const perGas = Transaction.from(feeStep!).maxFeePerGas!;
    const baseFee = (await node.provider.getBlock('latest'))!.baseFeePerGas!;
    await node.rpc('hardhat_setNextBlockBaseFeePerGas', ['0x' + (perGas * 10n).toString(16)]);
    await assert.rejects(chain.broadcast(first), TransactionRejectedError);
    await node.rpc('hardhat_setNextBlockBaseFeePerGas', ['0x' + baseFee.toString(16)]);
    await latePayment();
    await chain.head();
    return first;
  }

  async function attemptAfter(first: PreparedTransaction, transfer: OutgoingTransfer) {
    const second = await chain.prepareTransfer({
      ...transfer,
      reference: `${transfer.reference}/2`,
      refusedAttempts: [first.raw],
    });
    await chain.broadcast(second);
    assert.ok(await chain.transactionStatus(second.txHash));
  }

  it('a new native attempt after a refused payout step pays the platform fee once; a late payment stays on the deposit', async () => {
    const { key, merchant, platform, transfer } = await nativeSettlement(903, 'adapter-test/refused-eth');
    const late = 5n * 10n ** 16n;
    const treasuryBefore = await chain.balanceOf(chain.treasury);
    const first = await feeMinedPayoutRefused(transfer, async () =>
      (await node.payer.sendTransaction({ to: key.address, value: late })).wait(),
    );
    assert.equal(await chain.transactionStatus(first.txHash), undefined, 'the first payout never made it');
    await attemptAfter(first, transfer);
    assert.equal((await chain.balanceOf(chain.treasury)) - treasuryBefore, platform, 'the platform fee, once');
    assert.equal(await chain.balanceOf(merchant), transfer.amount);
    assert.equal(await chain.balanceOf(key.address), late, 'the late payment stays on the deposit, to the wei');
  });

  it('a new USDT attempt after a refused payout step pays the platform fee once; a late payment stays on the deposit', async () => {
    const key = keyring.deriveDepositKey('ethereum', 904);
    const merchant = Wallet.createRandom().address;
    const gross = 100_000_000n;
    const late = 5_000_000n;
    const platform = gross / 100n;
    await (await usdt.getFunction('transfer')(key.address, gross)).wait();
    await (await node.payer.sendTransaction({ to: chain.feeWallet, value: 10n ** 18n })).wait();
    await chain.head();
    const transfer = {
      from: { address: key.address, derivationIndex: 904 },
      to: merchant,
      token: 'USDT',
      amount: gross - platform,
      reference: 'adapter-test/refused-usdt',
      fees: { platform, network: 0n },
    };
    const treasuryBefore = await chain.balanceOf(chain.treasury, 'USDT');
    // The fee step needs gas on the deposit: the first bundle's whole budget, as its top-up would give.
    const budget = BigInt(
      (JSON.parse((await chain.prepareTransfer(transfer)).raw) as { topUp: { budget: string } }).topUp.budget,
    );
    await (await node.payer.sendTransaction({ to: key.address, value: budget })).wait();
    const first = await feeMinedPayoutRefused(transfer, () =>
      usdt
        .getFunction('transfer')(key.address, late)
        .then((t) => t.wait()),
    );
    await attemptAfter(first, transfer);
    assert.equal((await chain.balanceOf(chain.treasury, 'USDT')) - treasuryBefore, platform, 'the platform fee, once');
    assert.equal(await chain.balanceOf(merchant, 'USDT'), transfer.amount);
    assert.equal(await chain.balanceOf(key.address, 'USDT'), late, 'the late payment stays on the deposit');
  });

  describe('behind a load-balanced provider whose reads lag behind the node that takes the transactions', () => {
    let proxy: Awaited<ReturnType<typeof laggingProxy>>;
    let lagging: EvmChain;
    let allReads: Set<string>;

    before(async () => {
      proxy = await laggingProxy(node.url);
      allReads = proxy.lagging;
      lagging = await EvmChain.open({
        chain: 'ethereum',
        rpcUrl: proxy.url,
        chainId: HARDHAT_CHAIN_ID,
        tokens: [{ symbol: 'USDT', contract: await usdt.getAddress(), decimals: 6 }],
        keyring,
        platformFeeBps: 100,
        retry: { attempts: 2, baseDelayMs: 10 },
      });
    });
    after(async () => {
      lagging?.close();
      await proxy?.close();
    });

    /** A native refund of 0.03 ETH from deposit `derivationIndex`, prepared (not sent). */
    async function nativeRefund(derivationIndex: number) {
      proxy.lag = 0;
      proxy.lagging = allReads;
      const key = keyring.deriveDepositKey('ethereum', derivationIndex);
      await (await node.payer.sendTransaction({ to: key.address, value: 10n ** 17n })).wait();
      await lagging.head();
      const transfer: OutgoingTransfer = {
        from: { address: key.address, derivationIndex },
        to: Wallet.createRandom().address,
        token: 'ETH',
        amount: 3n * 10n ** 16n,
        reference: `adapter-test/lag-${derivationIndex}`,
        fees: { platform: 0n, network: lagging.networkFee('ETH', 'refund') },
        payout: 'refund',
      };
      return { key, transfer, prepared: await lagging.prepareTransfer(transfer) };
    }
    const nonceOf = (prepared: PreparedTransaction) => Transaction.from(JSON.parse(prepared.raw).steps[0]).nonce;

    /** Another transaction from the refund's payer at its nonce, mined: the refund can never be. */
    async function anotherAtItsNonce(key: { privateKey: Uint8Array }, prepared: PreparedTransaction) {
      const ours = Transaction.from(JSON.parse(prepared.raw).steps[0]);
      const other = await new Wallet(hexlify(key.privateKey)).signTransaction({
        to: Wallet.createRandom().address,
        value: 1n,
        nonce: ours.nonce,
        gasLimit: 21_000n,
        type: 2,
        maxFeePerGas: ours.maxFeePerGas,
        maxPriorityFeePerGas: ours.maxPriorityFeePerGas,
        chainId: HARDHAT_CHAIN_ID,
      });
      await node.rpc('eth_sendRawTransaction', [other]);
    }

    const notRefused = (error: unknown) => !(error instanceof TransactionRejectedError);

    it('a refund that landed, looked at again while the reads lag, is never taken as refused', async () => {
      const { prepared } = await nativeRefund(905);
      await lagging.broadcast(prepared);
      assert.ok(await lagging.transactionStatus(prepared.txHash));
      await node.mine(3);

      // Every read five blocks behind (the refund is three deep): no receipt, the nonce not used yet as read; the node that
      // takes transactions says "nonce too low". Unknown: the same transaction is sent again later.
      proxy.lag = 5;
      await assert.rejects(lagging.broadcast(prepared), notRefused);

      // Only the transaction index lags (no receipt), the state is current: the block that used
      // the nonce holds this transaction, so it is there.
      proxy.lagging = new Set(['eth_getTransactionReceipt', 'eth_getTransactionByHash']);
      await lagging.broadcast(prepared);
    });

    it('a refund that landed, sent again to a node that checks the tip before the nonce, is not taken as refused', async () => {
      const { prepared } = await nativeRefund(909);
      const ours = Transaction.from(JSON.parse(prepared.raw).steps[0]);
      await lagging.broadcast(prepared);
      await node.mine(3);
      proxy.minTip = ours.maxPriorityFeePerGas! + 1n;
      try {
        // The reads lag too: the nonce is not used yet as read, at a block behind one already read. Unknown.
        proxy.lag = 5;
        await assert.rejects(lagging.broadcast(prepared), notRefused);
        // The reads are current: the block that used the nonce holds this transaction, so it is there.
        proxy.lag = 0;
        await lagging.broadcast(prepared);

        // A transaction the node never had is refused for its tip all the same.
        const { prepared: never } = await nativeRefund(910);
        proxy.minTip = Transaction.from(JSON.parse(never.raw).steps[0]).maxPriorityFeePerGas! + 1n;
        await assert.rejects(lagging.broadcast(never), { name: 'TransactionRejectedError', message: /underpriced/ });
      } finally {
        proxy.minTip = 0n;
      }
    });

    it('a refund whose nonce another transaction took is refused, once the reads show it', async () => {
      const { key, prepared } = await nativeRefund(906);
      await anotherAtItsNonce(key, prepared);
      await node.mine(2);

      proxy.lag = 5; // the reads have not seen the other transaction yet: unknown
      await assert.rejects(lagging.broadcast(prepared), notRefused);
      proxy.lag = 0;
      await assert.rejects(lagging.broadcast(prepared), {
        name: 'TransactionRejectedError',
        message: /nonce \d+ was used by another transaction, in block \d+ 0x/,
      });
      assert.equal(await lagging.transactionStatus(prepared.txHash), undefined);
    });

    it('a nonce used before the state the node keeps: without a receipt unknown, never refused; an attempt mined then is found by its receipt', async () => {
      const { key, prepared } = await nativeRefund(911);
      await anotherAtItsNonce(key, prepared);
      // One at a time: hardhat_mine's blocks are made lazily, with no parent hash a search by hash can follow.
      const mine = async (blocks: number) => {
        for (let i = 0; i < blocks; i++) await node.rpc('evm_mine');
      };
      await mine(12);
      proxy.stateKept = 5; // a full node's 128 blocks of state, scaled down
      try {
        // A node that prunes state may prune receipts too: none is no proof another transaction used the nonce.
        await assert.rejects(
          lagging.broadcast(prepared),
          (error: Error) => notRefused(error) && /before the oldest state the node keeps/.test(error.message),
        );

        // An attempt refused on the node's word, then the next one, at its nonce, mined: long after, a third is
        // not prepared: the second is the payout (its receipt says so, and so that it used the first's nonce).
        const { transfer, prepared: refused } = await nativeRefund(915);
        const attempt = (n: number, earlier: PreparedTransaction[]) =>
          lagging.prepareTransfer({
            ...transfer,
            reference: `${transfer.reference}/${n}`,
            refusedAttempts: earlier.map((p) => p.raw),
          });
        const second = await attempt(2, [refused]);
        assert.equal(nonceOf(second), nonceOf(refused));
        await lagging.broadcast(second);
        await mine(12);
        await assert.rejects(attempt(3, [refused, second]), /an earlier attempt's payout 0x[0-9a-f]+ is on the chain/);
      } finally {
        proxy.stateKept = 0;
      }
    });

    it('a new attempt after a refusal read wrong is never signed past the earlier one that landed', async () => {
      const { transfer, prepared } = await nativeRefund(912);
      await lagging.broadcast(prepared);
      await node.mine(2);
      const again = { ...transfer, reference: `${transfer.reference}/2`, refusedAttempts: [prepared.raw] };
      // Its receipt lags, the state does not: the nonce read is the next one, and the earlier attempt is mined.
      proxy.lagging = new Set(['eth_getTransactionReceipt', 'eth_getTransactionByHash']);
      proxy.lag = 5;
      await assert.rejects(lagging.prepareTransfer(again), /is mined, but its receipt is not read yet/);
      proxy.lag = 0;
      await assert.rejects(lagging.prepareTransfer(again), /an earlier attempt's payout 0x[0-9a-f]+ is on the chain/);

      // An earlier attempt never mined: the new one takes its nonce, so at most one of the two is.
      const { transfer: other, prepared: refused } = await nativeRefund(914);
      const replacing = await lagging.prepareTransfer({
        ...other,
        reference: `${other.reference}/2`,
        refusedAttempts: [refused.raw],
      });
      assert.equal(nonceOf(replacing), nonceOf(refused));
    });

    it('a refund from a payer with another on its way waits for it, then takes the next nonce', async () => {
      const { transfer, prepared: first } = await nativeRefund(913);
      const second = { ...transfer, reference: `${transfer.reference}/b`, othersPrepared: [first.raw] };
      // Not sent (or refused): nothing to wait for; the two take the same nonce, and the chain mines one.
      assert.equal(nonceOf(await lagging.prepareTransfer(second)), nonceOf(first));

      await node.rpc('evm_setAutomine', [false]);
      try {
        await lagging.broadcast(first); // pending
        const third = { ...second, reference: `${transfer.reference}/c` };
        await assert.rejects(lagging.prepareTransfer(third), { name: 'PayerBusyError' });
        await node.mine(1);
        assert.equal(nonceOf(await lagging.prepareTransfer(third)), nonceOf(first) + 1);
      } finally {
        await node.rpc('evm_setAutomine', [true]);
      }
    });

    it('a token refund whose gas top-up, read stale, finds its fee wallet nonce used by another top-up is not refused', async () => {
      proxy.lag = 0;
      proxy.lagging = allReads;
      await (await node.payer.sendTransaction({ to: lagging.feeWallet, value: 10n ** 18n })).wait();
      const tokenRefund = async (derivationIndex: number) => {
        const key = keyring.deriveDepositKey('ethereum', derivationIndex);
        await (await usdt.getFunction('transfer')(key.address, 2_000_000n)).wait();
        await lagging.head();
        return lagging.prepareTransfer({
          from: { address: key.address, derivationIndex },
          to: Wallet.createRandom().address,
          token: 'USDT',
          amount: 2_000_000n,
          reference: `adapter-test/lag-${derivationIndex}`,
          fees: { platform: 0n, network: 0n },
          payout: 'refund',
        });
      };
      const other = await tokenRefund(907);
      const prepared = await tokenRefund(908);
      const before = await node.provider.getBlockNumber();
      await lagging.broadcast(other); // its top-up takes the fee wallet's next nonce
      await lagging.broadcast(prepared); // its top-up the one after, then the refund: all mined

      // Reads of the latest state from before the other top-up: this refund's payer looks unpaid and
      // short of gas, and the fee wallet's nonce is the one the other top-up used. A new top-up at it
      // is refused for a nonce another transaction used: that says nothing of the refund itself.
      proxy.lagging = new Set(['eth_getTransactionCount', 'eth_getBalance', 'eth_getTransactionReceipt']);
      proxy.latestOnly = true;
      proxy.lag = (await node.provider.getBlockNumber()) - before;
      await assert.rejects(
        lagging.broadcast(prepared),
        (error: Error) => notRefused(error) && /^gas top-up 0x\w+ not sent: .* another transaction/.test(error.message),
      );
      proxy.latestOnly = false;
    });
  });
});
