// Deposit address derivation: every invoice gets a fresh address at its own
// derivation index, all from one BIP-39 mnemonic.
//
// The design splits the keys in two so that the API process never holds a
// private key:
//   - WatchOnlyDeriver: built only from account-level extended public keys
//     (m/44'/60'/0', m/44'/195'/0', m/84'/{0|1}'/0'). The last two levels of a
//     secp256k1 path are non-hardened, so public derivation is enough for EVM,
//     Tron and Bitcoin addresses.
//   - DepositKeyring: the signer side, built from the mnemonic. It exports the
//     account xpubs, derives Solana addresses (SLIP-0010 ed25519 allows only
//     hardened derivation, so no xpub can exist for them) and derives the
//     private key of a deposit address for sweeps.
//   - DepositAddresses: what the rest of the service calls. It derives from the
//     xpubs and asks the signer only for Solana.
//
// One derivation index belongs to one invoice, whatever its chain. That is why
// ethereum, bsc and polygon share m/44'/60'/0'/0/i and so give the same
// address for the same index: the index is never reused, so no two invoices
// ever share an address, and a payment on the wrong EVM chain still lands on a
// key we hold.
//
// Secrets (mnemonic, seed, private keys) never appear in errors or logs: the
// keyring keeps them in #private fields, and the key objects it hands out hold
// their secret in a non-enumerable property that JSON.stringify and
// console.log skip.

import { hkdfSync } from 'node:crypto';
import { BIP32Factory, type BIP32Interface } from 'bip32';
import * as ecc from 'tiny-secp256k1';
import * as bitcoin from 'bitcoinjs-lib';
import { ECPairFactory, type ECPairInterface } from 'ecpair';
import { CKDPriv, derivePath as deriveEd25519Path, getPublicKey as ed25519PublicKey } from 'ed25519-hd-key';
import bs58 from 'bs58';
import { generateMnemonic as generateBip39Mnemonic, mnemonicToSeedSync, validateMnemonic } from '@scure/bip39';
import { wordlist as english } from '@scure/bip39/wordlists/english.js';
// ethers' address and hash modules only: its providers, contracts and
// wallets stay unloaded unless an EVM node is configured.
import { getAddress, isAddress as isEvmAddress } from 'ethers/address';
import { keccak256 } from 'ethers/crypto';
import { getBytes } from 'ethers/utils';

const bip32 = BIP32Factory(ecc);
const ecPair = ECPairFactory(ecc);
// Taproot (bc1p…) settlement addresses can only be parsed once bitcoinjs has
// a curve library; without it toOutputScript throws for every v1 address.
bitcoin.initEccLib(ecc);

// ---------------------------------------------------------------------------
// Chains and indexes
// ---------------------------------------------------------------------------

export const CHAINS = ['ethereum', 'bsc', 'polygon', 'tron', 'bitcoin', 'solana'] as const;
export type Chain = (typeof CHAINS)[number];
export type EvmChain = 'ethereum' | 'bsc' | 'polygon';
/** Chains whose deposit addresses can be derived from an xpub. */
export type Secp256k1Chain = EvmChain | 'tron' | 'bitcoin';
/** Chains sharing one address format and one derivation path. */
export type ChainFamily = 'evm' | 'tron' | 'bitcoin' | 'solana';
export type Secp256k1Family = Exclude<ChainFamily, 'solana'>;

const FAMILY_OF: Readonly<Record<Chain, ChainFamily>> = {
  ethereum: 'evm',
  bsc: 'evm',
  polygon: 'evm',
  tron: 'tron',
  bitcoin: 'bitcoin',
  solana: 'solana',
};

export class UnknownChainError extends Error {
  constructor(value: unknown) {
    // A chain name is not a secret, but it is caller input: bound its length.
    const shown = typeof value === 'string' ? JSON.stringify(value.slice(0, 32)) : typeof value;
    super(`Unknown chain ${shown}; expected one of ${CHAINS.join(', ')}`);
    this.name = 'UnknownChainError';
  }
}

