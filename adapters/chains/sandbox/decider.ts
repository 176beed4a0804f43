// The sandbox ledger of one chain, stream `sandbox-ledger-<chain>`: a toy
// blockchain for demos and black-box tests. Blocks are mined on request (one
// per transfer, or empty ones to add confirmations) and the last ones can be
// dropped to play a reorg. It is event-sourced so that a restart keeps the
// chain the watcher has already seen.
//
// Hashes are derived from the block's content and the event's own revision,
// so a block mined after a reorg at a dropped height never repeats the dropped
// block's hash: the watcher finds reorgs by comparing hashes.
import { createHash } from 'node:crypto';
import { encodeBase58 } from 'ethers/utils';
import { findChain, findToken, type ChainName, type ChainType } from '../../../domain/catalogue.ts';
import { type Decider, type DomainEvent, DomainError } from '../../../domain/decider.ts';
import { streams } from '../../../domain/streams.ts';

export const sandboxLedgerStreamName = (chain: ChainName): string => streams.sandboxLedger.name(chain);

/** The most blocks one command may mine (POST /dev/v1/chains/{chain}/blocks `count`). */
export const MAX_BLOCKS_PER_COMMAND = 10_000;

/** Caller-chosen transaction hashes: printable ASCII without spaces, as long as the API accepts. */
const TX_HASH = /^[\x21-\x7e]{1,128}$/;
const HEX = /^(?:0x)?[0-9a-fA-F]+$/;

// ---------------------------------------------------------------- events

export interface LedgerTransfer {
  txHash: string;
  /** Each sandbox transfer is its own transaction, so 0. */
  index: number;
  to: string;
  /** Catalogue symbol of the token sent. */
  token: string;
  /** Base units of `token`, an integer string. */
  amount: string;
  /** The service's own payouts say where from, so that a refund wallet's balance can be read. */
  from?: string;
}

export interface LedgerBlock {
  height: number;
  hash: string;
  parentHash: string;
  /** ISO timestamp, never before the parent's. */
  timestamp: string;
  transfers: LedgerTransfer[];
}

export type BlockMined = DomainEvent<'BlockMined', LedgerBlock>;

export type BlocksDropped = DomainEvent<
  'BlocksDropped',
  {
    /** The first dropped height; the head becomes fromHeight - 1. */
    fromHeight: number;
    depth: number;
    /** Business time of the reorg. */
    droppedAt: string;
  }
>;

export type SandboxLedgerEvent = BlockMined | BlocksDropped;

// ---------------------------------------------------------------- commands

export interface TransferOrder {
  to: string;
  token: string;
  /** Base units of `token`. */
  amount: bigint;
  /** A hash of the caller's choice (to replay a known transaction); generated when absent. */
  txHash?: string;
  from?: string;
}

export type SandboxLedgerCommand =
  | { type: 'MineBlock'; transfers: TransferOrder[]; timestamp: string }
  | { type: 'MineEmptyBlocks'; count: number; timestamp: string }
  | { type: 'Reorg'; depth: number; timestamp: string };

// ---------------------------------------------------------------- state

/**
 * The blocks above genesis as a window [0, length) on an array that a later
 * state may extend in place. Copying the whole chain on every event would
 * make folding a long stream quadratic; with the window a state never sees
 * elements past its own length, so every earlier state stays as it was. An
 * array that another state already extended (or that is frozen) is copied.
 */
interface BlockWindow {
  readonly items: LedgerBlock[];
  readonly length: number;
}

export interface SandboxLedgerState {
  chain: ChainName;
  genesis: LedgerBlock;
  blocks: BlockWindow;
  /** The revision the next event of the stream gets; also the nonce that keeps hashes unique. */
  nextRevision: number;
}

function withBlock(window: BlockWindow, block: LedgerBlock): BlockWindow {
  const owned = window.items.length === window.length && !Object.isFrozen(window.items);
  const items = owned ? window.items : window.items.slice(0, window.length);
  items.push(block);
  return { items, length: window.length + 1 };
}

export function ledgerHeight(state: SandboxLedgerState): number {
  return state.blocks.length;
}

export function blockAt(state: SandboxLedgerState, height: number): LedgerBlock | undefined {
  if (!Number.isInteger(height) || height < 0 || height > state.blocks.length) return undefined;
  return height === 0 ? state.genesis : state.blocks.items[height - 1];
}

export function headBlock(state: SandboxLedgerState): LedgerBlock {
  return blockAt(state, ledgerHeight(state))!;
}

// ---------------------------------------------------------------- hashes

function chainTypeOf(chain: ChainName): ChainType {
  return findChain(chain)!.chainType;
}

const sha = (algorithm: 'sha256' | 'sha512', content: string): Buffer => createHash(algorithm).update(content).digest();

