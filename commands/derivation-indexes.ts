// Derivation indexes for new deposit addresses, never one twice: each process
// reserves a block of them at a time with one append, instead of one append
// per address to a stream every payment of every merchant then queues on.
//
// Block r (the revision of its event in DERIVATION_BLOCK_STREAM, which the
// store makes unique across processes, restarts and back ends) is the indexes
// [BLOCK_BASE + r × BLOCK_SIZE, BLOCK_BASE + (r + 1) × BLOCK_SIZE). Indexes
// of a block a process did not use before it stopped are a gap, never reused.
// Blocks start at 2^30, apart from the indexes 0 … 2^30 − 1 that earlier
// versions reserved one by one in `derivation-indexes` (index = revision), so
// the two never meet, even while an old and a new version run side by side.
// The index an address was derived at is in its AddressAssigned event.
import { randomUUID } from 'node:crypto';
import type { EventStore } from '../adapters/event-store/port.ts';
import { MAX_DERIVATION_INDEX } from '../adapters/keys/derivation.ts';

export const DERIVATION_BLOCK_STREAM = 'derivation-index-blocks';
/** Never to be changed: the blocks already reserved were counted with it. */
export const BLOCK_SIZE = 64;
export const BLOCK_BASE = 2 ** 30;

/** The first index of block `revision`. */
export const blockStart = (revision: number) => BLOCK_BASE + revision * BLOCK_SIZE;

export class DerivationIndexes {
  #next = 0;
  #end = 0;
  #reserving: Promise<void> | undefined;

  constructor(private readonly store: EventStore) {}

  /** An index no other address has had or will have. */
  async next(): Promise<number> {
    while (this.#next >= this.#end) {
      this.#reserving ??= this.reserveBlock().finally(() => (this.#reserving = undefined));
      await this.#reserving;
    }
    return this.#next++;
  }

  private async reserveBlock(): Promise<void> {
    const { nextRevision } = await this.store.append(
      DERIVATION_BLOCK_STREAM,
      [{ id: randomUUID(), type: 'DerivationIndexBlockReserved', data: { size: BLOCK_SIZE } }],
      'any',
    );
    const from = blockStart(nextRevision);
    if (from + BLOCK_SIZE - 1 > MAX_DERIVATION_INDEX) {
      throw new Error(`derivation indexes are exhausted: block ${nextRevision} would pass ${MAX_DERIVATION_INDEX}`);
    }
    this.#next = from;
    this.#end = from + BLOCK_SIZE;
  }
}