export class InvalidDerivationIndexError extends RangeError {
  constructor() {
    super(`A derivation index must be an integer from 0 to ${MAX_DERIVATION_INDEX}`);
    this.name = 'InvalidDerivationIndexError';
  }
}

export function isChain(value: unknown): value is Chain {
  return typeof value === 'string' && Object.hasOwn(FAMILY_OF, value);
}

/** Checks a chain name coming from outside the type system (JSON, env, DB). */
export function parseChain(value: unknown): Chain {
  if (!isChain(value)) throw new UnknownChainError(value);
  return value;
}

export function chainFamily(chain: Chain): ChainFamily {
  return FAMILY_OF[parseChain(chain)];
}

/**
 * The last index of a non-hardened BIP-32 child. Indexes at or above 2^31
 * would silently mean hardened children, which no xpub can derive.
 */
export const MAX_DERIVATION_INDEX = 0x7fff_ffff;
const HARDENED = 0x8000_0000;

export function isDerivationIndex(index: unknown): index is number {
  return Number.isSafeInteger(index) && (index as number) >= 0 && (index as number) <= MAX_DERIVATION_INDEX;
}

function assertDerivationIndex(index: number): void {
  if (!isDerivationIndex(index)) throw new InvalidDerivationIndexError();
}

// ---------------------------------------------------------------------------
// Bitcoin networks
// ---------------------------------------------------------------------------

export type BitcoinNetworkName = 'mainnet' | 'testnet' | 'regtest';

/** Bitcoin Core's `getblockchaininfo.chain`, as CHAIN_BITCOIN_NETWORK names it. */
export type BitcoinCoreChain = 'main' | 'test' | 'signet' | 'regtest';

/** Address prefixes (and derivation coin types) of each network. */
export const bitcoinNetworkOf: Record<BitcoinCoreChain, BitcoinNetworkName> = {
  main: 'mainnet',
  test: 'testnet',
  signet: 'testnet',
  regtest: 'regtest',
};

interface BitcoinNetworkProfile {
  network: bitcoin.Network;
  /** BIP-44 coin type: 0 on mainnet, 1 on every test network (SLIP-0044). */
  coinType: number;
}

const BITCOIN_NETWORKS: Readonly<Record<BitcoinNetworkName, BitcoinNetworkProfile>> = {
  mainnet: { network: bitcoin.networks.bitcoin, coinType: 0 },
  testnet: { network: bitcoin.networks.testnet, coinType: 1 },
  regtest: { network: bitcoin.networks.regtest, coinType: 1 },
};

function bitcoinNetwork(name: BitcoinNetworkName | undefined): BitcoinNetworkProfile {
  const profile = BITCOIN_NETWORKS[name ?? 'mainnet'];
  if (!profile) throw new Error('Unknown bitcoin network; expected mainnet, testnet or regtest');
  return profile;
}

export interface DerivationOptions {
  /** Which Bitcoin network addresses are for. Default mainnet. */
  bitcoinNetwork?: BitcoinNetworkName;
}

// ---------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------

/** Account-level paths; the deposit address is …/0/index below them. */
function accountPath(family: Secp256k1Family, btc: BitcoinNetworkProfile): string {
  switch (family) {
    case 'evm':
      return "m/44'/60'/0'";
    case 'tron':
      return "m/44'/195'/0'";
    case 'bitcoin':
      return `m/84'/${btc.coinType}'/0'`; // BIP-84: native segwit
  }
}

/** The full derivation path of a deposit address, for audit trails and events. */
export function depositDerivationPath(chain: Chain, index: number, options: DerivationOptions = {}): string {
  assertDerivationIndex(index);
  const family = chainFamily(chain);
  if (family === 'solana') return `m/44'/501'/${index}'/0'`;
  return `${accountPath(family, bitcoinNetwork(options.bitcoinNetwork))}/0/${index}`;
}

// External chain (0), as opposed to change (1): deposits are receive addresses.
const EXTERNAL_CHAIN = 0;

// ---------------------------------------------------------------------------
// Public key → address, per family
// ---------------------------------------------------------------------------

