// Paying out on Tron: fees, preparing and broadcasting payouts (and the
// platform fee, top-ups, delegations and leftovers that go with them), where
// a payout stands, and the balances it is prepared from.
//
// Settlement: the payout is one transaction signed offline with tronweb and
// recorded before it is sent, alone; the platform fee is built and sent only
// once the payout is on the solidified chain, from what the deposit address
// then holds, so a payout refused or waiting leaves the deposit whole.
//   - TRX: the payout is exactly the settlement's net amount; its bandwidth is
//     taken as burnt (the free allowance comes from a public pool that runs
//     out), or the account-creation fee for a merchant account yet to exist.
//     The treasury gets the quoted fees less what the chain charged.
//   - USDT: a TRX top-up from the fee wallet (m/44'/195'/1'/0/0) that covers
//     the energy burn of both token calls and their bandwidth (and creates
//     the deposit account, which receiving a token does not), mined before
//     the payout call; after the fee call, the TRX the energy did not burn
//     goes back to the fee wallet. A fee call mined but failed out of energy
//     (a price raised since it was read) is sent again, twice at most, with
//     the TRX it lacks topped up at the prices read anew; after that (or
//     another failure) the payout completes with the fee left on the deposit,
//     said to the payout engine (PlatformFeeUncollectedError), which raises
//     it for an operator. With CHAIN_TRON_ENERGY_DELEGATION the
//     energy is delegated from the fee wallet's Stake 2.0 stake instead
//     (after the top-up, before the payout) and taken back after the fee
//     call. The settlement's network fee is all that TRX, quoted in USDT at
//     the service's rates (quoteNetworkFee) and sent to the treasury with
//     the platform fee.
// Refunds are the same payout with no platform fee, from a deposit (the rest
// left for its settlement) or a merchant's refund wallet: TRX, exactly the
// refund's net amount, and what the quoted one transfer's bytes leave over
// to the treasury after it, so the payer spends exactly the refund's amount
// (to an address with no account yet, whose creation costs more, the payout
// waits until it exists); a token, the one call, its TRX topped up from the
// fee wallet and the leftover sent back, the payer spending exactly the
// refund's amount of the token.
// A Tron transaction id is the hash of its content and every transaction
// carries an expiration: a payout sent again after a crash is the same
// transaction, and one that was not mined is declared refused only once the
// solidified chain is past its expiration and does not hold it (or the node
// says its signature or size is wrong), when no node can ever take it. Only
// then does the sweeper prepare a new one, so a restart can never pay twice.
import { TronWeb } from 'tronweb';
import { encodeParams, signTransaction } from 'tronweb/utils';
import { parseUnits } from '../../../domain/money.ts';
import type { DepositKeyring } from '../../keys/derivation.ts';
import type { RateProvider } from '../../rates/port.ts';
import { sleep } from '../node.ts';
import {
  PayoutNotFinalError,
  PlatformFeeUncollectedError,
  TransactionRejectedError,
  type OutgoingTransfer,
  type PreparedTransaction,
  type TransactionStatus,
} from '../port.ts';
import { depositKeyOf } from '../node-adapter.ts';
import { fromHex, type TransactionInfoJson, type TransactionJson, type TronNode } from './node.ts';
import type { TronReader, TronToken } from './reader.ts';

/** How long the chain parameters (prices) stand; they change by proposal, a few times a year. */
const FEES_MS = 10 * 60 * 1000;
/** How long a settlement's transactions stay valid; the node refuses more than a day. */
const EXPIRATION_MS = 10 * 60 * 1000;
/**
 * How far past a transaction's expiration the solidified chain must be
 * before "unknown" counts as never mined: 100 blocks (5 minutes). java-tron
 * answers `/walletsolidity/gettransactioninfobyid` from the answering node's
 * own solidified view (WalletOnSolidity.futureGet: dbManager.setMode(false)),
 * and an unknown id as `{}`, with no height: behind a load balancer the
 * backend that says "unknown" may not have solidified the block that holds
 * it. Past this margin, it would have to lag the one whose solidified block
 * was read by more than that (and the full node's answer, asked first, by
 * more again: its head is 19 blocks past its solidified block).
 */
const LAGGING_BACKEND_MS = 100 * 3000;
/** Room over the node's energy estimate in a call's fee_limit (the energy price or a contract's factor may rise). */
const ENERGY_MARGIN_PERCENT = 110n;
/** A transaction's bandwidth counts this many bytes beyond its serialisation (java-tron's MAX_RESULT_SIZE_IN_TX). */
const RESULT_BYTES = 64;
/** The currency in which TRX's and a token's rates meet: TRX priced in the token is their ratio. */
const QUOTE_FIAT = 'USD';
/** Decimals a rate is read to: exact integers for the conversion (rates are decimal strings). */
const RATE_DECIMALS = 18;
/**
 * Times a token payout's platform fee call that was mined out of energy is sent again, each with the TRX it
 * lacks topped up at the chain's prices read anew. Worth it: the call carries the network fee too, which
 * repays both calls' TRX, so one more call costs the fee wallet less than the tokens it brings.
 */
const FEE_CALL_RETRIES = 2;

/** The chain's prices, from /wallet/getchainparameters. */
interface FeeSchedule {
  /** Sun per byte of bandwidth burnt. */
  bandwidthPrice: bigint;
  /** Sun per unit of energy burnt. */
  energyPrice: bigint;
  /** Burnt for the bandwidth of a transaction that creates an account. */
  createAccountFee: bigint;
  /** Charged by a TRX transfer to an account that does not exist yet. */
  createNewAccountFee: bigint;
}

/** What a prepared settlement carries in `raw`. */
interface Bundle {
  v: 2;
  /** The merchant's payout, signed; sent alone. */
  payout: TransactionJson;
  /**
   * Token payouts: the fee wallet's TRX top-up of all the calls `need`, sent (and mined) before the payout, so
   * TRX already on the payer (a refund wallet's, a wrong-token payment's) never pays them; `before` is the
   * payer's own TRX when it was prepared (less what other payouts' top-ups may hold there: topUpHeld), kept there
   * when the leftover goes back. (Bundles without `before` were sized `need` less the payer's TRX.)
   */
  topUp?: { transaction: TransactionJson; need: string; before?: string };
  /**
   * Token payouts with CHAIN_TRON_ENERGY_DELEGATION: the energy both calls use, delegated from the fee wallet's
   * stake after the top-up (the receiver must exist) and before the payout; no transaction when the deposit
   * already has it (an earlier attempt's delegation). Taken back once the fee call is mined.
   */
  delegate?: { transaction?: TransactionJson; energy: string };
  /** The platform fee: built, signed and sent only once the payout is on the solidified chain. */
  fee: { from: string; derivationIndex: number; token: string; platform: string; network: string };
}

/** The TRX a token payout's top-up gave its payer, sun. */
const givenBy = (bundle: Bundle) =>
  BigInt(String(bundle.topUp?.transaction.raw_data.contract[0]!.parameter.value.amount ?? 0));

