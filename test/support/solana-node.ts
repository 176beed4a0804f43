// A Solana test node: the real Solana runtime (litesvm: the Agave SVM with
// the real System, SPL Token and Associated Token Account programs, run in
// process) behind a JSON-RPC façade that answers the methods the
// adapter uses, shaped like a real RPC's answers.
//
// Shapes follow Solana's RPC documentation (solana.com/docs/rpc/http: the
// examples of getBlock, getTransaction, getSignatureStatuses, sendTransaction,
// getLatestBlockhash, getTokenAccountBalance) and the error codes of the
// validator's JSON-RPC (agave rpc/src/custom_error.rs): -32002 for a failed
// preflight (with `data.err` and `data.logs`), -32003 for a bad signature,
// -32004 for a block not available at that commitment, -32007 for a skipped
// slot, -32602 for an invalid parameter.
//
// What it refuses as a validator would: a signature that does not verify
// (checked here with ed25519, then again by the bank), a blockhash it never
// issued or older than 150 blocks, a transaction already processed, and
// anything the runtime fails in preflight (insufficient funds, rent, a token
// account's owner or balance, a closing account that is not empty). Fees are
// the runtime's (5,000 lamports a signature), rent is the runtime's.
//
// Chain control: `mine()` seals the open slot as a block (every transaction
// sent since), `skip()` leaves slots without a block, `drop()` is a fork that
// takes the newest blocks back (their accounts are restored to what they were
// before), `confirmed` is the head and `finalized` lags it (32 slots unless
// set), as on a real cluster.
import { AsyncLocalStorage } from 'node:async_hooks';
import { createPublicKey, randomBytes, verify } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  ComputeBudgetProgram,
  Keypair,
  LAMPORTS_PER_SOL,
  PublicKey,
  SystemProgram,
  Transaction,
  VersionedTransaction,
  type TransactionInstruction,
} from '@solana/web3.js';
import {
  ACCOUNT_SIZE,
  MINT_SIZE,
  MintLayout,
  TOKEN_2022_PROGRAM_ID,
  TOKEN_PROGRAM_ID,
  createAssociatedTokenAccountIdempotentInstruction,
  createInitializeAccount3Instruction,
  createMintToInstruction,
  createTransferCheckedInstruction,
  getAssociatedTokenAddressSync,
  unpackAccount,
  unpackMint,
} from '@solana/spl-token';
import bs58 from 'bs58';
import { address as kitAddress, getTransactionDecoder, lamports as kitLamports } from '@solana/kit';
import { FailedTransactionMetadata, LiteSVM } from 'litesvm';
import {
  LAMPORTS_PER_SIGNATURE,
  MAX_SIGNATURE_STATUSES,
  type RpcBlock,
  type RpcTokenBalance,
  type RpcTransaction,
} from '../../adapters/chains/solana/index.ts';

/** Mainnet-beta's genesis hash: the node says it serves mainnet unless told otherwise. */
export const MAINNET_GENESIS = '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d';
/** A blockhash is valid for this many blocks after its own (MAX_PROCESSING_AGE). */
const MAX_BLOCKHASH_AGE = 150;
/**
 * Rooted blocks whose transactions the status cache still answers for, with
 * the unrooted ones (runtime status_cache.rs, MAX_CACHE_ENTRIES; purge_roots
 * drops the oldest root past it: roots are blocks, skipped slots count not).
 */
const STATUS_CACHE_ROOTS = 300;
/** How far behind a lagging backend is: providers keep backends up to 128 slots behind in rotation. */
const LAGGING_SLOTS = 40;
/** getBlocks' widest range (rpc-client-api request.rs). */
const MAX_GET_CONFIRMED_BLOCKS_RANGE = 500_000;

type AccountState = { lamports: bigint; data: Uint8Array; owner: PublicKey; executable: boolean } | null;

interface LedgerTransaction extends RpcTransaction {
  slot: number;
  /** The accounts as they were before it ran: a fork that drops it restores them. */
  before: Map<string, AccountState>;
}

interface LedgerBlock extends Omit<RpcBlock, 'transactions'> {
  slot: number;
  transactions: LedgerTransaction[];
}

/** What spl-token's unpack functions read. */
const asAccountInfo = (state: NonNullable<AccountState>) => ({
  ...state,
  lamports: Number(state.lamports),
  data: Buffer.from(state.data),
});

class RpcFailure extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

export interface SolanaTestNodeOptions {
  genesisHash?: string;
  /** Slots between the head and the finalized slot. */
  finalizedLag?: number;
  /** The token mints to create, by symbol; the node is their mint authority. */
  tokens?: { symbol: string; mint: string; decimals: number }[];
}

