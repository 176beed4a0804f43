// Solana (SOL, and USDT and USDC as SPL tokens) behind the chain port,
// through a Solana JSON-RPC endpoint (a validator's RPC port, or a provider's).
//
// Detection reads blocks, slot by slot, like every other chain here: a
// block's transactions carry their accounts' balances before and after
// (`preBalances`/`postBalances` in lamports, `preTokenBalances`/
// `postTokenBalances` by mint and owner), so a payment is any account whose
// balance rose in a successful transaction, whichever program moved it (a
// System transfer, a token transfer, the lamports of a closed token account).
// A SOL payment is the deposit address's own rise; a token payment is the
// rise of a token account the deposit address owns, of a catalogue mint. A
// skipped slot (no block was produced) is an empty block carrying its parent's
// hash, so the watcher's chain of hashes stays whole; a block that a fork
// drops becomes a skipped slot, or another block, and its payments are
// withdrawn. Blocks are read at the `confirmed` commitment; the head reports
// the finalized slot, so a payment confirms only once finalized (and as deep
// as configured, 32 slots by default). Why blocks, not getSignaturesForAddress
// per open address: see docs/solana.md.
//
// Settlement: one transaction per sweep, signed by the fee wallet (the fee
// payer: deposit addresses never need SOL for fees) and the deposit key.
//   - SOL: the payout to the merchant, the quoted network fee back to the fee
//     wallet that paid it, the rest to the treasury (to the fee wallet while
//     the treasury would stay under the rent-exempt minimum): the deposit
//     address is left with 0 lamports, and the runtime deletes it.
//   - SPL: the merchant's and the treasury's associated token accounts created
//     when missing (rent paid by the fee wallet), the payout and the platform
//     fee by transferChecked, then the deposit's token account closed, its
//     rent to the treasury.
// A refund (from a deposit before its settlement, or from a merchant's refund
// wallet) is the same transaction without the rest: SOL, the payout and the
// quoted fee back to the fee wallet, the payer keeping what is left; tokens,
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
  NATIVE_MINT,
  TOKEN_2022_PROGRAM_ID,
  TOKEN_PROGRAM_ID,
  createAssociatedTokenAccountIdempotentInstruction,
  createCloseAccountInstruction,
  createTransferCheckedInstruction,
  getAssociatedTokenAddressSync,
} from '@solana/spl-token';
import bs58 from 'bs58';
import { findChain, type ChainName } from '../../domain/catalogue.ts';
import type { DepositKeyring } from '../keys/derivation.ts';
import { HeadPoller } from './head-poller.ts';
import { ChainNode, checkedOpen, RPC_TIMEOUT_MS, type RetryPolicy } from './node.ts';
import {
  PayoutRefusedError,
  TransactionRejectedError,
  type ChainAdapter,
  type ChainBlock,
  type ChainHead,
  type ChainTransfer,
  type OutgoingTransfer,
  type PreparedTransaction,
  type TransactionStatus,
} from './port.ts';

/** Genesis hashes of the public clusters (getGenesisHash). */
export const solanaClusters: Record<string, string> = {
  'mainnet-beta': '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d',
  devnet: 'EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG',
  testnet: '4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY',
};

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
/**
 * getBlock's answers for a slot it does not serve: -32004 (not available at
 * that commitment), -32007 and -32009 (skipped, or not kept by this node).
 * Skipped slots are found from getBlocks' list instead.
 */
const NOT_SERVED = [-32004, -32007, -32009];
/** A blockhash is valid this many blocks after its own (getLatestBlockhash's lastValidBlockHeight is its block's height plus this). */
const BLOCKHASH_VALID_BLOCKS = 150;
/**
 * A bank answers getSignatureStatuses from its status cache for the last this
 * many rooted blocks, and for its unrooted ones, whatever history the node
 * keeps (agave runtime/src/status_cache.rs: MAX_CACHE_ENTRIES, which is
 * MAX_RECENT_BLOCKHASHES; `purge_roots` drops the oldest root past it).
 */
const STATUS_CACHE_BLOCKS = 300;
/** Slots listed by one getBlocks: a watcher step's worth (it reads up to 100 blocks a step). */
const SLOTS_LISTED = 100;
/** Full blocks fetched at once while the watcher reads forward. */
const BLOCKS_IN_FLIGHT = 4;
/**
 * The most signatures one getSignatureStatuses takes (agave
 * rpc-client-api request.rs, MAX_GET_SIGNATURE_STATUSES_QUERY_ITEMS; rpc.rs
 * get_signature_statuses refuses more with -32602 "Too many inputs provided").
 */
