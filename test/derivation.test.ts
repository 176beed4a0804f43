import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, createPrivateKey, createPublicKey, pbkdf2Sync } from 'node:crypto';
import { inspect } from 'node:util';
import { encodeBase58, HDNodeWallet, hexlify, ripemd160, sha256, getBytes, verifyMessage, Wallet } from 'ethers';
import { Keypair } from '@solana/web3.js';
import { generateAccountWithMnemonic, getAddressFromPriKey, getBase58CheckAddress } from 'tronweb/utils';
import * as bitcoin from 'bitcoinjs-lib';
import {
  CHAINS,
  DepositAddresses,
  DepositKeyring,
  InvalidAccountXpubError,
  InvalidDerivationIndexError,
  InvalidMnemonicError,
  MAX_DERIVATION_INDEX,
  UnknownChainError,
  WatchOnlyDeriver,
  chainFamily,
  depositAddressesFromKeyring,
  depositDerivationPath,
  generateMnemonic,
  isValidAddress,
  isValidMnemonic,
  parseChain,
  type Chain,
  type Secp256k1Chain,
} from '../adapters/keys/derivation.ts';
import { QrCodeRenderer, qrCodeDataUri } from '../adapters/keys/qr.ts';
import { qrText } from './support/payment-uri.ts';

const MNEMONIC = 'abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about';

// Published vectors for MNEMONIC (BIP-44/84 test wallets; also in /work/shared/dependencies.md).
const VECTORS = {
  evm: ['0x9858EfFD232B4033E47d90003D41EC34EcaEda94', '0x6Fac4D18c912343BF86fa7049364Dd4E424Ab9C0'],
  bitcoin: ['bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu', 'bc1qnjg0jd8228aq7egyzacy8cys3knf9xvrerkf9g'],
  solana: ['HAgk14JpMQLgt6rVgv7cBQFJWFto5Dqxi472uT3DKpqk'],
  tron: ['TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH'],
} as const;

const SECP_CHAINS: readonly Secp256k1Chain[] = ['ethereum', 'bsc', 'polygon', 'tron', 'bitcoin'];

const keyring = DepositKeyring.fromMnemonic(MNEMONIC);
const addresses = depositAddressesFromKeyring(keyring);

// ---------------------------------------------------------------------------
// Independent derivations: no bip32, tiny-secp256k1, bitcoinjs or
// ed25519-hd-key, so a shared bug in the production stack cannot hide.
// ---------------------------------------------------------------------------

/** ethers' own BIP-32 (noble secp256k1). */
function ethersNode(path: string): HDNodeWallet {
  return HDNodeWallet.fromPhrase(MNEMONIC, undefined, path);
}

const BECH32_CHARSET = 'qpzry9x8gf2tvdw0s3jn54khce6mua7l';
const BECH32_GENERATOR = [0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3];

function bech32Polymod(values: number[]): number {
  let checksum = 1;
  for (const value of values) {
    const top = checksum >>> 25;
    checksum = ((checksum & 0x1ffffff) << 5) ^ value;
    BECH32_GENERATOR.forEach((g, i) => {
      if ((top >>> i) & 1) checksum ^= g;
    });
  }
  return checksum;
}

/** BIP-173 segwit v0 address, written from the spec. */
function segwitV0Address(hrp: string, program: Uint8Array): string {
  const words: number[] = [0];
  let accumulator = 0;
  let bits = 0;
  for (const byte of program) {
    accumulator = (accumulator << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      words.push((accumulator >>> bits) & 31);
    }
  }
  if (bits > 0) words.push((accumulator << (5 - bits)) & 31);
  const hrpCodes = [...hrp].map((c) => c.charCodeAt(0));
  const expanded = [...hrpCodes.map((c) => c >> 5), 0, ...hrpCodes.map((c) => c & 31)];
  const mod = bech32Polymod([...expanded, ...words, 0, 0, 0, 0, 0, 0]) ^ 1;
  const checksum = [0, 1, 2, 3, 4, 5].map((i) => (mod >>> (5 * (5 - i))) & 31);
  return `${hrp}1${[...words, ...checksum].map((w) => BECH32_CHARSET[w]).join('')}`;
}

function independentBitcoinAddress(index: number): string {
  const publicKey = getBytes(ethersNode(`m/84'/0'/0'/0/${index}`).publicKey); // compressed
  return segwitV0Address('bc', getBytes(ripemd160(sha256(publicKey))));
}

