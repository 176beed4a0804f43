// The payment URI of a deposit address, with this deployment's token
// contracts and chain ids (a test network's, where configured).
import { createHash } from 'node:crypto';
import bs58 from 'bs58';
import { qrCodeDataUri } from '../adapters/keys/qr.ts';
import { findToken, mainnetChainIds, type ChainName } from '../domain/catalogue.ts';
import { paymentUri } from '../domain/payment-uri.ts';
import type { Config } from './config.ts';

export interface RequestedPayment {
  invoiceId: string;
  /** Who asks to be paid, where the wallet shows it (Solana Pay's label). */
  merchantName?: string;
  chain: string;
  token: string;
  address: string;
  /** Base units. */
  amount: bigint;
  decimals: number;
}

export function paymentRequests(config: Pick<Config, 'evm' | 'tron'>) {
  const contractOf = (chain: string, token: string): string | null => {
    const configured =
      config.evm[chain as ChainName]?.tokens?.find((t) => t.symbol === token)?.contract ??
      (chain === 'tron' ? config.tron?.tokens?.find((t) => t.symbol === token)?.contract : undefined);
    return configured ?? findToken(chain as ChainName, token)?.contractAddress ?? null;
  };
  const uriOf = (p: RequestedPayment): string => {
    const chainId = config.evm[p.chain as ChainName]?.chainId ?? mainnetChainIds[p.chain as ChainName];
    return paymentUri({
      chain: p.chain,
      address: p.address,
      contract: contractOf(p.chain, p.token),
      amount: p.amount,
      decimals: p.decimals,
      ...(chainId !== undefined && { chainId }),
      ...(p.chain === 'solana' && { reference: solanaPayReference(p.invoiceId) }),
      ...(p.chain === 'solana' && p.merchantName !== undefined && { label: p.merchantName }),
    });
  };
  return {
    uriOf,
    /** The URI and the QR code that holds it. */
    withQr(p: RequestedPayment): { paymentUri: string; qrCode: string } {
      const uri = uriOf(p);
      return { paymentUri: uri, qrCode: qrCodeDataUri(uri) };
    },
  };
}

/** A 32-byte account key fixed by the invoice, so the same invoice always asks with the same reference. */
export function solanaPayReference(invoiceId: string): string {
  return bs58.encode(createHash('sha256').update(`solana-pay-reference:${invoiceId}`).digest());
}
