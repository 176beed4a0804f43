// The invoice endpoints over real HTTP: every shape, message and limit of
// interface.md for creating, listing, reading and cancelling invoices.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { assertRebuildGivesTheSameRows } from './support/rebuild.ts';
import { startTestService, type RunningService } from './support/service.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('invoice API', () => {
  let svc: RunningService;
  let key: string;
  let readOnly: string;
  let otherKey: string;
  let merchantId: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', PUBLIC_BASE_URL: 'https://pay.example.com' });
    const main = await merchantWithKey(svc, { name: 'Main Shop' });
    key = main.key;
    merchantId = main.merchant.id;
    readOnly = (await merchantWithKey(svc, { permissions: ['invoices:read'] })).key;
    otherKey = (await merchantWithKey(svc, { name: 'Other' })).key;
  });
  after(() => svc.close());

  const pay = (body: unknown, token = key, headers?: Record<string, string>) =>
    svc.call('POST', '/api/v1/payments', { token, body, ...(headers && { headers }) });

  it('creates a payment on each of the six chains with the Payment shape', async () => {
    const formats: Record<string, RegExp> = {
      ethereum: /^0x[0-9a-fA-F]{40}$/,
      bsc: /^0x[0-9a-fA-F]{40}$/,
      polygon: /^0x[0-9a-fA-F]{40}$/,
      tron: /^T[1-9A-HJ-NP-Za-km-z]{33}$/,
      bitcoin: /^bc1q[02-9ac-hj-np-z]{38}$/,
      solana: /^[1-9A-HJ-NP-Za-km-z]{32,44}$/,
    };
    const natives: Record<string, string> = {
      ethereum: 'ETH',
      bsc: 'BNB',
      polygon: 'POL',
      tron: 'TRX',
      bitcoin: 'BTC',
      solana: 'SOL',
    };
    const seen = new Set<string>();
    for (const chain of Object.keys(formats)) {
      const res = await pay({
        amount: '100.00',
        currency: 'USD',
        chain,
        description: `on ${chain}`,
        metadata: { orderId: 'A1' },
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      const p = res.body.data;
      assert.deepEqual(Object.keys(p).sort(), [
        'address',
        'chain',
        'createdAt',
        'cryptoAmount',
        'cryptoCurrency',
        'exchangeRate',
        // an addition to the contract's Payment: when the rate was observed
        'exchangeRateObservedAt',
        'expiresAt',
        'fiatAmount',
        'fiatCurrency',
        'paymentId',
        // additions to the contract's Payment: the wallet's payment request and the chain's confirmations
        'paymentUri',
        'qrCode',
        'requiredConfirmations',
        'status',
      ]);
      assert.match(p.paymentId, UUID);
      assert.match(p.address, formats[chain]!);
      assert.match(p.qrCode, /^data:image\/png;base64,/);
      assert.ok(Number.isInteger(p.requiredConfirmations) && p.requiredConfirmations > 0);
      assert.match(p.cryptoAmount, /^\d+\.\d{8}$/);
      assert.equal(p.cryptoCurrency, natives[chain]);
      assert.equal(p.chain, chain);
      assert.equal(p.fiatAmount, '100.00000000');
      assert.equal(p.fiatCurrency, 'USD');
      assert.match(p.exchangeRate, /^\d+(\.\d+)?$/);
      assert.match(p.exchangeRateObservedAt, ISO);
      assert.equal(p.status, 'pending');
      assert.match(p.createdAt, ISO);
      assert.equal(Date.parse(p.expiresAt) - Date.parse(p.createdAt), 15 * 60_000);
      assert.ok(!seen.has(p.address), 'an address is never reused');
      seen.add(p.address);
    }
  });

  it('quotes USDT on tron at the fixed rate, rounded up to the token unit', async () => {
    await svc.call('PUT', '/dev/v1/rates', {
      token: svc.adminToken,
      body: { base: 'USDT', quote: 'USD', rate: '0.9998' },
    });
    const res = await pay({ amount: '19.99', currency: 'usd', chain: 'tron', token: 'usdt' });
    assert.equal(res.status, 201);
    assert.equal(res.body.data.cryptoCurrency, 'USDT');
    assert.equal(res.body.data.exchangeRate, '0.9998');
    assert.equal(res.body.data.cryptoAmount, '19.99399900'); // 19.99 / 0.9998 = 19.993998799… rounded up to 6 decimals
    assert.equal(res.body.data.fiatCurrency, 'USD');
  });

  it('reduces expiresInMinutes of a payment to the 15-minute rate window, and keeps a shorter one', async () => {
    const long = (await pay({ amount: '5', currency: 'EUR', chain: 'bitcoin', expiresInMinutes: 600 })).body.data;
    assert.equal(Date.parse(long.expiresAt) - Date.parse(long.createdAt), 15 * 60_000);
    const short = (await pay({ amount: '5', currency: 'EUR', chain: 'bitcoin', expiresInMinutes: 5 })).body.data;
    assert.equal(Date.parse(short.expiresAt) - Date.parse(short.createdAt), 5 * 60_000);
  });

  it('answers every 400 of payment creation in the words of the contract', async () => {
    const cases: [unknown, string][] = [
      [{ currency: 'USD', chain: 'tron' }, 'Amount must be greater than 0'],
      [{ amount: '0', currency: 'USD', chain: 'tron' }, 'Amount must be greater than 0'],
      [{ amount: '-5', currency: 'USD', chain: 'tron' }, 'Amount must be greater than 0'],
      [{ amount: 'ten', currency: 'USD', chain: 'tron' }, 'Amount must be greater than 0'],
      [{ amount: 10, currency: 'USD', chain: 'tron' }, 'Amount must be greater than 0'],
      [{ amount: '1e3', currency: 'USD', chain: 'tron' }, 'Amount must be greater than 0'],
      [{ amount: '1000000000000000', currency: 'USD', chain: 'tron' }, 'Amount must be less than 1000000000000000'],
      [{ amount: '9'.repeat(100), currency: 'USD', chain: 'tron' }, 'Amount must be less than 1000000000000000'],
      [{ amount: '10', chain: 'tron' }, 'Currency is required'],
      [{ amount: '10', currency: '', chain: 'tron' }, 'Currency is required'],
      [
        { amount: '10', currency: 'USD', chain: 'tron', expiresInMinutes: 0 },
        'Expires in minutes must be greater than 0',
      ],
      [
        { amount: '10', currency: 'USD', chain: 'tron', expiresInMinutes: -3 },
        'Expires in minutes must be greater than 0',
      ],
      [{ amount: '10', currency: 'USD', chain: 'tron', webhookUrl: 'nope' }, 'Invalid webhook URL format'],
      [
        { amount: '10', currency: 'USD', chain: 'tron', webhookUrl: 'https://localhost/x' },
        'Webhook URL cannot point to localhost or loopback addresses',
      ],
      [
        { amount: '10', currency: 'USD', chain: 'tron', webhookUrl: 'https://10.0.0.8/x' },
        'Webhook URL cannot point to private or internal IP addresses',
      ],
      [{ amount: '10', currency: 'USD', chain: 'dogecoin' }, 'Chain dogecoin is not supported or not enabled'],
      [{ amount: '10', currency: 'USD', chain: 'tron', token: 'USDC' }, 'Token USDC is not supported on tron'],
    ];
    for (const [body, message] of cases) {
      const res = await pay(body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(res.body.error, 'Bad Request');
      assert.equal(res.body.message, message, JSON.stringify(body));
    }
  });

  it('refuses a chain that is not enabled', async () => {
    const only = await startTestService({ RATE_LIMITS: 'off', CHAINS: 'tron' });
    try {
      const { key: k } = await merchantWithKey(only);
      const res = await only.call('POST', '/api/v1/payments', {
        token: k,
        body: { amount: '1', currency: 'USD', chain: 'ethereum' },
      });
      assert.equal(res.status, 400);
      assert.equal(res.body.message, 'Chain ethereum is not supported or not enabled');
    } finally {
      await only.close();
    }
  });

  it('needs a key for payments but no permission; invoices need invoices:write', async () => {
    assert.equal(
      (await svc.call('POST', '/api/v1/payments', { body: { amount: '1', currency: 'USD', chain: 'tron' } })).status,
      401,
    );
    assert.equal((await pay({ amount: '1', currency: 'USD', chain: 'tron' }, readOnly)).status, 201);
    const denied = await svc.call('POST', '/api/v1/invoices', {
      token: readOnly,
      body: { amount: '1', currency: 'USD' },
    });
    assert.equal(denied.status, 403);
    assert.equal(denied.body.message, 'API key does not have the required permission: invoices:write');
  });

  it('creates an invoice without an address, with the expiresInMinutes range of 1 to 525600', async () => {
    const res = await svc.call('POST', '/api/v1/invoices', {
      token: key,
      body: {
        amount: '42.50',
        currency: 'EUR',
        description: 'Order 7',
        webhookUrl: 'https://shop.example.com/hooks',
        metadata: { orderId: '7' },
      },
    });
    assert.equal(res.status, 201);
    const inv = res.body.data;
    // interface.md's Invoice, and refunds.md's refundStatus.
    assert.deepEqual(Object.keys(inv).sort(), [
      'amount',
      'createdAt',
      'currency',
      'description',
      'expiresAt',
      'id',
      'merchantId',
      'paymentUrl',
      'refundStatus',
      'status',
      'updatedAt',
      'webhookUrl',
    ]);
    assert.equal(inv.refundStatus, 'none');
    assert.equal(inv.status, 'pending');
    assert.equal(inv.amount, '42.50');
    assert.equal(inv.merchantId, merchantId);
    assert.equal(inv.paymentUrl, `https://pay.example.com/checkout/${inv.id}`);
    assert.equal(Date.parse(inv.expiresAt) - Date.parse(inv.createdAt), 15 * 60_000);
    const year = await svc.call('POST', '/api/v1/invoices', {
      token: key,
      body: { amount: '1', currency: 'USD', expiresInMinutes: 525600 },
    });
    assert.equal(year.status, 201);
    assert.equal(Date.parse(year.body.data.expiresAt) - Date.parse(year.body.data.createdAt), 525600 * 60_000);
    const tooLong = await svc.call('POST', '/api/v1/invoices', {
      token: key,
      body: { amount: '1', currency: 'USD', expiresInMinutes: 525601 },
    });
    assert.equal(tooLong.status, 400);
    assert.equal(tooLong.body.message, 'Expires in minutes cannot exceed 525600');
    const zero = await svc.call('POST', '/api/v1/invoices', {
      token: key,
      body: { amount: '1', currency: 'USD', expiresInMinutes: 0 },
    });
    assert.equal(zero.body.message, 'Expires in minutes must be greater than 0');

    const got = await svc.call('GET', `/api/v1/invoices/${inv.id}`, { token: key });
    assert.equal(got.status, 200);
    assert.deepEqual(got.body.data.addresses, []);
    assert.equal(got.body.data.description, 'Order 7');
  });

  it('reads an invoice with its addresses, and hides other merchants invoices as not found', async () => {
    const p = (await pay({ amount: '10', currency: 'USD', chain: 'ethereum', token: 'USDC' })).body.data;
    const got = await svc.call('GET', `/api/v1/invoices/${p.paymentId}`, { token: key });
    assert.equal(got.status, 200);
    assert.deepEqual(got.body.data.addresses, [
      { currency: 'USDC', chain: 'ethereum', address: p.address, qrCode: p.qrCode, paymentUri: p.paymentUri },
    ]);
    for (const path of [
      `/api/v1/invoices/${p.paymentId}`,
      '/api/v1/invoices/not-a-uuid',
      '/api/v1/invoices/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10',
    ]) {
      const res = await svc.call('GET', path, { token: path.includes(p.paymentId) ? otherKey : key });
      assert.equal(res.status, 404, path);
      assert.equal(res.body.error, 'Not Found');
      assert.equal(res.body.message, 'Invoice not found');
    }
  });

  it('lists only the merchant own invoices with filters and pagination', async () => {
    const fresh = await merchantWithKey(svc, { name: 'Lister' });
    const created = [];
    for (let i = 0; i < 5; i++) {
      created.push(
        (
          await svc.call('POST', '/api/v1/invoices', {
            token: fresh.key,
            body: { amount: `${i + 1}`, currency: i < 3 ? 'USD' : 'EUR' },
          })
        ).body.data,
      );
    }
    await svc.call('POST', `/api/v1/invoices/${created[0].id}/cancel`, { token: fresh.key });
    const all = await svc.call('GET', '/api/v1/invoices?limit=2&page=2', { token: fresh.key });
    assert.equal(all.status, 200);
    assert.deepEqual(all.body.pagination, { total: 5, page: 2, limit: 2, totalPages: 3 });
    assert.deepEqual(
      all.body.data.map((i: any) => i.id),
      [created[2].id, created[1].id],
    );
    const eur = await svc.call('GET', '/api/v1/invoices?currency=eur', { token: fresh.key });
    assert.equal(eur.body.pagination.total, 2);
    const expired = await svc.call('GET', '/api/v1/invoices?status=expired', { token: fresh.key });
    assert.deepEqual(
      expired.body.data.map((i: any) => i.id),
      [created[0].id],
    );
    const pending = await svc.call('GET', '/api/v1/invoices?status=pending', { token: fresh.key });
    assert.equal(pending.body.pagination.total, 4);
    const future = await svc.call(
      'GET',
      `/api/v1/invoices?from=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`,
      { token: fresh.key },
    );
    assert.equal(future.body.pagination.total, 0);
    const past = await svc.call('GET', '/api/v1/invoices?to=2000-01-01', { token: fresh.key });
    assert.equal(past.body.pagination.total, 0);
    const defaults = await svc.call('GET', '/api/v1/invoices', { token: fresh.key });
    assert.deepEqual(defaults.body.pagination, { total: 5, page: 1, limit: 20, totalPages: 1 });

    for (const [query, message] of [
      ['limit=0', 'Limit must be a whole number from 1 to 100'],
      ['limit=101', 'Limit must be a whole number from 1 to 100'],
      ['page=0', 'Page must be a whole number of at least 1'],
      ['status=partial', 'Status must be one of pending, confirmed, settled, expired'],
      ['from=yesterday', 'from must be an ISO 8601 date or date-time'],
    ]) {
      const res = await svc.call('GET', `/api/v1/invoices?${query}`, { token: fresh.key });
      assert.equal(res.status, 400, query);
      assert.equal(res.body.message, message, query);
    }
  });

  it('cancels only a pending invoice, which becomes expired', async () => {
    const p = (await pay({ amount: '10', currency: 'USD', chain: 'tron' })).body.data;
    const denied = await svc.call('POST', `/api/v1/invoices/${p.paymentId}/cancel`, { token: otherKey });
    assert.equal(denied.status, 404);
    const cancelled = await svc.call('POST', `/api/v1/invoices/${p.paymentId}/cancel`, { token: key });
    assert.equal(cancelled.status, 200);
    assert.equal(cancelled.body.data.status, 'expired');
    assert.equal(cancelled.body.data.addresses, undefined);
    assert.ok(Date.parse(cancelled.body.data.updatedAt) >= Date.parse(cancelled.body.data.createdAt));
    const again = await svc.call('POST', `/api/v1/invoices/${p.paymentId}/cancel`, { token: key });
    assert.equal(again.status, 400);
    assert.equal(again.body.message, 'Invoice cannot be cancelled in its current status: expired');
    const status = await svc.call('GET', `/api/v1/invoices/${p.paymentId}/status`);
    assert.equal(status.body.data.status, 'expired');
    assert.equal(status.body.data.paymentStatus, 'expired');
  });

  it('serves the public status with every field of the contract, at once after creation', async () => {
    const p = (
      await pay({
        amount: '25',
        currency: 'USD',
        chain: 'bitcoin',
        description: 'Mug',
        metadata: { returnUrl: 'https://shop.example.com/thanks', successUrl: 'javascript:alert(1)' },
      })
    ).body.data;
    const res = await svc.call('GET', `/api/v1/invoices/${p.paymentId}/status`);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.data, {
      id: p.paymentId,
      status: 'pending',
      amount: '25',
      currency: 'USD',
      description: 'Mug',
      merchantName: 'Main Shop',
      confirmations: 0,
      requiredConfirmations: 0,
      paymentStatus: 'pending',
      paymentStatusDetail: null,
      settledAmount: null,
      txHash: null,
      expiresAt: p.expiresAt,
      createdAt: p.createdAt,
      returnUrl: 'https://shop.example.com/thanks',
      totalReceivedAmount: '0.00000000',
      totalReceivedCurrency: 'BTC',
      remainingAmount: p.cryptoAmount,
      paymentProgress: 0,
      hasDetectedPayment: false,
      detectedPaymentAmount: null,
      detectedPaymentCurrency: null,
      paymentIssueType: null,
      mismatchPayment: null,
    });
    const unknown = await svc.call('GET', '/api/v1/invoices/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10/status');
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.message, 'Invoice not found');
    const javascriptOnly = (
      await pay({ amount: '1', currency: 'USD', chain: 'tron', metadata: { returnUrl: 'javascript:alert(1)' } })
    ).body.data;
    assert.equal(
      (await svc.call('GET', `/api/v1/invoices/${javascriptOnly.paymentId}/status`)).body.data.returnUrl,
      null,
    );
  });

  it('answers a creation before the read models show it, and a read at once still finds it', async () => {
    const { projections, database } = svc.service;
    await projections.stop(); // the read models stand still until started again
    let restarted = false;
    try {
      const p = (await pay({ amount: '12', currency: 'USD', chain: 'tron', token: 'USDT' })).body.data;
      const invoice = (
        await svc.call('POST', '/api/v1/invoices', { token: key, body: { amount: '3', currency: 'EUR' } })
      ).body.data;
      const rows = await database.db
        .selectFrom('invoices' as any)
        .select('id')
        .where('id', 'in', [p.paymentId, invoice.id])
        .execute();
      assert.deepEqual(rows, [], 'answered before the read models show either');
      const reads = Promise.all([
        svc.call('GET', `/api/v1/invoices/${p.paymentId}`, { token: key }),
        svc.call('GET', `/api/v1/invoices/${p.paymentId}/status`),
        svc.call('GET', `/api/v1/invoices/${invoice.id}`, { token: key }),
        svc.call('GET', `/api/v1/invoices?limit=100`, { token: key }),
      ]).then((answers) => ({ answers, afterRestart: restarted }));
      await new Promise((r) => setTimeout(r, 200));
      restarted = true;
      projections.start();
      const { answers, afterRestart } = await reads;
      assert.ok(afterRestart, 'the reads waited for the read models');
      const [got, status, plain, list] = answers;
      assert.equal(got!.status, 200);
      assert.deepEqual(
        got!.body.data.addresses.map((a: { address: string }) => a.address),
        [p.address],
      );
      assert.equal(status!.status, 200);
      assert.equal(status!.body.data.status, 'pending');
      assert.equal(plain!.status, 200);
      assert.equal(plain!.body.data.amount, '3');
      const listed = list!.body.data.map((i: { id: string }) => i.id);
      assert.ok(listed.includes(p.paymentId) && listed.includes(invoice.id), 'a list shows what was created before it');
      const unknown = await svc.call('GET', '/api/v1/invoices/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10/status');
      assert.equal(unknown.status, 404);
    } finally {
      if (!restarted) projections.start();
    }
  });

  it('replays a POST with the same Idempotency-Key and refuses the key with another body', async () => {
    const body = { amount: '77', currency: 'USD', chain: 'tron' };
    const first = await pay(body, key, { 'idempotency-key': 'order-77' });
    const second = await pay(body, key, { 'idempotency-key': 'order-77' });
    assert.equal(first.status, 201);
    assert.equal(second.status, 201);
    assert.deepEqual(second.body, first.body);
    assert.equal(second.headers.get('idempotent-replayed'), 'true');
    const other = await pay({ ...body, amount: '78' }, key, { 'idempotency-key': 'order-77' });
    assert.equal(other.status, 409);
    assert.equal(other.body.error, 'Conflict');
    assert.equal(other.body.message, 'Idempotency-Key has already been used with a different request');
    // Keys belong to their merchant: another merchant may use the same one.
    const theirs = await pay(body, otherKey, { 'idempotency-key': 'order-77' });
    assert.equal(theirs.status, 201);
    assert.notEqual(theirs.body.data.paymentId, first.body.data.paymentId);
    const list = await svc.call('GET', '/api/v1/invoices?limit=100', { token: key });
    assert.equal(list.body.data.filter((i: any) => i.amount === '77').length, 1);
  });

  it('gives concurrent payments distinct addresses', async () => {
    const results = await Promise.all(
      Array.from({ length: 20 }, () => pay({ amount: '3', currency: 'USD', chain: 'polygon' })),
    );
    const addresses = results.map((r) => r.body.data.address);
    assert.equal(new Set(addresses).size, 20);
  });

  it('creates or returns an address on demand for the checkout page', async () => {
    const inv = (await svc.call('POST', '/api/v1/invoices', { token: key, body: { amount: '30', currency: 'USD' } }))
      .body.data;
    const first = await svc.call('POST', `/api/v1/invoices/${inv.id}/addresses`, {
      body: { chain: 'tron', token: 'USDT' },
    });
    assert.equal(first.status, 201);
    assert.equal(first.body.data.paymentId, inv.id);
    assert.equal(first.body.data.cryptoCurrency, 'USDT');
    const again = await svc.call('POST', `/api/v1/invoices/${inv.id}/addresses`, {
      body: { chain: 'tron', token: 'USDT' },
    });
    assert.equal(again.status, 200);
    assert.equal(again.body.data.address, first.body.data.address);
    const native = await svc.call('POST', `/api/v1/invoices/${inv.id}/addresses`, { body: { chain: 'tron' } });
    assert.equal(native.status, 201);
    assert.notEqual(native.body.data.address, first.body.data.address);
    const got = await svc.call('GET', `/api/v1/invoices/${inv.id}`, { token: key });
    assert.equal(got.body.data.addresses.length, 2);
    const badChain = await svc.call('POST', `/api/v1/invoices/${inv.id}/addresses`, { body: { chain: 'dogecoin' } });
    assert.equal(badChain.status, 400);
    assert.equal(badChain.body.message, 'Chain dogecoin is not supported or not enabled');
    await svc.call('POST', `/api/v1/invoices/${inv.id}/cancel`, { token: key });
    const closed = await svc.call('POST', `/api/v1/invoices/${inv.id}/addresses`, { body: { chain: 'bitcoin' } });
    assert.equal(closed.status, 400);
    const unknown = await svc.call('POST', '/api/v1/invoices/6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10/addresses', {
      body: { chain: 'tron' },
    });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.message, 'Invoice not found');
  });

  it('requotes an unpaid address once its 15-minute rate window has passed, and keeps a paid one', async () => {
    const admin = (method: string, path: string, body: unknown) =>
      svc.call(method, path, { token: svc.adminToken, body });
    const create = async () =>
      (
        await svc.call('POST', '/api/v1/invoices', {
          token: key,
          body: { amount: '10', currency: 'USD', expiresInMinutes: 120 },
        })
      ).body.data;
    const address = (id: string) =>
      svc.call('POST', `/api/v1/invoices/${id}/addresses`, { body: { chain: 'bitcoin' } });
    await admin('PUT', '/dev/v1/rates', { base: 'BTC', quote: 'USD', rate: '50000' });
    const unpaid = await create();
    const paid = await create();
    const before = (await address(unpaid.id)).body.data;
    const paidBefore = (await address(paid.id)).body.data;
    assert.equal(before.cryptoAmount, '0.00020000');
    await admin('POST', '/dev/v1/chains/bitcoin/transfers', { to: paidBefore.address, amount: '0.0001' });
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${paid.id}/status`)).body.data,
      (s) => s.status === 'partial',
    );

    await admin('PUT', '/dev/v1/rates', { base: 'BTC', quote: 'USD', rate: '40000' });
    const within = (await address(unpaid.id)).body.data;
    assert.equal(within.cryptoAmount, '0.00020000', 'the rate is fixed for its window');
    await admin('POST', '/dev/v1/clock/advance', { seconds: 15 * 60 });
    const requoted = await address(unpaid.id);
    assert.equal(requoted.status, 200);
    assert.equal(requoted.body.data.address, before.address, 'the same address');
    assert.equal(requoted.body.data.cryptoAmount, '0.00025000', 'at the new rate');
    assert.equal(requoted.body.data.exchangeRate, '40000');
    const status = (await svc.call('GET', `/api/v1/invoices/${unpaid.id}/status`)).body.data;
    assert.equal(status.remainingAmount, '0.00025000');
    const history = (await svc.call('GET', `/api/v1/invoices/${unpaid.id}/events`, { token: key })).body.data;
    assert.ok(history.some((e: { type: string }) => e.type === 'AddressRequoted'));

    const paidStatus = (await svc.call('GET', `/api/v1/invoices/${paid.id}/status`)).body.data;
    assert.equal(paidStatus.remainingAmount, '0.00010000', 'a quote paid against stands');
  });

  it('rebuilds the invoices read model from zero into the rows it projected, requotes included', async () => {
    await assertRebuildGivesTheSameRows(svc.service, 'invoices');
  });

  it('documents the invoice endpoints in the OpenAPI document', async () => {
    const doc = (await svc.call('GET', '/openapi.json')).body;
    for (const path of [
      '/api/v1/payments',
      '/api/v1/invoices',
      '/api/v1/invoices/{id}',
      '/api/v1/invoices/{id}/cancel',
      '/api/v1/invoices/{id}/status',
      '/api/v1/invoices/{id}/events',
      '/api/v1/invoices/{id}/addresses',
      '/dev/v1/chains/{chain}/transfers',
    ]) {
      assert.ok(doc.paths[path], path);
    }
  });
});

describe('quotes from the real exchange-rate adapter (RATE_PROVIDER=coingecko)', () => {
  it('quotes at the rate CoinGecko answers, served here from a recorded response', async () => {
    const { createServer } = await import('node:http');
    const { readFile } = await import('node:fs/promises');
    const recorded = await readFile(new URL('./fixtures/coingecko/simple-price-usd.json', import.meta.url), 'utf8');
    const paths: string[] = [];
    const server = createServer((req, res) => {
      paths.push(req.url ?? '');
      res.setHeader('content-type', 'application/json');
      res.end(recorded);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as { port: number };
    const svc = await startTestService({
      RATE_LIMITS: 'off',
      RATE_PROVIDER: 'coingecko',
      COINGECKO_API_URL: `http://127.0.0.1:${port}`,
    });
    try {
      const { key } = await merchantWithKey(svc);
      const res = await svc.call('POST', '/api/v1/payments', {
        token: key,
        body: { amount: '100', currency: 'USD', chain: 'tron' },
      });
      assert.equal(res.status, 201);
      assert.equal(res.body.data.exchangeRate, '0.2534');
      assert.equal(res.body.data.cryptoAmount, '394.632992'.padEnd(12, '0')); // 100 / 0.2534 rounded up to 6 decimals
      assert.match(paths[0]!, /^\/api\/v3\/simple\/price\?/);
      const sandboxRates = await svc.call('PUT', '/dev/v1/rates', {
        token: svc.adminToken,
        body: { base: 'TRX', quote: 'USD', rate: '1' },
      });
      assert.equal(sandboxRates.status, 400);
    } finally {
      await svc.close();
      server.close();
    }
  });
});

