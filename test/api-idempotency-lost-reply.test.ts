// Issue 32, item 5: an invoice appended whose reply was lost (the store
// applied it, the service answered 5xx) must not be created a second time by
// the client's retry with the same Idempotency-Key. The service runs with
// EVENTSTORE_URL at the EventStoreDB protocol test server, which applies the
// append and drops its reply.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Kysely } from 'kysely';
import { EsdbCluster } from './support/eventstoredb-server.ts';
import { merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('a keyed request whose append was applied but whose reply was lost', () => {
  let cluster: EsdbCluster;
  let svc: RunningService;
  let key: string;
  before(async () => {
    cluster = await EsdbCluster.start();
    svc = await startTestService({ RATE_LIMITS: 'off', EVENTSTORE_URL: cluster.url() });
    key = (await merchantWithKey(svc)).key;
  });
  after(async () => {
    await svc.close();
    cluster.stop();
  });

  /** What the held claim of a failed request waits for: a minute, passed here at once. */
  const letTheClaimLapse = () =>
    (svc.service.database.db as Kysely<any>)
      .updateTable('idempotency_keys')
      .set({ created_at: new Date(Date.now() - 10 * 60_000) })
      .where('status_code', 'is', null)
      .execute();

  for (const [path, body] of [
    ['/api/v1/invoices', { amount: '41.5', currency: 'USD' }],
    ['/api/v1/payments', { amount: '42.5', currency: 'USD', chain: 'tron' }],
  ] as const) {
    it(`POST ${path} retried creates nothing new: it answers the invoice the first one created`, async () => {
      const headers = { 'idempotency-key': `lost-${path}` };
      cluster.leader().faults.loseRepliesOf = /^invoice-/;
      cluster.leader().faults.loseAppendReplies = 1;
      const first = await svc.call('POST', path, { token: key, body, headers });
      assert.ok(first.status >= 500, `the lost reply is a failure (${first.status})`);
      assert.equal(cluster.leader().faults.loseAppendReplies, 0, 'the invoice was appended');
      await letTheClaimLapse();
      const retry = await svc.call('POST', path, { token: key, body, headers });
      assert.equal(retry.status, 201);
      const list = await svc.call('GET', '/api/v1/invoices?limit=100', { token: key });
      const created = list.body.data.filter((invoice: any) => invoice.amount === body.amount);
      assert.equal(created.length, 1, 'one invoice for one request');
      assert.equal(created[0].id, retry.body.data.paymentId ?? retry.body.data.id);
    });
  }
});
