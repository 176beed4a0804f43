// GET /ws/invoices/{id}: the invoice's status, live. On connect the current
// status object (the shape of GET /api/v1/invoices/{id}/status), then one
// message on every change; the socket closes once the invoice is final.
import websocket from '@fastify/websocket';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import { invoiceStatus, type InvoiceStatusView } from '../../projections/invoice-queries.ts';
import type { LiveInvoiceStatus } from '../../projections/live-status.ts';
import type { SqlDatabase } from '../../adapters/sql/database.ts';
import type { Authentication } from '../auth.ts';
import type { Config } from '../config.ts';
import type { ReadYourWrites } from '../read-your-writes.ts';
import { HttpError, sendError } from '../errors.ts';
import { UUID } from './query.ts';

/** Close codes, documented in the README and the OpenAPI document. */
export const closeCodes = {
  /** The invoice is settled or expired: no further change will come. */
  final: 4000,
  notFound: 4404,
  /** The server is shutting down; reconnect or poll the status endpoint. */
  goingAway: 1001,
  /** The read models are behind a fresh invoice (a 503 over HTTP); reconnect shortly. */
  tryAgainLater: 1013,
} as const;

const isFinal = (status: InvoiceStatusView) => status.status === 'settled' || status.status === 'expired';
const HEARTBEAT_MS = 30_000;

/** What these routes use of the service. */
export interface LiveRouteDeps extends Pick<ReadYourWrites, 'readInvoice'> {
  auth: Authentication;
  database: SqlDatabase;
  config: Config;
  live: LiveInvoiceStatus;
}

export async function liveRoutes(app: FastifyInstance, { auth, database, config, readInvoice, live }: LiveRouteDeps) {
  // Compression costs tens of kilobytes per socket; status messages are small.
  await app.register(websocket, { options: { perMessageDeflate: false, maxPayload: 1024 } });

  // Sockets that stop answering pings are dropped, so idle ones cost nothing for long.
  const alive = new WeakSet<WebSocket>();
  const heartbeat = setInterval(() => {
    for (const socket of app.websocketServer.clients) {
      if (!alive.has(socket)) {
        socket.terminate();
        continue;
      }
      alive.delete(socket);
      socket.ping();
    }
  }, HEARTBEAT_MS);
  heartbeat.unref();
  app.addHook('onClose', async () => {
    clearInterval(heartbeat);
    for (const socket of app.websocketServer.clients) socket.close(closeCodes.goingAway, 'Server shutting down');
  });

  // Open sockets, by client address and in all (LIVE_SOCKETS_PER_CLIENT,
  // LIVE_SOCKETS_TOTAL): each costs memory for as long as it stays open, so
  // one client (or a crowd) cannot hold them all. A socket is counted from
  // before its upgrade until its connection closes.
  const open = new Map<string, number>();
  let total = 0;
  const { perClient, total: maxTotal } = config.liveSockets;
  const admit = async (request: FastifyRequest, reply: FastifyReply) => {
    if (!config.rateLimits) return; // RATE_LIMITS=off lifts every limit, for load tests
    const client = request.ip;
    const mine = open.get(client) ?? 0;
    if (mine >= perClient) {
      return sendError(
        reply,
        429,
        `Too many live connections from this address (at most ${perClient}); close one, or poll GET /api/v1/invoices/{id}/status`,
      );
    }
    if (total >= maxTotal) {
      return sendError(
        reply,
        503,
        'The service has as many live connections as it takes; poll GET /api/v1/invoices/{id}/status',
      );
    }
    open.set(client, mine + 1);
    total += 1;
    request.raw.socket.once('close', () => {
      total -= 1;
      const left = (open.get(client) ?? 1) - 1;
      if (left > 0) open.set(client, left);
      else open.delete(client);
    });
  };

  app.get<{ Params: { id: string } }>(
    '/ws/invoices/:id',
    {
      websocket: true,
      onRequest: auth.public,
      preValidation: admit,
      schema: {
        tags: ['public'],
        summary:
          'WebSocket of the invoice status: the status object on connect, then one per change ({"type":"status","data":{…}}); closes with 4000 when the invoice is settled or expired, 4404 when unknown',
      },
    },
    async (socket, request) => {
      alive.add(socket);
      socket.on('pong', () => alive.add(socket));
      socket.on('message', () => {}); // clients have nothing to say; messages are ignored
      const id = request.params.id;
      if (!UUID.test(id)) return socket.close(closeCodes.notFound, 'Invoice not found');
      let last: string | undefined;
      const send = (status: InvoiceStatusView) => {
        const next = JSON.stringify(status);
        if (next === last) return;
        last = next;
        socket.send(JSON.stringify({ type: 'status', data: status }));
        if (isFinal(status)) socket.close(closeCodes.final, `Invoice is ${status.status}`);
      };
      // Watch before the first read, so that no change between the two is missed.
      const unwatch = live.watch(id, send);
      socket.on('close', unwatch);
      await live.caughtUp();
      let initial: InvoiceStatusView | undefined;
      try {
        initial = await readInvoice(id, () => invoiceStatus(database, id));
      } catch (error) {
        if (!(error instanceof HttpError && error.statusCode === 503)) throw error;
        unwatch();
        return socket.close(closeCodes.tryAgainLater, error.message);
      }
      if (!initial) {
        unwatch();
        return socket.close(closeCodes.notFound, 'Invoice not found');
      }
      // A change that arrived meanwhile is newer than this read and has been sent already.
      if (last === undefined) send(initial);
    },
  );
}
