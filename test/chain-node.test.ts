// The node base every chain adapter calls its node through (adapters/chains/node.ts).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ChainNode, checkedOpen } from '../adapters/chains/node.ts';

class Answer extends Error {}

const node = () =>
  new ChainNode({
    urls: ['https://rpc.example/key-123', 'https://solid.example/key-456'],
    retry: { attempts: 3, baseDelayMs: 1 },
    answered: (error) => error instanceof Answer,
  });

describe('ChainNode', () => {
  it('asks again after a failure, each attempt with a signal that ends at the deadline', async () => {
    let calls = 0;
    const answer = await node().call('getSlot', async (signal) => {
      assert.equal(signal.aborted, false);
      if (++calls < 3) throw new Error('fetch failed');
      return 7;
    });
    assert.equal(answer, 7);
    assert.equal(calls, 3);
  });

  it("passes the node's answer on at once, as it is", async () => {
    let calls = 0;
    const refusal = new Answer('-32602: invalid params');
    await assert.rejects(
      node().call('getBlock', async () => {
        calls++;
        throw refusal;
      }),
      (error) => error === refusal,
    );
    assert.equal(calls, 1);
  });

  it("gives up after the last attempt with an error that names none of the node's URLs", async () => {
    await assert.rejects(
      node().call('getblock', async () => {
        throw Object.assign(new Error('request to https://rpc.example/key-123 and solid.example/key-456 failed'), {
          code: 'ECONNRESET',
        });
      }),
      (error: Error & { code?: string }) => {
        assert.doesNotMatch(error.message, /key-123|key-456|rpc\.example|solid\.example/);
        assert.equal(error.code, 'ECONNRESET');
        return true;
      },
    );
  });

  it('leaves the node alone after it answers that we ask too often', async () => {
    const tron = node();
    let calls = 0;
    await assert.rejects(
      tron.call('/wallet/getblock', async () => {
        calls++;
        throw tron.rateLimited('/wallet/getblock', 429, 30_000);
      }),
      /\/wallet\/getblock: HTTP 429, rate limited; no request for 30 s/,
    );
    assert.equal(calls, 1, 'not asked again while paused');
    await assert.rejects(
      tron.call('/wallet/getnowblock', async () => calls++),
      /\/wallet\/getnowblock: the node asked for fewer requests; none before /,
    );
    assert.equal(calls, 1);
  });

  it('no longer retries once closed', async () => {
    const closing = node();
    let calls = 0;
    await assert.rejects(
      closing.call('eth_blockNumber', async () => {
        calls++;
        closing.close();
        throw new Error('socket closed');
      }),
      /socket closed/,
    );
    assert.equal(calls, 1);
  });

  it("says at start-up which variable's node did not answer, without its URL", () => {
    const error = node().unanswered('CHAIN_TRON_RPC_URL', new Error('connect to rpc.example refused\nat …'));
    assert.equal(error.message, 'CHAIN_TRON_RPC_URL: the node did not answer (connect to <rpc host> refused)');
  });

  it('closes an adapter whose start-up check fails', async () => {
    let closed = 0;
    const adapter = { close: () => closed++ };
    assert.equal(await checkedOpen(adapter, async () => undefined), adapter);
    assert.equal(closed, 0);
    await assert.rejects(
      checkedOpen(adapter, async () => {
        throw new Error('CHAIN_X_RPC_URL is a node of another network');
      }),
      /another network/,
    );
    assert.equal(closed, 1);
  });
});
