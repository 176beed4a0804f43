// A merchant's refund wallets on Bitcoin: their coins found by a watch-only
// wallet of this service's in Core (no keys in it). Each refund wallet's
// address is imported, from its assignment on, the first time the node's
// wallet is asked about it, and its coins read with `listunspent`, less those
// a mempool transaction spends and those another refund has prepared
// (`taken`). The payer spends them (payer.ts); docs/bitcoin.md says what the
// node needs for it.
import { setTimeout as delay } from 'node:timers/promises';
import { BitcoinRpcError, satoshis, type BitcoinNode } from './node.ts';

/**
 * An import that rescans answers only when its rescan is done: on mainnet,
 * minutes, hours from years back on a slow disk. It holds no payout pass
 * (IMPORT_WAIT_MS), and one given up on is done again from the start.
 */
const RESCAN_TIMEOUT_MS = 86_400_000;
/** How long a look at a refund wallet waits for its import before it reads what the wallet has found so far. */
const IMPORT_WAIT_MS = 3_000;
/** An import whose rescan failed (blocks pruned) is tried again after this long, not at every look. */
const IMPORT_RETRY_MS = 600_000;
/** The label an address gets once an import has rescanned its blocks from that time (unix seconds) on. */
const RESCANNED_FROM = /^rescanned from (\d+)$/;
/** An import's outcome: all coins found; Core busy with another rescan (-4); or its rescan failed. */
type Following = 'followed' | 'rescanning' | 'rescan failed';
/** An address asked of the watch-only wallet: the import's outcome once known, and when to import again. */
type Watched = { following: Promise<Following>; outcome?: Following; again?: number };
/** Core's watch-only descriptor wallet that follows the refund wallets' addresses (no keys in it). */
export const WATCH_WALLET = 'refund-wallets';

/** A coin a payout spends: its outpoint, value and script. */
export interface SweepCoin {
  txid: string;
  vout: number;
  value: bigint;
  script: Buffer;
}

export class WatchWallet {
  /** The watch-only wallet loaded (or made) in Core, once per process or again after Core lost it. */
  private opened?: Promise<void>;
  /** Refund wallets' addresses asked of the watch-only wallet by this process: the answer, and when to ask again. */
  private readonly watched = new Map<string, Watched>();

  constructor(
    private readonly node: BitcoinNode,
    private readonly log: (line: string) => void,
  ) {}

  /**
   * This service's watch-only wallet in Core, loaded, or made the first time
   * (src/wallet/rpc/wallet.cpp): `loadwallet` answers -18 for a wallet that
   * does not exist and -35 for one already loaded; `createwallet` makes a
   * descriptor wallet without private keys and without descriptors of its
   * own (disable_private_keys, blank, descriptors). Both ask Core to load it
   * at its own start (load_on_startup), so a bitcoind restart keeps it.
   */
  open(): Promise<void> {
    if (this.opened) return this.opened;
    const opening = (async () => {
      try {
        await this.node.rpc('loadwallet', [WATCH_WALLET, true]);
      } catch (error) {
        if (!(error instanceof BitcoinRpcError) || (error.code !== -18 && error.code !== -35)) throw error;
        if (error.code === -18) {
          await this.node.rpc('createwallet', [WATCH_WALLET, true, true, '', false, true, true]);
          // A new wallet (a new or rebuilt node) follows no address yet: each is imported again when asked.
          this.watched.clear();
        }
      }
    })();
    this.opened = opening;
    opening.catch(() => {
      if (this.opened === opening) this.opened = undefined;
    });
    return opening;
  }

  /** A call on the watch-only wallet; one Core no longer has loaded (-18: unloaded by hand) is loaded again first. */
  private async walletRpc<T>(method: string, params: unknown[], timeoutMs?: number): Promise<T> {
    await this.open();
    try {
      return await this.node.rpc<T>(method, params, WATCH_WALLET, timeoutMs);
    } catch (error) {
      if (!(error instanceof BitcoinRpcError && error.code === -18)) throw error;
      this.opened = undefined;
      await this.open();
      return this.node.rpc<T>(method, params, WATCH_WALLET, timeoutMs);
    }
  }

  /**
   * `address` followed by the watch-only wallet from `fundedSince` on (its
   * coins all found), waiting at most IMPORT_WAIT_MS: an import whose
   * rescan takes longer goes on without holding the payout pass, and
   * meanwhile the wallet's coins are those it has found so far (a refund
   * short of them waits in `awaiting_funds`, looked at again). Asked of Core
   * once per process, or again after a failed import (see `follow`).
   */
  private async watch(address: string, fundedSince?: string): Promise<void> {
    let known = this.watched.get(address);
    if (!known || (known.again !== undefined && Date.now() >= known.again)) {
      const since = Math.floor((fundedSince === undefined ? Date.now() : Date.parse(fundedSince)) / 1000);
      const entry: Watched = { following: this.follow(address, since) };
      if (this.watched.size > 10_000) this.watched.clear();
      this.watched.set(address, entry);
      entry.following.then(
        (outcome) => {
          entry.outcome = outcome;
          if (this.watched.get(address) !== entry) return;
          // Another rescan running costs nothing to ask again; a failed one is not tried again at every look.
          if (outcome === 'rescanning') this.watched.delete(address);
          if (outcome === 'rescan failed') entry.again = Date.now() + IMPORT_RETRY_MS;
        },
        () => {
          if (this.watched.get(address) === entry) this.watched.delete(address);
        },
      );
      known = entry;
    }
    if (!known.outcome) await Promise.race([known.following, delay(IMPORT_WAIT_MS, undefined, { ref: false })]);
  }