/** Bytes a node charges as bandwidth for a signed transaction (java-tron's BandwidthProcessor). */
export function bandwidthOf(transaction: Pick<TransactionJson, 'raw_data_hex' | 'signature'>): number {
  const raw = transaction.raw_data_hex.length / 2;
  const varint = (n: number) => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : 4);
  // Transaction { raw_data = 1; signature = 2 (repeated) }: a tag, a length and the bytes each.
  const signatures = (transaction.signature ?? []).reduce((sum, s) => sum + 1 + varint(s.length / 2) + s.length / 2, 0);
  return 1 + varint(raw) + raw + signatures + RESULT_BYTES;
}

/**
 * `sun` worth of TRX in base units of a token of `decimals`, at TRX's and the
 * token's rates in one fiat currency (decimal strings), rounded up to the next
 * base unit: the platform, which paid the TRX, is never short by the rounding
 * (at most one base unit, 0.000001 USDT, the merchant's way).
 */
export function trxInToken(sun: bigint, trxRate: string, tokenRate: string, decimals: number): bigint {
  const trx = parseUnits(trxRate, RATE_DECIMALS);
  const token = parseUnits(tokenRate, RATE_DECIMALS);
  if (!trx || !token) throw new Error(`tron: unusable rates TRX ${trxRate}, token ${tokenRate}`);
  const numerator = sun * trx * 10n ** BigInt(decimals);
  const denominator = 1_000_000n * token; // TRX has 6 decimals: sun
  return (numerator + denominator - 1n) / denominator;
}

/** The energy token calls use, with room over the node's estimates (ENERGY_MARGIN_PERCENT). */
const energyOf = (calls: { energy: bigint }[]) =>
  (calls.reduce((sum, call) => sum + call.energy, 0n) * ENERGY_MARGIN_PERCENT) / 100n;

export interface TronPayerOptions {
  /** The node's URL, which tronweb's builder wants; it is used offline only. */
  rpcUrl: string;
  keyring: Pick<DepositKeyring, 'deriveDepositKey' | 'deriveTronServiceKey'>;
  tokens: readonly TronToken[];
  feeWallet: string;
  treasury: string;
  /** Confirmations a payout needs; a payout above the solidified block is reported one short. */
  confirmations: number;
  /** How long a broadcast waits for the fee wallet's top-up to be mined before it gives up (unknown outcome). */
  topUpTimeoutMs?: number | undefined;
  /**
   * The service's exchange rates, which turn the TRX a token settlement burns
   * into the token (through USD); without them a token settlement cannot be
   * priced and waits (see quoteNetworkFee).
   */
  rates?: Pick<RateProvider, 'rate'> | undefined;
  /**
   * CHAIN_TRON_ENERGY_DELEGATION: the fee wallet has TRX frozen for energy
   * (Stake 2.0): a token payout's energy is delegated to the deposit address
   * for its two calls and taken back after, instead of burnt.
   */
  energyDelegation?: boolean | undefined;
}

/** A transaction this process sent after a payout (its fee call, its leftover's way back) and when it expires. */
interface Sent {
  txID: string;
  expiration: number;
}

export class TronPayer {
  readonly treasury: string;
  readonly feeWallet: string;
  private readonly tokens: readonly TronToken[];
  private readonly builder: TronWeb['transactionBuilder'];
  private fees?: FeeSchedule;
  private feesReadAt = 0;
  private readonly preparedByReference = new Map<string, PreparedTransaction>();
  /** Payouts prepared or sent here whose platform fee is not sent yet, by payout id. */
  private readonly feesOwed = new Map<string, Bundle>();
  /** Token payouts' platform fee calls sent, by payout id: the deposit's leftover TRX goes back once they are mined. */
  private readonly feeCalls = new Map<string, Sent>();
  /** Token payouts' leftover TRX sent back to the fee wallet, by payout id: the payout is final once it is mined. */
  private readonly leftoversBack = new Map<string, Sent>();
  /**
   * Payouts whose fee and leftover this process has seen through: the look
   * that completes a payout broadcasts it once more, and that repeat must not
   * work the fee out again from the balance, which by then can hold a later
   * payment to the address (the customer's, to refund).
   */
  private readonly feesDone = new Set<string>();
  /**
   * Token payouts' platform fee calls mined and failed (out of energy: a price raised since it was read), by
   * payout id: how many, the TRX they burnt, and what the fee wallet topped up for the calls sent again and
   * the top-up on its way, so that the leftover's way back counts them.
   */
  private readonly feeRetries = new Map<
    string,
    { failed: number; burnt: bigint; given: bigint; topUp?: Sent & { amount: bigint } }
  >();
  /** Payouts whose platform fee was given up, why (broadcast says so: PlatformFeeUncollectedError). */
  private readonly feesUncollected = new Map<string, string>();
  private treasuryExists = false;
  private topUps: Promise<unknown> = Promise.resolve();
  /** Bytes of a signed TRX transfer with the largest amount (the quote's unit). */
  private transferBytes = 0;
  /** Bytes of a signed (un)delegation of energy with the largest amount. */
  private stakeBytes = 0;
  /** The last network fee quoted for each token settlement: the estimate shown until a settlement is priced. */
  private readonly tokenQuotes = new Map<string, bigint>();
  private rates?: Pick<RateProvider, 'rate'>;

  constructor(
    private readonly node: TronNode,
    private readonly reader: Pick<TronReader, 'heads'>,
    private readonly options: TronPayerOptions,
  ) {
    this.tokens = options.tokens;
    this.feeWallet = options.feeWallet;
    this.treasury = options.treasury;
    this.rates = options.rates;
    // Used offline only: transactions are built from a given block header and signed here.
    this.builder = new TronWeb({ fullHost: options.rpcUrl }).transactionBuilder;
  }

  /** The service's exchange rates, which price token settlements (they open after the chains). */
  useRates(rates: Pick<RateProvider, 'rate'>): void {
    this.rates = rates;
  }

  // -------------------------------------------------------------------------
  // Balances
  // -------------------------------------------------------------------------

  private async account(address: string): Promise<{ balance: bigint; exists: boolean; contract: boolean }> {
    const account = await this.node.rpc<{ address?: string; balance?: number; type?: string }>('/wallet/getaccount', {
      address,
      visible: true,
    });
    return {
      balance: BigInt(account.balance ?? 0),
      exists: account.address !== undefined,
      contract: account.type === 'Contract',
    };
  }

  async balanceOf(address: string, token = 'TRX'): Promise<bigint> {
    if (token === 'TRX') return (await this.account(address)).balance;
    const contract = this.tokenOf(token).contract;
    const answer = await this.node.rpc<{ constant_result?: string[]; result?: { result?: boolean; message?: string } }>(
      '/wallet/triggerconstantcontract',
      {
        owner_address: address,
        contract_address: contract,
        function_selector: 'balanceOf(address)',
        parameter: encodeParams(['address'], [address]).slice(2),
        visible: true,
      },
    );
    const result = answer.constant_result?.[0];
    if (!answer.result?.result || !result) throw new Error(`tron: balanceOf(${address}) on ${token} gave no result`);
    return BigInt('0x' + result);
  }