export class SolanaTestNode {
  readonly genesisHash: string;
  readonly faucet = Keypair.generate();
  readonly mintAuthority = Keypair.generate();
  readonly tokens: { symbol: string; mint: string; decimals: number }[];
  finalizedLag: number;
  url = '';
  /**
   * litesvm accepts only its latest blockhash; a validator takes any of the
   * last 150 blocks', so that age rule is this node's (in accept), with the
   * runtime's own check off.
   */
  private readonly svm = new LiteSVM().withBlockhashCheck(false);
  private server?: Server;
  private readonly blocks: LedgerBlock[] = [];
  private openSlot: LedgerTransaction[] = [];
  private slot = 1;
  /**
   * The accounts the Token program has owned, for getTokenAccountsByOwner:
   * litesvm cannot list accounts, and every token account here is made by a
   * transaction this node ran.
   */
  private readonly tokenProgramAccounts = new Set<string>();
  /** Every request, for tests that count calls. */
  readonly calls: string[] = [];
  /** The bytes of every answer, for the bench's bandwidth. */
  bytesServed = 0;
  /** A queue: the node refuses the next sendTransaction calls with these answers, then works again. */
  readonly failNextSends: { code: number; message: string }[] = [];
  /**
   * A load balancer in front of backends of which one lags: about one call in
   * four (a seeded sequence, the same every run) is answered by a backend
   * 40 slots behind, which knows neither the newest blocks nor their
   * transactions, and whose balances are as they were there.
   */
  lagging = false;
  /**
   * Whether the node keeps transaction history (`--enable-rpc-transaction-history`):
   * without it, getSignatureStatuses answers from the status cache alone,
   * searchTransactionHistory or not (agave rpc.rs get_signature_statuses:
   * the blockstore is searched only when `enable_rpc_transaction_history`).
   */
  transactionHistory = true;
  /**
   * What other users pay per compute unit now, in micro-lamports: each block
   * sealed meanwhile reports it as its lowest landed fee
   * (getRecentPrioritizationFees), and a transaction bidding less is never
   * scheduled (it is taken, then expires unseen).
   */
  congestionFee = 0;
  /**
   * Seconds the blocks sealed from now on are stamped ahead of the wall clock
   * (their blockTime), to follow a service whose business clock was moved on:
   * a payment is late by its block's time.
   */
  clockAheadSeconds = 0;
  private readonly blockFees = new Map<number, number>();
  private laggingDraw = 0x2545f491;
  /** The slots behind of the backend answering the current call. */
  private readonly backend = new AsyncLocalStorage<number>();

  constructor(options: SolanaTestNodeOptions = {}) {
    this.genesisHash = options.genesisHash ?? MAINNET_GENESIS;
    this.finalizedLag = options.finalizedLag ?? 32;
    this.tokens = options.tokens ?? [];
  }

