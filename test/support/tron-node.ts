// A Tron test node: an HTTP server speaking the subset of java-tron's HTTP
// API that adapters/chains/tron/ uses, over a chain it runs itself. No Tron
// node can run here, so this one executes real signed transactions with
// Tron's rules:
//   - a transaction's id is the SHA-256 of its raw_data, which must match
//     raw_data_hex (tronweb's own check, as java-tron rebuilds the protobuf),
//     and its signature must recover to the owner address;
//   - TaPoS (the reference block must be one of this chain's), expiration
//     (after the head block's time, within a day), duplicates;
//   - balances, and the mainnet fee schedule of getchainparameters: bandwidth
//     from the free daily allowance (600 bytes) or burnt at 1,000 sun a byte;
//     a TRX transfer that creates an account pays 1 TRX plus 0.1 TRX of
//     bandwidth; TRC-20 calls burn energy at 100 sun a unit within their
//     fee_limit, and fail (mined, fee kept) when out of energy or reverted;
//   - blocks every `mine()`, 3 s apart; the solidified block 19 behind the
//     head; `fork(depth)` drops the newest blocks and what they did;
//   - two HTTP ports, as java-tron has: `/wallet/*` on the full node's
//     (FullNodeHttpApiService, node.http.fullNodePort 8090) and
//     `/walletsolidity/*` on the solidity one (HttpApiOnSolidityService,
//     node.http.solidityPort 8091); `sharedPort` serves both on one, as
//     TronGrid does;
//   - contract accounts (the token contracts, the routers, `deployContract`),
//     to which a TransferContract is refused (TransferActuator.validate:
//     "Cannot transfer TRX to a smartContract.", mainnet's
//     ForbidTransferToContract);
//   - the free allowance drawn from the chain's public free-bandwidth pool as
//     well (BandwidthProcessor.useFreeNet: publicNetLimit), which
//     `exhaustPublicBandwidth()` spends: then bytes are burnt;
//   - `lagging`: one read in four (`lagEvery`) is answered by a backend three
//     blocks (`lagBlocks`) behind (an older head, no block above it, an
//     empty result list for the blocks it lacks; its solidified view as far
//     behind, `/walletsolidity/*` included), as a load-balanced provider does;
//   - `rateLimit`: TronGrid's limit per second; over it every request is
//     answered 403 for 30 s (the key is suspended);
//   - TRX sent on by a router contract's `forward(address)` (payable),
//     reported as an internal transaction of the call's result;
//   - Stake 2.0 energy: FreezeBalanceV2Contract, DelegateResourceContract and
//     UnDelegateResourceContract with java-tron's checks (their actuators'
//     validate), an account's energy limit from its own and acquired stake
//     (EnergyProcessor.calculateGlobalEnergyLimit), spent by a call before
//     any TRX is burnt, and getdelegatedresourcev2. Not modelled: energy
//     recovering over the day, delegation locks other than refusing an
//     early undelegation, and the usage an undelegation hands back.
// The answers' shapes follow recorded real answers (see
// test/fixtures/tron/SOURCES.md) and the java-tron HTTP API reference
// (developers.tron.network/reference: getblock, getblockbynum,
// gettransactioninfobyblocknum, gettransactioninfobyid, getaccount,
// getaccountresource, triggerconstantcontract, broadcasttransaction,
// getchainparameters); error answers use java-tron's response codes with a
// hex-encoded message, as broadcasttransaction does.
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TronWeb } from 'tronweb';
import { ecRecover, encodeParams, fromHex, signTransaction, toHex, txCheck, decodeParams } from 'tronweb/utils';
import type { TransactionInfoJson, TransactionJson } from '../../adapters/chains/tron/index.ts';
import { bandwidthOf, TRC20_TRANSFER_TOPIC } from '../../adapters/chains/tron/index.ts';

/** Mainnet's values of getchainparameters (see SOURCES.md). */
export const TRON_FEES = {
  getTransactionFee: 1000,
  getEnergyFee: 100,
  getCreateAccountFee: 100_000,
  getCreateNewAccountFeeInSystemContract: 1_000_000,
  getFreeNetLimit: 600,
} as const;

/** Energy a USDT transfer() uses on mainnet, to a holder and to an address holding none (see SOURCES.md). */
export const TRC20_ENERGY = { existingHolder: 31_895, newHolder: 64_895, revert: 1_150 } as const;

const BLOCK_MS = 3000;
/** pay(address,address,uint256) of the test routers. */
export const ROUTER_SELECTOR = 'b3d76188';
/** forward(address) of the test routers: sends the call's TRX value on. */
export const FORWARD_SELECTOR = '101e8952';
/** Energy a router's forward() uses (a plain CALL with value). */
const FORWARD_ENERGY = 9_500;
/** Mainnet's public free-bandwidth pool (DynamicPropertiesStore PUBLIC_NET_LIMIT). */
const PUBLIC_NET_LIMIT = 14_400_000_000;
/** How long TronGrid suspends a key that went over its rate. */
const SUSPENSION_MS = 30_000;
const SOLIDIFIED_DEPTH = 19;
const DAY_MS = 24 * 60 * 60 * 1000;
/** The Transaction's maximum fee_limit (15,000 TRX, mainnet's getMaxFeeLimit). */
const MAX_FEE_LIMIT = 15_000_000_000;
/** Mainnet's daily energy and the TRX staked for it (getaccountresource's TotalEnergyLimit, TotalEnergyWeight). */
const TOTAL_ENERGY_LIMIT = 180_000_000_000;
const TOTAL_ENERGY_WEIGHT = 19_000_000_000;
const TRX = 1_000_000n;

/** The energy an account's stake gives (EnergyProcessor.calculateGlobalEnergyLimit: whole TRX staked, times energy per TRX). */
function energyLimitOf(account: Account): number {
  const staked = ((account.frozenEnergy ?? 0n) + (account.acquiredEnergy ?? 0n)) / TRX;
  return Math.floor(Number(staked) * (TOTAL_ENERGY_LIMIT / TOTAL_ENERGY_WEIGHT));
}
const energyLeftOf = (account: Account) => Math.max(0, energyLimitOf(account) - (account.energyUsed ?? 0));

