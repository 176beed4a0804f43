// The payout engine's passes over open Solana sweeps, against the test node:
// a pass over N sweeps asks the node about their signatures once
// (getSignatureStatuses, up to 256 a call) and reads the head once, instead
// of once per sweep, and each sweep still completes exactly once.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Keypair } from '@solana/web3.js';
import bs58 from 'bs58';
import { MAX_SIGNATURE_STATUSES, SolanaChain } from '../adapters/chains/solana/index.ts';
import { DepositKeyring } from '../adapters/keys/derivation.ts';
import { loadSettlement, SettlementPayouts } from '../commands/settlements.ts';
import { settlementStreamName } from '../domain/settlement.ts';
import { SERVICE_MNEMONIC } from './support/evm-flow.ts';
import { requestSolSettlements, solanaPayouts, startSolanaNode } from './support/solana-flow.ts';
import type { SolanaTestNode } from './support/solana-node.ts';

const keyring = DepositKeyring.fromMnemonic(SERVICE_MNEMONIC);
const SWEEPS = 5;
const GROSS = 100_000_000n; // 0.1 SOL

/** The RPC methods called since `from`, counted; the priority fee's refresh (every 10 s, in the background) left out. */
function methodsSince(node: SolanaTestNode, from: number): Record<string, number> {
  const counted: Record<string, number> = {};
  for (const method of node.calls.slice(from))
    if (method !== 'getRecentPrioritizationFees') counted[method] = (counted[method] ?? 0) + 1;
  return counted;
}

