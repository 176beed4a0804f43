// Paying out on an EVM chain: fees, preparing and broadcasting a payout, and
// the balances it is prepared from.
//
// Settlement: the deposit key is derived from WALLET_MNEMONIC. A settlement
// is one bundle of signed transactions from the deposit address, in nonce
// order: the platform fee to the treasury, then the payout (whose hash is
// the settlement's). A token bundle also carries the gas budget that the fee
// wallet tops the deposit address up with before it is sent: all of it, since
// the ETH the address already holds is another payout's (its settlement's, an
// ETH refund's); what the gas does not burn stays there. Since the payout
// has the highest nonce, the payout on the chain means the fee is there too,
// and since every attempt of a settlement starts at the deposit address's
// mined nonce, two attempts compete for the same nonces: at most one payout
// can ever be mined. A refused attempt's fee step may be mined all the same
// (the payout after it refused, say for a fee cap below a risen base fee): the
// next attempt pays only the fee those steps did not, read from their receipts
// (`refusedAttempts`), never from the deposit's balance, which may hold a late
// payment that stays there.
//
// Native payouts pay exactly the network fee the settlement recorded: every
// transaction has 21,000 gas at one price per gas (EIP-1559 with the tip equal
// to the fee cap, so the price paid is exactly the cap; a legacy gas price
// where the chain has no base fee), so the merchant receives the net amount
// to the wei and the deposit address keeps nothing. A refund is the same
// payout with no platform fee: one transaction, whose fee was quoted for one
// (`networkFee(token, 'refund')`), so the payer spends exactly the refund's
// amount; a token refund leaves the rest of a deposit for its settlement.
import { AbiCoder, getAddress, hexlify, Transaction, type TransactionRequest, Wallet } from 'ethers';
import type { ChainName } from '../../../domain/catalogue.ts';
import type { DepositKeyring } from '../../keys/derivation.ts';
import { sleep } from '../node.ts';
import { PayerBusyError, TransactionRejectedError, type OutgoingTransfer, type PreparedTransaction } from '../port.ts';
import { depositKeyOf } from '../node-adapter.ts';
import type { EvmNode, RpcReceipt } from './node.ts';
import type { EvmToken, RpcBlock } from './reader.ts';

const NATIVE_GAS = 21_000n;
/** transfer(address,uint256) */
const TRANSFER_SELECTOR = '0xa9059cbb';
/** balanceOf(address) */
const BALANCE_OF_SELECTOR = '0x70a08231';

/** What a prepared settlement carries in `raw`. */
interface Bundle {
  v: 1;
  /** Signed transactions from the deposit address, in nonce order; the last is the payout. */
  steps: string[];
  /**
   * Token bundles: the native balance the deposit address needs for their gas, and the top-up's fee. `before`:
   * the payer's own native balance when the bundle was prepared (a settlement's ETH, another refund's, earlier
   * top-ups' unburnt gas), which the top-up never counts as gas: the fee wallet gives all of it. (Bundles without
   * `before` were topped up by what the payer lacked.)
   */
  topUp?: { budget: string; maxFeePerGas: string; maxPriorityFeePerGas: string; eip1559: boolean; before?: string };
}

interface FeeQuote {
  /** Fee cap per gas (the gas price where there is no base fee). */
  maxFeePerGas: bigint;
  maxPriorityFeePerGas: bigint;
  eip1559: boolean;
}

/** A transaction can never be mined: the chain shows its nonce used by another transaction. */
class NonceUsedError extends TransactionRejectedError {}

/**
 * The node refusing a transaction: its nonce used or funds short (which the
 * sender's own transaction may have done), its gas or fee below what the
 * node or the next block takes (geth's "transaction underpriced", renamed
 * "transaction gas price below minimum"; Hardhat's "too low for the next
 * block"), or its signature.
 */
const REFUSAL =
  /nonce too low|nonce has already been used|insufficient funds|intrinsic gas|exceeds block gas limit|gas limit reached|invalid sender|underpriced|gas price below minimum|too low for the next block|less than block base fee|fee cap less than/;

