// Paying out on Bitcoin: settlements and refunds, each one transaction
// signed with the payer's key, recorded before it is sent; fees; where a
// payout stands.
//
// Settlement: one transaction spends exactly the recorded payments the payout
// names (`sources`, each checked with `gettxout`; never a scan of the UTXO
// set) to the merchant (the net amount, untouched) and the treasury (the
// rest after the network fee), signed with the deposit key from
// WALLET_MNEMONIC. The fee is the quoted one or, when the real size at the
// current rate asks more (or BIP125 does, to replace an earlier attempt), the
// more, out of the treasury's share; `testmempoolaccept` checks it before it
// is handed back. Its inputs are taken in a fixed order and its signatures
// are deterministic (RFC 6979), so the same settlement attempt always gives
// the same txid; it is recorded before it is sent and sent again after a
// crash. Every input signals RBF, and every later attempt spends the same
// coins, so at most one attempt can ever be mined. A payout is found in the
// chain by its txid (the blocks since it was prepared), never by whether its
// outputs are still unspent: a merchant may spend them at once.
//
// Refunds (payout 'refund'): the same transaction's shape, the customer paid
// `amount` and the rest sent back to the payer as change instead of to the
// treasury, at exactly the quoted fee (sized for any customer address and for
// the deposit's coins). From a deposit it spends the coins the refund names
// (the settlement's, see domain/settlement.ts payoutSources) at the quote and
// never more (`exactNetworkFee`: the change is the settlement's), failed for
// good when the relay minimum asks more and no change is left to pay it; the
// settlement then sweeps the change. From a refund wallet, where the real
// size asks more the change pays it; it spends the wallet's confirmed coins,
// followed by a watch-only wallet of this service's in Core (wallet.ts: each
// refund wallet's address imported, from its assignment on, the first time
// the node's wallet is asked about it, read with `listunspent`), less those a
// mempool transaction spends and those another refund has prepared
// (`taken`); a later attempt names the first one's coins, so at most one can
// be mined.
import * as bitcoin from 'bitcoinjs-lib';
import type { BitcoinCoreChain, DepositKeyring } from '../../keys/derivation.ts';
import {
  PayoutRefusedError,
  TransactionRejectedError,
  type OutgoingTransfer,
  type PreparedTransaction,
  type TransactionStatus,
} from '../port.ts';
import { depositKeyOf } from '../node-adapter.ts';
import { BitcoinRpcError, satoshis, type BitcoinNode } from './node.ts';
import { COINBASE_MATURITY } from './reader.ts';
import type { SweepCoin, WatchWallet } from './wallet.ts';

const bitcoinjsNetwork: Record<BitcoinCoreChain, bitcoin.Network> = {
  main: bitcoin.networks.bitcoin,
  test: bitcoin.networks.testnet,
  signet: bitcoin.networks.testnet,
  regtest: bitcoin.networks.regtest,
};

/** vbytes of the quoted sweep: one P2WPKH input and two P2WPKH outputs (10.5 + 68 + 2 × 31, rounded up). */
const QUOTED_VBYTES = 141n;
/**
 * vbytes of the quoted refund: one P2WPKH input, the customer's output of
 * the largest standard kind (P2TR or P2WSH, 43) and the change (P2WPKH, 31):
 * 10.5 + 68 + 43 + 31, rounded up. A refund pays exactly its quote, which
 * covers any customer address at the quoted rate.
 */
const REFUND_VBYTES = 153n;
const RBF_SEQUENCE = 0xfffffffd;
/** Blocks looked through for a payout this process knows nothing of (after a restart): a week. */
const PAYOUT_LOOKBACK_BLOCKS = 1008;
/** Blocks asked about a payout in one JSON-RPC batch. */
const SCAN_BATCH = 50;
/** Blocks a sweep may wait in the mempool below the market's fee rate before it is replaced. */
const STUCK_BLOCKS = 3;

type Signer = Parameters<bitcoin.Psbt['signAllInputs']>[0];

const ceilDiv = (a: bigint, b: bigint) => (a + b - 1n) / b;

/** vbytes one more P2WPKH input adds (outpoint, sequence, and its witness discounted). */
const P2WPKH_INPUT_VBYTES = 68n;