/** ethers derivation + keccak address, then Tron's 0x41 prefix and base58check by hand. */
function independentTronAddress(index: number): string {
  const payload = getBytes('0x41' + ethersNode(`m/44'/195'/0'/0/${index}`).address.slice(2));
  const checksum = getBytes(sha256(sha256(payload))).subarray(0, 4);
  return encodeBase58(new Uint8Array([...payload, ...checksum]));
}

/** SLIP-0010 ed25519 with node:crypto only (HMAC-SHA512, PBKDF2, Ed25519). */
function independentSolanaKey(index: number): { seed: Buffer; address: string } {
  const bip39Seed = pbkdf2Sync(MNEMONIC, 'mnemonic', 2048, 64, 'sha512');
  let digest = createHmac('sha512', 'ed25519 seed').update(bip39Seed).digest();
  for (const segment of [44, 501, index, 0]) {
    const childIndex = Buffer.alloc(4);
    childIndex.writeUInt32BE((0x8000_0000 + segment) >>> 0);
    const data = Buffer.concat([Buffer.from([0]), digest.subarray(0, 32), childIndex]);
    digest = createHmac('sha512', digest.subarray(32)).update(data).digest();
  }
  const seed = digest.subarray(0, 32);
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]);
  const spki = createPublicKey(createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' })).export({
    format: 'der',
    type: 'spki',
  });
  return { seed, address: encodeBase58(spki.subarray(-32)) };
}

// ---------------------------------------------------------------------------

describe('published derivation vectors', () => {
  it("EVM m/44'/60'/0'/0/i", async () => {
    for (const [index, expected] of VECTORS.evm.entries()) {
      assert.equal(await addresses.deriveDepositAddress('ethereum', index), expected);
      assert.equal(ethersNode(`m/44'/60'/0'/0/${index}`).address, expected, 'ethers HDNodeWallet');
    }
  });

  it("Bitcoin BIP-84 m/84'/0'/0'/0/i", async () => {
    for (const [index, expected] of VECTORS.bitcoin.entries()) {
      assert.equal(await addresses.deriveDepositAddress('bitcoin', index), expected);
      assert.equal(independentBitcoinAddress(index), expected, 'ethers BIP-32 + hand-written bech32');
    }
  });

  it("Solana m/44'/501'/i'/0'", async () => {
    assert.equal(await addresses.deriveDepositAddress('solana', 0), VECTORS.solana[0]);
    assert.equal(independentSolanaKey(0).address, VECTORS.solana[0], 'node:crypto SLIP-0010');
    // No published vector for index 1: the two implementations must agree.
    for (const index of [1, 2, 7, 1000]) {
      assert.equal(await addresses.deriveDepositAddress('solana', index), independentSolanaKey(index).address);
    }
  });

  it("Tron m/44'/195'/0'/0/i", async () => {
    const [expected] = VECTORS.tron;
    assert.equal(await addresses.deriveDepositAddress('tron', 0), expected);
    assert.equal(independentTronAddress(0), expected, 'ethers BIP-32 + hand-written base58check');
    assert.equal(
      generateAccountWithMnemonic(MNEMONIC, "m/44'/195'/0'/0/0").address,
      expected,
      "tronweb's own mnemonic account",
    );
    for (const index of [1, 2, 7, 1000]) {
      assert.equal(await addresses.deriveDepositAddress('tron', index), independentTronAddress(index));
    }
  });

  it('EVM and Bitcoin beyond the published indexes agree with ethers', async () => {
    for (const index of [2, 7, 1000, MAX_DERIVATION_INDEX]) {
      assert.equal(
        await addresses.deriveDepositAddress('ethereum', index),
        ethersNode(`m/44'/60'/0'/0/${index}`).address,
      );
      assert.equal(await addresses.deriveDepositAddress('bitcoin', index), independentBitcoinAddress(index));
    }
  });

  it('names the paths it derives', () => {
    assert.equal(depositDerivationPath('polygon', 5), "m/44'/60'/0'/0/5");
    assert.equal(depositDerivationPath('tron', 5), "m/44'/195'/0'/0/5");
    assert.equal(depositDerivationPath('bitcoin', 5), "m/84'/0'/0'/0/5");
    assert.equal(depositDerivationPath('bitcoin', 5, { bitcoinNetwork: 'testnet' }), "m/84'/1'/0'/0/5");
    assert.equal(depositDerivationPath('solana', 5), "m/44'/501'/5'/0'");
  });
});

