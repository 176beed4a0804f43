// The service with its events in EventStoreDB (EVENTSTORE_URL at the gRPC
// protocol test server, two nodes found by gossip): a sandbox payment
// confirmed, settled and paid out exactly once, with the leader failing over
// midway and the old leader left behind on a stale snapshot.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EsdbCluster } from './support/eventstoredb-server.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

const TRON_WALLET = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';

describe('the service on EventStoreDB (protocol test server)', () => {
  let cluster: EsdbCluster;
  let svc: RunningService;
  before(async () => {
    cluster = await EsdbCluster.start({ nodes: 2 });
    svc = await startTestService({
      RATE_LIMITS: 'off',
      CHAIN_TRON_CONFIRMATIONS: '3',
      EVENTSTORE_URL: cluster.url({ discover: true }),
    });
  });
  after(async () => {
    await svc.close();
    cluster.stop();
  });

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;

  it('a sandbox payment goes from invoice to settlement, one payout, across a leader failover', async () => {
    const { key, merchant } = await merchantWithKey(svc);
    await admin('PATCH', `/admin/v1/merchants/${merchant.id}`, { settlementWallets: { tron: TRON_WALLET } });
    const payment = (
      await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount: '100', currency: 'USD', chain: 'tron', token: 'USDT' },
      })
    ).body.data;
    await admin('POST', '/dev/v1/chains/tron/transfers', {
      to: payment.address,
      amount: payment.cryptoAmount,
      token: 'USDT',
    });

    // Midway: the leader steps down and stops replicating.
    const [first, second] = cluster.nodes;
    cluster.failover(second!);
    first!.lag();

    await admin('POST', '/dev/v1/chains/tron/blocks', { count: 2 });
    await eventually(
      () => status(payment.paymentId),
      (s) => s.status === 'confirmed' || s.status === 'settled',
    );
    const submitted = await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${payment.paymentId}/settlement`, { token: key })).body.data,
      (s) => s?.status === 'submitted' || s?.status === 'completed',
    );
    await admin('POST', '/dev/v1/chains/tron/blocks', { count: 2 });
    const settled = await eventually(
      () => status(payment.paymentId),
      (s) => s.status === 'settled',
    );
    assert.equal(settled.settledAmount, '99.000000');
    assert.equal(settled.txHash, submitted.transactionHash);

    const ledger = svc.service.sandbox!.ledgers.get('tron')!;
    const { height } = await ledger.head();
    const payouts = [];
    for (let h = 1; h <= height; h++) {
      for (const t of (await ledger.block(h))!.transfers) if (t.to === TRON_WALLET) payouts.push(t);
    }
    assert.equal(payouts.length, 1, 'one payout');
    assert.equal(payouts[0]!.amount, 99_000_000n);
    assert.ok(
      second!.calls.some((call) => call.method === 'BatchAppend'),
      'the new leader took the writes after the failover',
    );
  });
});