/**
 * The refund wallet's coins a refund spends: the smallest one that pays
 * `amount` and the fee on its own, else the largest ones until they do (each
 * input adding its size at `rate`), so that the others stay for the next
 * refund rather than wait for this one's change to confirm. All of them when
 * none suffice: the fee loop then says what is missing.
 */
export function refundCoins<C extends { value: bigint }>(
  coins: readonly C[],
  amount: bigint,
  fee: bigint,
  ratePerKvB: bigint,
): C[] {
  const feeWith = (inputs: number) => fee + ceilDiv(BigInt(inputs - 1) * P2WPKH_INPUT_VBYTES * ratePerKvB, 1000n);
  const bySize = [...coins].sort((a, b) => (a.value < b.value ? -1 : a.value > b.value ? 1 : 0));
  const single = bySize.find((c) => c.value >= amount + feeWith(1));
  if (single) return [single];
  const chosen: C[] = [];
  let sum = 0n;
  for (const coin of bySize.reverse()) {
    chosen.push(coin);
    sum += coin.value;
    if (sum >= amount + feeWith(chosen.length)) return chosen;
  }
  return chosen;
}

/**
 * Bitcoin Core's dust limit for an output paying `script`, at the default
 * dust relay fee of 3 sat/vB (policy/policy.cpp, GetDustThreshold): the
 * output's size plus that of an input spending it (67 vbytes for a witness
 * program, 148 bytes otherwise), times 3. P2PKH 546, P2SH 540, P2WSH and
 * P2TR 330, P2WPKH 294; an OP_RETURN output is never dust.
 */
function dustThreshold(script: Uint8Array): bigint {
  if (script[0] === bitcoin.opcodes.OP_RETURN) return 0n;
  const outputSize = 8 + 1 + script.length;
  const version = script[0]!;
  const witnessProgram =
    script.length >= 4 &&
    script.length <= 42 &&
    (version === 0 || (version >= 0x51 && version <= 0x60)) &&
    script[1]! + 2 === script.length;
  const spendSize = witnessProgram ? 32 + 4 + 1 + Math.floor(107 / 4) + 4 : 32 + 4 + 1 + 107 + 4;
  return BigInt((outputSize + spendSize) * 3);
}

/**
 * A prepared sweep's raw form: its bytes, the tip when it was prepared (where
 * to look for it in the chain), and whether its fee may never grow (`exact`:
 * it is never bumped). Older records are bare hex.
 */
function preparedSweep(raw: string): { hex: string; since?: number; exact?: boolean } {
  if (!raw.startsWith('{')) return { hex: raw };
  const parsed = JSON.parse(raw) as { hex: string; since: number; exact?: boolean };
  return { hex: parsed.hex, since: parsed.since, ...(parsed.exact && { exact: true }) };
}

export interface BitcoinPayerOptions {
  network: BitcoinCoreChain;
  keyring: Pick<DepositKeyring, 'deriveDepositKey'>;
  treasury: string;
  /** sat/vB bounds of the fee rate taken from estimatesmartfee. */
  feeRate?: { floor: bigint; cap: bigint } | undefined;
  /** Blocks looked through for a payout this process neither prepared nor sent since it started (default a week, 1008). */
  payoutLookbackBlocks?: number | undefined;
}

export class BitcoinPayer {
  readonly treasury: string;
  private readonly network: bitcoin.Network;
  private readonly preparedByReference = new Map<string, PreparedTransaction>();
  /** sat/vB from the last estimatesmartfee, within the floor and cap. */
  private satsPerVbyte?: bigint;
  /** Payouts being looked for in the chain: from which height, how far looked, and where found. */
  private readonly payouts = new Map<
    string,
    { from: number; scanned: number; scannedHash?: string; found?: { height: number; hash: string } }
  >();

  constructor(
    private readonly node: BitcoinNode,
    private readonly wallet: WatchWallet,
    private readonly options: BitcoinPayerOptions,
  ) {
    this.network = bitcoinjsNetwork[options.network];
    this.treasury = options.treasury;
  }

  // -------------------------------------------------------------------------
  // Fees