/**
 * A node's answer for state it no longer keeps, as against a block it does
 * not have yet ("header not found"): geth's hash scheme "missing trie node",
 * its path scheme "historical state … is not available"; reth "state at
 * block … is pruned"; Nethermind "missing trie node" too.
 */
const STATE_PRUNED =
  /missing trie node|historical state|state at block .* is pruned|state is pruned|state not available/;

/** The amount of a token step's transfer(address,uint256) call. */
const transferAmountOf = (step: Transaction) =>
  AbiCoder.defaultAbiCoder().decode(['address', 'uint256'], '0x' + step.data.slice(10))[1] as bigint;

/** Every message an ethers or node error carries, lower-cased, to recognise a refusal. */
function errorText(error: unknown): string {
  const e = error as { message?: string; shortMessage?: string; info?: { error?: { message?: string } } };
  return [e?.message, e?.shortMessage, e?.info?.error?.message].filter(Boolean).join(' | ').toLowerCase();
}

export interface EvmPayerOptions {
  chain: ChainName;
  chainId: bigint;
  native: string;
  tokens: EvmToken[];
  keyring: Pick<DepositKeyring, 'deriveDepositKey' | 'deriveEvmServiceKey'>;
  treasury: string;
  feeWallet: string;
  /** With a platform fee a native settlement is two transactions, and its network fee covers both. */
  platformFeeBps: number;
  /** Token sweeps (not refunds) below this many base units are not made (the gas would cost more); default one whole token. */
  dustThresholds?: Record<string, bigint> | undefined;
  /** How long a broadcast waits for the fee wallet's top-up to be mined before it gives up (unknown outcome). */
  topUpTimeoutMs?: number | undefined;
}

export class EvmPayer {
  private fee?: FeeQuote;
  private tipFetchedAt = 0;
  /** The highest block this payer has read: a read from below it comes from a node that lags. */
  private highestSeen = 0;
  /** The fee wallet's top-ups, one at a time: its nonces never collide. */
  private topUps: Promise<unknown> = Promise.resolve();
  /** Prepared bundles by reference: preparing one again gives the same transaction. */
  private readonly preparedByReference = new Map<string, PreparedTransaction>();

  constructor(
    private readonly node: EvmNode,
    private readonly options: EvmPayerOptions,
  ) {}

  async balanceOf(address: string, token: string = this.options.native): Promise<bigint> {
    if (token === this.options.native)
      return BigInt(await this.node.rpc<string>('eth_getBalance', [address, 'latest']));
    const contract = this.options.tokens.find((t) => t.symbol === token)?.contract;
    if (!contract) throw new Error(`${this.options.chain} has no token ${token}`);
    const data = BALANCE_OF_SELECTOR + AbiCoder.defaultAbiCoder().encode(['address'], [address]).slice(2);
    return BigInt(await this.node.rpc<string>('eth_call', [{ to: contract, data }, 'latest']));
  }

  /** The fee wallet and the treasury with their native balances (GET /admin/v1/wallets). */
  async wallets() {
    const [feeWalletBalance, treasuryBalance] = await Promise.all([
      this.balanceOf(this.options.feeWallet),
      this.balanceOf(this.options.treasury),
    ]);
    return { feeWallet: this.options.feeWallet, feeWalletBalance, treasury: this.options.treasury, treasuryBalance };
  }

  /** From the latest block's base fee (twice it, for headroom, plus the node's tip) or the gas price. */
  async refreshFee(latest: RpcBlock): Promise<void> {
    this.highestSeen = Math.max(this.highestSeen, Number(latest.number));
    try {
      if (latest.baseFeePerGas !== undefined) {
        const now = Date.now();
        let tip = this.fee?.maxPriorityFeePerGas;
        if (tip === undefined || now - this.tipFetchedAt > 30_000) {
          tip = BigInt(await this.node.rpc<string>('eth_maxPriorityFeePerGas', []));
          this.tipFetchedAt = now;
        }
        this.fee = { maxFeePerGas: BigInt(latest.baseFeePerGas) * 2n + tip, maxPriorityFeePerGas: tip, eip1559: true };
      } else {
        const price = BigInt(await this.node.rpc<string>('eth_gasPrice', []));
        this.fee = { maxFeePerGas: price, maxPriorityFeePerGas: price, eip1559: false };
      }
    } catch (error) {
      if (!this.fee) throw error;
      // Keep the last quote; the next head refreshes it.
    }
  }

