// Paying out on Solana: sweeps and refunds, each one transaction signed by
// the fee wallet and the payer's key, recorded before it is sent.
//
// Settlement: one transaction per sweep, signed by the fee wallet (the fee
// payer: deposit addresses never need SOL for fees) and the deposit key.
//   - SOL: the payout to the merchant, the quoted network fee back to the fee
//     wallet that paid it, the platform fee to the treasury (to the fee wallet
//     while the treasury would stay under the rent-exempt minimum). Anything
//     else (a late payment, the customer's: refunds.md) stays on the deposit;
//     with nothing else it is left with 0 lamports, and the runtime deletes it.
//   - SPL: the merchant's and the treasury's associated token accounts created
//     when missing (rent paid by the fee wallet), the payout and the platform
//     fee by transferChecked, then the deposit's token account closed, its
//     rent to the treasury, unless a late payment stays in it.
// The amounts are the settlement's (`amount`, `fees`), never the balance's.
// A refund (from a deposit before its settlement, or from a merchant's refund
// wallet) is the same transaction without the rest: SOL, the payout and the
// quoted fee back to the fee wallet, the payer keeping what is left (a deposit
// topped up to the rent-exempt minimum by the fee wallet where a late payment
// would leave it less); tokens,
// the customer's associated token account created when missing (rent paid by
// the fee wallet, as for a merchant's) and the payout by transferChecked from
// the payer's token accounts, none of them closed.
// Every sweep carries a recent blockhash of a finalized block (a fork cannot
// take it away) and is valid until `lastValidBlockHeight`. It is recorded
// before it is sent; after a crash the same bytes are sent again while that
// height is not passed. Only once the finalized chain is past it, and the
// chain has no record of the signature, is it declared refused, when no
// validator can ever take it: then a new one is built. So a restart never pays
// twice.
import {
  ComputeBudgetProgram,
  Keypair,
  PublicKey,
  SystemProgram,
  Transaction,
  type TransactionInstruction,
} from '@solana/web3.js';
import {
  AccountLayout,
  MINT_SIZE,
  TOKEN_2022_PROGRAM_ID,
  TOKEN_PROGRAM_ID,
  createAssociatedTokenAccountIdempotentInstruction,
  createCloseAccountInstruction,
  createTransferCheckedInstruction,
  getAssociatedTokenAddressSync,
} from '@solana/spl-token';
import bs58 from 'bs58';
import type { DepositKeyring } from '../../keys/derivation.ts';
import {
  PayoutRefusedError,
  TransactionRejectedError,
  type OutgoingTransfer,
  type PreparedTransaction,
} from '../port.ts';
import { depositKeyOf } from '../node-adapter.ts';
import { landed, SolanaRpcError, toBigInt, type Integer, type SignatureStatus, type SolanaNode } from './node.ts';
import type { SolanaToken } from './reader.ts';

/** The base fee of one signature, in lamports (what a sweep's two signatures cost, without priority fees). */
export const LAMPORTS_PER_SIGNATURE = 5_000n;
const SWEEP_SIGNATURES = 2n;
/**
 * The compute units a SOL sweep asks for (three System transfers at 150 and
 * two ComputeBudget instructions at 150): its priority fee is this times the
 * unit price, and 1,000 makes a fee in whole lamports a whole unit price.
 */
const SOL_SWEEP_COMPUTE_UNITS = 1_000n;
const MICRO_LAMPORTS = 1_000_000n;
/**
 * The most a sweep bids per compute unit, in micro-lamports (a token sweep's
 * ~200,000 units: 0.0002 SOL at most), whatever a burst of recent fees says.
 */