  async refreshFeeRate() {
    const { floor, cap } = this.options.feeRate ?? { floor: 1n, cap: 500n };
    try {
      const estimate = await this.node.rpc<{ feerate?: string; errors?: string[] }>('estimatesmartfee', [2]);
      // BTC per 1,000 vbytes → sat/vB, rounded up.
      const perVbyte = estimate.feerate ? (satoshis(estimate.feerate) + 999n) / 1000n : floor;
      this.satsPerVbyte = perVbyte < floor ? floor : perVbyte > cap ? cap : perVbyte;
    } catch (error) {
      if (this.satsPerVbyte === undefined) throw error;
    }
  }

  /**
   * A quote at the current fee rate. A settlement's: one coin swept to the
   * merchant and the treasury (the treasury's share pays what the real sweep
   * costs beyond it). A refund's: one coin to a customer address of any kind
   * and the change, sized for the `coins` it spends: a refund from a deposit
   * spends all of the deposit's coins and pays exactly its quote, and one
   * paid in several transactions that takes it all has no change to pay
   * more; a refund wallet's change pays what more coins than quoted cost.
   * The payee always gets exactly the amount.
   */
  networkFee(token: string, payout: 'settlement' | 'refund' = 'settlement', coins = 1): bigint {
    if (token !== 'BTC') return 0n;
    if (this.satsPerVbyte === undefined) throw new Error('bitcoin: no fee rate yet');
    if (payout === 'settlement') return QUOTED_VBYTES * this.satsPerVbyte;
    const more = BigInt(Math.max(coins, 1) - 1) * P2WPKH_INPUT_VBYTES;
    return (REFUND_VBYTES + more) * this.satsPerVbyte;
  }

  /**
   * What a sweep must pay now, in sat/kvB: the market's rate (estimatesmartfee,
   * within the configured floor and cap), never under what the mempool
   * currently takes (mempoolminfee, which rises when it is full) nor the relay
   * minimum (minrelaytxfee); the higher of those two, what the node takes
   * at all now (`accepted`), and the relay minimum alone, which no wait
   * lowers (`relay`); and what a replacement adds per vbyte
   * (incrementalrelayfee).
   */
  private async sweepRates(): Promise<{ rate: bigint; accepted: bigint; relay: bigint; incremental: bigint }> {
    await this.refreshFeeRate();
    const info = await this.node.rpc<{ mempoolminfee: string; minrelaytxfee: string; incrementalrelayfee: string }>(
      'getmempoolinfo',
      [],
    );
    const max = (a: bigint, b: bigint) => (a > b ? a : b);
    const accepted = max(satoshis(info.mempoolminfee), satoshis(info.minrelaytxfee));
    return {
      rate: max(this.satsPerVbyte! * 1000n, accepted),
      accepted,
      relay: satoshis(info.minrelaytxfee),
      incremental: satoshis(info.incrementalrelayfee),
    };
  }

  /**
   * What BIP125 asks of a sweep that replaces earlier attempts still in the
   * mempool (policy/rbf.cpp): at least the fees of everything it evicts, the
   * earlier attempts' descendants included (a merchant may already spend an
   * unconfirmed payout), plus its own size at the incremental rate; and a
   * higher feerate than each attempt it replaces. `earlier`: their txids.
   */
  private async replacementFloor(
    coins: SweepCoin[],
  ): Promise<((vsize: bigint, incremental: bigint) => bigint) & { earlier: string[] }> {
    const spending = await this.node.rpc<{ spendingtxid?: string }[]>('gettxspendingprevout', [
      coins.map(({ txid, vout }) => ({ txid, vout })),
    ]);
    const earlier = [...new Set(spending.map((s) => s.spendingtxid).filter((id): id is string => id !== undefined))];
    const entries = await Promise.all(
      earlier.map((id) =>
        this.node.rpc<{ vsize: number; fees: { base: string; descendant: string } }>('getmempoolentry', [id]),
      ),
    );
    const evicted = entries.reduce((sum, e) => sum + satoshis(e.fees.descendant), 0n);
    const floorFor = (vsize: bigint, incremental: bigint) => {
      let floor = entries.length > 0 ? evicted + ceilDiv(incremental * vsize, 1000n) : 0n;
      for (const e of entries) {
        const higherRate = (satoshis(e.fees.base) * vsize) / BigInt(e.vsize) + 1n;
        if (higherRate > floor) floor = higherRate;
      }
      return floor;
    };
    return Object.assign(floorFor, { earlier });
  }

