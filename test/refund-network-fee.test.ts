// A new refund's network fee is quoted once, when it is created: a chain that
// cannot quote it yet answers 503 instead of a fee of 0 the payout could
// never pay (an EVM native refund spends exactly its quoted gas).
import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { ChainAdapter } from '../adapters/chains/port.ts';
import type { ChainName } from '../domain/catalogue.ts';
import { HttpError } from '../api/errors.ts';
import { refundNetworkFee } from '../api/service.ts';

it("a refund's network fee is the adapter's refund quote, or a 503 when it has none yet", () => {
  const quoting = { networkFee: (_token: string, payout?: string) => (payout === 'refund' ? 21_000n : 42_000n) };
  const unquoted = {
    networkFee: () => {
      throw new Error('ethereum: no fee quote yet');
    },
  };
  const fee = refundNetworkFee(
    new Map<ChainName, ChainAdapter>([
      ['ethereum', quoting as unknown as ChainAdapter],
      ['polygon', unquoted as unknown as ChainAdapter],
    ]),
  );
  assert.equal(fee('ethereum', 'ETH', 1), 21_000n);
  for (const chain of ['polygon', 'bsc']) {
    assert.throws(
      () => fee(chain, 'POL', 1),
      (error: unknown) => error instanceof HttpError && error.statusCode === 503,
    );
  }
});
