// The chain watchers' to-do tables, kept by their own follower of the event
// log in the same transaction as its checkpoint (a crash replays at most one
// batch), so that a watcher reads no read model and waits for no projector:
// - `watched_addresses`: every deposit address with its invoice, and when the
//   invoice closed (expired or cancelled), after which it is watched for the
//   monitoring window only, to see late payments;
// - `watched_payments`: the payments recorded and not taken back by a reorg,
//   whose confirmations the watcher counts and whose blocks it checks for reorgs.
// A watcher waits for this follower to have read every event committed before
// it reads a block's payments, as it waited for the invoices read model.
import type { Kysely, Migration } from 'kysely';
import type { Projector } from '../adapters/event-store/followers.ts';
import { foldsOf, StreamFolds, type Folded } from '../adapters/event-store/stream-folds.ts';
import { ddl } from '../adapters/sql/migrate.ts';
import { replaceRows } from '../adapters/sql/rows.ts';
import { invoiceDecider } from '../domain/invoice.ts';
import { paymentDecider } from '../domain/payment.ts';
import { streams } from '../domain/streams.ts';

export interface WatchListTables {
  watched_addresses: { chain: string; address: string; invoice_id: string; closed_at: Date | null };
  watched_payments: {
    payment_id: string;
    chain: string;
    tx_hash: string;
    output_index: number;
    block_number: number;
    block_hash: string;
    status: 'detected' | 'confirmed';
    confirmations: number;
  };
}

/** Part of the watcher's own migration set (commands/chain-watcher.ts). */
export const watchListMigrations: Record<string, Migration> = {
  '0003_watch_list': ddl(
    `create table watched_addresses (
      chain text not null,
      address text not null,
      invoice_id uuid not null,
      closed_at timestamptz,
      constraint watched_addresses_pk primary key (chain, address)
    )`,
    'create index watched_addresses_invoice on watched_addresses (invoice_id)',
    `create table watched_payments (
      payment_id uuid primary key,
      chain text not null,
      tx_hash text not null,
      output_index integer not null,
      block_number integer not null,
      block_hash text not null,
      status text not null,
      confirmations integer not null
    )`,
    'create index watched_payments_block on watched_payments (chain, block_number)',
  ),
};

const folds = {
  invoices: new StreamFolds(streams.invoice.holds, invoiceDecider),
  payments: new StreamFolds(streams.payment.holds, paymentDecider),
};

export const watchListProjector: Projector<Folded<typeof folds>> = {
  name: 'watch-list',
  tables: ['watched_addresses', 'watched_payments'],
  prepare: foldsOf(folds),

  async applyBatch(trx: Kysely<WatchListTables>, _batch, { invoices, payments }) {
    const touchedInvoices = [...invoices.values()].filter((invoice) => invoice !== null);
    const addresses = touchedInvoices.flatMap((invoice) =>
      invoice.addresses.map((a) => ({
        chain: a.chain,
        address: a.address,
        invoice_id: invoice.id,
        closed_at: invoice.status === 'expired' ? new Date(invoice.updatedAt) : null,
      })),
    );
    const invoiceIds = touchedInvoices.map((invoice) => invoice.id);
    await replaceRows(trx, 'watched_addresses', 'invoice_id', addresses, invoiceIds);
    const touchedPayments = [...payments.values()].filter((payment) => payment !== null);
    const live = touchedPayments.flatMap((p) =>
      p.status === 'reorged'
        ? []
        : [
            {
              payment_id: p.paymentId,
              chain: p.chain,
              tx_hash: p.txHash,
              output_index: p.outputIndex,
              block_number: p.blockNumber,
              block_hash: p.blockHash,
              status: p.status,
              confirmations: p.confirmations,
            },
          ],
    );
    const paymentIds = touchedPayments.map((p) => p.paymentId);
    await replaceRows(trx, 'watched_payments', 'payment_id', live, paymentIds);
  },
};
