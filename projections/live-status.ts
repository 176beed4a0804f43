// Live invoice status for WebSocket clients, driven by the event log: each
// event that touches a watched invoice is waited for in the read model, then
// the status is read once and handed to every watcher of that invoice. No
// watcher ever polls the database.
import type { Kysely } from 'kysely';
import type { EventStore, RecordedEvent, Subscription } from '../adapters/event-store/port.ts';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import type { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { invoiceStatus, type InvoiceStatusView } from './invoice-queries.ts';
import type { ReadModelTables } from './schema.ts';
import { streams } from '../domain/streams.ts';

export type StatusListener = (status: InvoiceStatusView) => void;

export class LiveInvoiceStatus {
  private readonly listeners = new Map<string, Set<StatusListener>>();
  private subscription?: Subscription;
  /** The last event this hub has handled (or passed over because nobody watched). */
  private handledUpTo: string | undefined;

  constructor(
    private readonly store: EventStore,
    private readonly projections: ProjectionEngine,
    private readonly database: SqlDatabase,
    private readonly onError: (error: unknown) => void = () => {},
  ) {}

  /** Follows the log from where the invoices read model stands. */
  async start(): Promise<void> {
    const after = await this.projections.checkpointOf('invoices');
    this.subscription = this.store.subscribe({
      after,
      handler: (event) => this.handle(event),
      onError: this.onError,
    });
  }

  async stop(): Promise<void> {
    await this.subscription?.stop();
    this.listeners.clear();
  }

  /** Calls `listener` with every new status of the invoice; returns a function that stops it. */
  watch(invoiceId: string, listener: StatusListener): () => void {
    const set = this.listeners.get(invoiceId) ?? new Set();
    set.add(listener);
    this.listeners.set(invoiceId, set);
    return () => {
      set.delete(listener);
      if (set.size === 0) this.listeners.delete(invoiceId);
    };
  }

  /**
   * Waits until the read model shows every event this hub has handled. A
   * watcher that joins reads its first status after this, so an event passed
   * over just before it joined (nobody watched then) is in that status.
   */
  async caughtUp(): Promise<void> {
    if (this.handledUpTo === undefined) return;
    await this.projections.waitFor(this.handledUpTo, 10_000, ['invoices']).catch(this.onError);
  }

  get watchedInvoices(): number {
    return this.listeners.size;
  }

  private async handle(event: RecordedEvent): Promise<void> {
    this.handledUpTo = event.position;
    if (this.listeners.size === 0) return;
    try {
      const invoiceId = await this.invoiceOf(event);
      if (!invoiceId || !this.listeners.has(invoiceId)) return;
      await this.projections.waitFor(event.position, 30_000, ['invoices']);
      const status = await invoiceStatus(this.database, invoiceId);
      if (!status) return;
      for (const listener of this.listeners.get(invoiceId) ?? []) {
        try {
          listener(status);
        } catch (error) {
          this.onError(error);
        }
      }
    } catch (error) {
      // One event's trouble (a slow read model, a closed socket) must not hold
      // up the updates of every other socket; the watchers of this invoice get
      // its next change.
      this.onError(error);
    }
  }

  /** The invoice an event changes the status of, if any. */
  private async invoiceOf(event: RecordedEvent): Promise<string | undefined> {
    if (streams.invoice.holds(event.streamId)) return streams.invoice.idOf(event.streamId);
    if (!streams.payment.holds(event.streamId)) return undefined;
    // Confirmation counts show in the status; their events name only the payment.
    const data = event.data as { invoiceId?: string; paymentId?: string };
    if (data.invoiceId) return data.invoiceId;
    if (!data.paymentId) return undefined;
    await this.projections.waitFor(event.position, 30_000, ['invoices']);
    const row = await (this.database.db as Kysely<ReadModelTables>)
      .selectFrom('payments')
      .select('invoice_id')
      .where('payment_id', '=', data.paymentId)
      .executeTakeFirst();
    return row?.invoice_id;
  }
}
