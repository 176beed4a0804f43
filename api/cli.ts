// `npm run cli -- <command>`: a thin client of the operator API of a running
// service, plus store maintenance that needs the service stopped.
import { readFile, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { parseAuditTrail, replayAuditTrail, verifyAuditTrail, type ReplayedInvoice } from '../domain/audit-trail.ts';
import { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { readModelMigrations } from '../projections/schema.ts';
import { ConfigError, loadConfig } from './config.ts';
import { lockDataDir } from './data-dir-lock.ts';
import { readKeptAdminToken } from './secrets-file.ts';
import { openDatabase, openEventStore, projectors } from './service.ts';

const usage = `Usage: npm run cli -- <command> [options]

  merchant create --name NAME [--tier free|pro] [--webhook-url URL] [--wallet CHAIN=ADDRESS ...]
  key create MERCHANT_ID [--name NAME] [--permissions a,b] [--expires-at ISO8601]
  key revoke KEY_ID
  pay ADDRESS AMOUNT [--chain CHAIN] [--token SYMBOL]   (sandbox transfer; chain defaults to ethereum)
  mine CHAIN [COUNT]                                  (sandbox blocks)
  events INVOICE_ID [--key API_KEY] [--export FILE]   (the invoice's history; --export writes it hash-chained, one event a line)
  audit verify FILE [--key API_KEY]                   (checks an exported history's chain, replays it, and with a key compares with the service)
  refund create INVOICE_ID (--amount AMOUNT | --kind full|excess) [--chain CHAIN --token SYMBOL] [--destination ADDRESS] [--reason TEXT] [--key API_KEY]
  refund approve REFUND_ID [--key API_KEY]
  refund list [--invoice INVOICE_ID] [--status STATUS] [--key API_KEY]
                                     (refunds for a merchant, through the merchant API with the merchant's key)
  projections rebuild [NAME ...]     (refused, naming it, while a service projects into the same database)

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
    chain: { type: 'string' },
    token: { type: 'string' },
    key: { type: 'string' },
    export: { type: 'string' },
    amount: { type: 'string' },
    kind: { type: 'string' },
    destination: { type: 'string' },
    reason: { type: 'string' },
    invoice: { type: 'string' },
    status: { type: 'string' },
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

/** The merchant's API key, for the commands that act as the merchant. */
function merchantKey(command: string): string {
  const key = values.key ?? process.env.API_KEY;
  if (!key) fail(`${command} needs the merchant API key: --key or API_KEY`);
  return key;
}

async function call(token: string, method: string, path: string, body?: unknown) {
  console.log(JSON.stringify(JSON.parse(await fetchText(token, method, path, body)), null, 2));
}

async function fetchText(token: string, method: string, path: string, body?: unknown): Promise<string> {
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
  return text;
}

/** "25.50000000" and "25.5" are the same amount. */
const sameAmount = (a: unknown, b: unknown) =>
  typeof a === 'string' && typeof b === 'string' && a.replace(/\.?0+$/, '') === b.replace(/\.?0+$/, '');

/** Where the replay and the service disagree, in words; [] when they agree. */
async function compareWithService(replayed: ReplayedInvoice, apiKey: string): Promise<string[]> {
  const id = replayed.invoiceId;
  const invoice = JSON.parse(await fetchText(apiKey, 'GET', `/api/v1/invoices/${id}`)).data;
  const status = JSON.parse(await fetchText(apiKey, 'GET', `/api/v1/invoices/${id}/status`)).data;
  const mismatches: string[] = [];
  const differ = (what: string, ours: unknown, theirs: unknown, same = (a: unknown, b: unknown) => a === b) => {
    if (!same(ours, theirs))
      mismatches.push(`${what}: the events say ${JSON.stringify(ours)}, the service ${JSON.stringify(theirs)}`);
  };
  differ('status', replayed.status, status.status);
  differ('amount', replayed.amount, invoice.amount, sameAmount);
  differ('currency', replayed.currency, invoice.currency);
  differ('amount received', replayed.totalReceivedAmount, status.totalReceivedAmount, sameAmount);
  if (replayed.settlement) {
    const settlement = JSON.parse(await fetchText(apiKey, 'GET', `/api/v1/invoices/${id}/settlement`)).data;
    differ('settlement status', replayed.settlement.status, settlement.status);
    differ('settlement gross amount', replayed.settlement.grossAmount, settlement.grossAmount, sameAmount);
    differ('settlement net amount', replayed.settlement.netAmount, settlement.amount, sameAmount);
    differ('settlement transaction', replayed.settlement.txHash, settlement.transactionHash);
  }
  differ('refund status', replayed.refundStatus, invoice.refundStatus);
  for (const refund of replayed.refunds) {
    const theirs = JSON.parse(await fetchText(apiKey, 'GET', `/api/v1/refunds/${refund.id}`)).data;
    differ(`refund ${refund.id} status`, refund.status, theirs.status);
    differ(`refund ${refund.id} amount`, refund.amount, theirs.amount, sameAmount);
    differ(`refund ${refund.id} transaction`, refund.transactionHash, theirs.transactionHash);
  }
  return mismatches;
}

async function auditVerify(file: string, apiKey: string | undefined) {
  const { lines, problems } = parseAuditTrail(await readFile(file, 'utf8'));
  problems.push(...verifyAuditTrail(lines));
  for (const problem of problems) console.log(`${problem.kind}: ${problem.message}`);
  if (problems.length > 0)
    fail(`${file}: the history does not verify (${problems.length} problem${problems.length === 1 ? '' : 's'})`);
  const replayed = replayAuditTrail(lines);
  console.log(`${file}: ${lines.length} events, hash chain intact`);
  console.log(JSON.stringify(replayed, null, 2));
  if (!apiKey) return;
  const mismatches = await compareWithService(replayed, apiKey);
  for (const mismatch of mismatches) console.log(`mismatch: ${mismatch}`);
  if (mismatches.length > 0) fail(`the service at ${values.url} disagrees with the events`);
  console.log(`the service at ${values.url} agrees with the events`);
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
    if (embedded) unlock = await lockDataDir(config.dataDir);
  } catch (error) {
    fail((error as Error).message);
  }
  const database = await openDatabase(config, `invoicing cli pid ${process.pid}`);
  try {
    const store = await openEventStore(config, database);
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
    await admin('POST', `/dev/v1/chains/${values.chain ?? 'ethereum'}/transfers`, {
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
    if (!action) fail('events needs an invoice id');
    const apiKey = merchantKey('events');
    if (!values.export) {
      await call(apiKey, 'GET', `/api/v1/invoices/${action}/events`);
      break;
    }
    const trail = await fetchText(apiKey, 'GET', `/api/v1/invoices/${action}/events?format=ndjson`);
    await writeFile(values.export, trail);
    console.log(`${trail.split('\n').filter(Boolean).length} events written to ${values.export}`);
    break;
  }
  case 'audit verify':
    if (!rest[0]) fail('audit verify needs the file');
    await auditVerify(rest[0], values.key ?? process.env.API_KEY);
    break;
  case 'projections rebuild':
    await rebuildProjections(rest);
    break;
  case 'refund create':
    if (!rest[0]) fail('refund create needs the invoice id');
    await call(merchantKey('refund create'), 'POST', `/api/v1/invoices/${rest[0]}/refunds`, {
      ...(values.amount && { amount: values.amount }),
      ...(values.kind && { kind: values.kind }),
      ...(values.chain && { chain: values.chain }),
      ...(values.token && { token: values.token }),
      ...(values.destination && { destination: values.destination }),
      ...(values.reason && { reason: values.reason }),
    });
    break;
  case 'refund approve':
    if (!rest[0]) fail('refund approve needs the refund id');
    await call(merchantKey('refund approve'), 'POST', `/api/v1/refunds/${rest[0]}/approve`);
    break;
  case 'refund list': {
    const query = new URLSearchParams({
      ...(values.invoice && { invoiceId: values.invoice }),
      ...(values.status && { status: values.status }),
    });
    await call(merchantKey('refund list'), 'GET', `/api/v1/refunds${query.size ? `?${query}` : ''}`);
    break;
  }
  default:
    fail(`Unknown command: ${positionals.join(' ')}\n\n${usage}`);
}