  // -------------------------------------------------------------------------
  // Settlement

  /**
   * The coins a payout spends: exactly the recorded payments it names, each
   * checked with `gettxout` against the chain (not the mempool, where an
   * earlier attempt of this payout may spend them and is to be replaced).
   * No UTXO-set scan: on mainnet `scantxoutset` takes minutes and runs one
   * at a time.
   */
  private async sourceCoins(transfer: OutgoingTransfer): Promise<SweepCoin[]> {
    if (!transfer.sources || transfer.sources.length === 0) {
      throw new Error(
        `bitcoin: the payout from ${transfer.from.address} names no recorded payments (sources); the deposit's coins are only ever taken from those, never from a scan of the UTXO set`,
      );
    }
    const coins: SweepCoin[] = [];
    for (const source of transfer.sources) {
      const out = await this.node.rpc<{
        confirmations: number;
        value: string;
        coinbase: boolean;
        scriptPubKey: { hex: string; address?: string };
      } | null>('gettxout', [source.txHash, source.index, false]);
      const name = `${source.txHash}:${source.index}`;
      // Only the deposit key can spend it: spent means an earlier attempt of this payout is in the chain.
      if (!out)
        throw new Error(
          `bitcoin: the payment ${name} is spent or not in the chain: an earlier payout of it may be mined`,
        );
      if (out.scriptPubKey.address !== transfer.from.address || satoshis(out.value) !== source.amount) {
        throw new Error(`bitcoin: ${name} is not a payment of ${source.amount} sats to ${transfer.from.address}`);
      }
      // consensus/tx_verify.cpp CheckTxInputs: a coinbase output is spendable in the 100th block after its own.
      if (out.coinbase && out.confirmations < COINBASE_MATURITY) {
        throw new Error(
          `bitcoin: ${name} is a coinbase output with ${out.confirmations} confirmations; it can be spent at ${COINBASE_MATURITY}`,
        );
      }
      coins.push({
        txid: source.txHash,
        vout: source.index,
        value: source.amount,
        script: Buffer.from(out.scriptPubKey.hex, 'hex'),
      });
    }
    // A fixed order: the same coins always make the same transaction.
    return coins.sort((a, b) => a.txid.localeCompare(b.txid) || a.vout - b.vout);
  }

  /**
   * What a refund wallet can spend now: its confirmed coins no pending
   * transaction spends and no other refund has prepared (`taken`), the
   * coins prepareTransfer would choose from.
   */
  async balanceOf(
    address: string,
    token = 'BTC',
    fundedSince?: string,
    taken?: OutgoingTransfer['taken'],
  ): Promise<bigint> {
    if (token !== 'BTC') return 0n;
    return (await this.wallet.coins(address, fundedSince, taken)).reduce((sum, c) => sum + c.value, 0n);
  }

