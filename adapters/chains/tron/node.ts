// The java-tron HTTP API, on the node base every adapter shares (../node.ts):
// `/wallet/*` for the head view on the full node's HTTP port, and
// `/walletsolidity/*` for the solidified one on the solidity port (java-tron
// serves them on two ports, 8090 and 8091; TronGrid on one host). Calls are
// retried with growing delays, the URLs (which may hold an API key) never in
// an error; after a 403, 429 or 503 (TronGrid's answer to a key over its
// rate) the node is left alone for 30 s.
import { fromHex as base58FromHex, toHex as hexFromBase58 } from 'tronweb/utils';
import { ChainNode, type RetryPolicy } from '../node.ts';

/** How long the node is left alone after it answers 403, 429 or 503 (TronGrid suspends a key for 30 s). */
const BACKOFF_MS = 30_000;

// ---------------------------------------------------------------------------
// The API's answers
// ---------------------------------------------------------------------------

export interface BlockJson {
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
  /** Calls and value transfers made by contracts during the transaction (java-tron's InternalTransaction). */
  internal_transactions?: InternalTransactionJson[];
}
interface InternalTransactionJson {
  caller_address?: string;
  transferTo_address?: string;
  /** TRX moved (callValue alone) or a TRC-10 token (with tokenId). */
  callValueInfo?: { callValue?: number; tokenId?: string }[];
  /** Hex of "call", "create", "suicide"... */
  note?: string;
  /** Undone by a revert further up the call: it moved nothing. */
  rejected?: boolean;
}

export const toHex = (base58: string) => hexFromBase58(base58).toLowerCase();
export const fromHex = (hex: string) => base58FromHex(hex);

export interface TronNodeOptions {
  /**
   * Where `/walletsolidity/*` is served: java-tron serves it on its solidity
   * HTTP port (node.http.solidityPort, 8091), not on the full node's 8090;
   * TronGrid serves both on one host. Default: the node's URL.
   */
  solidityUrl?: string | undefined;
  /** Sent as TRON-PRO-API-KEY (TronGrid). */
  apiKey?: string | undefined;
  retry?: RetryPolicy | undefined;
}

export class TronNode extends ChainNode {
  private readonly solidityUrl: string;
  private readonly apiKey: string | undefined;

  constructor(
    private readonly url: string,
    { solidityUrl = url, apiKey, retry }: TronNodeOptions = {},
  ) {
    super({ urls: [url, solidityUrl], retry });
    this.solidityUrl = solidityUrl;
    this.apiKey = apiKey;
  }

  /**
   * One POST, retried with growing delays (dropped connections, a lagging
   * node), except while the node has asked us to slow down; errors without
   * either URL (they may hold an API key).
   */
  rpc<T>(path: string, body: object): Promise<T> {
    return this.call(path, (signal) => this.post<T>(path, body, signal));
  }

  private async post<T>(path: string, body: object, signal: AbortSignal): Promise<T> {
    const base = path.startsWith('/walletsolidity/') ? this.solidityUrl : this.url;
    const response = await fetch(base.replace(/\/+$/, '') + path, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(this.apiKey && { 'TRON-PRO-API-KEY': this.apiKey }),
      },
      body: JSON.stringify(body),
      signal,
    });
    if (response.status === 403 || response.status === 429 || response.status === 503) {
      // TronGrid's answer to a key over its rate (15 a second, 100,000 a day): it suspends the key for 30 s,
      // and every request in that time prolongs it.
      throw this.rateLimited(path, response.status, BACKOFF_MS);
    }
    if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
    const json = (await response.json()) as T & { Error?: string };
    // java-tron answers a bad request with 200 and {"Error": "..."}.
    if (json && typeof json === 'object' && typeof json.Error === 'string') {
      throw new Error(`${path}: ${json.Error.slice(0, 300)}`);
    }
    return json;
  }
}