  private get transactionsPerNativeSettlement(): bigint {
    return this.options.platformFeeBps > 0 ? 2n : 1n;
  }

  /**
   * A native settlement's fee: 21,000 gas per transaction (the payout and,
   * with a platform fee, the fee's transfer) at the current fee cap; a
   * refund's, one transaction's. Token payouts' gas is paid by the fee
   * wallet: 0.
   */
  networkFee(token: string, payout: 'settlement' | 'refund' = 'settlement'): bigint {
    if (token !== this.options.native) return 0n;
    if (!this.fee) throw new Error(`${this.options.chain}: no fee quote yet`);
    return NATIVE_GAS * this.fee.maxFeePerGas * (payout === 'refund' ? 1n : this.transactionsPerNativeSettlement);
  }

  private async sign(wallet: Wallet, request: TransactionRequest, fee: FeeQuote): Promise<Transaction> {
    const fees: TransactionRequest = fee.eip1559
      ? { type: 2, maxFeePerGas: fee.maxFeePerGas, maxPriorityFeePerGas: fee.maxPriorityFeePerGas }
      : { type: 0, gasPrice: fee.maxFeePerGas };
    return Transaction.from(await wallet.signTransaction({ ...request, ...fees, chainId: this.options.chainId }));
  }

  private async nonceOf(address: string): Promise<number> {
    // The mined count: a new attempt reuses the nonces of any earlier one still pending, so only one can land.
    return Number(await this.node.rpc<string>('eth_getTransactionCount', [address, 'latest']));
  }

  private async isContract(address: string): Promise<boolean> {
    return (await this.node.rpc<string>('eth_getCode', [address, 'latest'])) !== '0x';
  }

  async receivingProblem(address: string): Promise<string | undefined> {
    // Native payouts carry exactly 21,000 gas (their fee is quoted exactly),
    // which no contract's receive code can count on, EIP-7702 delegated
    // accounts included: they too have code.
    if (await this.isContract(address)) {
      return `${address} is a contract on ${this.options.chain}: payouts carry a plain transfer's 21,000 gas, so they go to plain accounts (an externally owned address)`;
    }
    return undefined;
  }

  async prepareTransfer(transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    const earlier = this.preparedByReference.get(transfer.reference);
    if (earlier) return earlier;
    const key = depositKeyOf(this.options.keyring, this.options.chain as 'ethereum', transfer.from, getAddress);
    const wallet = new Wallet(hexlify(key.privateKey));
    const prepared =
      transfer.token === this.options.native
        ? await this.prepareNative(wallet, transfer)
        : await this.prepareToken(wallet, transfer);
    if (this.preparedByReference.size > 1000) this.preparedByReference.clear();
    this.preparedByReference.set(transfer.reference, prepared);
    return prepared;
  }

  private async prepareNative(wallet: Wallet, transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    // Without a platform fee (a refund) the payout is the only transaction, and it spends the whole network fee.
    const platform = transfer.fees?.platform ?? 0n;
    const count = platform > 0n ? this.transactionsPerNativeSettlement : 1n;
    const network = transfer.fees?.network ?? this.networkFee(this.options.native);
    const perGas = network / (NATIVE_GAS * count);
    if (perGas <= 0n || perGas * NATIVE_GAS * count !== network) {
      throw new TransactionRejectedError(`network fee ${network} is not ${count} transfers' gas at one price`);
    }
    for (const to of [transfer.to, this.options.treasury]) {
      // A contract may need more than 21,000 gas, and the fee must be exact.
      if (await this.isContract(to))
        throw new TransactionRejectedError(`${to} is a contract: native payouts go to plain accounts`);
    }
    const from = wallet.address;
    const [balance, { nonce, feeOwed }] = await Promise.all([
      this.balanceOf(from),
      this.nextAttempt(from, platform, transfer),
    ]);
    const gas = NATIVE_GAS * perGas;
    const fee: FeeQuote = { maxFeePerGas: perGas, maxPriorityFeePerGas: perGas, eip1559: this.fee?.eip1559 ?? true };
    const steps: Transaction[] = [];
    if (feeOwed > 0n) {
      steps.push(
        await this.sign(wallet, { to: this.options.treasury, value: feeOwed, nonce, gasLimit: NATIVE_GAS }, fee),
      );
    }
    const left = balance - (feeOwed > 0n ? feeOwed + gas : 0n);
    if (left < transfer.amount + gas) {
      throw new TransactionRejectedError(
        `${from} holds ${balance} wei, less than the payout of ${transfer.amount}, the platform fee of ${feeOwed} still owed and their gas`,
      );
    }
    steps.push(
      await this.sign(
        wallet,
        { to: transfer.to, value: transfer.amount, nonce: nonce + steps.length, gasLimit: NATIVE_GAS },
        fee,
      ),
    );
    return this.bundle(steps);
  }

