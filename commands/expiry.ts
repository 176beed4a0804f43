// Expires open invoices whose time has run out on the business clock. The
// decider decides: an invoice paid in full that waits for confirmations is
// left alone, and one expired twice stays expired once. An invoice waits
// until the watchers of its chains have seen everything up to its deadline.
import type { Kysely } from 'kysely';
import type { Clock } from '../adapters/clock.ts';
import type { ReadModelTables } from '../projections/schema.ts';
import type { InvoiceCommands } from './invoices.ts';
import { Periodic, type PeriodicOptions } from './periodic.ts';

export class ExpiryScheduler extends Periodic {
  constructor(
    private readonly db: Kysely<ReadModelTables>,
    private readonly invoices: Pick<InvoiceCommands, 'expire'>,
    private readonly clock: Clock,
    private readonly options: PeriodicOptions & {
      /** Business time up to which the chain's transfers are all on their invoices; none: not yet known. */
      watchedThrough?: (chain: string) => Date | undefined;
    } = {},
  ) {
    super(options);
  }

  pass = () => this.expireDue();

  /** Expires what is due; returns how many invoices it asked to expire. */
  async expireDue(): Promise<number> {
    const due = await this.db
      .selectFrom('invoices')
      .select(['id', 'expires_at'])
      .where('status', 'in', ['pending', 'partial'])
      .where('expires_at', '<=', this.clock.now())
      // Paid in full and waiting for confirmations: time running out changes nothing.
      .where('payment_progress', '<', 100)
      .orderBy('expires_at')
      .limit(200)
      .execute();
    const ready = await this.watchedPastDeadline(due);
    for (const id of ready) await this.invoices.expire(id);
    return ready.length;
  }

  /** The invoices whose chains have been watched up to their deadline: a payment made in time is on them. */
  private async watchedPastDeadline(due: { id: string; expires_at: Date }[]): Promise<string[]> {
    const watchedThrough = this.options.watchedThrough;
    if (!watchedThrough || due.length === 0) return due.map((d) => d.id);
    const addresses = await this.db
      .selectFrom('invoice_addresses')
      .select(['invoice_id', 'chain'])
      .where(
        'invoice_id',
        'in',
        due.map((d) => d.id),
      )
      .execute();
    return due
      .filter(({ id, expires_at }) =>
        addresses
          .filter((a) => a.invoice_id === id)
          .every((a) => (watchedThrough(a.chain)?.getTime() ?? -Infinity) >= new Date(expires_at).getTime()),
      )
      .map((d) => d.id);
  }
}
