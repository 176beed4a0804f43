import type { RunningService } from './service.ts';

/** A merchant with an API key (unrestricted unless `permissions` are given). */
export async function merchantWithKey(
  svc: RunningService,
  options: { name?: string; tier?: string; permissions?: string[] } = {},
) {
  const merchant = (
    await svc.call('POST', '/admin/v1/merchants', {
      token: svc.adminToken,
      body: { name: options.name ?? 'Test Shop', tier: options.tier ?? 'pro' },
    })
  ).body.data;
  const key = (
    await svc.call('POST', `/admin/v1/merchants/${merchant.id}/api-keys`, {
      token: svc.adminToken,
      body: options.permissions ? { permissions: options.permissions } : {},
    })
  ).body.data;
  return { merchant, key: key.key as string, keyId: key.id as string };
}

/** Polls `read` until `done` holds; fails with the last value after `ms`. */
export async function eventually<T>(read: () => T | Promise<T>, done: (value: T) => boolean, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  let value = await read();
  while (!done(value)) {
    if (Date.now() > deadline) throw new Error(`condition not met in time; last value: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 25));
    value = await read();
  }
  return value;
}

/** Like `eventually`, producing a block (`mine`) at each look that does not meet the condition yet. */
export function eventuallyMining<T>(
  mine: () => unknown,
  read: () => Promise<T>,
  done: (value: T) => boolean,
  ms = 60_000,
): Promise<T> {
  return eventually(
    async () => {
      const value = await read();
      if (!done(value)) await mine();
      return value;
    },
    done,
    ms,
  );
}