  /** The fee wallet and the treasury with their TRX balances (GET /admin/v1/wallets). */
  async wallets() {
    const [feeWalletBalance, treasuryBalance] = await Promise.all([
      this.balanceOf(this.feeWallet),
      this.balanceOf(this.treasury),
    ]);
    return { feeWallet: this.feeWallet, feeWalletBalance, treasury: this.treasury, treasuryBalance };
  }

  /**
   * A contract account cannot take a TRX payout: java-tron's TransferActuator
   * refuses it ("Cannot transfer TRX to a smartContract."), at every attempt.
   */
  async receivingProblem(address: string): Promise<string | undefined> {
    if (!(await this.account(address)).contract) return undefined;
    return `${address} is a contract on tron: Tron refuses TRX transfers to contracts, so payouts go to plain accounts`;
  }

  private tokenOf(symbol: string): TronToken {
    const token = this.tokens.find((t) => t.symbol === symbol);
    if (!token) throw new TransactionRejectedError(`tron has no token ${symbol}`);
    return token;
  }

  // -------------------------------------------------------------------------
  // Fees
  // -------------------------------------------------------------------------

  /** The chain's prices, read again with the head once they are FEES_MS old. */
  refreshFeesIfDue(): Promise<void> | undefined {
    return Date.now() - this.feesReadAt >= FEES_MS ? this.refreshFees() : undefined;
  }

  private async refreshFees() {
    try {
      const { chainParameter } = await this.node.rpc<{ chainParameter: { key: string; value?: number }[] }>(
        '/wallet/getchainparameters',
        {},
      );
      const get = (key: string) => {
        const value = chainParameter.find((p) => p.key === key)?.value;
        if (value === undefined) throw new Error(`tron: the node has no chain parameter ${key}`);
        return BigInt(value);
      };
      this.fees = {
        bandwidthPrice: get('getTransactionFee'),
        energyPrice: get('getEnergyFee'),
        createAccountFee: get('getCreateAccountFee'),
        createNewAccountFee: get('getCreateNewAccountFeeInSystemContract'),
      };
      this.feesReadAt = Date.now();
      if (this.transferBytes === 0) {
        // The largest a transfer and an undelegation (two bytes longer than a delegation: its type's name) can be.
        const key = this.options.keyring.deriveTronServiceKey('fee');
        const blockHeader = {
          ref_block_bytes: 'ffff',
          ref_block_hash: 'f'.repeat(16),
          expiration: 2 ** 45,
          timestamp: 2 ** 45,
        };
        const max = Number.MAX_SAFE_INTEGER;
        const bytes = async (tx: unknown) => bandwidthOf(await this.signed(key.privateKey, tx));
        this.transferBytes = await bytes(await this.builder.sendTrx(this.treasury, max, key.address, { blockHeader }));
        this.stakeBytes = await bytes(
          await this.builder.undelegateResource(max, this.treasury, 'ENERGY', key.address, { blockHeader }),
        );
      }
    } catch (error) {
      if (!this.fees) throw error;
      // Keep the last schedule; the next head read tries again.
    }
  }

  private get schedule(): FeeSchedule {
    if (!this.fees) throw new Error('tron: no fee schedule yet');
    return this.fees;
  }

  /**
   * A TRX settlement's fee: the bandwidth of its two transfers (the payout and
   * the platform fee) at the burn price. A token settlement's: the last one
   * quoteNetworkFee gave, as an estimate (it depends on the merchant's address
   * and the rates; the payout engine quotes each settlement itself).
   *
   * A refund's, quoted when it is created (its address may come later): TRX,
   * the bytes of its one transfer burnt; what the chain charged less goes to
   * the treasury after it, as a settlement's does, so the payer spends
   * exactly the refund's amount. A token, 0: the fee wallet's TRX pays the
   * call's energy and bytes, as it does a sweep's, and is not charged back in
   * the token, since sending that charge to the treasury would be a second
   * token call burning as much energy as the refund's own.
   */
  networkFee(token: string, payout: 'settlement' | 'refund' = 'settlement'): bigint {
    const transfers = payout === 'refund' ? 1n : 2n;
    if (token === 'TRX') return transfers * BigInt(this.transferBytes) * this.schedule.bandwidthPrice;
    if (payout === 'refund') return 0n;
    const quote = this.tokenQuotes.get(token);
    if (quote === undefined) throw new Error(`tron: no ${token} settlement quoted yet`);
    return quote;
  }

  /**
   * What a settlement costs now, in base units of its token. TRX: networkFee.
   * A token: all the TRX the fee wallet loses for it, at the chain's current
   * prices: the energy of both calls (the payout, and the platform fee to the
   * treasury) as the node estimates it now (more to an address holding none
   * of the token), their bytes burnt, the top-up's own charge (creating the
   * deposit account, which receiving a token does not; else its bytes) and
   * the bytes of the leftover's way back (with the fee wallet's stake
   * delegated: the calls', the delegation's and the undelegation's bytes,
   * no energy burnt, no leftover); bandwidth is taken as burnt, the free
   * allowance coming from a public pool that runs out. Converted into
   * the token with the service's rates through USD (trxInToken). Without a
   * rate it throws: the settlement is failed with the reason and tried again,
   * never sent priced at 0.
   */
  async quoteNetworkFee(payout: Pick<OutgoingTransfer, 'from' | 'to' | 'token'>): Promise<bigint> {
    if (payout.token === 'TRX') return this.networkFee('TRX');
    const token = this.tokenOf(payout.token);
    const from = payout.from.address;
    const key = this.options.keyring.deriveDepositKey('tron', payout.from.derivationIndex);
    const header = await this.blockHeader();
    const [toMerchant, toTreasury, deposit, trx, other] = await Promise.all([
      this.tokenCall(key.privateKey, from, token, payout.to, 1n, header),
      this.tokenCall(key.privateKey, from, token, this.treasury, 1n, header),
      this.account(from),
      this.rates?.rate('TRX', QUOTE_FIAT),
      this.rates?.rate(token.symbol, QUOTE_FIAT),
    ]);
    if (!trx || !other) {
      throw new Error(
        `tron: no ${trx ? token.symbol : 'TRX'} rate in ${QUOTE_FIAT} to price the TRX a ${token.symbol} settlement burns; priced again at the next attempt`,
      );
    }
    const fees = this.schedule;
    const transferCharge = BigInt(this.transferBytes) * fees.bandwidthPrice;
    const topUpCharge = deposit.exists ? transferCharge : fees.createNewAccountFee + fees.createAccountFee;
    // With the fee wallet's stake delegated, the calls burn their bytes only, and the delegation and its
    // undelegation burn theirs.
    const delegate = await this.delegation(from, energyOf([toMerchant, toTreasury]), header);
    const calls = delegate
      ? toMerchant.bandwidth + toTreasury.bandwidth + 2n * BigInt(this.stakeBytes) * fees.bandwidthPrice
      : toMerchant.burn + toTreasury.burn;
    // The leftover pays its own way back: with energy burnt it is the fee_limit's margin, more than its bytes;
    // with energy delegated the top-up is the calls' bytes only, and a leftover is bytes the free allowance paid.
    const sun = calls + topUpCharge + (delegate ? 0n : transferCharge);
    const quote = trxInToken(sun, trx.rate, other.rate, token.decimals);
    this.tokenQuotes.set(token.symbol, quote);
    return quote;
  }

