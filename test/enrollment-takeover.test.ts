// An enrollment reserves its e-mail address in the plan before it creates the
// first invoice and writes the subscriber. A reservation whose subscriber is
// not written within the timeout is taken over by the next enrollment of the
// address. Here the first enrollment is not lost but slow: whichever of the
// two writes first, one address is enrolled once.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { subscriptionCommands } from '../commands/subscriptions.ts';
import type { Invoice } from '../domain/invoice.ts';

const MERCHANT = randomUUID();
const EMAIL = 'alice@example.com';
const TAKE_OVER_AFTER_MS = 20;

function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

/**
 * The subscription commands over `store`, with invoices that exist only as
 * their ids: the first `create` waits for `firstInvoice` to open, as a slow
 * rate provider or database would make it.
 */
function enrollments(store: EventStore, firstInvoice: Promise<void>) {
  const cancelled: string[] = [];
  let creates = 0;
  const startedFirst = gate();
  const commands = subscriptionCommands({
    store,
    clock: { now: () => new Date() },
    abandonReservationsAfterMs: TAKE_OVER_AFTER_MS,
    invoices: {
      async create(_merchantId, input) {
        if (creates++ === 0) {
          startedFirst.open();
          await firstInvoice;
        }
        return { value: { id: input.id!, createdAt: new Date().toISOString() } as Invoice, position: '0' };
      },
      async cancel(invoiceId) {
        cancelled.push(invoiceId);
        return { value: { id: invoiceId } as Invoice, position: '0' };
      },
    },
  });
  return { commands, cancelled, startedFirst: startedFirst.opened };
}

async function plan(commands: ReturnType<typeof subscriptionCommands>) {
  const { value } = await commands.createPlan(MERCHANT, {
    name: 'Pro',
    description: null,
    amount: '19.99',
    currency: 'USD',
    interval: 'month',
    intervalCount: 1,
    gracePeriodHours: 72,
  });
  return value.id;
}

const enrollment = (planId: string) => ({ planId, email: EMAIL, externalId: null, metadata: null });

/** The subscribers written for the address, from the log itself. */
async function enrolled(store: EventStore): Promise<string[]> {
  const all = await store.readAll(undefined, 10_000);
  return all
    .filter((e) => e.type === 'SubscriberEnrolled' && (e.data as { email: string }).email === EMAIL)
    .map((e) => (e.data as { id: string }).id);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('an enrollment reservation taken over while its enrollment still runs', () => {
  it('the late first enrollment is refused with 409 and its invoice voided; the address is enrolled once', async () => {
    const store = new MemoryEventStore();
    const slow = gate();
    const { commands, cancelled, startedFirst } = enrollments(store, slow.opened);
    const planId = await plan(commands);

    const first = commands.enroll(MERCHANT, enrollment(planId));
    first.catch(() => undefined);
    await startedFirst;
    await sleep(TAKE_OVER_AFTER_MS * 3);
    const second = await commands.enroll(MERCHANT, enrollment(planId));
    slow.open();

    await assert.rejects(first, {
      name: 'DomainError',
      kind: 'conflict',
      message: 'Subscriber is already enrolled in this plan (status: pending)',
    });
    assert.deepEqual(await enrolled(store), [second.value.subscriber.id]);
    // The first enrollment's invoice was never handed out: nobody can pay it.
    assert.equal(cancelled.length, 1);
    assert.notEqual(cancelled[0], second.value.invoice.id);
    // And the address stays taken.
    await assert.rejects(commands.enroll(MERCHANT, enrollment(planId)), {
      message: 'Subscriber is already enrolled in this plan (status: pending)',
    });
  });

  it('a take-over that loses the race to the late subscriber answers 409, and the first enrollment stands', async () => {
    const memory = new MemoryEventStore();
    const slow = gate();
    const firstWritten = gate();
    // The take-over's abandonment reaches the store only once the first
    // enrollment has written its subscriber: the worst moment for it.
    const store: EventStore = Object.create(memory, {
      append: {
        value: async (...args: Parameters<EventStore['append']>) => {
          const [, events] = args;
          if (events.some((e) => e.type === 'EnrollmentAbandoned')) {
            slow.open();
            await firstWritten.opened;
          }
          const result = await memory.append(...args);
          if (events.some((e) => e.type === 'SubscriberEnrolled')) firstWritten.open();
          return result;
        },
      },
    });
    const { commands, cancelled, startedFirst } = enrollments(store, slow.opened);
    const planId = await plan(commands);

    const first = commands.enroll(MERCHANT, enrollment(planId));
    await startedFirst;
    await sleep(TAKE_OVER_AFTER_MS * 3);
    await assert.rejects(commands.enroll(MERCHANT, enrollment(planId)), {
      kind: 'conflict',
      message: 'Subscriber is already enrolled in this plan (status: pending)',
    });
    const { value } = await first;
    assert.deepEqual(await enrolled(memory), [value.subscriber.id]);
    // The loser's invoice was never created, so there was nothing to void.
    assert.deepEqual(cancelled, []);
  });
});
