// Expiry waits for the chain watchers: an invoice is not expired before every
// chain it has an address on has been watched up to its deadline, so that a
// payment made in time but seen late (the service was down) still counts.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Kysely } from 'kysely';
import { ExpiryScheduler, expiringInvoicesProjector } from '../commands/expiry.ts';
import type { ReadModelTables } from '../projections/schema.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('expiry and the chain watchers', () => {
  let svc: RunningService;
  let key: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
    key = (await merchantWithKey(svc)).key;
  });
  after(() => svc.close());

  it('expires an invoice only once the watchers of its chains have seen past its deadline', async () => {
    const onTron = (
      await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount: '10', currency: 'USD', chain: 'tron', token: 'USDT' },
      })
    ).body.data;
    const noAddress = (
      await svc.call('POST', '/api/v1/invoices', { token: key, body: { amount: '10', currency: 'USD' } })
    ).body.data;

    // A scheduler of its own, on a clock a day ahead, that records what it would expire.
    const expired: string[] = [];
    const watched = new Map<string, Date | undefined>([['tron', undefined]]);
    const dayAhead = { now: () => new Date(Date.now() + 86_400_000) };
    const scheduler = new ExpiryScheduler(
      svc.service.database.db as Kysely<ReadModelTables>,
      { expire: async (id) => void expired.push(id) },
      dayAhead,
      {
        watchedThrough: (chain) => watched.get(chain),
        caughtUp: () => svc.service.projections.caughtUp(30_000, [expiringInvoicesProjector.name]),
      },
    );
    const deadline = new Date(onTron.expiresAt);

    await scheduler.expireDue();
    assert.ok(expired.includes(noAddress.id), 'an invoice without an address waits for no chain');
    assert.ok(!expired.includes(onTron.paymentId), 'tron has not been watched since the start');

    watched.set('tron', new Date(deadline.getTime() - 1));
    await scheduler.expireDue();
    assert.ok(!expired.includes(onTron.paymentId), 'tron is watched up to a millisecond before the deadline');

    watched.set('tron', deadline);
    await scheduler.expireDue();
    assert.ok(expired.includes(onTron.paymentId), 'tron is watched up to the deadline');
  });

  it('shows how each watched chain stands: the sandbox chains, once watched, are ok', async () => {
    const conditions = await eventually(
      async () => svc.service.chainConditions(),
      (list) => list.length > 0 && list.every((c) => c.state === 'ok'),
    );
    assert.ok(conditions.some((c) => c.chain === 'tron'));
    for (const c of conditions) assert.equal(c.detail, null);
  });
});