  // -------------------------------------------------------------------------
  // Settlement
  // -------------------------------------------------------------------------

  private async signed(privateKey: Uint8Array, transaction: unknown): Promise<TransactionJson> {
    const tx = transaction as TransactionJson;
    return signTransaction(Buffer.from(privateKey).toString('hex'), tx) as unknown as TransactionJson;
  }

  /** The header of a new transaction: a solidified reference block (a fork cannot undo it) and an expiration. */
  private async blockHeader() {
    const { latest, solid } = await this.reader.heads();
    const now = latest.timestamp;
    return {
      ref_block_bytes: (solid.height & 0xffff).toString(16).padStart(4, '0'),
      ref_block_hash: solid.hash.slice(16, 32),
      expiration: now + EXPIRATION_MS,
      timestamp: now,
    };
  }

  async prepareTransfer(transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    const earlier = this.preparedByReference.get(transfer.reference);
    if (earlier) return earlier;
    const key = depositKeyOf(this.options.keyring, 'tron', transfer.from);
    if (transfer.amount > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new TransactionRejectedError(`${transfer.amount} is more than one Tron transaction can carry here`);
    }
    const header = await this.blockHeader();
    // Never another payout's transaction: two payouts alike (payer, recipient, amount) prepared on one cached
    // head would be one transaction (its id the hash of its content), which would complete both, the
    // recipient paid once. Theirs are the recorded ones of the payer's other payouts on their way.
    const taken = new Set((transfer.othersPrepared ?? []).map((raw) => (JSON.parse(raw) as Bundle).payout.txID));
    const prepared =
      transfer.token === 'TRX'
        ? await this.prepareTrx(key.privateKey, transfer, header, taken)
        : await this.prepareToken(key.privateKey, transfer, header, taken);
    if (this.preparedByReference.size > 1000) this.preparedByReference.clear();
    this.preparedByReference.set(transfer.reference, prepared);
    return prepared;
  }

  private async prepareTrx(
    privateKey: Uint8Array,
    transfer: OutgoingTransfer,
    header: Awaited<ReturnType<TronPayer['blockHeader']>>,
    taken: ReadonlySet<string>,
  ): Promise<PreparedTransaction> {
    const from = transfer.from.address;
    const fees = this.schedule;
    const [sender, merchant] = await Promise.all([this.account(from), this.account(transfer.to)]);
    if (merchant.contract) {
      throw new TransactionRejectedError(`${transfer.to} is a contract: Tron refuses TRX transfers to contracts`);
    }
    const payout = await this.apart(
      header,
      (txID) => taken.has(txID),
      async (blockHeader) =>
        this.signed(
          privateKey,
          await this.builder.sendTrx(transfer.to, Number(transfer.amount), from, { blockHeader }),
        ),
    );
    // The most the payout can cost: its bytes burnt (the free allowance is the chain's public pool too,
    // which runs out: BandwidthProcessor), or creating the merchant's account.
    const cost = merchant.exists
      ? BigInt(bandwidthOf(payout)) * fees.bandwidthPrice
      : fees.createNewAccountFee + fees.createAccountFee;
    // Creating the account is paid from the fees the payout carries, never from other coins on the address
    // (a refund's deposit holds its settlement's rest; a refund's fee is one transfer's bytes): until the
    // account exists, such a payout waits.
    const carried = (transfer.fees?.platform ?? 0n) + (transfer.fees?.network ?? 0n);
    if (!merchant.exists && cost > carried) {
      throw new TransactionRejectedError(
        `${transfer.to} does not exist on Tron yet: creating it costs ${cost} sun, more than the ${carried} sun of fees this payout carries; it is paid once the account exists`,
      );
    }
    if (sender.balance < transfer.amount + cost) {
      throw new TransactionRejectedError(
        `${from} holds ${sender.balance} sun, less than the payout of ${transfer.amount} and the chain's charges of up to ${cost} sun${
          merchant.exists ? '' : ` (${transfer.to} does not exist yet: creating it costs ${cost} sun)`
        }`,
      );
    }
    return this.bundle(payout, transfer);
  }

  private async prepareToken(
    privateKey: Uint8Array,
    transfer: OutgoingTransfer,
    header: Awaited<ReturnType<TronPayer['blockHeader']>>,
    taken: ReadonlySet<string>,
  ): Promise<PreparedTransaction> {
    const token = this.tokenOf(transfer.token);
    const from = transfer.from.address;
    // The treasury's call carries the platform fee and the network fee's tokens, which repay the fee wallet's TRX.
    const platform = (transfer.fees?.platform ?? 0n) + (transfer.fees?.network ?? 0n);
    // Other payouts' recorded bundles from this payer whose top-ups may be on it (recorded, not remembered: a
    // restart forgets nothing). Their payouts' charges are read before the balance, their top-ups after.
    const others = (transfer.othersPrepared ?? [])
      .map((raw) => JSON.parse(raw) as Bundle)
      .filter((b) => b.fee.from === from && b.topUp);
    const charged = await Promise.all(others.map((b) => this.info(b.payout.txID)));
    const [balance, deposit] = await Promise.all([this.balanceOf(from, token.symbol), this.account(from)]);
    if (balance < transfer.amount) {
      throw new TransactionRejectedError(
        `${from} holds ${balance} ${token.symbol} base units, less than the payout of ${transfer.amount}`,
      );
    }
    const payout = await this.tokenCall(privateKey, from, token, transfer.to, transfer.amount, header, taken);
    // Enough for both calls (the fee call goes out once the payout is final): with energy delegated their
    // bytes, else their energy too, up to their fee_limit.
    const calls = [payout];
    if (platform > 0n) calls.push(await this.tokenCall(privateKey, from, token, this.treasury, platform, header));
    const delegate = await this.delegation(from, energyOf(calls), header);
    const need = calls.reduce((sum, call) => sum + (delegate ? call.bandwidth : call.need), 0n);
    // The whole need, whatever the payer holds: its own TRX is the merchant's or a customer's, never the fee's.
    const feeKey = this.options.keyring.deriveTronServiceKey('fee');
    // Never the very transaction of another payout's top-up: two refunds from one refund wallet needing as much,
    // prepared on the same head, would build the same one (its id the hash of its content), and the second
    // would take the first's, mined, for its own and send its call with too little TRX (out of energy). The
    // timestamp is the client's own (java-tron checks the expiration, not it): one millisecond on each time.
    const othersTopUps = new Set(others.map((b) => b.topUp!.transaction.txID));
    const topUp = await this.apart(
      header,
      (txID) => othersTopUps.has(txID),
      async (blockHeader) =>
        this.signed(feeKey.privateKey, await this.builder.sendTrx(from, Number(need), feeKey.address, { blockHeader })),
    );
    // The payer's own TRX: not another payout's top-up still there (two refunds at once from one refund wallet).
    let before = deposit.balance;
    for (const [i, other] of others.entries()) before -= await this.topUpHeld(other, charged[i]!);
    return this.bundle(
      payout.tx,
      transfer,
      { transaction: topUp, need: need.toString(), before: (before > 0n ? before : 0n).toString() },
      delegate,
    );
  }