interface Account {
  balance: bigint;
  createdAt: number;
  freeNetUsed: number;
  contract?: boolean;
  /** Sun frozen for energy (Stake 2.0) and not delegated: frozenV2 of type ENERGY. */
  frozenEnergy?: bigint;
  /** Sun of its energy stake delegated to others (account_resource.delegated_frozenV2_balance_for_energy). */
  delegatedEnergy?: bigint;
  /** Sun of others' energy stake delegated to it (acquired_delegated_frozenV2_balance_for_energy). */
  acquiredEnergy?: bigint;
  /** Energy spent from its stake (account_resource.energy_usage); it does not recover here. */
  energyUsed?: number;
}
interface Token {
  symbol: string;
  decimals: number;
  balances: Map<string, bigint>;
}
interface State {
  accounts: Map<string, Account>;
  tokens: Map<string, Token>;
  /** Bytes drawn from the chain's public free-bandwidth pool. */
  publicNetUsed: number;
  /** Energy delegations, owner hex > receiver hex: sun, and until when locked (DelegatedResourceStore). */
  delegations: Map<string, { balance: bigint; lockedUntil: number }>;
}
interface Block {
  number: number;
  blockID: string;
  parentHash: string;
  timestamp: number;
  transactions: (TransactionJson & { ret: { contractRet: string }[] })[];
  infos: TransactionInfoJson[];
  /** The state after this block. */
  state: State;
}

export class NodeRefusal extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

const sha256 = (hex: string) => createHash('sha256').update(Buffer.from(hex, 'hex')).digest('hex');
const copyState = (s: State): State => ({
  accounts: new Map([...s.accounts].map(([k, v]) => [k, { ...v }])),
  tokens: new Map([...s.tokens].map(([k, v]) => [k, { ...v, balances: new Map(v.balances) }])),
  publicNetUsed: s.publicNetUsed,
  delegations: new Map([...s.delegations].map(([k, v]) => [k, { ...v }])),
});
const hexOf = (address: string) => (address.startsWith('T') ? toHex(address) : address).toLowerCase();

export interface TronKey {
  address: string;
  privateKey: string;
}

export function randomTronKey(): TronKey {
  const account = TronWeb.createRandom();
  return { address: account.address, privateKey: account.privateKey.replace(/^0x/, '') };
}

export class TronTestNode {
  /** The full node's HTTP API (`/wallet/*`). */
  url = '';
  /** The solidity HTTP API (`/walletsolidity/*`): its own port unless `sharedPort`. */
  solidityUrl = '';
  readonly genesisId: string;
  private servers: Server[] = [];
  private readonly sharedPort: boolean;
  /** getchainparameters' answer; a test may raise a price. */
  readonly fees: Record<keyof typeof TRON_FEES, number> = { ...TRON_FEES };
  /** One read in four comes from a backend three blocks behind. */
  lagging = false;
  private lagTick = 0;
  private solidityLagTick = 0;
  /** While `lagging`: how many blocks the lagging backend is behind, and one read in how many it answers. */
  lagBlocks = 3;
  lagEvery = 4;
  /** Requests a second before TronGrid's answer (403, then 30 s suspended); undefined: no limit. */
  rateLimit?: number;
  private window = { second: 0, count: 0 };
  private suspendedUntil = 0;
  /** Requests received, by path, and those answered 403 while suspended. */
  readonly requests = new Map<string, number>();
  refusedWhileSuspended = 0;
  private readonly blocks: Block[] = [];
  private pending: Block['transactions'] = [];
  private pendingInfos: TransactionInfoJson[] = [];
  /** The state with the pending transactions applied, as java-tron keeps it. */
  private state: State;
  private forks = 0;
  /** How far `advance` has moved block time ahead of the wall clock. */
  private offsetMs = 0;
  /** Answers broadcasttransaction with a network failure this many more times (a dropped connection). */
  dropBroadcasts = 0;
  readonly builder = new TronWeb({ fullHost: 'http://127.0.0.1:1' }).transactionBuilder;

  /**
   * Contracts that move the caller's tokens on its behalf, with
   * `pay(address token, address to, uint256 amount)` (selector 0xb3d76188):
   * a payment whose transaction calls another contract, seen only in the
   * token's Transfer log.
   */
  private readonly routers: Set<string>;

  constructor(
    options: {
      genesisSalt?: string;
      tokens?: { contract: string; symbol: string; decimals: number }[];
      routers?: string[];
      sharedPort?: boolean;
    } = {},
  ) {
    this.state = { accounts: new Map(), tokens: new Map(), publicNetUsed: 0, delegations: new Map() };
    this.sharedPort = options.sharedPort ?? false;
    this.routers = new Set((options.routers ?? []).map(hexOf));
    for (const t of options.tokens ?? []) {
      this.state.tokens.set(hexOf(t.contract), { symbol: t.symbol, decimals: t.decimals, balances: new Map() });
    }
    for (const contract of [...(options.tokens ?? []).map((t) => t.contract), ...(options.routers ?? [])]) {
      this.state.accounts.set(hexOf(contract), { balance: 0n, createdAt: 0, freeNetUsed: 0, contract: true });
    }
    const timestamp = Math.floor(Date.now() / BLOCK_MS) * BLOCK_MS - 100 * BLOCK_MS;
    const genesisId =
      '0'.repeat(16) + sha256(Buffer.from(`genesis ${options.genesisSalt ?? 'test'}`).toString('hex')).slice(16);
    this.genesisId = genesisId;
    this.blocks.push({
      number: 0,
      blockID: genesisId,
      parentHash: '0'.repeat(64),
      timestamp,
      transactions: [],
      infos: [],
      state: copyState(this.state),
    });
  }

  async start(): Promise<this> {
    const full = await this.listen((path) => this.sharedPort || path.startsWith('/wallet/'));
    this.url = full.url;
    this.solidityUrl = this.sharedPort
      ? full.url
      : (await this.listen((path) => path.startsWith('/walletsolidity/'))).url;
    return this;
  }

