// The server side of the HTTP benchmark, in its own process so that the load
// generator does not share its event loop: the real service, and beside it a
// bare fastify route doing one primary-key select on the same database (the
// baseline). Prints one JSON line when ready; stops on SIGTERM.
import Fastify from 'fastify';
import type { Kysely } from 'kysely';
import { loadConfig } from '../../api/config.ts';
import { loadSecrets } from '../../api/secrets-file.ts';
import { startService } from '../../api/service.ts';
import type { ReadModelTables } from '../../projections/schema.ts';

const config = loadConfig({ ...process.env, PORT: '0', APP_ENV: 'test', RATE_LIMITS: 'off' });
const secrets = await loadSecrets(config);
const service = await startService(config, secrets, false);
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
const bareUrl = await bare.listen({ port: 0, host: '127.0.0.1' });

console.log(JSON.stringify({ serviceUrl, bareUrl, key: issued.key, invoiceId }));

process.on('SIGTERM', async () => {
  await bare.close();
  await service.close();
  process.exit(0);
});
