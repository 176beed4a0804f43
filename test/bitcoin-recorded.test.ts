// A recorded real Bitcoin mainnet block (test/fixtures/bitcoin/SOURCES.md)
// in Bitcoin Core's getblock verbosity-2 shape, through the adapter's parser.
// The block is recorded as raw bytes (its id and merkle root check them);
// the test node's Core JSON rendering turns it into verbosity 2, amounts
// printed as Core prints them, and the parser must find exactly what the raw
// bytes say: every output with an address, to the satoshi.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import * as bitcoin from 'bitcoinjs-lib';
import { parseBitcoinBlock, parseCoreJson } from '../adapters/chains/bitcoin/index.ts';
import { coreJsonText, coreTransactionJson } from './support/bitcoin-node.ts';

const recorded = JSON.parse(
  readFileSync(new URL('./fixtures/bitcoin/mainnet-block-0000000000013b8a.json', import.meta.url), 'utf8'),
) as { id: string; hex: string };

describe('a recorded mainnet block', () => {
  const block = bitcoin.Block.fromHex(recorded.hex);

  it('is the block it says it is', () => {
    assert.equal(block.getId(), recorded.id);
    assert.equal(block.checkTxRoots(), true);
    assert.equal(block.transactions!.length, 9);
    // Its coinbase pays the 50 BTC subsidy of 2010 to a bare public key.
    assert.equal(block.transactions![0]!.outs[0]!.value, 5_000_000_000n);
  });

  it('yields every output that has an address, exactly as the raw bytes say', () => {
    const text = coreJsonText({
      hash: block.getId(),
      tx: block.transactions!.map((tx) => coreTransactionJson(tx, bitcoin.networks.bitcoin)),
    });
    assert.match(text, /"value":50\.00000000,/, 'amounts are JSON numbers, as Core prints them');
    const transfers = parseBitcoinBlock(parseCoreJson(text));
    const expected = block.transactions!.flatMap((tx) =>
      tx.outs.flatMap((out, index) => {
        // Bare public keys (P2PK) have no address: nothing can be paid to a deposit address that way.
        if (bitcoin.script.decompile(out.script)?.at(-1) === bitcoin.opcodes.OP_CHECKSIG && out.script.length > 25)
          return [];
        const to = bitcoin.address.fromOutputScript(out.script, bitcoin.networks.bitcoin);
        // The coins each transaction spends (none for a coinbase): what makes a deposit's own change known.
        const spends = tx.ins.map((i) => ({ txHash: Buffer.from(i.hash).reverse().toString('hex'), index: i.index }));
        return [
          { txHash: tx.getId(), index, to, token: 'BTC', amount: out.value, ...(!tx.isCoinbase() && { spends }) },
        ];
      }),
    );
    assert.equal(transfers.length, 12);
    assert.deepEqual(transfers, expected);
    assert.ok(
      transfers.every((t) => /^1[1-9A-HJ-NP-Za-km-z]{25,33}$/.test(t.to)),
      'mainnet P2PKH addresses',
    );
  });
});