  /**
   * At most what another payout's top-up still holds on its payer, as the
   * balance just read shows it: nothing until the top-up is mined (looked at
   * after the balance), then what it gave less what its payout burnt (looked
   * at before the balance: `charged`), until its way back is mined, which is
   * not recorded. Counting it too long only leaves the payer's own TRX
   * counted low, and a leftover is never more than what its own top-up did
   * not burn: each payout still sends back its own leftover, to the sun.
   */
  private async topUpHeld(other: Bundle, charged: TransactionInfoJson | Record<string, never>): Promise<bigint> {
    if (!('id' in (await this.info(other.topUp!.transaction.txID)))) return 0n;
    return givenBy(other) - BigInt(('id' in charged && charged.fee) || 0);
  }

  /**
   * The fee wallet's energy for a deposit's calls, when the operator staked
   * it (CHAIN_TRON_ENERGY_DELEGATION): the delegateresource transaction that
   * gives the deposit `energy`, or none when it already has it; undefined
   * when delegation is off or the stake not delegated yet is too small now
   * (other payouts hold it), when the energy is burnt instead. java-tron's
   * DelegateResourceActuator: at least 1 TRX, no more than the owner's
   * frozen-for-energy balance not delegated, to an existing account that is
   * no contract; the receiver's energy is its whole TRX of stake times the
   * chain's TotalEnergyLimit / TotalEnergyWeight
   * (EnergyProcessor.calculateGlobalEnergyLimit). Not locked (lock=false):
   * it can be taken back at once (UnDelegateResourceActuator takes only
   * unlocked balance).
   */
  private async delegation(
    deposit: string,
    energy: bigint,
    header: Awaited<ReturnType<TronPayer['blockHeader']>>,
  ): Promise<Bundle['delegate'] | undefined> {
    if (!this.options.energyDelegation) return undefined;
    const [staker, chain, receiver] = await Promise.all([
      this.node.rpc<{ frozenV2?: { type?: string; amount?: number }[] }>('/wallet/getaccount', {
        address: this.feeWallet,
        visible: true,
      }),
      this.resources(this.feeWallet),
      this.resources(deposit),
    ]);
    const left = BigInt(receiver.EnergyLimit ?? 0) - BigInt(receiver.EnergyUsed ?? 0);
    if (left >= energy) return { energy: energy.toString() };
    const limit = BigInt(chain.TotalEnergyLimit ?? 0);
    const weight = BigInt(chain.TotalEnergyWeight ?? 0);
    if (limit === 0n || weight === 0n) return undefined;
    const missing = energy - (left > 0n ? left : 0n);
    const trx = (missing * weight + limit - 1n) / limit;
    const sun = (trx > 1n ? trx : 1n) * 1_000_000n;
    const available = BigInt(staker.frozenV2?.find((f) => f.type === 'ENERGY')?.amount ?? 0);
    if (available < sun) return undefined;
    const feeKey = this.options.keyring.deriveTronServiceKey('fee');
    const transaction = await this.signed(
      feeKey.privateKey,
      await this.builder.delegateResource(Number(sun), deposit, 'ENERGY', this.feeWallet, false, undefined, {
        blockHeader: header,
      }),
    );
    return { transaction, energy: energy.toString() };
  }

  private resources(address: string) {
    return this.node.rpc<{
      EnergyLimit?: number;
      EnergyUsed?: number;
      TotalEnergyLimit?: number;
      TotalEnergyWeight?: number;
    }>('/wallet/getaccountresource', { address, visible: true });
  }

  /**
   * Takes back the fee wallet's energy delegated to a deposit (all of it,
   * whichever attempt delegated it): true when there is none left, false
   * when the undelegation has just been sent (looked at again next time, so
   * a delegation is never left behind, even one a crash cut short).
   */
  private async undelegated(deposit: string, header: Awaited<ReturnType<TronPayer['blockHeader']>>): Promise<boolean> {
    if (!this.options.energyDelegation) return true;
    const answer = await this.node.rpc<{ delegatedResource?: { frozen_balance_for_energy?: number }[] }>(
      '/wallet/getdelegatedresourcev2',
      { fromAddress: this.feeWallet, toAddress: deposit, visible: true },
    );
    const sun = (answer.delegatedResource ?? []).reduce((sum, d) => sum + BigInt(d.frozen_balance_for_energy ?? 0), 0n);
    if (sun === 0n) return true;
    const feeKey = this.options.keyring.deriveTronServiceKey('fee');
    await this.send(
      await this.signed(
        feeKey.privateKey,
        await this.builder.undelegateResource(Number(sun), deposit, 'ENERGY', this.feeWallet, { blockHeader: header }),
      ),
    );
    return false;
  }

  /**
   * The transaction `build` signs on `header`, its timestamp moved on by a
   * millisecond while its id is `taken` (another's). The timestamp is the
   * client's own: java-tron checks a transaction's expiration, not it
   * (TransactionCapsule, Manager.validateCommon).
   */
  private async apart(
    header: Awaited<ReturnType<TronPayer['blockHeader']>>,
    taken: (txID: string) => boolean | Promise<boolean>,
    build: (blockHeader: Awaited<ReturnType<TronPayer['blockHeader']>>) => Promise<TransactionJson>,
  ): Promise<TransactionJson> {
    for (let ms = 0; ; ms++) {
      const tx = await build({ ...header, timestamp: header.timestamp + ms });
      if (!(await taken(tx.txID))) return tx;
    }
  }

  /**
   * A signed token transfer() call with a fee_limit over the node's energy
   * estimate, and the TRX it may burn; never one of `taken` (moved on by a
   * millisecond: apart).
   */
  private async tokenCall(
    privateKey: Uint8Array,
    from: string,
    token: TronToken,
    to: string,
    amount: bigint,
    header: Awaited<ReturnType<TronPayer['blockHeader']>>,
    taken: ReadonlySet<string> = new Set(),
  ): Promise<{ tx: TransactionJson; need: bigint; burn: bigint; energy: bigint; bandwidth: bigint }> {
    const fees = this.schedule;
    const estimate = await this.node.rpc<{ energy_used?: number; result?: { result?: boolean; message?: string } }>(
      '/wallet/triggerconstantcontract',
      {
        owner_address: from,
        contract_address: token.contract,
        function_selector: 'transfer(address,uint256)',
        parameter: encodeParams(['address', 'uint256'], [to, amount]).slice(2),
        visible: true,
      },
    );
    if (!estimate.result?.result || !estimate.energy_used) {
      throw new TransactionRejectedError(
        `the token transfer from ${from} would fail: ${estimate.result?.message ?? 'no estimate'}`,
      );
    }
    const feeLimit = (BigInt(estimate.energy_used) * fees.energyPrice * ENERGY_MARGIN_PERCENT) / 100n;
    const tx = await this.apart(
      header,
      (txID) => taken.has(txID),
      async (blockHeader) => {
        const built = await this.builder.triggerSmartContract(
          token.contract,
          'transfer(address,uint256)',
          { feeLimit: Number(feeLimit), txLocal: true, blockHeader },
          [
            { type: 'address', value: to },
            { type: 'uint256', value: amount.toString() },
          ],
          from,
        );
        return this.signed(privateKey, built.transaction);
      },
    );
    // The energy at the limit, and the bandwidth should the free allowance not cover it; what it burns as estimated.
    const bandwidth = BigInt(bandwidthOf(tx)) * fees.bandwidthPrice;
    const energy = BigInt(estimate.energy_used);
    return { tx, need: feeLimit + bandwidth, burn: energy * fees.energyPrice + bandwidth, energy, bandwidth };
  }

