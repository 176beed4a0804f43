// Tron (TRX and USDT-TRC20) behind the chain port, through the java-tron HTTP
// API that a full node and TronGrid both serve (`/wallet/*` for the head
// view, `/walletsolidity/*` for the solidified one).
//
// Detection: TRX payments are the successful TransferContract transactions
// of a block (index 0); token payments are the Transfer event logs of the
// catalogue's token contracts in the block's transaction results (index = the
// log's position in its transaction), which also shows transfers made through
// other contracts. A direct `transfer(address,uint256)` call to a token is
// cross-checked against those results: a block whose results the node cannot
// give in full, or gives from another fork, is read again rather than read
// half. Only a SUCCESS result pays: a reverted or out-of-energy call has no
// Transfer log.
//
// Finality: a block is final once solidified (about 19 blocks behind the
// head); the head reports the solidified height, so the watcher never counts
// a payment in a newer block as confirmed.
//
// Settlement: a bundle of transactions signed offline with tronweb, every one
// of them recorded before any is sent:
//   - TRX: the platform fee to the treasury, then the payout. Bandwidth is
//     paid by the deposit address (its free daily bandwidth first, then burnt
//     TRX), and a recipient account that does not exist yet costs the
//     account-creation fee. The payout is exactly the settlement's net
//     amount; the fee transfer takes what is left after the chain's charges,
//     so the deposit address is left empty. The quoted network fee is the
//     bandwidth of both transfers at the burn price; when the chain charges
//     less (free bandwidth), the treasury receives the difference, and when it
//     charges more (a recipient to activate), the treasury's share pays it.
//   - USDT: a TRX top-up from the fee wallet (m/44'/195'/1'/0/0) that covers
//     the energy burn of the token calls and their bandwidth (and creates the
//     deposit account, which receiving a token does not), then the platform
//     fee call and the payout call, each with a fee_limit over the node's
//     energy estimate.
// A Tron transaction id is the hash of its content and every transaction
// carries an expiration: a bundle sent again after a crash is the same
// transactions, and a payout that expired without being mined is declared
// refused only once the solidified chain is past its expiration and does not
// hold it, when no node can ever take it again. Only then does the sweeper
// prepare a new bundle, so a restart can never pay twice.
import { TronWeb } from 'tronweb';
import { encodeParams, fromHex as base58FromHex, signTransaction, toHex as hexFromBase58 } from 'tronweb/utils';
import { findChain, type ChainName } from '../../domain/catalogue.ts';
import type { DepositKeyring } from '../keys/derivation.ts';
import { HeadPoller } from './head-poller.ts';
import { DEFAULT_RETRY, retried, sleep, withoutRpcUrl, type RetryPolicy } from './retry.ts';
import {
  staleTip,
  TransactionRejectedError,
  type ChainAdapter,
  type ChainBlock,
  type ChainHead,
  type ChainTransfer,
  type OutgoingTransfer,
  type PreparedTransaction,
  type TransactionStatus,
} from './port.ts';

/** keccak256("Transfer(address,address,uint256)"), as java-tron writes topics: bare hex. */
export const TRC20_TRANSFER_TOPIC = 'ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef';
/** transfer(address,uint256) */
const TRANSFER_SELECTOR = 'a9059cbb';

/** Genesis block ids (the blockID of block 0) of the public networks. */
export const tronNetworks: Record<string, string> = {
  mainnet: '00000000000000001ebf88508a03865c71d452e25f4d51194196a1d22b6653dc',
  nile: '0000000000000000d698d4192c56cb6be724a558448e2684802de4d6cd8690dc',
  shasta: '0000000000000000de1aa88295e1fcf982742f773e0419c5a9c134c994a9059e',
};

/** How long a settlement's transactions stay valid; the node refuses more than a day. */
const EXPIRATION_MS = 10 * 60 * 1000;
/** Room over the node's energy estimate in a call's fee_limit (the energy price or a contract's factor may rise). */
const ENERGY_MARGIN_PERCENT = 110n;
/** A transaction's bandwidth counts this many bytes beyond its serialisation (java-tron's MAX_RESULT_SIZE_IN_TX). */
const RESULT_BYTES = 64;
const RPC_TIMEOUT_MS = 30_000;

export interface TronToken {
  symbol: string;
  /** Base58 T-address of the TRC-20 contract. */
  contract: string;
  decimals: number;
}

