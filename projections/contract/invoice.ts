// The invoice as the contract shows it (interface.md): the view the invoice
// endpoints answer with, the `data.invoice` the webhooks carry, the webhooks
// an invoice sends, and the sample the test event sends. One module for the
// routes, the webhook outbox and the test event alike; it lives under
// projections/ because the outbox projector builds the payload and nothing
// outside api/ may import api/.
import { randomUUID } from 'node:crypto';
import { invoicePaymentView, type Invoice } from '../../domain/invoice.ts';
import { invoiceRowOf } from '../invoices.ts';
import type { InvoicesTable } from '../schema.ts';

/** The webhooks an invoice sends (interface.md, "Webhooks"). */
export const INVOICE_WEBHOOKS = [
  'invoice.confirmed',
  'invoice.settled',
  'invoice.overpaid',
  'invoice.underpaid',
  'invoice.expired',
] as const;
export type InvoiceWebhook = (typeof INVOICE_WEBHOOKS)[number];

const iso = (value: Date | string) => new Date(value).toISOString();

/** Where the customer pays an invoice. */
export const paymentUrlOf = (baseUrl: string, invoiceId: string) => `${baseUrl}/checkout/${invoiceId}`;

/** The create, list and get shapes name four states: a partly paid invoice is still pending there. */
const contractStatus = (status: string) => (status === 'partial' ? 'pending' : status);

export interface InvoiceView {
  id: string;
  merchantId: string;
  amount: string;
  currency: string;
  status: string;
  description: string | null;
  expiresAt: string;
  webhookUrl: string | null;
  paymentUrl: string;
  /** none, partial or full (refunds.md) */
  refundStatus: string;
  createdAt: string;
  updatedAt: string;
}

/** The Invoice object of the invoice endpoints, from its row. */
export function invoiceView(
  row: Pick<
    InvoicesTable,
    | 'id'
    | 'merchant_id'
    | 'amount'
    | 'currency'
    | 'status'
    | 'description'
    | 'expires_at'
    | 'webhook_url'
    | 'refund_status'
    | 'created_at'
    | 'updated_at'
  >,
  baseUrl: string,
): InvoiceView {
  return {
    id: row.id,
    merchantId: row.merchant_id,
    amount: row.amount,
    currency: row.currency,
    status: contractStatus(row.status),
    description: row.description,
    expiresAt: iso(row.expires_at),
    webhookUrl: row.webhook_url,
    paymentUrl: paymentUrlOf(baseUrl, row.id),
    refundStatus: row.refund_status,
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
  };
}

/** The same view of an invoice just written, before its row exists (the create and cancel answers). */
export const invoiceViewOf = (invoice: Invoice, baseUrl: string) => invoiceView(invoiceRowOf(invoice), baseUrl);

/** `data.invoice` of a webhook: the invoice, its metadata and where its payment stands. */
export function invoicePayload(invoice: Invoice) {
  const view = invoicePaymentView(invoice);
  // The invoice's own fields as they are and in the contract's order, then where its payment stands.
  const { id, merchantId, amount, currency, status, description, expiresAt, createdAt, updatedAt, metadata } = invoice;
  return {
    ...{ id, merchantId, amount, currency, status, description, expiresAt, createdAt, updatedAt, metadata },
    subscriberId: invoice.subscriberId ?? null,
    chain: view.chain,
    cryptoCurrency: view.token,
    cryptoAmount: view.cryptoAmount,
    totalReceivedAmount: view.totalReceivedAmount,
    remainingAmount: view.remainingAmount,
    paymentIssueType: view.paymentIssueType,
    txHash: view.txHash,
    settledAmount: invoice.settlement?.settledAmount ?? null,
  };
}

export type InvoicePayload = ReturnType<typeof invoicePayload>;

/** `data.invoice` of a subscriber webhook: the invoice payload with where to pay it. */
export const subscriberInvoicePayload = (invoice: Invoice, baseUrl: string) => ({
  ...invoicePayload(invoice),
  paymentUrl: paymentUrlOf(baseUrl, invoice.id),
});

/** A sample `data.invoice` in the state `event` leaves an invoice (the test event's). */
export function sampleInvoicePayload(
  event: InvoiceWebhook,
  merchantId: string,
  now: Date,
): Omit<InvoicePayload, 'subscriberId'> {
  // The sample belongs to no subscriber: it has always been sent without `subscriberId`.
  const status: Record<InvoiceWebhook, Invoice['status']> = {
    'invoice.confirmed': 'confirmed',
    'invoice.settled': 'settled',
    'invoice.overpaid': 'confirmed',
    'invoice.underpaid': 'partial',
    'invoice.expired': 'expired',
  };
  const received: Partial<Record<InvoiceWebhook, string>> = {
    'invoice.overpaid': '30.00000000',
    'invoice.underpaid': '12.50000000',
    'invoice.expired': '0.00000000',
  };
  const totalReceivedAmount = received[event] ?? '25.00000000';
  const paid = totalReceivedAmount !== '0.00000000';
  return {
    id: randomUUID(),
    merchantId,
    amount: '25.00',
    currency: 'USD',
    status: status[event],
    description: 'Test invoice',
    expiresAt: new Date(now.getTime() + 30 * 60_000).toISOString(),
    createdAt: new Date(now.getTime() - 10 * 60_000).toISOString(),
    updatedAt: now.toISOString(),
    metadata: { orderId: 'test_order_123' },
    chain: 'tron',
    cryptoCurrency: 'USDT',
    cryptoAmount: '25.00000000',
    totalReceivedAmount,
    remainingAmount:
      event === 'invoice.underpaid' ? '12.50000000' : event === 'invoice.expired' ? '25.00000000' : '0.00000000',
    paymentIssueType: event === 'invoice.overpaid' ? 'overpaid' : event === 'invoice.underpaid' ? 'underpaid' : null,
    txHash: paid ? `test_${randomUUID().replace(/-/g, '')}` : null,
    settledAmount: event === 'invoice.settled' ? '24.75000000' : null,
  };
}
