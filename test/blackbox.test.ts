// Black-box: the real process, as `npm start` runs it, on an embedded store
// in a temporary DATA_DIR.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runCli, startProcess } from './support/process.ts';

describe('the service process', () => {
  let dataDir: string;
  before(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'invoicing-'));
  });
  after(() => rm(dataDir, { recursive: true, force: true }));

  it('starts with no variable but DATA_DIR, prints the demo once, keeps data across a restart, and stops on SIGTERM', async () => {
    const first = await startProcess({ DATA_DIR: dataDir });
    const banner = first.output();
    const adminToken = /admin token:\s+(\S+)/.exec(banner)?.[1];
    const demoKey = /demo API key:\s+(pk_live_\S+)/.exec(banner)?.[1];
    const webhookSecret = /demo webhook secret:\s+(\S+)/.exec(banner)?.[1];
    assert.ok(adminToken && demoKey && webhookSecret, banner);

    const created = await fetch(`${first.url}/admin/v1/merchants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Kept' }),
    });
    assert.equal(created.status, 201);
    const merchant = ((await created.json()) as any).data;

    const issued = await runCli(['key', 'create', merchant.id, '--permissions', 'invoices:read', '--url', first.url], {
      DATA_DIR: dataDir,
    });
    assert.equal(issued.code, 0, issued.output);
    const key = JSON.parse(issued.output).data;
    assert.match(key.key, /^pk_live_/);
    const revoked = await runCli(['key', 'revoke', key.id, '--url', first.url], { DATA_DIR: dataDir });
    assert.equal(revoked.code, 0, revoked.output);

    const second = await startProcess({ DATA_DIR: dataDir });
    assert.equal(await second.exited, 1);
    assert.match(second.output(), /DATA_DIR .* is in use by process \d+/);

    assert.equal(await first.stop(), 0);
    // Log lines never carry a secret (the banner above is the one deliberate print).
    const logLines = first
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'));
    assert.ok(logLines.length > 0);
    for (const secret of [adminToken, demoKey, webhookSecret, key.key]) {
      assert.equal(
        logLines.some((l) => l.includes(secret)),
        false,
        'a secret reached the logs',
      );
    }

    const rebuilt = await runCli(['projections', 'rebuild'], { DATA_DIR: dataDir });
    assert.equal(rebuilt.code, 0, rebuilt.output);
    assert.match(rebuilt.output, /rebuilt merchants, invoices, [a-z_, -]+: \d+ events in \d+ ms/);

    const restarted = await startProcess({ DATA_DIR: dataDir });
    try {
      assert.doesNotMatch(restarted.output(), /demo API key/);
      const read = await fetch(`${restarted.url}/admin/v1/merchants/${merchant.id}`, {
        headers: { authorization: `Bearer ${adminToken}` },
      });
      assert.equal(read.status, 200);
      assert.equal(((await read.json()) as any).data.name, 'Kept');
      const keys = await fetch(`${restarted.url}/admin/v1/merchants/${merchant.id}/api-keys`, {
        headers: { authorization: `Bearer ${adminToken}` },
      });
      const [listed] = ((await keys.json()) as any).data;
      assert.equal(listed.id, key.id);
      assert.ok(listed.revokedAt);
    } finally {
      assert.equal(await restarted.stop(), 0);
    }
  });

  it('takes a payment from creation to confirmation on the sandbox, and keeps it across a restart', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'invoicing-flow-'));
    const first = await startProcess({ DATA_DIR: dir });
    const adminToken = /admin token:\s+(\S+)/.exec(first.output())![1]!;
    const key = /demo API key:\s+(pk_live_\S+)/.exec(first.output())![1]!;
    const call = async (url: string, method: string, path: string, token?: string, body?: unknown) => {
      const res = await fetch(url + path, {
        method,
        headers: {
          ...(token && { authorization: `Bearer ${token}` }),
          ...(body !== undefined && { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as any };
    };
    try {
      const created = await call(first.url, 'POST', '/api/v1/payments', key, {
        amount: '25.00',
        currency: 'USD',
        chain: 'tron',
        token: 'USDT',
      });
      assert.equal(created.status, 201);
      const payment = created.body.data;
      const paid = await call(first.url, 'POST', '/dev/v1/chains/tron/transfers', adminToken, {
        to: payment.address,
        amount: payment.cryptoAmount,
        token: 'USDT',
      });
      assert.equal(paid.status, 201);
      await call(first.url, 'POST', '/dev/v1/chains/tron/blocks', adminToken, { count: 18 });
      const deadline = Date.now() + 15_000;
      let status;
      do {
        status = (await call(first.url, 'GET', `/api/v1/invoices/${payment.paymentId}/status`)).body.data;
        if (status.status === 'confirmed') break;
        await new Promise((r) => setTimeout(r, 50));
      } while (Date.now() < deadline);
      assert.equal(status.status, 'confirmed');
      assert.equal(status.confirmations, 19);
      assert.equal(await first.stop(), 0);

      // The log: one line per answered request, and no credential in any line.
      const logLines = first
        .output()
        .split('\n')
        .filter((line) => line.startsWith('{'));
      const logged = logLines.map((line) => JSON.parse(line) as Record<string, unknown>);
      const creation = logged.filter((l) => l.msg === 'request' && l.url === '/api/v1/payments');
      assert.equal(creation.length, 1);
      assert.equal(creation[0]!.method, 'POST');
      assert.equal(creation[0]!.statusCode, 201);
      assert.equal(typeof creation[0]!.ms, 'number');
      for (const line of logLines) {
        assert.ok(!line.includes(key) && !line.includes(adminToken), `a credential in the log: ${line}`);
      }

      const second = await startProcess({ DATA_DIR: dir });
      try {
        const after = (await call(second.url, 'GET', `/api/v1/invoices/${payment.paymentId}/status`)).body.data;
        assert.equal(after.status, 'confirmed');
        const mined = await call(second.url, 'POST', '/dev/v1/chains/tron/blocks', adminToken, { count: 1 });
        assert.equal(mined.body.data.height, paid.body.data.blockNumber + 19, 'the sandbox ledger kept its blocks');
      } finally {
        assert.equal(await second.stop(), 0);
      }
    } finally {
      if (first.child.exitCode === null) await first.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('loads no chain library nor client it is not configured for (the sandbox needs none)', async () => {
    const importLog = join(dataDir, 'imports.log');
    const service = await startProcess({ DATA_DIR: 'memory://', IMPORT_LOG: importLog }, [
      '--import',
      new URL('./support/import-log.mjs', import.meta.url).href,
    ]);
    assert.equal(await service.stop(), 0, service.output());
    const imported = (await readFile(importLog, 'utf8')).split('\n');
    assert.ok(
      imported.some((url) => url.includes('/node_modules/fastify/')),
      'the log records package imports',
    );
    for (const unused of [
      '/node_modules/tronweb/',
      '/node_modules/@solana/web3.js/',
      '/node_modules/@solana/spl-token/',
      '/node_modules/ethers/lib.esm/providers/',
      '/node_modules/ethers/lib.esm/wallet/',
      '/node_modules/ioredis/',
      '/node_modules/@eventstore/',
      '/node_modules/esbuild/', // until a checkout page's script is asked for
    ]) {
      assert.equal(imported.filter((url) => url.includes(unused)).length, 0, `${unused} was loaded`);
    }
  });

  it('stops on bad configuration with one line per problem and no stack trace', async () => {
    const bad = await startProcess({ DATA_DIR: 'memory://', PORT: 'eighty', CHAINS: 'ethereum,dogecoin' });
    assert.equal(await bad.exited, 1);
    const lines = bad
      .output()
      .trim()
      .split('\n')
      .filter((l) => !l.startsWith('npm warn'));
    assert.deepEqual(lines, [
      'configuration error: PORT must be a whole number from 0 to 65535 (got "eighty")',
      'configuration error: CHAINS has unknown chain dogecoin; known: ethereum, bsc, polygon, solana, tron, bitcoin',
    ]);
  });

  it('stops its workers and releases DATA_DIR when start-up fails after they started (the port is taken)', async () => {
    // Something else on the port, answering every request with 503 (so the harness's health poll goes on).
    const taken = createServer((_request, response) => response.writeHead(503).end());
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = String((taken.address() as AddressInfo).port);
    const dir = await mkdtemp(join(tmpdir(), 'invoicing-port-'));
    try {
      const failed = await startProcess({ DATA_DIR: dir, PORT: port, HOST: '127.0.0.1' });
      assert.equal(await failed.exited, 1);
      assert.match(failed.output(), /^start-up failed: listen EADDRINUSE/m);
      assert.equal(existsSync(join(dir, 'service.pid')), false, 'the data directory is released');
      // And so the next start on it works.
      taken.close();
      const next = await startProcess({ DATA_DIR: dir, PORT: port, HOST: '127.0.0.1' });
      assert.equal((await fetch(`${next.url}/healthz`)).status, 200);
      await next.stop();
    } finally {
      taken.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses to start in production without its secrets', async () => {
    const bad = await startProcess({ DATA_DIR: 'memory://', APP_ENV: 'production' });
    assert.equal(await bad.exited, 1);
    assert.match(bad.output(), /^configuration error: ADMIN_TOKEN is required when APP_ENV=production$/m);
  });
});
