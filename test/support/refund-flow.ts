// The service's steps of a refund over HTTP, shared by the refund tests on
// real-chain test nodes: an invoice on the chain, its settlement, a refund
// created and approved, and waiting while blocks are mined.
import assert from 'node:assert/strict';
import { eventuallyMining } from './merchant.ts';
import type { RunningService } from './service.ts';
import { settlementAmounts } from './settlement.ts';

/** `service` is read at each step (a suite starts it in `before`); `mine` produces a block. */
export function refundFlow(service: () => RunningService, chain: string, mine: () => unknown) {
  const call = (method: string, path: string, key: string, body?: unknown) =>
    service().call(method, path, { token: key, body });
  const refundOf = async (id: string, key: string) => (await call('GET', `/api/v1/refunds/${id}`, key)).body.data;
  const settlementOf = async (id: string, key: string) =>
    (await call('GET', `/api/v1/settlements?invoiceId=${id}`, key)).body.data?.[0];

  return {
    refundOf,
    settlementOf,
    invoiceOf: async (id: string, key: string) => (await call('GET', `/api/v1/invoices/${id}`, key)).body.data,
    /** The settlement's amounts as its history last priced them. */
    settlementPriced: async (id: string, key: string) =>
      settlementAmounts((await call('GET', `/api/v1/invoices/${id}/events`, key)).body.data),
    setWallet: (merchantId: string, wallet: string) =>
      call('PATCH', `/admin/v1/merchants/${merchantId}`, service().adminToken, {
        settlementWallets: { [chain]: wallet },
      }),

    async invoice(key: string, token: string | undefined, amount: string) {
      const res = await call('POST', '/api/v1/payments', key, {
        amount,
        currency: 'USD',
        chain,
        ...(token && { token }),
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
    },

    /** Waits until the invoice's payment is confirmed and its settlement requested, mining. */
    confirmed: (id: string, key: string) =>
      eventuallyMining(
        mine,
        () => settlementOf(id, key),
        (s) => s !== undefined,
      ),

    /** A refund created and approved: the approval's answer. */
    async refund(key: string, invoiceId: string, body: Record<string, unknown>) {
      const created = await call('POST', `/api/v1/invoices/${invoiceId}/refunds`, key, body);
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const approved = await call('POST', `/api/v1/refunds/${created.body.data.id}/approve`, key);
      assert.equal(approved.status, 200, JSON.stringify(approved.body));
      return approved.body.data as {
        id: string;
        status: string;
        fundedFrom: string;
        amount: string;
        networkFee: string;
      };
    },

    completed: (id: string, key: string) =>
      eventuallyMining(
        mine,
        () => refundOf(id, key),
        (r) => r.status === 'completed',
        90_000,
      ),
  };
}
