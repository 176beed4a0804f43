// Settlement end to end on the sandbox chains, over real HTTP: a confirmed
// invoice is paid out net of fees to the merchant's wallet, exactly once.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { assertRebuildGivesTheSameRows } from './support/rebuild.ts';
import { startTestService, type RunningService } from './support/service.ts';

const TRON_WALLET = 'TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH';
const ETH_WALLET = '0x9858EfFD232B4033E47d90003D41EC34EcaEda94';

describe('settlement on the sandbox chains', () => {
  let svc: RunningService;
  before(async () => {
    svc = await startTestService({
      RATE_LIMITS: 'off',
      CHAIN_TRON_CONFIRMATIONS: '3',
      CHAIN_ETHEREUM_CONFIRMATIONS: '2',
    });
  });
  after(() => svc.close());

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const status = async (id: string) => (await svc.call('GET', `/api/v1/invoices/${id}/status`)).body.data;
  const payouts = async (chain: 'tron' | 'ethereum', wallet: string) => {
    const ledger = svc.service.sandbox!.ledgers.get(chain)!;
    const { height } = await ledger.head();
    const found = [];
    for (let h = 1; h <= height; h++) {
      for (const t of (await ledger.block(h))!.transfers) if (t.to === wallet) found.push({ ...t, height: h });
    }
    return found;
  };

  async function merchant(wallets: Record<string, string>) {
    const m = await merchantWithKey(svc);
    if (Object.keys(wallets).length > 0) {
      await admin('PATCH', `/admin/v1/merchants/${m.merchant.id}`, { settlementWallets: wallets });
    }
    return m;
  }

  async function payAndConfirm(
    key: string,
    chain: string,
    token: string | undefined,
    amount: string,
    confirmations: number,
  ) {
    const p = (
      await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount, currency: 'USD', chain, ...(token && { token }) },
      })
    ).body.data;
    await admin('POST', `/dev/v1/chains/${chain}/transfers`, {
      to: p.address,
      amount: p.cryptoAmount,
      ...(token && { token }),
    });
    await admin('POST', `/dev/v1/chains/${chain}/blocks`, { count: confirmations - 1 });
    await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'confirmed',
    );
    return p;
  }

  it('pays a USDT invoice out net of the 1% platform fee, then marks the invoice settled', async () => {
    const { key, merchant: m } = await merchant({ tron: TRON_WALLET });
    const p = await payAndConfirm(key, 'tron', 'USDT', '100', 3);
    const submitted = await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: key })).body.data,
      (s) => s?.status === 'submitted',
    );
    assert.equal(submitted.invoiceId, p.paymentId);
    assert.equal(submitted.grossAmount, '100.000000');
    assert.equal(submitted.amount, '99.000000');
    assert.equal(submitted.currency, 'USDT');
    assert.equal(submitted.chain, 'tron');
    assert.equal(submitted.merchantWallet, TRON_WALLET);
    assert.match(submitted.transactionHash, /^[0-9a-f]{64}$/);
    assert.ok(submitted.initiatedAt);
    assert.equal(submitted.completedAt, null);

    await admin('POST', '/dev/v1/chains/tron/blocks', { count: 2 });
    const settled = await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    assert.equal(settled.paymentStatus, 'settled');
    assert.equal(settled.settledAmount, '99.000000');
    assert.equal(settled.txHash, submitted.transactionHash);

    const completed = (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: key })).body.data;
    assert.equal(completed.status, 'completed');
    assert.ok(completed.completedAt);
    const onChain = await payouts('tron', TRON_WALLET);
    const mine = onChain.filter((t) => t.txHash === submitted.transactionHash);
    assert.equal(mine.length, 1, 'one payout');
    assert.equal(mine[0]!.amount, 99_000_000n, 'exact to the base unit');
    assert.equal(mine[0]!.token, 'USDT');

    const list = await svc.call('GET', '/api/v1/settlements?status=completed&chain=tron', { token: key });
    assert.equal(list.status, 200);
    assert.deepEqual(list.body.pagination, { total: 1, page: 1, limit: 20, totalPages: 1 });
    assert.equal(list.body.data[0].id, completed.id);
    const one = await svc.call('GET', `/api/v1/settlements/${completed.id}`, { token: key });
    assert.deepEqual(one.body.data, completed);

    const metrics = await (await fetch(`${svc.url}/metrics`)).text();
    assert.match(metrics, /^settlements\{status="completed"\} [1-9]/m, 'operators see completed payouts');

    // The audit trail tells the whole story, the payout included, in the order it happened.
    const history = (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/events`, { token: key })).body.data;
    const types = history.map((e: { type: string }) => e.type);
    for (const type of ['InvoiceConfirmed', 'SettlementRequested', 'SettlementSubmitted', 'SettlementCompleted']) {
      assert.ok(types.includes(type), `${type} in ${types.join(', ')}`);
    }
    assert.ok(types.indexOf('SettlementCompleted') < types.indexOf('InvoiceSettled'));

    const other = await merchantWithKey(svc);
    const hidden = await svc.call('GET', `/api/v1/settlements/${completed.id}`, { token: other.key });
    assert.equal(hidden.status, 404);
    assert.equal(hidden.body.message, 'Settlement not found');
    const notYours = await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: other.key });
    assert.equal(notYours.status, 403);
    assert.equal(notYours.body.message, 'Invoice not accessible');
  });

  it('pays native ETH out net of the platform fee and the network fee, exact to the wei', async () => {
    const { key } = await merchant({ ethereum: ETH_WALLET });
    const p = await payAndConfirm(key, 'ethereum', undefined, '300', 2);
    const gross = BigInt(p.cryptoAmount.replace('.', '')) * 10n ** 10n; // 8 shown decimals → 18
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: key })).body.data,
      (s) => s?.status === 'submitted',
    );
    await admin('POST', '/dev/v1/chains/ethereum/blocks', { count: 2 });
    const settled = await eventually(
      () => status(p.paymentId),
      (s) => s.status === 'settled',
    );
    const settlement = (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: key })).body.data;
    const expected = gross - gross / 100n - 420_000_000_000_000n;
    const payout = (await payouts('ethereum', ETH_WALLET)).find((t) => t.txHash === settlement.transactionHash)!;
    assert.equal(payout.amount, expected);
    assert.equal(settled.settledAmount, settlement.amount);
    assert.equal(BigInt(settlement.amount.replace('.', '')), expected);
  });

  it('waits, visibly, for a merchant with no wallet on the chain, and goes on once one is set', async () => {
    const { key, merchant: m } = await merchant({});
    const p = await payAndConfirm(key, 'tron', 'USDT', '10', 3);
    const waiting = await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: key })).body.data,
      (s) => s?.status === 'pending',
    );
    assert.equal(waiting.merchantWallet, '');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(
      (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: key })).body.data.status,
      'pending',
    );
    await admin('PATCH', `/admin/v1/merchants/${m.id}`, { settlementWallets: { tron: TRON_WALLET } });
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: key })).body.data,
      (s) => s?.status === 'submitted',
    );
    await admin('POST', '/dev/v1/chains/tron/blocks', { count: 2 });
    assert.equal(
      (
        await eventually(
          () => status(p.paymentId),
          (s) => s.status === 'settled',
        )
      ).settledAmount,
      '9.900000',
    );
  });

  it('rebuilds the settlements read model from zero into the rows it projected as the settlements went', async () => {
    await assertRebuildGivesTheSameRows(svc.service, 'settlements');
  });

  it('answers 404 before a settlement exists, and for an unknown invoice', async () => {
    const { key } = await merchantWithKey(svc);
    const p = (
      await svc.call('POST', '/api/v1/payments', { token: key, body: { amount: '1', currency: 'USD', chain: 'tron' } })
    ).body.data;
    const none = await svc.call('GET', `/api/v1/invoices/${p.paymentId}/settlement`, { token: key });
    assert.equal(none.status, 404);
    assert.equal(none.body.message, 'No settlement found for this invoice');
    const unknown = await svc.call('GET', '/api/v1/invoices/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10/settlement', {
      token: key,
    });
    assert.equal(unknown.status, 404);
    const readOnly = await merchantWithKey(svc, { permissions: ['invoices:read'] });
    const denied = await svc.call('GET', '/api/v1/settlements', { token: readOnly.key });
    assert.equal(denied.status, 403);
    assert.equal(denied.body.message, 'API key does not have the required permission: settlements:read');
  });
});