  /**
   * One transaction spends the payout's coins to the merchant (`amount`,
   * untouched) and the treasury (the rest). The fee is the quoted one, or
   * more when the real size at the current rate, or replacing an earlier
   * attempt, asks more: the difference comes out of the treasury's share.
   * The node's `testmempoolaccept` checks it before it is handed back.
   */
  async prepareTransfer(transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    const earlier = this.preparedByReference.get(transfer.reference);
    if (earlier) return earlier;
    const key = depositKeyOf(this.options.keyring, 'bitcoin', transfer.from);
    const merchantScript = this.outputScript(transfer.to);
    if (transfer.amount < dustThreshold(merchantScript)) {
      throw new TransactionRejectedError(
        `a payout of ${transfer.amount} sats to ${transfer.to} is dust (under ${dustThreshold(merchantScript)})`,
      );
    }
    const refund = transfer.payout === 'refund';
    const exact = refund && transfer.exactNetworkFee === true;
    const { rate, accepted, relay, incremental } = await this.sweepRates();
    const quote = transfer.fees?.network ?? this.networkFee('BTC');
    let fee = quote;
    // A refund wallet's coins are found on the chain, as few as pay it, none that another
    // refund from it has prepared; a deposit's (and a later attempt's) are named.
    const coins =
      refund && !transfer.sources
        ? refundCoins(
            await this.wallet.coins(transfer.from.address, transfer.from.fundedSince, transfer.taken),
            transfer.amount,
            fee,
            rate,
          )
        : await this.sourceCoins(transfer);
    const inputs = coins.reduce((sum, c) => sum + c.value, 0n);
    const since = await this.node.rpc<number>('getblockcount', []);
    const replacing = await this.replacementFloor(coins);
    // A settlement's rest is the treasury's; a refund's comes back to the payer as change.
    const restScript = this.outputScript(refund ? transfer.from.address : this.treasury);
    let tx: bitcoin.Transaction | undefined;
    // The size depends on the signatures and on whether the treasury output is there: a few rounds settle it.
    for (let round = 0; round < 4; round++) {
      const rest = inputs - transfer.amount - fee;
      // From a deposit the fee is above the quote only for the relay minimum at the real size,
      // which no wait lowers: with no change to pay it, no attempt ever could. Failed for good,
      // so that the settlement's hold is released and it goes on (refund-saga.ts).
      if (rest < 0n && exact) {
        throw new PayoutRefusedError(
          'fees_exceed_amount',
          `bitcoin: the refund from ${transfer.from.address} spends ${coins.length} coins (${inputs} sats); at its size the node's relay minimum asks ${fee} sats, more than the ${quote} quoted when it was created and the change it leaves`,
        );
      }
      if (rest < 0n) {
        throw new Error(
          `bitcoin: the network fee of ${fee} sats (${rate} sat/kvB) is more than the ${refund ? "payer's change" : "platform's share"} can pay: ${transfer.from.address} holds ${inputs} sats for a payout of ${transfer.amount}`,
        );
      }
      tx = this.signSweep(key.keyPair, coins, [
        { script: merchantScript, value: transfer.amount },
        // Below its dust limit the rest is left to the miners.
        ...(rest >= dustThreshold(restScript) ? [{ script: restScript, value: rest }] : []),
      ]);
      const paid = inputs - tx.outs.reduce((sum, o) => sum + BigInt(o.value), 0n);
      const vsize = BigInt(tx.virtualSize());
      // A refund from a deposit pays its quote and never more: the change is the settlement's,
      // which is priced already (the merchant's net and the platform's fee), so taking more
      // from it could leave the settlement unable to pay either. Below the market's rate it
      // is still sent as long as the node takes it (it confirms later, and is never bumped:
      // a bump would pay more); when the node would not take it at all (a full mempool)
      // it waits, retried later, and is made again, the same transaction, once it would.
      // Only the relay minimum at its real size (several coins spent), which no wait
      // lowers, is paid above the quote: a few hundred sats at most.
      const needed = [ceilDiv((exact ? accepted : rate) * vsize, 1000n), replacing(vsize, incremental)].reduce(
        (a, b) => (a > b ? a : b),
      );
      // At its exact fee a later attempt is the earlier one again, still in the mempool: nothing to replace.
      if (paid >= needed || (exact && replacing.earlier.includes(tx.getId()))) break;
      const relayFloor = ceilDiv(relay * vsize, 1000n);
      if (exact && needed > (quote > relayFloor ? quote : relayFloor)) {
        throw new Error(
          `bitcoin: the refund from ${transfer.from.address} waits for lower fees: the node takes its ${vsize} vB now only for ${needed} sats, more than the ${paid} quoted when it was created; the deposit's rest is its settlement's, so the refund is sent once the node takes the quote`,
        );
      }
      fee = needed;
      tx = undefined;
    }
    if (!tx) throw new Error(`bitcoin: no fee settled for the payout from ${transfer.from.address}`);
    const [tested] = await this.node.rpc<{ allowed: boolean; 'reject-reason'?: string }[]>('testmempoolaccept', [
      [tx.toHex()],
    ]);
    if (!tested!.allowed && tested!['reject-reason'] !== 'txn-already-in-mempool') {
      throw new Error(
        `bitcoin: the node would refuse the payout from ${transfer.from.address}: ${tested!['reject-reason']}`,
      );
    }
    const change = refund && tx.outs[1] ? { index: 1, amount: BigInt(tx.outs[1].value) } : null;
    const prepared: PreparedTransaction = {
      txHash: tx.getId(),
      raw: JSON.stringify({ hex: tx.toHex(), since, ...(exact && { exact }) }),
      ...(refund && {
        coins: { spent: coins.map((c) => ({ txHash: c.txid, index: c.vout, amount: c.value })), change },
      }),
    };
    this.trackPayout(prepared.txHash, since);
    if (this.preparedByReference.size > 1000) this.preparedByReference.clear();
    this.preparedByReference.set(transfer.reference, prepared);
    return prepared;
  }