export interface TronChainOptions {
  rpcUrl: string;
  /** Sent as TRON-PRO-API-KEY (TronGrid). */
  apiKey?: string;
  /** `mainnet`, `nile`, `shasta`, or the 64-hex genesis block id of another network. */
  network?: string;
  /** Token contracts; default: the catalogue's mainnet ones. */
  tokens?: TronToken[];
  keyring: Pick<DepositKeyring, 'deriveDepositKey' | 'deriveTronServiceKey'>;
  /** Where platform fees go; default: the derived treasury. */
  treasury?: string;
  /** Confirmations a payout needs; a payout above the solidified block is reported one short. */
  confirmations: number;
  pollMs?: number;
  retry?: RetryPolicy;
  /** How long a broadcast waits for the fee wallet's top-up to be mined before it gives up (unknown outcome). */
  topUpTimeoutMs?: number;
}

interface BlockJson {
  blockID?: string;
  block_header?: { raw_data: { number?: number; parentHash: string; timestamp?: number } };
  transactions?: TransactionJson[];
}
interface ContractJson {
  type: string;
  parameter: { value: Record<string, unknown>; type_url?: string };
}
export interface TransactionJson {
  txID: string;
  ret?: { contractRet?: string }[];
  raw_data: { contract: ContractJson[]; expiration: number; timestamp?: number; fee_limit?: number };
  raw_data_hex: string;
  signature?: string[];
  visible?: boolean;
}
interface LogJson {
  address: string;
  topics?: string[];
  data?: string;
}
export interface TransactionInfoJson {
  id: string;
  blockNumber?: number;
  blockTimeStamp?: number;
  fee?: number;
  result?: string;
  resMessage?: string;
  receipt?: { result?: string; net_fee?: number; energy_fee?: number; net_usage?: number; energy_usage_total?: number };
  log?: LogJson[];
}
interface AccountResourceJson {
  freeNetUsed?: number;
  freeNetLimit?: number;
  NetUsed?: number;
  NetLimit?: number;
}

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
  v: 1;
  /** Signed transactions in the order they are sent; the last is the payout. */
  steps: TransactionJson[];
  /** Token bundles: the fee wallet's TRX top-up, sent (and mined) first when the deposit address holds less than `need`. */
  topUp?: { transaction: TransactionJson; need: string };
}

const toHex = (base58: string) => hexFromBase58(base58).toLowerCase();
const fromHex = (hex: string) => base58FromHex(hex);

/** Bytes a node charges as bandwidth for a signed transaction (java-tron's BandwidthProcessor). */
export function bandwidthOf(transaction: Pick<TransactionJson, 'raw_data_hex' | 'signature'>): number {
  const raw = transaction.raw_data_hex.length / 2;
  const varint = (n: number) => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : 4);
  // Transaction { raw_data = 1; signature = 2 (repeated) }: a tag, a length and the bytes each.
  const signatures = (transaction.signature ?? []).reduce((sum, s) => sum + 1 + varint(s.length / 2) + s.length / 2, 0);
  return 1 + varint(raw) + raw + signatures + RESULT_BYTES;
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
  }
  return transfers;
}

export class TronChain implements ChainAdapter {
  readonly chain: ChainName = 'tron';
  readonly treasury: string;
  readonly feeWallet: string;
  private readonly tokens: TronToken[];
  private readonly builder: TronWeb['transactionBuilder'];
  private readonly poller: HeadPoller;
  private closed = false;
  private fees?: FeeSchedule;
  private readonly recentBlocks = new Map<string, ChainBlock>();
  private readonly preparedByReference = new Map<string, PreparedTransaction>();
  private topUps: Promise<unknown> = Promise.resolve();
  /** Bytes of a signed TRX transfer with the largest amount (the quote's unit). */
  private transferBytes = 0;

  private constructor(private readonly options: TronChainOptions) {
    this.tokens =
      options.tokens ??
      findChain('tron')!
        .supportedTokens.filter((t) => t.contractAddress !== null)
        .map((t) => ({ symbol: t.symbol, contract: t.contractAddress!, decimals: t.decimals }));
    this.feeWallet = options.keyring.deriveTronServiceKey('fee').address;
    this.treasury = options.treasury ?? options.keyring.deriveTronServiceKey('treasury').address;
    // Used offline only: transactions are built from a given block header and signed here.
    this.builder = new TronWeb({ fullHost: options.rpcUrl }).transactionBuilder;
    this.poller = new HeadPoller(
      async () => (await this.post<BlockJson>('/wallet/getblock', { detail: false })).block_header?.raw_data.number ?? -1,
      options.pollMs,
    );
  }

