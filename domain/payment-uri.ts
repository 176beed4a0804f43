// Payment requests a wallet understands: the URI a payment's QR code holds,
// with the address, the token and the exact amount, per chain.
//   - bitcoin: BIP21, `bitcoin:<address>?amount=<BTC>`.
//   - ethereum, bsc, polygon: EIP-681. The native coin as
//     `ethereum:<address>@<chain id>?value=<wei>`; a token as a call of its
//     contract, `ethereum:<contract>@<chain id>/transfer?address=<recipient>&uint256=<base units>`.
//     Amounts are written as plain integers (EIP-681 allows scientific
//     notation; wallets read integers most reliably).
//   - solana: a Solana Pay transfer request,
//     `solana:<address>?amount=<decimal>[&spl-token=<mint>]&reference=<key>&label=<merchant>`.
//     The reference is a public key derived from the payment's id: the wallet
//     adds it to the transfer, so the transaction can be found by it even
//     though our own detection reads the deposit address.
//   - tron: no standard exists; `tron:<address>?amount=<decimal>[&token=<contract>]`
//     is the form Trust Wallet reads (and TronLink opens the address of), the
//     closest to BIP21 that Tron wallets share. A wallet that reads none of it
//     still finds the address, the first thing after the scheme.
import { formatUnits } from './money.ts';

export interface PaymentRequest {
  chain: string;
  /** The deposit address. */
  address: string;
  /** The token's contract or mint; null for the chain's native coin. */
  contract: string | null;
  /** Base units of the token. */
  amount: bigint;
  decimals: number;
  /** EVM chains: the chain id the wallet must be on. */
  chainId?: bigint;
  /** Solana Pay: the base58 reference key, and who asks to be paid. */
  reference?: string;
  label?: string;
}

/** A decimal without trailing zeros, as payment URIs write amounts ("0.5", not "0.50000000"). */
function decimal(amount: bigint, decimals: number): string {
  const text = formatUnits(amount, decimals, decimals);
  return text.includes('.') ? text.replace(/\.?0+$/, '') : text;
}

export function paymentUri(request: PaymentRequest): string {
  const { chain, address, contract, amount, decimals } = request;
  switch (chain) {
    case 'bitcoin':
      return `bitcoin:${address}?amount=${decimal(amount, decimals)}`;
    case 'ethereum':
    case 'bsc':
    case 'polygon': {
      const at = request.chainId !== undefined ? `@${request.chainId}` : '';
      if (contract === null) return `ethereum:${address}${at}?value=${amount}`;
      return `ethereum:${contract}${at}/transfer?address=${address}&uint256=${amount}`;
    }
    case 'solana': {
      const token = contract === null ? '' : `&spl-token=${contract}`;
      const reference = request.reference === undefined ? '' : `&reference=${request.reference}`;
      const label = request.label === undefined ? '' : `&label=${encodeURIComponent(request.label)}`;
      return `solana:${address}?amount=${decimal(amount, decimals)}${token}${reference}${label}`;
    }
    case 'tron': {
      const token = contract === null ? '' : `&token=${contract}`;
      return `tron:${address}?amount=${decimal(amount, decimals)}${token}`;
    }
    default:
      return address;
  }
}