  private outputScript(address: string): Buffer {
    try {
      return Buffer.from(bitcoin.address.toOutputScript(address, this.network));
    } catch {
      throw new TransactionRejectedError(`${address} is not a Bitcoin address of this network`);
    }
  }

  /** Every input signals RBF; RFC 6979 signatures make the same coins and outputs the same txid. */
  private signSweep(
    keyPair: Signer,
    coins: SweepCoin[],
    outputs: { script: Buffer; value: bigint }[],
  ): bitcoin.Transaction {
    const psbt = new bitcoin.Psbt({ network: this.network });
    for (const c of coins) {
      psbt.addInput({
        hash: c.txid,
        index: c.vout,
        sequence: RBF_SEQUENCE,
        witnessUtxo: { script: c.script, value: c.value },
      });
    }
    for (const o of outputs) psbt.addOutput(o);
    psbt.signAllInputs(keyPair);
    psbt.finalizeAllInputs();
    return psbt.extractTransaction();
  }

  /**
   * A sweep still in the mempool STUCK_BLOCKS after it came in, below the
   * current fee rate, is not sent again: the next attempt spends the same
   * coins at a higher fee and replaces it (RBF), so at most one of them can
   * ever be mined.
   */
  private async refuseIfStuck(txHash: string): Promise<void> {
    let entry: { vsize: number; height: number; fees: { base: string } };
    try {
      entry = await this.node.rpc('getmempoolentry', [txHash]);
    } catch (error) {
      if (error instanceof BitcoinRpcError && error.code === -5) return; // not in the mempool
      throw error;
    }
    const tip = await this.node.rpc<number>('getblockcount', []);
    await this.refreshFeeRate();
    const paying = satoshis(entry.fees.base) / BigInt(entry.vsize);
    if (tip - entry.height >= STUCK_BLOCKS && paying < (this.satsPerVbyte ?? 1n)) {
      throw new TransactionRejectedError(
        `${txHash} waits in the mempool at ${paying} sat/vB since block ${entry.height}, below the market's ${this.satsPerVbyte}: it is replaced by RBF`,
      );
    }
  }

  async broadcast(transaction: PreparedTransaction): Promise<void> {
    const { hex, since, exact } = preparedSweep(transaction.raw);
    if (since !== undefined) this.trackPayout(transaction.txHash, since);
    if (await this.transactionStatus(transaction.txHash)) return;
    // One at its exact fee waits in the mempool to be mined: no replacement could pay more.
    if (!exact) await this.refuseIfStuck(transaction.txHash);
    try {
      await this.node.rpc<string>('sendrawtransaction', [hex]);
    } catch (error) {
      if (!(error instanceof BitcoinRpcError)) throw error; // without the URL already
      const { code, message } = error;
      // node/transaction.cpp BroadcastTransaction: -27 while one of its outputs is unspent in the chain.
      if (code === -27 || /txn-already-in-mempool|txn-already-known/.test(message)) return;
      // Spent by another transaction pending in the mempool (an earlier attempt): the outcome is open.
      if (/txn-mempool-conflict|insufficient fee|replacement/.test(message))
        throw new Error(`${transaction.txHash}: ${message}`);
      // -25, missing or spent inputs, is also what Core answers for this very
      // transaction once it is mined and its outputs spent: only its absence
      // from the blocks since it was prepared makes it a refusal.
      if (code === -25 && (await this.transactionStatus(transaction.txHash))) return;
      // Its inputs are gone (spent by a mined transaction: only an earlier attempt can, and the
      // engine adopts that one), or the transaction is invalid: this one can never be mined.
      if (code === -25 || code === -26 || code === -22) {
        throw new TransactionRejectedError(`${transaction.txHash} refused: ${message}`.slice(0, 300));
      }
      throw error;
    }
  }

