// The steps of a refund test on a real chain's test node, over the service's
// HTTP API: an invoice, its settlement, a refund created and approved, and
// waiting for either to finish while blocks are produced.
import assert from 'node:assert/strict';
import type { ChainName } from '../../domain/catalogue.ts';
import { eventuallyMining } from './merchant.ts';
import type { RunningService } from './service.ts';
import { settlementAmounts } from './settlement.ts';

export type RefundWallets = { chain: string; address: string; balances: Record<string, string | null> }[];

/** The calls of a refund test on `chain`; `mine` produces a block between looks. */
export function refundFlow(svc: RunningService, chain: ChainName, mine: () => unknown) {
  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const invoiceOf = async (id: string, key: string) =>
    (await svc.call('GET', `/api/v1/invoices/${id}`, { token: key })).body.data;
  const refundOf = async (id: string, key: string) =>
    (await svc.call('GET', `/api/v1/refunds/${id}`, { token: key })).body.data;
  const settlementOf = async (id: string, key: string) =>
    (await svc.call('GET', `/api/v1/settlements?invoiceId=${id}`, { token: key })).body.data?.[0];
  const until = <T>(read: () => Promise<T>, done: (value: T) => boolean) => eventuallyMining(mine, read, done, 90_000);

  return {
    admin,
    invoiceOf,
    refundOf,
    settlementOf,
    settlementPriced: async (id: string, key: string) =>
      settlementAmounts((await svc.call('GET', `/api/v1/invoices/${id}/events`, { token: key })).body.data),
    setWallet: (merchantId: string, wallet: string) =>
      admin('PATCH', `/admin/v1/merchants/${merchantId}`, { settlementWallets: { [chain]: wallet } }),
    refundWallets: async (key: string) =>
      (await svc.call('GET', '/api/v1/refund-wallets', { token: key })).body.data as RefundWallets,

    async invoice(key: string, token: string | undefined, amount: string) {
      const res = await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount, currency: 'USD', chain, ...(token && { token }) },
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      return res.body.data as { paymentId: string; address: string; cryptoAmount: string };
    },

    /** A refund created and approved: the approval's answer. */
    async refund(key: string, invoiceId: string, body: Record<string, unknown>) {
      const created = await svc.call('POST', `/api/v1/invoices/${invoiceId}/refunds`, { token: key, body });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const approved = await svc.call('POST', `/api/v1/refunds/${created.body.data.id}/approve`, { token: key });
      assert.equal(approved.status, 200, JSON.stringify(approved.body));
      return approved.body.data as {
        id: string;
        status: string;
        fundedFrom: string;
        amount: string;
        networkFee: string;
      };
    },

    /** Until the payment is confirmed and its settlement requested (it waits there without a merchant wallet). */
    confirmed: (id: string, key: string) =>
      until(
        () => settlementOf(id, key),
        (s) => s !== undefined,
      ),
    settled: (id: string, key: string) =>
      until(
        () => invoiceOf(id, key),
        (i) => i.status === 'settled',
      ),
    completed: (id: string, key: string) =>
      until(
        () => refundOf(id, key),
        (r) => r.status === 'completed',
      ),
  };
}
