// The EVM variables of api/config.ts: one line per problem, naming the variable.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig } from '../api/config.ts';
import { bloomMayContain, TRANSFER_TOPIC } from '../adapters/chains/evm/reader.ts';
import { withoutRpcUrl } from '../adapters/chains/node.ts';

const USDT = '0x5FbDB2315678afecb367f032d93F642f64180aa3';

function problems(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
    return [];
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
}

describe('EVM chain configuration', () => {
  it('reads the chain id, token contracts and treasury of a chain with a node', () => {
    const config = loadConfig({
      CHAIN_ETHEREUM_RPC_URL: 'http://127.0.0.1:8545',
      CHAIN_ETHEREUM_CHAIN_ID: '31337',
      CHAIN_ETHEREUM_TOKENS: `USDT=${USDT.toLowerCase()}:6`,
      CHAIN_ETHEREUM_TREASURY: '0x9858EfFD232B4033E47d90003D41EC34EcaEda94',
    });
    assert.deepEqual(config.evm.ethereum, {
      chainId: 31337n,
      tokens: [{ symbol: 'USDT', contract: USDT, decimals: 6 }],
      treasury: '0x9858EfFD232B4033E47d90003D41EC34EcaEda94',
    });
    assert.equal(config.evm.bsc, undefined, 'no node, no EVM settings');
  });

  it('names the variable of each bad value', () => {
    assert.deepEqual(
      problems({
        CHAIN_BSC_RPC_URL: 'http://127.0.0.1:8545',
        CHAIN_BSC_CHAIN_ID: 'abc',
        CHAIN_BSC_TOKENS: `USDT=${USDT}:6,DAI=${USDT}:18`,
        CHAIN_POLYGON_TREASURY: 'nope',
      }),
      [
        'CHAIN_BSC_CHAIN_ID must be a positive whole number (got "abc")',
        'CHAIN_BSC_TOKENS: USDT has 18 decimals on bsc, not 6',
        `CHAIN_BSC_TOKENS must be a comma list of SYMBOL=0xContract:decimals of bsc's tokens (got "DAI=${USDT}:18")`,
        'CHAIN_POLYGON_TREASURY must be a 0x address (got "nope")',
      ],
    );
  });

  it('keeps the node URL, which holds its API key, out of error messages', () => {
    const url = 'https://eth-mainnet.example.com/v2/Secret-Key_123';
    const fromEthers = new Error(
      `server response 429 Too Many Requests (request={  }, response={  }, error=null, info={ "requestUrl": "${url}", "responseStatus": "429" })`,
    );
    const clean = withoutRpcUrl(fromEthers, url);
    assert.doesNotMatch(clean.message, /Secret-Key_123|eth-mainnet\.example\.com/i);
    assert.match(clean.message, /server response 429/);
    // Rejection texts are lower-cased before they are read.
    assert.doesNotMatch(withoutRpcUrl(fromEthers.message.toLowerCase(), url).message, /secret-key_123/);
  });

  it('checks a logs bloom without false negatives', () => {
    const empty = '0x' + '00'.repeat(256);
    assert.equal(bloomMayContain(empty, TRANSFER_TOPIC), false);
    assert.equal(bloomMayContain('0x' + 'ff'.repeat(256), TRANSFER_TOPIC), true);
    assert.equal(bloomMayContain(undefined, USDT), true, 'no bloom: cannot say none');
  });
});