  private bundle(
    payout: TransactionJson,
    transfer: OutgoingTransfer,
    topUp?: Bundle['topUp'],
    delegate?: Bundle['delegate'],
  ): PreparedTransaction {
    const raw: Bundle = {
      v: 2,
      payout,
      ...(topUp && { topUp }),
      ...(delegate && { delegate }),
      fee: {
        from: transfer.from.address,
        derivationIndex: transfer.from.derivationIndex,
        token: transfer.token,
        platform: String(transfer.fees?.platform ?? 0n),
        network: String(transfer.fees?.network ?? 0n),
      },
    };
    this.feesOwed.set(payout.txID, raw);
    return { txHash: payout.txID, raw: JSON.stringify(raw) };
  }

  private info(
    txHash: string,
    view: 'wallet' | 'walletsolidity' = 'wallet',
  ): Promise<TransactionInfoJson | Record<string, never>> {
    return this.node.rpc(`/${view}/gettransactioninfobyid`, { value: txHash });
  }

  /**
   * Sends the payout; once the payout is on the solidified chain, the
   * platform fee. The fee never goes before the payout: a payout that is
   * refused, or waits, leaves the deposit address holding all it needs.
   */
  async broadcast(transaction: PreparedTransaction): Promise<void> {
    const bundle = JSON.parse(transaction.raw) as Bundle;
    const payout = bundle.payout;
    if (!this.feesDone.has(payout.txID)) this.feesOwed.set(payout.txID, bundle);
    const landed = await this.info(payout.txID);
    if ('id' in landed) {
      if (landed.receipt?.result !== undefined && landed.receipt.result !== 'SUCCESS') {
        throw new TransactionRejectedError(`payout ${payout.txID} failed: ${landed.receipt.result}`);
      }
      const done = await this.sendFeeOnceFinal(bundle, landed as TransactionInfoJson);
      // Solidified, with its fee or leftover still on the way: the payout is not complete yet.
      if (!done && (landed.blockNumber ?? Infinity) <= (await this.reader.heads()).solid.height) {
        throw new PayoutNotFinalError(`payout ${payout.txID}: its fee or leftover is not done yet`);
      }
      const uncollected = this.feesUncollected.get(payout.txID);
      if (done && uncollected) throw new PlatformFeeUncollectedError(uncollected);
      return;
    }
    await this.refuseIfExpired(payout);
    if (bundle.topUp || bundle.delegate?.transaction) await this.prepareDeposit(payout, bundle);
    await this.send(payout);
  }

  /** A payout that can never be mined is refused: the payout engine prepares the next attempt. */
  private async refuseIfExpired(tx: TransactionJson): Promise<void> {
    if (await this.neverMined({ txID: tx.txID, expiration: tx.raw_data.expiration })) {
      throw new TransactionRejectedError(`${tx.txID} expired without being mined`);
    }
  }

  /**
   * A transaction past its expiration can never be taken by a node; once the
   * solidified chain is past it without holding it, it never will be. Past
   * it by LAGGING_BACKEND_MS: the solidity answer carries no height, and a
   * backend behind the others in rotation has not solidified every block yet.
   */
  private async neverMined({ txID, expiration }: Sent): Promise<boolean> {
    const { solid } = await this.reader.heads();
    return solid.timestamp > expiration + LAGGING_BACKEND_MS && !('id' in (await this.info(txID, 'walletsolidity')));
  }

  /** Offers one signed transaction to the node: undefined when taken (or already known), else its refusal. */
  private async offer(tx: TransactionJson): Promise<{ code: string; reason: string } | undefined> {
    const answer = await this.node.rpc<{ result?: boolean; code?: string; message?: string }>(
      '/wallet/broadcasttransaction',
      tx,
    );
    if (answer.result || answer.code === 'DUP_TRANSACTION_ERROR') return undefined;
    if ('id' in (await this.info(tx.txID))) return undefined;
    const message = answer.message ? Buffer.from(answer.message, 'hex').toString('utf8') : '';
    const code = answer.code ?? 'refused';
    return { code, reason: `${code}: ${message}`.slice(0, 300) };
  }

  /**
   * Sends one signed transaction. Only a bad signature and an oversized
   * transaction are refused for good (Wallet.broadcastTransaction's SIGERROR,
   * TOO_BIG_TRANSACTION_ERROR): every other refusal depends on the state of
   * the node that answered (balances, bandwidth, a backend behind the one that
   * took it earlier), so the transaction is left to its expiration, which
   * refuseIfExpired settles from the solidified chain.
   */
  private async send(tx: TransactionJson): Promise<void> {
    const refused = await this.offer(tx);
    if (!refused) return;
    if (refused.code === 'SIGERROR' || refused.code === 'TOO_BIG_TRANSACTION_ERROR') {
      throw new TransactionRejectedError(`${tx.txID} refused: ${refused.reason}`);
    }
    throw new Error(`${tx.txID} not taken yet: ${refused.reason}`);
  }

  /**
   * Readies the deposit address for its token calls, from the fee wallet,
   * each step mined before the next: the TRX they burn (a call from an
   * account without it runs out of energy; it also creates the account),
   * then the energy delegated to it (only an existing account can receive
   * it). One deposit at a time; each step is skipped when already done (an
   * earlier attempt's, or one a crash cut short), so a repeat sends nothing.
   */
  private prepareDeposit(payout: TransactionJson, bundle: Bundle): Promise<void> {
    const run = this.topUps.then(async () => {
      const deposit = fromHex(String(payout.raw_data.contract[0]!.parameter.value.owner_address));
      const { topUp, delegate } = bundle;
      // By its id, not the balance: the payer's own TRX may already cover the need.
      if (topUp && !('id' in (await this.info(topUp.transaction.txID)))) {
        await this.sendMined(topUp.transaction, 'energy top-up');
      }
      if (delegate?.transaction) {
        const resources = await this.resources(deposit);
        const left = BigInt(resources.EnergyLimit ?? 0) - BigInt(resources.EnergyUsed ?? 0);
        if (left < BigInt(delegate.energy)) await this.sendMined(delegate.transaction, 'energy delegation');
      }
    });
    this.topUps = run.catch(() => undefined);
    return run;
  }

