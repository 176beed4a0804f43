// Bitcoin Core's mempool, followed for the watcher: which transactions wait
// there and the transfers of those already read.
//
// With ZMQ (`zmqpubsequence` on the node, CHAIN_BITCOIN_ZMQ_URL here) it is
// followed by its changes, as Core's doc/zmq.md describes the `sequence`
// topic: each message is [topic, body, 4-byte LE message number counting up
// per topic], the body a 32-byte hash (in the RPC's byte order) and a label:
// A (a transaction added to the mempool) and R (removed, for any reason but a
// block), each followed by the mempool's 8-byte LE sequence number; C and D
// (a block connected, disconnected). One `getrawmempool false true` (the
// txids and the mempool sequence) lays the ground at each (re)connection and
// whenever a message number is skipped (a lost message); buffered A and R
// messages numbered below that snapshot's mempool sequence are already in it
// (txmempool.cpp: GetAndIncrementSequence hands out the number, GetSequence
// tells the next one). While the feed is healthy no step downloads the list.
//
// Without ZMQ, or while it is down, the whole list is downloaded at most
// every `pollMs`. Either way a step reads at most `readPerStep` new
// transactions (`getrawtransaction`, one JSON-RPC batch): a full mempool is
// worked through over several steps, never in one.
import { Subscriber } from 'zeromq';
import type { ChainTransfer } from '../port.ts';

export interface MempoolNode {
  /** getrawmempool false true: every txid and the mempool sequence number it was taken at. */
  snapshot(): Promise<{ txids: string[]; mempool_sequence: number }>;
  /** The transfers of each of these transactions still in the mempool (a gone one is absent). */
  transfers(txids: string[]): Promise<Map<string, ChainTransfer[]>>;
  /** The txids of a block (getblock verbosity 1): they left the mempool without an R. */
  blockTxids(hash: string): Promise<string[]>;
}

export interface MempoolOptions {
  /** Core's `zmqpubsequence` endpoint (tcp://host:port). */
  zmqUrl?: string;
  /** Least time between two whole downloads without a healthy ZMQ feed. */
  pollMs: number;
  /** New transactions read in one step. */
  readPerStep: number;
  log?: (line: string) => void;
}

export interface SequenceMessage {
  hash: string;
  label: 'A' | 'R' | 'C' | 'D';
  /** The mempool sequence number (A and R only). */
  mempoolSequence?: bigint;
}

/** A `sequence` topic body (zmq/zmqpublishnotifier.cpp, SendSequenceMsg): the hash reversed into the RPC's order, a label, for A and R the mempool sequence. */
export function parseSequenceBody(body: Uint8Array): SequenceMessage | undefined {
  if (body.length !== 33 && body.length !== 41) return undefined;
  const label = String.fromCharCode(body[32]!);
  if (label !== 'A' && label !== 'R' && label !== 'C' && label !== 'D') return undefined;
  const hash = Buffer.from(body.subarray(0, 32)).toString('hex');
  if (body.length === 33) return { hash, label };
  return { hash, label, mempoolSequence: Buffer.from(body).readBigUInt64LE(33) };
}

export class BitcoinMempool {
  /** Every transaction in the mempool as last known, with its transfers once read (null: not read yet). */
  private present = new Map<string, ChainTransfer[] | null>();
  private readonly unread = new Set<string>();
  /** Blocks connected since the last step: their transactions are to leave `present`. */
  private readonly mined: string[] = [];
  private lastSnapshotAt = -Infinity;
  private subscriber?: Subscriber;
  private connected = false;
  /** True when what ZMQ said cannot be trusted to be complete: a new connection, a lost message, a block disconnected. */
  private needsSnapshot = true;
  private lastNumber?: number;
  /** Messages that came while a snapshot was being taken. */
  private buffered?: SequenceMessage[];

  constructor(
    private readonly node: MempoolNode,
    private readonly options: MempoolOptions,
  ) {
    if (options.zmqUrl) this.subscribe(options.zmqUrl);
  }

  /** Whether the mempool is followed by ZMQ messages right now (no whole download needed). */
  get following(): boolean {
    return this.connected && !this.needsSnapshot;
  }

