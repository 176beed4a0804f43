// Reading Tron: the head and the solidified block, blocks and the payments
// in them.
//
// Detection: TRX payments are the successful TransferContract transactions
// of a block (index 0) and TRX that contracts send on (the internal
// transactions of a successful result with a call value, not rejected; index
// after the transaction's logs); token payments are the Transfer event logs
// of the catalogue's token contracts in the block's transaction results
// (index = the log's position in its transaction), which also shows transfers
// made through other contracts. A block is read with every transaction's
// result or read again: a backend behind the others answers fewer (none for
// the newest block), and a direct `transfer(address,uint256)` call to a token
// is cross-checked against its result. Only a SUCCESS result pays.
//
// Finality: a block is final once solidified (about 19 blocks behind the
// head); the head reports the solidified height, so the watcher never counts
// a payment in a newer block as confirmed.
//
// Requests: the head is read once a block (3 s), the solidified block every
// three, the prices every ten minutes, and a block the head links to is not
// read again (node.ts: the pause a rate limit asks for). Idle, about one
// request a second.
import { HeadPoller } from '../head-poller.ts';
import { staleTip, type ChainBlock, type ChainHead, type ChainTransfer } from '../port.ts';
import { fromHex, toHex, type BlockJson, type TransactionInfoJson, type TronNode } from './node.ts';

/** keccak256("Transfer(address,address,uint256)"), as java-tron writes topics: bare hex. */
export const TRC20_TRANSFER_TOPIC = 'ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef';
/** transfer(address,uint256) */
const TRANSFER_SELECTOR = 'a9059cbb';

/** Tron's block interval. */
const BLOCK_MS = 3000;

export interface TronToken {
  symbol: string;
  /** Base58 T-address of the TRC-20 contract. */
  contract: string;
  decimals: number;
}

/** The transfers a block pays: TRX transfers and token Transfer logs, from the block and its transaction results. */
export function parseTronBlock(
  block: BlockJson,
  infos: TransactionInfoJson[],
  tokens: readonly TronToken[],
  ignoreSenders: ReadonlySet<string> = new Set(),
): ChainTransfer[] {
  const tokenByHex = new Map(tokens.map((t) => [toHex(t.contract).slice(2), t]));
  const transactions = block.transactions ?? [];
  const height = block.block_header?.raw_data.number ?? 0;
  const transfers: ChainTransfer[] = [];
  const tokenCalls: string[] = [];
  for (const tx of transactions) {
    const contract = tx.raw_data.contract[0];
    if (!contract || tx.ret?.[0]?.contractRet !== 'SUCCESS') continue;
    const value = contract.parameter.value;
    if (contract.type === 'TransferContract') {
      const owner = String(value.owner_address).toLowerCase();
      const amount = BigInt(String(value.amount ?? 0));
      if (amount > 0n && !ignoreSenders.has(owner)) {
        transfers.push({ txHash: tx.txID, index: 0, to: fromHex(String(value.to_address)), token: 'TRX', amount });
      }
    } else if (
      contract.type === 'TriggerSmartContract' &&
      tokenByHex.has(String(value.contract_address).toLowerCase().slice(2)) &&
      String(value.data ?? '').startsWith(TRANSFER_SELECTOR)
    ) {
      tokenCalls.push(tx.txID);
    }
  }
  const ids = new Set(transactions.map((t) => t.txID));
  const infoById = new Map(infos.map((i) => [i.id, i]));
  for (const info of infos) {
    if (!ids.has(info.id)) throw new Error(`block ${height}: the node gave results of transactions not in this block`);
  }
  for (const id of tokenCalls) {
    const info = infoById.get(id);
    if (!info) throw new Error(`block ${height}: the node has no result of token transfer ${id} yet`);
    if (info.receipt?.result === 'SUCCESS' && !(info.log ?? []).some((l) => l.topics?.[0] === TRC20_TRANSFER_TOPIC)) {
      throw new Error(`block ${height}: token transfer ${id} succeeded without a Transfer log`);
    }
  }
  for (const info of infos) {
    // Contract calls carry a result; SUCCESS is the only one whose logs stand.
    if (info.receipt?.result !== 'SUCCESS') continue;
    for (const [index, log] of (info.log ?? []).entries()) {
      const token = tokenByHex.get(log.address.toLowerCase());
      const topics = log.topics ?? [];
      // TRC-20 Transfer: from and to indexed, the amount in data (a TRC-721 one has three indexed topics).
      if (!token || topics.length !== 3 || topics[0] !== TRC20_TRANSFER_TOPIC || log.data?.length !== 64) continue;
      const amount = BigInt('0x' + log.data);
      if (amount === 0n) continue;
      transfers.push({ txHash: info.id, index, to: fromHex('41' + topics[2]!.slice(24)), token: token.symbol, amount });
    }
    // TRX a contract sent on (a wallet contract, an exchange's batch payer): its internal transactions with a call
    // value, after the logs in index so that each stays unique within the transaction.
    const after = (info.log ?? []).length;
    for (const [position, internal] of (info.internal_transactions ?? []).entries()) {
      if (internal.rejected || !internal.transferTo_address) continue;
      const amount = (internal.callValueInfo ?? [])
        .filter((v) => v.tokenId === undefined)
        .reduce((sum, v) => sum + BigInt(v.callValue ?? 0), 0n);
      if (amount <= 0n) continue;
      transfers.push({
        txHash: info.id,
        index: after + position,
        to: fromHex(internal.transferTo_address),
        token: 'TRX',
        amount,
      });
    }
  }
  return transfers;
}

