// Read your writes: a client that writes and at once reads, from this
// instance or another, sees what it wrote. They share the event store and the
// read models, so it is enough to wait until the read models show a position.
import type { FastifyBaseLogger } from 'fastify';
import type { EventStore } from '../adapters/event-store/port.ts';
import { invoiceStreamName } from '../domain/invoice.ts';
import { ReadModelsBehindError, type ProjectionEngine } from '../adapters/event-store/followers.ts';
import { catchingUp } from './errors.ts';
import { UUID } from './routes/query.ts';

export interface ReadYourWritesDeps {
  store: EventStore;
  projections: ProjectionEngine;
  /** The projectors whose tables the API reads: a write's answer waits for these, not for the reactors. */
  readModels: readonly string[];
  log: FastifyBaseLogger;
}

export interface ReadYourWrites {
  /**
   * Waits until the read models show `position` (a write's last event). Only
   * the read models: the process managers and webhook outboxes that also
   * follow the log add nothing a read needs, and waiting for the slowest of
   * them cost a payment creation most of its time. Read models further
   * behind than the wait give a 503: answering from them would deny what was
   * written (a fresh invoice's 404, a fresh key's 401), which a client must
   * not take for the truth. A write has committed by then; its claim on an
   * Idempotency-Key is held as for any 5xx (api/idempotency.ts).
   */
  settle(position: string | undefined): Promise<void>;
  /** For a list: waits until the read models show every write committed before the call. */
  caughtUp(): Promise<void>;
  /**
   * A read of an invoice from the read models; undefined for an id that is
   * not a UUID or an invoice that does not exist. Invoices and payments are
   * answered as soon as their events are committed, without waiting for the
   * read models (a third of a payment creation's throughput); so a read that
   * finds nothing asks the event store whether the invoice exists, and if it
   * does, waits until the read models show it and reads again. Every other
   * write still settles before answering, because a row that is there but
   * stale cannot be told from a current one.
   */
  readInvoice<T>(id: string, read: () => Promise<T | undefined>): Promise<T | undefined>;
}

export function readYourWrites({ store, projections, readModels, log }: ReadYourWritesDeps): ReadYourWrites {
  const settle = async (position: string | undefined) => {
    if (!position) return;
    try {
      await projections.waitFor(position, 10_000, readModels);
    } catch (error) {
      if (!(error instanceof ReadModelsBehindError)) throw error;
      log.warn({ err: error }, 'read models lag');
      throw catchingUp();
    }
  };
  return {
    settle,
    caughtUp: async () => settle(await store.headPosition()),
    readInvoice: async (id, read) => {
      if (!UUID.test(id)) return undefined;
      const found = await read();
      if (found !== undefined) return found;
      const last = (await store.readStream(invoiceStreamName(id))).at(-1);
      if (!last) return undefined;
      await settle(last.position);
      return read();
    },
  };
}