  private async prepareToken(wallet: Wallet, transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    const token = this.options.tokens.find((t) => t.symbol === transfer.token);
    if (!token) throw new TransactionRejectedError(`${this.options.chain} has no token ${transfer.token}`);
    const platform = transfer.fees?.platform ?? 0n;
    // A sweep this small costs the fee wallet more gas than it is worth; a refund is paid whatever its size.
    const dust = this.options.dustThresholds?.[token.symbol] ?? 10n ** BigInt(token.decimals);
    if (transfer.payout !== 'refund' && transfer.amount + platform < dust) {
      throw new TransactionRejectedError(
        `${transfer.amount + platform} ${token.symbol} base units is below the dust threshold of ${dust}`,
      );
    }
    const from = wallet.address;
    const [balance, { nonce, feeOwed }, before] = await Promise.all([
      this.balanceOf(from, token.symbol),
      this.nextAttempt(from, platform, transfer),
      this.balanceOf(from),
    ]);
    if (balance < transfer.amount + feeOwed) {
      throw new TransactionRejectedError(
        `${from} holds ${balance} ${token.symbol} base units, less than the payout of ${transfer.amount} and the platform fee of ${feeOwed} still owed`,
      );
    }
    const fee = this.fee;
    if (!fee) throw new Error(`${this.options.chain}: no fee quote yet`);
    const calls: { to: string; amount: bigint }[] = [
      ...(feeOwed > 0n ? [{ to: this.options.treasury, amount: feeOwed }] : []),
      { to: transfer.to, amount: transfer.amount },
    ];
    const steps: Transaction[] = [];
    let budget = 0n;
    for (const [i, call] of calls.entries()) {
      const data =
        TRANSFER_SELECTOR + AbiCoder.defaultAbiCoder().encode(['address', 'uint256'], [call.to, call.amount]).slice(2);
      // Estimated from the deposit address (no gas needed for that), with a margin; unused gas stays there as dust.
      const estimate = BigInt(await this.node.rpc<string>('eth_estimateGas', [{ from, to: token.contract, data }]));
      const gasLimit = (estimate * 13n) / 10n;
      budget += gasLimit * fee.maxFeePerGas;
      steps.push(await this.sign(wallet, { to: token.contract, data, value: 0n, nonce: nonce + i, gasLimit }, fee));
    }
    return this.bundle(steps, {
      budget: budget.toString(),
      maxFeePerGas: fee.maxFeePerGas.toString(),
      maxPriorityFeePerGas: fee.maxPriorityFeePerGas.toString(),
      eip1559: fee.eip1559,
      before: before.toString(),
    });
  }