  /** Looks for `txHash` in the blocks from `since` on (the tip when it was prepared or first sent). */
  private trackPayout(txHash: string, since: number) {
    const known = this.payouts.get(txHash);
    if (known && known.from <= since) return;
    if (this.payouts.size > 10_000) this.payouts.clear();
    this.payouts.set(txHash, { from: since, scanned: since - 1 });
  }

  /**
   * Where a payout stands, found by its txid whatever became of its outputs
   * (a merchant may spend them at once). With -txindex, or while it waits in
   * the mempool, `getrawtransaction` answers directly; otherwise each block
   * since the payout was prepared is asked for it (`getrawtransaction` with
   * the block's hash), each block once, and a found block is checked to be
   * still on the best chain. A payout this process never prepared nor sent
   * (after a restart, until `broadcast` names its start) is looked for in the
   * last `payoutLookbackBlocks`.
   */
  async transactionStatus(txHash: string): Promise<TransactionStatus | undefined> {
    try {
      const tx = await this.node.rpc<{ blockhash?: string; confirmations?: number }>('getrawtransaction', [
        txHash,
        true,
      ]);
      if (!tx.blockhash || !tx.confirmations) return undefined; // in the mempool
      const tip = await this.node.rpc<number>('getblockcount', []);
      return { blockNumber: tip - tx.confirmations + 1, confirmations: tx.confirmations };
    } catch (error) {
      if (!(error instanceof BitcoinRpcError && error.code === -5)) throw error; // -5: neither in the mempool nor indexed
    }
    const tip = await this.node.rpc<number>('getblockcount', []);
    const lookback = this.options.payoutLookbackBlocks ?? PAYOUT_LOOKBACK_BLOCKS;
    if (!this.payouts.has(txHash)) this.trackPayout(txHash, Math.max(0, tip - lookback + 1));
    const track = this.payouts.get(txHash)!;
    // A pruned node has no blocks below its prune height to ask. A payout mined
    // there is not found; its coins are spent, so no new attempt is made either.
    if (track.scanned < this.node.pruneHeight - 1) track.scanned = this.node.pruneHeight - 1;
    if (track.found) {
      if (
        (await this.node.rpc<string>('getblockhash', [track.found.height]).catch(() => undefined)) === track.found.hash
      ) {
        return { blockNumber: track.found.height, confirmations: tip - track.found.height + 1 };
      }
      track.found = undefined; // reorganised away: look again from the start
      track.scanned = track.from - 1;
    } else if (
      track.scannedHash &&
      (await this.node.rpc<string>('getblockhash', [track.scanned]).catch(() => undefined)) !== track.scannedHash
    ) {
      track.scanned = track.from - 1; // the blocks looked at were replaced
    }
    for (let start = track.scanned + 1; start <= tip; start += SCAN_BATCH) {
      const heights = Array.from({ length: Math.min(SCAN_BATCH, tip - start + 1) }, (_, i) => start + i);
      const hashes = await this.node.post<string>(heights.map((h) => ({ method: 'getblockhash', params: [h] })));
      const missing = hashes.find((h) => h.error);
      if (missing) throw new BitcoinRpcError(missing.error!.code, `getblockhash: ${missing.error!.message}`); // the chain got shorter: ask again
      const answers = await this.node.post<{ txid: string }>(
        hashes.map((h) => ({ method: 'getrawtransaction', params: [txHash, true, h.result] })),
      );
      for (const [i, answer] of answers.entries()) {
        if (answer.result) {
          track.found = { height: heights[i]!, hash: hashes[i]!.result };
          return { blockNumber: heights[i]!, confirmations: tip - heights[i]! + 1 };
        }
        // -5: not in that block. Anything else (a pruned block, a node in trouble) leaves the question open.
        if (answer.error?.code !== -5)
          throw new BitcoinRpcError(
            answer.error?.code ?? -1,
            `getrawtransaction in block ${heights[i]}: ${answer.error?.message}`,
          );
        track.scanned = heights[i]!;
        track.scannedHash = hashes[i]!.result;
      }
    }
    return undefined;
  }

  async wallets() {
    return { feeWallet: null, feeWalletBalance: null, treasury: this.treasury, treasuryBalance: null };
  }
}