export interface TronReaderOptions {
  tokens: readonly TronToken[];
  /** Its top-ups to deposit addresses are ours, not a customer's payment. */
  feeWallet: string;
  pollMs?: number | undefined;
  /** How long a head read stands before the node is asked again (default: one block, 3 s). */
  headMs?: number | undefined;
  /** How long a solidified-block read stands (default: three blocks; finality lags ~19 blocks anyway). */
  solidifiedMs?: number | undefined;
  /** Called at every read of the node's head, and waited for with it (the payer reads the prices when due). */
  onHead: () => Promise<void> | undefined;
}

export class TronReader {
  private readonly poller: HeadPoller;
  /** The last head read, and when; a block's time later it is read again. */
  private latest?: { height: number; hash: string; parentHash: string; timestamp: number; readAt: number };
  /** The last solidified block read, and when. */
  private solid?: { height: number; hash: string; timestamp: number; readAt: number };
  private reading?: Promise<void>;
  private readonly blocksByHeight = new Map<number, ChainBlock>();

  constructor(
    private readonly node: TronNode,
    private readonly options: TronReaderOptions,
  ) {
    // The poller asks every second; the head it gets is read from the node once a block.
    this.poller = new HeadPoller(async () => (await this.head()).height, options.pollMs);
  }

  close(): void {
    this.poller.close();
  }

  async head(): Promise<ChainHead> {
    await this.refreshHead();
    // A backend whose newest block is minutes old is stale (the watcher then lets no expiry run on tron).
    const stale = staleTip(new Date(this.latest!.timestamp));
    return {
      height: this.latest!.height,
      hash: this.latest!.hash,
      finalized: this.solid!.height,
      ...(stale && { stale }),
    };
  }

  /**
   * How far the node's head is behind the wall clock, in ms: a backend that
   * stopped following the chain still answers, with an old head. (Mainnet
   * blocks come every 3 s; a head a minute old is a stale node.)
   */
  headAge(now = Date.now()): number | undefined {
    return this.latest && now - this.latest.timestamp;
  }

  /** The head and the solidified block, read at most once a block: what the payer builds and judges payouts on. */
  async heads() {
    await this.refreshHead();
    return { latest: this.latest!, solid: this.solid! };
  }

  /**
   * Reads the head once a block (and the solidified block and the prices
   * less often): the watcher, the poller, prepared payouts and status checks
   * all share one read, which keeps an idle service near one request a
   * second on mainnet (TronGrid allows 100,000 a day).
   */
  private refreshHead(): Promise<void> {
    const now = Date.now();
    const headDue = !this.latest || now - this.latest.readAt >= (this.options.headMs ?? BLOCK_MS);
    const solidDue = !this.solid || now - this.solid.readAt >= (this.options.solidifiedMs ?? 3 * BLOCK_MS);
    if (!headDue && !solidDue) return Promise.resolve();
    this.reading ??= this.readHead(headDue, solidDue).finally(() => (this.reading = undefined));
    return this.reading;
  }