  async start(): Promise<this> {
    const mints = this.tokens.map((t) => ({
      address: new PublicKey(t.mint),
      info: this.mintAccount(t.decimals, TOKEN_PROGRAM_ID),
    }));
    const rich = {
      lamports: BigInt(1_000_000 * LAMPORTS_PER_SOL),
      data: new Uint8Array(),
      owner: SystemProgram.programId,
      executable: false,
    };
    this.setAccount(this.faucet.publicKey, rich);
    this.setAccount(this.mintAuthority.publicKey, rich);
    for (const { address, info } of mints) this.setAccount(address, info);
    this.slot = Number(this.svm.getClock().slot);
    this.mine(); // the first block, whose hash the first transactions name
    this.server = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
      request.on('end', async () => {
        const answer = await this.answer(body);
        this.bytesServed += Buffer.byteLength(answer);
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(answer);
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server?.closeAllConnections();
  }

  /** A mint's account, this node its mint authority, owned by `program` (a Token-2022 mint without extensions has the same layout). */
  private mintAccount(decimals: number, program: PublicKey): NonNullable<AccountState> {
    const data = Buffer.alloc(MINT_SIZE);
    MintLayout.encode(
      {
        mintAuthorityOption: 1,
        mintAuthority: this.mintAuthority.publicKey,
        supply: 0n,
        decimals,
        isInitialized: true,
        freezeAuthorityOption: 0,
        freezeAuthority: PublicKey.default,
      },
      data,
    );
    return { lamports: 1_461_600n, data: Uint8Array.from(data), owner: program, executable: false };
  }

  /** A Token-2022 mint (PYUSD is one on mainnet), to show what the adapter refuses. */
  createToken2022Mint(decimals = 6): PublicKey {
    const mint = Keypair.generate().publicKey;
    this.setAccount(mint, this.mintAccount(decimals, TOKEN_2022_PROGRAM_ID));
    return mint;
  }

  // -------------------------------------------------------------------------
  // The chain
  // -------------------------------------------------------------------------

  private get headBlock(): LedgerBlock {
    return this.blocks[this.blocks.length - 1]!;
  }

  /**
   * The newest block at a commitment, as the backend answering sees it:
   * processed and confirmed are its head; finalized lags it.
   */
  private blockAt(commitment = 'finalized'): LedgerBlock {
    const head = this.headBlock.slot - (this.backend.getStore() ?? 0);
    const limit = commitment === 'finalized' ? head - this.finalizedLag : head;
    return [...this.blocks].reverse().find((b) => b.slot <= limit) ?? this.blocks[0]!;
  }

  /** Whether the next call goes to the lagging backend (xorshift32: one in four, the same sequence every run). */
  private drawLagging(): boolean {
    let x = this.laggingDraw;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.laggingDraw = x >>> 0;
    return this.lagging && this.laggingDraw % 4 === 0;
  }

  get headSlot(): number {
    return this.headBlock.slot;
  }

  /** Seals the open slot as a block (with the transactions sent since), `count` times. */
  mine(count = 1): void {
    for (let i = 0; i < count; i++) {
      const parent = this.blocks.length > 0 ? this.headBlock : undefined;
      const slot = this.slot;
      // The next slot's bank names this block's hash as its latest blockhash.
      this.slot += 1;
      this.svm.warpToSlot(BigInt(this.slot));
      this.svm.expireBlockhash();
      const blockhash = this.svm.latestBlockhash();
      this.blocks.push({
        slot,
        parentSlot: parent?.slot ?? slot - 1,
        blockhash,
        previousBlockhash: parent?.blockhash ?? bs58.encode(randomBytes(32)),
        blockHeight: (parent?.blockHeight ?? 0) + 1,
        blockTime: Math.floor(Date.now() / 1000) + this.clockAheadSeconds,
        transactions: this.openSlot.map((t) => ({ ...t, slot })),
      });
      this.blockFees.set(slot, this.congestionFee);
      this.openSlot = [];
    }
  }

  /** Slots whose leader produced no block. */
  skip(count = 1): void {
    if (this.openSlot.length > 0) throw new Error('seal the open slot before skipping');
    this.slot += count;
    this.svm.warpToSlot(BigInt(this.slot));
  }

  /** A fork that takes the newest `count` blocks back: their transactions are undone, their slots end up skipped. */
  drop(count = 1): void {
    const dropped = this.blocks.splice(this.blocks.length - count, count);
    if (dropped.some((b) => b.slot <= this.blockAt('finalized').slot))
      throw new Error('a finalized block cannot be dropped');
    for (const block of dropped.reverse()) {
      for (const tx of [...block.transactions].reverse()) {
        for (const [address, state] of tx.before) {
          this.setAccount(
            new PublicKey(address),
            state ?? { lamports: 0n, data: new Uint8Array(), owner: SystemProgram.programId, executable: false },
          );
        }
      }
    }
  }

  // -------------------------------------------------------------------------
  // Accounts
  // -------------------------------------------------------------------------

  /**
   * An account, copied: litesvm lends its data from native memory that a
   * later call may free, so nothing of it is kept uncopied.
   */
  private account(address: PublicKey): AccountState {
    const found = this.svm.getAccount(kitAddress(address.toBase58()));
    if (!found.exists || found.lamports === 0n) return null;
    return {
      lamports: found.lamports,
      data: Uint8Array.from(found.data),
      owner: new PublicKey(found.programAddress),
      executable: found.executable,
    };
  }

  /**
   * An account as it was when `slot` was sealed: the state before the first
   * later transaction that touched it (what drop() restores), or now.
   * Processed (no slot) is now, the open slot's transactions included.
   */
  private accountAt(address: PublicKey, slot?: number): AccountState {
    if (slot === undefined) return this.account(address);
    const key = address.toBase58();
    const later = [...this.blocks.filter((b) => b.slot > slot).flatMap((b) => b.transactions), ...this.openSlot];
    const touched = later.find((t) => t.before.has(key));
    return touched ? touched.before.get(key)! : this.account(address);
  }

  /** The slot a read at this commitment sees (undefined: processed, the open slot included), or -32016 before `minContextSlot`. */
  private readSlot(config: { commitment?: string; minContextSlot?: number }): number | undefined {
    const slot = this.blockAt(config.commitment).slot;
    // agave rpc/src/rpc.rs, get_bank_with_config: a bank older than minContextSlot is refused.
    if (config.minContextSlot !== undefined && slot < config.minContextSlot)
      throw new RpcFailure(-32016, 'Minimum context slot has not been reached', { contextSlot: slot });
    return config.commitment === 'processed' && !this.backend.getStore() ? undefined : slot;
  }

  private setAccount(address: PublicKey, state: NonNullable<AccountState>): void {
    this.svm.setAccount({
      address: kitAddress(address.toBase58()),
      lamports: kitLamports(state.lamports),
      data: state.data,
      programAddress: kitAddress(state.owner.toBase58()),
      executable: state.executable,
      space: BigInt(state.data.length),
    });
  }

  async balance(address: string | PublicKey): Promise<bigint> {
    return this.account(new PublicKey(address))?.lamports ?? 0n;
  }

  async exists(address: string | PublicKey): Promise<boolean> {
    const account = this.account(new PublicKey(address));
    return account !== null;
  }

  mintOf(symbol: string): PublicKey {
    const token = this.tokens.find((t) => t.symbol === symbol);
    if (!token) throw new Error(`no ${symbol} on this node`);
    return new PublicKey(token.mint);
  }

  tokenAccount(owner: string | PublicKey, symbol: string): PublicKey {
    return getAssociatedTokenAddressSync(this.mintOf(symbol), new PublicKey(owner), true);
  }

  /** Base units in the owner's associated token account (0 when it has none). */
  async tokenBalance(owner: string | PublicKey, symbol: string): Promise<bigint> {
    const address = this.tokenAccount(owner, symbol);
    const account = this.account(address);
    if (!account) return 0n;
    return unpackAccount(address, asAccountInfo(account)).amount;
  }

  /** Every rise of the owner's SOL (or of its token accounts' `symbol`) on the chain, by transaction. */
  paymentsTo(owner: string, symbol = 'SOL'): { signature: string; amount: bigint }[] {
    const found: { signature: string; amount: bigint }[] = [];
    for (const block of this.blocks) {
      for (const { meta, transaction } of block.transactions) {
        let amount = 0n;
        if (symbol === 'SOL') {
          const index = transaction.message.accountKeys.indexOf(owner);
          if (index >= 0) amount = BigInt(meta!.postBalances[index]!) - BigInt(meta!.preBalances[index]!);
        } else {
          const mint = this.mintOf(symbol).toBase58();
          for (const post of meta!.postTokenBalances ?? []) {
            if (post.owner !== owner || post.mint !== mint) continue;
            const pre = meta!.preTokenBalances?.find((b) => b.accountIndex === post.accountIndex);
            amount += BigInt(post.uiTokenAmount.amount) - BigInt(pre?.uiTokenAmount.amount ?? '0');
          }
        }
        if (amount > 0n) found.push({ signature: transaction.signatures[0]!, amount });
      }
    }
    return found;
  }

  /** The fee a transaction of the ledger paid. */
  feeOf(signature: string): bigint {
    const tx = this.findTransaction(signature);
    if (!tx) throw new Error(`no transaction ${signature}`);
    return BigInt(tx.meta!.fee);
  }

  findTransaction(signature: string): LedgerTransaction | undefined {
    for (const block of this.blocks) {
      const found = block.transactions.find((t) => t.transaction.signatures[0] === signature);
      if (found) return found;
    }
    return this.openSlot.find((t) => t.transaction.signatures[0] === signature);
  }

  // -------------------------------------------------------------------------
  // Sending, as a wallet would (every transaction goes through sendTransaction's checks)
  // -------------------------------------------------------------------------

  async send(instructions: TransactionInstruction[], signers: Keypair[], feePayer = signers[0]!): Promise<string> {
    const tx = new Transaction({
      feePayer: feePayer.publicKey,
      blockhash: this.headBlock.blockhash,
      lastValidBlockHeight: this.headBlock.blockHeight! + MAX_BLOCKHASH_AGE,
    }).add(
      // Under congestion a wallet bids what others pay, or its transfer never lands.
      ...(this.congestionFee > 0
        ? [ComputeBudgetProgram.setComputeUnitPrice({ microLamports: this.congestionFee })]
        : []),
      ...instructions,
    );
    tx.sign(...signers);
    return this.accept(tx.serialize().toString('base64'));
  }

  /** SOL from the faucet. */
  airdrop(to: string | PublicKey, lamports: bigint): Promise<string> {
    return this.sendSol(this.faucet, to, lamports);
  }

  sendSol(from: Keypair, to: string | PublicKey, lamports: bigint): Promise<string> {
    return this.send(
      [SystemProgram.transfer({ fromPubkey: from.publicKey, toPubkey: new PublicKey(to), lamports })],
      [from],
    );
  }

  /** Tokens minted to the owner's associated token account (created if missing). */
  mintTokens(owner: string | PublicKey, symbol: string, amount: bigint): Promise<string> {
    const mint = this.mintOf(symbol);
    const account = this.tokenAccount(owner, symbol);
    return this.send(
      [
        createAssociatedTokenAccountIdempotentInstruction(this.faucet.publicKey, account, new PublicKey(owner), mint),
        createMintToInstruction(mint, account, this.mintAuthority.publicKey, amount),
      ],
      [this.faucet, this.mintAuthority],
    );
  }

  /** A token transfer as wallets make it: the recipient's associated account created if missing, paid by the sender. */
  sendToken(from: Keypair, toOwner: string | PublicKey, symbol: string, amount: bigint): Promise<string> {
    const token = this.tokens.find((t) => t.symbol === symbol)!;
    const mint = this.mintOf(symbol);
    const destination = this.tokenAccount(toOwner, symbol);
    return this.send(
      [
        createAssociatedTokenAccountIdempotentInstruction(from.publicKey, destination, new PublicKey(toOwner), mint),
        createTransferCheckedInstruction(
          this.tokenAccount(from.publicKey, symbol),
          mint,
          destination,
          from.publicKey,
          amount,
          token.decimals,
        ),
      ],
      [from],
    );
  }

  /**
   * Tokens paid into a token account the sender creates for the owner at a
   * fresh address, not the owner's associated one (some wallets do); answers
   * the signature and that account.
   */
  async sendTokenToNewAccount(
    from: Keypair,
    toOwner: string | PublicKey,
    symbol: string,
    amount: bigint,
  ): Promise<{ signature: string; account: PublicKey }> {
    const token = this.tokens.find((t) => t.symbol === symbol)!;
    const mint = this.mintOf(symbol);
    const account = Keypair.generate();
    const signature = await this.send(
      [
        SystemProgram.createAccount({
          fromPubkey: from.publicKey,
          newAccountPubkey: account.publicKey,
          lamports: Number(this.svm.minimumBalanceForRentExemption(BigInt(ACCOUNT_SIZE))),
          space: ACCOUNT_SIZE,
          programId: TOKEN_PROGRAM_ID,
        }),
        createInitializeAccount3Instruction(account.publicKey, mint, new PublicKey(toOwner)),
        createTransferCheckedInstruction(
          this.tokenAccount(from.publicKey, symbol),
          mint,
          account.publicKey,
          from.publicKey,
          amount,
          token.decimals,
        ),
      ],
      [from, account],
      from,
    );
    return { signature, account: account.publicKey };
  }

  /** What sendTransaction does with base64 wire bytes: checks, preflight, then the bank. Answers the signature. */
  async accept(wire: string): Promise<string> {
    const bytes = Buffer.from(wire, 'base64');
    let tx: VersionedTransaction;
    try {
      tx = VersionedTransaction.deserialize(bytes);
    } catch (error) {
      throw new RpcFailure(
        -32602,
        `invalid transaction: failed to deserialize VersionedTransaction: ${(error as Error).message}`,
      );
    }
    const message = tx.message;
    if (message.addressTableLookups.length > 0)
      throw new RpcFailure(-32602, 'this test node does not resolve address lookup tables');
    const signature = bs58.encode(tx.signatures[0]!);
    const keys = message.staticAccountKeys;
    const messageBytes = message.serialize();
    for (let i = 0; i < message.header.numRequiredSignatures; i++) {
      const spki = Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), keys[i]!.toBuffer()]);
      const key = createPublicKey({ key: spki, format: 'der', type: 'spki' });
      if (!verify(null, messageBytes, key, Buffer.from(tx.signatures[i]!))) {
        throw new RpcFailure(-32003, 'Transaction signature verification failure');
      }
    }
    const preflight = (err: string, logs: string[] = []) =>
      new RpcFailure(-32002, `Transaction simulation failed: ${err}`, {
        err,
        logs,
        accounts: null,
        unitsConsumed: 0,
        returnData: null,
      });
    // agave runtime bank.rs, check_transactions: the age of the blockhash is
    // checked first, the status cache only for a transaction that passes it,
    // so a landed transaction sent again once expired is "Blockhash not found".
    const tip = this.blockAt('confirmed');
    const issuedAt = this.blocks.find((b) => b.blockhash === message.recentBlockhash && b.slot <= tip.slot);
    if (!issuedAt || issuedAt.blockHeight! + MAX_BLOCKHASH_AGE < tip.blockHeight!) {
      throw preflight('Blockhash not found');
    }
    if (this.findTransaction(signature)) {
      // A lagging backend has not seen it: its preflight passes, and the leader drops the repeat.
      if (this.backend.getStore()) return signature;
      throw preflight('This transaction has already been processed');
    }
    const budget = computeBudgetOf(message);
    // Leaders schedule by priority: under congestion, a bid below what others pay never lands.
    if (budget.microLamports < BigInt(this.congestionFee)) return signature;
    const before = new Map<string, AccountState>();
    for (const key of keys) before.set(key.toBase58(), this.account(key));
    const processed = this.svm.sendTransaction(getTransactionDecoder().decode(bytes));
    if (processed instanceof FailedTransactionMetadata)
      throw preflight(validatorMessage(processed), processed.meta().logs());
    const after = new Map<string, AccountState>();
    for (const key of keys) after.set(key.toBase58(), this.account(key));
    for (const [key, state] of after) if (state?.owner.equals(TOKEN_PROGRAM_ID)) this.tokenProgramAccounts.add(key);
    // The runtime's fee (agave fee/src/lib.rs, calculate_fee_details): every
    // signature at the base fee, and the priority fee, the unit price times
    // the units asked for, rounded up (compute-budget's get_prioritization_fee).
    const priorityFee = (budget.microLamports * BigInt(budget.units) + 999_999n) / 1_000_000n;
    const fee = Number(LAMPORTS_PER_SIGNATURE) * message.header.numRequiredSignatures + Number(priorityFee);
    const lamports = (state: AccountState | undefined) => state?.lamports ?? 0n;
    const record: LedgerTransaction = {
      slot: this.slot,
      before,
      version: 'legacy',
      transaction: {
        signatures: tx.signatures.map((s) => bs58.encode(s)),
        message: {
          accountKeys: keys.map((k) => k.toBase58()),
          recentBlockhash: message.recentBlockhash,
          ...({
            header: message.header,
            instructions: message.compiledInstructions.map((i) => ({
              programIdIndex: i.programIdIndex,
              accounts: i.accountKeyIndexes,
              data: bs58.encode(i.data),
              stackHeight: null,
            })),
          } as object),
        },
      },
      meta: {
        err: null,
        fee,
        preBalances: keys.map((k) => Number(lamports(before.get(k.toBase58())))),
        postBalances: keys.map((k) => Number(lamports(after.get(k.toBase58())))),
        preTokenBalances: await this.tokenBalances(keys, before),
        postTokenBalances: await this.tokenBalances(keys, after),
        loadedAddresses: { writable: [], readonly: [] },
        ...({
          innerInstructions: [],
          logMessages: processed.logs(),
          rewards: [],
          status: { Ok: null },
          computeUnitsConsumed: Number(processed.computeUnitsConsumed()),
        } as object),
      },
    };
    this.openSlot.push(record);
    return signature;
  }

  /** Token balances as the RPC reports them: one entry per token account among the keys. */
  private async tokenBalances(keys: PublicKey[], states: Map<string, AccountState>): Promise<RpcTokenBalance[]> {
    const balances: RpcTokenBalance[] = [];
    for (const [index, key] of keys.entries()) {
      const state = states.get(key.toBase58());
      if (!state || !state.owner.equals(TOKEN_PROGRAM_ID) || state.data.length !== ACCOUNT_SIZE) continue;
      const account = unpackAccount(key, asAccountInfo(state));
      const mintState = this.account(account.mint);
      const decimals = mintState ? unpackMint(account.mint, asAccountInfo(mintState)).decimals : 0;
      const amount = account.amount.toString();
      const ui =
        decimals === 0
          ? amount
          : `${amount.padStart(decimals + 1, '0').slice(0, -decimals)}.${amount.padStart(decimals + 1, '0').slice(-decimals)}`.replace(
              /\.?0+$/,
              '',
            );
      balances.push({
        accountIndex: index,
        mint: account.mint.toBase58(),
        owner: account.owner.toBase58(),
        programId: TOKEN_PROGRAM_ID.toBase58(),
        uiTokenAmount: { amount, decimals, uiAmount: Number(ui), uiAmountString: ui },
      });
    }
    return balances;
  }

  // -------------------------------------------------------------------------
  // JSON-RPC
  // -------------------------------------------------------------------------

  private async answer(body: string): Promise<string> {
    let request: { id?: unknown; method?: string; params?: unknown[] };
    try {
      request = JSON.parse(body);
    } catch {
      return JSON.stringify({ jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null });
    }
    this.calls.push(request.method ?? '');
    try {
      const behind = this.drawLagging() ? LAGGING_SLOTS : 0;
      const result = await this.backend.run(behind, () => this.call(request.method ?? '', request.params ?? []));
      return JSON.stringify({ jsonrpc: '2.0', result, id: request.id }, (_key, value) =>
        typeof value === 'bigint' ? Number(value) : value,
      );
    } catch (error) {
      const failure =
        error instanceof RpcFailure ? error : new RpcFailure(-32603, `Internal error: ${(error as Error).message}`);
      return JSON.stringify({
        jsonrpc: '2.0',
        error: {
          code: failure.code,
          message: failure.message,
          ...(failure.data !== undefined && { data: failure.data }),
        },
        id: request.id,
      });
    }
  }

  private rpcContext(commitment = 'finalized') {
    return { apiVersion: '2.0.18', slot: this.blockAt(commitment).slot };
  }

  private async call(method: string, params: unknown[]): Promise<unknown> {
    const config = (at: number) =>
      (params[at] ?? {}) as { commitment?: string; minContextSlot?: number; [key: string]: unknown };
    switch (method) {
      case 'getGenesisHash':
        return this.genesisHash;
      case 'getSlot':
        this.readSlot(config(0));
        return this.blockAt(config(0).commitment).slot;
      case 'getBlockHeight':
        this.readSlot(config(0));
        return this.blockAt(config(0).commitment).blockHeight;
      case 'getLatestBlockhash': {
        this.readSlot(config(0));
        const block = this.blockAt(config(0).commitment);
        return {
          context: this.rpcContext(config(0).commitment),
          value: { blockhash: block.blockhash, lastValidBlockHeight: block.blockHeight! + MAX_BLOCKHASH_AGE },
        };
      }
      case 'getBlock': {
        // agave rpc/src/rpc.rs, JsonRpcRequestProcessor::get_block: at or
        // below the root (the finalized slot) the blockstore answers, and a
        // slot without a block is -32007 (check_blockstore_root:
        // blockstore.is_skipped); above it only a slot among the confirmed
        // bank's ancestors is served, and anything else, a skipped slot
        // included, is -32004 BlockNotAvailable until it is rooted.
        const slot = params[0] as number;
        const commitment = config(1).commitment ?? 'finalized';
        if (commitment === 'processed')
          throw new RpcFailure(-32602, 'Method does not support commitment below `confirmed`');
        const block = this.blocks.find((b) => b.slot === slot);
        const root = this.blockAt('finalized').slot;
        if (slot < root && !block)
          throw new RpcFailure(-32007, `Slot ${slot} was skipped, or missing due to ledger jump to recent snapshot`);
        if (!block || slot > this.blockAt(commitment).slot)
          throw new RpcFailure(-32004, `Block not available for slot ${slot}`);
        const { slot: _, transactions, ...header } = block;
        const details = (config(1)['transactionDetails'] as string | undefined) ?? 'full';
        if (details === 'none') return header;
        if (details === 'accounts') return { ...header, transactions: transactions.map(asAccountsTransaction) };
        if (details !== 'full')
          throw new RpcFailure(-32602, `this test node does not give transactionDetails ${details}`);
        return {
          ...header,
          transactions: transactions.map(({ meta, transaction, version }) => ({ meta, transaction, version })),
        };
      }
      case 'getBlocks': {
        // agave rpc/src/rpc.rs, get_blocks: the end is capped at the
        // confirmed bank's slot (the root for finalized); the answer is the
        // rooted slots, then the confirmed bank's ancestors, in the range.
        const [from, end] = params as [number, number | undefined];
        const commitment = config(2).commitment ?? 'finalized';
        if (commitment === 'processed')
          throw new RpcFailure(-32602, 'Method does not support commitment below `confirmed`');
        const top = Math.min(end ?? from + MAX_GET_CONFIRMED_BLOCKS_RANGE, this.blockAt(commitment).slot);
        if (top - from > MAX_GET_CONFIRMED_BLOCKS_RANGE)
          throw new RpcFailure(-32602, `Slot range too large; max ${MAX_GET_CONFIRMED_BLOCKS_RANGE}`);
        return this.blocks.filter((b) => b.slot >= from && b.slot <= top).map((b) => b.slot);
      }
      case 'getBlocksWithLimit': {
        const [from, limit] = params as [number, number];
        const top = this.blockAt(config(2).commitment).slot;
        return this.blocks
          .filter((b) => b.slot >= from && b.slot <= top)
          .slice(0, limit)
          .map((b) => b.slot);
      }
      case 'getBalance': {
        const address = this.publicKey(params[0]);
        const lamports = this.accountAt(address, this.readSlot(config(1)))?.lamports ?? 0n;
        return { context: this.rpcContext(config(1).commitment), value: Number(lamports) };
      }
      case 'getAccountInfo': {
        const address = this.publicKey(params[0]);
        return {
          context: this.rpcContext(config(1).commitment),
          value: this.encodeAccount(this.accountAt(address, this.readSlot(config(1))), config(1)),
        };
      }
      case 'getTokenAccountBalance': {
        const address = this.publicKey(params[0]);
        const account = this.account(address);
        if (!account || !account.owner.equals(TOKEN_PROGRAM_ID)) {
          throw new RpcFailure(-32602, 'Invalid param: could not find account');
        }
        const [balance] = await this.tokenBalances([address], new Map([[address.toBase58(), account]]));
        return { context: this.rpcContext(config(1).commitment), value: balance!.uiTokenAmount };
      }
      case 'getTokenAccountsByOwner': {
        // agave rpc/src/rpc.rs, JsonRpcRequestProcessor::get_token_accounts_by_owner:
        // a mint filter names an existing mint of a token program
        // (get_token_program_id_and_mint: "Invalid param: could not find
        // mint" otherwise); the answer is every token account of that mint
        // whose owner is the address, as keyed accounts.
        const owner = this.publicKey(params[0]);
        const filter = (params[1] ?? {}) as { mint?: string; programId?: string };
        if (!filter.mint) throw new RpcFailure(-32602, 'this test node filters token accounts by mint only');
        const mint = this.publicKey(filter.mint);
        if (!this.account(mint)?.owner.equals(TOKEN_PROGRAM_ID))
          throw new RpcFailure(-32602, 'Invalid param: could not find mint');
        const at = this.readSlot(config(2));
        const value = [];
        for (const key of this.tokenProgramAccounts) {
          const address = new PublicKey(key);
          const state = this.accountAt(address, at);
          if (!state?.owner.equals(TOKEN_PROGRAM_ID) || state.data.length !== ACCOUNT_SIZE) continue;
          const account = unpackAccount(address, asAccountInfo(state));
          if (!account.owner.equals(owner) || !account.mint.equals(mint)) continue;
          value.push({ pubkey: key, account: this.encodeAccount(state, config(2)) });
        }
        return { context: this.rpcContext(config(2).commitment), value };
      }
      case 'getSignatureStatuses': {
        // agave rpc/src/rpc.rs, get_signature_statuses: the processed bank's
        // status cache first (the last 300 roots and what is above them: processed, confirmed or
        // finalized, get_transaction_status); then, with
        // searchTransactionHistory only, the blockstore's rooted statuses
        // (finalized). A backend knows only what it has processed.
        const { searchTransactionHistory = false } = config(1) as { searchTransactionHistory?: boolean };
        if ((params[0] as string[]).length > MAX_SIGNATURE_STATUSES)
          throw new RpcFailure(-32602, `Too many inputs provided; max ${MAX_SIGNATURE_STATUSES}`);
        const tip = this.blockAt('confirmed');
        const root = this.blockAt('finalized').slot;
        const open = this.backend.getStore() ? [] : this.openSlot;
        const value = (params[0] as string[]).map((signature) => {
          if (open.some((t) => t.transaction.signatures[0] === signature))
            return {
              slot: this.slot,
              confirmations: 0,
              err: null,
              status: { Ok: null },
              confirmationStatus: 'processed',
            };
          const block = this.blocks.find(
            (b) => b.slot <= tip.slot && b.transactions.some((t) => t.transaction.signatures[0] === signature),
          );
          if (!block) return null;
          const cached =
            block.slot > root ||
            this.blocks.filter((b) => b.slot >= block.slot && b.slot <= root).length <= STATUS_CACHE_ROOTS;
          if (!cached && !(searchTransactionHistory && this.transactionHistory)) return null;
          const final = block.slot <= root;
          return {
            slot: block.slot,
            confirmations: final ? null : this.blocks.filter((b) => b.slot > block.slot && b.slot <= tip.slot).length,
            err: null,
            status: { Ok: null },
            confirmationStatus: final ? 'finalized' : 'confirmed',
          };
        });
        return { context: this.rpcContext('confirmed'), value };
      }
      case 'getTransaction': {
        const signature = params[0] as string;
        const block = this.blocks.find((b) => b.transactions.some((t) => t.transaction.signatures[0] === signature));
        const commitment = config(1).commitment ?? 'finalized';
        if (!block || block.slot > this.blockAt(commitment).slot) return null;
        const { meta, transaction, version } = block.transactions.find(
          (t) => t.transaction.signatures[0] === signature,
        )!;
        return { slot: block.slot, blockTime: block.blockTime, meta, transaction, version };
      }
      case 'sendTransaction': {
        const failure = this.failNextSends.shift();
        if (failure) throw new RpcFailure(failure.code, failure.message);
        const { encoding = 'base58' } = config(1) as { encoding?: string };
        const wire =
          encoding === 'base64'
            ? (params[0] as string)
            : Buffer.from(bs58.decode(params[0] as string)).toString('base64');
        return this.accept(wire);
      }
      case 'getRecentPrioritizationFees': {
        // agave rpc/src/rpc.rs, get_recent_prioritization_fees: at most 128
        // accounts; one entry per block the cache holds (the last 150), its
        // lowest landed fee (prioritization_fee_cache.rs; accounts named
        // only raise it to their own lowest, which is never lower here).
        const accounts = (params[0] ?? []) as string[];
        if (accounts.length > 128) throw new RpcFailure(-32602, 'Too many inputs provided; max 128');
        const tip = this.blockAt('confirmed').slot;
        return this.blocks
          .filter((b) => b.slot <= tip)
          .slice(-150)
          .map((b) => ({ slot: b.slot, prioritizationFee: this.blockFees.get(b.slot) ?? 0 }));
      }
      case 'getMinimumBalanceForRentExemption':
        return Number(this.svm.minimumBalanceForRentExemption(BigInt(params[0] as number)));
      default:
        throw new RpcFailure(-32601, 'Method not found');
    }
  }

  /** An account as getAccountInfo encodes it. */
  private encodeAccount(account: AccountState, options: Record<string, unknown>) {
    // agave rpc/src/rpc.rs, JsonRpcRequestProcessor::get_account_info: a
    // missing account (or one with 0 lamports, which the bank does not
    // keep) is `value: null`; the encoding defaults to binary (a bare
    // base58 string), and base58 data over 128 bytes is refused
    // (encode_account, MAX_BASE58_BYTES); dataSlice cuts the data after
    // the account is read, so `space` stays the account's whole size
    // (account-decoder's encode_ui_account).
    const encoding = (options['encoding'] as string | undefined) ?? 'binary';
    if (!['binary', 'base58', 'base64'].includes(encoding))
      throw new RpcFailure(-32602, `this test node does not encode accounts as ${encoding}`);
    const slice = options['dataSlice'] as { offset: number; length: number } | undefined;
    const data = account
      ? Buffer.from(account.data).subarray(slice?.offset ?? 0, slice ? slice.offset + slice.length : undefined)
      : undefined;
    if (data && encoding !== 'base64' && data.length > 128)
      throw new RpcFailure(
        -32600,
        'Encoded binary (base 58) data should be less than 128 bytes, please use Base64 encoding.',
      );
    const encoded =
      encoding === 'binary'
        ? bs58.encode(data ?? [])
        : [encoding === 'base64' ? data?.toString('base64') : bs58.encode(data ?? []), encoding];
    return account
      ? {
          data: encoded,
          executable: account.executable,
          lamports: account.lamports,
          owner: account.owner.toBase58(),
          rentEpoch: 18446744073709551615n,
          space: account.data.length,
        }
      : null;
  }

  private publicKey(value: unknown): PublicKey {
    try {
      return new PublicKey(value as string);
    } catch {
      throw new RpcFailure(-32602, `Invalid param: ${String(value).slice(0, 60)}`);
    }
  }
}