  /**
   * Makes the watch-only wallet follow `address` from `since` (unix seconds,
   * the refund wallet's assignment) on. Core's own record cannot say that an
   * import's rescan finished: `importdescriptors` (src/wallet/rpc/backup.cpp,
   * ProcessDescriptorImport) stores the descriptor and its timestamp before
   * it rescans, so `getaddressinfo`'s `ismine` (src/wallet/rpc/addresses.cpp)
   * is true, and `listdescriptors` shows that timestamp, after a rescan that
   * failed (a pruned node lacking the blocks: that import's answer is
   * `success: false`, "Rescan failed for descriptor with timestamp ...") or
   * was cut off (bitcoind or this service restarted, the answer lost); and
   * `getaddressinfo` has no `timestamp` for a keyless addr() descriptor
   * (DescriptorScriptPubKeyMan::GetMetadata, src/wallet/scriptpubkeyman.cpp,
   * answers one only for a key with an origin). So once an import answers
   * `success`, the address is labelled `rescanned from <since>` (`setlabel`,
   * src/wallet/rpc/addresses.cpp; `getaddressinfo` answers its `labels`):
   * an address without that label, or labelled from later than `since`, is
   * imported again, its checksummed `addr()` descriptor
   * (`getdescriptorinfo`, src/rpc/output_script.cpp) with timestamp `since`:
   * Core rescans from two hours before it. A wallet assigned just now
   * rescans nothing; an old one on a new node costs one rescan (minutes on
   * mainnet), once per node. -4 "Wallet is currently rescanning"
   * (src/wallet/rpc/backup.cpp: WalletRescanReserver taken by another
   * rescan) is an answer to ask again later.
   */
  private async follow(address: string, since: number): Promise<Following> {
    const info = await this.walletRpc<{ ismine: boolean; labels?: string[] }>('getaddressinfo', [address]);
    const rescanned = info.labels?.map((label) => RESCANNED_FROM.exec(label)?.[1]).find((from) => from !== undefined);
    if (info.ismine && rescanned !== undefined && Number(rescanned) <= since) return 'followed';
    const { descriptor } = await this.node.rpc<{ descriptor: string }>('getdescriptorinfo', [`addr(${address})`]);
    let imported: { success: boolean; error?: { code: number; message: string } } | undefined;
    try {
      [imported] = await this.walletRpc<(typeof imported)[]>(
        'importdescriptors',
        [[{ desc: descriptor, timestamp: since }]],
        RESCAN_TIMEOUT_MS,
      );
    } catch (error) {
      if (error instanceof BitcoinRpcError && error.code === -4) return 'rescanning';
      throw error;
    }
    if (imported?.error?.code === -1 && imported.error.message.startsWith('Rescan failed')) {
      // The descriptor is in the wallet; the blocks it could not read are looked through again later.
      this.log(`bitcoin: the watch-only wallet's rescan for ${address}: ${imported.error.message}`);
      return 'rescan failed';
    }
    if (!imported?.success) {
      throw new Error(`bitcoin: the watch-only wallet refused ${descriptor}: ${imported?.error?.message}`);
    }
    await this.walletRpc('setlabel', [address, `rescanned from ${since}`]);
    return 'followed';
  }

  /**
   * A refund wallet's coins: the watch-only wallet's confirmed unspent
   * outputs paying it (`listunspent` with minconf 1, src/wallet/rpc/coins.cpp;
   * immature coinbase outputs are not listed), less those a mempool
   * transaction spends (`gettxspendingprevout`, src/rpc/mempool.cpp: another
   * refund on its way, even before the wallet has taken in the mempool's
   * news), and less those `taken` (another refund's, prepared and recorded
   * but not broadcast yet: only the records know of it).
   */
  async coins(
    address: string,
    fundedSince?: string,
    taken: readonly { txHash: string; index: number }[] = [],
  ): Promise<SweepCoin[]> {
    await this.watch(address, fundedSince);
    const unspent = await this.walletRpc<{ txid: string; vout: number; scriptPubKey: string; amount: string }[]>(
      'listunspent',
      [1, 9_999_999, [address]],
    );
    if (unspent.length === 0) return [];
    const spending = await this.node.rpc<{ spendingtxid?: string }[]>('gettxspendingprevout', [
      unspent.map(({ txid, vout }) => ({ txid, vout })),
    ]);
    const takenByOthers = new Set(taken.map((c) => `${c.txHash}:${c.index}`));
    return unspent
      .filter((u, i) => spending[i]?.spendingtxid === undefined && !takenByOthers.has(`${u.txid}:${u.vout}`))
      .map((u) => ({
        txid: u.txid,
        vout: u.vout,
        value: satoshis(u.amount),
        script: Buffer.from(u.scriptPubKey, 'hex'),
      }))
      .sort((a, b) => a.txid.localeCompare(b.txid) || a.vout - b.vout);
  }
}