  /**
   * The nonce a new attempt starts at, and the platform fee it still owes.
   * - Not beyond another payout from the payer still on its way
   *   (`othersPrepared`): transactions are mined in nonce order, and one
   *   signed behind a transaction that may never be mined would wait behind
   *   it for ever. The payer is busy until that one is mined.
   * - Not beyond a nonce of an earlier attempt's that the chain has not used
   *   (`refusedAttempts`): the two then compete for it and at most one is
   *   mined. A refusal read from a lagging node may be wrong, and a nonce
   *   read from a fresher one would otherwise sign a second payout.
   * - Never after an earlier attempt's payout that is on the chain: that is
   *   the payout (the engine's look finds it once its receipt is read).
   * - The platform fee less what the earlier attempts' fee steps (every step
   *   but the last) paid, read from the chain, never from the deposit's
   *   balance: a payment that reached it late is not the treasury's.
   */
  private async nextAttempt(
    from: string,
    platform: bigint,
    transfer: OutgoingTransfer,
  ): Promise<{ nonce: number; feeOwed: bigint }> {
    let nonce = await this.nonceOf(from);
    const stepsOf = (raw: string) => (JSON.parse(raw) as Bundle).steps.map((s) => Transaction.from(s));
    for (const raw of transfer.othersPrepared ?? []) {
      for (const step of stepsOf(raw).filter((s) => s.from === from && s.nonce >= nonce)) {
        // One the node does not have (refused, dropped, not sent yet) is not waited for: this one may take its
        // nonce, and of the two the chain mines one, the other then refused on the nonce and prepared again.
        if (await this.node.rpc('eth_getTransactionByHash', [step.hash])) {
          throw new PayerBusyError(`${from} has ${step.hash} (nonce ${step.nonce}) on its way: this payout follows it`);
        }
      }
    }
    const attempts = (transfer.refusedAttempts ?? []).map(stepsOf);
    const receipts = new Map<string, RpcReceipt | null>();
    for (const step of attempts.flat()) receipts.set(step.hash!, await this.node.receipt(step.hash!));
    // A nonce one of its attempts' transactions was mined at is used by no other of them.
    const minedAt = new Set(attempts.flat().flatMap((s) => (receipts.get(s.hash!) ? [s.nonce] : [])));
    let owed = platform;
    for (const steps of attempts) {
      for (const [i, step] of steps.entries()) {
        const receipt = receipts.get(step.hash!);
        if (!receipt) {
          if (minedAt.has(step.nonce)) continue;
          const taken = await this.nonceTakenBy(step);
          if (taken === 'open') nonce = Math.min(nonce, step.nonce);
          if (taken === 'ours')
            throw new Error(`${step.hash} of an earlier attempt is mined, but its receipt is not read yet`);
          continue;
        }
        if (receipt.status !== '0x1') continue;
        if (i === steps.length - 1) throw new Error(`an earlier attempt's payout ${step.hash} is on the chain`);
        owed -= step.data === '0x' ? step.value : transferAmountOf(step);
      }
    }
    return { nonce, feeOwed: owed > 0n ? owed : 0n };
  }

  private bundle(steps: Transaction[], topUp?: Bundle['topUp']): PreparedTransaction {
    const raw: Bundle = { v: 1, steps: steps.map((t) => t.serialized), ...(topUp && { topUp }) };
    return { txHash: steps[steps.length - 1]!.hash!, raw: JSON.stringify(raw) };
  }

  async broadcast(transaction: PreparedTransaction): Promise<void> {
    const bundle = JSON.parse(transaction.raw) as Bundle;
    const steps = bundle.steps.map((s) => Transaction.from(s));
    const payout = steps[steps.length - 1]!;
    const landed = await this.node.receipt(payout.hash!);
    if (landed) {
      if (landed.status !== '0x1') throw new TransactionRejectedError(`payout ${payout.hash} reverted`);
      return;
    }
    if (bundle.topUp) await this.topUp(steps, bundle.topUp);
    for (const step of steps) await this.send(step);
  }