describe('watch-only derivation', () => {
  const watchOnly = new WatchOnlyDeriver(keyring.accountXpubs());

  it('equals the signer for indexes 0..20 on every secp256k1 chain', () => {
    for (const chain of SECP_CHAINS) {
      for (let index = 0; index <= 20; index++) {
        assert.equal(
          watchOnly.deriveAddress(chain, index),
          keyring.deriveDepositKey(chain, index).address,
          `${chain} #${index}`,
        );
      }
    }
  });

  it('also on bitcoin testnet and regtest (coin type 1, tpub)', () => {
    for (const [bitcoinNetwork, prefix] of [
      ['testnet', 'tb1q'],
      ['regtest', 'bcrt1q'],
    ] as const) {
      const signer = DepositKeyring.fromMnemonic(MNEMONIC, { bitcoinNetwork });
      const xpubs = signer.accountXpubs();
      assert.ok(xpubs.bitcoin.startsWith('tpub'));
      const deriver = new WatchOnlyDeriver(xpubs, { bitcoinNetwork });
      for (let index = 0; index <= 20; index++) {
        const address = deriver.deriveAddress('bitcoin', index);
        assert.ok(address.startsWith(prefix), address);
        assert.equal(address, signer.deriveDepositKey('bitcoin', index).address);
        assert.ok(isValidAddress('bitcoin', address, { bitcoinNetwork }));
        assert.ok(!isValidAddress('bitcoin', address));
      }
      // A tpub cannot be used to derive mainnet addresses, nor an xpub testnet ones.
      assert.throws(() => new WatchOnlyDeriver(xpubs), InvalidAccountXpubError);
      assert.throws(() => new WatchOnlyDeriver(keyring.accountXpubs(), { bitcoinNetwork }), InvalidAccountXpubError);
    }
  });

  it('gives bsc and polygon the same address as ethereum for the same index', async () => {
    // Intended: one derivation index belongs to one invoice whatever its chain,
    // so a shared address never serves two invoices.
    for (const index of [0, 1, 42]) {
      const ethereum = await addresses.deriveDepositAddress('ethereum', index);
      assert.equal(await addresses.deriveDepositAddress('bsc', index), ethereum);
      assert.equal(await addresses.deriveDepositAddress('polygon', index), ethereum);
    }
  });

  it('refuses private keys and keys at the wrong depth, without echoing them', () => {
    const xprv = HDNodeWallet.fromPhrase(MNEMONIC, undefined, "m/44'/60'/0'").extendedKey;
    assert.ok(xprv.startsWith('xprv'));
    const xpubs = keyring.accountXpubs();
    assert.throws(
      () => new WatchOnlyDeriver({ ...xpubs, evm: xprv }),
      (error: unknown) =>
        error instanceof InvalidAccountXpubError && !error.message.includes(xprv) && /private key/.test(error.message),
    );
    const coinLevel = HDNodeWallet.fromPhrase(MNEMONIC, undefined, "m/44'/60'").neuter().extendedKey;
    assert.throws(() => new WatchOnlyDeriver({ ...xpubs, tron: coinLevel }), InvalidAccountXpubError);
    assert.throws(() => new WatchOnlyDeriver({ ...xpubs, bitcoin: 'not an xpub' }), InvalidAccountXpubError);
    // An account xpub made by another library is accepted and agrees.
    const ethersXpub = HDNodeWallet.fromPhrase(MNEMONIC, undefined, "m/44'/60'/0'").neuter().extendedKey;
    assert.equal(new WatchOnlyDeriver({ ...xpubs, evm: ethersXpub }).deriveAddress('ethereum', 1), VECTORS.evm[1]);
  });

  it('does not derive Solana', () => {
    const watchOnly = new WatchOnlyDeriver(keyring.accountXpubs());
    assert.equal(WatchOnlyDeriver.canDerive('solana'), false);
    assert.throws(() => watchOnly.deriveAddress('solana' as Secp256k1Chain, 0));
  });

  it('asks the signer only for Solana', async () => {
    const asked: number[] = [];
    const deriver = new DepositAddresses(new WatchOnlyDeriver(keyring.accountXpubs()), {
      async deriveSolanaAddress(index) {
        asked.push(index);
        return keyring.deriveSolanaAddress(index);
      },
    });
    for (const chain of CHAINS) await deriver.deriveDepositAddress(chain, 3);
    assert.deepEqual(asked, [3]);
  });
});

