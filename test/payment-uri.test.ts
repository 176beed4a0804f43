// Every chain and token's payment URI, from the real API, read back with
// parsers that are not ours (test/support/payment-uri.ts): each must give back
// the deposit address and the exact amount, and the QR code must hold the URI.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { catalogue } from '../domain/catalogue.ts';
import { merchantWithKey } from './support/merchant.ts';
import { baseUnits } from './support/evm-flow.ts';
import { qrText, readPaymentUri } from './support/payment-uri.ts';
import { startTestService, type RunningService } from './support/service.ts';

const CHAIN_IDS: Record<string, string> = { ethereum: '1', bsc: '56', polygon: '137' };
const MERCHANT = 'Café & Co';

describe('payment URIs', () => {
  let svc: RunningService;
  let key: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
    key = (await merchantWithKey(svc, { name: MERCHANT })).key;
  });
  after(() => svc?.close());

  for (const chain of catalogue) {
    for (const token of chain.supportedTokens) {
      it(`${token.symbol} on ${chain.name} reads back to the address and the exact amount`, async () => {
        const res = await svc.call('POST', '/api/v1/payments', {
          token: key,
          body: { amount: '123.45', currency: 'USD', chain: chain.name, token: token.symbol },
        });
        assert.equal(res.status, 201, JSON.stringify(res.body));
        const p = res.body.data as { address: string; cryptoAmount: string; paymentUri: string; qrCode: string };
        const read = readPaymentUri(p.paymentUri, chain.name, token.decimals);
        assert.equal(read.address, p.address);
        assert.equal(read.amount, baseUnits(p.cryptoAmount, token.decimals));
        assert.equal(read.contract?.toLowerCase() ?? null, token.contractAddress?.toLowerCase() ?? null);
        if (chain.chainType === 'evm') assert.equal(read.chainId, CHAIN_IDS[chain.name]);
        if (chain.name === 'solana') {
          // One reference, fixed by the invoice, and the merchant as label.
          assert.equal(read.references?.length, 1);
          assert.equal(read.label, MERCHANT);
        }
        assert.equal(qrText(p.qrCode), p.paymentUri);
      });
    }
  }

  it('asks for the same reference each time for one invoice, and another for the next', async () => {
    const pay = async () =>
      (
        await svc.call('POST', '/api/v1/payments', {
          token: key,
          body: { amount: '5', currency: 'USD', chain: 'solana', token: 'USDC' },
        })
      ).body.data as { paymentId: string; paymentUri: string };
    const first = await pay();
    const again = await svc.call('GET', `/api/v1/invoices/${first.paymentId}`, { token: key });
    const reference = (uri: string) => readPaymentUri(uri, 'solana', 6).references![0];
    assert.equal(reference(again.body.data.addresses[0].paymentUri), reference(first.paymentUri));
    assert.notEqual(reference((await pay()).paymentUri), reference(first.paymentUri));
  });
});