  /** Sends one signed transaction; one the node already has (pending or mined) is fine. */
  private async send(tx: Transaction): Promise<void> {
    try {
      await this.node.once('eth_sendRawTransaction', [tx.serialized]);
      return;
    } catch (error) {
      const text = errorText(error);
      if (/already known|known transaction|already imported|already exists/.test(text)) return;
      // A receipt that cannot be read is an unknown outcome, never a refusal.
      const receipt = await this.node.receipt(tx.hash!);
      if (receipt) {
        if (receipt.status !== '0x1') throw new TransactionRejectedError(`${tx.hash} reverted`);
        return;
      }
      // Another transaction with the same nonce is pending (perhaps an earlier attempt's): the outcome is open.
      if (/replacement|replace/.test(text)) throw this.node.redacted(error);
      if (!REFUSAL.test(text)) throw this.node.redacted(error);
      const refusal = this.node.redacted(text.split(' | ')[0]!).message.slice(0, 300);
      // Any refusal may be of this very transaction, mined already: a load-balanced provider takes it on an
      // up-to-date backend and answers the receipt from a lagging one, and a node that checks the fee before
      // the nonce refuses a mined transaction for its fee (geth, core/txpool/validation.go: ValidateTransaction,
      // the intrinsic gas and the pool's minimum tip, runs before ValidateTransactionWithState, the nonce and
      // the funds). Only the chain's record of the nonce tells.
      const taken = await this.nonceTakenBy(tx);
      if (taken === 'ours') return;
      if (taken !== 'open') {
        throw new NonceUsedError(`${refusal} (nonce ${tx.nonce} was used by another transaction, in ${taken.usedIn})`);
      }
      if (/nonce too low|nonce has already been used/.test(text)) {
        throw new Error(`${refusal}, but the chain as read has not used nonce ${tx.nonce} yet: reads lag`);
      }
      throw new TransactionRejectedError(refusal);
    }
  }

  /**
   * Whether `tx`'s nonce is used on the chain, and by what: 'ours' when the
   * block that used it holds `tx`, `usedIn` (where) when another transaction
   * used it, 'open' when the latest block read has not used it. Found from
   * the sender's count at blocks (EIP-1898), searched back from the latest,
   * and proved on the block found, by its hash: the count passes the nonce
   * in it and not in its parent. A node that lacks a block (a lagging
   * backend) throws: the outcome stays unknown. So does one that no longer
   * keeps the state the search reaches (a full node keeps about 128 blocks),
   * unless `tx` has a receipt: a node that prunes state may prune receipts
   * too, so none is no proof that another transaction used the nonce.
   */
  private async nonceTakenBy(tx: Transaction): Promise<'ours' | 'open' | { usedIn: string }> {
    const from = tx.from!;
    const usedAt = async (at: string | { blockHash: string; requireCanonical: true }) =>
      BigInt(await this.node.rpc<string>('eth_getTransactionCount', [from, at])) > BigInt(tx.nonce);
    const latest = await this.node.rpc<RpcBlock | null>('eth_getBlockByNumber', ['latest', false]);
    if (!latest) throw new Error(`${this.options.chain}: the node has no latest block`);
    const height = Number(latest.number);
    if (!(await usedAt({ blockHash: latest.hash, requireCanonical: true }))) {
      // Not used as of a block older than one already read: a node that lags cannot say so.
      if (height < this.highestSeen) {
        throw new Error(
          `${this.options.chain}: nonce ${tx.nonce} read at block ${height}, behind ${this.highestSeen}: reads lag`,
        );
      }
      return 'open';
    }
    this.highestSeen = Math.max(this.highestSeen, height);
    let block: RpcBlock;
    try {
      block = await this.blockThatUsed(tx, height, usedAt);
    } catch (error) {
      if (!STATE_PRUNED.test(errorText(error))) throw error;
      if (await this.node.receipt(tx.hash!)) return 'ours';
      // No receipt proves nothing: a node that prunes state may prune receipts too (reth --full).
      throw new Error(
        `nonce ${tx.nonce} of ${tx.from} was used before the oldest state the node keeps, and it has no receipt of ` +
          `${tx.hash}: whether that landed is unknown here (a node that keeps all state can tell)`,
      );
    }
    const ours = block.transactions.some((t) => (typeof t === 'string' ? t : t.hash).toLowerCase() === tx.hash);
    return ours ? 'ours' : { usedIn: `block ${Number(block.number)} ${block.hash}` };
  }