  /** Sends one of the fee wallet's transactions and waits until it is mined. */
  private async sendMined(tx: TransactionJson, what: string): Promise<void> {
    await this.sendFromFeeWallet(tx, what);
    const deadline = Date.now() + (this.options.topUpTimeoutMs ?? 120_000);
    for (;;) {
      if ('id' in (await this.info(tx.txID))) return;
      if (Date.now() > deadline) throw new Error(`${what} ${tx.txID} is not mined yet`);
      await sleep(1000);
    }
  }

  /**
   * The platform fee, from what the deposit address holds once the payout is
   * solidified. Repeating it is harmless: it is worked out from the balance
   * each time, and it only ever pays the treasury. (TRX: the platform and
   * network fees less what the payout burnt, less this transfer's own
   * charge; a later payment to the address stays there.)
   */
  private async sendFeeOnceFinal(bundle: Bundle, payoutInfo: TransactionInfoJson): Promise<boolean> {
    if (!this.feesOwed.has(bundle.payout.txID)) return true;
    const { solid } = await this.reader.heads();
    if (payoutInfo.blockNumber === undefined || payoutInfo.blockNumber > solid.height) return false;
    const fee = bundle.fee;
    const key = this.options.keyring.deriveDepositKey('tron', fee.derivationIndex);
    const header = await this.blockHeader();
    if (fee.token === 'TRX') {
      const owed = BigInt(fee.platform) + BigInt(fee.network) - BigInt(payoutInfo.fee ?? 0);
      const [deposit, treasury] = await Promise.all([this.account(fee.from), this.treasuryAccount()]);
      const from = { privateKey: key.privateKey, address: fee.from, holds: deposit.balance, after: payoutInfo };
      await this.sendTrxOut(from, this.treasury, treasury.exists, owed, header);
    } else {
      const id = bundle.payout.txID;
      const feeCall = this.feeCalls.get(id);
      const retries = this.feeRetries.get(id);
      let feeCallInfo: TransactionInfoJson | undefined;
      if (!feeCall && !this.feesUncollected.has(id)) {
        // A top-up for the call on its way: the call goes once it is mined (or worked out again if it never is).
        if (retries?.topUp) {
          if (!('id' in (await this.info(retries.topUp.txID)))) {
            if (await this.neverMined(retries.topUp)) {
              retries.given -= retries.topUp.amount;
              delete retries.topUp;
            }
            return false;
          }
          delete retries.topUp;
        }
        const token = this.tokenOf(fee.token);
        const amount = await this.feeLeft(bundle);
        if (amount > 0n) {
          const call = await this.tokenCall(key.privateKey, fee.from, token, this.treasury, amount, header);
          // Its TRX: the payout's top-up gave it, unless a failed call burnt it (or the prices rose since).
          const lacking = await this.trxLacking(bundle, call.need);
          if (lacking > 0n) {
            const topUp = await this.feeTopUp(fee.from, lacking, header);
            const entry = retries ?? { failed: 0, burnt: 0n, given: 0n };
            entry.given += lacking;
            entry.topUp = { txID: topUp.txID, expiration: topUp.raw_data.expiration, amount: lacking };
            this.feeRetries.set(id, entry);
            return false;
          }
          await this.send(call.tx);
          this.feeCalls.set(id, { txID: call.tx.txID, expiration: call.tx.raw_data.expiration });
          return false;
        }
      } else if (feeCall) {
        const info = await this.info(feeCall.txID);
        if (!('id' in info)) {
          // Taken and then lost (a backend that dropped it, a fork): worked out again from the balance.
          if (await this.neverMined(feeCall)) this.feeCalls.delete(id);
          return false;
        }
        feeCallInfo = info as TransactionInfoJson;
        const result = feeCallInfo.receipt?.result;
        if (result !== undefined && result !== 'SUCCESS') {
          // Mined and failed: its tokens are still on the deposit, its TRX burnt. Out of energy, it is sent
          // again (FEE_CALL_RETRIES) at the chain's prices read anew; else given up, visibly.
          const entry = retries ?? { failed: 0, burnt: 0n, given: 0n };
          entry.failed++;
          entry.burnt += BigInt(feeCallInfo.fee ?? 0);
          this.feeRetries.set(id, entry);
          this.feeCalls.delete(id);
          feeCallInfo = undefined;
          if (result === 'OUT_OF_ENERGY' && entry.failed <= FEE_CALL_RETRIES) {
            await this.refreshFees();
            return false;
          }
          const left = await this.feeLeft(bundle);
          this.feesUncollected.set(
            id,
            `the platform fee call ${feeCall.txID} of payout ${id} failed (${result}), ${entry.failed} time(s): ${left} base units of ${fee.token} (platform and network fees) stay on ${fee.from}`,
          );
        }
      }
      // The delegated energy back to the fee wallet's stake (looked at again until it has gone).
      if (!(await this.undelegated(fee.from, header))) return false;
      // What the energy did not burn goes back to the fee wallet: what the top-up gave less what this payout's
      // own calls burnt (their results' fee). Not all the payer holds above its TRX before the top-up: another
      // payout from the same payer (two refunds at once from one refund wallet) has its own top-up there, which
      // it still needs or sends back itself. Never more than that either, so a repeat after a crash (or a fee
      // call this process no longer knows) finds nothing more to send. Mined before the payout counts as
      // final: the settlement a refund from a deposit leaves records the deposit's TRX before its own top-up.
      const back = this.leftoversBack.get(bundle.payout.txID);
      const retried = this.feeRetries.get(bundle.payout.txID);
      if (back === undefined) {
        const deposit = await this.account(fee.from);
        const unspent =
          givenBy(bundle) +
          (retried?.given ?? 0n) -
          BigInt(payoutInfo.fee ?? 0) -
          BigInt(feeCallInfo?.fee ?? 0) -
          (retried?.burnt ?? 0n);
        const above = deposit.balance - BigInt(bundle.topUp?.before ?? 0);
        const ours = above < unspent ? above : unspent;
        const from = { privateKey: key.privateKey, address: fee.from, holds: deposit.balance, after: payoutInfo };
        const sent = await this.sendTrxOut(from, this.feeWallet, true, ours, header);
        if (sent) {
          this.leftoversBack.set(bundle.payout.txID, { txID: sent, expiration: header.expiration });
          return false;
        }
      } else if (!('id' in (await this.info(back.txID)))) {
        if (await this.neverMined(back)) this.leftoversBack.delete(bundle.payout.txID);
        return false;
      }
      this.leftoversBack.delete(bundle.payout.txID);
      this.feeCalls.delete(bundle.payout.txID);
      this.feeRetries.delete(bundle.payout.txID);
    }
    this.feesOwed.delete(bundle.payout.txID);
    this.feesDone.add(bundle.payout.txID);
    return true;
  }