/**
 * A transaction as getBlock's `transactionDetails: "accounts"` gives it
 * (agave transaction-status lib.rs: build_json_accounts, with
 * parse_legacy_message_accounts for the keys, and
 * build_simple_ui_transaction_status_meta: no instructions, logs or loaded
 * addresses). Signer and writable follow from the message header.
 */
function asAccountsTransaction({ meta, transaction, version }: LedgerTransaction) {
  const { header } = transaction.message as unknown as {
    header: { numRequiredSignatures: number; numReadonlySignedAccounts: number; numReadonlyUnsignedAccounts: number };
  };
  const keys = transaction.message.accountKeys;
  return {
    transaction: {
      signatures: transaction.signatures,
      accountKeys: keys.map((pubkey, i) => ({
        pubkey,
        writable:
          i < header.numRequiredSignatures
            ? i < header.numRequiredSignatures - header.numReadonlySignedAccounts
            : i < keys.length - header.numReadonlyUnsignedAccounts,
        signer: i < header.numRequiredSignatures,
        source: 'transaction',
      })),
    },
    meta: meta && {
      err: meta.err,
      status: meta.err === null ? { Ok: null } : { Err: meta.err },
      fee: meta.fee,
      preBalances: meta.preBalances,
      postBalances: meta.postBalances,
      preTokenBalances: meta.preTokenBalances,
      postTokenBalances: meta.postTokenBalances,
    },
    version,
  };
}