function evmAddressFromPublicKey(compressed: Uint8Array): string {
  const uncompressed = ecc.pointCompress(compressed, false);
  // Address = last 20 bytes of keccak256(X || Y), EIP-55 checksummed.
  return getAddress('0x' + keccak256(uncompressed.subarray(1)).slice(-40));
}

/** Tron's address version byte: base58check of 0x41 + the 20-byte account hash gives a T-address. */
const TRON_ADDRESS_VERSION = 0x41;

function tronAddressFromPublicKey(compressed: Uint8Array): string {
  // The account hash is the EVM one (keccak256 of X || Y); the encoding is
  // base58check, done by bitcoinjs-lib rather than loading tronweb (~50 MB).
  const hash = getBytes(evmAddressFromPublicKey(compressed));
  return bitcoin.address.toBase58Check(hash, TRON_ADDRESS_VERSION);
}

/** A Solana address is the base58 ed25519 public key of the account's seed. */
function solanaAddressFromSeed(seed: Uint8Array): string {
  return bs58.encode(ed25519PublicKey(seed, false));
}

function isTronBase58Address(address: string): boolean {
  const { version, hash } = bitcoin.address.fromBase58Check(address);
  return version === TRON_ADDRESS_VERSION && hash.length === 20;
}

function bitcoinAddressFromPublicKey(compressed: Uint8Array, network: bitcoin.Network): string {
  const { address } = bitcoin.payments.p2wpkh({ pubkey: compressed, network });
  if (!address) throw new Error('bitcoinjs returned no p2wpkh address');
  return address;
}

// ---------------------------------------------------------------------------
// Watch-only derivation (what the API process holds)
// ---------------------------------------------------------------------------

/** Base58 account xpubs: the only key material the API process needs. */
export interface AccountXpubs {
  /** m/44'/60'/0' (ethereum, bsc, polygon) */
  evm: string;
  /** m/44'/195'/0' */
  tron: string;
  /** m/84'/0'/0' on mainnet, m/84'/1'/0' on testnet and regtest; xpub/tpub version bytes, not zpub. */
  bitcoin: string;
}

export class InvalidAccountXpubError extends Error {
  constructor(family: Secp256k1Family, reason: string) {
    // Never echo the key: a pasted xprv would end up in logs.
    super(`The ${family} account key is not usable: ${reason}`);
    this.name = 'InvalidAccountXpubError';
  }
}

function parseAccountXpub(family: Secp256k1Family, xpub: string, network: bitcoin.Network): BIP32Interface {
  let node: BIP32Interface;
  try {
    node = bip32.fromBase58(xpub, network);
  } catch {
    throw new InvalidAccountXpubError(family, 'not a base58 extended public key for this network');
  }
  if (!node.isNeutered()) {
    throw new InvalidAccountXpubError(family, 'it holds a private key; give the watch-only deriver an xpub only');
  }
  // Catches an xpub exported at the wrong level (master, coin, or address).
  if (node.depth !== 3 || node.index !== HARDENED) {
    throw new InvalidAccountXpubError(family, "expected the xpub of account 0' (depth 3)");
  }
  return node;
}

export class WatchOnlyDeriver {
  readonly #external: Readonly<Record<Secp256k1Family, BIP32Interface>>;
  readonly #bitcoin: BitcoinNetworkProfile;

  constructor(xpubs: AccountXpubs, options: DerivationOptions = {}) {
    this.#bitcoin = bitcoinNetwork(options.bitcoinNetwork);
    // EVM and Tron xpubs always carry mainnet "xpub" version bytes; only the
    // Bitcoin one follows the Bitcoin network (tpub on test networks), which
    // also stops a testnet xpub from producing mainnet addresses.
    const mainnet = bitcoin.networks.bitcoin;
    // Derive the external-chain node once: each address then costs one step.
    this.#external = {
      evm: parseAccountXpub('evm', xpubs.evm, mainnet).derive(EXTERNAL_CHAIN),
      tron: parseAccountXpub('tron', xpubs.tron, mainnet).derive(EXTERNAL_CHAIN),
      bitcoin: parseAccountXpub('bitcoin', xpubs.bitcoin, this.#bitcoin.network).derive(EXTERNAL_CHAIN),
    };
  }

