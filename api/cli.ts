// `npm run cli -- <command>`: a thin client of the operator API of a running
// service, plus store maintenance that needs the service stopped.
import { parseArgs } from 'node:util';
import { SqlEventStore } from '../adapters/event-store/sql.ts';
import { ProjectionEngine } from '../projections/engine.ts';
import { readModelMigrations } from '../projections/schema.ts';
import { ConfigError, loadConfig } from './config.ts';
import { lockDataDir } from './data-dir-lock.ts';
import { readKeptAdminToken } from './secrets-file.ts';
import { openDatabase, projectors } from './service.ts';

const usage = `Usage: npm run cli -- <command> [options]

  merchant create --name NAME [--tier free|pro] [--webhook-url URL] [--wallet CHAIN=ADDRESS ...]
  key create MERCHANT_ID [--name NAME] [--permissions a,b] [--expires-at ISO8601]
  key revoke KEY_ID
  pay ADDRESS AMOUNT [--chain CHAIN] [--token SYMBOL]   (sandbox transfer; chain defaults to ethereum)
  mine CHAIN [COUNT]                                  (sandbox blocks)
  events INVOICE_ID [--key API_KEY]                   (the invoice's history; API key or API_KEY)
  projections rebuild [NAME ...]     (with the service stopped when the store is embedded)

Options: --url (default http://localhost:3000); the admin token comes from ADMIN_TOKEN or DATA_DIR.`;

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    url: { type: 'string', default: process.env.SERVICE_URL ?? 'http://localhost:3000' },
    name: { type: 'string' },
    tier: { type: 'string' },
    'webhook-url': { type: 'string' },
    wallet: { type: 'string', multiple: true },
    permissions: { type: 'string' },
    'expires-at': { type: 'string' },
    chain: { type: 'string', default: 'ethereum' },
    token: { type: 'string' },
    key: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});

function fail(message: string): never {
  console.error(message);
  process.exit(1);
}

async function admin(method: string, path: string, body?: unknown) {
  const dataDir = process.env.DATA_DIR ?? './data';
  const token = await readKeptAdminToken(dataDir);
  if (!token)
    fail(`No admin token: set ADMIN_TOKEN, or run from the directory whose DATA_DIR (${dataDir}) the service uses`);
  await call(token, method, path, body);
}

async function call(token: string, method: string, path: string, body?: unknown) {
  let response: Response;
  try {
    response = await fetch(new URL(path, values.url), {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    fail(`The service does not answer at ${values.url} (start it with npm start, or pass --url)`);
  }
  const text = await response.text();
  if (!response.ok) fail(`${response.status}: ${text}`);
  console.log(JSON.stringify(JSON.parse(text), null, 2));
}

async function rebuildProjections(names: string[]) {
  let config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) fail(error.problems.map((p) => `configuration error: ${p}`).join('\n'));
    throw error;
  }
  const embedded = !config.databaseUrl && config.dataDir !== 'memory://';
  let unlock = () => {};
  try {
    if (embedded) unlock = lockDataDir(config.dataDir);
  } catch (error) {
    fail((error as Error).message);
  }
  const database = await openDatabase(config);
  try {
    const store = await SqlEventStore.open(database);
    await ProjectionEngine.migrate(database, readModelMigrations);
    const engine = new ProjectionEngine(database, store, projectors);
    const { events, ms } = await engine.rebuild(names);
    console.log(
      `rebuilt ${names.length ? names.join(', ') : projectors.map((p) => p.name).join(', ')}: ${events} events in ${ms} ms`,
    );
    await store.close();
  } catch (error) {
    fail((error as Error).message);
  } finally {
    await database.close();
    unlock();
  }
}

const [group, action, ...rest] = positionals;
if (values.help || !group) {
  console.log(usage);
  process.exit(values.help ? 0 : 1);
}
// `pay`, `mine` and `events` take arguments right away; the others have a sub-command.
const command = ['pay', 'mine', 'events'].includes(group) ? group : `${group} ${action ?? ''}`.trim();
switch (command) {
  case 'merchant create': {
    if (!values.name) fail('merchant create needs --name');
    const settlementWallets = Object.fromEntries(
      (values.wallet ?? []).map((w) => {
        const [chain, address] = w.split('=');
        if (!chain || !address) fail(`--wallet takes CHAIN=ADDRESS, got ${w}`);
        return [chain, address];
      }),
    );
    await admin('POST', '/admin/v1/merchants', {
      name: values.name,
      ...(values.tier && { tier: values.tier }),
      ...(values['webhook-url'] && { webhookUrl: values['webhook-url'] }),
      ...(values.wallet && { settlementWallets }),
    });
    break;
  }
  case 'key create':
    if (!rest[0]) fail('key create needs the merchant id');
    await admin('POST', `/admin/v1/merchants/${rest[0]}/api-keys`, {
      ...(values.name && { name: values.name }),
      ...(values.permissions && { permissions: values.permissions.split(',').map((p) => p.trim()) }),
      ...(values['expires-at'] && { expiresAt: values['expires-at'] }),
    });
    break;
  case 'key revoke':
    if (!rest[0]) fail('key revoke needs the key id');
    await admin('POST', `/admin/v1/api-keys/${rest[0]}/revoke`);
    break;
  case 'pay': {
    const [address, amount] = [action, rest[0]];
    if (!address || !amount) fail('pay needs an address and an amount');
    await admin('POST', `/dev/v1/chains/${values.chain}/transfers`, {
      to: address,
      amount,
      ...(values.token && { token: values.token }),
    });
    break;
  }
  case 'mine':
    if (!action) fail('mine needs a chain');
    await admin('POST', `/dev/v1/chains/${action}/blocks`, { count: Number(rest[0] ?? 1) });
    break;
  case 'events': {
    const apiKey = values.key ?? process.env.API_KEY;
    if (!action) fail('events needs an invoice id');
    if (!apiKey) fail('events needs the merchant API key: --key or API_KEY');
    await call(apiKey, 'GET', `/api/v1/invoices/${action}/events`);
    break;
  }
  case 'projections rebuild':
    await rebuildProjections(rest);
    break;
  default:
    fail(`Unknown command: ${positionals.join(' ')}\n\n${usage}`);
}