export const MAX_SIGNATURE_STATUSES = 256;
/** Signatures remembered as finalized, so that sending one again asks nothing (a finalized transaction stays). */
const FINAL_SIGNATURES_KEPT = 1_024;
/** Token-2022 puts an account's type (1: mint, 2: token account) after a classic token account's 165 bytes. */
const TOKEN_2022_ACCOUNT_TYPE_OFFSET = 165;
/** A sweep's transaction fits the deposit's associated token account and this many others (1,232 bytes). */
const MAX_SWEPT_TOKEN_ACCOUNTS = 6;
/** Token-account indexes are offset by this, so that a SOL and a token payment of one transaction never share an index. */
export const TOKEN_INDEX_OFFSET = 256;

export interface SolanaToken {
  symbol: string;
  mint: string;
  decimals: number;
}

export interface SolanaChainOptions {
  rpcUrl: string;
  keyring: Pick<DepositKeyring, 'deriveDepositKey' | 'deriveSolanaServiceKey'>;
  /** mainnet-beta (default), devnet, testnet, or a genesis hash. */
  cluster?: string;
  /** The catalogue's mints unless a test cluster names its own. */
  tokens?: SolanaToken[];
  treasury?: string;
  confirmations?: number;
  pollMs?: number;
  retry?: RetryPolicy;
}

// ---------------------------------------------------------------------------
// The RPC's answers, as `encoding: "json"` gives them (docs.solana.com/api/http;
// blocks are read with `transactionDetails: "accounts"` or "none")
// ---------------------------------------------------------------------------

/** An integer of the RPC: a number, or a decimal string where it passes 2^53 (parseRpcJson). */
type Integer = number | string;

export interface RpcTokenBalance {
  accountIndex: number;
  mint: string;
  owner?: string;
  programId?: string;
  uiTokenAmount: { amount: string; decimals: number; uiAmount: number | null; uiAmountString: string };
}

export interface RpcTransactionMeta {
  err: unknown;
  fee: Integer;
  preBalances: Integer[];
  postBalances: Integer[];
  preTokenBalances?: RpcTokenBalance[];
  postTokenBalances?: RpcTokenBalance[];
  loadedAddresses?: { writable: string[]; readonly: string[] };
}

export interface RpcTransaction {
  meta: RpcTransactionMeta | null;
  transaction: { signatures: string[]; message: { accountKeys: string[]; recentBlockhash: string } };
  version?: 'legacy' | number;
}

/**
 * A transaction as `transactionDetails: "accounts"` gives it (agave
 * transaction-status, build_json_accounts): its signatures and every key it
 * loads, lookup tables' included, in order, and the balances, without
 * instructions or logs: what detection reads, at a fraction of the bytes.
 */
export interface RpcAccountsTransaction {
  meta: Omit<RpcTransactionMeta, 'loadedAddresses'> | null;
  transaction: {
    signatures: string[];
    accountKeys: { pubkey: string; writable: boolean; signer: boolean; source: 'transaction' | 'lookupTable' }[];
  };
  version?: 'legacy' | number;
}

/** A transaction's keys, in the order of its balances: v0 keys loaded from lookup tables follow the message's own. */
function accountKeysOf({ meta, transaction }: RpcTransaction | RpcAccountsTransaction): string[] {
  if ('accountKeys' in transaction) return transaction.accountKeys.map((k) => k.pubkey);
  const loaded = (meta as RpcTransactionMeta | null)?.loadedAddresses;
  return [...transaction.message.accountKeys, ...(loaded?.writable ?? []), ...(loaded?.readonly ?? [])];
}

/** A block as `transactionDetails: "none"` gives it: no transactions. */
export type RpcBlockHeader = Omit<RpcBlock, 'transactions'>;

/** A block as `transactionDetails: "accounts"` gives it. */
export type RpcAccountsBlock = RpcBlockHeader & { transactions: RpcAccountsTransaction[] };

export interface RpcBlock {
  blockhash: string;
  previousBlockhash: string;
  parentSlot: number;
  blockHeight: number | null;
  blockTime: number | null;
  transactions: RpcTransaction[];
}

interface RpcError {
  code: number;
  message: string;
  data?: { err?: unknown; logs?: string[] };
}

class SolanaRpcError extends Error {
  constructor(
    readonly method: string,
    readonly error: RpcError,
  ) {
    super(`${method}: ${error.message.slice(0, 300)} (${error.code})`);
  }
}

/**
 * JSON.parse, with the integers that can pass 2^53 kept exact: lamports in
 * balance arrays and in `fee`, `lamports` and `value`, written as strings
 * before parsing when they have 16 digits or more (token amounts are strings
 * already). A quote inside a JSON string is escaped, so the patterns only meet
 * real keys. (A lossless JSON parser did the same at six times the cost of a
 * block: the profile in docs/solana.md.)
 */
