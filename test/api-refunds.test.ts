// Refunds over real HTTP on the sandbox chains (refunds.md): what an invoice
// can give back, and the invoice's refundStatus.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { defaultConfirmations } from '../api/config.ts';
import { handleCommand, loadState } from '../commands/handle.ts';
import { loadSettlement } from '../commands/settlements.ts';
import { invoiceDecider, invoiceStreamName } from '../domain/invoice.ts';
import { requestedSettlement, settlementDecider, settlementIdOf, settlementStreamName } from '../domain/settlement.ts';
import { dashboardClient } from './support/dashboard.ts';
import { eventually, merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';
import { signatureVerifies, startWebhookReceiver } from './support/webhook-receiver.ts';

describe('refunds API', () => {
  let svc: RunningService;
  let key: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' });
    key = (await merchantWithKey(svc)).key;
  });
  after(() => svc.close());

  const admin = (method: string, path: string, body?: unknown) =>
    svc.call(method, path, { token: svc.adminToken, body });
  const transfer = async (to: string, amount: string, token: string) => {
    const res = await admin('POST', '/dev/v1/chains/ethereum/transfers', { to, amount, token });
    assert.equal(res.status, 201, JSON.stringify(res.body));
  };

  /** A 100 USD invoice paid 120 USDT, and 0.5 ETH sent to its address by mistake, all confirmed. */
  async function overpaidInvoice(merchantKey = key) {
    const created = await svc.call('POST', '/api/v1/payments', {
      token: merchantKey,
      body: { amount: '100', currency: 'USD', chain: 'ethereum', token: 'USDT' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const p = created.body.data;
    await transfer(p.address, '120.00000000', 'USDT');
    await transfer(p.address, '0.50000000', 'ETH');
    await admin('POST', '/dev/v1/chains/ethereum/blocks', { count: defaultConfirmations.ethereum });
    await eventually(
      async () => (await svc.call('GET', `/api/v1/invoices/${p.paymentId}/status`)).body.data,
      (s) => s.status === 'confirmed',
    );
    return p.paymentId as string;
  }

  it('says per token what was received, and that all of it is refundable, the overpaid part and the wrong token as excess', async () => {
    const id = await overpaidInvoice();
    const refundable = await eventually(
      () => svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: key }),
      (res) => res.body.data?.length === 2,
    );
    assert.equal(refundable.status, 200);
    // Exact, in each token's own decimals.
    assert.deepEqual(refundable.body.data, [
      {
        chain: 'ethereum',
        token: 'USDT',
        received: '120.000000',
        refunded: '0.000000',
        pending: '0.000000',
        refundable: '120.000000',
        excess: '20.000000',
      },
      {
        chain: 'ethereum',
        token: 'ETH',
        received: '0.500000000000000000',
        refunded: '0.000000000000000000',
        pending: '0.000000000000000000',
        refundable: '0.500000000000000000',
        excess: '0.500000000000000000',
      },
    ]);
    const invoice = await svc.call('GET', `/api/v1/invoices/${id}`, { token: key });
    assert.equal(invoice.body.data.refundStatus, 'none');
  });

  it("needs refunds:read, and answers 404 for another merchant's invoice", async () => {
    const id = await overpaidInvoice();
    const readOnly = (await merchantWithKey(svc, { permissions: ['invoices:read'] })).key;
    const forbidden = await svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: readOnly });
    assert.equal(forbidden.status, 403);
    const other = (await merchantWithKey(svc, { permissions: ['refunds:read'] })).key;
    const missing = await svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: other });
    assert.equal(missing.status, 404);
    assert.equal(missing.body.message, 'Invoice not found');
  });

  const refundable = async (id: string) =>
    (await svc.call('GET', `/api/v1/invoices/${id}/refundable`, { token: key })).body.data;
  const createRefund = (id: string, body: Record<string, unknown>, token = key) =>
    svc.call('POST', `/api/v1/invoices/${id}/refunds`, { token, body });
  const claimTokenOf = (refund: { claimUrl: string }) => refund.claimUrl.split('/refunds/')[1]!;
  const CUSTOMER = '0x8ba1f109551bD432803012645Ac136ddd64DBA72';

  it('creates a refund of the excess, waiting for the customer, and reserves its amount', async () => {
    const id = await overpaidInvoice();
    const ambiguous = await createRefund(id, { kind: 'excess' });
    assert.equal(ambiguous.status, 400);
    assert.equal(ambiguous.body.message, 'chain and token are required: the invoice received more than one token');

    const res = await createRefund(id, { chain: 'ethereum', token: 'USDT', kind: 'excess', reason: 'Overpaid' });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const refund = res.body.data;
    assert.deepEqual(
      {
        ...refund,
        id: undefined,
        claimUrl: undefined,
        claimExpiresAt: undefined,
        createdAt: undefined,
        updatedAt: undefined,
      },
      {
        id: undefined,
        invoiceId: id,
        status: 'awaiting_destination',
        chain: 'ethereum',
        token: 'USDT',
        amount: '20.000000',
        // The sandbox's token fees are paid in ETH by the fee wallet, as on a real chain.
        networkFee: '0.000000',
        netAmount: '20.000000',
        fiatAmount: '20.00000000',
        fiatCurrency: 'USD',
        reason: 'Overpaid',
        destination: null,
        claimUrl: undefined,
        claimExpiresAt: undefined,
        fundedFrom: null,
        transactionHash: null,
        createdAt: undefined,
        updatedAt: undefined,
        approvedAt: null,
        completedAt: null,
      },
    );
    assert.match(refund.claimUrl, /\/refunds\/[A-Za-z0-9_-]{43}$/);
    // 30 days unless the merchant says otherwise.
    assert.equal(Date.parse(refund.claimExpiresAt) - Date.parse(refund.createdAt), 30 * 86_400_000);
    const [usdt] = await refundable(id);
    assert.deepEqual([usdt.pending, usdt.refundable, usdt.excess], ['20.000000', '100.000000', '0.000000']);

    const got = await svc.call('GET', `/api/v1/refunds/${refund.id}`, { token: key });
    assert.deepEqual(got.body.data, refund);
    const listed = await svc.call('GET', `/api/v1/refunds?invoiceId=${id}`, { token: key });
    assert.deepEqual(
      listed.body.data.map((r: { id: string }) => r.id),
      [refund.id],
    );
  });

  it('refuses what is over the limit, under the network fee, or sent to an address of another chain, recording nothing', async () => {
    const id = await overpaidInvoice();
    const cases: [Record<string, unknown>, string][] = [
      [{ chain: 'ethereum', token: 'USDT', amount: '120.000001' }, 'Refund exceeds the refundable amount'],
      [{ chain: 'ethereum', token: 'ETH', amount: '0.00042' }, 'Refund amount must be above the network fee'],
      [
        { chain: 'ethereum', token: 'USDT', amount: '1.0000001' },
        'Amount must be a decimal with at most 6 decimal places',
      ],
      [{ chain: 'ethereum', token: 'USDT', amount: '1', kind: 'full' }, 'Give either amount or kind'],
      [{ chain: 'ethereum', token: 'USDC', amount: '1' }, 'The invoice received no USDC on ethereum'],
      [
        { chain: 'ethereum', token: 'USDT', amount: '1', destination: 'TLa2f6VPqDgRE67v1736s7bJ8Ray5wYjU7' },
        '"TLa2f6VPqDgRE67v1736s7bJ8Ray5wYjU7" is not a ethereum address',
      ],
      [
        { chain: 'ethereum', token: 'USDT', amount: '1', claimExpiresInDays: 91 },
        'claimExpiresInDays must be an integer from 1 to 90',
      ],
    ];
    for (const [body, message] of cases) {
      const res = await createRefund(id, body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(res.body.message, message);
    }
    const listed = await svc.call('GET', `/api/v1/refunds?invoiceId=${id}`, { token: key });
    assert.equal(listed.body.pagination.total, 0);
    const other = (await merchantWithKey(svc)).key;
    const foreign = await createRefund(id, { chain: 'ethereum', token: 'USDT', amount: '1' }, other);
    assert.equal(foreign.status, 404);
    assert.equal(foreign.body.message, 'Invoice not found');
  });

  it('takes the customer address through the claim link, checked for the chain, until the merchant approves', async () => {
    const id = await overpaidInvoice();
    const refund = (await createRefund(id, { chain: 'ethereum', token: 'ETH', kind: 'excess' })).body.data;
    const claim = claimTokenOf(refund);
    const shown = await svc.call('GET', `/api/v1/public/refunds/${claim}`);
    assert.equal(shown.status, 200);
    assert.deepEqual(shown.body.data, {
      status: 'awaiting_destination',
      merchantName: 'Test Shop',
      chain: 'ethereum',
      token: 'ETH',
      amount: '0.500000000000000000',
      netAmount: '0.499580000000000000',
      destination: null,
      claimExpiresAt: refund.claimExpiresAt,
    });
    const wrong = await svc.call('POST', `/api/v1/public/refunds/${claim}/destination`, {
      body: { address: 'bc1qnotethereum' },
    });
    assert.equal(wrong.status, 400);
    const given = await svc.call('POST', `/api/v1/public/refunds/${claim}/destination`, {
      body: { address: CUSTOMER },
    });
    assert.equal(given.status, 200, JSON.stringify(given.body));
    assert.equal(given.body.data.status, 'awaiting_approval');
    assert.equal(given.body.data.destination, CUSTOMER);
    const merchantSees = await svc.call('GET', `/api/v1/refunds/${refund.id}`, { token: key });
    assert.equal(merchantSees.body.data.status, 'awaiting_approval');
    assert.equal(merchantSees.body.data.destination, CUSTOMER);

    const unknown = await svc.call('GET', `/api/v1/public/refunds/${'x'.repeat(43)}`);
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.message, 'Refund not found');
  });

  it('is canceled before sending, giving its amount back, and a cancel repeated changes nothing', async () => {
    const id = await overpaidInvoice();
    const refund = (await createRefund(id, { chain: 'ethereum', token: 'USDT', amount: '50' })).body.data;
    const canceled = await svc.call('POST', `/api/v1/refunds/${refund.id}/cancel`, { token: key });
    assert.equal(canceled.status, 200);
    assert.equal(canceled.body.data.status, 'canceled');
    const again = await svc.call('POST', `/api/v1/refunds/${refund.id}/cancel`, { token: key });
    assert.deepEqual(again.body.data, canceled.body.data);
    const back = await eventually(
      () => refundable(id),
      (assets) => assets[0].pending === '0.000000',
    );
    assert.equal(back[0].refundable, '120.000000');
    const other = (await merchantWithKey(svc)).key;
    const foreign = await svc.call('GET', `/api/v1/refunds/${refund.id}`, { token: other });
    assert.equal(foreign.status, 404);
    assert.equal(foreign.body.message, 'Refund not found');
  });

  it('expires a claim link never used, after which the link is unknown', async () => {
    const id = await overpaidInvoice();
    const refund = (await createRefund(id, { chain: 'ethereum', token: 'USDT', amount: '5', claimExpiresInDays: 1 }))
      .body.data;
    await admin('POST', '/dev/v1/clock/advance', { seconds: 86_400 });
    const expired = await eventually(
      async () => (await svc.call('GET', `/api/v1/refunds/${refund.id}`, { token: key })).body.data,
      (r) => r.status === 'expired',
    );
    assert.equal(expired.claimUrl, refund.claimUrl);
    const link = await svc.call('GET', `/api/v1/public/refunds/${claimTokenOf(refund)}`);
    assert.equal(link.status, 404);
    await eventually(
      () => refundable(id),
      (assets) => assets[0].pending === '0.000000',
    );
  });

  /**
   * An overpaid invoice with no settlement wallet (its settlement waits, unprepared, and the deposit can pay a
   * refund) and a refund of its excess holding the deposit, unapproved: what an approval that crashed after
   * taking its hold leaves (commands/refunds.ts, refund:after-payer).
   */
  async function heldWithoutApproval(own: string) {
    const id = await overpaidInvoice(own);
    const settlement = await eventually(
      () => loadSettlement(svc.service.store, settlementIdOf(id)),
      (s) => s !== null,
    );
    const refund = (
      await createRefund(id, { chain: 'ethereum', token: 'USDT', kind: 'excess', destination: CUSTOMER }, own)
    ).body.data;
    assert.equal(refund.status, 'awaiting_approval', JSON.stringify(refund));
    const stream = settlementStreamName(settlement!.id);
    await handleCommand(svc.service.store, settlementDecider, stream, {
      type: 'HoldForRefund',
      refundId: refund.id,
      token: 'USDT',
      amount: 20_000_000n,
      fromAddress: settlement!.fromAddress,
      now: svc.service.sandbox!.clock.now().toISOString(),
    });
    await svc.service.projections.caughtUp();
    return { id, refund, stream };
  }

  it('gives back a hold whose approval was never recorded, by itself, after the grace; approving then takes it again', async () => {
    const { key: own } = await merchantWithKey(svc);
    const { refund, stream } = await heldWithoutApproval(own);
    // Who holds the deposit, and whether its payout found it (no amounts: a failure prints these).
    const holds = async () =>
      requestedSettlement(await loadState(svc.service.store, settlementDecider, stream))!.refundHolds.map(
        ({ refundId, approved }) => ({ refundId, approved }),
      );
    await svc.service.holdRelease.releaseDue();
    assert.equal((await holds()).length, 1, 'within the grace: an approval may still be on its way');
    await admin('POST', '/dev/v1/clock/advance', { seconds: 5 * 60 + 1 });
    await eventually(holds, (h) => h.length === 0);
    // Released, the settlement is the whole deposit's again; approving takes a hold anew, paid from the deposit.
    const approved = await svc.call('POST', `/api/v1/refunds/${refund.id}/approve`, { token: own });
    assert.equal(approved.body.data?.fundedFrom, 'deposit', JSON.stringify(approved.body));
    const [held] = await eventually(holds, (h) => h.length === 1 && h[0]!.approved === true);
    assert.equal(held!.refundId, refund.id);
  });

  it('raises a hold whose approval was never recorded and the release did not give back, for the operator and the merchant, until approved', async () => {
    const { merchant, key: own } = await merchantWithKey(svc);
    const { id, refund } = await heldWithoutApproval(own);
    const attention = async () =>
      (await admin('GET', '/admin/v1/attention')).body.data as { kind: string; subject: string }[];
    const held = (items: { kind: string; subject: string }[]) =>
      items.filter((i) => i.kind === 'refund_hold_unapproved' && i.subject === refund.id);
    assert.deepEqual(held(await attention()), [], 'an approval may still be on its way');

    // The release not running (stopped here), the hold stays past the grace; reported once it is overdue.
    await svc.service.holdRelease.stop();
    try {
      await admin('POST', '/dev/v1/clock/advance', { seconds: 5 * 60 + 1 });
      await svc.service.projections.caughtUp();
      assert.deepEqual(held(await attention()), [], 'the release may still give it back');
      await admin('POST', '/dev/v1/clock/advance', { seconds: 5 * 60 });
      const [item] = held(await eventually(attention, (items) => held(items).length === 1));
      assert.equal((item as unknown as { merchantId: string }).merchantId, merchant.id);
      assert.equal((item as unknown as { chain: string }).chain, 'ethereum');
      assert.equal((item as unknown as { reason: string }).reason, 'approval_not_recorded');
      assert.match(
        (item as unknown as { detail: string }).detail,
        new RegExp(`holds the settlement of invoice ${id}.*approve refund ${refund.id} again, or cancel it`),
      );
      const owner = await dashboardClient(svc, merchant.id, 'owner@held.example', 'owner');
      const overview = (await owner.get('/dashboard')).text;
      const said = new RegExp(
        `href="/dashboard/refunds/${refund.id}" class="refund-attention">Refund ${refund.id}[^<]*approve refund ${refund.id} again, or cancel it<`,
      );
      assert.match(overview, said);
      assert.doesNotMatch(overview, /waiting for approval/, 'said once, as what it is');

      // Approving again takes the hold it has: nothing is left to raise.
      const approved = await svc.call('POST', `/api/v1/refunds/${refund.id}/approve`, { token: own });
      assert.equal(approved.body.data?.fundedFrom, 'deposit', JSON.stringify(approved.body));
      await eventually(attention, (items) => held(items).length === 0);
      assert.doesNotMatch((await owner.get('/dashboard')).text, said);
    } finally {
      svc.service.holdRelease.start();
    }
  });

  it('never reserves more than was received, whatever requests race', async () => {
    const id = await overpaidInvoice();
    // 50 requests of 5 USDT against 120 received: at most 24 can be had.
    const answers = await Promise.all(
      Array.from({ length: 50 }, () => createRefund(id, { chain: 'ethereum', token: 'USDT', amount: '5' })),
    );
    const created = answers.filter((a) => a.status === 201);
    const refused = answers.filter((a) => a.status !== 201);
    assert.ok(refused.every((a) => a.status === 400 && a.body.message === 'Refund exceeds the refundable amount'));
    assert.equal(created.length, 24);
    const [usdt] = await refundable(id);
    assert.deepEqual([usdt.pending, usdt.refundable], ['120.000000', '0.000000']);
  });

  it('a keyed request retried after its answer was lost finds the refund it made, and reserves nothing twice', async () => {
    const id = await overpaidInvoice();
    const keyed = () =>
      svc.call('POST', `/api/v1/invoices/${id}/refunds`, {
        token: key,
        body: { chain: 'ethereum', token: 'USDT', amount: '100' },
        headers: { 'idempotency-key': 'refund-order-42' },
      });
    const first = await keyed();
    assert.equal(first.status, 201);
    // The answer lost (a 5xx after the write): the key's claim is given up after a minute, as if never answered.
    await svc.service.database.db.deleteFrom('idempotency_keys').where('key', '=', 'refund-order-42').execute();
    const retried = await keyed();
    assert.equal(retried.status, 201, JSON.stringify(retried.body));
    assert.equal(retried.body.data.id, first.body.data.id);
    const [usdt] = await refundable(id);
    assert.deepEqual([usdt.pending, usdt.refundable], ['100.000000', '20.000000']);
  });

  it('approves only a refund whose amount its invoice has reserved', async () => {
    const id = await overpaidInvoice();
    const refund = (await createRefund(id, { chain: 'ethereum', token: 'USDT', kind: 'excess', destination: CUSTOMER }))
      .body.data;
    // As after a crash between the refund's creation and its reservation, repeated by the same key:
    // the refund is there, its claim on the invoice not (yet).
    await handleCommand(svc.service.store, invoiceDecider, invoiceStreamName(id), {
      type: 'ReleaseRefund',
      refundId: refund.id,
      now: new Date().toISOString(),
    });
    const early = await svc.call('POST', `/api/v1/refunds/${refund.id}/approve`, { token: key });
    assert.equal(early.status, 409, JSON.stringify(early.body));
    assert.equal(early.body.message, 'The refund is not reserved on its invoice yet: approve it again shortly');
    assert.equal(
      (await svc.call('GET', `/api/v1/refunds/${refund.id}`, { token: key })).body.data.status,
      'awaiting_approval',
    );
  });

  it('tells the merchant through signed webhooks, each with the Refund as it stands after the event', async () => {
    const receiver = await startWebhookReceiver();
    try {
      const merchant = (
        await admin('POST', '/admin/v1/merchants', { name: 'Hooked Shop', webhookUrl: `${receiver.url}/hooks` })
      ).body.data;
      const hooked = (await admin('POST', `/admin/v1/merchants/${merchant.id}/api-keys`, {})).body.data.key;
      const id = await overpaidInvoice(hooked);
      const refund = (await createRefund(id, { chain: 'ethereum', token: 'USDT', kind: 'excess' }, hooked)).body.data;
      await svc.call('POST', `/api/v1/public/refunds/${claimTokenOf(refund)}/destination`, {
        body: { address: CUSTOMER },
      });
      await svc.call('POST', `/api/v1/refunds/${refund.id}/cancel`, { token: hooked });
      const hooks = await eventually(
        () => receiver.accepted().filter((r) => r.body.data?.id === refund.id),
        (received) => received.length === 3,
      );
      // Each in the outbox once; deliveries may arrive in any order.
      const order = ['refund.created', 'refund.claimed', 'refund.canceled'];
      hooks.sort((a, b) => order.indexOf(a.event) - order.indexOf(b.event));
      assert.deepEqual(
        hooks.map((h) => [h.event, h.body.data.status]),
        [
          ['refund.created', 'awaiting_destination'],
          ['refund.claimed', 'awaiting_approval'],
          ['refund.canceled', 'canceled'],
        ],
      );
      assert.ok(hooks.every((h) => signatureVerifies(h.signature, h.rawBody, merchant.webhookSecret)));
      assert.equal(hooks[0]!.body.data.claimUrl, refund.claimUrl);
      assert.equal(hooks[1]!.body.data.destination, CUSTOMER);
    } finally {
      await receiver.close();
    }
  });
});
