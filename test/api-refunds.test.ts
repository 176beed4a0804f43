// Refunds over real HTTP on the sandbox chains (refunds.md): what an invoice
// can give back, and the invoice's refundStatus.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { defaultConfirmations } from '../api/config.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('refunds API', () => {
  let svc: RunningService;
  let key: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
    key = (await merchantWithKey(svc)).key;
  });
  after(() => svc.close());

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const transfer = async (to: string, amount: string, token: string) => {
    const res = await admin('POST', '/dev/v1/chains/ethereum/transfers', { to, amount, token });
    assert.equal(res.status, 201, JSON.stringify(res.body));
  };

  /** A 100 USD invoice paid 120 USDT, and 0.5 ETH sent to its address by mistake, all confirmed. */
  async function overpaidInvoice() {
    const created = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const p = created.body.data;
    await transfer(p.address, '120.00000000', 'USDT');
    await transfer(p.address, '0.50000000', 'ETH');
    await admin('POST', '/dev/v1/chains/ethereum/blocks', { count: defaultConfirmations.ethereum });
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/status`)).body.data,
      (s) => s.status === 'confirmed',
    );
    return p.paymentId as string;
  }

  it('says per token what was received, and that all of it is refundable, the overpaid part and the wrong token as excess', async () => {
    const id = await overpaidInvoice();
    const refundable = await eventually(
      () => svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: key }),
      (res) => res.body.data?.length === 2,
    );
    assert.equal(refundable.status, 200);
    assert.deepEqual(refundable.body.data, [
      {
        chain: 'ethereum',
        token: 'USDT',
        received: '120.00000000',
        refunded: '0.00000000',
        pending: '0.00000000',
        refundable: '120.00000000',
        excess: '20.00000000',
      },
      {
        chain: 'ethereum',
        token: 'ETH',
        received: '0.50000000',
        refunded: '0.00000000',
        pending: '0.00000000',
        refundable: '0.50000000',
        excess: '0.50000000',
      },
    ]);
    const invoice = await svc.call('GET', `/api/v1/invoices/${id}`, { token: key });
    assert.equal(invoice.body.data.refundStatus, 'none');
  });

  it("needs refunds:read, and answers 404 for another merchant's invoice", async () => {
    const id = await overpaidInvoice();
    const readOnly = (await merchantWithKey(svc, { permissions: ['invoices:read'] })).key;
    const forbidden = await svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: readOnly });
    assert.equal(forbidden.status, 403);
    const other = (await merchantWithKey(svc, { permissions: ['refunds:read'] })).key;
    const missing = await svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: other });
    assert.equal(missing.status, 404);
    assert.equal(missing.body.message, 'Invoice not found');
  });
});
