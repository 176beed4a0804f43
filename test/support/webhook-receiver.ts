// A merchant's webhook endpoint for tests: records every delivery with its raw
// body and checks its signature the way interface.md tells merchants to,
// independently of the service's own signing code.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';

export interface ReceivedWebhook {
  path: string;
  /** What the receiver answered. */
  status: number;
  eventId: string;
  event: string;
  body: any;
  rawBody: string;
  signature: string;
  receivedAt: number;
}

export interface WebhookReceiver {
  url: string;
  received: ReceivedWebhook[];
  /** Deliveries this receiver accepted (answered 2xx). */
  accepted(): ReceivedWebhook[];
  /** The next `count` deliveries of each event id to `path` are answered with `status`. */
  failFirst(path: string, count: number, status: number): void;
  close(): Promise<void>;
}

/** True when some `v1` of the header is the HMAC-SHA-256 of `t.rawBody` and `t` is within 300 s. */
export function signatureVerifies(header: string, rawBody: string, secret: string): boolean {
  const parts = header.split(',').map((p) => p.split('=') as [string, string]);
  const t = Number(parts.find(([k]) => k === 't')?.[1]);
  if (!Number.isInteger(t) || Math.abs(Date.now() / 1000 - t) > 300) return false;
  const expected = createHmac('sha256', secret).update(`${t}.${rawBody}`).digest();
  return parts
    .filter(([k]) => k === 'v1')
    .some(([, v]) => {
      const given = Buffer.from(v, 'hex');
      return given.length === expected.length && timingSafeEqual(given, expected);
    });
}

async function bodyOf(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export async function startWebhookReceiver(): Promise<WebhookReceiver> {
  const received: ReceivedWebhook[] = [];
  const failures = new Map<string, { count: number; status: number }>();
  const failedSoFar = new Map<string, number>();
  const server = createServer(async (request, response) => {
    const rawBody = await bodyOf(request);
    let body: any = null;
    try {
      body = JSON.parse(rawBody);
    } catch {
      // recorded as it came
    }
    const path = (request.url ?? '/').split('?')[0]!;
    const failure = failures.get(path);
    const key = `${path} ${body?.eventId}`;
    const failed = failedSoFar.get(key) ?? 0;
    const status = failure && failed < failure.count ? failure.status : 200;
    if (status !== 200) failedSoFar.set(key, failed + 1);
    received.push({
      path,
      status,
      eventId: body?.eventId,
      event: body?.event,
      body,
      rawBody,
      signature: String(request.headers['x-webhook-signature'] ?? ''),
      receivedAt: Date.now(),
    });
    response.writeHead(status, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    accepted: () => received.filter((r) => r.status >= 200 && r.status < 300),
    failFirst(path, count, status) {
      failures.set(path, { count, status });
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
