// Projects invoices, their deposit addresses and their payments into
// `invoices`, `invoice_addresses` and `payments`, which the list, get and
// status endpoints and the chain watcher read.
import { sql, type Kysely } from 'kysely';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import { invoiceDecider, invoicePaymentView, type Invoice, type InvoiceEvent } from '../domain/invoice.ts';
import type { PaymentEvent } from '../domain/payment.ts';
import type { Projector } from './engine.ts';
import type { InvoiceAddressesTable, InvoicesTable, ReadModelTables } from './schema.ts';

const isInvoiceStream = (streamId: string) => streamId.startsWith('invoice-');

/**
 * The invoices a batch touches, each as of the batch's last event of it:
 * folded from what the batch holds of the stream, read whole before the
 * transaction only when the batch does not begin it (a new invoice's events
 * are all in the batch).
 */
type InvoicesInBatch = Map<string, Invoice | null>;

export const invoicesProjector: Projector<InvoicesInBatch> = {
  name: 'invoices',
  tables: ['invoices', 'invoice_addresses', 'payments'],

  async prepare(batch: readonly RecordedEvent[], store: EventStore) {
    const inBatch = new Map<string, RecordedEvent[]>();
    for (const event of batch.filter((e) => isInvoiceStream(e.streamId))) {
      const events = inBatch.get(event.streamId);
      if (events) events.push(event);
      else inBatch.set(event.streamId, [event]);
    }
    const invoices: InvoicesInBatch = new Map();
    await Promise.all(
      [...inBatch].map(async ([streamId, events]) => {
        const first = events[0]!.revision;
        const last = events.at(-1)!.revision;
        const history = first === 0 ? events : (await store.readStream(streamId)).filter((e) => e.revision <= last);
        const invoice = history.reduce(
          (state, e) => invoiceDecider.evolve(state, { type: e.type, data: e.data } as InvoiceEvent),
          invoiceDecider.initialState,
        );
        invoices.set(streamId, invoice);
      }),
    );
    return invoices;
  },

  // The batch commits whole, so each invoice's row is written once, as of
  // its last event in the batch, with all others in one statement, and the
  // new addresses in another: the rows a batch leaves are those of its last
  // event, and replaying any prefix of the log gives the same rows.
  async applyBatch(trx: Kysely<ReadModelTables>, batch: readonly RecordedEvent[], invoices: InvoicesInBatch) {
    const invoiceRows = [...invoices.values()].flatMap((invoice) => (invoice ? [invoiceRowOf(invoice)] : []));
    if (invoiceRows.length > 0) {
      const columns = Object.keys(invoiceRows[0]!) as (keyof InvoicesTable)[];
      await trx
        .insertInto('invoices')
        .columns(columns)
        .expression(selectRows('invoices', columns, invoiceRows))
        .onConflict((oc) =>
          oc.column('id').doUpdateSet(Object.fromEntries(columns.map((c) => [c, sql.ref(`excluded.${c}`)]))),
        )
        .execute();
    }
    const addressRows = batch
      .filter((e) => e.type === 'AddressAssigned' && isInvoiceStream(e.streamId))
      .map((e) => addressRowOf(invoices.get(e.streamId)!.id, e));
    if (addressRows.length > 0) {
      const columns = Object.keys(addressRows[0]!) as (keyof InvoiceAddressesTable)[];
      await trx
        .insertInto('invoice_addresses')
        .columns(columns)
        .expression(selectRows('invoice_addresses', columns, addressRows))
        .onConflict((oc) => oc.columns(['chain', 'address']).doNothing())
        .execute();
    }
    // In order, after the addresses they change; a payment's rows are its own.
    for (const event of batch) {
      if (event.type === 'AddressRequoted' && isInvoiceStream(event.streamId)) await requoteAddress(trx, event);
      if (event.streamId.startsWith('payment-')) await applyPaymentEvent(trx, event);
    }
  },
};

/**
 * A batch's rows as one JSON parameter, read back with the table's own
 * column types: a VALUES list would bind every cell (30 columns × 500
 * invoices is 15,000 parameters for PostgreSQL to parse and plan).
 */
function selectRows(table: keyof ReadModelTables, columns: readonly string[], rows: readonly object[]) {
  return sql`select ${sql.join(columns.map((c) => sql.ref(c)))}
    from jsonb_populate_recordset(null::${sql.table(table)}, ${JSON.stringify(rows)}::jsonb)`;
}

function invoiceRowOf(invoice: Invoice) {
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
    })
    .where('chain', '=', d.chain)
    .where('address', '=', d.address)
    .execute();
}

async function applyPaymentEvent(trx: Kysely<ReadModelTables>, recorded: RecordedEvent) {
  const event = { type: recorded.type, data: recorded.data } as PaymentEvent;
  switch (event.type) {
    case 'PaymentDetected': {
      const d = event.data;
      const row = {
        payment_id: d.paymentId,
        invoice_id: d.invoiceId,
        chain: d.chain,
        token: d.token,
        token_decimals: d.tokenDecimals,
        amount: d.amount,
        to_address: d.toAddress,
        tx_hash: d.txHash,
        output_index: d.outputIndex,
        block_number: d.blockNumber,
        block_hash: d.blockHash,
        wrong_token: d.wrongToken,
        status: 'detected',
        confirmations: d.confirmations,
        required_confirmations: d.requiredConfirmations,
        detected_at: new Date(d.detectedAt),
        confirmed_at: null,
      };
      await trx
        .insertInto('payments')
        .values(row)
        .onConflict((oc) => oc.column('payment_id').doUpdateSet(row))
        .execute();
      return;
    }
    case 'PaymentConfirmationsUpdated':
      await trx
        .updateTable('payments')
        .set({ confirmations: event.data.confirmations })
        .where('payment_id', '=', event.data.paymentId)
        .execute();
      return;
    case 'PaymentMined':
      await trx
        .updateTable('payments')
        .set({
          block_number: event.data.blockNumber,
          block_hash: event.data.blockHash,
          confirmations: event.data.confirmations,
        })
        .where('payment_id', '=', event.data.paymentId)
        .execute();
      return;
    case 'PaymentConfirmed':
      await trx
        .updateTable('payments')
        .set({
          status: 'confirmed',
          confirmations: event.data.confirmations,
          confirmed_at: new Date(event.data.confirmedAt),
        })
        .where('payment_id', '=', event.data.paymentId)
        .execute();
      return;
    case 'PaymentReorged':
      await trx
        .updateTable('payments')
        .set({ status: 'reorged' })
        .where('payment_id', '=', event.data.paymentId)
        .execute();
      return;
  }
}
