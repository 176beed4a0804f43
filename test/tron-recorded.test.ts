// A recorded Tron mainnet block (test/fixtures/tron/SOURCES.md) through the
// adapter's parser and the test node's signature check: real transactions,
// real signatures. The expected base58 recipients were computed apart from
// tronweb (base-x over the 0x41 payload and its double-SHA-256 checksum).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { parseTronBlock, type TransactionJson } from '../adapters/chains/tron/index.ts';
import { checkSignature } from './support/tron-node.ts';

const block = JSON.parse(readFileSync(new URL('./fixtures/tron/mainnet-block-13232131.json', import.meta.url), 'utf8'));
const token = { symbol: 'USDT', contract: 'TEsjNspeG3kPSESscSWycdgNCDEveT9ZZB', decimals: 18 };

describe('a recorded mainnet block', () => {
  it('yields its TRX transfers, with their recipients in base58 and amounts in sun', () => {
    assert.deepEqual(parseTronBlock(block, [], []), [
      {
        txHash: '738c8bdf8f2a38147a8a4643bb184cfde41b22707585669a2cfb15b3b7d869bf',
        index: 0,
        to: 'TEDXvFpg3x687PDwWRNnLforg1GvcoH8jN',
        token: 'TRX',
        amount: 5_000_000_000n,
      },
      {
        txHash: '5d79ef636445e261fa090cdb5d23d7f8e0443778cb74df2c3ee34a9462645f67',
        index: 0,
        to: 'TEXDxaeQFt3kdwy2q3WD1RQE823P6bR6gz',
        token: 'TRX',
        amount: 5_000_000_000n,
      },
    ]);
  });

  it('is read again, not half, while the results of its token transfer are missing', () => {
    assert.throws(() => parseTronBlock(block, [], [token]), /no result of token transfer ec0fa0d7/);
  });

  it('takes the token transfer from its Transfer log once the results are there', () => {
    const call = block.transactions[2].raw_data.contract[0].parameter.value;
    const log = {
      address: call.contract_address.slice(2),
      topics: [
        'ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef',
        call.owner_address.slice(2).padStart(64, '0'),
        call.data.slice(8, 72),
      ],
      data: call.data.slice(72),
    };
    const result = { id: block.transactions[2].txID, receipt: { result: 'SUCCESS' }, log: [log] };
    const transfers = parseTronBlock(block, [result], [token]);
    assert.deepEqual(transfers.at(-1), {
      txHash: 'ec0fa0d734c1d5815cee80b7accce61b0cda8a87e8d3e40061595104a4142430',
      index: 0,
      to: 'TA8V5cek4fRuwEYcxdWMBfPRRnPAsCGmhD',
      token: 'USDT',
      amount: 1_234_560_000_000_000_000n,
    });
    // A failed call's logs pay nothing.
    assert.equal(parseTronBlock(block, [{ ...result, receipt: { result: 'REVERT' } }], [token]).length, 2);
  });

  it("passes the test node's signature check, and fails it once a byte changes", () => {
    for (const tx of block.transactions as TransactionJson[]) checkSignature(tx);
    const changed = structuredClone(block.transactions[0]) as TransactionJson;
    (changed.raw_data.contract[0]!.parameter.value as { amount: number }).amount += 1;
    assert.throws(() => checkSignature(changed), /signature/);
    const swapped = { ...block.transactions[1], signature: block.transactions[0].signature } as TransactionJson;
    assert.throws(() => checkSignature(swapped), /signed by|signature/);
  });
});
