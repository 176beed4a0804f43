// Reading payment URIs back with parsers that are not ours: `bip21` for
// Bitcoin, `eth-url-parser` for EIP-681, `@solana/pay`'s parseURL for Solana
// Pay; Tron's `tron:` form has no specification nor parser, so the WHATWG URL
// parser reads it. And what a camera reads from a QR code (jsqr).
import assert from 'node:assert/strict';
import * as bip21 from 'bip21';
import { parseURL as parseSolanaPay, type TransferRequestURL } from '@solana/pay';
import { parse as parseEip681 } from 'eth-url-parser';
import jsQRModule from 'jsqr';
import { PNG } from 'pngjs';
import { baseUnits } from './evm-flow.ts';

export interface ReadPaymentRequest {
  /** Where the money goes: the deposit address. */
  address: string;
  /** Base units. */
  amount: bigint;
  /** The token contract or mint; null for the native coin. */
  contract: string | null;
  /** EIP-681's chain id. */
  chainId?: string;
  /** Solana Pay's references and label. */
  references?: string[];
  label?: string;
}

const EVM_CHAINS = new Set(['ethereum', 'bsc', 'polygon']);

export function readPaymentUri(uri: string, chain: string, decimals: number): ReadPaymentRequest {
  if (chain === 'bitcoin') {
    const decoded = bip21.decode(uri);
    // bip21 reads the amount as a JavaScript number: the URI's own text must be exact.
    const text = new URL(uri).searchParams.get('amount')!;
    assert.equal(decoded.options.amount, Number(text));
    return { address: decoded.address, amount: baseUnits(text, decimals), contract: null };
  }
  if (EVM_CHAINS.has(chain)) {
    const read = parseEip681(uri);
    assert.equal(read.scheme, 'ethereum');
    const chainId = read.chain_id;
    if (read.function_name === undefined) {
      return { address: read.target_address, amount: BigInt(read.parameters!.value!), contract: null, chainId };
    }
    assert.equal(read.function_name, 'transfer');
    return {
      address: read.parameters!.address!,
      amount: BigInt(read.parameters!.uint256!),
      contract: read.target_address,
      chainId,
    };
  }
  if (chain === 'solana') {
    const read = parseSolanaPay(uri) as TransferRequestURL;
    return {
      address: read.recipient.toBase58(),
      amount: baseUnits(read.amount!.toFixed(), decimals),
      contract: read.splToken?.toBase58() ?? null,
      references: read.reference?.map((key) => key.toBase58()) ?? [],
      ...(read.label !== undefined && { label: read.label }),
    };
  }
  assert.equal(chain, 'tron');
  const url = new URL(uri);
  assert.equal(url.protocol, 'tron:');
  return {
    address: url.pathname,
    amount: baseUnits(url.searchParams.get('amount')!, decimals),
    contract: url.searchParams.get('token'),
  };
}

// jsqr is CommonJS whose module.exports carries itself as `default` too;
// under NodeNext the types see only the latter.
const jsQR = jsQRModule.default;

/** What a camera reads from a `data:image/png;base64,` QR code. */
export function qrText(dataUri: string): string | undefined {
  const base64 = /^data:image\/png;base64,(.*)$/.exec(dataUri)?.[1];
  assert.ok(base64, 'the QR code is a PNG data URI');
  const png = PNG.sync.read(Buffer.from(base64, 'base64'));
  return jsQR(new Uint8ClampedArray(png.data), png.width, png.height)?.data;
}