/** A 32-byte hash written the way the chain writes block hashes. */
function blockHashFormat(chainType: ChainType, bytes: Buffer): string {
  switch (chainType) {
    // Bitcoin and Tron name blocks and transactions in bare hex (a Tron txID is 64 hex digits, no 0x).
    case 'bitcoin':
    case 'tron':
      return bytes.toString('hex');
    case 'solana':
      return encodeBase58(bytes);
    default:
      return `0x${bytes.toString('hex')}`;
  }
}

/** Solana identifies a transaction by its 64-byte signature; the others by a 32-byte hash. */
function txHashFor(chainType: ChainType, content: string): string {
  if (chainType === 'solana') return encodeBase58(sha('sha512', content));
  return blockHashFormat(chainType, sha('sha256', content));
}

/** The hash a sandbox transaction gets from its content, in the chain's format (settlements name theirs before broadcasting). */
export function sandboxTxHash(chain: ChainName, content: string): string {
  return txHashFor(chainTypeOf(chain), content);
}

/** Hex is case-insensitive, so hex hashes are kept lowercase (as EVM nodes answer); base58 is not. */
function canonicalTxHash(chainType: ChainType, txHash: string): string {
  return chainType !== 'solana' && HEX.test(txHash) ? txHash.toLowerCase() : txHash;
}

function blockHashOf(chain: ChainName, nonce: number, block: Omit<LedgerBlock, 'hash'>): string {
  return blockHashFormat(chainTypeOf(chain), sha('sha256', JSON.stringify({ chain, nonce, ...block })));
}

function genesisOf(chain: ChainName): LedgerBlock {
  const chainType = chainTypeOf(chain);
  const zero = blockHashFormat(chainType, Buffer.alloc(32));
  return {
    height: 0,
    hash: blockHashFormat(chainType, sha('sha256', `sandbox-ledger-genesis:${chain}`)),
    parentHash: zero,
    timestamp: new Date(0).toISOString(),
    transfers: [],
  };
}

// ---------------------------------------------------------------- decide

function validTimestamp(timestamp: string): string {
  const ms = Date.parse(timestamp);
  if (Number.isNaN(ms)) throw new DomainError('bad_request', `Timestamp must be an ISO date, got '${timestamp}'`);
  return new Date(ms).toISOString();
}

/** Block time never runs backwards, even when the business clock is behind the last block. */
function laterOf(a: string, b: string): string {
  return Date.parse(a) >= Date.parse(b) ? a : b;
}

/** Every transaction hash on the current chain (the dropped blocks' ones are free again). */
function txHashesOnChain(state: SandboxLedgerState): Set<string> {
  const hashes = new Set<string>();
  for (let i = 0; i < state.blocks.length; i++) {
    for (const transfer of state.blocks.items[i]!.transfers) hashes.add(transfer.txHash);
  }
  return hashes;
}

/** The next block on top of `parent`, with its hash; `nonce` is the revision its event will get. */
function nextBlock(
  state: SandboxLedgerState,
  parent: LedgerBlock,
  nonce: number,
  timestamp: string,
  transfers: LedgerTransfer[],
): BlockMined {
  const content = {
    height: parent.height + 1,
    parentHash: parent.hash,
    timestamp: laterOf(timestamp, parent.timestamp),
    transfers,
  };
  return { type: 'BlockMined', data: { ...content, hash: blockHashOf(state.chain, nonce, content) } };
}

function ledgerTransfer(
  state: SandboxLedgerState,
  order: TransferOrder,
  taken: Set<string>,
  generated: () => string,
): LedgerTransfer {
  const chainType = chainTypeOf(state.chain);
  const token = typeof order.token === 'string' ? findToken(state.chain, order.token) : undefined;
  if (!token) throw new DomainError('bad_request', `Token ${order.token} is not supported on ${state.chain}`);
  if (typeof order.amount !== 'bigint' || order.amount <= 0n) {
    throw new DomainError('bad_request', 'Amount must be greater than 0');
  }
  if (typeof order.to !== 'string' || order.to.trim() === '')
    throw new DomainError('bad_request', 'to must be an address');
  if (order.txHash !== undefined && !TX_HASH.test(order.txHash)) {
    throw new DomainError('bad_request', 'txHash must be 1 to 128 printable characters without spaces');
  }
  const txHash = order.txHash === undefined ? generated() : canonicalTxHash(chainType, order.txHash);
  if (taken.has(txHash)) throw new DomainError('conflict', `Transaction ${txHash} is already on the chain`);
  taken.add(txHash);
  return {
    txHash,
    index: 0,
    to: order.to,
    token: token.symbol,
    amount: order.amount.toString(),
    ...(order.from !== undefined && { from: order.from }),
  };
}

function mineBlock(
  command: Extract<SandboxLedgerCommand, { type: 'MineBlock' }>,
  state: SandboxLedgerState,
): SandboxLedgerEvent[] {
  const timestamp = validTimestamp(command.timestamp);
  const parent = headBlock(state);
  const nonce = state.nextRevision;
  const taken = txHashesOnChain(state);
  const chainType = chainTypeOf(state.chain);
  const transfers = command.transfers.map((order, position) =>
    ledgerTransfer(state, order, taken, () =>
      // Unique per (stream revision, position): a retried or re-mined
      // transfer gets a new hash, as a real re-signed transaction would.
      txHashFor(
        chainType,
        JSON.stringify({
          chain: state.chain,
          nonce,
          position,
          to: order.to,
          token: order.token,
          amount: String(order.amount),
        }),
      ),
    ),
  );
  refuseUnfunded(state, transfers);
  return [nextBlock(state, parent, nonce, timestamp, transfers)];
}