  /** One HTTP port serving the paths `serves` accepts (404 for the others, as the other port's are there). */
  private async listen(serves: (path: string) => boolean): Promise<{ url: string }> {
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        const path = (req.url ?? '').split('?')[0]!;
        const limited = this.overRate();
        if (limited) {
          res.writeHead(403, { 'content-type': 'application/json' }).end(JSON.stringify({ Error: limited }));
          return;
        }
        this.requests.set(path, (this.requests.get(path) ?? 0) + 1);
        let input: any = {};
        try {
          input = body ? JSON.parse(body) : {};
        } catch {
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ Error: 'INVALID JSON' }));
          return;
        }
        if (path === '/wallet/broadcasttransaction' && this.dropBroadcasts > 0) {
          this.dropBroadcasts--;
          req.socket.destroy();
          return;
        }
        const answer = serves(path) ? this.answer(path, input) : undefined;
        if (answer === undefined) res.writeHead(404).end();
        else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
      });
    });
    this.servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
  }

  /**
   * TronGrid's rate limit: over `rateLimit` requests in a second, the key is
   * suspended for 30 s and every request in that time is refused with 403
   * (developers.tron.network/reference/rate-limits). Its message, or undefined.
   */
  private overRate(): string | undefined {
    if (this.rateLimit === undefined) return undefined;
    const now = Date.now();
    const message = `The key exceeds the frequency limit(${this.rateLimit}), and the query server will suspend its service for 30s`;
    if (now < this.suspendedUntil) {
      this.refusedWhileSuspended++;
      return message;
    }
    const second = Math.floor(now / 1000);
    if (this.window.second !== second) this.window = { second, count: 0 };
    if (++this.window.count <= this.rateLimit) return undefined;
    this.suspendedUntil = now + SUSPENSION_MS;
    return message;
  }

  /** Lifts a suspension (the test's shortcut for 30 s passing). */
  liftSuspension(): void {
    this.suspendedUntil = 0;
  }

  async stop(): Promise<void> {
    for (const server of this.servers) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  }

  // -------------------------------------------------------------------------
  // The HTTP API
  // -------------------------------------------------------------------------

  /**
   * The head of the backend answering this read: while `lagging`, one read in
   * `lagEvery` is `lagBlocks` behind.
   */
  private answering(tick: 'lagTick' | 'solidityLagTick' = 'lagTick'): Block {
    if (!this.lagging || this[tick]++ % this.lagEvery !== this.lagEvery - 1) return this.head;
    return this.blocks[Math.max(0, this.head.number - this.lagBlocks)]!;
  }

  /**
   * The solidified block of the backend answering this read: its own head's,
   * as a lagging backend's is behind too. java-tron serves `/walletsolidity/*`
   * from the answering node's solidified view (WalletOnSolidity.futureGet:
   * dbManager.setMode(false)): a transaction in a block above it is unknown
   * there (`{}`), and its getblock/getnowblock is that block. Its port's
   * reads draw their own turns (the full node's reads keep theirs).
   */
  private answeringSolidified(): Block {
    return this.blocks[Math.max(0, this.answering('solidityLagTick').number - SOLIDIFIED_DEPTH)]!;
  }

  private answer(path: string, input: any): unknown {
    switch (path) {
      case '/wallet/getblock':
        return this.blockJson(this.blockByIdOrNum(input.id_or_num, this.answering()), input.detail === true);
      case '/walletsolidity/getblock':
        return this.blockJson(this.blockByIdOrNum(input.id_or_num, this.answeringSolidified()), input.detail === true);
      case '/wallet/getnowblock':
        return this.blockJson(this.head, true);
      case '/walletsolidity/getnowblock':
        return this.blockJson(this.answeringSolidified(), true);
      case '/wallet/getblockbynum': {
        const num = Number(input.num);
        return this.blockJson(num <= this.answering().number ? this.blocks[num] : undefined, true);
      }
      case '/wallet/gettransactioninfobyblocknum': {
        // A backend without the block answers an empty list, as java-tron does for a block it lacks.
        const num = Number(input.num);
        return num <= this.answering().number ? (this.blocks[num]?.infos ?? []) : [];
      }
      case '/wallet/gettransactioninfobyid':
        return this.infoOf(String(input.value), this.answering().number);
      case '/walletsolidity/gettransactioninfobyid':
        return this.infoOf(String(input.value), this.answeringSolidified().number);
      case '/wallet/getaccount':
        return this.accountJson(String(input.address), input.visible === true);
      case '/wallet/getaccountresource':
        return this.resourceJson(String(input.address));
      case '/wallet/getdelegatedresourcev2':
        return this.delegationJson(String(input.fromAddress), String(input.toAddress), input.visible === true);
      case '/wallet/getchainparameters':
        return { chainParameter: Object.entries(this.fees).map(([key, value]) => ({ key, value })) };
      case '/wallet/triggerconstantcontract':
        return this.constantCall(input);
      case '/wallet/broadcasttransaction':
        try {
          this.accept(input as TransactionJson);
          return { result: true, txid: input.txID };
        } catch (error) {
          if (!(error instanceof NodeRefusal)) throw error;
          return { code: error.code, txid: input.txID, message: Buffer.from(error.message).toString('hex') };
        }
      default:
        return undefined;
    }
  }

  get head(): Block {
    return this.blocks[this.blocks.length - 1]!;
  }

  get solidified(): Block {
    return this.blocks[Math.max(0, this.head.number - SOLIDIFIED_DEPTH)]!;
  }

  private blockByIdOrNum(idOrNum: unknown, latest: Block): Block | undefined {
    if (idOrNum === undefined || idOrNum === '') return latest;
    const text = String(idOrNum);
    const block = /^\d+$/.test(text) ? this.blocks[Number(text)] : this.blocks.find((b) => b.blockID === text);
    return block && block.number <= latest.number ? block : undefined;
  }

  private blockJson(block: Block | undefined, detail: boolean) {
    if (!block) return {};
    return {
      blockID: block.blockID,
      block_header: {
        raw_data: {
          // Protobuf's JSON leaves zero fields out: the genesis block has no number.
          ...(block.number > 0 && { number: block.number }),
          txTrieRoot: '0'.repeat(64),
          witness_address: '41' + '0'.repeat(40),
          parentHash: block.parentHash,
          version: 32,
          timestamp: block.timestamp,
        },
        witness_signature: '',
      },
      ...(detail && block.transactions.length > 0 && { transactions: block.transactions }),
    };
  }

  private infoOf(txid: string, upTo: number) {
    for (const block of this.blocks) {
      if (block.number > upTo) break;
      const info = block.infos.find((i) => i.id === txid);
      if (info) return info;
    }
    return {};
  }

  private accountJson(address: string, visible: boolean) {
    const hex = hexOf(address);
    const account = this.state.accounts.get(hex);
    if (!account) return {};
    return {
      address: visible ? fromHex(hex) : hex,
      ...(account.balance > 0n && { balance: Number(account.balance) }),
      create_time: account.createdAt,
      ...(account.freeNetUsed > 0 && {
        free_net_usage: account.freeNetUsed,
        latest_consume_free_time: this.head.timestamp,
      }),
      // Protobuf's JSON leaves the default type (Normal) out.
      ...(account.contract && { type: 'Contract' }),
      ...(account.frozenEnergy && {
        frozenV2: [{}, { type: 'ENERGY', amount: Number(account.frozenEnergy) }, { type: 'TRON_POWER' }],
      }),
      ...(account.acquiredEnergy && { acquired_delegated_frozenV2_balance_for_energy: Number(account.acquiredEnergy) }),
      ...((account.delegatedEnergy || account.energyUsed) && {
        account_resource: {
          ...(account.delegatedEnergy && { delegated_frozenV2_balance_for_energy: Number(account.delegatedEnergy) }),
          ...(account.energyUsed && { energy_usage: account.energyUsed }),
        },
      }),
    };
  }

  private resourceJson(address: string) {
    const account = this.state.accounts.get(hexOf(address));
    if (!account) return {};
    return {
      ...(account.freeNetUsed > 0 && { freeNetUsed: account.freeNetUsed }),
      freeNetLimit: this.fees.getFreeNetLimit,
      TotalNetLimit: 43_200_000_000,
      TotalNetWeight: 26_500_000_000,
      ...(account.energyUsed && { EnergyUsed: account.energyUsed }),
      ...(energyLimitOf(account) > 0 && { EnergyLimit: energyLimitOf(account) }),
      TotalEnergyLimit: TOTAL_ENERGY_LIMIT,
      TotalEnergyWeight: TOTAL_ENERGY_WEIGHT,
    };
  }

  /** getdelegatedresourcev2: the unlocked and locked delegations from one account to another ({} when none). */
  private delegationJson(from: string, to: string, visible: boolean) {
    const delegation = this.state.delegations.get(`${hexOf(from)}>${hexOf(to)}`);
    if (!delegation) return {};
    const name = (hex: string) => (visible ? fromHex(hex) : hex);
    return {
      delegatedResource: [
        {
          from: name(hexOf(from)),
          to: name(hexOf(to)),
          frozen_balance_for_energy: Number(delegation.balance),
          ...(delegation.lockedUntil > 0 && { expire_time_for_energy: delegation.lockedUntil }),
        },
      ],
    };
  }

  /** transfer() and balanceOf() of the node's TRC-20 tokens, run without a transaction. */
  private constantCall(input: any) {
    const token = this.state.tokens.get(hexOf(String(input.contract_address)));
    if (!token)
      return { result: { code: 'CONTRACT_VALIDATE_ERROR', message: hex('No contract or not a smart contract') } };
    const owner = hexOf(String(input.owner_address));
    const selector = String(input.function_selector);
    if (selector === 'balanceOf(address)') {
      const [who] = decodeParams([], ['address'], '0x' + input.parameter) as unknown as [string];
      const balance = token.balances.get(hexOf(who)) ?? 0n;
      return {
        result: { result: true },
        energy_used: 935,
        constant_result: [encodeParams(['uint256'], [balance]).slice(2)],
      };
    }
    if (selector === 'transfer(address,uint256)') {
      const [to, amount] = decodeParams([], ['address', 'uint256'], '0x' + input.parameter) as unknown as [
        string,
        bigint,
      ];
      const outcome = this.tokenTransferOutcome(token, owner, hexOf(to), BigInt(amount));
      if (!outcome.ok) {
        return {
          result: { code: 'CONTRACT_EXE_ERROR', message: hex('REVERT opcode executed') },
          energy_used: outcome.energy,
        };
      }
      return {
        result: { result: true },
        energy_used: outcome.energy,
        constant_result: [encodeParams(['bool'], [true]).slice(2)],
      };
    }
    return { result: { code: 'CONTRACT_EXE_ERROR', message: hex('REVERT opcode executed') }, energy_used: 300 };
  }

  private tokenTransferOutcome(token: Token, from: string, to: string, amount: bigint) {
    if ((token.balances.get(from) ?? 0n) < amount) return { ok: false, energy: TRC20_ENERGY.revert };
    const holder = (token.balances.get(to) ?? 0n) > 0n;
    return { ok: true, energy: holder ? TRC20_ENERGY.existingHolder : TRC20_ENERGY.newHolder };
  }

  // -------------------------------------------------------------------------
  // Executing transactions
  // -------------------------------------------------------------------------

  /** Validates and executes a broadcast transaction on the pending state, or refuses it as java-tron would. */
  accept(tx: TransactionJson): void {
    if (!tx || typeof tx.txID !== 'string' || !tx.raw_data || typeof tx.raw_data_hex !== 'string') {
      throw new NodeRefusal('OTHER_ERROR', 'Invalid transaction');
    }
    if (this.known(tx.txID)) throw new NodeRefusal('DUP_TRANSACTION_ERROR', 'Dup transaction.');
    checkSignature(tx);
    const contract = tx.raw_data.contract[0]!;
    const value = contract.parameter.value as Record<string, any>;
    const owner = String(value.owner_address ?? '').toLowerCase();
    const head = this.head;
    if (tx.raw_data.expiration <= head.timestamp) {
      throw new NodeRefusal(
        'TRANSACTION_EXPIRATION_ERROR',
        `Transaction expiration, transaction expiration time is ${tx.raw_data.expiration}, but latest block time is ${head.timestamp}`,
      );
    }
    if (tx.raw_data.expiration > head.timestamp + DAY_MS) {
      throw new NodeRefusal('TRANSACTION_EXPIRATION_ERROR', 'Transaction expiration time is more than one day');
    }
    const raw = tx.raw_data as TransactionJson['raw_data'] & { ref_block_bytes?: string; ref_block_hash?: string };
    const reference = this.blocks.find(
      (b) =>
        (b.number & 0xffff).toString(16).padStart(4, '0') === raw.ref_block_bytes &&
        b.blockID.slice(16, 32) === raw.ref_block_hash,
    );
    if (!reference) {
      throw new NodeRefusal(
        'TAPOS_ERROR',
        `Tapos check error: the reference block ${raw.ref_block_bytes} is not on this chain`,
      );
    }
    const next = copyState(this.state);
    const result = this.execute(next, tx, contract.type, owner, value);
    this.state = next;
    this.pending.push({ ...tx, ret: [{ contractRet: result.contractRet }] });
    this.pendingInfos.push(result.info);
  }

  private known(txid: string) {
    return (
      this.pending.some((t) => t.txID === txid) || this.blocks.some((b) => b.transactions.some((t) => t.txID === txid))
    );
  }

  private execute(state: State, tx: TransactionJson, type: string, owner: string, value: Record<string, any>) {
    const sender = state.accounts.get(owner);
    if (!sender) throw new NodeRefusal('CONTRACT_VALIDATE_ERROR', `Validate ${type} error, no OwnerAccount.`);
    const bytes = bandwidthOf(tx);
    const info: TransactionInfoJson & Record<string, unknown> = { id: tx.txID, fee: 0, receipt: {} };
    if (type === 'TransferContract') {
      const to = String(value.to_address).toLowerCase();
      const amount = BigInt(value.amount ?? 0);
      if (amount <= 0n)
        throw new NodeRefusal(
          'CONTRACT_VALIDATE_ERROR',
          'Validate TransferContract error, Amount must be greater than 0.',
        );
      if (to === owner)
        throw new NodeRefusal(
          'CONTRACT_VALIDATE_ERROR',
          'Validate TransferContract error, Cannot transfer TRX to yourself.',
        );
      // TransferActuator.validate, with mainnet's ForbidTransferToContract proposal in force.
      if (state.accounts.get(to)?.contract)
        throw new NodeRefusal('CONTRACT_VALIDATE_ERROR', 'Cannot transfer TRX to a smartContract.');
      const creates = !state.accounts.has(to);
      const actuatorFee = creates ? BigInt(this.fees.getCreateNewAccountFeeInSystemContract) : 0n;
      if (sender.balance < amount + actuatorFee) {
        throw new NodeRefusal('CONTRACT_VALIDATE_ERROR', 'Validate TransferContract error, balance is not sufficient.');
      }
      // Bandwidth first (java-tron's BandwidthProcessor runs before the actuator).
      const netFee = creates ? BigInt(this.fees.getCreateAccountFee) : this.bandwidthFee(state, sender, bytes);
      if (sender.balance < amount + actuatorFee + netFee) {
        throw new NodeRefusal('BANDWITH_ERROR', 'Account resource insufficient error.');
      }
      sender.balance -= amount + actuatorFee + netFee;
      if (creates) state.accounts.set(to, { balance: 0n, createdAt: this.head.timestamp, freeNetUsed: 0 });
      state.accounts.get(to)!.balance += amount;
      const fee = actuatorFee + netFee;
      Object.assign(info, {
        ...(fee > 0n ? { fee: Number(fee) } : { fee: undefined }),
        contractResult: [''],
        receipt: netFee > 0n ? { net_fee: Number(netFee) } : { net_usage: bytes },
      });
      return { contractRet: 'SUCCESS', info: clean(info) };
    }
    if (type === 'TriggerSmartContract') {
      const called = String(value.contract_address).toLowerCase();
      const data = String(value.data ?? '');
      if (this.routers.has(called) && data.startsWith(FORWARD_SELECTOR) && data.length === 8 + 64) {
        return this.forward(state, tx, sender, called, data, value, bytes, info);
      }
      let tokenAddress = called;
      let call = data;
      if (this.routers.has(called) && data.startsWith(ROUTER_SELECTOR) && data.length === 8 + 192) {
        const [token, to, amount] = decodeParams(
          [],
          ['address', 'address', 'uint256'],
          '0x' + data.slice(8),
        ) as unknown as [string, string, bigint];
        tokenAddress = token.toLowerCase();
        call = 'a9059cbb' + encodeParams(['address', 'uint256'], [to, amount]).slice(2);
      }
      const token = state.tokens.get(tokenAddress);
      if (!token) throw new NodeRefusal('CONTRACT_VALIDATE_ERROR', 'No contract or not a smart contract');
      const feeLimit = BigInt(tx.raw_data.fee_limit ?? 0);
      if (feeLimit < 0n || feeLimit > BigInt(MAX_FEE_LIMIT)) {
        throw new NodeRefusal('CONTRACT_VALIDATE_ERROR', 'feeLimit must be >= 0 and <= 15000000000');
      }
      const netFee = this.bandwidthFee(state, sender, bytes);
      if (sender.balance < netFee) throw new NodeRefusal('BANDWITH_ERROR', 'Account resource insufficient error.');
      sender.balance -= netFee;
      let outcome: { ok: boolean; energy: number } = { ok: false, energy: TRC20_ENERGY.revert };
      let to = '';
      let amount = 0n;
      if (call.startsWith('a9059cbb') && call.length === 8 + 128) {
        const [recipient, value] = decodeParams([], ['address', 'uint256'], '0x' + call.slice(8)) as unknown as [
          string,
          bigint,
        ];
        to = hexOf(recipient);
        amount = BigInt(value);
        outcome = this.tokenTransferOutcome(token, owner, to, amount);
      }
      // The energy a call may use: its stake's (own or delegated to it) first, then what its fee_limit and its TRX,
      // whichever is less, can burn (VMActuator.getAccountEnergyLimitWithFixRatio; ReceiptCapsule.payEnergyBill).
      const price = BigInt(this.fees.getEnergyFee);
      const staked = BigInt(energyLeftOf(sender));
      const affordable = staked + (feeLimit < sender.balance ? feeLimit : sender.balance) / price;
      let result = outcome.ok ? 'SUCCESS' : 'REVERT';
      let energy = BigInt(outcome.energy);
      if (affordable < energy) {
        result = 'OUT_OF_ENERGY';
        energy = affordable; // all of it is spent
      }
      const fromStake = energy < staked ? energy : staked;
      sender.energyUsed = (sender.energyUsed ?? 0) + Number(fromStake);
      const energyFee = (energy - fromStake) * price;
      sender.balance -= energyFee;
      const logs = [];
      if (result === 'SUCCESS') {
        token.balances.set(owner, token.balances.get(owner)! - amount);
        token.balances.set(to, (token.balances.get(to) ?? 0n) + amount);
        logs.push({
          address: tokenAddress.slice(2),
          topics: [TRC20_TRANSFER_TOPIC, owner.slice(2).padStart(64, '0'), to.slice(2).padStart(64, '0')],
          data: amount.toString(16).padStart(64, '0'),
        });
      }
      const fee = energyFee + netFee;
      Object.assign(info, {
        fee: fee > 0n ? Number(fee) : undefined,
        contractResult: [result === 'SUCCESS' ? encodeParams(['bool'], [true]).slice(2) : ''],
        contract_address: String(value.contract_address).toLowerCase(),
        receipt: {
          ...(energyFee > 0n && { energy_fee: Number(energyFee) }),
          ...(fromStake > 0n && { energy_usage: Number(fromStake) }),
          energy_usage_total: Number(energy),
          ...(netFee > 0n ? { net_fee: Number(netFee) } : { net_usage: bytes }),
          result,
        },
        ...(logs.length > 0 && { log: logs }),
        ...(result !== 'SUCCESS' && {
          result: 'FAILED',
          resMessage: hex(result === 'REVERT' ? 'REVERT opcode executed' : 'Not enough energy'),
        }),
      });
      return { contractRet: result, info: clean(info) };
    }
    if (
      type === 'FreezeBalanceV2Contract' ||
      type === 'DelegateResourceContract' ||
      type === 'UnDelegateResourceContract'
    ) {
      // System contracts: bandwidth first (BandwidthProcessor), then the actuator's checks.
      const netFee = this.bandwidthFee(state, sender, bytes);
      if (sender.balance < netFee) throw new NodeRefusal('BANDWITH_ERROR', 'Account resource insufficient error.');
      sender.balance -= netFee;
      this.stake(state, type, owner, sender, value);
      Object.assign(info, {
        fee: netFee > 0n ? Number(netFee) : undefined,
        receipt: netFee > 0n ? { net_fee: Number(netFee) } : { net_usage: bytes },
      });
      return { contractRet: 'SUCCESS', info: clean(info) };
    }
    throw new NodeRefusal('CONTRACT_VALIDATE_ERROR', `${type} is not supported by this test node`);
  }

  /**
   * The TRX a transaction's bytes burn: none while the sender's free
   * allowance and the chain's public pool both have room (both are drawn
   * on), else every byte at the bandwidth price (BandwidthProcessor.consume:
   * useFreeNet, then useTransactionFee).
   */
  private bandwidthFee(state: State, sender: Account, bytes: number): bigint {
    const free = sender.freeNetUsed + bytes <= this.fees.getFreeNetLimit;
    if (free && state.publicNetUsed + bytes <= PUBLIC_NET_LIMIT) {
      sender.freeNetUsed += bytes;
      state.publicNetUsed += bytes;
      return 0n;
    }
    return BigInt(bytes * this.fees.getTransactionFee);
  }

  /**
   * Stake 2.0 for energy, with the checks and messages of java-tron's
   * FreezeBalanceV2Actuator, DelegateResourceActuator and
   * UnDelegateResourceActuator (validate, then execute). Only ENERGY.
   */
  private stake(state: State, type: string, owner: string, sender: Account, value: Record<string, any>) {
    const refuse = (message: string) => {
      throw new NodeRefusal('CONTRACT_VALIDATE_ERROR', message);
    };
    if (value.resource !== 'ENERGY') refuse('ResourceCode error, valid ResourceCode[BANDWIDTH、ENERGY]');
    if (type === 'FreezeBalanceV2Contract') {
      const frozen = BigInt(value.frozen_balance ?? 0);
      if (frozen <= 0n) refuse('frozenBalance must be positive');
      if (frozen < TRX) refuse('frozenBalance must be greater than or equal to 1 TRX');
      if (frozen > sender.balance) refuse('frozenBalance must be less than or equal to accountBalance');
      sender.balance -= frozen;
      sender.frozenEnergy = (sender.frozenEnergy ?? 0n) + frozen;
      return;
    }
    const to = String(value.receiver_address ?? '').toLowerCase();
    const balance = BigInt(value.balance ?? 0);
    const key = `${owner}>${to}`;
    const receiver = state.accounts.get(to);
    if (type === 'DelegateResourceContract') {
      if (balance < TRX) refuse('delegateBalance must be more than 1TRX');
      if ((sender.frozenEnergy ?? 0n) < balance)
        refuse('delegateBalance must be less than available FreezeEnergyV2 balance');
      if (to === owner) refuse('receiverAddress must not be the same as ownerAddress');
      if (!receiver) refuse(`Account[${to}] not exists`);
      if (receiver!.contract) refuse('Do not allow delegate resources to contract addresses');
      // lock_period in blocks of 3 s (getLockPeriod; 0 with lock: the default of 3 days).
      const lockMs = value.lock ? Number(value.lock_period || 86_400) * BLOCK_MS : 0;
      const delegation = state.delegations.get(key) ?? { balance: 0n, lockedUntil: 0 };
      delegation.balance += balance;
      delegation.lockedUntil = Math.max(delegation.lockedUntil, lockMs > 0 ? this.head.timestamp + lockMs : 0);
      state.delegations.set(key, delegation);
      sender.frozenEnergy = sender.frozenEnergy! - balance;
      sender.delegatedEnergy = (sender.delegatedEnergy ?? 0n) + balance;
      receiver!.acquiredEnergy = (receiver!.acquiredEnergy ?? 0n) + balance;
      return;
    }
    const delegation = state.delegations.get(key);
    if (balance <= 0n) refuse('unDelegateBalance must be more than 0 TRX');
    if (!delegation) refuse('delegated Resource does not exist');
    const unlocked = delegation!.lockedUntil > this.head.timestamp ? 0n : delegation!.balance;
    if (unlocked < balance) {
      refuse(`insufficient delegatedFrozenBalance(Energy), request=${balance}, unlock_balance=${unlocked}`);
    }
    delegation!.balance -= balance;
    if (delegation!.balance === 0n) state.delegations.delete(key);
    sender.delegatedEnergy = sender.delegatedEnergy! - balance;
    sender.frozenEnergy = (sender.frozenEnergy ?? 0n) + balance;
    if (receiver) {
      // The receiver keeps no more used energy than its remaining stake gives (the rest goes back with the stake).
      receiver.acquiredEnergy = receiver.acquiredEnergy! - balance;
      receiver.energyUsed = Math.min(receiver.energyUsed ?? 0, energyLimitOf(receiver));
    }
  }

  /**
   * A router's payable forward(address): the call's TRX value goes on to the
   * address, reported as an internal transaction of the result
   * (java-tron's InternalTransaction, note "call").
   */
  private forward(
    state: State,
    tx: TransactionJson,
    sender: Account,
    router: string,
    data: string,
    value: Record<string, any>,
    bytes: number,
    info: TransactionInfoJson & Record<string, unknown>,
  ) {
    const callValue = BigInt(value.call_value ?? 0);
    const [recipient] = decodeParams([], ['address'], '0x' + data.slice(8)) as unknown as [string];
    const to = hexOf(recipient);
    // VMActuator.validate: the caller must hold the call value.
    if (sender.balance < callValue)
      throw new NodeRefusal('CONTRACT_VALIDATE_ERROR', 'Validate InternalTransfer error, balance is not sufficient.');
    const netFee = this.bandwidthFee(state, sender, bytes);
    const price = BigInt(this.fees.getEnergyFee);
    const feeLimit = BigInt(tx.raw_data.fee_limit ?? 0);
    const energyFee = BigInt(FORWARD_ENERGY) * price;
    if (sender.balance < callValue + netFee + energyFee || feeLimit < energyFee) {
      throw new NodeRefusal('CONTRACT_VALIDATE_ERROR', 'Validate InternalTransfer error, balance is not sufficient.');
    }
    sender.balance -= callValue + netFee + energyFee;
    const account = state.accounts.get(to) ?? { balance: 0n, createdAt: this.head.timestamp, freeNetUsed: 0 };
    account.balance += callValue;
    state.accounts.set(to, account);
    Object.assign(info, {
      fee: Number(netFee + energyFee),
      contractResult: [''],
      contract_address: router,
      receipt: {
        energy_fee: Number(energyFee),
        energy_usage_total: FORWARD_ENERGY,
        ...(netFee > 0n ? { net_fee: Number(netFee) } : { net_usage: bytes }),
        result: 'SUCCESS',
      },
      internal_transactions: [
        {
          hash: sha256(tx.txID + '00'),
          caller_address: router,
          transferTo_address: to,
          callValueInfo: [{ callValue: Number(callValue) }],
          note: hex('call'),
        },
      ],
    });
    return { contractRet: 'SUCCESS', info: clean(info) };
  }

  // -------------------------------------------------------------------------
  // Driving the chain (the test's side)
  // -------------------------------------------------------------------------

  /**
   * Produces `count` blocks; the first holds the pending transactions. Block
   * times follow the wall clock (plus what `advance` added), as a real
   * chain's do, however fast a test mines.
   */
  mine(count = 1): void {
    for (let i = 0; i < count; i++) {
      const parent = this.head;
      const number = parent.number + 1;
      const timestamp = Math.max(parent.timestamp + 1, Date.now() + this.offsetMs);
      const content = sha256(
        Buffer.from(
          `${parent.blockID} ${timestamp} ${this.forks} ${this.pending.map((t) => t.txID).join(',')}`,
        ).toString('hex'),
      );
      const blockID = number.toString(16).padStart(16, '0') + content.slice(16);
      const infos = this.pendingInfos.map((info) => ({ ...info, blockNumber: number, blockTimeStamp: timestamp }));
      this.blocks.push({
        number,
        blockID,
        parentHash: parent.blockID,
        timestamp,
        transactions: this.pending,
        infos,
        state: copyState(this.state),
      });
      this.pending = [];
      this.pendingInfos = [];
    }
  }

  /** Moves block time ahead (the next blocks are this much later). */
  advance(ms: number): void {
    this.offsetMs += ms;
  }

  /** Drops the newest `depth` blocks and what they did (their transactions are gone: a fork that never had them). */
  fork(depth: number): void {
    if (depth >= this.blocks.length || this.head.number - depth < this.solidified.number) {
      throw new Error('a fork cannot undo a solidified block');
    }
    this.blocks.splice(this.blocks.length - depth, depth);
    this.pending = [];
    this.pendingInfos = [];
    this.state = copyState(this.head.state);
    this.forks++;
  }

  /** Makes `address` a contract account (as deploying a contract there would). */
  deployContract(address: string): void {
    const hex = hexOf(address);
    this.state.accounts.set(hex, {
      ...(this.state.accounts.get(hex) ?? { balance: 0n, createdAt: this.head.timestamp, freeNetUsed: 0 }),
      contract: true,
    });
  }

  /** Spends the chain's public free-bandwidth pool: from now on every transaction's bytes are burnt. */
  exhaustPublicBandwidth(): void {
    this.state.publicNetUsed = PUBLIC_NET_LIMIT;
  }

  /** Credits TRX out of nowhere (a genesis allocation), creating the account. */
  fund(address: string, sun: bigint): void {
    const hex = hexOf(address);
    const account = this.state.accounts.get(hex) ?? { balance: 0n, createdAt: this.head.timestamp, freeNetUsed: 0 };
    account.balance += sun;
    this.state.accounts.set(hex, account);
  }

  mintToken(contract: string, address: string, amount: bigint): void {
    const token = this.state.tokens.get(hexOf(contract))!;
    token.balances.set(hexOf(address), (token.balances.get(hexOf(address)) ?? 0n) + amount);
  }

  balance(address: string): bigint {
    return this.state.accounts.get(hexOf(address))?.balance ?? 0n;
  }

  exists(address: string): boolean {
    return this.state.accounts.has(hexOf(address));
  }

  tokenBalance(contract: string, address: string): bigint {
    return this.state.tokens.get(hexOf(contract))?.balances.get(hexOf(address)) ?? 0n;
  }

  /** Every Transfer log of `contract` to `address` on the chain. */
  tokenTransfersTo(contract: string, address: string): { txid: string; amount: bigint }[] {
    const topic = hexOf(address).slice(2).padStart(64, '0');
    return this.blocks.flatMap((b) =>
      b.infos.flatMap((i) =>
        (i.log ?? [])
          .filter((l) => '41' + l.address === hexOf(contract) && l.topics?.[2] === topic)
          .map((l) => ({ txid: i.id, amount: BigInt('0x' + l.data) })),
      ),
    );
  }

  /** Every TRX transfer on the chain from or to an address. */
  trxTransfers({ from, to }: { from?: string; to?: string }): { txid: string; amount: bigint }[] {
    const matches = (value: unknown, address: string | undefined) =>
      address === undefined || String(value).toLowerCase() === hexOf(address);
    return this.blocks.flatMap((b) =>
      b.transactions
        .filter((t) => t.raw_data.contract[0]!.type === 'TransferContract')
        .filter((t) => {
          const value = t.raw_data.contract[0]!.parameter.value;
          return matches(value.owner_address, from) && matches(value.to_address, to);
        })
        .map((t) => ({ txid: t.txID, amount: BigInt(t.raw_data.contract[0]!.parameter.value.amount as number) })),
    );
  }

  /** Every contract call on the chain from an address, oldest first, with its result (SUCCESS, REVERT, OUT_OF_ENERGY). */
  calls(from: string): { txid: string; result: string }[] {
    return this.blocks.flatMap((b) =>
      b.transactions
        .filter((t) => t.raw_data.contract[0]!.type === 'TriggerSmartContract')
        .filter((t) => String(t.raw_data.contract[0]!.parameter.value.owner_address).toLowerCase() === hexOf(from))
        .map((t) => ({ txid: t.txID, result: t.ret[0]!.contractRet })),
    );
  }

  /** The TRX fee a transaction paid, from its result. */
  feeOf(txid: string): bigint {
    const info = this.infoOf(txid, this.head.number) as TransactionInfoJson;
    return BigInt(info.fee ?? 0);
  }

  private header() {
    const reference = this.solidified;
    return {
      ref_block_bytes: (reference.number & 0xffff).toString(16).padStart(4, '0'),
      ref_block_hash: reference.blockID.slice(16, 32),
      expiration: this.head.timestamp + 60_000,
      timestamp: this.head.timestamp + Math.floor(Math.random() * 1000),
    };
  }

  /** A payer's signed TRX transfer, broadcast through the node's checks. */
  async sendTrx(from: TronKey, to: string, sun: bigint): Promise<string> {
    const tx = await this.builder.sendTrx(to, Number(sun), from.address, { blockHeader: this.header() });
    const signed = signTransaction(from.privateKey, tx) as unknown as TransactionJson;
    this.accept(signed);
    return signed.txID;
  }

  /** An account's TRX frozen for energy (Stake 2.0 freezebalancev2), as an operator stakes the fee wallet. */
  async freezeForEnergy(owner: TronKey, sun: bigint): Promise<string> {
    const tx = await this.builder.freezeBalanceV2(Number(sun), 'ENERGY', owner.address, { blockHeader: this.header() });
    const signed = signTransaction(owner.privateKey, tx) as unknown as TransactionJson;
    this.accept(signed);
    return signed.txID;
  }

  /** Energy an account's stake (own and delegated to it) gives, and what it has used (getaccountresource). */
  energyOf(address: string): { limit: number; used: number } {
    const account = this.state.accounts.get(hexOf(address));
    return { limit: account ? energyLimitOf(account) : 0, used: account?.energyUsed ?? 0 };
  }

  /** Sun of `from`'s energy stake delegated to `to` now. */
  delegatedEnergy(from: string, to: string): bigint {
    return this.state.delegations.get(`${hexOf(from)}>${hexOf(to)}`)?.balance ?? 0n;
  }

  /** A payer's TRX sent through a router contract's forward(address): the recipient sees an internal transaction. */
  async forwardTrx(from: TronKey, router: string, to: string, sun: bigint): Promise<string> {
    const built = await this.builder.triggerSmartContract(
      router,
      'forward(address)',
      { feeLimit: 100_000_000, callValue: Number(sun), txLocal: true, blockHeader: this.header() },
      [{ type: 'address', value: to }],
      from.address,
    );
    const signed = signTransaction(from.privateKey, built.transaction) as unknown as TransactionJson;
    this.accept(signed);
    return signed.txID;
  }

  /** A payer's signed TRC-20 transfer() call, or a router's pay() when `via` names one. */
  async sendToken(
    from: TronKey,
    contract: string,
    to: string,
    amount: bigint,
    { feeLimit = 100_000_000, via }: { feeLimit?: number; via?: string } = {},
  ): Promise<string> {
    const transfer = [
      { type: 'address', value: to },
      { type: 'uint256', value: amount.toString() },
    ];
    const built = await this.builder.triggerSmartContract(
      via ?? contract,
      via ? 'pay(address,address,uint256)' : 'transfer(address,uint256)',
      { feeLimit, txLocal: true, blockHeader: this.header() },
      via ? [{ type: 'address', value: contract }, ...transfer] : transfer,
      from.address,
    );
    const signed = signTransaction(from.privateKey, built.transaction) as unknown as TransactionJson;
    this.accept(signed);
    return signed.txID;
  }
}

