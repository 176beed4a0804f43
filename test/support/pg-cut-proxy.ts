// A TCP proxy in front of PostgreSQL that, when armed, cuts a client's
// connection right after PostgreSQL has committed a statement the client
// sent: the one whose text matches, once the server says ReadyForQuery for
// it (the PostgreSQL protocol's 'Z' message, sent after an implicit or
// explicit commit). The client never sees the answer: a reply lost after
// commit, as a network cut does it. Or, frozen, it passes nothing more
// either way and closes nothing: a cut no socket notices.
import net from 'node:net';

/** ReadyForQuery: 'Z', length 5, then the transaction status byte. */
const READY_FOR_QUERY = Buffer.from([0x5a, 0, 0, 0, 5]);

export interface CutProxy {
  url: string;
  /** Cuts the next connection whose statement matches, after its commit. */
  cutAfterCommitOf(statement: RegExp): void;
  /** How many connections were cut. */
  readonly cuts: number;
  /** From now on drops what either side sends, closing nothing. */
  freeze(): void;
  close(): Promise<void>;
}

export async function startCutProxy(target: string): Promise<CutProxy> {
  const upstream = new URL(target);
  let armed: RegExp | undefined;
  let cuts = 0;
  let frozen = false;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const backend = net.connect(Number(upstream.port || 5432), upstream.hostname);
    sockets.add(client).add(backend);
    let cutting = false;
    client.on('data', (chunk) => {
      if (frozen) return;
      if (armed?.test(chunk.toString('latin1'))) {
        armed = undefined;
        cutting = true;
      }
      backend.write(chunk);
    });
    backend.on('data', (chunk) => {
      if (frozen) return;
      if (cutting && chunk.includes(READY_FOR_QUERY)) {
        cuts++;
        client.destroy();
        backend.destroy();
        return;
      }
      client.write(chunk);
    });
    const end = () => {
      if (frozen) return; // a close does not cross a cut either
      client.destroy();
      backend.destroy();
    };
    client.on('error', end).on('close', end);
    backend.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.toString(),
    cutAfterCommitOf(statement) {
      armed = statement;
    },
    get cuts() {
      return cuts;
    },
    freeze() {
      frozen = true;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
