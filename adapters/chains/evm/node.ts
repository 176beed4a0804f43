// An EVM node's JSON-RPC (ethers), as the reader and the payer call it: over
// HTTP or a WebSocket that is opened again when it closes, each call given a
// deadline and retried on the shared node base (../node.ts).
import { JsonRpcProvider, Network, WebSocketProvider, type JsonRpcApiProvider } from 'ethers';
import { withDeadline } from '../../deadline.ts';
import { ChainNode, RPC_TIMEOUT_MS, type RetryPolicy } from '../node.ts';

export interface RpcReceipt {
  status: string;
  blockNumber: string;
  blockHash: string;
  transactionHash: string;
}

/** The pauses before opening a new WebSocket to the node, growing while it stays out of reach. */
const RECONNECT_FIRST_MS = 250;
const RECONNECT_MAX_MS = 30_000;

/**
 * The node's JSON-RPC connection: one provider over HTTP. Over a WebSocket,
 * ethers (v6) neither reconnects a closed socket nor answers the requests
 * left on it; here a closed socket fails its requests at once and a new one
 * is opened after a pause. Callers retry (the watcher, the head poller and
 * the sweeper all ask again), so they go on through the new socket, and the
 * watcher reads the blocks it missed from the last one it stored.
 */
export class EvmNode extends ChainNode {
  private provider!: JsonRpcApiProvider;
  /** Rejects when the current socket closes; never over HTTP. */
  private lost: Promise<never> = new Promise<never>(() => undefined);
  private pause = RECONNECT_FIRST_MS;
  private reopening?: NodeJS.Timeout;

  constructor(
    private readonly url: string,
    private readonly network: Network,
    retry?: RetryPolicy,
  ) {
    super({ urls: [url], retry });
    this.open();
  }

  /** A JSON-RPC call, retried with growing delays (rate limits, dropped connections, a lagging node). */
  rpc<T>(method: string, params: unknown[]): Promise<T> {
    return this.call(method, async () => (await this.send(method, params)) as T);
  }

  /** One call, given a deadline but not retried: a broadcast, whose failure the payer reads itself. */
  once(method: string, params: unknown[]): Promise<unknown> {
    return withDeadline(this.send(method, params), RPC_TIMEOUT_MS, method);
  }

  receipt(txHash: string): Promise<RpcReceipt | null> {
    return this.rpc<RpcReceipt | null>('eth_getTransactionReceipt', [txHash]);
  }

  override close(): void {
    super.close();
    clearTimeout(this.reopening);
    void this.provider.destroy();
  }

  private send(method: string, params: unknown[]): Promise<unknown> {
    return Promise.race([this.provider.send(method, params), this.lost]);
  }

  private open(): void {
    const options = { staticNetwork: this.network, batchStallTime: 0, cacheTimeout: -1 };
    if (!/^wss?:/.test(this.url)) {
      this.provider = new JsonRpcProvider(this.url, this.network, options);
      return;
    }
    const provider = new WebSocketProvider(this.url, this.network, options);
    let fail!: (error: Error) => void;
    const lost = new Promise<never>((_, reject) => (fail = reject));
    lost.catch(() => undefined);
    // The ws socket under ethers: without an error listener a refused
    // connection would throw; the close that follows any error does the rest.
    const socket = provider.websocket as unknown as {
      onerror: (() => void) | null;
      addEventListener(type: 'open' | 'close', listener: () => void): void;
    };
    socket.onerror = () => undefined;
    socket.addEventListener('open', () => (this.pause = RECONNECT_FIRST_MS));
    socket.addEventListener('close', () => {
      fail(new Error('the WebSocket to the node closed'));
      if (this.closed || this.provider !== provider) return;
      void provider.destroy();
      this.reopening = setTimeout(() => this.closed || this.open(), this.pause);
      this.reopening.unref();
      this.pause = Math.min(this.pause * 2, RECONNECT_MAX_MS);
    });
    this.provider = provider;
    this.lost = lost;
  }
}