  /** Whether this chain's addresses can be derived without the signer. */
  static canDerive(chain: Chain): chain is Secp256k1Chain {
    return chainFamily(chain) !== 'solana';
  }

  deriveAddress(chain: Secp256k1Chain, index: number): string {
    assertDerivationIndex(index);
    const family = chainFamily(chain);
    if (family === 'solana') {
      throw new Error('Solana addresses need hardened derivation: ask the signer');
    }
    const publicKey = this.#external[family].derive(index).publicKey;
    switch (family) {
      case 'evm':
        return evmAddressFromPublicKey(publicKey);
      case 'tron':
        return tronAddressFromPublicKey(publicKey);
      case 'bitcoin':
        return bitcoinAddressFromPublicKey(publicKey, this.#bitcoin.network);
    }
  }
}

// ---------------------------------------------------------------------------
// Signer side: the key holder built from the mnemonic
// ---------------------------------------------------------------------------

export interface EvmDepositKey {
  family: 'evm';
  chain: EvmChain;
  index: number;
  address: string;
  /** 32-byte secp256k1 private key (an ethers Wallet's). Non-enumerable: not shown by console.log nor JSON.stringify. */
  readonly privateKey: Uint8Array;
}
export interface TronDepositKey {
  family: 'tron';
  chain: 'tron';
  index: number;
  address: string;
  /** 32-byte secp256k1 private key. Non-enumerable. */
  readonly privateKey: Uint8Array;
}
export interface BitcoinDepositKey {
  family: 'bitcoin';
  chain: 'bitcoin';
  index: number;
  address: string;
  /** Signs PSBT inputs (psbt.signInput). Non-enumerable. */
  readonly keyPair: ECPairInterface;
}
export interface SolanaDepositKey {
  family: 'solana';
  chain: 'solana';
  index: number;
  address: string;
  /** 32-byte ed25519 seed (Keypair.fromSeed's). Non-enumerable. */
  readonly privateKey: Uint8Array;
}
export type DepositKey = EvmDepositKey | TronDepositKey | BitcoinDepositKey | SolanaDepositKey;
export type DepositKeyFor<C extends Chain> = C extends EvmChain
  ? EvmDepositKey
  : C extends 'tron'
    ? TronDepositKey
    : C extends 'bitcoin'
      ? BitcoinDepositKey
      : SolanaDepositKey;

/** Attaches the secret so that logging or serialising the key object leaves it out. */
function withHiddenSecret<T extends object>(visible: object, name: string, secret: unknown): T {
  Object.defineProperty(visible, name, { value: secret, enumerable: false, writable: false });
  return Object.freeze(visible) as T;
}

export class InvalidMnemonicError extends Error {
  constructor() {
    super('WALLET_MNEMONIC is not a valid BIP-39 English mnemonic'); // never the words themselves
    this.name = 'InvalidMnemonicError';
  }
}

/** Whitespace and case do not change which wallet a phrase means. */
function normalizeMnemonic(mnemonic: string): string {
  return mnemonic.normalize('NFKD').trim().toLowerCase().split(/\s+/).join(' ');
}

/** A fresh 24-word (256-bit) English mnemonic for a new deployment's wallet. */
export function generateMnemonic(): string {
  return generateBip39Mnemonic(english, 256);
}

/** Word list membership and checksum; accepts 12 to 24 words. */
export function isValidMnemonic(mnemonic: unknown): boolean {
  return typeof mnemonic === 'string' && validateMnemonic(normalizeMnemonic(mnemonic), english);
}

/** SLIP-0010 node: a private key and chain code (ed25519-hd-key's shape). */
interface Ed25519Node {
  key: Uint8Array;
  chainCode: Uint8Array;
}

/**
 * The platform's own EVM wallets, in a hardened account of their own
 * (m/44'/60'/1'), apart from the deposit addresses of m/44'/60'/0' (whose
 * xpub the API side holds): `fee` pays the gas of token sweeps
 * (m/44'/60'/1'/0/0), `treasury` receives platform fees unless another
 * address is configured (m/44'/60'/1'/0/1).
 */
export type ServiceWallet = 'fee' | 'treasury';
export const evmServiceWalletPaths: Readonly<Record<ServiceWallet, string>> = {
  fee: "m/44'/60'/1'/0/0",
  treasury: "m/44'/60'/1'/0/1",
};

export interface EvmServiceKey {
  role: ServiceWallet;
  address: string;
  /** 32-byte secp256k1 private key. Non-enumerable: not shown by console.log nor JSON.stringify. */
  readonly privateKey: Uint8Array;
}

/**
 * The platform's own Tron wallets, likewise in a hardened account of their
 * own (m/44'/195'/1'): `fee` pays the energy of USDT sweeps, `treasury`
 * receives platform fees unless CHAIN_TRON_TREASURY names another address.
 */
export const tronServiceWalletPaths: Readonly<Record<ServiceWallet, string>> = {
  fee: "m/44'/195'/1'/0/0",
  treasury: "m/44'/195'/1'/0/1",
};

export interface TronServiceKey {
  role: ServiceWallet;
  address: string;
  /** 32-byte secp256k1 private key. Non-enumerable. */
  readonly privateKey: Uint8Array;
}

/**
 * The platform's own Solana wallets. Every m/44'/501'/{index}'/0' is a
 * deposit address, so they sit beside account 0's, under a change level
 * deposits never use (all hardened, as ed25519 requires): `fee` pays the
 * fees and rent of every sweep, `treasury` receives platform fees and the
 * rent of closed deposit token accounts unless CHAIN_SOLANA_TREASURY names
 * another address.
 */
export const solanaServiceWalletPaths: Readonly<Record<ServiceWallet, string>> = {
  fee: "m/44'/501'/0'/1'/0'",
  treasury: "m/44'/501'/0'/1'/1'",
};

export interface SolanaServiceKey {
  role: ServiceWallet;
  address: string;
  /** 32-byte ed25519 seed. Non-enumerable. */
  readonly privateKey: Uint8Array;
}

/** A secp256k1 service wallet: `fee` at …/0/0 of its account, `treasury` at …/0/1. */
function serviceKey(
  account: BIP32Interface,
  role: ServiceWallet,
  addressOf: (publicKey: Uint8Array) => string,
): EvmServiceKey & TronServiceKey {
  const node = account.derive(EXTERNAL_CHAIN).derive(role === 'fee' ? 0 : 1);
  if (!node.privateKey) throw new Error('BIP-32 node has no private key'); // unreachable from a seed
  return withHiddenSecret({ role, address: addressOf(node.publicKey) }, 'privateKey', Uint8Array.from(node.privateKey));
}

export class DepositKeyring {
  /** Account nodes with private keys, m/44'/60'/0' etc. */
  readonly #accounts: Readonly<Record<Secp256k1Family, BIP32Interface>>;
  /** m/44'/60'/1': the platform's own EVM wallets (see ServiceWallet). */
  readonly #evmService: BIP32Interface;
  /** m/44'/195'/1': the platform's own Tron wallets (see tronServiceWalletPaths). */
  readonly #tronService: BIP32Interface;
  /** m/84'/{0|1}'/1': the platform's own Bitcoin addresses (the treasury, …/0/1). */
  readonly #bitcoinService: BIP32Interface;
  /** m/44'/501': the deepest Solana node shared by every deposit path. */
  readonly #solanaCoin: Ed25519Node;
  readonly #bitcoin: BitcoinNetworkProfile;
  /** HKDF of the seed: the key that seals dashboard users' TOTP keys in their events. */
  readonly #totpSealingKey: Uint8Array;