  private async readHead(headDue: boolean, solidDue: boolean): Promise<void> {
    const [latest, solid] = await Promise.all([
      headDue ? this.node.rpc<BlockJson>('/wallet/getblock', { detail: false }) : undefined,
      solidDue ? this.node.rpc<BlockJson>('/walletsolidity/getblock', { detail: false }) : undefined,
      this.options.onHead(),
    ]);
    const readAt = Date.now();
    if (latest) {
      if (!latest.blockID || !latest.block_header) throw new Error('tron: the node has no latest block');
      const raw = latest.block_header.raw_data;
      const height = raw.number ?? 0;
      // java-tron moves its head to another fork only when that fork is longer (Manager.pushBlock switchFork):
      // a lower head is a load-balanced backend behind the others, not the chain going back.
      if (!this.latest || height >= this.latest.height) {
        this.latest = {
          height,
          hash: latest.blockID,
          parentHash: raw.parentHash,
          timestamp: raw.timestamp ?? 0,
          readAt,
        };
      } else {
        this.latest.readAt = readAt;
      }
    }
    if (solid) {
      if (!solid.blockID) throw new Error('tron: the node has no solidified block');
      const raw = solid.block_header?.raw_data;
      const height = raw?.number ?? 0;
      if (!this.solid || height >= this.solid.height) {
        this.solid = { height, hash: solid.blockID, timestamp: raw?.timestamp ?? 0, readAt };
      } else {
        this.solid.readAt = readAt;
      }
    }
  }

  async block(height: number): Promise<ChainBlock | undefined> {
    await this.refreshHead();
    // The watcher reads its last block again at every step (to find forks): a block
    // the head links to is known without asking.
    const known = this.blocksByHeight.get(height);
    if (known && this.onCurrentChain(known)) return known;
    const block = await this.node.rpc<BlockJson>('/wallet/getblockbynum', { num: height });
    if (!block.blockID || !block.block_header) {
      if (height <= this.latest!.height) {
        // Another backend gave that head: this one is behind. Not "no such block": read again.
        throw new Error(
          `tron block ${height}: the node has none, below its head ${this.latest!.height} (a backend behind)`,
        );
      }
      return undefined;
    }
    const parsed = known?.hash === block.blockID ? known : await this.parseBlock(block);
    this.blocksByHeight.set(height, parsed);
    for (const h of this.blocksByHeight.keys())
      if (h < height - 64 || h > this.latest!.height + 64) this.blocksByHeight.delete(h);
    return parsed;
  }

  /** A block read before is still the chain's when the head, or a block the head links down to, names it as parent. */
  private onCurrentChain(block: ChainBlock): boolean {
    const head = this.latest!;
    if (block.height === head.height) return block.hash === head.hash;
    if (block.height === head.height - 1) return block.hash === head.parentHash;
    const child = this.blocksByHeight.get(block.height + 1);
    return child !== undefined && child.parentHash === block.hash && this.onCurrentChain(child);
  }

  private async parseBlock(block: BlockJson): Promise<ChainBlock> {
    const raw = block.block_header!.raw_data;
    const height = raw.number ?? 0;
    const transactions = block.transactions ?? [];
    // Any contract call may move a token or TRX (through another contract): its results hold the logs.
    const calls = transactions.some((t) => t.raw_data.contract[0]?.type === 'TriggerSmartContract');
    const answer = calls
      ? await this.node.rpc<TransactionInfoJson[] | Record<string, never>>('/wallet/gettransactioninfobyblocknum', {
          num: height,
        })
      : [];
    const infos = Array.isArray(answer) ? answer : [];
    // java-tron stores one result per transaction of a block (TransactionRetStore); fewer is a
    // backend that has not stored this block's yet (it answers [] for the newest block).
    if (calls && infos.length !== transactions.length) {
      throw new Error(
        `tron block ${height}: ${infos.length} results for ${transactions.length} transactions; read again`,
      );
    }
    const transfers = parseTronBlock(
      block,
      infos,
      this.options.tokens,
      // The fee wallet's top-ups to deposit addresses are ours, not a customer's payment.
      new Set([toHex(this.options.feeWallet)]),
    );
    return {
      height,
      hash: block.blockID!,
      parentHash: raw.parentHash,
      timestamp: new Date(raw.timestamp ?? 0),
      transfers,
    };
  }

  onNewBlock(listener: () => void): () => void {
    return this.poller.onNewBlock(listener);
  }
}
