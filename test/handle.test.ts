// The command handler: read, decide, append at the revision read, retry on a race.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { handleCommand } from '../commands/handle.ts';
import { DomainError } from '../domain/decider.ts';
import { invoiceDecider, invoiceStreamName } from '../domain/invoice.ts';

const createInvoice = (id: string) =>
  ({
    type: 'CreateInvoice',
    id,
    merchantId: randomUUID(),
    amount: '10',
    currency: 'USD',
    description: null,
    expiresAt: '2026-01-01T00:15:00.000Z',
    webhookUrl: null,
    metadata: null,
    createdAt: '2026-01-01T00:00:00.000Z',
  }) as const;

describe('handleCommand on a new stream', () => {
  it('decides without reading the stream, and appends it', async () => {
    const store = new MemoryEventStore();
    let reads = 0;
    const readStream = store.readStream.bind(store);
    store.readStream = (...args) => (reads++, readStream(...args));
    const id = randomUUID();
    const { events } = await handleCommand(store, invoiceDecider, invoiceStreamName(id), createInvoice(id), {
      newStream: true,
    });
    assert.deepEqual(
      events.map((e) => e.type),
      ['InvoiceCreated'],
    );
    assert.equal(reads, 0);
    assert.equal((await readStream(invoiceStreamName(id))).length, 1);
  });

  it('reads and decides again when the stream was not new after all', async () => {
    const store = new MemoryEventStore();
    const id = randomUUID();
    await handleCommand(store, invoiceDecider, invoiceStreamName(id), createInvoice(id));
    await assert.rejects(
      handleCommand(store, invoiceDecider, invoiceStreamName(id), createInvoice(id), { newStream: true }),
      (error: unknown) => error instanceof DomainError && error.kind === 'conflict',
    );
    assert.equal((await store.readStream(invoiceStreamName(id))).length, 1);
  });
});

describe('handleCommand answers with the ids its events were appended with', () => {
  it('random ones, or those derived from the causationId', async () => {
    const store = new MemoryEventStore();
    const id = randomUUID();
    const stream = invoiceStreamName(id);
    const { eventIds } = await handleCommand(store, invoiceDecider, stream, createInvoice(id));
    assert.deepEqual(
      eventIds,
      (await store.readStream(stream)).map((e) => e.id),
    );

    const other = randomUUID();
    const caused = await handleCommand(store, invoiceDecider, invoiceStreamName(other), createInvoice(other), {
      causationId: eventIds[0],
    });
    assert.deepEqual(
      caused.eventIds,
      (await store.readStream(invoiceStreamName(other))).map((e) => e.id),
    );
    const decidedNothing = await handleCommand(store, invoiceDecider, stream, {
      type: 'ReleaseRefund',
      refundId: randomUUID(),
      now: '2026-01-01T00:01:00.000Z',
    });
    assert.deepEqual(decidedNothing.eventIds, []);
  });
});