describe('chain names and indexes', () => {
  it('accepts the six chains', () => {
    for (const chain of CHAINS) assert.equal(parseChain(chain), chain);
    assert.equal(chainFamily('bsc'), 'evm');
  });

  it('rejects anything else', async () => {
    for (const bad of ['litecoin', 'Ethereum', '', 'toString', '__proto__', 'constructor', 1, null, undefined]) {
      assert.throws(() => parseChain(bad), UnknownChainError);
      await assert.rejects(addresses.deriveDepositAddress(bad as Chain, 0), UnknownChainError);
    }
  });

  it('accepts indexes 0 to 2^31 - 1 only', async () => {
    assert.equal(MAX_DERIVATION_INDEX, 2 ** 31 - 1);
    for (const chain of CHAINS) {
      await addresses.deriveDepositAddress(chain, MAX_DERIVATION_INDEX);
      for (const bad of [-1, 2 ** 31, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '1' as unknown as number]) {
        await assert.rejects(
          addresses.deriveDepositAddress(chain, bad),
          InvalidDerivationIndexError,
          `${chain} ${bad}`,
        );
        assert.throws(() => keyring.deriveDepositKey(chain, bad), InvalidDerivationIndexError);
      }
    }
    assert.throws(() => keyring.deriveSolanaAddress(-1), InvalidDerivationIndexError);
  });
});

describe('signer keys', () => {
  it('EVM: the private key is the deposit address\'s and signs for it', async () => {
    for (const chain of ['ethereum', 'bsc', 'polygon'] as const) {
      const key = keyring.deriveDepositKey(chain, 1);
      assert.equal(key.address, VECTORS.evm[1]);
      const wallet = new Wallet(hexlify(key.privateKey));
      assert.equal(wallet.address, VECTORS.evm[1]);
      assert.equal(wallet.privateKey, ethersNode("m/44'/60'/0'/0/1").privateKey);
      const signature = await wallet.signMessage('sweep');
      assert.equal(verifyMessage('sweep', signature), VECTORS.evm[1]);
    }
  });

  it('Tron: the private key bytes give the deposit address', () => {
    for (const index of [0, 1, 5]) {
      const key = keyring.deriveDepositKey('tron', index);
      assert.equal(key.privateKey.length, 32);
      assert.equal(getBase58CheckAddress(getAddressFromPriKey(key.privateKey)), key.address);
      assert.equal(key.address, independentTronAddress(index));
    }
  });

  it('Bitcoin: the key pair signs for the deposit address', () => {
    for (const [index, expected] of VECTORS.bitcoin.entries()) {
      const key = keyring.deriveDepositKey('bitcoin', index);
      assert.equal(key.address, expected);
      const { address } = bitcoin.payments.p2wpkh({ pubkey: key.keyPair.publicKey });
      assert.equal(address, expected);
      assert.equal(
        Buffer.from(key.keyPair.privateKey ?? []).toString('hex'),
        ethersNode(`m/84'/0'/0'/0/${index}`).privateKey.slice(2),
      );
      const hash = getBytes(sha256(new TextEncoder().encode('sweep')));
      assert.ok(key.keyPair.verify(hash, key.keyPair.sign(hash)));
    }
  });

  it('Solana: the seed\'s keypair is the deposit address', () => {
    for (const index of [0, 1, 9]) {
      const key = keyring.deriveDepositKey('solana', index);
      assert.equal(Keypair.fromSeed(key.privateKey).publicKey.toBase58(), key.address);
      assert.equal(key.address, keyring.deriveSolanaAddress(index));
      assert.deepEqual(Buffer.from(key.privateKey), independentSolanaKey(index).seed);
    }
  });

  it('keeps secrets out of logs and JSON', () => {
    const evm = keyring.deriveDepositKey('ethereum', 0);
    const tron = keyring.deriveDepositKey('tron', 0);
    const btc = keyring.deriveDepositKey('bitcoin', 0);
    const sol = keyring.deriveDepositKey('solana', 0);
    const secrets = [
      Buffer.from(evm.privateKey).toString('hex'),
      Buffer.from(tron.privateKey).toString('hex'),
      Buffer.from(btc.keyPair.privateKey ?? []).toString('hex'),
      Buffer.from(sol.privateKey).toString('hex'),
    ];
    for (const key of [evm, tron, btc, sol]) {
      const shown = `${inspect(key, { depth: 10 })} ${JSON.stringify(key)} ${String(key)}`;
      assert.ok(shown.includes(key.address));
      for (const secret of secrets) assert.ok(!shown.includes(secret));
      // Byte arrays print as numbers in inspect: look for the first bytes too.
      assert.ok(!/Uint8Array|Buffer|secretKey|privateKey/.test(inspect(key, { depth: 10 })));
    }
    const keyringShown = `${inspect(keyring, { depth: 10 })} ${JSON.stringify(keyring)}`;
    assert.ok(!keyringShown.includes('xprv') && !keyringShown.includes('abandon'));
  });
});

