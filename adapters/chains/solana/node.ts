// The Solana JSON-RPC connection (a validator's RPC port, or a provider's),
// on the node base every adapter shares (../node.ts): calls retried with
// growing delays, an answered error (a JSON-RPC error object) thrown at once,
// the URL never in an error; lamports past 2^53 kept exact (parseRpcJson);
// and signatures' statuses, which the reader and the payer both ask.
import { ChainNode, RPC_TIMEOUT_MS, type RetryPolicy } from '../node.ts';

/**
 * The most signatures one getSignatureStatuses takes (agave
 * rpc-client-api request.rs, MAX_GET_SIGNATURE_STATUSES_QUERY_ITEMS; rpc.rs
 * get_signature_statuses refuses more with -32602 "Too many inputs provided").
 */
export const MAX_SIGNATURE_STATUSES = 256;

/** An integer of the RPC: a number, or a decimal string where it passes 2^53 (parseRpcJson). */
export type Integer = number | string;

interface RpcError {
  code: number;
  message: string;
  data?: { err?: unknown; logs?: string[] };
}

export class SolanaRpcError extends Error {
  constructor(
    readonly method: string,
    readonly error: RpcError,
  ) {
    super(`${method}: ${error.message.slice(0, 300)} (${error.code})`);
  }
}

/**
 * JSON.parse, with the integers that can pass 2^53 kept exact: lamports in
 * balance arrays and in `fee`, `lamports` and `value`, written as strings
 * before parsing when they have 16 digits or more (token amounts are strings
 * already). A quote inside a JSON string is escaped, so the patterns only meet
 * real keys. (A lossless JSON parser did the same at six times the cost of a
 * block: the profile in docs/solana.md.)
 */
export function parseRpcJson<T>(text: string): T {
  const exact = text
    .replace(
      /"(preBalances|postBalances)":\[([\d,\s]*)\]/g,
      (_all, key: string, list: string) => `"${key}":[${list.replace(/\d{16,}/g, '"$&"')}]`,
    )
    .replace(/"(fee|lamports|value)":\s*(\d{16,})/g, '"$1":"$2"');
  return JSON.parse(exact) as T;
}

export const toBigInt = (value: Integer | string | undefined) => BigInt(value ?? 0);

/** A signature's status as getSignatureStatuses reports it. */
export interface SignatureStatus {
  slot: number;
  err: unknown;
  confirmationStatus: 'processed' | 'confirmed' | 'finalized' | null;
}

/** On the chain for good enough to count: confirmed by a supermajority at least (a processed one can be dropped). */
export const landed = (status: SignatureStatus | undefined): status is SignatureStatus =>
  status?.confirmationStatus === 'confirmed' || status?.confirmationStatus === 'finalized';

export class SolanaNode extends ChainNode {
  private nextId = 1;

  constructor(
    private readonly url: string,
    retry?: RetryPolicy,
  ) {
    super({ urls: [url], retry, answered: (error) => error instanceof SolanaRpcError });
  }

  /** One call, retried with growing delays (rate limits, dropped connections); an answered error is not retried. */
  rpc<T>(method: string, params: unknown[]): Promise<T> {
    return this.call(method, (signal) => this.once<T>(method, params, signal));
  }

  /** One call, not retried (the head poller asks again by itself). */
  async once<T>(method: string, params: unknown[], signal = AbortSignal.timeout(RPC_TIMEOUT_MS)): Promise<T> {
    const response = await fetch(this.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: this.nextId++, method, params }),
      signal,
    });
    // 429 and 5xx: a rate limit or a node in trouble, retried by rpc().
    if (!response.ok) throw new Error(`${method}: HTTP ${response.status}`);
    const answer = parseRpcJson<{ result?: T; error?: RpcError }>(await response.text());
    if (answer.error) throw new SolanaRpcError(method, answer.error);
    return answer.result as T;
  }

  /** Statuses of at most MAX_SIGNATURE_STATUSES signatures, history searched, with the slot the answering backend had seen. */
  async signatureStatuses(signatures: readonly string[]) {
    const answer = await this.rpc<{ context: { slot: number }; value: (SignatureStatus | null)[] }>(
      'getSignatureStatuses',
      [signatures, { searchTransactionHistory: true }],
    );
    return { slot: answer.context.slot, value: answer.value.map((status) => status ?? undefined) };
  }
}
