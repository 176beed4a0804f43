// Expires open invoices whose time has run out on the business clock. The
// decider decides: an invoice paid in full that waits for confirmations is
// left alone, and one expired twice stays expired once. An invoice waits
// until the watchers of its chains have seen everything up to its deadline.
//
// It finds its work in its own to-do table, `expiring_invoices`: one row per
// invoice that time running out would expire (open and not paid in full),
// with its deadline and the chains it has addresses on. Its follower of the
// event log writes the rows in the same transaction as its checkpoint, so a
// crash replays at most one batch, and the scheduler reads no read model.
import type { Kysely, Migration } from 'kysely';
import type { Clock } from '../adapters/clock.ts';
import type { Projector } from '../adapters/event-store/followers.ts';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import { StreamFolds } from '../adapters/event-store/stream-folds.ts';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { ddl, migrate } from '../adapters/sql/migrate.ts';
import { replaceRows } from '../adapters/sql/rows.ts';
import { awaitsPayment, invoiceDecider, type Invoice } from '../domain/invoice.ts';
import { streams } from '../domain/streams.ts';
import type { InvoiceCommands } from './invoices.ts';
import { Periodic, type PeriodicOptions } from './periodic.ts';

interface ExpiryTables {
  expiring_invoices: { invoice_id: string; expires_at: Date; chains: string[] };
}

export const expiryMigrations: Record<string, Migration> = {
  '0001_expiring_invoices': ddl(
    `create table expiring_invoices (
      invoice_id uuid primary key,
      expires_at timestamptz not null,
      chains text[] not null
    )`,
    'create index expiring_invoices_expires_at on expiring_invoices (expires_at)',
  ),
};

export async function migrateExpiringInvoices(database: SqlDatabase): Promise<void> {
  await migrate(database.db, 'expiry_migrations', expiryMigrations);
}

const invoiceFolds = new StreamFolds(streams.invoice.holds, invoiceDecider);

/** Keeps `expiring_invoices` as each invoice a batch touches stands after it. */
export const expiringInvoicesProjector: Projector<Map<string, Invoice | null>> = {
  name: 'expiring-invoices',
  tables: ['expiring_invoices'],
  prepare: (batch: readonly RecordedEvent[], store: EventStore) => invoiceFolds.ofBatch(batch, store),
  async applyBatch(trx: Kysely<ExpiryTables>, _batch, touched: Map<string, Invoice | null>) {
    const invoices = [...touched.values()].filter((invoice) => invoice !== null);
    const open = invoices.filter(awaitsPayment).map((invoice) => ({
      invoice_id: invoice.id,
      expires_at: new Date(invoice.expiresAt),
      chains: [...new Set(invoice.addresses.map((a) => a.chain))],
    }));
    const done = invoices.filter((invoice) => !awaitsPayment(invoice)).map((invoice) => invoice.id);
    await replaceRows(trx, 'expiring_invoices', 'invoice_id', open, done);
  },
};

export class ExpiryScheduler extends Periodic {
  constructor(
    private readonly db: Kysely<any>,
    private readonly invoices: Pick<InvoiceCommands, 'expire'>,
    private readonly clock: Clock,
    private readonly options: PeriodicOptions & {
      /** Business time up to which the chain's transfers are all on their invoices; none: not yet known. */
      watchedThrough?: (chain: string) => Date | undefined;
      /**
       * Resolves once the to-do table's follower has read the whole log: an
       * address given an invoice a moment ago is then among its chains, and
       * its chain's watcher is waited for.
       */
      caughtUp?: () => Promise<void>;
    } = {},
  ) {
    super(options);
  }

  pass = () => this.expireDue();

  /** Expires what is due; returns how many invoices it asked to expire. */
  async expireDue(): Promise<number> {
    await this.options.caughtUp?.();
    const due = await (this.db as Kysely<ExpiryTables>)
      .selectFrom('expiring_invoices')
      .select(['invoice_id', 'expires_at', 'chains'])
      .where('expires_at', '<=', this.clock.now())
      .orderBy('expires_at')
      .limit(200)
      .execute();
    const ready = due.filter((invoice) => this.watchedPastDeadline(invoice)).map((invoice) => invoice.invoice_id);
    for (const id of ready) await this.invoices.expire(id);
    return ready.length;
  }

  /** Whether the invoice's chains have been watched up to its deadline: a payment made in time is on it. */
  private watchedPastDeadline({ expires_at, chains }: { expires_at: Date; chains: string[] }): boolean {
    const watchedThrough = this.options.watchedThrough;
    if (!watchedThrough) return true;
    const deadline = new Date(expires_at).getTime();
    return chains.every((chain) => (watchedThrough(chain)?.getTime() ?? -Infinity) >= deadline);
  }
}