describe('quotes from several price sources (RATE_PROVIDER=kraken,coinbase,coingecko)', () => {
  /**
   * A service quoting from kraken, coinbase and coingecko, all three served by
   * one fake that answers each its `answer` (told apart by the path's first
   * segment), and a payment of 100 USD in BTC asked of it.
   */
  async function payWith(answer: (source: string) => { status: number; body: string }) {
    const { createServer } = await import('node:http');
    const server = createServer((req, res) => {
      const { status, body } = answer(req.url?.split('/')[1] ?? '');
      res.writeHead(status, { 'content-type': 'application/json' }).end(body);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    const svc = await startTestService({
      RATE_LIMITS: 'off',
      RATE_PROVIDER: 'kraken,coinbase,coingecko',
      KRAKEN_API_URL: `${base}/kraken`,
      COINBASE_API_URL: `${base}/coinbase`,
      COINGECKO_API_URL: `${base}/coingecko`,
    });
    const { key } = await merchantWithKey(svc);
    const res = await svc.call('POST', '/api/v1/payments', {
      token: key,
      body: { amount: '100', currency: 'USD', chain: 'bitcoin' },
    });
    const close = async () => {
      await svc.close();
      server.close();
    };
    return { svc, res, close };
  }

  it('quotes at the median when one source answers a price 100x off, and lists the disagreement', async () => {
    const { readFile } = await import('node:fs/promises');
    const recorded = (name: string) => readFile(new URL(`./fixtures/${name}`, import.meta.url), 'utf8');
    // Kraken's recorded ticker with its last trade 100x off; the others as recorded.
    const bodies: Record<string, string> = {
      kraken: (await recorded('rates/kraken/ticker-xbtusd.json')).replace('"c":["97012.30000"', '"c":["9701230.00000"'),
      coinbase: await recorded('rates/coinbase/ticker-btc-usd.json'),
      coingecko: await recorded('coingecko/simple-price-usd.json'),
    };
    const { svc, res, close } = await payWith((source) => ({ status: 200, body: bodies[source] ?? '{}' }));
    try {
      assert.equal(res.status, 201, JSON.stringify(res.body));
      // The mean of coinbase's 97015 and coingecko's 97123.45; kraken's 9701230 left out.
      assert.equal(res.body.data.exchangeRate, '97069.225');
      assert.match(res.body.data.exchangeRateObservedAt, ISO);
      const attention = await svc.call('GET', '/admin/v1/attention', { token: svc.adminToken });
      const item = attention.body.data.find((i: { kind: string }) => i.kind === 'rate_disagreement');
      assert.equal(item?.subject, 'BTC/USD');
      assert.match(item?.detail, /kraken 9701230 \(left out\), coinbase 97015, coingecko 97123\.45/);
    } finally {
      await close();
    }
  });

  it('refuses with every source down, naming them, with the 400 of a refused quote', async () => {
    const { res, close } = await payWith(() => ({ status: 503, body: '<html>Service Unavailable</html>' }));
    try {
      assert.equal(res.status, 400);
      assert.equal(
        res.body.message,
        'No exchange rate for BTC in USD is available from kraken, coinbase, coingecko: no source answered a price in time',
      );
    } finally {
      await close();
    }
  });
});
