// Projects invoices, their deposit addresses and their payments into
// `invoices`, `invoice_addresses` and `payments`, which the list, get and
// status endpoints and the chain watcher read.
import type { Kysely } from 'kysely';
import type { RecordedEvent } from '../adapters/event-store/port.ts';
import {
  invoiceDecider,
  invoicePaymentView,
  refundStatusOf,
  type Invoice,
  type InvoiceEvent,
  type RateProvenance,
} from '../domain/invoice.ts';
import { paymentDecider, type Payment } from '../domain/payment.ts';
import { dateOrNull, foldsOf, rowsOf, StreamFolds, upsertRows, type Folded } from './batch.ts';
import type { Projector } from '../adapters/event-store/followers.ts';
import type { ReadModelTables } from './schema.ts';
import { streams } from '../domain/streams.ts';

const isInvoiceStream = streams.invoice.holds;
const isPaymentStream = streams.payment.holds;

/** The invoices and payments a batch touches, each as of the batch's last event of it. */
const folds = {
  invoices: new StreamFolds(isInvoiceStream, invoiceDecider),
  payments: new StreamFolds(isPaymentStream, paymentDecider),
};

export const invoicesProjector: Projector<Folded<typeof folds>> = {
  name: 'invoices',
  tables: ['invoices', 'invoice_addresses', 'payments'],
  prepare: foldsOf(folds),

  // Each invoice's and payment's row once, as of its last event in the batch
  // (see batch.ts); the new addresses in one statement, requotes after them.
  async applyBatch(trx: Kysely<ReadModelTables>, batch, { invoices, payments }) {
    await upsertRows(trx, 'invoices', ['id'], rowsOf(invoices.values(), invoiceRowOf));
    const addressRows = batch
      .filter((e) => e.type === 'AddressAssigned' && isInvoiceStream(e.streamId))
      .map((e) => addressRowOf(invoices.get(e.streamId)!.id, e));
    await upsertRows(trx, 'invoice_addresses', ['chain', 'address'], addressRows, 'keep');
    for (const event of batch) {
      if (event.type === 'AddressRequoted' && isInvoiceStream(event.streamId)) await requoteAddress(trx, event);
    }
    await upsertRows(trx, 'payments', ['payment_id'], rowsOf(payments.values(), paymentRowOf));
  },
};

/** An invoice's row in `invoices`; the contract's invoice view is made from it. */
export function invoiceRowOf(invoice: Invoice) {
  const view = invoicePaymentView(invoice);
  return {
    id: invoice.id,
    merchant_id: invoice.merchantId,
    amount: invoice.amount,
    currency: invoice.currency,
    status: invoice.status,
    cancelled: invoice.cancelled,
    description: invoice.description,
    expires_at: new Date(invoice.expiresAt),
    webhook_url: invoice.webhookUrl,
    metadata: invoice.metadata,
    subscriber_id: invoice.subscriberId,
    chain: view.chain,
    token: view.token,
    crypto_amount: view.cryptoAmount,
    payment_status: view.paymentStatus,
    payment_status_detail: view.paymentStatusDetail,
    payment_issue_type: view.paymentIssueType,
    paid_late: view.paidLate,
    total_received_amount: view.totalReceivedAmount,
    total_received_currency: view.totalReceivedCurrency,
    remaining_amount: view.remainingAmount,
    payment_progress: view.paymentProgress,
    has_detected_payment: view.hasDetectedPayment,
    detected_payment_amount: view.detectedPaymentAmount,
    detected_payment_currency: view.detectedPaymentCurrency,
    mismatch_payment: view.mismatchPayment,
    tx_hash: view.txHash,
    settled_amount: invoice.settlement?.settledAmount ?? null,
    refund_status: refundStatusOf(invoice),
    created_at: new Date(invoice.createdAt),
    updated_at: new Date(invoice.updatedAt),
  };
}

function addressRowOf(invoiceId: string, recorded: RecordedEvent) {
  const d = (recorded as unknown as Extract<InvoiceEvent, { type: 'AddressAssigned' }>).data;
  return {
    invoice_id: invoiceId,
    chain: d.chain,
    token: d.token,
    token_decimals: d.tokenDecimals,
    address: d.address,
    derivation_index: d.derivationIndex,
    rate: d.rate,
    crypto_amount: d.cryptoAmount,
    quoted_at: new Date(d.quotedAt),
    rate_valid_until: new Date(d.rateValidUntil),
    ...provenanceOf(d),
  };
}

/** The sources a quote used and when its rate was observed, where it recorded them. */
function provenanceOf(quote: RateProvenance) {
  const used = quote.rateSources?.filter((s) => s.used).map((s) => s.name);
  return {
    rate_source: used?.length ? used.join('+') : null,
    rate_observed_at: quote.rateObservedAt ? new Date(quote.rateObservedAt) : null,
  };
}

async function requoteAddress(trx: Kysely<ReadModelTables>, recorded: RecordedEvent) {
  const d = (recorded as unknown as Extract<InvoiceEvent, { type: 'AddressRequoted' }>).data;
  await trx
    .updateTable('invoice_addresses')
    .set({
      rate: d.rate,
      crypto_amount: d.cryptoAmount,
      quoted_at: new Date(d.quotedAt),
      rate_valid_until: new Date(d.rateValidUntil),
      ...provenanceOf(d),
    })
    .where('chain', '=', d.chain)
    .where('address', '=', d.address)
    .execute();
}

function paymentRowOf(p: Payment) {
  return {
    payment_id: p.paymentId,
    invoice_id: p.invoiceId,
    chain: p.chain,
    token: p.token,
    token_decimals: p.tokenDecimals,
    amount: p.amount.toString(),
    to_address: p.toAddress,
    tx_hash: p.txHash,
    output_index: p.outputIndex,
    block_number: p.blockNumber,
    block_hash: p.blockHash,
    wrong_token: p.wrongToken,
    status: p.status,
    confirmations: p.confirmations,
    required_confirmations: p.requiredConfirmations,
    detected_at: new Date(p.detectedAt),
    confirmed_at: dateOrNull(p.confirmedAt),
  };
}
