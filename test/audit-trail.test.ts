// The auditor's offline replay: an invoice's history exported as hash-chained
// JSON lines over the real API, verified and replayed through the service's
// folds by `npm run cli -- audit verify` (a real process), and every kind of
// tampering (a removed, a swapped, an edited event, and a removal with the
// hashes redone) detected and named.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  chainAuditTrail,
  parseAuditTrail,
  replayAuditTrail,
  verifyAuditTrail,
  type AuditLine,
} from '../domain/audit-trail.ts';
import { eventually, eventuallyMining, merchantWithKey } from './support/merchant.ts';
import { root } from './support/process.ts';
import { startTestService, type RunningService } from './support/service.ts';

const TRON_WALLET = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';

describe("the auditor's replay of an invoice's history", () => {
  let svc: RunningService;
  let key: string;
  let invoiceId: string;
  let exported: string;
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'invoicing-audit-'));
    svc = await startTestService({ RATE_LIMITS: 'off', CHAIN_TRON_CONFIRMATIONS: '1' });
    const { key: k, merchant } = await merchantWithKey(svc);
    key = k;
    await svc.call('PATCH', `/admin/v1/merchants/${merchant.id}`, {
      token: svc.adminToken,
      body: { settlementWallets: { tron: TRON_WALLET } },
    });
    const payment = (
      await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount: '30', currency: 'USD', chain: 'tron', token: 'USDT' },
      })
    ).body.data;
    invoiceId = payment.paymentId;
    // Paid in two parts, so the history has several payments, then confirmed and settled.
    const [whole, fraction = ''] = (payment.cryptoAmount as string).split('.');
    const units = BigInt(whole! + fraction.slice(0, 6).padEnd(6, '0'));
    const part = (n: bigint) => `${n / 1_000_000n}.${(n % 1_000_000n).toString().padStart(6, '0')}`;
    for (const amount of [units / 3n, units - units / 3n]) {
      await svc.call('POST', '/dev/v1/chains/tron/transfers', {
        token: svc.adminToken,
        body: { to: payment.address, amount: part(amount), token: 'USDT' },
      });
    }
    const mine = () => svc.call('POST', '/dev/v1/chains/tron/blocks', { token: svc.adminToken, body: { count: 1 } });
    await eventuallyMining(
      mine,
      async () => (await svc.call('GET', `/api/v1/invoices/${invoiceId}/status`)).body.data.status,
      (s) => s === 'settled',
    );
    const response = await fetch(`${svc.url}/api/v1/invoices/${invoiceId}/events?format=ndjson`, {
      headers: { authorization: `Bearer ${key}` },
    });
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type')!, /^application\/x-ndjson/);
    exported = await response.text();
  });
  after(async () => {
    await svc?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const linesOf = (text: string) => parseAuditTrail(text).lines;
  const textOf = (lines: AuditLine[]) => lines.map((l) => JSON.stringify(l)).join('\n') + '\n';
  /** The CLI in its own process (asynchronously: the service it calls runs in this one). */
  function cli(...args: string[]): Promise<{ code: number; out: string }> {
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', 'api/cli.ts', ...args, '--url', svc.url],
        { cwd: root, env: { ...process.env, API_KEY: key } },
        (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, out: stdout + stderr }),
      );
    });
  }

  it('exports every event with its stream, revision, position and time, each line chained to the one before', () => {
    const lines = linesOf(exported);
    assert.deepEqual(parseAuditTrail(exported).problems, []);
    assert.ok(lines.length >= 8, `${lines.length} events`);
    const types = lines.map((l) => l.type);
    for (const type of [
      'InvoiceCreated',
      'AddressAssigned',
      'PaymentDetected',
      'InvoiceSettled',
      'SettlementRequested',
    ]) {
      assert.ok(types.includes(type), `${type} in ${types.join(', ')}`);
    }
    for (const line of lines) {
      assert.deepEqual(Object.keys(line).sort(), [
        'data',
        'eventId',
        'hash',
        'position',
        'previousHash',
        'recordedAt',
        'revision',
        'streamId',
        'type',
      ]);
      assert.match(line.hash, /^[0-9a-f]{64}$/);
    }
    assert.equal(lines[0]!.previousHash, '0'.repeat(64));
    for (let i = 1; i < lines.length; i++) assert.equal(lines[i]!.previousHash, lines[i - 1]!.hash);
  });

  it('verifies a genuine export and replays it to what the service says, through the CLI', async () => {
    assert.deepEqual(verifyAuditTrail(linesOf(exported)), []);
    const replayed = replayAuditTrail(linesOf(exported));
    assert.equal(replayed.status, 'settled');
    assert.equal(replayed.settlement?.status, 'completed');
    const file = join(dir, 'genuine.ndjson');
    const written = await cli('events', invoiceId, '--export', file);
    assert.equal(written.code, 0, written.out);
    assert.match(written.out, /events written to/);
    const verified = await cli('audit', 'verify', file);
    assert.equal(verified.code, 0, verified.out);
    assert.match(verified.out, /hash chain intact/);
    assert.match(verified.out, /agrees with the events/);
    assert.match(verified.out, /"status": "settled"/);
  });

  it('detects and names a removed, a swapped and an edited event, and a removal with the hashes redone', async () => {
    const genuine = linesOf(exported);
    const detected = (lines: AuditLine[]) => verifyAuditTrail(lines).map((p) => p.kind);

    const dropped = genuine.filter((_, i) => i !== 3);
    assert.ok(detected(dropped).includes('missing'), JSON.stringify(verifyAuditTrail(dropped)));

    const swapped = [...genuine];
    [swapped[2], swapped[3]] = [swapped[3]!, swapped[2]!];
    assert.ok(detected(swapped).includes('reordered'), JSON.stringify(verifyAuditTrail(swapped)));

    const edited = genuine.map((l) =>
      l.type === 'PaymentDetected' ? { ...l, data: { ...(l.data as object), amount: '1' } } : l,
    );
    assert.deepEqual([...new Set(detected(edited))], ['altered']);

    // Removed, then the whole chain recomputed: the stream's revisions still show the gap.
    const invoiceLine = genuine.findIndex((l, i) => i > 0 && l.streamId === genuine[0]!.streamId);
    const rehashed = chainAuditTrail(genuine.filter((_, i) => i !== invoiceLine));
    assert.deepEqual(
      verifyAuditTrail(rehashed).map((p) => p.kind),
      ['missing'],
    );

    // The CLI says what it found, and fails.
    const file = join(dir, 'edited.ndjson');
    await writeFile(file, textOf(edited));
    const run = await cli('audit', 'verify', file);
    assert.notEqual(run.code, 0);
    assert.match(run.out, /altered: line \d+ \(PaymentDetected\) was altered/);
  });

  it("answers a request for JSON lines in the contract envelope when the invoice is not the caller's", async () => {
    const other = (await merchantWithKey(svc)).key;
    const response = await fetch(`${svc.url}/api/v1/invoices/${invoiceId}/events?format=ndjson`, {
      headers: { authorization: `Bearer ${other}` },
    });
    assert.equal(response.status, 404);
    assert.equal(((await response.json()) as { message: string }).message, 'Invoice not found');
  });

  it("holds the invoice's refunds, and the CLI checks them against the service", async () => {
    const created = await svc.call('POST', `/api/v1/invoices/${invoiceId}/refunds`, {
      token: key,
      body: { amount: '1', reason: 'Goodwill' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    await svc.call('POST', `/api/v1/refunds/${created.body.data.id}/cancel`, { token: key });
    // The saga gives the reservation back on the invoice's stream after the cancel.
    await eventually(
      async () =>
        (await svc.call('GET', `/api/v1/invoices/${invoiceId}/refundable`, { token: key })).body.data[0].pending,
      (pending) => /^0\.0+$/.test(pending),
    );
    const file = join(dir, 'refunded.ndjson');
    assert.equal((await cli('events', invoiceId, '--export', file)).code, 0);
    const lines = linesOf(await readFile(file, 'utf8'));
    const types = lines.map((l) => l.type);
    for (const type of ['RefundCreated', 'RefundReserved', 'RefundCanceled', 'RefundReleased']) {
      assert.ok(types.includes(type), `${type} in ${types.join(', ')}`);
    }
    assert.deepEqual(replayAuditTrail(lines).refunds, [
      { id: created.body.data.id, status: 'canceled', amount: '1.000000', transactionHash: null },
    ]);
    const verified = await cli('audit', 'verify', file);
    assert.equal(verified.code, 0, verified.out);
    assert.match(verified.out, /agrees with the events/);
  });

  it('replays a refund held on an open invoice as no settlement, and the CLI agrees with the service', async () => {
    const payment = (
      await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount: '30', currency: 'USD', chain: 'tron', token: 'USDT' },
      })
    ).body.data;
    const openId = payment.paymentId as string;
    await svc.call('POST', '/dev/v1/chains/tron/transfers', {
      token: svc.adminToken,
      body: { to: payment.address, amount: '5', token: 'USDT' }, // an underpayment: the invoice stays open
    });
    await eventuallyMining(
      () => svc.call('POST', '/dev/v1/chains/tron/blocks', { token: svc.adminToken, body: { count: 1 } }),
      async () => (await svc.call('GET', `/api/v1/invoices/${openId}/refundable`, { token: key })).body.data,
      (assets) => assets?.[0]?.refundable === '5.000000',
    );
    const created = await svc.call('POST', `/api/v1/invoices/${openId}/refunds`, {
      token: key,
      body: { amount: '5', destination: TRON_WALLET },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const approved = await svc.call('POST', `/api/v1/refunds/${created.body.data.id}/approve`, { token: key });
    assert.equal(approved.body.data.fundedFrom, 'deposit', JSON.stringify(approved.body));
    const file = join(dir, 'held.ndjson');
    assert.equal((await cli('events', openId, '--export', file)).code, 0);
    const lines = linesOf(await readFile(file, 'utf8'));
    assert.ok(lines.some((l) => l.type === 'SettlementRefundHeld'));
    assert.ok(!lines.some((l) => l.type === 'SettlementRequested'));
    assert.equal(replayAuditTrail(lines).settlement, null, 'only a hold: no settlement');
    const verified = await cli('audit', 'verify', file);
    assert.equal(verified.code, 0, verified.out);
    assert.match(verified.out, /agrees with the events/);
  });
});