  private constructor(seed: Uint8Array, btc: BitcoinNetworkProfile) {
    this.#bitcoin = btc;
    const root = bip32.fromSeed(seed);
    this.#accounts = {
      evm: root.derivePath(accountPath('evm', btc)),
      tron: root.derivePath(accountPath('tron', btc)),
      // Version bytes follow the network so the xpub exports as tpub on test networks.
      bitcoin: bip32.fromSeed(seed, btc.network).derivePath(accountPath('bitcoin', btc)),
    };
    this.#solanaCoin = deriveEd25519Path("m/44'/501'", Buffer.from(seed).toString('hex'));
    this.#evmService = root.derivePath("m/44'/60'/1'");
    this.#tronService = root.derivePath("m/44'/195'/1'");
    this.#bitcoinService = bip32.fromSeed(seed, btc.network).derivePath(`m/84'/${btc.coinType}'/1'`);
    this.#totpSealingKey = new Uint8Array(hkdfSync('sha256', seed, new Uint8Array(0), 'dashboard totp keys v1', 32));
    // The seed is not kept: the nodes above are all later derivation needs.
  }

  /** The 32-byte key that seals dashboard users' TOTP keys (adapters/secrets.ts secretSealer). */
  totpSealingKey(): Uint8Array {
    return this.#totpSealingKey;
  }

