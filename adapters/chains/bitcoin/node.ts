// Bitcoin Core's JSON-RPC, as the reader, the payer and the watch-only
// wallet call it, on the node base every adapter shares (../node.ts): calls
// given a deadline and retried with growing delays, a node's refusal (a
// JSON-RPC error object) thrown at once as a BitcoinRpcError, the URL and its
// credentials never in an error; the credentials from the URL or from
// bitcoind's cookie file (read again when the node answers 401); several calls
// in one JSON-RPC batch; a wallet's calls through its `/wallet/<name>`
// endpoint; and amounts read from Core's JSON text as decimal strings, never
// as floating-point numbers.
import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { Readable } from 'node:stream';
import { ChainNode, RPC_TIMEOUT_MS, type RetryPolicy } from '../node.ts';

/** Node's fetch gives up on an answer whose headers take longer (undici's headersTimeout). */
const FETCH_HEADERS_WAIT_MS = 300_000;

export class BitcoinRpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = 'BitcoinRpcError';
  }
}

/** "0.00012345" (BTC, as Core prints it) in satoshis. */
export function satoshis(btc: string): bigint {
  const m = /^(-?)(\d+)(?:\.(\d{1,8}))?$/.exec(btc);
  if (!m) throw new Error(`not a BTC amount: ${btc}`);
  const sats = BigInt(m[2]!) * 100_000_000n + BigInt((m[3] ?? '').padEnd(8, '0'));
  return m[1] ? -sats : sats;
}

/** Core's JSON with its amounts kept as the decimal text it printed (JSON.parse would make them doubles). */
export function parseCoreJson<T>(text: string): T {
  return JSON.parse(
    text.replace(
      /"(value|amount|feerate|total_amount|fee|base|modified|ancestor|descendant|mempoolminfee|minrelaytxfee|incrementalrelayfee)":\s*(-?\d+(?:\.\d+)?)/g,
      '"$1":"$2"',
    ),
  ) as T;
}

/**
 * fetch's POST for a call that may take longer than FETCH_HEADERS_WAIT_MS:
 * Core answers `importdescriptors` only when its rescan is done, headers and
 * all, and fetch would drop the call at 300 s, every time, on a rescan
 * longer than that (the import then done again, and again). node:http waits
 * as long as `signal` lets it.
 */
function postPatiently(
  url: string | URL,
  init: { method: string; headers: Record<string, string>; body: string; signal: AbortSignal },
): Promise<Response> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
    const request = send(target, { method: init.method, headers: init.headers, signal: init.signal }, (answer) =>
      resolve(new Response(Readable.toWeb(answer) as ReadableStream, { status: answer.statusCode ?? 500 })),
    );
    request.on('error', reject);
    request.end(init.body);
  });
}

export class BitcoinNode extends ChainNode {
  private readonly endpoint: string;
  private authorization = '';
  private rpcId = 0;
  /** The lowest height whose block the node still has (a pruned node), or 0. */
  pruneHeight = 0;

  constructor(
    rpcUrl: string,
    private readonly cookieFile?: string,
    retry?: RetryPolicy,
  ) {
    // A node's refusal is an answer, not a failure to retry.
    super({ urls: [rpcUrl], retry, answered: (error) => error instanceof BitcoinRpcError });
    const url = new URL(rpcUrl);
    if (url.username) {
      this.authorization =
        'Basic ' +
        Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`).toString('base64');
    }
    url.username = '';
    url.password = '';
    this.endpoint = url.toString();
  }

  /** `wallet` names a wallet of Core's, asked through its `/wallet/<name>` endpoint (src/wallet/rpc/util.cpp). */
  rpc<T>(method: string, params: unknown[], wallet?: string, timeoutMs = RPC_TIMEOUT_MS): Promise<T> {
    return this.call(method, () => this.send<T>(method, params, wallet, timeoutMs), timeoutMs);
  }

  private async send<T>(method: string, params: unknown[], wallet?: string, timeoutMs?: number): Promise<T> {
    const [body] = await this.post<T>([{ method, params }], wallet, timeoutMs);
    if (body!.error) throw new BitcoinRpcError(body!.error.code, body!.error.message);
    return body!.result;
  }

  /** bitcoind writes a new cookie at every start: it is read at open and again whenever the node answers 401. */
  async readCookie() {
    const cookie = (await readFile(this.cookieFile!, 'utf8')).trim();
    this.authorization = 'Basic ' + Buffer.from(cookie).toString('base64');
  }

  /** One HTTP request; several calls go as one JSON-RPC batch, answered in order. */
  async post<T>(calls: { method: string; params: unknown[] }[], wallet?: string, timeoutMs = RPC_TIMEOUT_MS) {
    const requests = calls.map((c) => ({ jsonrpc: '1.0', id: ++this.rpcId, ...c }));
    const url = wallet === undefined ? this.endpoint : new URL(`wallet/${encodeURIComponent(wallet)}`, this.endpoint);
    const send = () =>
      (timeoutMs > FETCH_HEADERS_WAIT_MS ? postPatiently : fetch)(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(this.authorization && { authorization: this.authorization }),
        },
        body: JSON.stringify(requests.length === 1 ? requests[0] : requests),
        signal: AbortSignal.timeout(timeoutMs),
      });
    let response = await send();
    if (response.status === 401 && this.cookieFile) {
      await response.body?.cancel();
      await this.readCookie(); // the node restarted and wrote a new cookie
      response = await send();
    }
    if (response.status === 401) throw new Error('the node refused the RPC credentials (HTTP 401)');
    const text = await response.text();
    type Answer = { id: number; result: T; error: { code: number; message: string } | null };
    let answers: Answer[];
    try {
      const parsed = parseCoreJson<Answer | Answer[]>(text);
      answers = Array.isArray(parsed) ? parsed : [parsed];
    } catch {
      throw new Error(`${calls[0]!.method}: HTTP ${response.status}, not JSON`);
    }
    const byId = new Map(answers.map((a) => [a.id, a]));
    return requests.map(
      (r) => byId.get(r.id) ?? { id: r.id, result: null as T, error: { code: -32603, message: 'no answer' } },
    );
  }
}