/**
 * What java-tron checks of every transaction first: one contract, an id that
 * is the hash of the content (the JSON and its protobuf agree), and a
 * signature by the owner address.
 */
export function checkSignature(tx: TransactionJson): void {
  let consistent = false;
  try {
    consistent = txCheck(tx) && sha256(tx.raw_data_hex) === tx.txID;
  } catch {
    consistent = false;
  }
  const contract = tx.raw_data.contract?.[0];
  if (!contract || tx.raw_data.contract.length !== 1) throw new NodeRefusal('OTHER_ERROR', 'Invalid transaction');
  const owner = String((contract.parameter.value as Record<string, unknown>).owner_address ?? '').toLowerCase();
  const signature = tx.signature?.[0];
  if (!consistent || !signature) {
    throw new NodeRefusal('SIGERROR', 'Validate signature error: the signature does not match the transaction');
  }
  let signer = '';
  try {
    signer = ecRecover(tx.txID, signature).toLowerCase();
  } catch {
    throw new NodeRefusal('SIGERROR', 'Validate signature error: the signature cannot be recovered');
  }
  if (signer !== owner) {
    throw new NodeRefusal(
      'SIGERROR',
      `Validate signature error: ${tx.txID} is signed by ${fromHex(signer)} but it is not contained of permission.`,
    );
  }
}

function hex(text: string) {
  return Buffer.from(text).toString('hex');
}

/** Drops undefined fields, as protobuf's JSON leaves unset ones out. */
function clean<T extends object>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}
