// An API key's last use (api/key-usage.ts): noted when the key authenticates,
// at most once a minute per key and process, never moved back by a slower
// writer; shown on the dashboard's API keys page.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { sql } from 'kysely';
import { openPglite } from '../adapters/sql/database.ts';
import { keyUsage } from '../api/key-usage.ts';
import { dashboardClient } from './support/dashboard.ts';
import { merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('API key usage', () => {
  it('writes a use at most once a minute per key, and never moves a later use back', async () => {
    const database = await openPglite('memory://');
    try {
      const usage = await keyUsage(database);
      const writes = async () =>
        Number((await sql<{ n: string }>`select count(*) as n from api_key_usage`.execute(database.db)).rows[0]!.n);
      const key = randomUUID();
      const t0 = new Date('2026-11-28T09:00:00.000Z');
      await usage.used(key, t0);
      await database.db.deleteFrom('api_key_usage' as never).execute();
      // Within the minute: not written again (the row deleted above stays gone).
      await usage.used(key, new Date(t0.getTime() + 59_000));
      assert.equal(await writes(), 0);
      const t1 = new Date(t0.getTime() + 61_000);
      await usage.used(key, t1);
      assert.deepEqual(await usage.lastUsed([key]), new Map([[key, t1]]));
      // Another process noting an older use does not move it back.
      const other = await keyUsage(database);
      await other.used(key, t0);
      assert.deepEqual(await usage.lastUsed([key]), new Map([[key, t1]]));
      assert.deepEqual(await usage.lastUsed([]), new Map());
    } finally {
      await database.close();
    }
  });
});

describe("the dashboard's API keys page", () => {
  let svc: RunningService;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
  });
  after(() => svc.close());

  it('shows when each key was last used', async () => {
    const { merchant, key, keyId } = await merchantWithKey(svc);
    const developer = await dashboardClient(svc, merchant.id, 'last-used@example.com', 'developer');
    const cellOf = (page: string) =>
      new RegExp(`<tr data-key-id="${keyId}">[\\s\\S]*?<td class="last-used">([^<]*)</td>`).exec(page)?.[1];
    assert.equal(cellOf((await developer.get('/dashboard/developers/api-keys')).text), 'never');
    assert.equal((await svc.call('GET', '/api/v1/invoices', { token: key })).status, 200);
    const today = new Date().toISOString().slice(0, 10);
    assert.match(cellOf((await developer.get('/dashboard/developers/api-keys')).text) ?? '', new RegExp(`^${today}`));
  });
});
