// Reads after writes while the read models are held behind (issue 24, item
// 11): the wait for them ends in a 503 in the error envelope, never in an
// answer that denies the write (a fresh invoice's 404, a fresh key's 401).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

const CATCHING_UP = 'The service is catching up; try again shortly';

describe('read your writes while the read models are behind', () => {
  let svc: RunningService;
  let merchant: { id: string };
  let key: string;
  before(async () => {
    svc = await startTestService({ CHAINS: 'ethereum' });
    ({ merchant, key } = await merchantWithKey(svc));
    // Every projector stops where it is: nothing written from here on reaches the read models.
    await svc.service.projections.stop();
  });
  after(() => svc.close());

  it('answers a freshly created invoice with 503, not 404', async () => {
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '25.00', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const read = await svc.call('GET', `/api/v1/invoices/${created.body.data.paymentId}`, { token: key });
    assert.equal(read.status, 503, JSON.stringify(read.body));
    assert.deepEqual(
      { error: read.body.error, message: read.body.message, hasCorrelationId: typeof read.body.correlationId },
      { error: 'Service Unavailable', message: CATCHING_UP, hasCorrelationId: 'string' },
    );
  });

  it('answers the creation of a key with 503, not with a key that then gets 401', async () => {
    const issued = await svc.call('POST', `/admin/v1/merchants/${merchant.id}/api-keys`, {
      token: svc.adminToken,
      body: {},
    });
    assert.equal(issued.status, 503, JSON.stringify(issued.body));
    assert.equal(issued.body.message, CATCHING_UP);
  });
});