const MAX_PRIORITY_PRICE = 1_000_000n;
/** How long a priority price is used before it is asked again (getRecentPrioritizationFees). */
const PRIORITY_PRICE_MS = 10_000;
/** A blockhash is valid this many blocks after its own (getLatestBlockhash's lastValidBlockHeight is its block's height plus this). */
const BLOCKHASH_VALID_BLOCKS = 150;
/**
 * A bank answers getSignatureStatuses from its status cache for the last this
 * many rooted blocks, and for its unrooted ones, whatever history the node
 * keeps (agave runtime/src/status_cache.rs: MAX_CACHE_ENTRIES, which is
 * MAX_RECENT_BLOCKHASHES; `purge_roots` drops the oldest root past it).
 */
const STATUS_CACHE_BLOCKS = 300;
/** How many unsent signatures are remembered; the oldest forgotten counts as perhaps sent (far more than are open). */
const UNSENT_REMEMBERED = 10_000;
/** Token-2022 puts an account's type (1: mint, 2: token account) after a classic token account's 165 bytes. */
const TOKEN_2022_ACCOUNT_TYPE_OFFSET = 165;
/** A sweep's transaction fits the deposit's associated token account and this many others (1,232 bytes). */
const MAX_SWEPT_TOKEN_ACCOUNTS = 6;

/** A sweep as recorded: the signed bytes, and the block height after which no validator takes them. */
interface SweepRecord {
  transaction: string;
  lastValidBlockHeight: number;
  /**
   * What the deposit held before it (lamports, or base units of the mint in
   * all its token accounts), decimal: past the status cache, while the
   * finalized chain shows anything else, something moved it, and no new
   * sweep is built. (Absent in records made before it was kept.)
   */
  deposit?: { address: string; mint?: string; held: string };
}

/** The instructions of a sweep (its compute budget apart), the compute units and unit price it asks, and what the deposit held before it. */
interface Sweep {
  instructions: TransactionInstruction[];
  units: bigint;
  price: bigint;
  held: bigint;
}

/** The compute units a sweep asks for, and its priority price per unit (none at 0). */
const computeBudget = (units: bigint, microLamports: bigint): TransactionInstruction[] => [
  ComputeBudgetProgram.setComputeUnitLimit({ units: Number(units) }),
  ...(microLamports > 0n ? [ComputeBudgetProgram.setComputeUnitPrice({ microLamports })] : []),
];

/**
 * A refund's payout takes its amount and leaves the rest where it is, for the
 * deposit's settlement or in the merchant's refund wallet. A settlement's
 * sweep takes its amount and fees, and empties the deposit's other token
 * accounts into its associated one.
 */
const isRefund = (transfer: OutgoingTransfer) => transfer.payout === 'refund';

/**
 * A token refund's instructions: the customer's associated token account
 * created where missing (its rent paid by the fee wallet, `payer`, as for a
 * merchant's: the refund's network fee stays 0), then the amount by
 * transferChecked from the payer's token accounts, its associated one first,
 * each giving what it holds until the amount is met. No account is closed:
 * what is left stays for the settlement, or in the refund wallet.
 */
function tokenRefund(
  from: PublicKey,
  accounts: readonly { address: PublicKey; amount: bigint }[],
  associated: PublicKey,
  transfer: Pick<OutgoingTransfer, 'to' | 'amount'>,
  token: SolanaToken,
  payer: PublicKey,
): TransactionInstruction[] {
  const mint = new PublicKey(token.mint);
  const customer = new PublicKey(transfer.to);
  const destination = getAssociatedTokenAddressSync(mint, customer, true);
  const instructions = [createAssociatedTokenAccountIdempotentInstruction(payer, destination, customer, mint)];
  const ordered = [...accounts].sort(
    (a, b) => Number(b.address.equals(associated)) - Number(a.address.equals(associated)),
  );
  let left = transfer.amount;
  for (const account of ordered) {
    if (left === 0n) break;
    const take = account.amount < left ? account.amount : left;
    if (take === 0n) continue;
    instructions.push(createTransferCheckedInstruction(account.address, mint, destination, from, take, token.decimals));
    left -= take;
  }
  return instructions;
}