/**
 * What `address` holds of `token` on the best chain: what was sent to it less
 * the payouts sent from it. (The sandbox's flat network fee is not charged to
 * the address: payouts take it out of the amount they send.)
 */
export function heldBy(state: SandboxLedgerState, address: string, token: string): bigint {
  let held = 0n;
  for (let i = 0; i < state.blocks.length; i++) {
    for (const t of state.blocks.items[i]!.transfers) {
      if (t.token !== token) continue;
      if (t.to === address) held += BigInt(t.amount);
      if (t.from === address) held -= BigInt(t.amount);
    }
  }
  return held;
}

/**
 * A payout (a transfer that names where it is from) that sends more than its
 * address holds is refused, as a real node refuses it: go-ethereum's
 * core/txpool/validation.go (ValidateTransactionWithState, ErrInsufficientFunds
 * "insufficient funds for gas * price + value"), and a token contract's
 * transfer reverts. Several payouts from one address in a block add up.
 */
function refuseUnfunded(state: SandboxLedgerState, transfers: readonly LedgerTransfer[]): void {
  const spent = new Map<string, bigint>();
  for (const t of transfers) {
    if (t.from === undefined) continue;
    const key = JSON.stringify([t.from, t.token]);
    const total = (spent.get(key) ?? 0n) + BigInt(t.amount);
    spent.set(key, total);
    const held = heldBy(state, t.from, t.token);
    if (total > held) {
      throw new DomainError(
        'conflict',
        `insufficient funds: ${t.from} holds ${held} ${t.token}, the payout sends ${total}`,
      );
    }
  }
}

/** Throws unless `count` is a number of blocks one command may mine. */
export function checkBlockCount(count: number): void {
  if (!Number.isInteger(count) || count < 1 || count > MAX_BLOCKS_PER_COMMAND) {
    throw new DomainError('bad_request', `count must be a whole number from 1 to ${MAX_BLOCKS_PER_COMMAND}`);
  }
}

function mineEmptyBlocks(
  command: Extract<SandboxLedgerCommand, { type: 'MineEmptyBlocks' }>,
  state: SandboxLedgerState,
): SandboxLedgerEvent[] {
  checkBlockCount(command.count);
  const timestamp = validTimestamp(command.timestamp);
  const events: BlockMined[] = [];
  let parent = headBlock(state);
  for (let i = 0; i < command.count; i++) {
    const mined = nextBlock(state, parent, state.nextRevision + i, timestamp, []);
    events.push(mined);
    parent = mined.data;
  }
  return events;
}

function reorg(
  command: Extract<SandboxLedgerCommand, { type: 'Reorg' }>,
  state: SandboxLedgerState,
): SandboxLedgerEvent[] {
  const height = ledgerHeight(state);
  if (height === 0) {
    throw new DomainError(
      'bad_request',
      `There is no block to drop: the ${state.chain} sandbox ledger holds only its genesis block`,
    );
  }
  if (!Number.isInteger(command.depth) || command.depth < 1 || command.depth > height) {
    throw new DomainError(
      'bad_request',
      `depth must be a whole number from 1 to ${height} (the ${state.chain} sandbox ledger's height)`,
    );
  }
  const droppedAt = validTimestamp(command.timestamp);
  return [{ type: 'BlocksDropped', data: { fromHeight: height - command.depth + 1, depth: command.depth, droppedAt } }];
}

// ---------------------------------------------------------------- decider

export function sandboxLedgerDecider(
  chain: ChainName,
): Decider<SandboxLedgerCommand, SandboxLedgerState, SandboxLedgerEvent> {
  const initialState: SandboxLedgerState = {
    chain,
    genesis: genesisOf(chain),
    blocks: { items: Object.freeze([]) as unknown as LedgerBlock[], length: 0 },
    nextRevision: 0,
  };
  return {
    initialState,
    decide(command, state) {
      if (command.type === 'MineBlock') return mineBlock(command, state);
      if (command.type === 'MineEmptyBlocks') return mineEmptyBlocks(command, state);
      return reorg(command, state);
    },
    evolve(state, event) {
      const nextRevision = state.nextRevision + 1;
      switch (event.type) {
        case 'BlockMined':
          return { ...state, blocks: withBlock(state.blocks, event.data), nextRevision };
        case 'BlocksDropped':
          const length = Math.min(state.blocks.length, Math.max(0, event.data.fromHeight - 1));
          return { ...state, blocks: { items: state.blocks.items, length }, nextRevision };
        default:
          return { ...state, nextRevision };
      }
    },
  };
}