  /**
   * Connects and checks the node's genesis block against the configured
   * network; a mismatch or a node that does not answer stops start-up with
   * one line naming the variable.
   */
  static async open(options: TronChainOptions): Promise<TronChain> {
    const network = options.network ?? 'mainnet';
    const expected = tronNetworks[network] ?? network.toLowerCase();
    if (!/^[0-9a-f]{64}$/.test(expected)) {
      throw new Error(
        `CHAIN_TRON_NETWORK must be mainnet, nile, shasta or a 64-hex genesis block id (got "${network.slice(0, 80)}")`,
      );
    }
    const adapter = new TronChain(options);
    let genesis: string | undefined;
    try {
      genesis = (await adapter.call<BlockJson>('/wallet/getblock', { id_or_num: '0', detail: false })).blockID;
      await adapter.head(); // also the first fee schedule
    } catch (error) {
      adapter.close();
      const reason = withoutRpcUrl(error, options.rpcUrl).message.split('\n')[0]!;
      throw new Error(`CHAIN_TRON_RPC_URL: the node did not answer (${reason.slice(0, 200)})`);
    }
    if (genesis !== expected) {
      adapter.close();
      const known = Object.entries(tronNetworks).find(([, id]) => id === genesis)?.[0];
      throw new Error(
        `CHAIN_TRON_RPC_URL is a node of ${known ? `Tron ${known}` : `the network whose genesis block is ${genesis}`}, not ${
          tronNetworks[network] ? `Tron ${network}` : `the network of genesis block ${expected}`
        }; set CHAIN_TRON_NETWORK=${known ?? genesis} if that network is meant`,
      );
    }
    return adapter;
  }

  close(): void {
    this.closed = true;
    this.poller.close();
  }

  // -------------------------------------------------------------------------
  // The node's HTTP API
  // -------------------------------------------------------------------------

  /** One POST, retried with growing delays (rate limits, dropped connections, a lagging node). */
  private async call<T>(path: string, body: object): Promise<T> {
    try {
      return await retried(() => this.post<T>(path, body), this.options.retry ?? DEFAULT_RETRY, () => this.closed);
    } catch (error) {
      throw withoutRpcUrl(error, this.options.rpcUrl);
    }
  }

