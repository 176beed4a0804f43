// Issue 32, item 5: an invoice appended whose reply was lost (the store
// applied it, the service answered 5xx) must not be created a second time by
// the client's retry with the same Idempotency-Key: on EventStoreDB (the
// protocol test server applies the append and drops its reply) and on
// PostgreSQL (a proxy cuts the connection once the insert has committed).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Kysely } from 'kysely';
import { EsdbCluster } from './support/eventstoredb-server.ts';
import { merchantWithKey } from './support/merchant.ts';
import { startCutProxy, type CutProxy } from './support/pg-cut-proxy.ts';
import { freshPostgres } from './support/postgres.ts';
import { startTestService, type RunningService } from './support/service.ts';

const requests = [
  ['/api/v1/invoices', { amount: '41.5', currency: 'USD' }],
  ['/api/v1/payments', { amount: '42.5', currency: 'USD', chain: 'tron' }],
] as const;

/** What the held claim of a failed request waits for: a minute, passed here at once. */
const letTheClaimLapse = (svc: RunningService) =>
  (svc.service.database.db as Kysely<any>)
    .updateTable('idempotency_keys')
    .set({ created_at: new Date(Date.now() - 10 * 60_000) })
    .where('status_code', 'is', null)
    .execute();

/** The request, its reply lost after the invoice was stored, then retried: one invoice, the retry's. */
async function retriedAfterLostReply(
  svc: RunningService,
  key: string,
  [path, body]: (typeof requests)[number],
  loseNextInvoiceReply: () => void,
): Promise<void> {
  const headers = { 'idempotency-key': `lost-${path}` };
  loseNextInvoiceReply();
  const first = await svc.call('POST', path, { token: key, body, headers });
  assert.ok(first.status >= 500, `the lost reply is a failure (${first.status})`);
  await letTheClaimLapse(svc);
  const retry = await svc.call('POST', path, { token: key, body, headers });
  assert.equal(retry.status, 201);
  const list = await svc.call('GET', '/api/v1/invoices?limit=100', { token: key });
  const created = list.body.data.filter((invoice: any) => invoice.amount === body.amount);
  assert.equal(created.length, 1, 'one invoice for one request');
  assert.equal(created[0].id, retry.body.data.paymentId ?? retry.body.data.id);
}

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

  for (const request of requests) {
    it(`POST ${request[0]} retried creates nothing new: it answers the invoice the first one created`, async () => {
      await retriedAfterLostReply(svc, key, request, () => {
        cluster.leader().faults.loseRepliesOf = /^invoice-/;
        cluster.leader().faults.loseAppendReplies = 1;
      });
      assert.equal(cluster.leader().faults.loseAppendReplies, 0, 'the invoice was appended');
    });
  }
});

const postgres = await freshPostgres();
if (postgres) {
  describe('a keyed request whose insert committed on PostgreSQL but whose connection was cut', () => {
    let proxy: CutProxy;
    let svc: RunningService;
    let key: string;
    before(async () => {
      proxy = await startCutProxy(postgres.url);
      svc = await startTestService({ RATE_LIMITS: 'off', DATABASE_URL: proxy.url });
      key = (await merchantWithKey(svc)).key;
    });
    after(async () => {
      await svc.close();
      await proxy.close();
      await postgres.drop();
    });

    for (const request of requests) {
      it(`POST ${request[0]} retried creates nothing new: it answers the invoice the first one created`, async () => {
        const before = proxy.cuts;
        await retriedAfterLostReply(svc, key, request, () => proxy.cutAfterCommitOf(/es_events[\s\S]*invoice-/));
        assert.equal(proxy.cuts, before + 1, 'the connection was cut after the commit');
      });
    }
  });
}
