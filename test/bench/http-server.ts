// The server side of the HTTP benchmark, in its own process so that the load
// generator does not share its event loop: the real service, and beside it
// bare fastify routes on the same database (the baselines): one primary-key
// select, and one one-row insert. Prints one JSON line when ready; stops on
// SIGTERM.
import Fastify from 'fastify';
import pino from 'pino';
import { serviceLogger } from '../../api/logger.ts';
import { sql, type Kysely } from 'kysely';
import { randomUUID } from 'node:crypto';
import { loadConfig } from '../../api/config.ts';
import { loadSecrets } from '../../api/secrets-file.ts';
import { startService } from '../../api/service.ts';
import type { ReadModelTables } from '../../projections/schema.ts';

const config = loadConfig({ ...process.env, PORT: '0', APP_ENV: 'test', RATE_LIMITS: 'off' });
const secrets = await loadSecrets(config);
// Logging as `npm start` does (one line per request at info), to a sink.
const service = await startService(config, secrets, serviceLogger('info', pino.destination('/dev/null')));
const serviceUrl = await service.app.listen({ port: 0, host: '127.0.0.1' });

const { value: merchant } = await service.merchants.register({
  name: 'Bench',
  tier: 'pro',
  webhookUrl: null,
  settlementWallets: {},
});
const { value: issued, position } = await service.merchants.issueApiKey(merchant.id, {
  name: 'bench',
  permissions: null,
  expiresAt: null,
});
await service.projections.waitFor(position!);

// An invoice with an address to poll.
const created = await fetch(`${serviceUrl}/api/v1/payments`, {
  method: 'POST',
  headers: { authorization: `Bearer ${issued.key}`, 'content-type': 'application/json' },
  body: JSON.stringify({ amount: '10', currency: 'USD', chain: 'tron', token: 'USDT' }),
});
const invoiceId = ((await created.json()) as { data: { paymentId: string } }).data.paymentId;

const bare = Fastify();
const db = service.database.db as Kysely<ReadModelTables>;
bare.get<{ Params: { id: string } }>('/pk/:id', async (request) => ({
  data: await db.selectFrom('invoices').selectAll().where('id', '=', request.params.id).executeTakeFirst(),
}));
// What a payment is compared with: one row written in its own transaction.
await sql`create table if not exists bench_inserts (id uuid primary key, body jsonb not null, created_at timestamptz not null)`.execute(
  service.database.db,
);
bare.post<{ Body: Record<string, unknown> }>('/insert', async (request, reply) => {
  const id = randomUUID();
  await sql`insert into bench_inserts (id, body, created_at) values (${id}, ${JSON.stringify(request.body)}, now())`.execute(
    service.database.db,
  );
  return reply.code(201).send({ data: { id } });
});
const bareUrl = await bare.listen({ port: 0, host: '127.0.0.1' });

console.log(JSON.stringify({ serviceUrl, bareUrl, key: issued.key, invoiceId }));

process.on('SIGTERM', async () => {
  await bare.close();
  await service.close();
  process.exit(0);
});
