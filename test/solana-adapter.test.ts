// The Solana adapter against the test node (the real runtime behind a
// JSON-RPC façade), and the test node against what a real validator refuses:
// signatures, stale or unknown blockhashes, repeats, and what the runtime
// itself fails (funds, rent, a token account's balance).
import assert from 'node:assert/strict';
import { createPrivateKey, sign } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Keypair, PublicKey, SYSVAR_CLOCK_PUBKEY, SystemProgram, Transaction } from '@solana/web3.js';
import { TOKEN_PROGRAM_ID, createCloseAccountInstruction, getAssociatedTokenAddressSync } from '@solana/spl-token';
import bs58 from 'bs58';
import { derivePath } from 'ed25519-hd-key';
import { mnemonicToSeedSync } from '@scure/bip39';
import { parseRpcJson, parseSolanaBlock, SolanaChain, TOKEN_INDEX_OFFSET } from '../adapters/chains/solana/index.ts';
import { PayoutRefusedError, TransactionRejectedError } from '../adapters/chains/port.ts';
import { DepositKeyring, solanaServiceWalletPaths } from '../adapters/keys/derivation.ts';
import { SERVICE_MNEMONIC } from './support/evm-flow.ts';
import type { SolanaTestNode } from './support/solana-node.ts';
import { startSolanaNode, USDT_MINT } from './support/solana-flow.ts';

const keyring = DepositKeyring.fromMnemonic(SERVICE_MNEMONIC);

async function rpc(node: SolanaTestNode, method: string, params: unknown[]) {
  const response = await fetch(node.url, {
    method: 'POST',
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  return (await response.json()) as { result?: any; error?: { code: number; message: string; data?: any } };
}

describe('the Solana test node refuses what a validator refuses', () => {
  let node: SolanaTestNode;
  let payer: Keypair;
  before(async () => {
    node = await startSolanaNode();
    payer = Keypair.generate();
    await node.airdrop(payer.publicKey, 5_000_000_000n);
    await node.mine();
  });
  after(() => node.stop());

  const transfer = (lamports: number, options: { blockhash?: string; signers?: Keypair[]; to?: PublicKey } = {}) => {
    const tx = new Transaction({
      feePayer: payer.publicKey,
      blockhash: options.blockhash ?? node['blocks'].at(-1)!.blockhash,
      lastValidBlockHeight: 0,
    }).add(
      SystemProgram.transfer({
        fromPubkey: payer.publicKey,
        toPubkey: options.to ?? Keypair.generate().publicKey,
        lamports,
      }),
    );
    tx.sign(...(options.signers ?? [payer]));
    return tx;
  };
  const send = (tx: Transaction) =>
    rpc(node, 'sendTransaction', [
      tx.serialize({ verifySignatures: false }).toString('base64'),
      { encoding: 'base64' },
    ]);

  it('takes a signed transfer once, charges the runtime fee, and answers a repeat as already processed', async () => {
    const tx = transfer(1_000_000);
    const answer = await send(tx);
    assert.equal(answer.result, bs58.encode(tx.signature!));
    await node.mine();
    assert.equal(node.feeOf(answer.result), 5_000n);
    const again = await send(tx);
    assert.equal(again.error?.code, -32002);
    assert.match(again.error!.message, /already been processed/);
  });

  it('refuses a transaction signed by another key, or changed after signing', async () => {
    // The payer's transfer, signed by a stranger's key in the payer's place.
    const forged = transfer(1_000_000);
    const stranger = Keypair.generate();
    const strangerKey = createPrivateKey({
      key: Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), stranger.secretKey.subarray(0, 32)]),
      format: 'der',
      type: 'pkcs8',
    });
    forged.signatures[0]!.signature = sign(null, forged.serializeMessage(), strangerKey);
    assert.equal((await send(forged)).error?.code, -32003);
    const tampered = transfer(1_000_000);
    const bytes = tampered.serialize();
    bytes[bytes.length - 1]! ^= 1; // the last byte of the transfer's amount
    const answer = await rpc(node, 'sendTransaction', [bytes.toString('base64'), { encoding: 'base64' }]);
    assert.deepEqual(answer.error, { code: -32003, message: 'Transaction signature verification failure' });
  });

  it('refuses an unknown blockhash and one older than 150 blocks', async () => {
    const unknown = await send(transfer(1_000_000, { blockhash: bs58.encode(Buffer.alloc(32, 7)) }));
    assert.equal(unknown.error?.code, -32002);
    assert.equal(unknown.error?.data.err, 'Blockhash not found');
    const old = node['blocks'].at(-1)!.blockhash;
    await node.mine(151);
    const stale = await send(transfer(1_000_000, { blockhash: old }));
    assert.equal(stale.error?.data.err, 'Blockhash not found');
  });

  it('refuses a fee payer that cannot pay the fee and stay rent-exempt, or that the chain has never credited', async () => {
    const feePayerWith = (lamports: bigint | undefined) => {
      const poor = Keypair.generate();
      const tx = new Transaction({
        feePayer: poor.publicKey,
        blockhash: node['blocks'].at(-1)!.blockhash,
        lastValidBlockHeight: 0,
      }).add(SystemProgram.transfer({ fromPubkey: poor.publicKey, toPubkey: payer.publicKey, lamports: 1 }));
      tx.sign(poor);
      return { poor, tx, funded: lamports === undefined ? undefined : node.airdrop(poor.publicKey, lamports) };
    };
    const never = feePayerWith(undefined);
    const unknown = await send(never.tx);
    assert.equal(unknown.error?.code, -32002);
    assert.equal(
      unknown.error!.message,
      'Transaction simulation failed: Attempt to debit an account but found no record of a prior credit.',
    );
    // Exactly the rent-exempt minimum of an empty account (none can hold
    // less): the 5,000-lamport fee would leave it below that minimum, which
    // the runtime refuses as rent on the fee payer, account 0.
    const short = feePayerWith(890_880n);
    await short.funded;
    await node.mine();
    const underpaid = await send(short.tx);
    assert.equal(underpaid.error?.code, -32002);
    assert.equal(
      underpaid.error!.message,
      'Transaction simulation failed: Transaction results in an account (0) with insufficient funds for rent',
    );
  });

  it("refuses what the runtime fails in preflight: funds, rent, a token account's balance", async () => {
    const poor = await send(transfer(50_000_000_000));
    assert.equal(poor.error?.code, -32002);
    // The System program's ResultWithNegativeLamports, as a validator words it.
    assert.equal(
      poor.error!.message,
      'Transaction simulation failed: Error processing Instruction 0: custom program error: 0x1',
    );
    assert.ok(poor.error!.data.logs.some((l: string) => /Transfer: insufficient lamports/.test(l)));
    const dust = await send(transfer(1_000)); // a new account below the rent-exempt minimum
    assert.match(dust.error!.message, /insufficient funds for rent/);
    // Closing a token account that still holds tokens fails in the token program.
    const holder = Keypair.generate();
    await node.airdrop(holder.publicKey, 100_000_000n);
    await node.mintTokens(holder.publicKey, 'USDT', 5n);
    await node.mine();
    const account = getAssociatedTokenAddressSync(new PublicKey(USDT_MINT), holder.publicKey);
    const close = new Transaction({
      feePayer: holder.publicKey,
      blockhash: node['blocks'].at(-1)!.blockhash,
      lastValidBlockHeight: 0,
    }).add(createCloseAccountInstruction(account, holder.publicKey, holder.publicKey));
    close.sign(holder);
    const refused = await send(close);
    assert.equal(refused.error?.code, -32002);
    assert.ok(
      refused.error!.data.logs.some((l: string) =>
        /Non-native account can only be closed if its balance is zero/.test(l),
      ),
    );
  });

  it('answers blocks by commitment: skipped slots, slots above the head, finalized lagging', async () => {
    node.skip(3);
    await node.mine();
    const head = node.headSlot;
    // A skipped slot is -32004 like any slot not served, until it is below the root; then -32007.
    const skipped = await rpc(node, 'getBlock', [head - 1, { commitment: 'confirmed' }]);
    assert.equal(skipped.error?.code, -32004);
    assert.deepEqual((await rpc(node, 'getBlocks', [head - 3, head + 5, { commitment: 'confirmed' }])).result, [head]);
    assert.deepEqual((await rpc(node, 'getBlocks', [head - 3, head + 5, { commitment: 'finalized' }])).result, []);
    const ahead = await rpc(node, 'getBlock', [head + 1, { commitment: 'confirmed' }]);
    assert.equal(ahead.error?.code, -32004);
    const notFinal = await rpc(node, 'getBlock', [head, { commitment: 'finalized' }]);
    assert.equal(notFinal.error?.code, -32004);
    const finalized = (await rpc(node, 'getSlot', [{ commitment: 'finalized' }])).result;
    assert.ok(finalized <= head - 32);
    await node.mine(40);
    const rooted = await rpc(node, 'getBlock', [head - 1, { commitment: 'confirmed' }]);
    assert.equal(rooted.error?.code, -32007);
    assert.match(rooted.error!.message, /^Slot \d+ was skipped, or missing due to ledger jump to recent snapshot$/);
  });

  it("answers getTokenAccountsByOwner only for a mint that exists, and getAccountInfo's base58 only under 129 bytes", async () => {
    const unknown = await rpc(node, 'getTokenAccountsByOwner', [
      payer.publicKey.toBase58(),
      { mint: Keypair.generate().publicKey.toBase58() },
      { encoding: 'base64' },
    ]);
    assert.deepEqual(unknown.error, { code: -32602, message: 'Invalid param: could not find mint' });
    await node.mintTokens(payer.publicKey, 'USDT', 1n);
    await node.mine();
    const account = node.tokenAccount(payer.publicKey, 'USDT').toBase58();
    // Confirmed: the account is not finalized yet, and finalized is agave's default commitment.
    const tooLong = await rpc(node, 'getAccountInfo', [account, { encoding: 'base58', commitment: 'confirmed' }]);
    assert.equal(tooLong.error?.code, -32600);
    const sliced = await rpc(node, 'getAccountInfo', [
      account,
      { encoding: 'base58', commitment: 'confirmed', dataSlice: { offset: 0, length: 32 } },
    ]);
    assert.deepEqual(sliced.result.value.data, [node.mintOf('USDT').toBase58(), 'base58']);
    assert.equal(sliced.result.value.space, 165);
  });
});

