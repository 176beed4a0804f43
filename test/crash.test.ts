// Crash tests: the real process is killed (SIGKILL) at chosen places in a
// payout and restarted; every invoice must end settled with one payout.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { startProcess, type ServiceProcess } from './support/process.ts';

const WALLET = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';

async function call(url: string, method: string, path: string, token?: string, body?: unknown) {
  const res = await fetch(url + path, {
    method,
    headers: {
      ...(token && { authorization: `Bearer ${token}` }),
      ...(body !== undefined && { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as any };
}

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`condition not met; last value ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('crashes during a payout', () => {
  for (const failpoint of ['settlement:after-prepare', 'settlement:after-broadcast']) {
    it(`a kill at ${failpoint} and a restart send exactly one payout`, async () => {
      const dir = await mkdtemp(join(tmpdir(), 'invoicing-crash-'));
      const env = { DATA_DIR: dir, CHAIN_TRON_CONFIRMATIONS: '3', ADMIN_TOKEN: 'crash-test-admin-token' };
      let running: ServiceProcess | undefined = await startProcess({ ...env, FAILPOINTS: failpoint });
      try {
        const admin = env.ADMIN_TOKEN;
        const merchant = (
          await call(running.url, 'POST', '/admin/v1/merchants', admin, {
            name: 'Crash',
            settlementWallets: { tron: WALLET },
          })
        ).body.data;
        const key = (await call(running.url, 'POST', `/admin/v1/merchants/${merchant.id}/api-keys`, admin, {})).body
          .data.key;
        const payment = (
          await call(running.url, 'POST', '/api/v1/payments', key, {
            amount: '50',
            currency: 'USD',
            chain: 'tron',
            token: 'USDT',
          })
        ).body.data;
        await call(running.url, 'POST', '/dev/v1/chains/tron/transfers', admin, {
          to: payment.address,
          amount: payment.cryptoAmount,
          token: 'USDT',
        });
        await call(running.url, 'POST', '/dev/v1/chains/tron/blocks', admin, { count: 2 });
        // Confirmation leads to the payout, where the failpoint kills the process.
        const exit = await Promise.race([running.exited, new Promise((r) => setTimeout(() => r('alive'), 20_000))]);
        assert.notEqual(exit, 'alive', 'the failpoint killed the process');
        assert.equal(running.child.signalCode, 'SIGKILL');

        running = await startProcess(env);
        const url = running.url;
        await until(
          async () => (await call(url, 'GET', `/api/v1/invoices/${payment.paymentId}/settlement`, key)).body.data,
          (s) => s?.status === 'submitted',
        );
        await call(url, 'POST', '/dev/v1/chains/tron/blocks', admin, { count: 3 });
        const settled = await until(
          async () => (await call(url, 'GET', `/api/v1/invoices/${payment.paymentId}/status`)).body.data,
          (s) => s.status === 'settled',
        );
        assert.equal(settled.settledAmount, '49.500000');
        const wallet = (await call(url, 'GET', `/dev/v1/chains/tron/addresses/${WALLET}`, admin)).body.data;
        assert.equal(wallet.transfers.length, 1, 'exactly one payout');
        assert.equal(wallet.received.USDT, '49.500000');
        assert.equal(wallet.transfers[0].txHash, settled.txHash);
      } finally {
        if (running.child.exitCode === null && running.child.signalCode === null) await running.stop();
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
});