  /** The block in which `tx`'s sender used its nonce, at or below `height` where it is used (see nonceTakenBy). */
  private async blockThatUsed(
    tx: Transaction,
    height: number,
    usedAt: (at: string | { blockHash: string; requireCanonical: true }) => Promise<boolean>,
  ): Promise<RpcBlock> {
    // Used at `after`, not yet at `before`: stepping back by doubling steps, then halving the gap, finds the block.
    let after = height;
    let before = after - 1;
    for (let back = 1; before >= 0 && (await usedAt('0x' + before.toString(16))); back *= 2) {
      after = before;
      before = Math.max(after - back * 2, -1);
    }
    while (after - before > 1) {
      const middle = Math.floor((after + before) / 2);
      if (await usedAt('0x' + middle.toString(16))) after = middle;
      else before = middle;
    }
    const block = await this.node.rpc<RpcBlock | null>('eth_getBlockByNumber', ['0x' + after.toString(16), false]);
    if (!block) throw new Error(`${this.options.chain}: the node lacks block ${after}`);
    const proved =
      (await usedAt({ blockHash: block.hash, requireCanonical: true })) &&
      !(await usedAt({ blockHash: block.parentHash, requireCanonical: true }));
    if (!proved)
      throw new Error(`${this.options.chain}: the node's answers on nonce ${tx.nonce} of ${tx.from} disagree`);
    return block;
  }

  /**
   * Gives the deposit address the gas of the transactions not mined yet, from
   * the fee wallet, and waits for it to be mined (the node refuses a
   * transaction whose sender cannot pay for it). All of it, whatever the
   * payer held when the bundle was prepared (`before`): that ETH is another
   * payout's (the settlement's, an ETH refund's), which would be short by this
   * gas. A balance already above `before` by the need is this bundle's top-up,
   * mined before a crash or a repeat: nothing more is sent. (The steps start
   * at the payer's mined nonce: a payout from it mined meanwhile took their
   * nonces, and they can never be mined.)
   * One top-up at a time; its nonce is the fee wallet's mined count, so a
   * top-up resent after a crash is the same transaction and the node takes it
   * as a repeat.
   */
  private topUp(steps: Transaction[], topUp: NonNullable<Bundle['topUp']>): Promise<void> {
    const run = this.topUps.then(async () => {
      const from = steps[0]!.from!;
      const mined = await this.nonceOf(from);
      const waiting = steps.filter((s) => s.nonce >= mined);
      if (waiting.length === 0) return;
      const maxFee = BigInt(topUp.maxFeePerGas);
      const need = waiting.reduce((total, s) => total + s.gasLimit * maxFee + s.value, 0n);
      const balance = await this.balanceOf(from);
      const missing = BigInt(topUp.before ?? 0) + need - balance;
      if (missing <= 0n) return;
      // Never more than the need: a payer holding less than before lost ETH to a payout that took these nonces.
      const value = missing < need ? missing : need;
      const feeKey = this.options.keyring.deriveEvmServiceKey('fee');
      const fee: FeeQuote = {
        maxFeePerGas: maxFee,
        maxPriorityFeePerGas: BigInt(topUp.maxPriorityFeePerGas),
        eip1559: topUp.eip1559,
      };
      const tx = await this.sign(
        new Wallet(hexlify(feeKey.privateKey)),
        { to: from, value, nonce: await this.nonceOf(feeKey.address), gasLimit: NATIVE_GAS },
        fee,
      );
      try {
        await this.send(tx);
      } catch (error) {
        // The fee wallet's nonce read stale (another top-up used it): that says nothing of the payout.
        if (error instanceof NonceUsedError) throw new Error(`gas top-up ${tx.hash} not sent: ${error.message}`);
        if (/insufficient funds/.test(errorText(error))) {
          throw new TransactionRejectedError(`the fee wallet ${feeKey.address} cannot pay the gas top-up: fund it`);
        }
        throw error;
      }
      const deadline = Date.now() + (this.options.topUpTimeoutMs ?? 120_000);
      for (;;) {
        const receipt = await this.node.receipt(tx.hash!);
        if (receipt?.status === '0x1') return;
        if (receipt) throw new Error(`gas top-up ${tx.hash} reverted`);
        if (Date.now() > deadline) throw new Error(`gas top-up ${tx.hash} is not mined yet`);
        await sleep(250);
      }
    });
    this.topUps = run.catch(() => undefined);
    return run;
  }
}