export function parseRpcJson<T>(text: string): T {
  const exact = text
    .replace(
      /"(preBalances|postBalances)":\[([\d,\s]*)\]/g,
      (_all, key: string, list: string) => `"${key}":[${list.replace(/\d{16,}/g, '"$&"')}]`,
    )
    .replace(/"(fee|lamports|value)":\s*(\d{16,})/g, '"$1":"$2"');
  return JSON.parse(exact) as T;
}

const toBigInt = (value: Integer | string | undefined) => BigInt(value ?? 0);

/**
 * The payments a block's transactions made: every account whose balance rose
 * in a successful transaction. SOL to an account (index: the account's index
 * in the transaction), and tokens of the given mints to the owner of the
 * token account (index: TOKEN_INDEX_OFFSET + the token account's index).
 */
export function parseSolanaBlock(
  block: { transactions: (RpcTransaction | RpcAccountsTransaction)[] },
  tokens: readonly SolanaToken[],
): ChainTransfer[] {
  const transfers: ChainTransfer[] = [];
  const tokenOf = new Map(tokens.map((t) => [t.mint, t]));
  for (const tx of block.transactions) {
    const { meta, transaction } = tx;
    if (!meta || meta.err !== null) continue; // a failed transaction moved nothing but its fee
    const txHash = transaction.signatures[0]!;
    accountKeysOf(tx).forEach((key, index) => {
      const rise = toBigInt(meta.postBalances[index]) - toBigInt(meta.preBalances[index]);
      if (rise > 0n) transfers.push({ txHash, index, to: key, token: 'SOL', amount: rise });
    });
    for (const post of meta.postTokenBalances ?? []) {
      const token = tokenOf.get(post.mint);
      if (!token || !post.owner) continue;
      const pre = meta.preTokenBalances?.find((b) => b.accountIndex === post.accountIndex && b.mint === post.mint);
      const rise = BigInt(post.uiTokenAmount.amount) - BigInt(pre?.uiTokenAmount.amount ?? '0');
      if (rise > 0n) {
        transfers.push({
          txHash,
          index: TOKEN_INDEX_OFFSET + post.accountIndex,
          to: post.owner,
          token: token.symbol,
          amount: rise,
        });
      }
    }
  }
  return transfers;
}

/** A sweep as recorded: the signed bytes, and the block height after which no validator takes them. */
interface SweepRecord {
  transaction: string;
  lastValidBlockHeight: number;
  /**
   * What the deposit held before it (lamports, or base units of the mint in
   * all its token accounts), decimal: while the finalized chain shows
   * anything else, something moved it, and no new sweep is built. (Absent in
   * records made before it was kept.)
   */
  deposit?: { address: string; mint?: string; held: string };
  /** A refund's: it takes only its amount, so a balance moved by something else says nothing against replacing it. */
  refund?: true;
}

/** A signature's status as getSignatureStatuses reports it. */
interface SignatureStatus {
  slot: number;
  err: unknown;
  confirmationStatus: 'processed' | 'confirmed' | 'finalized' | null;
}

/** The instructions of a sweep, and what the deposit held before it. */
interface Sweep {
  instructions: TransactionInstruction[];
  held: bigint;
}

/** The compute units a sweep asks for, and its priority price per unit (none at 0). */
const computeBudget = (units: bigint, microLamports: bigint): TransactionInstruction[] => [
  ComputeBudgetProgram.setComputeUnitLimit({ units: Number(units) }),
  ...(microLamports > 0n ? [ComputeBudgetProgram.setComputeUnitPrice({ microLamports })] : []),
];

/** On the chain for good enough to count: confirmed by a supermajority at least (a processed one can be dropped). */
const landed = (status: SignatureStatus | undefined): status is SignatureStatus =>
  status?.confirmationStatus === 'confirmed' || status?.confirmationStatus === 'finalized';

