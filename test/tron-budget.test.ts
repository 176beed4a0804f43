// Issue 26, item 5: what an idle service asks a Tron node. TronGrid allows a
// key 100,000 requests a day (about 1.16 a second) and 15 a second; the
// service, idle, with a block every 3 s as on mainnet (each with a contract
// call, as every mainnet block has), must stay at or under 1.2 a second.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { sleep } from '../adapters/chains/node.ts';
import type { RunningService } from './support/service.ts';
import { randomTronKey, type TronKey, type TronTestNode } from './support/tron-node.ts';
import { startTronService, stopTronService, TEST_USDT } from './support/tron-flow.ts';

const WINDOW_MS = 60_000;
const BLOCK_MS = 3000;

describe('the Tron request budget', () => {
  let node: TronTestNode, svc: RunningService, payer: TronKey;
  before(async () => ({ node, svc, payer } = await startTronService()));
  after(() => stopTronService(node, svc));

  const sent = () => [...node.requests.values()].reduce((sum, n) => sum + n, 0);

  it('an idle service sends at most 1.2 requests a second over 60 s of 3 s blocks', async () => {
    await sleep(2 * BLOCK_MS); // start-up and the first steps
    const before = sent();
    const byPath = new Map(node.requests);
    const started = Date.now();
    while (Date.now() - started < WINDOW_MS) {
      await node.sendToken(payer, TEST_USDT, randomTronKey().address, 1n);
      node.mine(1);
      await sleep(BLOCK_MS);
    }
    const seconds = (Date.now() - started) / 1000;
    const count = sent() - before;
    const perPath = [...node.requests].map(([path, n]) => `${path} ${n - (byPath.get(path) ?? 0)}`).join(', ');
    const rate = count / seconds;
    console.log(`# ${count} requests in ${seconds.toFixed(1)} s: ${rate.toFixed(2)}/s, ${Math.round(rate * 86_400)} a day (${perPath})`);
    assert.ok(rate <= 1.2, `${rate.toFixed(2)} requests a second (${perPath})`);
  });
});