  private async post<T>(path: string, body: object): Promise<T> {
    const response = await fetch(this.options.rpcUrl.replace(/\/+$/, '') + path, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(this.options.apiKey && { 'TRON-PRO-API-KEY': this.options.apiKey }),
      },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(RPC_TIMEOUT_MS),
    });
    if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
    const json = (await response.json()) as T & { Error?: string };
    // java-tron answers a bad request with 200 and {"Error": "..."}.
    if (json && typeof json === 'object' && typeof json.Error === 'string') {
      throw new Error(`${path}: ${json.Error.slice(0, 300)}`);
    }
    return json;
  }

  // -------------------------------------------------------------------------
  // Reading the chain
  // -------------------------------------------------------------------------

  async head(): Promise<ChainHead> {
    const [latest, solid] = await Promise.all([
      this.call<BlockJson>('/wallet/getblock', { detail: false }),
      this.call<BlockJson>('/walletsolidity/getblock', { detail: false }),
    ]);
    if (!latest.blockID || !latest.block_header) throw new Error('tron: the node has no latest block');
    await this.refreshFees();
    const stale = staleTip(new Date(latest.block_header.raw_data.timestamp ?? 0));
    return {
      height: latest.block_header.raw_data.number ?? 0,
      hash: latest.blockID,
      finalized: solid.block_header?.raw_data.number ?? 0,
      ...(stale && { stale }),
    };
  }

  async block(height: number): Promise<ChainBlock | undefined> {
    // The watcher reads its last block again at every step (to find forks):
    // a block already parsed is known by its id from the header alone.
    const header = await this.call<BlockJson>('/wallet/getblock', { id_or_num: String(height), detail: false });
    if (!header.blockID) return undefined;
    const known = this.recentBlocks.get(header.blockID);
    if (known) return known;
    const block = await this.call<BlockJson>('/wallet/getblockbynum', { num: height });
    if (!block.blockID || !block.block_header) return undefined;
    if (block.blockID !== header.blockID) throw new Error(`tron block ${height} changed while it was read`);
    const parsed = await this.parseBlock(block);
    this.recentBlocks.set(parsed.hash, parsed);
    if (this.recentBlocks.size > 64) this.recentBlocks.delete(this.recentBlocks.keys().next().value!);
    return parsed;
  }

  private async parseBlock(block: BlockJson): Promise<ChainBlock> {
    const raw = block.block_header!.raw_data;
    const height = raw.number ?? 0;
    // Any contract call may move a token (through another contract): its results hold the logs.
    const calls = (block.transactions ?? []).some((t) => t.raw_data.contract[0]?.type === 'TriggerSmartContract');
    const infos = calls
      ? await this.call<TransactionInfoJson[] | Record<string, never>>('/wallet/gettransactioninfobyblocknum', {
          num: height,
        })
      : [];
    const transfers = parseTronBlock(
      block,
      Array.isArray(infos) ? infos : [],
      this.tokens,
      // The fee wallet's top-ups to deposit addresses are ours, not a customer's payment.
      new Set([toHex(this.feeWallet)]),
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

  private async account(address: string): Promise<{ balance: bigint; exists: boolean }> {
    const account = await this.call<{ address?: string; balance?: number }>('/wallet/getaccount', {
      address,
      visible: true,
    });
    return { balance: BigInt(account.balance ?? 0), exists: account.address !== undefined };
  }

  async balanceOf(address: string, token = 'TRX'): Promise<bigint> {
    if (token === 'TRX') return (await this.account(address)).balance;
    const contract = this.tokenOf(token).contract;
    const answer = await this.call<{ constant_result?: string[]; result?: { result?: boolean; message?: string } }>(
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

  private tokenOf(symbol: string): TronToken {
    const token = this.tokens.find((t) => t.symbol === symbol);
    if (!token) throw new TransactionRejectedError(`tron has no token ${symbol}`);
    return token;
  }

  // -------------------------------------------------------------------------
  // Fees
  // -------------------------------------------------------------------------

  private async refreshFees() {
    try {
      const { chainParameter } = await this.call<{ chainParameter: { key: string; value?: number }[] }>(
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
      if (this.transferBytes === 0) {
        const key = this.options.keyring.deriveTronServiceKey('fee');
        const sample = await this.signed(
          key.privateKey,
          await this.builder.sendTrx(this.treasury, Number.MAX_SAFE_INTEGER, key.address, {
            blockHeader: { ref_block_bytes: 'ffff', ref_block_hash: 'f'.repeat(16), expiration: 2 ** 45, timestamp: 2 ** 45 },
          }),
        );
        this.transferBytes = bandwidthOf(sample);
      }
    } catch (error) {
      if (!this.fees) throw error;
      // Keep the last schedule; the next head refreshes it.
    }
  }

  private get schedule(): FeeSchedule {
    if (!this.fees) throw new Error('tron: no fee schedule yet');
    return this.fees;
  }

  /**
   * A TRX settlement's fee: the bandwidth of its two transfers (the payout and
   * the platform fee) at the burn price. Token settlements' energy and
   * bandwidth are paid by the fee wallet: 0.
   */
  networkFee(token: string): bigint {
    if (token !== 'TRX') return 0n;
    return 2n * BigInt(this.transferBytes) * this.schedule.bandwidthPrice;
  }

  // -------------------------------------------------------------------------
  // Settlement
  // -------------------------------------------------------------------------

  private async signed(privateKey: Uint8Array, transaction: unknown): Promise<TransactionJson> {
    const tx = transaction as TransactionJson;
    return signTransaction(Buffer.from(privateKey).toString('hex'), tx) as unknown as TransactionJson;
  }

  /** The header every transaction of a bundle shares: a solidified reference block (a fork cannot undo it) and an expiration. */
  private async blockHeader() {
    const [latest, solid] = await Promise.all([
      this.call<BlockJson>('/wallet/getblock', { detail: false }),
      this.call<BlockJson>('/walletsolidity/getblock', { detail: false }),
    ]);
    const now = latest.block_header?.raw_data.timestamp ?? 0;
    const reference = solid.block_header?.raw_data.number ?? 0;
    return {
      ref_block_bytes: (reference & 0xffff).toString(16).padStart(4, '0'),
      ref_block_hash: solid.blockID!.slice(16, 32),
      expiration: now + EXPIRATION_MS,
      timestamp: now,
    };
  }

  async prepareTransfer(transfer: OutgoingTransfer): Promise<PreparedTransaction> {
    const earlier = this.preparedByReference.get(transfer.reference);
    if (earlier) return earlier;
    const key = this.options.keyring.deriveDepositKey('tron', transfer.from.derivationIndex);
    if (key.address !== transfer.from.address) {
      throw new TransactionRejectedError(
        `derivation index ${transfer.from.derivationIndex} is not ${transfer.from.address}`,
      );
    }
    if (transfer.amount > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new TransactionRejectedError(`${transfer.amount} is more than one Tron transaction can carry here`);
    }
    const header = await this.blockHeader();
    const prepared =
      transfer.token === 'TRX'
        ? await this.prepareTrx(key.privateKey, transfer, header)
        : await this.prepareToken(key.privateKey, transfer, header);
    if (this.preparedByReference.size > 1000) this.preparedByReference.clear();
    this.preparedByReference.set(transfer.reference, prepared);
    return prepared;
  }

  private async resources(address: string) {
    const r = await this.call<AccountResourceJson>('/wallet/getaccountresource', { address, visible: true });
    return {
      staked: BigInt((r.NetLimit ?? 0) - (r.NetUsed ?? 0)),
      free: BigInt((r.freeNetLimit ?? 0) - (r.freeNetUsed ?? 0)),
    };
  }

  private async prepareTrx(
    privateKey: Uint8Array,
    transfer: OutgoingTransfer,
    header: Awaited<ReturnType<TronChain['blockHeader']>>,
  ): Promise<PreparedTransaction> {
    const from = transfer.from.address;
    const fees = this.schedule;
    const [sender, merchant, treasury, bandwidth] = await Promise.all([
      this.account(from),
      this.account(transfer.to),
      this.account(this.treasury),
      this.resources(from),
    ]);
    /** What the chain takes for sending `tx` to `to` (java-tron's bandwidth order: staked, free, burnt). */
    const left = { ...bandwidth };
    const charge = (tx: TransactionJson, recipientExists: boolean): bigint => {
      const bytes = BigInt(bandwidthOf(tx));
      if (!recipientExists) {
        // Creating an account: staked bandwidth or the creation fee, never the free allowance; plus the actuator's fee.
        if (left.staked >= bytes) left.staked -= bytes;
        else return fees.createNewAccountFee + fees.createAccountFee;
        return fees.createNewAccountFee;
      }
      if (left.staked >= bytes) left.staked -= bytes;
      else if (left.free >= bytes) left.free -= bytes;
      else return bytes * fees.bandwidthPrice;
      return 0n;
    };
    const sign = async (to: string, amount: bigint) =>
      this.signed(privateKey, await this.builder.sendTrx(to, Number(amount), from, { blockHeader: header }));

    const payout = await sign(transfer.to, transfer.amount);
    // The fee transfer's amount changes its size, so its charge is found by trying (a byte or two at most).
    let rest = sender.balance - transfer.amount;
    let feeTx: TransactionJson | undefined;
    for (let tries = 0; tries < 4 && rest > 0n; tries++) {
      const probe = { ...left };
      const attempt = await sign(this.treasury, rest);
      const cost = charge(attempt, treasury.exists) + charge(payout, merchant.exists);
      Object.assign(left, probe);
      const amount = sender.balance - transfer.amount - cost;
      if (amount === rest) {
        feeTx = attempt;
        break;
      }
      rest = amount;
    }
    const payoutCost = feeTx ? 0n : charge(payout, merchant.exists);
    if (!feeTx && sender.balance < transfer.amount + payoutCost) {
      throw new TransactionRejectedError(
        `${from} holds ${sender.balance} sun, less than the payout of ${transfer.amount} and the chain's charges${
          merchant.exists ? '' : ` (${transfer.to} does not exist yet: creating it costs ${fees.createNewAccountFee + fees.createAccountFee} sun)`
        }`,
      );
    }
    return this.bundle(feeTx ? [feeTx, payout] : [payout]);
  }

  private async prepareToken(
    privateKey: Uint8Array,
    transfer: OutgoingTransfer,
    header: Awaited<ReturnType<TronChain['blockHeader']>>,
  ): Promise<PreparedTransaction> {
    const token = this.tokenOf(transfer.token);
    const from = transfer.from.address;
    const fees = this.schedule;
    const platform = transfer.fees?.platform ?? 0n;
    const [balance, deposit] = await Promise.all([this.balanceOf(from, token.symbol), this.account(from)]);
    if (balance < transfer.amount) {
      throw new TransactionRejectedError(
        `${from} holds ${balance} ${token.symbol} base units, less than the payout of ${transfer.amount}`,
      );
    }
    // The platform fee, or what is left of it when an earlier attempt already sent it.
    const feeAmount = platform < balance - transfer.amount ? platform : balance - transfer.amount;
    const calls = [
      ...(feeAmount > 0n ? [{ to: this.treasury, amount: feeAmount }] : []),
      { to: transfer.to, amount: transfer.amount },
    ];
    const steps: TransactionJson[] = [];
    let need = 0n;
    for (const call of calls) {
      const parameter = encodeParams(['address', 'uint256'], [call.to, call.amount]).slice(2);
      const estimate = await this.call<{ energy_used?: number; result?: { result?: boolean; message?: string } }>(
        '/wallet/triggerconstantcontract',
        {
          owner_address: from,
          contract_address: token.contract,
          function_selector: 'transfer(address,uint256)',
          parameter,
          visible: true,
        },
      );
      if (!estimate.result?.result || !estimate.energy_used) {
        throw new TransactionRejectedError(`the token transfer from ${from} would fail: ${estimate.result?.message ?? 'no estimate'}`);
      }
      const feeLimit = (BigInt(estimate.energy_used) * fees.energyPrice * ENERGY_MARGIN_PERCENT) / 100n;
      const built = await this.builder.triggerSmartContract(
        token.contract,
        'transfer(address,uint256)',
        { feeLimit: Number(feeLimit), txLocal: true, blockHeader: header },
        [
          { type: 'address', value: call.to },
          { type: 'uint256', value: call.amount.toString() },
        ],
        from,
      );
      const tx = await this.signed(privateKey, built.transaction);
      // Enough TRX for the energy at the limit, and the bandwidth should the free allowance not cover it.
      need += feeLimit + BigInt(bandwidthOf(tx)) * fees.bandwidthPrice;
      steps.push(tx);
    }
    if (deposit.balance >= need) return this.bundle(steps);
    const feeKey = this.options.keyring.deriveTronServiceKey('fee');
    const topUp = await this.signed(
      feeKey.privateKey,
      await this.builder.sendTrx(from, Number(need - deposit.balance), feeKey.address, { blockHeader: header }),
    );
    return this.bundle(steps, { transaction: topUp, need: need.toString() });
  }

  private bundle(steps: TransactionJson[], topUp?: Bundle['topUp']): PreparedTransaction {
    const raw: Bundle = { v: 1, steps, ...(topUp && { topUp }) };
    return { txHash: steps[steps.length - 1]!.txID, raw: JSON.stringify(raw) };
  }

  private info(txHash: string, view: 'wallet' | 'walletsolidity' = 'wallet'): Promise<TransactionInfoJson | Record<string, never>> {
    return this.call(`/${view}/gettransactioninfobyid`, { value: txHash });
  }

  async broadcast(transaction: PreparedTransaction): Promise<void> {
    const bundle = JSON.parse(transaction.raw) as Bundle;
    const payout = bundle.steps[bundle.steps.length - 1]!;
    const landed = await this.info(payout.txID);
    if ('id' in landed) {
      if (landed.receipt?.result !== undefined && landed.receipt.result !== 'SUCCESS') {
        throw new TransactionRejectedError(`payout ${payout.txID} failed: ${landed.receipt.result}`);
      }
      return;
    }
    await this.refuseIfExpired(payout);
    if (bundle.topUp) await this.topUp(bundle.steps[0]!, bundle.topUp);
    for (const step of bundle.steps) await this.send(step);
  }

  /**
   * A transaction past its expiration can never be taken by a node; once the
   * solidified chain is past it without holding it, it never will be.
   */
  private async refuseIfExpired(tx: TransactionJson): Promise<void> {
    const solid = await this.call<BlockJson>('/walletsolidity/getblock', { detail: false });
    if ((solid.block_header?.raw_data.timestamp ?? 0) <= tx.raw_data.expiration) return;
    if ('id' in (await this.info(tx.txID, 'walletsolidity'))) return;
    throw new TransactionRejectedError(`${tx.txID} expired without being mined`);
  }

  /** Sends one signed transaction; one the node already has is fine. */
  private async send(tx: TransactionJson): Promise<void> {
    const answer = await this.call<{ result?: boolean; code?: string; message?: string }>(
      '/wallet/broadcasttransaction',
      tx,
    );
    if (answer.result) return;
    const message = answer.message ? Buffer.from(answer.message, 'hex').toString('utf8') : '';
    if (answer.code === 'DUP_TRANSACTION_ERROR') return;
    if ('id' in (await this.info(tx.txID))) return;
    const reason = `${answer.code ?? 'refused'}: ${message}`.slice(0, 300);
    // The node refused it for good (bad signature, funds): it cannot be mined. An expired one or one whose
    // reference block this node lacks is left open: refuseIfExpired settles that from the solidified chain.
    if (
      [
        'SIGERROR',
        'CONTRACT_VALIDATE_ERROR',
        'CONTRACT_EXE_ERROR',
        'BANDWITH_ERROR',
        'TOO_BIG_TRANSACTION_ERROR',
      ].includes(answer.code ?? '')
    ) {
      throw new TransactionRejectedError(`${tx.txID} refused: ${reason}`);
    }
    throw new Error(`${tx.txID} not taken: ${reason}`);
  }

  /**
   * Gives the deposit address the TRX its token calls burn, from the fee
   * wallet, and waits for it to be mined (a call from an account without the
   * TRX runs out of energy). One top-up at a time; skipped when the deposit
   * address already holds enough (an earlier attempt's top-up landed).
   */
  private topUp(first: TransactionJson, topUp: NonNullable<Bundle['topUp']>): Promise<void> {
    const run = this.topUps.then(async () => {
      const deposit = fromHex(String(first.raw_data.contract[0]!.parameter.value.owner_address));
      if ('id' in (await this.info(first.txID))) return; // the calls already went out
      if ((await this.account(deposit)).balance >= BigInt(topUp.need)) return;
      try {
        await this.send(topUp.transaction);
      } catch (error) {
        if (error instanceof TransactionRejectedError && /balance is not sufficient/i.test(error.message)) {
          throw new TransactionRejectedError(`the fee wallet ${this.feeWallet} cannot pay the energy top-up: fund it`);
        }
        throw error;
      }
      const deadline = Date.now() + (this.options.topUpTimeoutMs ?? 120_000);
      for (;;) {
        if ('id' in (await this.info(topUp.transaction.txID))) return;
        if (Date.now() > deadline) throw new Error(`energy top-up ${topUp.transaction.txID} is not mined yet`);
        await sleep(250);
      }
    });
    this.topUps = run.catch(() => undefined);
    return run;
  }

  async transactionStatus(txHash: string): Promise<TransactionStatus | undefined> {
    const info = await this.info(txHash);
    // A failed token call paid nothing: it is not the payout (broadcast then reports it refused).
    if (!('id' in info) || info.blockNumber === undefined) return undefined;
    if (info.receipt?.result !== undefined && info.receipt.result !== 'SUCCESS') return undefined;
    const head = await this.head();
    const depth = head.height - info.blockNumber + 1;
    const final = info.blockNumber <= (head.finalized ?? 0);
    return {
      blockNumber: info.blockNumber,
      confirmations: final ? depth : Math.min(depth, Math.max(0, this.options.confirmations - 1)),
    };
  }
}

/** Tron's adapter when it is enabled and has an RPC URL, opened (and its network checked). */
export async function openTronChain(
  settings: {
    chains: readonly ChainName[];
    chainRpcUrls: Partial<Record<ChainName, string>>;
    tron: { network: string; apiKey: string | undefined; tokens: TronToken[] | undefined; treasury: string | undefined } | undefined;
    requiredConfirmations: Record<ChainName, number>;
  },
  keyring: TronChainOptions['keyring'],
): Promise<TronChain | undefined> {
  const rpcUrl = settings.chainRpcUrls.tron;
  const tron = settings.tron;
  if (!rpcUrl || !tron || !settings.chains.includes('tron')) return undefined;
  return TronChain.open({
    rpcUrl,
    keyring,
    network: tron.network,
    confirmations: settings.requiredConfirmations.tron,
    ...(tron.apiKey && { apiKey: tron.apiKey }),
    ...(tron.tokens && { tokens: tron.tokens }),
    ...(tron.treasury && { treasury: tron.treasury }),
  });
}
