// Reading Solana: the head, blocks slot by slot, and where transactions stand.
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
import { HeadPoller } from '../head-poller.ts';
import type { ChainBlock, ChainHead, ChainTransfer, TransactionStatus } from '../port.ts';
import {
  landed,
  MAX_SIGNATURE_STATUSES,
  SolanaRpcError,
  toBigInt,
  type Integer,
  type SignatureStatus,
  type SolanaNode,
} from './node.ts';

/**
 * getBlock's answers for a slot it does not serve: -32004 (not available at
 * that commitment), -32007 and -32009 (skipped, or not kept by this node).
 * Skipped slots are found from getBlocks' list instead.
 */
const NOT_SERVED = [-32004, -32007, -32009];
/** Slots listed by one getBlocks: a watcher step's worth (it reads up to 100 blocks a step). */
const SLOTS_LISTED = 100;
/** Full blocks fetched at once while the watcher reads forward. */
const BLOCKS_IN_FLIGHT = 4;
/** Signatures remembered as finalized, so that sending one again asks nothing (a finalized transaction stays). */
const FINAL_SIGNATURES_KEPT = 1_024;
/** Token-account indexes are offset by this, so that a SOL and a token payment of one transaction never share an index. */
export const TOKEN_INDEX_OFFSET = 256;

export interface SolanaToken {
  symbol: string;
  mint: string;
  decimals: number;
}

// ---------------------------------------------------------------------------
// The RPC's answers, as `encoding: "json"` gives them (docs.solana.com/api/http;
// blocks are read with `transactionDetails: "accounts"` or "none")
// ---------------------------------------------------------------------------

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

export interface SolanaReaderOptions {
  tokens: readonly SolanaToken[];
  confirmations?: number | undefined;
  pollMs?: number | undefined;
  /** Called at every head read (the payer refreshes its priority price). */
  onHead: () => void;
}

export class SolanaReader {
  private readonly poller: HeadPoller;
  /** The blocks last answered, by slot: read again, a block whose hash is unchanged is not fetched whole. */
  private readonly recentBlocks = new Map<number, ChainBlock>();

  constructor(
    private readonly node: SolanaNode,
    private readonly options: SolanaReaderOptions,
  ) {
    this.poller = new HeadPoller(() => node.once<number>('getSlot', [{ commitment: 'confirmed' }]), options.pollMs);
  }

  close(): void {
    this.poller.close();
  }

  async head(): Promise<ChainHead> {
    this.options.onHead();
    const [latest, finalized] = await Promise.all([
      this.node.rpc<{ context: { slot: number }; value: { blockhash: string } }>('getLatestBlockhash', [
        { commitment: 'confirmed' },
      ]),
      this.node.rpc<number>('getSlot', [{ commitment: 'finalized' }]),
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
      return await this.node.rpc('getBlock', [
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
    const produced = await this.node.rpc<number[]>('getBlocks', [
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
      transfers: parseSolanaBlock(read, this.options.tokens),
    };
    this.recentBlocks.set(slot, parsed);
    while (this.recentBlocks.size > 16) this.recentBlocks.delete(this.recentBlocks.keys().next().value!);
    return parsed;
  }

  onNewBlock(listener: () => void): () => void {
    return this.poller.onNewBlock(listener);
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
      const { value } = await this.node.signatureStatuses(chunk);
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

  /** Seen finalized: sending it again has nothing left to do. */
  isFinal(signature: string): boolean {
    return this.finalSignatures.has(signature);
  }
}