describe('the payout engine over open Solana sweeps', () => {
  let node: SolanaTestNode;
  let chain: SolanaChain;
  before(async () => {
    node = await startSolanaNode();
    chain = await SolanaChain.open({ rpcUrl: node.url, keyring });
    await node.airdrop(chain.feeWallet, 10_000_000_000n);
    node.mine();
  });
  after(async () => {
    chain?.close();
    await node?.stop();
  });

  it('asks for the signatures of a pass over 5 open sweeps in one getSignatureStatuses, and the head once; each sweep completes once', async () => {
    let ahead = 0;
    const clock = { now: () => new Date(Date.now() + ahead) };
    const { store, pass, close } = await solanaPayouts(chain, {
      clock,
      onError: (error) => assert.fail(`a look failed: ${String(error)}`),
    });
    try {
      const { settlementIds, wallets: merchants } = await requestSolSettlements(
        { store, node, chain, keyring },
        { count: SWEEPS, gross: GROSS, firstIndex: 300, now: () => clock.now().toISOString() },
      );

      // The first pass prepares and sends each sweep (each its own work); they land in the next block.
      assert.equal(await pass(), SWEEPS);
      node.mine();
      const settlements = () => Promise.all(settlementIds.map((id) => loadSettlement(store, id)));
      assert.deepEqual(
        (await settlements()).map((s) => s!.status),
        Array(SWEEPS).fill('submitted'),
      );

      // Landed, not final yet: a pass looks at all five for their confirmations.
      ahead += 2_000;
      let from = node.calls.length;
      assert.equal(await pass(), SWEEPS);
      assert.deepEqual(methodsSince(node, from), { getSignatureStatuses: 1, getLatestBlockhash: 1, getSlot: 1 });
      assert.deepEqual(
        (await settlements()).map((s) => s!.status),
        Array(SWEEPS).fill('submitted'),
      );

      // Finalized: the next pass completes all five, still with one question.
      node.mine(40);
      ahead += 2_000;
      from = node.calls.length;
      assert.equal(await pass(), SWEEPS);
      assert.deepEqual(methodsSince(node, from), { getSignatureStatuses: 1, getLatestBlockhash: 1, getSlot: 1 });
      assert.deepEqual(
        (await settlements()).map((s) => s!.status),
        Array(SWEEPS).fill('completed'),
      );
      for (const id of settlementIds) {
        const events = await store.readStream(settlementStreamName(id));
        assert.equal(events.filter((e) => e.type === 'SettlementCompleted').length, 1, `${id} completed once`);
      }
      for (const wallet of merchants) assert.equal(node.paymentsTo(wallet).length, 1, `${wallet} paid once`);

      // Nothing left to look at: a later pass asks the node nothing.
      ahead += 60_000;
      from = node.calls.length;
      assert.equal(await pass(), 0);
      assert.deepEqual(methodsSince(node, from), {});
    } finally {
      await close();
    }
  });

  it('looks at each sweep on its own, as before, when the question before the looks fails', async () => {
    let ahead = 0;
    const clock = { now: () => new Date(Date.now() + ahead) };
    const errors: string[] = [];
    const { store, pass, close } = await solanaPayouts(chain, {
      clock,
      // The settlement kind, but its batched question fails (a node that drops the call, say).
      kinds: (deps) => {
        const settlement = new SettlementPayouts(deps);
        return [
          {
            kind: settlement.kind,
            advance: (id: string, lease: AbortSignal) => settlement.advance(id, lease),
            beforeLooks: () => Promise.reject(new Error('getSignatureStatuses: HTTP 502')),
          },
        ];
      },
      onError: (error) => errors.push((error as Error).message),
    });
    try {
      const { settlementIds } = await requestSolSettlements(
        { store, node, chain, keyring },
        { count: SWEEPS, gross: GROSS, firstIndex: 400, now: () => clock.now().toISOString() },
      );
      await pass();
      node.mine(40);
      ahead += 2_000;
      const from = node.calls.length;
      assert.equal(await pass(), SWEEPS);
      assert.equal(
        methodsSince(node, from)['getSignatureStatuses'],
        SWEEPS,
        'each look asks for its own (and a sweep it saw finalized is sent again without asking)',
      );
      const settlements = await Promise.all(settlementIds.map((id) => loadSettlement(store, id)));
      assert.deepEqual(
        settlements.map((s) => s!.status),
        Array(SWEEPS).fill('completed'),
      );
      assert.equal(errors.filter((e) => e === 'getSignatureStatuses: HTTP 502').length, 2, 'reported once a pass');
    } finally {
      await close();
    }
  });

  it('fails, with the reason for the operator, an expired sweep found past the status cache of a node without history, its deposit paid since: never replaced', async () => {
    let ahead = 0;
    const clock = { now: () => new Date(Date.now() + ahead) };
    const { store, pass, close } = await solanaPayouts(chain, { clock });
    try {
      const {
        settlementIds: [settlementId],
        wallets: [merchant],
      } = await requestSolSettlements(
        { store, node, chain, keyring },
        { count: 1, gross: GROSS, firstIndex: 500, now: () => clock.now().toISOString() },
      );
      // Sent under congestion at no priority: never scheduled. The customer pays again; the service looks again
      // only long after the sweep expired, on a node that knows no signature past its status cache.
      node.congestionFee = 1_000;
      await pass();
      const sent = (await loadSettlement(store, settlementId!))!;
      assert.equal(sent.status, 'submitted');
      await node.airdrop(keyring.deriveDepositKey('solana', 500).address, 3_000_000n);
      await node.mine(400);
      node.congestionFee = 0;
      node.transactionHistory = false;
      ahead += 60_000;
      await pass();
      const failed = (await loadSettlement(store, settlementId!))!;
      assert.equal(failed.status, 'failed');
      // The reason GET /admin/v1/attention shows in its `settlement_failed` item (the settlement's failureReason).
      assert.match(failed.failureReason!, /expired .* no longer says whether it landed/);
      assert.notEqual(failed.retryAt, null, 'looked at again: a node with history, or the balance back, decides it');
      ahead += 60_000;
      await pass();
      const again = (await loadSettlement(store, settlementId!))!;
      assert.deepEqual(again.preparedHashes, sent.preparedHashes, 'never a second transaction');
      assert.deepEqual(node.paymentsTo(merchant!), []);
    } finally {
      node.congestionFee = 0;
      node.transactionHistory = true;
      await close();
    }
  });

  it('asks for more than 256 signatures in calls of 256, which is what the node takes', async () => {
    const signatures = Array.from({ length: MAX_SIGNATURE_STATUSES + 44 }, () =>
      bs58.encode(Keypair.generate().secretKey),
    );
    const from = node.calls.length;
    const statuses = await chain.transactionStatuses(signatures);
    assert.deepEqual(methodsSince(node, from), { getSignatureStatuses: 2 });
    assert.equal(statuses.size, signatures.length);
    assert.ok([...statuses.values()].every((s) => s === undefined));
    const response = await fetch(node.url, {
      method: 'POST',
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'getSignatureStatuses',
        params: [signatures.slice(0, MAX_SIGNATURE_STATUSES + 1)],
      }),
    });
    const { error } = (await response.json()) as { error?: { code: number; message: string } };
    assert.deepEqual(error, { code: -32602, message: 'Too many inputs provided; max 256' });
  });
});