  static fromMnemonic(mnemonic: string, options: DerivationOptions = {}): DepositKeyring {
    const normalized = normalizeMnemonic(mnemonic);
    if (!validateMnemonic(normalized, english)) throw new InvalidMnemonicError();
    return new DepositKeyring(mnemonicToSeedSync(normalized), bitcoinNetwork(options.bitcoinNetwork));
  }

  /** What the API process is given instead of the mnemonic. */
  accountXpubs(): AccountXpubs {
    return {
      evm: this.#accounts.evm.neutered().toBase58(),
      tron: this.#accounts.tron.neutered().toBase58(),
      bitcoin: this.#accounts.bitcoin.neutered().toBase58(),
    };
  }

  deriveSolanaAddress(index: number): string {
    return solanaAddressFromSeed(this.#solanaSeed(index));
  }

  /** The key behind a deposit address, for sweeping it. Keep it out of logs. */
  deriveDepositKey<C extends Chain>(chain: C, index: number): DepositKeyFor<C>;
  deriveDepositKey(chain: Chain, index: number): DepositKey {
    assertDerivationIndex(index);
    const family = chainFamily(chain);
    if (family === 'solana') {
      const seed = this.#solanaSeed(index);
      return withHiddenSecret({ family, chain, index, address: solanaAddressFromSeed(seed) }, 'privateKey', seed);
    }
    const node = this.#accounts[family].derive(EXTERNAL_CHAIN).derive(index);
    const privateKey = node.privateKey;
    if (!privateKey) throw new Error('BIP-32 node has no private key'); // unreachable from a seed
    switch (family) {
      case 'evm':
      case 'tron': {
        const address = (family === 'evm' ? evmAddressFromPublicKey : tronAddressFromPublicKey)(node.publicKey);
        return withHiddenSecret({ family, chain, index, address }, 'privateKey', Uint8Array.from(privateKey));
      }
      case 'bitcoin': {
        const network = this.#bitcoin.network;
        const keyPair = ecPair.fromPrivateKey(privateKey, { network, compressed: true });
        const address = bitcoinAddressFromPublicKey(keyPair.publicKey, network);
        return withHiddenSecret({ family, chain, index, address }, 'keyPair', keyPair);
      }
    }
  }

  /** The fee wallet or the default treasury (evmServiceWalletPaths); the same address on every EVM chain. */
  deriveEvmServiceKey(role: ServiceWallet): EvmServiceKey {
    return serviceKey(this.#evmService, role, evmAddressFromPublicKey);
  }

  /** The Tron fee wallet or default treasury (tronServiceWalletPaths). */
  deriveTronServiceKey(role: ServiceWallet): TronServiceKey {
    return serviceKey(this.#tronService, role, tronAddressFromPublicKey);
  }

  /** The default Bitcoin treasury, m/84'/{0|1}'/1'/0/1 (a P2WPKH address of this network). */
  deriveBitcoinTreasury(): string {
    return bitcoinAddressFromPublicKey(
      this.#bitcoinService.derive(EXTERNAL_CHAIN).derive(1).publicKey,
      this.#bitcoin.network,
    );
  }

  /** The Solana fee wallet or default treasury (solanaServiceWalletPaths). */
  deriveSolanaServiceKey(role: ServiceWallet): SolanaServiceKey {
    const change = CKDPriv(CKDPriv(this.#solanaCoin, HARDENED + 0), HARDENED + 1);
    const seed = CKDPriv(change, HARDENED + (role === 'fee' ? 0 : 1)).key;
    return withHiddenSecret({ role, address: solanaAddressFromSeed(seed) }, 'privateKey', seed);
  }

  #solanaSeed(index: number): Uint8Array {
    assertDerivationIndex(index);
    // m/44'/501'/index'/0': the path Phantom and Solflare use for account `index`.
    const account = CKDPriv(this.#solanaCoin, HARDENED + index);
    return CKDPriv(account, HARDENED + 0).key;
  }
}

// ---------------------------------------------------------------------------
// What the rest of the service calls
// ---------------------------------------------------------------------------

/**
 * The one capability the API needs from the signer: Solana addresses. The
 * signer may live in another process, so the answer may be asynchronous.
 */
export interface SolanaAddressSource {
  deriveSolanaAddress(index: number): string | Promise<string>;
}

export interface DepositAddressDeriver {
  deriveDepositAddress(chain: Chain, index: number): Promise<string>;
}

export class DepositAddresses implements DepositAddressDeriver {
  readonly #watchOnly: WatchOnlyDeriver;
  readonly #signer: SolanaAddressSource;

  constructor(watchOnly: WatchOnlyDeriver, signer: SolanaAddressSource) {
    this.#watchOnly = watchOnly;
    this.#signer = signer;
  }

  async deriveDepositAddress(chain: Chain, index: number): Promise<string> {
    const checked = parseChain(chain);
    assertDerivationIndex(index);
    if (WatchOnlyDeriver.canDerive(checked)) return this.#watchOnly.deriveAddress(checked, index);
    return this.#signer.deriveSolanaAddress(index);
  }
}

/**
 * Single-process wiring (development, demos): the API path still derives from
 * the xpubs, exactly as it does when the signer runs elsewhere.
 */
export function depositAddressesFromKeyring(
  keyring: DepositKeyring,
  options: DerivationOptions = {},
): DepositAddresses {
  return new DepositAddresses(new WatchOnlyDeriver(keyring.accountXpubs(), options), keyring);
}

// ---------------------------------------------------------------------------
// Address validation (merchants' settlement wallets)
// ---------------------------------------------------------------------------

// Longer than any address format here; spares decoders pathological input.
const MAX_ADDRESS_LENGTH = 100;

const addressValidators: Readonly<Record<ChainFamily, (address: string, btc: BitcoinNetworkProfile) => boolean>> = {
  // ethers also accepts ICAP ("XE…") and a missing 0x: a settlement address
  // must be the plain hex form. All-lowercase has no checksum to check;
  // mixed case must carry a correct EIP-55 checksum.
  evm: (address) => /^0x[0-9a-fA-F]{40}$/.test(address) && isEvmAddress(address),
  // Base58check, 21 bytes starting 0x41: T-addresses only, not the 41… hex form.
  tron: (address) => address.startsWith('T') && isTronBase58Address(address),
  // Any standard output type on this network (p2pkh, p2sh, segwit v0, taproot).
  bitcoin: (address, btc) => {
    bitcoin.address.toOutputScript(address, btc.network);
    return true;
  },
  // Any 32-byte key, on the curve or not: program-derived addresses (vaults,
  // multisigs) are off the curve and still receive funds. The round trip
  // rejects non-canonical encodings.
  solana: (address) => {
    const key = bs58.decode(address);
    return key.length === 32 && bs58.encode(key) === address;
  },
};

export function isValidAddress(chain: Chain, address: unknown, options: DerivationOptions = {}): boolean {
  if (typeof address !== 'string' || address.length === 0 || address.length > MAX_ADDRESS_LENGTH) return false;
  const family = chainFamily(chain);
  const btc = bitcoinNetwork(options.bitcoinNetwork);
  try {
    return addressValidators[family](address, btc);
  } catch {
    // Decoders signal a bad address by throwing (checksum, alphabet, length).
    return false;
  }
}