  /** What of a token payout's platform and network fees is still on its deposit, to go to the treasury. */
  private async feeLeft(bundle: Bundle): Promise<bigint> {
    const held = await this.balanceOf(bundle.fee.from, bundle.fee.token);
    const owed = BigInt(bundle.fee.platform) + BigInt(bundle.fee.network);
    return held < owed ? held : owed;
  }

  /**
   * The TRX a platform fee call that may burn `need` sun lacks on its deposit:
   * all the payer holds above its own TRX (`before`) is the fee wallet's, for
   * the call; with the fee wallet's energy delegated, that energy counts too,
   * at the burn price.
   */
  private async trxLacking(bundle: Bundle, need: bigint): Promise<bigint> {
    const from = bundle.fee.from;
    let has = (await this.account(from)).balance - BigInt(bundle.topUp?.before ?? 0);
    if (this.options.energyDelegation) {
      const resources = await this.resources(from);
      const energy = BigInt(resources.EnergyLimit ?? 0) - BigInt(resources.EnergyUsed ?? 0);
      if (energy > 0n) has += energy * this.schedule.energyPrice;
    }
    return need - has;
  }

  /** Sends `sun` of the fee wallet's TRX to a deposit for its platform fee call (not waited for: the next look). */
  private async feeTopUp(
    to: string,
    sun: bigint,
    header: Awaited<ReturnType<TronPayer['blockHeader']>>,
  ): Promise<TransactionJson> {
    const feeKey = this.options.keyring.deriveTronServiceKey('fee');
    const tx = await this.signed(
      feeKey.privateKey,
      await this.builder.sendTrx(to, Number(sun), feeKey.address, { blockHeader: header }),
    );
    await this.sendFromFeeWallet(tx, 'platform fee top-up');
    return tx;
  }

  /** Offers one of the fee wallet's transactions; a refusal says so, and to fund the wallet when it is short. */
  private async sendFromFeeWallet(tx: TransactionJson, what: string): Promise<void> {
    const refused = await this.offer(tx);
    if (!refused) return;
    const fund = /balance is not sufficient/i.test(refused.reason) ? `; fund the fee wallet ${this.feeWallet}` : '';
    throw new Error(`${what} ${tx.txID} not taken: ${refused.reason}${fund}`);
  }

  /**
   * Sends `owed` sun (no more than the address `holds`) from a deposit
   * address, after its payout (`after`), less what the transfer costs:
   * nothing while its free bandwidth and the chain's public pool last, else
   * its bytes burnt; creating the recipient's account when it has none.
   * Nothing when the cost is more than there is. The id of the transfer
   * sent, if one was.
   */
  private async sendTrxOut(
    {
      privateKey,
      address: from,
      holds,
      after,
    }: { privateKey: Uint8Array; address: string; holds: bigint; after: TransactionInfoJson },
    to: string,
    toExists: boolean,
    owed: bigint,
    header: Awaited<ReturnType<TronPayer['blockHeader']>>,
  ): Promise<string | undefined> {
    const fees = this.schedule;
    const available = holds < owed ? holds : owed;
    // Two payouts from one payer whose calls burnt alike leave equal leftovers: on one block's header their ways
    // back would be one transaction, which the node takes once (a duplicate after that), and each payout would
    // count it as its own. A transfer already on its way, or on the chain, is another's: this one moves by a
    // millisecond. (One of ours mined already is never built again: its leftover is no longer on the payer.)
    const sign = (amount: bigint) =>
      this.apart(
        header,
        (txID) => this.sentAlready(txID),
        async (blockHeader) =>
          this.signed(privateKey, await this.builder.sendTrx(to, Number(amount), from, { blockHeader })),
      );
    const sent = async (tx: TransactionJson) => (await this.send(tx), tx.txID);
    if (!toExists) {
      const amount = available - fees.createNewAccountFee - fees.createAccountFee;
      return amount > 0n ? sent(await sign(amount)) : undefined;
    }
    if (available <= 0n) return undefined;
    // Whole when the free allowance pays its bytes. With nothing else on the address the node says so (it
    // refuses what would burn); other coins there (a refund's deposit holds its settlement's rest) would pay
    // the burn, so it is sent whole only when the payout's bytes were free (the chain's public pool, which
    // no API shows, had room) and the address's own allowance still covers it.
    const whole = await sign(available);
    const free =
      holds === available ||
      (!after.receipt?.net_fee && (await this.freeBandwidth(from)) >= BigInt(bandwidthOf(whole)));
    if (free && !(await this.offer(whole))) return whole.txID;
    // The amount changes the transfer's size, so the burn is found by trying (a byte or two at most).
    let amount = available - BigInt(this.transferBytes) * fees.bandwidthPrice;
    let tx = amount > 0n ? await sign(amount) : undefined;
    for (let tries = 0; tx && tries < 3; tries++) {
      const exact = available - BigInt(bandwidthOf(tx)) * fees.bandwidthPrice;
      if (exact === amount) break;
      amount = exact;
      tx = await sign(amount);
    }
    return tx && sent(tx);
  }

  /** A transfer this process has on its way back to the fee wallet, or one the chain already holds. */
  private async sentAlready(txID: string): Promise<boolean> {
    return [...this.leftoversBack.values()].some((b) => b.txID === txID) || 'id' in (await this.info(txID));
  }

  /**
   * Bytes of the address's free daily bandwidth left (java-tron's
   * Wallet.getAccountResource brings the usage up to date first:
   * BandwidthProcessor.updateUsage). The chain's public pool is not shown.
   */
  private async freeBandwidth(address: string): Promise<bigint> {
    const resources = await this.node.rpc<{ freeNetLimit?: number; freeNetUsed?: number }>(
      '/wallet/getaccountresource',
      {
        address,
        visible: true,
      },
    );
    return BigInt(resources.freeNetLimit ?? 0) - BigInt(resources.freeNetUsed ?? 0);
  }

  private async treasuryAccount() {
    if (this.treasuryExists) return { exists: true };
    const treasury = await this.account(this.treasury);
    this.treasuryExists = treasury.exists;
    return treasury;
  }

  async transactionStatus(txHash: string): Promise<TransactionStatus | undefined> {
    const info = await this.info(txHash);
    // A failed token call paid nothing: it is not the payout (broadcast then reports it refused).
    if (!('id' in info) || info.blockNumber === undefined) return undefined;
    if (info.receipt?.result !== undefined && info.receipt.result !== 'SUCCESS') return undefined;
    const { latest, solid } = await this.reader.heads();
    const depth = latest.height - info.blockNumber + 1;
    let final = info.blockNumber <= solid.height;
    // A payout of this process whose fee is still to go: the fee goes now, and the payout counts
    // as final only once it has (so the settlement engine comes back until it has).
    const owed = this.feesOwed.get(txHash);
    if (final && owed) final = await this.sendFeeOnceFinal(owed, info as TransactionInfoJson).catch(() => false);
    return {
      blockNumber: info.blockNumber,
      confirmations: final ? depth : Math.min(depth, Math.max(0, this.options.confirmations - 1)),
    };
  }
}