describe('the Solana adapter', () => {
  let node: SolanaTestNode;
  let chain: SolanaChain;
  let payer: Keypair;
  before(async () => {
    node = await startSolanaNode();
    chain = await SolanaChain.open({ rpcUrl: node.url, keyring, pollMs: 50 });
    payer = Keypair.generate();
    await node.airdrop(payer.publicKey, 50_000_000_000n);
    await node.mintTokens(payer.publicKey, 'USDT', 1_000_000_000n);
    await node.airdrop(chain.feeWallet, 1_000_000_000n);
    await node.mine();
  });
  after(async () => {
    chain.close();
    await node.stop();
  });

  /** Prepares, sends and mines the sweep of a deposit to a new merchant, whose address it answers. */
  async function sweepToNewMerchant(
    adapter: SolanaChain,
    index: number,
    payout: { token: string; amount: bigint; platform: bigint; network: bigint },
    reference: string,
  ) {
    const merchant = Keypair.generate().publicKey.toBase58();
    const { token, amount, platform, network } = payout;
    const from = { address: keyring.deriveDepositKey('solana', index).address, derivationIndex: index };
    const sweep = await adapter.prepareTransfer({
      from,
      to: merchant,
      token,
      amount,
      reference,
      fees: { platform, network },
    });
    await adapter.broadcast(sweep);
    await node.mine();
    return merchant;
  }

  /** A deposit paid `deposited` lamports, and its sweep of `amount` to a new merchant prepared (not sent). */
  async function paidSolSweep(index: number, deposited: bigint, amount: bigint, reference: string) {
    const deposit = keyring.deriveDepositKey('solana', index).address;
    await node.sendSol(payer, deposit, deposited);
    await node.mine();
    const merchant = Keypair.generate().publicKey.toBase58();
    const sweep = await chain.prepareTransfer({
      from: { address: deposit, derivationIndex: index },
      to: merchant,
      token: 'SOL',
      amount,
      reference,
      fees: { platform: deposited / 100n, network: 10_000n },
    });
    return { deposit, merchant, sweep };
  }

  /** Sweeps the 40 USDT a deposit holds: 39.6 to a new merchant, the 0.4 fee to the treasury. */
  async function sweepFortyUsdt(index: number, reference: string) {
    const treasuryTokens = await node.tokenBalance(chain.treasury, 'USDT');
    const payout = { token: 'USDT', amount: 39_600_000n, platform: 400_000n, network: 0n };
    const merchant = await sweepToNewMerchant(chain, index, payout, reference);
    assert.equal(await node.tokenBalance(merchant, 'USDT'), 39_600_000n);
    assert.equal((await node.tokenBalance(chain.treasury, 'USDT')) - treasuryTokens, 400_000n);
  }

  it('derives its fee wallet and treasury at the documented paths', () => {
    const seed = Buffer.from(mnemonicToSeedSync(SERVICE_MNEMONIC)).toString('hex');
    for (const role of ['fee', 'treasury'] as const) {
      const expected = Keypair.fromSeed(derivePath(solanaServiceWalletPaths[role], seed).key).publicKey.toBase58();
      assert.equal(keyring.deriveSolanaServiceKey(role).address, expected);
    }
    assert.equal(chain.feeWallet, keyring.deriveSolanaServiceKey('fee').address);
    assert.equal(
      JSON.stringify(keyring.deriveSolanaServiceKey('fee')).includes('keypair'),
      false,
      'the key stays out of JSON',
    );
  });

  it('refuses a cluster other than the configured one, in one line naming the variable', async () => {
    await assert.rejects(SolanaChain.open({ rpcUrl: node.url, keyring, cluster: 'devnet' }), (error: Error) => {
      assert.equal(
        error.message,
        'CHAIN_SOLANA_RPC_URL is an RPC of Solana mainnet-beta, not Solana devnet; set CHAIN_SOLANA_CLUSTER=mainnet-beta if that cluster is meant',
      );
      return true;
    });
  });

  it('takes as a payout wallet only an address with no account yet or a System-owned one', async () => {
    assert.equal(await chain.receivingProblem(Keypair.generate().publicKey.toBase58()), undefined, 'no account yet');
    assert.equal(await chain.receivingProblem(payer.publicKey.toBase58()), undefined, 'a funded wallet');
    const tokenAccount = node.tokenAccount(payer.publicKey, 'USDT').toBase58();
    assert.equal(
      await chain.receivingProblem(tokenAccount),
      `${tokenAccount} is a token account on solana, not a wallet: give the wallet's own address (the owner of its token accounts)`,
    );
    assert.match((await chain.receivingProblem(USDT_MINT))!, /is a token mint on solana, not a wallet/);
    assert.match((await chain.receivingProblem(TOKEN_PROGRAM_ID.toBase58()))!, /is a program on solana/);
    assert.match(
      (await chain.receivingProblem(SYSVAR_CLOCK_PUBKEY.toBase58()))!,
      /is an account of the program Sysvar1111111111111111111111111111111111111 on solana/,
    );
  });

  it('refuses a Token-2022 mint or wrapped SOL as a token at start-up, in one line naming the variable', async () => {
    const token2022 = node.createToken2022Mint().toBase58();
    const open = (mint: string) =>
      SolanaChain.open({ rpcUrl: node.url, keyring, tokens: [{ symbol: 'PYUSD', mint, decimals: 6 }] });
    await assert.rejects(open(token2022), {
      message: `CHAIN_SOLANA_TOKENS: PYUSD's mint ${token2022} is a Token-2022 mint; only SPL Token mints are supported`,
    });
    await assert.rejects(open('So11111111111111111111111111111111111111112'), {
      message:
        "CHAIN_SOLANA_TOKENS: PYUSD's mint So11111111111111111111111111111111111111112 is wrapped SOL, which is not taken: SOL payments are taken as SOL",
    });
  });

  it('refuses a token account or a mint as the treasury at start-up, in one line naming the variable', async () => {
    await assert.rejects(SolanaChain.open({ rpcUrl: node.url, keyring, treasury: USDT_MINT }), {
      message: `CHAIN_SOLANA_TREASURY: ${USDT_MINT} is a token mint on solana, not a wallet: give the wallet's own address (the owner of its token accounts)`,
    });
  });

  it('reads SOL and token payments from balances, whichever program moved them', async () => {
    const deposit = keyring.deriveDepositKey('solana', 11).address;
    const sol = await node.sendSol(payer, deposit, 123_456_789n);
    const usdt = await node.sendToken(payer, deposit, 'USDT', 42_000_000n);
    // The Token program pays SOL too: a closed token account's rent goes to its destination.
    const spare = Keypair.generate();
    await node.airdrop(spare.publicKey, 100_000_000n);
    await node.mintTokens(spare.publicKey, 'USDT', 0n);
    await node.mine();
    const spareAccount = node.tokenAccount(spare.publicKey, 'USDT');
    const rent = await node.balance(spareAccount);
    const closed = await node.send(
      [createCloseAccountInstruction(spareAccount, new PublicKey(deposit), spare.publicKey)],
      [spare],
    );
    await node.mine();
    const head = await chain.head();
    const found = [];
    for (let slot = head.height - 1; slot <= head.height; slot++) found.push(...(await chain.block(slot))!.transfers);
    const toDeposit = found.filter((t) => t.to === deposit);
    assert.deepEqual(
      toDeposit.map(({ txHash, token, amount }) => ({ txHash, token, amount })),
      [
        { txHash: sol, token: 'SOL', amount: 123_456_789n },
        { txHash: usdt, token: 'USDT', amount: 42_000_000n },
        { txHash: closed, token: 'SOL', amount: rent },
      ],
    );
    assert.ok(toDeposit[1]!.index >= TOKEN_INDEX_OFFSET, 'a token payment never shares an index with a SOL one');
  });

  it('keeps lamports and token amounts exact beyond 2^53, and skips failed transactions', () => {
    const text = `{"transactions":[
      {"meta":{"err":null,"fee":5000,"preBalances":[9007199254740993000,0],"postBalances":[9007199254740992995,5],
        "logMessages":["Program log: \\"preBalances\\":[12345678901234567890], \\"fee\\": 12345678901234567890"],
        "preTokenBalances":[],"postTokenBalances":[{"accountIndex":1,"mint":"${USDT_MINT}","owner":"Own1111111111111111111111111111111111111111",
        "uiTokenAmount":{"amount":"18446744073709551615","decimals":6,"uiAmount":1.8446744073709552e13,"uiAmountString":"18446744073709.551615"}}]},
       "transaction":{"signatures":["sig1"],"message":{"accountKeys":["A","B"],"recentBlockhash":"h"}}},
      {"meta":{"err":{"InstructionError":[0,{"Custom":1}]},"fee":5000,"preBalances":[10,0],"postBalances":[5,5]},
       "transaction":{"signatures":["sig2"],"message":{"accountKeys":["A","C"],"recentBlockhash":"h"}}}]}`;
    const parsed = parseRpcJson<{ transactions: { meta: { logMessages: string[] } }[] }>(text);
    // Text inside a string is left alone, even when it looks like a balance.
    assert.equal(
      parsed.transactions[0]!.meta.logMessages[0],
      'Program log: "preBalances":[12345678901234567890], "fee": 12345678901234567890',
    );
    const transfers = parseSolanaBlock(parsed as never, [{ symbol: 'USDT', mint: USDT_MINT, decimals: 6 }]);
    assert.deepEqual(transfers, [
      { txHash: 'sig1', index: 1, to: 'B', token: 'SOL', amount: 5n },
      {
        txHash: 'sig1',
        index: TOKEN_INDEX_OFFSET + 1,
        to: 'Own1111111111111111111111111111111111111111',
        token: 'USDT',
        amount: 18446744073709551615n,
      },
    ]);
  });

  it('gives a skipped slot the hash of the block before it, and waits when no later block exists yet', async () => {
    await node.mine();
    node.skip(2);
    const before = await chain.head();
    const last = await chain.block(before.height);
    assert.equal(await chain.block(before.height + 1), undefined, 'no block after it yet: not decided');
    await node.mine();
    const skipped = await chain.block(before.height + 1);
    assert.deepEqual([skipped!.hash, skipped!.parentHash, skipped!.transfers], [last!.hash, last!.hash, []]);
    const next = await chain.block(before.height + 3);
    assert.equal(next!.parentHash, last!.hash);
  });

  it('reads a payment after skipped slots at the confirmed slot, without waiting for them to be finalized', async () => {
    const deposit = keyring.deriveDepositKey('solana', 20).address;
    await node.mine();
    const before = node.headSlot;
    node.skip(4);
    await node.sendSol(payer, deposit, 3_000_000n);
    await node.mine();
    const paidAt = node.headSlot;
    const { finalized } = await chain.head();
    assert.ok(finalized! < before, 'nothing here is finalized yet');
    const last = await chain.block(before);
    for (let slot = before + 1; slot < paidAt; slot++) {
      const skipped = await chain.block(slot);
      assert.deepEqual([skipped?.hash, skipped?.transfers], [last!.hash, []], `slot ${slot} is skipped`);
    }
    const paid = await chain.block(paidAt);
    assert.equal(paid!.parentHash, last!.hash);
    assert.deepEqual(
      paid!.transfers.filter((t) => t.to === deposit).map((t) => t.amount),
      [3_000_000n],
    );
  });

  it('reads the same payments from a block\'s accounts and balances alone (transactionDetails "accounts") as from the full block', async () => {
    const owner = keyring.deriveDepositKey('solana', 27).address;
    await node.sendSol(payer, owner, 2_000_000n);
    await node.sendToken(payer, owner, 'USDT', 3_000_000n);
    await node.mine();
    const read = async (transactionDetails: string) =>
      (
        await rpc(node, 'getBlock', [
          node.headSlot,
          { commitment: 'confirmed', encoding: 'json', transactionDetails, maxSupportedTransactionVersion: 0 },
        ])
      ).result;
    const tokens = [{ symbol: 'USDT', mint: USDT_MINT, decimals: 6 }];
    const full = parseSolanaBlock(await read('full'), tokens);
    const accounts = await read('accounts');
    assert.equal(accounts.transactions[0].transaction.message, undefined, 'no message, no instructions');
    assert.deepEqual(parseSolanaBlock(accounts, tokens), full);
    assert.deepEqual(
      full.filter((t) => t.to === owner).map((t) => [t.token, t.amount]),
      [
        ['SOL', 2_000_000n],
        ['USDT', 3_000_000n],
      ],
    );
  });

  it('checks a block it read before by its hash alone, and fetches only what changed', async () => {
    await node.mine();
    const slot = node.headSlot;
    const first = await chain.block(slot);
    const calls = node.calls.length;
    assert.equal(await chain.block(slot), first, 'the same block');
    assert.deepEqual(
      node.calls.slice(calls),
      ['getBlocks', 'getBlock'],
      'a listing and a header: the hash check reads no transactions',
    );
  });

  it('sees a dropped block as another hash at its slot, its payment gone', async () => {
    const deposit = keyring.deriveDepositKey('solana', 12).address;
    await node.sendSol(payer, deposit, 7_000_000n);
    await node.mine();
    const slot = node.headSlot;
    const held = await chain.block(slot);
    assert.equal(held!.transfers.filter((t) => t.to === deposit).length, 1);
    node.drop(1);
    await node.mine();
    const now = await chain.block(slot);
    assert.notEqual(now!.hash, held!.hash);
    assert.deepEqual(now!.transfers, []);
    assert.equal(await node.balance(deposit), 0n, 'the fork undid the transfer');
  });

  it('sweeps SOL: payout, the fee back to the fee wallet that paid it, the platform fee to the treasury; nothing left', async () => {
    const index = 13;
    const deposit = keyring.deriveDepositKey('solana', index).address;
    await node.sendSol(payer, deposit, 250_000_000n);
    await node.mine();
    const merchant = Keypair.generate().publicKey.toBase58();
    const [feeBefore, treasuryBefore] = [await node.balance(chain.feeWallet), await node.balance(chain.treasury)];
    const network = chain.networkFee('SOL');
    assert.equal(network, 10_000n);
    const payout = 250_000_000n - 2_500_000n - network;
    const sweep = await chain.prepareTransfer({
      from: { address: deposit, derivationIndex: index },
      to: merchant,
      token: 'SOL',
      amount: payout,
      reference: 'sol-sweep',
      fees: { platform: 2_500_000n, network },
    });
    assert.deepEqual(
      await chain.prepareTransfer({
        from: { address: deposit, derivationIndex: index },
        to: merchant,
        token: 'SOL',
        amount: payout,
        reference: 'sol-sweep',
      }),
      sweep,
    );
    await chain.broadcast(sweep);
    await chain.broadcast(sweep); // sent again after a crash: not an error
    await node.mine();
    assert.equal(await node.balance(merchant), payout);
    assert.equal(await node.balance(deposit), 0n);
    assert.equal(node.feeOf(sweep.txHash), network);
    assert.equal(await node.balance(chain.feeWallet), feeBefore, 'the fee wallet paid the fee and got it back');
    assert.equal((await node.balance(chain.treasury)) - treasuryBefore, 2_500_000n);
    assert.deepEqual(await chain.transactionStatus(sweep.txHash), { blockNumber: node.headSlot, confirmations: 1 });
    await node.mine(40);
    const final = await chain.transactionStatus(sweep.txHash);
    assert.ok(final!.confirmations >= 32, 'finalized: its full depth');
  });

  it("sweeps a token: the merchant's account created, payout and fee, the deposit's account closed with its rent to the treasury", async () => {
    const index = 14;
    const deposit = keyring.deriveDepositKey('solana', index).address;
    await node.sendToken(payer, deposit, 'USDT', 40_000_000n);
    await node.mine();
    const depositAccount = node.tokenAccount(deposit, 'USDT');
    const rent = await node.balance(depositAccount);
    const treasuryBefore = await node.balance(chain.treasury);
    assert.equal(chain.networkFee('USDT'), 0n, 'the fee wallet pays in SOL');
    await sweepFortyUsdt(index, 'usdt-sweep');
    assert.equal(await node.exists(depositAccount), false, 'closed');
    assert.equal((await node.balance(chain.treasury)) - treasuryBefore, rent, 'its rent went to the treasury');
    assert.equal(await node.balance(deposit), 0n, 'the deposit address never held SOL');
  });

  it('sweeps SOL on a fresh deployment: a platform fee that would leave the empty treasury under rent goes to the fee wallet', async () => {
    const treasury = Keypair.generate().publicKey.toBase58(); // never funded
    const fresh = await SolanaChain.open({ rpcUrl: node.url, keyring, treasury });
    try {
      const sweep = async (index: number, reference: string) => {
        const deposit = keyring.deriveDepositKey('solana', index).address;
        await node.sendSol(payer, deposit, 5_000_000n);
        await node.mine();
        const payout = { token: 'SOL', amount: 4_940_000n, platform: 50_000n, network: 10_000n };
        const merchant = await sweepToNewMerchant(fresh, index, payout, reference);
        assert.equal(await node.balance(merchant), 4_940_000n);
        assert.equal(await node.balance(deposit), 0n);
      };
      const feeBefore = await node.balance(fresh.feeWallet);
      await sweep(17, 'fresh-treasury');
      assert.equal(await node.balance(treasury), 0n, 'under 890,880 lamports the runtime refuses it');
      assert.equal((await node.balance(fresh.feeWallet)) - feeBefore, 50_000n, 'the fee wallet keeps the platform fee');

      // Once the treasury holds its rent-exempt minimum, the platform fee goes to it again.
      await node.airdrop(treasury, 890_880n);
      await node.mine();
      await sweep(18, 'funded-treasury');
      assert.equal(await node.balance(treasury), 890_880n + 50_000n);
    } finally {
      fresh.close();
    }
  });

  it('sweeps SOL paid late as well: the merchant its net, the treasury the platform fee; the late payment stays, refundable from the deposit', async () => {
    const index = 45;
    const deposit = keyring.deriveDepositKey('solana', index).address;
    // 250,000,000 counted by the invoice, 7,000,000 more after its deadline: the customer's (refunds.md).
    await node.sendSol(payer, deposit, 250_000_000n);
    await node.sendSol(payer, deposit, 7_000_000n);
    await node.mine();
    const [feeBefore, treasuryBefore] = [await node.balance(chain.feeWallet), await node.balance(chain.treasury)];
    const payout = {
      token: 'SOL',
      amount: 250_000_000n - 2_500_000n - 10_000n,
      platform: 2_500_000n,
      network: 10_000n,
    };
    const merchant = await sweepToNewMerchant(chain, index, payout, 'sol-sweep-late');
    assert.equal(await node.balance(merchant), payout.amount);
    assert.equal((await node.balance(chain.treasury)) - treasuryBefore, 2_500_000n, 'the platform fee, no more');
    assert.equal(await node.balance(chain.feeWallet), feeBefore, 'the fee wallet paid the fee and got it back');
    assert.equal(await node.balance(deposit), 7_000_000n, 'the late payment stays on the deposit');

    // Refunded from the deposit: the customer gets it less the refund's fee, and the deposit is left empty.
    const customer = Keypair.generate().publicKey.toBase58();
    const refund = await chain.prepareTransfer({
      from: { address: deposit, derivationIndex: index },
      to: customer,
      token: 'SOL',
      amount: 7_000_000n - 10_000n,
      reference: `refund/r45/1/${customer}/6990000`,
      fees: { platform: 0n, network: 10_000n },
      payout: 'refund',
    });
    await chain.broadcast(refund);
    await node.mine();
    assert.equal(await node.balance(customer), 6_990_000n);
    assert.equal(await node.balance(deposit), 0n);
  });

  it('refuses, to be tried again, a SOL sweep that would leave a late payment under the rent-exempt minimum: never giving it away', async () => {
    const index = 46;
    const deposit = keyring.deriveDepositKey('solana', index).address;
    await node.sendSol(payer, deposit, 50_000_000n);
    await node.sendSol(payer, deposit, 500_000n); // late, and less than an account may keep
    await node.mine();
    const sweep = chain.prepareTransfer({
      from: { address: deposit, derivationIndex: index },
      to: Keypair.generate().publicKey.toBase58(),
      token: 'SOL',
      amount: 50_000_000n - 500_000n - 10_000n,
      reference: 'sol-sweep-late-under-rent',
      fees: { platform: 500_000n, network: 10_000n },
    });
    await assert.rejects(sweep, (error: Error) => {
      assert.ok(error instanceof TransactionRejectedError, 'not for good: a refund of the late payment unblocks it');
      assert.match(error.message, /leaves it 500000: under the rent-exempt minimum of 890880/);
      return true;
    });
    assert.equal(await node.balance(deposit), 50_500_000n, 'nothing moved');
  });

  it("sweeps a token paid late as well: the late tokens stay in the deposit's account, left open, refundable from it", async () => {
    const index = 47;
    const deposit = keyring.deriveDepositKey('solana', index).address;
    await node.sendToken(payer, deposit, 'USDT', 40_000_000n);
    await node.sendToken(payer, deposit, 'USDT', 5_000_000n); // after the deadline
    await node.mine();
    const depositAccount = node.tokenAccount(deposit, 'USDT');
    await sweepFortyUsdt(index, 'usdt-sweep-late');
    assert.equal(await node.tokenBalance(deposit, 'USDT'), 5_000_000n, 'the late payment stays');
    assert.equal(await node.exists(depositAccount), true, 'in its account, not closed');

    const customer = Keypair.generate().publicKey.toBase58();
    const refund = await chain.prepareTransfer({
      from: { address: deposit, derivationIndex: index },
      to: customer,
      token: 'USDT',
      amount: 5_000_000n,
      reference: `refund/r47/1/${customer}/5000000`,
      fees: { platform: 0n, network: 0n },
      payout: 'refund',
    });
    await chain.broadcast(refund);
    await node.mine();
    assert.equal(await node.tokenBalance(customer, 'USDT'), 5_000_000n);
    assert.equal(await node.tokenBalance(deposit, 'USDT'), 0n);
  });

  it('sweeps every token account the deposit owns, as detection counts them all, and closes them', async () => {
    const index = 19;
    const deposit = keyring.deriveDepositKey('solana', index).address;
    // 10 USDT to its associated account, 30 to an account a wallet created for it under another address.
    await node.sendToken(payer, deposit, 'USDT', 10_000_000n);
    const { account: other } = await node.sendTokenToNewAccount(payer, deposit, 'USDT', 30_000_000n);
    await node.mine();
    const counted = (await chain.block(node.headSlot))!.transfers.filter((t) => t.to === deposit);
    assert.deepEqual(
      counted.map((t) => t.amount),
      [10_000_000n, 30_000_000n],
      'detection counts both',
    );
    await sweepFortyUsdt(index, 'two-token-accounts');
    assert.equal(await node.exists(other), false, 'the other account is closed');
    assert.equal(await node.exists(node.tokenAccount(deposit, 'USDT')), false, 'the associated account is closed');
  });

  it('declares a sweep refused only once the finalized chain is past its last valid height without it', async () => {
    const { deposit, sweep } = await paidSolSweep(15, 50_000_000n, 40_000_000n, 'lost-sweep');
    // Never sent (the process died before), and now its blockhash is too old.
    await node.mine(200);
    const refused = () => chain.broadcast(sweep);
    // The head is past it but the finalized chain is not: the outcome is not decided yet.
    node.finalizedLag = 150;
    await assert.rejects(refused(), (error: Error) => !(error instanceof TransactionRejectedError));
    node.finalizedLag = 32;
    await assert.rejects(refused(), TransactionRejectedError);
    assert.equal(await node.balance(deposit), 50_000_000n, 'nothing moved');
  });

  it('replaces an expired sweep whose deposit was paid again meanwhile: the merchant is paid once, the new payment stays', async () => {
    const { deposit, merchant, sweep } = await paidSolSweep(48, 50_000_000n, 40_000_000n, 'paid-again-1');
    // Sent and dropped under congestion (never landed); the customer pays again before it expires.
    await node.sendSol(payer, deposit, 3_000_000n);
    await node.mine(200);
    // Past its last valid height, unknown to the status cache that covers every block it could have landed in.
    await assert.rejects(chain.broadcast(sweep), TransactionRejectedError);
    const again = await chain.prepareTransfer({
      from: { address: deposit, derivationIndex: 48 },
      to: merchant,
      token: 'SOL',
      amount: 40_000_000n,
      reference: 'paid-again-2',
      fees: { platform: 500_000n, network: 10_000n },
    });
    await chain.broadcast(again);
    await node.mine();
    assert.equal(node.findTransaction(sweep.txHash), undefined);
    assert.deepEqual(node.paymentsTo(merchant), [{ signature: again.txHash, amount: 40_000_000n }]);
    assert.equal(await node.balance(deposit), 50_000_000n - 40_000_000n - 500_000n - 10_000n + 3_000_000n);
  });

  it('never declares a landed sweep expired through a lagging backend: the merchant is paid once', async () => {
    const { merchant, sweep } = await paidSolSweep(21, 50_000_000n, 40_000_000n, 'late-landing');
    // It lands in the last block its blockhash allows (the blockhash is of the finalized block, 32 behind).
    await node.mine(150 - 32 - 1);
    await chain.broadcast(sweep);
    await node.mine();
    const landedAt = node.headSlot;
    // The finalized chain is past its last valid height; a backend 40 slots behind has not seen it.
    await node.mine(36);
    const finalized = (await rpc(node, 'getSlot', [{ commitment: 'finalized' }])).result as number;
    assert.ok(finalized > landedAt && node.headSlot - 40 < landedAt);
    node.lagging = true;
    try {
      for (let i = 0; i < 40; i++) {
        await chain.broadcast(sweep).catch((error: Error) => {
          assert.ok(!(error instanceof TransactionRejectedError), `attempt ${i}: ${error.message}`);
        });
        await chain.transactionStatus(sweep.txHash);
      }
    } finally {
      node.lagging = false;
    }
    assert.deepEqual(node.paymentsTo(merchant), [{ signature: sweep.txHash, amount: 40_000_000n }]);
  });

  /** A refund wallet (derived like a deposit) holding 50,000,000 lamports, and its refunds of 0.01 SOL to one customer. */
  async function refundWallet(index: number) {
    const wallet = keyring.deriveDepositKey('solana', index).address;
    await node.sendSol(payer, wallet, 50_000_000n);
    await node.mine();
    const customer = Keypair.generate().publicKey.toBase58();
    const refund = (attempt: number) =>
      chain.prepareTransfer({
        from: { address: wallet, derivationIndex: index },
        to: customer,
        token: 'SOL',
        amount: 9_990_000n,
        reference: `refund/r${index}/${attempt}/${customer}/9990000`,
        fees: { platform: 0n, network: 10_000n },
        payout: 'refund',
      });
    return { wallet, customer, refund };
  }

  it('two payouts alike (payer, customer, amount, fee), on one blockhash, are two transactions: the customer is paid twice, SOL and USDT', async () => {
    const index = 45;
    const wallet = keyring.deriveDepositKey('solana', index).address;
    await node.sendSol(payer, wallet, 50_000_000n);
    await node.mintTokens(new PublicKey(wallet), 'USDT', 10_000_000n);
    await node.mine();
    const customer = Keypair.generate().publicKey.toBase58();
    // A quoted priority fee (2,000 lamports beyond the two signatures): the second's must not cost more.
    for (const [token, amount, network] of [
      ['SOL', 9_988_000n, 12_000n],
      ['USDT', 3_000_000n, 0n],
    ] as const) {
      const refund = (id: string, othersPrepared?: string[]) =>
        chain.prepareTransfer({
          from: { address: wallet, derivationIndex: index },
          to: customer,
          token,
          amount,
          reference: `refund/${token}${id}/1/${customer}/${amount}`,
          fees: { platform: 0n, network },
          payout: 'refund',
          ...(othersPrepared && { othersPrepared }),
        });
      // Each told of the others' recorded transactions, as the refund engine does.
      const first = await refund('A');
      const second = await refund('B', [first.raw]);
      const third = await refund('C', [first.raw, second.raw]);
      assert.equal(new Set([first.txHash, second.txHash, third.txHash]).size, 3, `${token}: three transactions`);
      for (const p of [first, second, third]) await chain.broadcast(p);
      await node.mine();
      const paid = token === 'SOL' ? node.paymentsTo(customer) : [];
      if (token === 'SOL') {
        assert.deepEqual(
          paid.map((p) => p.amount),
          [amount, amount, amount],
        );
        for (const p of [first, second, third]) assert.ok(node.feeOf(p.txHash) <= network, 'never more than quoted');
      } else assert.equal(await node.tokenBalance(customer, 'USDT'), 3n * amount);
    }
  });

  it('replaces an expired refund whose payer the merchant funded again meanwhile: the customer is paid once', async () => {
    const { wallet, customer, refund } = await refundWallet(43);
    const first = await refund(1);
    // Never sent (the process died before); meanwhile the merchant funds the refund wallet again.
    await node.sendSol(payer, wallet, 5_000_000n);
    await node.mine(200);
    // Past its last valid height, unknown to the status cache that covers every block it could have landed in.
    await assert.rejects(chain.broadcast(first), TransactionRejectedError);
    const second = await refund(2);
    await chain.broadcast(second);
    await node.mine();
    assert.equal(node.findTransaction(first.txHash), undefined);
    assert.deepEqual(node.paymentsTo(customer), [{ signature: second.txHash, amount: 9_990_000n }]);
    assert.equal(await node.balance(wallet), 55_000_000n - 10_000_000n);
  });

  it('a re-send refused in preflight (a lagging backend without the funding) waits for the expiry evidence: the customer is paid once', async () => {
    // agave rpc.rs send_transaction simulates on the answering backend's bank at preflightCommitment and answers
    // -32002 before forwarding: a backend 128 slots behind, without the refund wallet's funding, refuses a
    // re-send of a transaction an up-to-date one took. (The test node's lagging backend runs preflight on the
    // current state: its answer is staged.)
    const laggingPreflight = {
      code: -32002,
      message: 'Transaction simulation failed: Attempt to debit an account but found no record of a prior credit.',
    };
    const notRefused = (error: Error) => !(error instanceof TransactionRejectedError);
    const { customer, refund } = await refundWallet(46);
    const sent = await refund(1);
    await chain.broadcast(sent); // taken, not landed yet
    node.failNextSends.push(laggingPreflight);
    await assert.rejects(chain.broadcast(sent), notRefused);
    await node.mine();
    await chain.broadcast(sent);
    assert.deepEqual(node.paymentsTo(customer), [{ signature: sent.txHash, amount: 9_990_000n }]);

    // Sent before a restart: the new process does not know it was sent, nor that it was not.
    const beforeRestart = await refundWallet(48);
    const recorded = await beforeRestart.refund(1);
    await chain.broadcast(recorded);
    const restarted = await SolanaChain.open({ rpcUrl: node.url, keyring, pollMs: 50 });
    try {
      node.failNextSends.push(laggingPreflight);
      await assert.rejects(restarted.broadcast(recorded), notRefused);
      await node.mine();
      await restarted.broadcast(recorded);
    } finally {
      restarted.close();
    }
    assert.deepEqual(node.paymentsTo(beforeRestart.customer), [{ signature: recorded.txHash, amount: 9_990_000n }]);

    // Taken and then never scheduled (a bid below what others pay): refused only once expired and unknown.
    const other = await refundWallet(47);
    const dropped = await other.refund(1);
    node.congestionFee = 1;
    try {
      await chain.broadcast(dropped);
      await node.mine();
    } finally {
      node.congestionFee = 0;
    }
    node.failNextSends.push(laggingPreflight);
    await assert.rejects(chain.broadcast(dropped), notRefused);
    await node.mine(200);
    node.failNextSends.push(laggingPreflight);
    await assert.rejects(chain.broadcast(dropped), TransactionRejectedError);
    assert.deepEqual(node.paymentsTo(other.customer), []);
  });

  it('never replaces a landed refund past the status cache of a node without history, its payer moved since', async () => {
    const { wallet, customer, refund } = await refundWallet(44);
    const landed = await refund(1);
    await chain.broadcast(landed);
    await node.mine();
    await node.sendSol(payer, wallet, 5_000_000n);
    await node.mine(400);
    // Such a node knows no signature older than its status cache: "unknown" proves nothing, and the balance moved.
    node.transactionHistory = false;
    try {
      await assert.rejects(chain.broadcast(landed), (error: Error) => {
        assert.ok(!(error instanceof TransactionRejectedError));
        // Said as it is, for the operator (the failure's reason), not as the node's "Blockhash not found".
        assert.match(error.message, /expired .* no longer says whether it landed: past its status cache/);
        assert.match(error.message, new RegExp(`${wallet} held 50000000 before it and 45000000 now`));
        return true;
      });
    } finally {
      node.transactionHistory = true;
    }
    assert.deepEqual(node.paymentsTo(customer), [{ signature: landed.txHash, amount: 9_990_000n }]);
  });

  it('never replaces a dropped sweep past the status cache of a node without history, its deposit paid again: says so', async () => {
    const { deposit, merchant, sweep } = await paidSolSweep(62, 50_000_000n, 40_000_000n, 'dropped-late');
    // Never landed; the customer pays again, and the service looks again only long after it expired.
    await node.sendSol(payer, deposit, 3_000_000n);
    await node.mine(400);
    node.transactionHistory = false;
    try {
      await assert.rejects(chain.broadcast(sweep), (error: Error) => {
        assert.ok(!(error instanceof TransactionRejectedError), 'it may have landed: never replaced on this');
        assert.match(error.message, /no longer says whether it landed/);
        return true;
      });
    } finally {
      node.transactionHistory = true;
    }
    assert.deepEqual(node.paymentsTo(merchant), []);
  });

  it('counts a sweep as on the chain only once confirmed: processed is not enough', async () => {
    const { sweep } = await paidSolSweep(22, 5_000_000n, 4_000_000n, 'processed');
    await chain.broadcast(sweep);
    const status = await rpc(node, 'getSignatureStatuses', [[sweep.txHash]]);
    assert.equal(status.result.value[0].confirmationStatus, 'processed');
    assert.equal(await chain.transactionStatus(sweep.txHash), undefined);
    await chain.broadcast(sweep); // sent again: already processed, not an error
    await node.mine();
    assert.ok(await chain.transactionStatus(sweep.txHash));
  });

  it('refuses a SOL payout that would leave a new wallet under the rent-exempt minimum, for good', async () => {
    await assert.rejects(paidSolSweep(23, 1_000_000n, 800_000n, 'under-rent'), (error: Error) => {
      assert.ok(error instanceof PayoutRefusedError);
      assert.equal(error.reason, 'fees_exceed_amount');
      assert.match(error.message, /under the rent-exempt minimum of 890880/);
      return true;
    });
  });

  it('leaves the outcome open when the RPC is behind, and sends the same transaction next time', async () => {
    node.failNextSends.push({ code: -32005, message: 'Node is behind by 42 slots' });
    const { sweep } = await paidSolSweep(16, 5_000_000n, 1_000_000n, 'behind');
    await assert.rejects(
      chain.broadcast(sweep),
      (error: Error) => !(error instanceof TransactionRejectedError) && /behind/.test(error.message),
    );
    await chain.broadcast(sweep);
    await node.mine();
    assert.ok(await chain.transactionStatus(sweep.txHash));
  });

  it('bids the recent priority fee under congestion, quoted in the SOL network fee: sweeps land, a sweep without it never does', async () => {
    node.congestionFee = 50_000; // micro-lamports per compute unit
    await node.mine(150);
    const congested = await SolanaChain.open({ rpcUrl: node.url, keyring });
    try {
      const network = congested.networkFee('SOL');
      assert.equal(network, 10_000n + 50n, 'two signatures, and 1,000 units at 50,000 micro-lamports');
      const feeBefore = await node.balance(congested.feeWallet);
      const solPayout = { token: 'SOL', amount: 4_000_000n, platform: 50_000n, network };
      const deposit = keyring.deriveDepositKey('solana', 24).address;
      await node.sendSol(payer, deposit, solPayout.amount + solPayout.platform + network);
      await node.mine();
      const merchant = await sweepToNewMerchant(congested, 24, solPayout, 'congested-sol');
      assert.equal(await node.balance(merchant), 4_000_000n);
      const [sweep] = node.paymentsTo(merchant);
      assert.equal(node.feeOf(sweep!.signature), network, 'the runtime charged exactly the quoted fee');
      assert.equal(await node.balance(congested.feeWallet), feeBefore, 'and the fee wallet got it back');

      await node.mintTokens(keyring.deriveDepositKey('solana', 25).address, 'USDT', 40_000_000n);
      await node.mine();
      const tokenPayout = { token: 'USDT', amount: 39_600_000n, platform: 400_000n, network: 0n };
      const tokenMerchant = await sweepToNewMerchant(congested, 25, tokenPayout, 'congested-usdt');
      assert.equal(await node.tokenBalance(tokenMerchant, 'USDT'), 39_600_000n);

      // Quoted before the congestion: no priority fee, and no leader schedules it.
      const { sweep: unpriced } = await paidSolSweep(26, 5_000_000n, 4_000_000n, 'unpriced');
      await chain.broadcast(unpriced);
      await node.mine();
      assert.equal(await chain.transactionStatus(unpriced.txHash), undefined);
    } finally {
      congested.close();
      node.congestionFee = 0;
    }
  });

  it('refunds SOL under congestion: the payout and the quoted fee, priority included, back to the fee wallet; the rest stays', async () => {
    node.congestionFee = 50_000;
    await node.mine(150);
    const congested = await SolanaChain.open({ rpcUrl: node.url, keyring });
    try {
      const network = congested.networkFee('SOL', 'refund');
      assert.equal(network, 10_000n + 50n, 'the same two signatures and 1,000 units as a sweep');
      const deposit = keyring.deriveDepositKey('solana', 40).address;
      await node.sendSol(payer, deposit, 50_000_000n);
      await node.mine();
      const customer = Keypair.generate().publicKey.toBase58();
      const feeBefore = await node.balance(congested.feeWallet);
      const refund = await congested.prepareTransfer({
        from: { address: deposit, derivationIndex: 40 },
        to: customer,
        token: 'SOL',
        amount: 10_000_000n - network,
        reference: `refund/r40/1/${customer}/${10_000_000n - network}`,
        fees: { platform: 0n, network },
        payout: 'refund',
      });
      await congested.broadcast(refund);
      await node.mine();
      assert.equal(await node.balance(customer), 10_000_000n - network);
      assert.equal(node.feeOf(refund.txHash), network, 'the runtime charged exactly the quoted fee');
      assert.equal(await node.balance(congested.feeWallet), feeBefore, 'and the fee wallet got it back');
      assert.equal(await node.balance(deposit), 40_000_000n, 'nothing to the treasury: the rest stays');
    } finally {
      congested.close();
      node.congestionFee = 0;
    }
  });

  /** A SOL refund from the address at derivation `index` to `customer`, its fee two signatures; amount to be given. */
  const solRefund = (index: number, customer: string) => ({
    from: { address: keyring.deriveDepositKey('solana', index).address, derivationIndex: index },
    to: customer,
    token: 'SOL',
    fees: { platform: 0n, network: 10_000n },
    payout: 'refund' as const,
  });

  it('refuses, for good, a SOL refund that would leave its payer under the rent-exempt minimum', async () => {
    const deposit = keyring.deriveDepositKey('solana', 41).address;
    await node.sendSol(payer, deposit, 10_500_000n);
    await node.mine();
    const customer = Keypair.generate().publicKey.toBase58();
    const refund = solRefund(41, customer);
    await assert.rejects(
      chain.prepareTransfer({ ...refund, amount: 9_990_000n, reference: `refund/r41/1/${customer}/9990000` }),
      (error: Error) => {
        assert.ok(error instanceof PayoutRefusedError);
        assert.equal(error.reason, 'fees_exceed_amount');
        assert.match(error.message, /leaves it 500000: under the rent-exempt minimum of 890880/);
        return true;
      },
    );
    // All of it is taken: the payer is left with nothing, which the runtime allows.
    const whole = await chain.prepareTransfer({
      ...refund,
      amount: 10_490_000n,
      reference: `refund/r41/2/${customer}/10490000`,
    });
    await chain.broadcast(whole);
    await node.mine();
    assert.equal(await node.balance(customer), 10_490_000n);
    assert.equal(await node.balance(deposit), 0n);
  });

  it('pays a refund from a deposit that a later payment leaves under the rent-exempt minimum: the fee wallet tops it up to the minimum', async () => {
    const deposit = keyring.deriveDepositKey('solana', 61).address;
    await node.sendSol(payer, deposit, 10_500_000n);
    await node.mine();
    const customer = Keypair.generate().publicKey.toBase58();
    // Approved when it took the deposit whole (leaving 0, which the runtime allows); then the customer pays again.
    await node.sendSol(payer, deposit, 500_000n);
    await node.mine();
    const rentExempt = BigInt((await rpc(node, 'getMinimumBalanceForRentExemption', [0])).result);
    const feeWalletBefore = await node.balance(chain.feeWallet);
    // From a deposit: its fee exact, the rest being the settlement's (commands/refunds.ts).
    const refund = await chain.prepareTransfer({
      ...solRefund(61, customer),
      amount: 10_490_000n,
      reference: `refund/r61/1/${customer}/10490000`,
      exactNetworkFee: true,
    });
    await chain.broadcast(refund);
    await node.mine();
    assert.deepEqual(node.paymentsTo(customer), [{ signature: refund.txHash, amount: 10_490_000n }]);
    // The late payment stays, refundable; the fee wallet paid the rest of the minimum, as it pays a token account's rent.
    assert.equal(await node.balance(deposit), rentExempt);
    assert.equal(feeWalletBefore - (await node.balance(chain.feeWallet)), rentExempt - 500_000n);
  });
});