const COMPUTE_BUDGET_PROGRAM = 'ComputeBudget111111111111111111111111111111';

/**
 * The units a transaction asks for and its price per unit, from its
 * ComputeBudget instructions (compute-budget-instruction's
 * process_compute_budget_instructions: 2 SetComputeUnitLimit u32, 3
 * SetComputeUnitPrice u64, little-endian); without a limit, 200,000 units
 * an instruction.
 */
function computeBudgetOf(message: VersionedTransaction['message']): { units: number; microLamports: bigint } {
  let units: number | undefined;
  let microLamports = 0n;
  for (const instruction of message.compiledInstructions) {
    if (message.staticAccountKeys[instruction.programIdIndex]?.toBase58() !== COMPUTE_BUDGET_PROGRAM) continue;
    const data = Buffer.from(instruction.data);
    if (data[0] === 2) units = data.readUInt32LE(1);
    if (data[0] === 3) microLamports = data.readBigUInt64LE(1);
  }
  return { units: units ?? 200_000 * message.compiledInstructions.length, microLamports };
}

/**
 * A failed transaction as a validator words it (solana-sdk's TransactionError
 * and InstructionError Display), read from litesvm's description of the error.
 */
function validatorMessage(failed: FailedTransactionMetadata): string {
  const err = /err: (.*?), meta: /.exec(failed.toString())?.[1] ?? 'unknown';
  const instruction = /^InstructionError\((\d+), (.*)\)$/.exec(err);
  if (instruction) {
    const [, index, cause] = instruction;
    const custom = /^Custom\((\d+)\)$/.exec(cause!);
    const words: Record<string, string> = {
      InsufficientFunds: 'insufficient funds for instruction',
      InvalidAccountData: 'invalid account data for instruction',
      MissingRequiredSignature: 'missing required signature for instruction',
      IncorrectProgramId: 'incorrect program id for instruction',
      UninitializedAccount: 'instruction requires an initialized account',
    };
    const text = custom ? `custom program error: 0x${Number(custom[1]).toString(16)}` : (words[cause!] ?? cause);
    return `Error processing Instruction ${index}: ${text}`;
  }
  const rent = /^InsufficientFundsForRent \{ account_index: (\d+) \}$/.exec(err);
  if (rent) return `Transaction results in an account (${rent[1]}) with insufficient funds for rent`;
  if (err === 'AlreadyProcessed') return 'This transaction has already been processed';
  if (err === 'BlockhashNotFound') return 'Blockhash not found';
  if (err === 'InsufficientFundsForFee') return 'Insufficient funds for fee';
  if (err === 'AccountNotFound') return 'Attempt to debit an account but found no record of a prior credit.';
  return err;
}