  private subscribe(url: string) {
    const subscriber = new Subscriber();
    this.subscriber = subscriber;
    // ZMQ reconnects by itself; what was published meanwhile is lost, so each connection starts from a snapshot.
    subscriber.events.on('connect', () => {
      this.connected = true;
      this.needsSnapshot = true;
      this.lastNumber = undefined;
    });
    subscriber.events.on('disconnect', () => {
      this.connected = false;
      this.options.log?.(`bitcoin: ZMQ ${url} disconnected; the mempool is downloaded whole until it is back`);
    });
    subscriber.connect(url);
    subscriber.subscribe('sequence');
    void (async () => {
      for await (const [, body, number] of subscriber) {
        if (!body || !number || number.length !== 4) continue;
        this.received(number.readUInt32LE(0), parseSequenceBody(body));
      }
    })().catch((error: unknown) => {
      if (!subscriber.closed) this.options.log?.(`bitcoin: ZMQ ${url} stopped: ${String(error)}`);
    });
  }

  private received(number: number, message: SequenceMessage | undefined) {
    // Core numbers each topic's messages one by one (uint32): a skipped number is a lost message.
    if (this.lastNumber !== undefined && number !== (this.lastNumber + 1) >>> 0) this.needsSnapshot = true;
    this.lastNumber = number;
    if (!message) return;
    if (this.buffered) this.buffered.push(message);
    else this.apply(message);
  }

  private apply(message: SequenceMessage) {
    switch (message.label) {
      case 'A':
        if (!this.present.has(message.hash)) {
          this.present.set(message.hash, null);
          this.unread.add(message.hash);
        }
        return;
      case 'R':
        this.present.delete(message.hash);
        this.unread.delete(message.hash);
        return;
      case 'C':
        this.mined.push(message.hash);
        return;
      case 'D':
        // Its transactions come back (as A messages), but a reorg is rare enough to start from a snapshot.
        this.needsSnapshot = true;
    }
  }

  /** The transfers of the mempool's transactions read so far; called once per watcher step. */
  async transfers(): Promise<ChainTransfer[]> {
    if (this.snapshotDue()) await this.takeSnapshot();
    await this.dropMined();
    await this.readSome();
    return [...this.present.values()].flatMap((t) => t ?? []);
  }

  private snapshotDue(): boolean {
    if (this.connected) return this.needsSnapshot;
    return Date.now() - this.lastSnapshotAt >= this.options.pollMs;
  }

  private async takeSnapshot() {
    this.needsSnapshot = false;
    const buffered: SequenceMessage[] = [];
    this.buffered = buffered;
    let snapshot: Awaited<ReturnType<MempoolNode['snapshot']>>;
    try {
      snapshot = await this.node.snapshot();
    } catch (error) {
      this.needsSnapshot = true;
      throw error;
    } finally {
      this.buffered = undefined;
    }
    const next = new Map<string, ChainTransfer[] | null>();
    this.unread.clear();
    for (const txid of snapshot.txids) {
      const known = this.present.get(txid) ?? null;
      next.set(txid, known);
      if (!known) this.unread.add(txid);
    }
    this.present = next;
    this.lastSnapshotAt = Date.now();
    const taken = BigInt(snapshot.mempool_sequence);
    for (const message of buffered) {
      if (message.mempoolSequence !== undefined && message.mempoolSequence < taken) continue; // in the snapshot already
      this.apply(message);
    }
  }

  private async dropMined() {
    while (this.mined.length > 0) {
      let txids: string[];
      try {
        txids = await this.node.blockTxids(this.mined[0]!);
      } catch {
        // The block cannot be read now: a snapshot says what left the mempool instead.
        this.mined.length = 0;
        this.needsSnapshot = true;
        return;
      }
      for (const txid of txids) {
        this.present.delete(txid);
        this.unread.delete(txid);
      }
      this.mined.shift();
    }
  }

  private async readSome() {
    const batch = [...this.unread].slice(0, this.options.readPerStep);
    if (batch.length === 0) return;
    const read = await this.node.transfers(batch);
    for (const txid of batch) {
      this.unread.delete(txid);
      const transfers = read.get(txid);
      // Gone since it was listed (mined, replaced): dropped until a snapshot or an A names it again.
      if (transfers && this.present.has(txid)) this.present.set(txid, transfers);
      else this.present.delete(txid);
    }
  }

  close(): void {
    this.subscriber?.close();
  }
}