export interface SolanaPayerOptions {
  keyring: Pick<DepositKeyring, 'deriveDepositKey' | 'deriveSolanaServiceKey'>;
  tokens: readonly SolanaToken[];
  treasury: string;
}

export class SolanaPayer {
  readonly treasury: string;
  readonly feeWallet: string;
  private readonly feePayer: Keypair;
  private readonly tokens: readonly SolanaToken[];
  private readonly preparedByReference = new Map<string, PreparedTransaction>();
  /**
   * Signatures this process prepared and has not sent yet (a node refused
   * them in preflight, or none was asked): a preflight failure refuses only
   * those. Any other (sent, perhaps taken, or prepared before a restart or by
   * another instance) may be on its way to a leader.
   */
  private readonly unsent = new Set<string>();

  constructor(
    private readonly node: SolanaNode,
    private readonly options: SolanaPayerOptions,
  ) {
    this.tokens = options.tokens;
    this.feePayer = Keypair.fromSeed(options.keyring.deriveSolanaServiceKey('fee').privateKey);
    this.feeWallet = this.feePayer.publicKey.toBase58();
    this.treasury = options.treasury;
  }

  /**
   * The price per compute unit a sweep bids (micro-lamports): the 75th
   * percentile of the last 150 blocks' lowest landed fees
   * (getRecentPrioritizationFees), capped. Under congestion a sweep without
   * it waits behind those that pay, until its blockhash expires.
   */
  private priorityPrice = { microLamports: 0n, at: 0 };
  async refreshPriorityPrice(): Promise<void> {
    const fees = await this.node.rpc<{ slot: number; prioritizationFee: Integer }[]>('getRecentPrioritizationFees', [
      [],
    ]);
    const sorted = fees.map((f) => toBigInt(f.prioritizationFee)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const percentile = sorted[Math.floor((sorted.length * 3) / 4)] ?? 0n;
    this.priorityPrice = {
      microLamports: percentile < MAX_PRIORITY_PRICE ? percentile : MAX_PRIORITY_PRICE,
      at: Date.now(),
    };
  }

  /** At a head read: the priority price asked again once it is older than PRIORITY_PRICE_MS. */
  refreshIfStale(): void {
    if (Date.now() - this.priorityPrice.at > PRIORITY_PRICE_MS) void this.refreshPriorityPrice().catch(() => undefined);
  }

  /** Lamports of an address, or base units of a token in every account of its mint the address owns. */
  async balanceOf(address: string, token = 'SOL'): Promise<bigint> {
    if (token !== 'SOL') {
      const accounts = await this.depositTokenAccounts(new PublicKey(address), new PublicKey(this.tokenOf(token).mint));
      return accounts.reduce((sum, a) => sum + a.amount, 0n);
    }
    const answer = await this.node.rpc<{ value: Integer }>('getBalance', [address, { commitment: 'confirmed' }]);
    return toBigInt(answer.value);
  }

  /**
   * A token payout's fees and rent are the fee wallet's, so holding the amount
   * is enough. A SOL payer must be left with 0 or at least the rent-exempt
   * minimum: the runtime refuses a transaction that leaves a System account
   * neither empty nor rent-exempt (agave `svm/src/rent_calculator.rs`,
   * `check_rent_state_with_account`: an account that becomes `RentPaying` is
   * refused with `InsufficientFundsForRent`).
   */
  async canPay(address: string, token: string, amount: bigint): Promise<boolean> {
    const [held, rentExempt] = await Promise.all([
      this.balanceOf(address, token),
      token === 'SOL' ? this.rentExemptMinimum() : 0n,
    ]);
    const rest = held - amount;
    return rest === 0n || rest >= rentExempt;
  }

  /** The fee wallet and the treasury with their SOL balances (GET /admin/v1/wallets). */
  async wallets() {
    const [feeWalletBalance, treasuryBalance] = await Promise.all([
      this.balanceOf(this.feeWallet),
      this.balanceOf(this.treasury),
    ]);
    return { feeWallet: this.feeWallet, feeWalletBalance, treasury: this.treasury, treasuryBalance };
  }

  private tokenOf(symbol: string): SolanaToken {
    const token = this.tokens.find((t) => t.symbol === symbol);
    if (!token) throw new TransactionRejectedError(`solana has no token ${symbol}`);
    return token;
  }

  // -------------------------------------------------------------------------
  // Settlement
  // -------------------------------------------------------------------------

  /**
   * Only a wallet that someone signs for can take a payout: an address with
   * no account yet, or a System-owned one. A token account or a mint entered
   * as the wallet would get tokens in an associated account derived for it,
   * which no key can ever move; a program or another program's account
   * cannot sign either.
   */
  async receivingProblem(address: string): Promise<string | undefined> {
    const { value } = await this.node.rpc<{
      value: { owner: string; executable: boolean; space?: number; data: [string, string] } | null;
    }>('getAccountInfo', [
      address,
      {
        commitment: 'confirmed',
        encoding: 'base64',
        dataSlice: { offset: TOKEN_2022_ACCOUNT_TYPE_OFFSET, length: 1 },
      },
    ]);
    if (!value) return undefined;
    const owner = new PublicKey(value.owner);
    if (value.executable) return `${address} is a program on solana, not a wallet: payouts go to a wallet's address`;
    if (owner.equals(SystemProgram.programId)) return undefined;
    if (owner.equals(TOKEN_PROGRAM_ID) || owner.equals(TOKEN_2022_PROGRAM_ID)) {
      const type = Buffer.from(value.data[0], 'base64')[0];
      const what = value.space === MINT_SIZE || type === 1 ? 'a token mint' : 'a token account';
      return `${address} is ${what} on solana, not a wallet: give the wallet's own address (the owner of its token accounts)`;
    }
    return `${address} is an account of the program ${value.owner} on solana, not a wallet: payouts go to a wallet's address`;
  }

  /**
   * A SOL sweep's two signatures at the base fee and its priority fee at the
   * current price, taken from the deposit and returned to the fee wallet that
   * paid them; tokens cost the deposit nothing (the fee wallet pays in SOL).
   * A refund's (`payout` 'refund') is the same: one transaction with the same
   * two signatures and compute units, whoever pays it (the deposit or the
   * refund wallet).
   */
  networkFee(token: string, _payout?: 'settlement' | 'refund'): bigint {
    if (token !== 'SOL') return 0n;
    const priority =
      (this.priorityPrice.microLamports * SOL_SWEEP_COMPUTE_UNITS + MICRO_LAMPORTS - 1n) / MICRO_LAMPORTS;
    return LAMPORTS_PER_SIGNATURE * SWEEP_SIGNATURES + priority;
  }

  async prepareTransfer(transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    const earlier = this.preparedByReference.get(transfer.reference);
    if (earlier) return earlier;
    const key = depositKeyOf(this.options.keyring, 'solana', transfer.from);
    const deposit = Keypair.fromSeed(key.privateKey);
    const { instructions, units, price, held } =
      transfer.token === 'SOL'
        ? await this.solSweep(deposit.publicKey, transfer)
        : await this.tokenSweep(deposit.publicKey, transfer);
    // A blockhash of a finalized block: no fork can make it unknown while it is valid.
    const { value } = await this.node.rpc<{ value: { blockhash: string; lastValidBlockHeight: number } }>(
      'getLatestBlockhash',
      [{ commitment: 'finalized' }],
    );
    // Never another payout's transaction: two payouts alike (payer, recipient, amount, fee) on one finalized
    // blockhash would be one transaction (ed25519 signs alike), which would complete both, the recipient paid
    // once. Theirs are the recorded ones of the payer's other payouts on their way; this one then asks a compute
    // unit less, which its instructions never need, and whose priority fee is never more than the quoted one.
    const taken = new Set((transfer.othersPrepared ?? []).map((raw) => (JSON.parse(raw) as SweepRecord).transaction));
    let transaction: Transaction;
    let serialized: string;
    for (let less = 0n; ; less++) {
      transaction = new Transaction({
        feePayer: this.feePayer.publicKey,
        blockhash: value.blockhash,
        lastValidBlockHeight: value.lastValidBlockHeight,
      }).add(...computeBudget(units - less, price), ...instructions);
      transaction.sign(this.feePayer, deposit);
      serialized = transaction.serialize().toString('base64');
      if (!taken.has(serialized)) break;
    }
    const record: SweepRecord = {
      transaction: serialized,
      lastValidBlockHeight: value.lastValidBlockHeight,
      deposit: {
        address: transfer.from.address,
        ...(transfer.token !== 'SOL' && { mint: this.tokenOf(transfer.token).mint }),
        held: held.toString(),
      },
    };
    const prepared = { txHash: bs58.encode(transaction.signature!), raw: JSON.stringify(record) };
    this.unsent.add(prepared.txHash);
    if (this.unsent.size > UNSENT_REMEMBERED) this.unsent.delete(this.unsent.values().next().value!);
    this.preparedByReference.set(transfer.reference, prepared);
    return prepared;
  }

  /**
   * Payout, the fee back to the fee wallet, and the platform fee to the
   * treasury, or to the fee wallet while the treasury would stay under the
   * rent-exempt minimum: the runtime refuses to leave an account under it
   * (a fresh treasury holds nothing, and a 1% fee is often less), and would
   * refuse every retry the same way. What the deposit holds beyond those (a
   * late payment, the customer's: refunds.md) stays on it. A refund leaves
   * everything but its amount and fee where it is.
   */
  private async solSweep(deposit: PublicKey, transfer: OutgoingTransfer): Promise<Sweep> {
    const [balance, treasuryHeld, merchantHeld, rentExempt] = await Promise.all([
      this.balanceOf(deposit.toBase58()),
      this.balanceOf(this.treasury),
      this.balanceOf(transfer.to),
      this.rentExemptMinimum(),
    ]);
    if (merchantHeld + transfer.amount < rentExempt) {
      // The runtime refuses to create an account under its rent-exempt minimum, at every retry.
      throw new PayoutRefusedError(
        'fees_exceed_amount',
        `a payout of ${transfer.amount} lamports to ${transfer.to}, which holds ${merchantHeld}, leaves it under the rent-exempt minimum of ${rentExempt}`,
      );
    }
    const network = transfer.fees?.network ?? this.networkFee('SOL');
    // The quoted fee beyond the signatures is the priority fee: its unit price is what spends exactly that.
    const priority = network - LAMPORTS_PER_SIGNATURE * SWEEP_SIGNATURES;
    const price = priority > 0n ? (priority * MICRO_LAMPORTS) / SOL_SWEEP_COMPUTE_UNITS : 0n;
    const platform = isRefund(transfer) ? 0n : (transfer.fees?.platform ?? 0n);
    const taken = transfer.amount + network + platform;
    const rest = balance - taken;
    if (rest < 0n) {
      throw new TransactionRejectedError(`${deposit.toBase58()} holds ${balance} lamports, less than ${taken}`);
    }
    // The runtime refuses to leave the payer with less than the minimum (0 is allowed), at every retry.
    let topUp = 0n;
    if (rest > 0n && rest < rentExempt) {
      const what = `${isRefund(transfer) ? 'a refund' : 'a sweep'} of ${taken} lamports from ${deposit.toBase58()}, which holds ${balance}, leaves it ${rest}: under the rent-exempt minimum of ${rentExempt}`;
      // A refund from a deposit (the one kind that keeps its fee exact) was approved leaving it 0 or at least the
      // minimum (canPay); only a payment since (a late one, the customer's) leaves it in between. The fee wallet
      // tops the deposit up to the minimum in the same transaction, as it pays a customer's token account's rent:
      // the customer gets the amount, the late payment stays refundable, and the refund ends instead of failing.
      if (isRefund(transfer) && transfer.exactNetworkFee) topUp = rentExempt - rest;
      // A refund wallet's rest is the merchant's: the refund waits for funds (fees_exceed_amount, awaiting_funds).
      else if (isRefund(transfer)) throw new PayoutRefusedError('fees_exceed_amount', what);
      // A sweep's rest is a late payment, the customer's: never given away to make the deposit 0. The settlement
      // fails, on the operator's list, and is tried again; refunded from the deposit (it takes no hold while
      // nothing is prepared), the late payment leaves 0 and the next attempt pays out.
      else throw new TransactionRejectedError(`${what} (a late payment the deposit keeps, until it is refunded)`);
    }
    const send = (to: string | PublicKey, lamports: bigint, from: PublicKey = deposit) =>
      SystemProgram.transfer({ fromPubkey: from, toPubkey: new PublicKey(to), lamports });
    const toTreasury = platform > 0n && treasuryHeld + platform >= rentExempt ? platform : 0n;
    const instructions = [
      send(transfer.to, transfer.amount),
      send(this.feePayer.publicKey, network + platform - toTreasury),
    ];
    if (toTreasury > 0n) instructions.push(send(this.treasury, toTreasury));
    if (topUp > 0n) instructions.push(send(deposit, topUp, this.feePayer.publicKey));
    return { instructions, units: SOL_SWEEP_COMPUTE_UNITS, price, held: balance };
  }

  /** The least a System account with no data may hold (890,880 lamports on mainnet today), asked once. */
  private rentExempt?: Promise<bigint>;
  private rentExemptMinimum(): Promise<bigint> {
    this.rentExempt ??= this.node.rpc<Integer>('getMinimumBalanceForRentExemption', [0]).then(toBigInt, (error) => {
      this.rentExempt = undefined; // asked again next time
      throw error;
    });
    return this.rentExempt;
  }

  /**
   * Every token account of the mint that the deposit owns, with its balance:
   * detection counts a payment to any of them, not only the associated one
   * (a wallet may pay into an account it created for the deposit).
   */
  private async depositTokenAccounts(
    deposit: PublicKey,
    mint: PublicKey,
    at: { commitment: 'confirmed' | 'finalized'; minContextSlot?: number } = { commitment: 'confirmed' },
  ) {
    const { value } = await this.node.rpc<{ value: { pubkey: string; account: { data: [string, string] } }[] }>(
      'getTokenAccountsByOwner',
      [deposit.toBase58(), { mint: mint.toBase58() }, { ...at, encoding: 'base64' }],
    );
    return value.map(({ pubkey, account }) => ({
      address: new PublicKey(pubkey),
      amount: AccountLayout.decode(Buffer.from(account.data[0], 'base64')).amount,
    }));
  }

  /**
   * The deposit's other token accounts emptied into its associated one (created
   * where missing) and closed; then the merchant's account created where
   * missing, payout and fee by transferChecked, the associated account closed.
   * A refund takes only its amount (see tokenRefund).
   */
  private async tokenSweep(deposit: PublicKey, transfer: OutgoingTransfer): Promise<Sweep> {
    const token = this.tokenOf(transfer.token);
    const mint = new PublicKey(token.mint);
    const payer = this.feePayer.publicKey;
    const source = getAssociatedTokenAddressSync(mint, deposit, true);
    const accounts = await this.depositTokenAccounts(deposit, mint);
    const others = accounts.filter((a) => !a.address.equals(source));
    if (others.length > MAX_SWEPT_TOKEN_ACCOUNTS) {
      throw new TransactionRejectedError(
        `${deposit.toBase58()} owns ${others.length + 1} ${token.symbol} accounts, more than one sweep can empty`,
      );
    }
    const held = accounts.reduce((sum, a) => sum + a.amount, 0n);
    // The treasury gets the platform fee; what the deposit holds beyond it and the payout (a late payment, the
    // customer's) stays in the deposit's associated account, which then stays open.
    const toTreasury = isRefund(transfer) ? 0n : (transfer.fees?.platform ?? 0n);
    const rest = held - transfer.amount - toTreasury;
    if (rest < 0n)
      throw new TransactionRejectedError(
        `${deposit.toBase58()} holds ${held} ${token.symbol}, less than ${transfer.amount + toTreasury}`,
      );
    // Enough compute for the account creations, the transfers and the closes, whatever the default.
    const budget = { units: BigInt(200_000 + others.length * 30_000), price: this.priorityPrice.microLamports, held };
    if (isRefund(transfer)) {
      return { instructions: tokenRefund(deposit, accounts, source, transfer, token, payer), ...budget };
    }
    const merchant = new PublicKey(transfer.to);
    const merchantAccount = getAssociatedTokenAddressSync(mint, merchant, true);
    const treasury = new PublicKey(this.treasury);
    const treasuryAccount = getAssociatedTokenAddressSync(mint, treasury, true);
    const instructions: TransactionInstruction[] = [];
    if (others.length > 0) {
      instructions.push(createAssociatedTokenAccountIdempotentInstruction(payer, source, deposit, mint));
      for (const other of others) {
        if (other.amount > 0n)
          instructions.push(
            createTransferCheckedInstruction(other.address, mint, source, deposit, other.amount, token.decimals),
          );
        instructions.push(createCloseAccountInstruction(other.address, treasury, deposit));
      }
    }
    instructions.push(
      createAssociatedTokenAccountIdempotentInstruction(payer, merchantAccount, merchant, mint),
      createTransferCheckedInstruction(source, mint, merchantAccount, deposit, transfer.amount, token.decimals),
    );
    if (toTreasury > 0n) {
      instructions.push(
        createAssociatedTokenAccountIdempotentInstruction(payer, treasuryAccount, treasury, mint),
        createTransferCheckedInstruction(source, mint, treasuryAccount, deposit, toTreasury, token.decimals),
      );
    }
    if (rest === 0n) instructions.push(createCloseAccountInstruction(source, treasury, deposit));
    return { instructions, ...budget };
  }

  async broadcast(prepared: PreparedTransaction): Promise<void> {
    const record = JSON.parse(prepared.raw) as SweepRecord;
    if (landed(await this.signatureStatus(prepared.txHash))) return;
    try {
      await this.node.rpc<string>('sendTransaction', [
        record.transaction,
        { encoding: 'base64', preflightCommitment: 'confirmed', maxRetries: 0 },
      ]);
      this.unsent.delete(prepared.txHash);
      return;
    } catch (error) {
      if (!(error instanceof SolanaRpcError)) {
        this.unsent.delete(prepared.txHash); // perhaps taken and forwarded: unknown outcome, sent again later
        throw error;
      }
      const err = JSON.stringify(error.error.data?.err ?? error.error.message);
      if (/AlreadyProcessed|already been processed/.test(err)) return;
      // A preflight failure is the answering backend's bank refusing it now (agave rpc.rs send_transaction:
      // the transaction is simulated on the bank at preflightCommitment, and an error answers -32002 before
      // anything is forwarded). For a transaction never sent, that is final. Once sent (by this process, or
      // before a restart: one it did not prepare), a copy may be on its way to the leader, and the bank that
      // refuses it may be a lagging backend's (up to 128 slots behind, without the funding the first send
      // saw): only the expiry evidence decides (refuseIfExpired). A blockhash the node does not know (yet, or
      // any more) decides nothing by itself either.
      const preflight = error.error.code === -32002 && !/BlockhashNotFound|Blockhash not found/i.test(err);
      if (preflight && this.unsent.has(prepared.txHash)) {
        throw new TransactionRejectedError(`${prepared.txHash} refused: ${err.slice(0, 300)}`);
      }
      if (error.error.code === -32003) throw new TransactionRejectedError(`${prepared.txHash}: ${error.message}`);
      await this.refuseIfExpired(prepared.txHash, record);
      throw error;
    }
  }

  /** The signature's status, history searched; a failed transaction (fee taken, nothing moved) is refused. */
  private async signatureStatus(signature: string): Promise<SignatureStatus | undefined> {
    const { value } = await this.node.signatureStatuses([signature]);
    const status = value[0];
    if (status?.err != null)
      throw new TransactionRejectedError(`${signature} failed on chain: ${JSON.stringify(status.err)}`);
    return status;
  }

  /**
   * A sweep is declared refused, and a new one built, only on evidence that
   * no validator can ever take it, all read at one finalized slot past its
   * last valid block height: no backend that has seen that slot knows the
   * signature (processed included), and the deposit's finalized balance
   * there is still what it held before the sweep. Behind a load balancer
   * each call may reach another backend, one that lags (up to 128 slots):
   * an answer from before that slot decides nothing.
   *
   * The balance is the proof where the node keeps no history: past its status
   * cache, such a node knows no signature, landed or not. While the answering
   * bank's status cache still covers every block the transaction could have
   * landed in, "unknown" is proof by itself, so it is replaced then whatever
   * its payer's balance: a payer's balance moves for other reasons (a deposit
   * paid again, another refund, the merchant funding a refund wallet), and
   * the replacement takes only its payout's amounts, as this one did.
   */
  private async refuseIfExpired(signature: string, record: SweepRecord): Promise<void> {
    const { context, value } = await this.node.rpc<{
      context: { slot: number };
      value: { lastValidBlockHeight: number };
    }>('getLatestBlockhash', [{ commitment: 'finalized' }]);
    const finalizedHeight = value.lastValidBlockHeight - BLOCKHASH_VALID_BLOCKS;
    if (finalizedHeight <= record.lastValidBlockHeight) return;
    const statuses = await this.node.signatureStatuses([signature]);
    if (statuses.value[0]?.err != null)
      throw new TransactionRejectedError(`${signature} failed on chain: ${JSON.stringify(statuses.value[0].err)}`);
    if (statuses.slot < context.slot || statuses.value[0]) return;
    // The answering bank's height, at most: no more blocks than slots since the finalized one.
    const answeredHeight = finalizedHeight + (statuses.slot - context.slot);
    // It could have landed from its blockhash's next block on: the cache reaches back to there.
    const cached = answeredHeight <= record.lastValidBlockHeight - BLOCKHASH_VALID_BLOCKS + STATUS_CACHE_BLOCKS;
    if (record.deposit && !cached) {
      const held = await this.depositHeld(record.deposit, context.slot);
      // Expired, it can never land from now on; but this node no longer says whether it landed before. Not
      // replaced (the payout could be paid twice), and said so: the failure's reason is on the operator's list.
      if (held !== BigInt(record.deposit.held)) {
        throw new Error(
          `${signature} expired (block height ${finalizedHeight} > ${record.lastValidBlockHeight}) and this node no longer says whether it landed: past its status cache, with no transaction history; ${record.deposit.address} held ${record.deposit.held} before it and ${held} now. Not replaced: check the signature on a node with history or an explorer`,
        );
      }
    }
    throw new TransactionRejectedError(
      `${signature} expired without landing (block height ${finalizedHeight} > ${record.lastValidBlockHeight})`,
    );
  }

  /** What a deposit holds on the finalized chain at `slot` or later (the node refuses an earlier answer: -32016). */
  private async depositHeld(deposit: NonNullable<SweepRecord['deposit']>, slot: number): Promise<bigint> {
    const at = { commitment: 'finalized', minContextSlot: slot } as const;
    if (!deposit.mint) {
      const answer = await this.node.rpc<{ value: Integer }>('getBalance', [deposit.address, at]);
      return toBigInt(answer.value);
    }
    const accounts = await this.depositTokenAccounts(new PublicKey(deposit.address), new PublicKey(deposit.mint), at);
    return accounts.reduce((sum, a) => sum + a.amount, 0n);
  }
}