describe('address validation', () => {
  const samples: Record<'evm' | 'tron' | 'bitcoin' | 'solana', string[]> = {
    evm: [...VECTORS.evm, VECTORS.evm[0].toLowerCase()],
    tron: [...VECTORS.tron, 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t' /* USDT contract */],
    bitcoin: [
      ...VECTORS.bitcoin,
      '1BvBMSEYstWetqTFn5Au4m4GFg7xJaNVN2', // p2pkh
      '3J98t1WpEZ73CNmQviecrnyiWrnqRhWNLy', // p2sh
      'bc1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3qccfmv3', // p2wsh (BIP-173)
      'bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqzk5jj0', // p2tr (BIP-350)
      VECTORS.bitcoin[0].toUpperCase(),
    ],
    solana: [
      ...VECTORS.solana,
      '11111111111111111111111111111111', // system program
      'TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA', // a program id
    ],
  };
  const chainOf = { evm: 'ethereum', tron: 'tron', bitcoin: 'bitcoin', solana: 'solana' } as const;

  it('accepts the vectors and well-formed addresses', () => {
    for (const [family, list] of Object.entries(samples)) {
      for (const address of list) {
        assert.ok(isValidAddress(chainOf[family as keyof typeof chainOf], address), `${family} ${address}`);
      }
    }
    assert.ok(isValidAddress('bsc', VECTORS.evm[0]) && isValidAddress('polygon', VECTORS.evm[0]));
  });

  it("rejects other chains' addresses", () => {
    for (const [family, list] of Object.entries(samples)) {
      for (const [otherFamily, chain] of Object.entries(chainOf)) {
        if (otherFamily === family) continue;
        for (const address of list) assert.ok(!isValidAddress(chain, address), `${address} as ${chain}`);
      }
    }
    // Tron's hex form and a testnet address are not what a settlement field takes.
    assert.ok(!isValidAddress('tron', '41' + VECTORS.evm[0].slice(2)));
    assert.ok(!isValidAddress('bitcoin', 'tb1qw508d6qejxtdg4y5r3zarvary0c5xw7kxpjzsx'));
  });

  it('rejects broken checksums', () => {
    // EIP-55: flip the case of one letter.
    const evm = VECTORS.evm[0];
    const letter = evm.search(/[a-fA-F]/u);
    const flipped = evm.slice(0, letter) + swapCase(evm.charAt(letter)) + evm.slice(letter + 1);
    assert.ok(!isValidAddress('ethereum', flipped));
    // base58check and bech32: change one character.
    assert.ok(!isValidAddress('tron', changeChar(VECTORS.tron[0], 10)));
    assert.ok(!isValidAddress('bitcoin', changeChar(VECTORS.bitcoin[0], 20)));
    assert.ok(!isValidAddress('bitcoin', changeChar('1BvBMSEYstWetqTFn5Au4m4GFg7xJaNVN2', 20)));
    // Mixed case is not allowed in bech32.
    assert.ok(!isValidAddress('bitcoin', 'bc1Q' + VECTORS.bitcoin[0].slice(4)));
  });

  it('rejects wrong lengths and malformed input', () => {
    for (const [family, list] of Object.entries(samples)) {
      const chain = chainOf[family as keyof typeof chainOf];
      for (const address of list.slice(0, 1)) {
        // Solana has no checksum: one character fewer is usually another
        // valid 32-byte key, so only byte lengths are checked for it below.
        if (chain !== 'solana') assert.ok(!isValidAddress(chain, address.slice(0, -1)), `${chain} short`);
        assert.ok(!isValidAddress(chain, address + address.at(-1)), `${chain} long`);
        assert.ok(!isValidAddress(chain, ` ${address}`), `${chain} padded`);
      }
      for (const junk of ['', 'x'.repeat(500), 42, null, undefined, {}]) assert.ok(!isValidAddress(chain, junk));
    }
    // ethers alone would accept these forms.
    assert.ok(!isValidAddress('ethereum', VECTORS.evm[0].slice(2)));
    assert.ok(!isValidAddress('ethereum', 'XE7338O073KYGTWWZN0F2WZ0R8PX5ZPPZS'));
    // Solana has no checksum: a 31- or 33-byte key is the error it can catch.
    assert.ok(!isValidAddress('solana', encodeBase58(new Uint8Array(31).fill(7))));
    assert.ok(!isValidAddress('solana', encodeBase58(new Uint8Array(33).fill(7))));
    assert.throws(() => isValidAddress('dogecoin' as Chain, 'D'), UnknownChainError);
  });
});

describe('mnemonics', () => {
  it('generates fresh 24-word mnemonics that validate', () => {
    const first = generateMnemonic();
    assert.equal(first.split(' ').length, 24);
    assert.ok(isValidMnemonic(first));
    assert.notEqual(generateMnemonic(), first);
    // Usable as a wallet: the API path and the signer agree.
    const fresh = DepositKeyring.fromMnemonic(first);
    assert.equal(
      new WatchOnlyDeriver(fresh.accountXpubs()).deriveAddress('tron', 3),
      fresh.deriveDepositKey('tron', 3).address,
    );
  });

  it('validates checksum and words, not layout', () => {
    assert.ok(isValidMnemonic(MNEMONIC));
    assert.ok(isValidMnemonic(`  ${MNEMONIC.toUpperCase().replaceAll(' ', ' \n\t')}  `));
    assert.ok(!isValidMnemonic(MNEMONIC.replace('about', 'abandon')), 'bad checksum');
    assert.ok(!isValidMnemonic(MNEMONIC.replace('about', 'aboutt')), 'unknown word');
    assert.ok(!isValidMnemonic('abandon abandon about'), 'too short');
    assert.ok(!isValidMnemonic(42));
    const messy = DepositKeyring.fromMnemonic(`\n${MNEMONIC.toUpperCase().replaceAll(' ', '  ')} `);
    assert.equal(messy.deriveSolanaAddress(0), VECTORS.solana[0]);
  });

  it('never puts the words in the error', () => {
    const bad = MNEMONIC.replace('about', 'zebra');
    assert.throws(
      () => DepositKeyring.fromMnemonic(bad),
      (error: unknown) =>
        error instanceof InvalidMnemonicError && !error.message.includes('abandon') && !error.message.includes('zebra'),
    );
  });
});

describe('QR codes', () => {
  it('renders a PNG data URI, and the same one again from cache', () => {
    const uri = qrCodeDataUri(VECTORS.bitcoin[0]);
    const prefix = 'data:image/png;base64,';
    assert.ok(uri.startsWith(prefix));
    const png = Buffer.from(uri.slice(prefix.length), 'base64');
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    assert.equal(qrText(uri), VECTORS.bitcoin[0], 'a QR reader gets the text back');
    assert.equal(qrCodeDataUri(VECTORS.bitcoin[0]), uri);
    assert.notEqual(qrCodeDataUri(VECTORS.bitcoin[1]), uri);
  });

  it('stays bounded, keeps the recently used and forgets failures', () => {
    const renderer = new QrCodeRenderer(3);
    const texts = ['a', 'b', 'c', 'd'].map((s) => `bitcoin:${VECTORS.bitcoin[0]}?label=${s}`);
    const first = renderer.dataUri(texts[0]!);
    renderer.dataUri(texts[1]!);
    renderer.dataUri(texts[2]!);
    assert.equal(renderer.dataUri(texts[0]!), first); // now most recently used
    renderer.dataUri(texts[3]!); // evicts texts[1]
    assert.equal(renderer.cachedCount, 3);
    assert.throws(() => renderer.dataUri('x'.repeat(8000)));
    assert.equal(renderer.cachedCount, 3);
  });
});

function swapCase(c: string): string {
  return c === c.toLowerCase() ? c.toUpperCase() : c.toLowerCase();
}

function changeChar(address: string, position: number): string {
  const c = address.charAt(position);
  const replacement = c === 'q' ? 'p' : c === '2' ? '3' : c === 'a' ? 'b' : 'q';
  return address.slice(0, position) + replacement + address.slice(position + 1);
}