/**
 * A refund's payout takes its amount and leaves the rest where it is, for the
 * deposit's settlement or in the merchant's refund wallet. A settlement's
 * sweep takes the deposit whole.
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

export class SolanaChain implements ChainAdapter {
  readonly chain: ChainName = 'solana';
  readonly treasury: string;
  readonly feeWallet: string;
  private readonly feePayer: Keypair;
  private readonly tokens: SolanaToken[];
  private readonly poller: HeadPoller;
  private readonly node: ChainNode;
  private nextId = 1;
  /** The blocks last answered, by slot: read again, a block whose hash is unchanged is not fetched whole. */
  private readonly recentBlocks = new Map<number, ChainBlock>();
  private readonly preparedByReference = new Map<string, PreparedTransaction>();

  private constructor(private readonly options: SolanaChainOptions) {
    this.tokens =
      options.tokens ??
      findChain('solana')!
        .supportedTokens.filter((t) => t.contractAddress !== null)
        .map((t) => ({ symbol: t.symbol, mint: t.contractAddress!, decimals: t.decimals }));
    this.feePayer = Keypair.fromSeed(options.keyring.deriveSolanaServiceKey('fee').privateKey);
    this.feeWallet = this.feePayer.publicKey.toBase58();
    this.treasury = options.treasury ?? options.keyring.deriveSolanaServiceKey('treasury').address;
    this.poller = new HeadPoller(() => this.rpc<number>('getSlot', [{ commitment: 'confirmed' }]), options.pollMs);
    this.node = new ChainNode({
      urls: [options.rpcUrl],
      retry: options.retry,
      answered: (error) => error instanceof SolanaRpcError,
    });
  }

  /**
   * Connects and checks the cluster's genesis hash and the configured
   * treasury; a mismatch, a treasury that cannot receive, or an RPC that does
   * not answer stops start-up with one line naming the variable.
   */
  static async open(options: SolanaChainOptions): Promise<SolanaChain> {
    const adapter = new SolanaChain(options);
    return checkedOpen(adapter, async () => {
      await adapter.checkCluster(options.cluster ?? 'mainnet-beta');
      // The treasury takes token fees in an associated account derived for it: a token account or a mint would lose them.
      const treasuryProblem = options.treasury && (await adapter.receivingProblem(options.treasury));
      if (treasuryProblem) throw new Error(`CHAIN_SOLANA_TREASURY: ${treasuryProblem}`);
      await adapter.checkTokens();
      await adapter.refreshPriorityPrice();
    });
  }

  /**
   * Only classic SPL Token mints are taken: a Token-2022 mint's accounts live
   * at other addresses and may carry extensions (transfer fees, hooks) that
   * change what a transfer delivers, and wrapped SOL is SOL held in a token
   * account; neither is detected nor swept here, so either stops start-up.
   */
  private async checkTokens(): Promise<void> {
    for (const { symbol, mint } of this.tokens) {
      const refused = (why: string) => new Error(`CHAIN_SOLANA_TOKENS: ${symbol}'s mint ${mint} ${why}`);
      if (mint === NATIVE_MINT.toBase58())
        throw refused('is wrapped SOL, which is not taken: SOL payments are taken as SOL');
      const { value } = await this.call<{ value: { owner: string } | null }>('getAccountInfo', [
        mint,
        { commitment: 'finalized', encoding: 'base64', dataSlice: { offset: 0, length: 0 } },
      ]);
      if (!value) throw refused('does not exist on this cluster');
      if (value.owner === TOKEN_2022_PROGRAM_ID.toBase58())
        throw refused('is a Token-2022 mint; only SPL Token mints are supported');
      if (value.owner !== TOKEN_PROGRAM_ID.toBase58()) throw refused(`is not a token mint (owner ${value.owner})`);
    }
  }

  /**
   * The price per compute unit a sweep bids (micro-lamports): the 75th
   * percentile of the last 150 blocks' lowest landed fees
   * (getRecentPrioritizationFees), capped. Under congestion a sweep without
   * it waits behind those that pay, until its blockhash expires.
   */
  private priorityPrice = { microLamports: 0n, at: 0 };
  async refreshPriorityPrice(): Promise<void> {
    const fees = await this.call<{ slot: number; prioritizationFee: Integer }[]>('getRecentPrioritizationFees', [[]]);
    const sorted = fees.map((f) => toBigInt(f.prioritizationFee)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const percentile = sorted[Math.floor((sorted.length * 3) / 4)] ?? 0n;
    this.priorityPrice = {
      microLamports: percentile < MAX_PRIORITY_PRICE ? percentile : MAX_PRIORITY_PRICE,
      at: Date.now(),
    };
  }

  private async checkCluster(cluster: string): Promise<void> {
    const expected = solanaClusters[cluster] ?? cluster;
    let genesis: string;
    try {
      genesis = await this.call<string>('getGenesisHash', []);
    } catch (error) {
      throw this.node.unanswered('CHAIN_SOLANA_RPC_URL', error, 'the RPC');
    }
    if (genesis !== expected) {
      const known = Object.entries(solanaClusters).find(([, hash]) => hash === genesis)?.[0];
      throw new Error(
        `CHAIN_SOLANA_RPC_URL is an RPC of ${known ? `Solana ${known}` : `the cluster whose genesis hash is ${genesis}`}, not ${
          solanaClusters[cluster] ? `Solana ${cluster}` : `the cluster of genesis hash ${expected}`
        }; set CHAIN_SOLANA_CLUSTER=${known ?? genesis} if that cluster is meant`,
      );
    }
  }

  close(): void {
    this.node.close();
    this.poller.close();
  }

  // -------------------------------------------------------------------------
  // JSON-RPC
  // -------------------------------------------------------------------------

  /** One call, retried with growing delays (rate limits, dropped connections); an answered error is not retried. */
  private call<T>(method: string, params: unknown[]): Promise<T> {
    return this.node.call(method, (signal) => this.rpc<T>(method, params, signal));
  }

  private async rpc<T>(method: string, params: unknown[], signal = AbortSignal.timeout(RPC_TIMEOUT_MS)): Promise<T> {
    const response = await fetch(this.options.rpcUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: this.nextId++, method, params }),
      signal,
    });
    // 429 and 5xx: a rate limit or a node in trouble, retried by call().
    if (!response.ok) throw new Error(`${method}: HTTP ${response.status}`);
    const answer = parseRpcJson<{ result?: T; error?: RpcError }>(await response.text());
    if (answer.error) throw new SolanaRpcError(method, answer.error);
    return answer.result as T;
  }

  // -------------------------------------------------------------------------
  // Reading the chain
  // -------------------------------------------------------------------------

  async head(): Promise<ChainHead> {
    if (Date.now() - this.priorityPrice.at > PRIORITY_PRICE_MS) void this.refreshPriorityPrice().catch(() => undefined);
    const [latest, finalized] = await Promise.all([
      this.call<{ context: { slot: number }; value: { blockhash: string } }>('getLatestBlockhash', [
        { commitment: 'confirmed' },
      ]),
      this.call<number>('getSlot', [{ commitment: 'finalized' }]),
    ]);
    return { height: latest.context.slot, hash: latest.value.blockhash, finalized };
  }

  /**
   * A block at the confirmed commitment with as much detail as asked ("none":
   * its hash and parent only), or undefined when this node does not serve it
   * now: -32004 is what agave's rpc.rs (`get_block`) answers both for a slot
   * above the node's confirmed bank (a lagging backend) and for a skipped
   * slot not yet below the root, so it proves nothing.
   */
  private async rpcBlock<Details extends 'accounts' | 'none'>(
    slot: number,
    details: Details,
  ): Promise<(Details extends 'accounts' ? RpcAccountsBlock : RpcBlockHeader) | undefined> {
    try {
      return await this.call('getBlock', [
        slot,
        {
          commitment: 'confirmed',
          encoding: 'json',
          transactionDetails: details,
          rewards: false,
          maxSupportedTransactionVersion: 0,
        },
      ]);
    } catch (error) {
      if (error instanceof SolanaRpcError && NOT_SERVED.includes(error.error.code)) {
        // The listing said it holds a block: ask again for the list next time.
        this.listing = undefined;
        return undefined;
      }
      throw error;
    }
  }

  /**
   * The slots from `slot` on that hold a block on the node's confirmed chain
   * (getBlocks: agave lists the rooted slots, then the confirmed bank's
   * ancestors), as far as it has confirmed; empty when it has not confirmed a
   * block at or after `slot` yet. Any slot in between that the list leaves
   * out is skipped on that chain: a confirmed block's ancestors are all
   * listed. One call serves a run of slots read forward; a slot at or below
   * one already answered (the watcher's hash check) lists again, so that a
   * fork is seen.
   */
  private listing?: { produced: number[]; answered: number };
  private async producedFrom(slot: number): Promise<number[]> {
    const listed = this.listing;
    const last = listed?.produced.at(-1);
    if (listed && last !== undefined && slot > listed.answered && slot <= last) {
      listed.answered = slot;
      return listed.produced.filter((s) => s >= slot);
    }
    const produced = await this.call<number[]>('getBlocks', [
      slot,
      slot + SLOTS_LISTED - 1,
      { commitment: 'confirmed' },
    ]);
    this.listing = { produced, answered: slot };
    return produced;
  }

  /** Full blocks being fetched ahead of the watcher's reads, by slot; each is taken once. */
  private readonly fetching = new Map<number, Promise<RpcAccountsBlock | undefined>>();
  private blockWithAccounts(slot: number): Promise<RpcAccountsBlock | undefined> {
    let read = this.fetching.get(slot);
    if (!read) {
      read = this.rpcBlock(slot, 'accounts');
      read.catch(() => this.fetching.delete(slot));
      this.fetching.set(slot, read);
    }
    return read;
  }

  async block(slot: number): Promise<ChainBlock | undefined> {
    const produced = await this.producedFrom(slot);
    const next = produced[0];
    // The node has not confirmed a block at or after it: not decided yet.
    if (next === undefined) return undefined;
    if (next > slot) {
      // A skipped slot carries the hash of the last block before it, which
      // the next produced block names as its parent.
      const successor = await this.rpcBlock(next, 'none');
      if (!successor) return undefined;
      const parent = successor.previousBlockhash;
      const time = new Date((successor.blockTime ?? 0) * 1000);
      return { height: slot, hash: parent, parentHash: parent, timestamp: time, transfers: [] };
    }
    // Read again (the watcher's hash check): the header tells whether it is the same block.
    const known = this.recentBlocks.get(slot);
    if (known) {
      const header = await this.rpcBlock(slot, 'none');
      if (!header) return undefined;
      if (header.blockhash === known.hash) return known;
    }
    // The next few produced slots are fetched meanwhile: the watcher asks for them next.
    for (const ahead of produced.slice(1, BLOCKS_IN_FLIGHT)) void this.blockWithAccounts(ahead).catch(() => undefined);
    const read = await this.blockWithAccounts(slot);
    for (const fetched of this.fetching.keys()) if (fetched <= slot) this.fetching.delete(fetched);
    if (!read) return undefined;
    const parsed: ChainBlock = {
      height: slot,
      hash: read.blockhash,
      parentHash: read.previousBlockhash,
      timestamp: new Date((read.blockTime ?? 0) * 1000),
      transfers: parseSolanaBlock(read, this.tokens),
    };
    this.recentBlocks.set(slot, parsed);
    while (this.recentBlocks.size > 16) this.recentBlocks.delete(this.recentBlocks.keys().next().value!);
    return parsed;
  }

  onNewBlock(listener: () => void): () => void {
    return this.poller.onNewBlock(listener);
  }

  /** Lamports of an address, or base units of a token in every account of its mint the address owns. */
  async balanceOf(address: string, token = 'SOL'): Promise<bigint> {
    if (token !== 'SOL') {
      const accounts = await this.depositTokenAccounts(new PublicKey(address), new PublicKey(this.tokenOf(token).mint));
      return accounts.reduce((sum, a) => sum + a.amount, 0n);
    }
    const answer = await this.call<{ value: Integer }>('getBalance', [address, { commitment: 'confirmed' }]);
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
    const { value } = await this.call<{
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
    const key = this.options.keyring.deriveDepositKey('solana', transfer.from.derivationIndex);
    if (key.address !== transfer.from.address) {
      throw new TransactionRejectedError(
        `derivation index ${transfer.from.derivationIndex} is not ${transfer.from.address}`,
      );
    }
    const deposit = Keypair.fromSeed(key.privateKey);
    const { instructions, held } =
      transfer.token === 'SOL'
        ? await this.solSweep(deposit.publicKey, transfer)
        : await this.tokenSweep(deposit.publicKey, transfer);
    // A blockhash of a finalized block: no fork can make it unknown while it is valid.
    const { value } = await this.call<{ value: { blockhash: string; lastValidBlockHeight: number } }>(
      'getLatestBlockhash',
      [{ commitment: 'finalized' }],
    );
    const transaction = new Transaction({
      feePayer: this.feePayer.publicKey,
      blockhash: value.blockhash,
      lastValidBlockHeight: value.lastValidBlockHeight,
    }).add(...instructions);
    transaction.sign(this.feePayer, deposit);
    const record: SweepRecord = {
      transaction: transaction.serialize().toString('base64'),
      lastValidBlockHeight: value.lastValidBlockHeight,
      deposit: {
        address: transfer.from.address,
        ...(transfer.token !== 'SOL' && { mint: this.tokenOf(transfer.token).mint }),
        held: held.toString(),
      },
      ...(isRefund(transfer) && { refund: true as const }),
    };
    const prepared = { txHash: bs58.encode(transaction.signature!), raw: JSON.stringify(record) };
    this.preparedByReference.set(transfer.reference, prepared);
    return prepared;
  }

  /**
   * Payout, the fee back to the fee wallet, and everything else to the
   * treasury, or to the fee wallet while the treasury would stay under the
   * rent-exempt minimum: the runtime refuses to leave an account under it
   * (a fresh treasury holds nothing, and a 1% fee is often less), and would
   * refuse every retry the same way. A refund leaves everything else where
   * it is.
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
    const rest = balance - transfer.amount - network;
    if (rest < 0n) {
      throw new TransactionRejectedError(
        `${deposit.toBase58()} holds ${balance} lamports, less than ${transfer.amount + network}`,
      );
    }
    const send = (to: string | PublicKey, lamports: bigint) =>
      SystemProgram.transfer({ fromPubkey: deposit, toPubkey: new PublicKey(to), lamports });
    if (isRefund(transfer)) {
      if (rest > 0n && rest < rentExempt) {
        // The runtime refuses to leave the payer with less than the minimum (0 is allowed), at every retry.
        throw new PayoutRefusedError(
          'fees_exceed_amount',
          `a refund of ${transfer.amount + network} lamports from ${deposit.toBase58()}, which holds ${balance}, leaves it ${rest}: under the rent-exempt minimum of ${rentExempt}`,
        );
      }
      const instructions = [
        ...computeBudget(SOL_SWEEP_COMPUTE_UNITS, price),
        send(transfer.to, transfer.amount),
        send(this.feePayer.publicKey, network),
      ];
      return { instructions, held: balance };
    }
    const toTreasury = rest > 0n && treasuryHeld + rest >= rentExempt ? rest : 0n;
    const instructions = [
      ...computeBudget(SOL_SWEEP_COMPUTE_UNITS, price),
      send(transfer.to, transfer.amount),
      send(this.feePayer.publicKey, network + rest - toTreasury),
    ];
    if (toTreasury > 0n) instructions.push(send(this.treasury, toTreasury));
    return { instructions, held: balance };
  }

  /** The least a System account with no data may hold (890,880 lamports on mainnet today), asked once. */
  private rentExempt?: Promise<bigint>;
  private rentExemptMinimum(): Promise<bigint> {
    this.rentExempt ??= this.call<Integer>('getMinimumBalanceForRentExemption', [0]).then(toBigInt, (error) => {
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
    const { value } = await this.call<{ value: { pubkey: string; account: { data: [string, string] } }[] }>(
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
    // A sweep gives whatever the deposit holds beyond the payout (the platform fee, an overpayment) to the treasury.
    const toTreasury = held - transfer.amount;
    if (toTreasury < 0n)
      throw new TransactionRejectedError(
        `${deposit.toBase58()} holds ${held} ${token.symbol}, less than ${transfer.amount}`,
      );
    // Enough compute for the account creations, the transfers and the closes, whatever the default.
    const budget = computeBudget(BigInt(200_000 + others.length * 30_000), this.priorityPrice.microLamports);
    if (isRefund(transfer)) {
      return { instructions: [...budget, ...tokenRefund(deposit, accounts, source, transfer, token, payer)], held };
    }
    const merchant = new PublicKey(transfer.to);
    const merchantAccount = getAssociatedTokenAddressSync(mint, merchant, true);
    const treasury = new PublicKey(this.treasury);
    const treasuryAccount = getAssociatedTokenAddressSync(mint, treasury, true);
    const instructions: TransactionInstruction[] = [...budget];
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
    instructions.push(createCloseAccountInstruction(source, treasury, deposit));
    return { instructions, held };
  }

  async broadcast(prepared: PreparedTransaction): Promise<void> {
    const record = JSON.parse(prepared.raw) as SweepRecord;
    // Sent again once final (the payout engine does so before completing): nothing left to do or ask.
    if (this.finalSignatures.has(prepared.txHash)) return;
    if (landed(await this.signatureStatus(prepared.txHash))) return;
    try {
      await this.call<string>('sendTransaction', [
        record.transaction,
        { encoding: 'base64', preflightCommitment: 'confirmed', maxRetries: 0 },
      ]);
      return;
    } catch (error) {
      if (!(error instanceof SolanaRpcError)) throw error; // unknown outcome: sent again later
      const err = JSON.stringify(error.error.data?.err ?? error.error.message);
      if (/AlreadyProcessed|already been processed/.test(err)) return;
      // A blockhash the node does not know (yet, or any more) decides nothing by itself.
      if (!/BlockhashNotFound|Blockhash not found/i.test(err) && error.error.code === -32002) {
        throw new TransactionRejectedError(`${prepared.txHash} refused: ${err.slice(0, 300)}`);
      }
      if (error.error.code === -32003) throw new TransactionRejectedError(`${prepared.txHash}: ${error.message}`);
      await this.refuseIfExpired(prepared.txHash, record);
      throw error;
    }
  }

  /** The signature's status, history searched; a failed transaction (fee taken, nothing moved) is refused. */
  private async signatureStatus(signature: string): Promise<SignatureStatus | undefined> {
    const { value } = await this.signatureStatuses([signature]);
    const status = value[0];
    if (status?.err != null)
      throw new TransactionRejectedError(`${signature} failed on chain: ${JSON.stringify(status.err)}`);
    return status;
  }

  /** Statuses of at most MAX_SIGNATURE_STATUSES signatures, history searched, with the slot the answering backend had seen. */
  private async signatureStatuses(signatures: readonly string[]) {
    const answer = await this.call<{ context: { slot: number }; value: (SignatureStatus | null)[] }>(
      'getSignatureStatuses',
      [signatures, { searchTransactionHistory: true }],
    );
    return { slot: answer.context.slot, value: answer.value.map((status) => status ?? undefined) };
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
   * cache, such a node knows no signature, landed or not. A refund's balance
   * proves nothing more (it takes only its amount), and a refund wallet's
   * moves for other reasons (another refund, the merchant funding it): while
   * the answering bank's status cache still covers every block the
   * transaction could have landed in, "unknown" is proof by itself, so a
   * refund is replaced then whatever its payer's balance. A sweep keeps the
   * balance check: a deposit paid again after its sweep was prepared is an
   * operator's to decide.
   */
  private async refuseIfExpired(signature: string, record: SweepRecord): Promise<void> {
    const { context, value } = await this.call<{
      context: { slot: number };
      value: { lastValidBlockHeight: number };
    }>('getLatestBlockhash', [{ commitment: 'finalized' }]);
    const finalizedHeight = value.lastValidBlockHeight - BLOCKHASH_VALID_BLOCKS;
    if (finalizedHeight <= record.lastValidBlockHeight) return;
    const statuses = await this.signatureStatuses([signature]);
    if (statuses.value[0]?.err != null)
      throw new TransactionRejectedError(`${signature} failed on chain: ${JSON.stringify(statuses.value[0].err)}`);
    if (statuses.slot < context.slot || statuses.value[0]) return;
    // The answering bank's height, at most: no more blocks than slots since the finalized one.
    const answeredHeight = finalizedHeight + (statuses.slot - context.slot);
    // It could have landed from its blockhash's next block on: the cache reaches back to there.
    const cached = answeredHeight <= record.lastValidBlockHeight - BLOCKHASH_VALID_BLOCKS + STATUS_CACHE_BLOCKS;
    if (record.deposit && !(record.refund && cached)) {
      const held = await this.depositHeld(record.deposit, context.slot);
      if (held !== BigInt(record.deposit.held)) return;
    }
    throw new TransactionRejectedError(
      `${signature} expired without landing (block height ${finalizedHeight} > ${record.lastValidBlockHeight})`,
    );
  }

  /** What a deposit holds on the finalized chain at `slot` or later (the node refuses an earlier answer: -32016). */
  private async depositHeld(deposit: NonNullable<SweepRecord['deposit']>, slot: number): Promise<bigint> {
    const at = { commitment: 'finalized', minContextSlot: slot } as const;
    if (!deposit.mint) {
      const answer = await this.call<{ value: Integer }>('getBalance', [deposit.address, at]);
      return toBigInt(answer.value);
    }
    const accounts = await this.depositTokenAccounts(new PublicKey(deposit.address), new PublicKey(deposit.mint), at);
    return accounts.reduce((sum, a) => sum + a.amount, 0n);
  }

  async transactionStatus(txHash: string): Promise<TransactionStatus | undefined> {
    return (await this.transactionStatuses([txHash])).get(txHash);
  }

  /**
   * Many sweeps' statuses for the price of one: one getSignatureStatuses per
   * 256 signatures, and the head once, however many sweeps are open.
   */
  async transactionStatuses(signatures: readonly string[]): Promise<Map<string, TransactionStatus | undefined>> {
    const found: [string, SignatureStatus][] = [];
    for (let at = 0; at < signatures.length; at += MAX_SIGNATURE_STATUSES) {
      const chunk = signatures.slice(at, at + MAX_SIGNATURE_STATUSES);
      const { value } = await this.signatureStatuses(chunk);
      // A failed transaction moved nothing: it is not the payout (broadcast then reports it refused).
      // Processed only: a minority fork can still drop it.
      chunk.forEach((signature, i) => {
        const status = value[i];
        if (status?.err == null && landed(status)) found.push([signature, status]);
      });
    }
    const statuses = new Map<string, TransactionStatus | undefined>(signatures.map((s) => [s, undefined]));
    if (found.length === 0) return statuses;
    const head = await this.head();
    const required = this.options.confirmations ?? 32;
    for (const [signature, status] of found) {
      const depth = head.height - status.slot + 1;
      const final = status.confirmationStatus === 'finalized' || status.slot <= (head.finalized ?? -1);
      if (final) this.rememberFinal(signature);
      statuses.set(signature, {
        blockNumber: status.slot,
        confirmations: final ? depth : Math.min(depth, Math.max(0, required - 1)),
      });
    }
    return statuses;
  }

  /** Signatures seen finalized, oldest first (bounded): a finalized transaction is never undone. */
  private readonly finalSignatures = new Set<string>();
  private rememberFinal(signature: string) {
    this.finalSignatures.add(signature);
    while (this.finalSignatures.size > FINAL_SIGNATURES_KEPT)
      this.finalSignatures.delete(this.finalSignatures.values().next().value!);
  }
}

/** Solana's adapter when it is enabled and has an RPC URL, opened (and its cluster checked). */
export async function openSolanaChain(
  settings: {
    chains: readonly ChainName[];
    chainRpcUrls: Partial<Record<ChainName, string>>;
    solana: { cluster: string; tokens: SolanaToken[] | undefined; treasury: string | undefined } | undefined;
    requiredConfirmations: Record<ChainName, number>;
  },
  keyring: SolanaChainOptions['keyring'],
): Promise<SolanaChain | undefined> {
  const rpcUrl = settings.chainRpcUrls.solana;
  const solana = settings.solana;
  if (!rpcUrl || !solana || !settings.chains.includes('solana')) return undefined;
  return SolanaChain.open({
    rpcUrl,
    keyring,
    cluster: solana.cluster,
    confirmations: settings.requiredConfirmations.solana,
    ...(solana.tokens && { tokens: solana.tokens }),
    ...(solana.treasury && { treasury: solana.treasury }),
  });
}
