// A local Hardhat 2 node on 127.0.0.1 for the EVM integration tests, and the
// small ERC-20 of test/fixtures/TestToken.sol compiled with solc-js and
// deployed on it. When the node cannot start, `startHardhat` says why and
// the tests skip with that reason. `laggingProxy` puts a provider whose
// reads lag behind the head in front of it.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { ContractFactory, JsonRpcProvider, Network, NonceManager, Transaction, Wallet, type Contract } from 'ethers';
import { freePort, root } from './process.ts';

/** Hardhat's default accounts (test/fixtures/hardhat.config.cjs), each with 10,000 ETH. */
export const HARDHAT_MNEMONIC = 'test test test test test test test test test test test junk';
export const HARDHAT_CHAIN_ID = 31337n;

export interface LocalNode {
  url: string;
  provider: JsonRpcProvider;
  /** A funded account that pays the test payments (its nonces kept locally). */
  payer: NonceManager;
  rpc<T = any>(method: string, params?: unknown[]): Promise<T>;
  mine(blocks: number): Promise<void>;
  stop(): Promise<void>;
}

export async function startHardhat(): Promise<LocalNode | { skip: string }> {
  let child: ChildProcess | undefined;
  let output = '';
  try {
    const port = await freePort();
    const cli = join(root, 'node_modules/hardhat/internal/cli/cli.js');
    child = spawn(
      process.execPath,
      [
        cli,
        '--config',
        join(root, 'test/fixtures/hardhat.config.cjs'),
        'node',
        '--hostname',
        '127.0.0.1',
        '--port',
        String(port),
      ],
      {
        cwd: root,
        env: { ...process.env, HARDHAT_DISABLE_TELEMETRY_PROMPT: 'true' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    const exited = new Promise((resolve) => child!.once('exit', resolve));
    const url = `http://127.0.0.1:${port}`;
    const rpc = async <T>(method: string, params: unknown[] = []): Promise<T> => {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
      });
      const body = (await res.json()) as { result?: T; error?: { message: string } };
      if (body.error) throw new Error(`${method}: ${body.error.message}`);
      return body.result as T;
    };
    const deadline = Date.now() + 60_000;
    for (;;) {
      const state = await Promise.race([
        exited.then(() => 'exited'),
        new Promise((r) => setTimeout(() => r('wait'), 200)),
      ]);
      if (state === 'exited') return { skip: `hardhat node exited: ${output.trim().split('\n').slice(-3).join(' ')}` };
      try {
        await rpc('eth_chainId');
        break;
      } catch {
        if (Date.now() > deadline) throw new Error(`hardhat node did not answer in 60 s: ${output.slice(-500)}`);
      }
    }
    const network = Network.from(HARDHAT_CHAIN_ID);
    const provider = new JsonRpcProvider(url, network, { staticNetwork: network, batchStallTime: 0, cacheTimeout: -1 });
    const payer = new NonceManager(Wallet.fromPhrase(HARDHAT_MNEMONIC).connect(provider));
    const node = child;
    return {
      url,
      provider,
      payer,
      rpc,
      // No time between the blocks (hardhat.config.cjs allows it): the chain's clock keeps to the wall clock.
      mine: async (blocks) => void (await rpc('hardhat_mine', ['0x' + blocks.toString(16), '0x0'])),
      async stop() {
        provider.destroy();
        node.kill('SIGTERM');
        await exited;
      },
    };
  } catch (error) {
    child?.kill('SIGKILL');
    return { skip: `hardhat could not start: ${(error as Error).message}` };
  }
}

let compiled: { abi: any[]; bytecode: string } | undefined;

/** TestToken.sol through solc-js (about half a second). */
export async function compileTestToken(): Promise<{ abi: any[]; bytecode: string }> {
  if (compiled) return compiled;
  const solc = createRequire(import.meta.url)('solc');
  const source = await readFile(join(root, 'test/fixtures/TestToken.sol'), 'utf8');
  const output = JSON.parse(
    solc.compile(
      JSON.stringify({
        language: 'Solidity',
        sources: { 'TestToken.sol': { content: source } },
        settings: {
          evmVersion: 'cancun',
          optimizer: { enabled: true, runs: 200 },
          outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
        },
      }),
    ),
  );
  const errors = (output.errors ?? []).filter((e: any) => e.severity === 'error');
  if (errors.length > 0) throw new Error(errors.map((e: any) => e.formattedMessage).join('\n'));
  const contract = output.contracts['TestToken.sol'].TestToken;
  compiled = { abi: contract.abi, bytecode: '0x' + contract.evm.bytecode.object };
  return compiled;
}

/** Deploys a TestToken (USDT-like: 6 decimals) and mints `supply` base units to the payer. */
export async function deployToken(
  node: LocalNode,
  symbol = 'USDT',
  decimals = 6,
  supply = 10n ** 15n,
): Promise<Contract> {
  const { abi, bytecode } = await compileTestToken();
  const token = (await new ContractFactory(abi, bytecode, node.payer).deploy(symbol, symbol, decimals)) as Contract;
  await token.waitForDeployment();
  await (await token.getFunction('mint')(await node.payer.getAddress(), supply)).wait();
  return token;
}

/**
 * A JSON-RPC proxy in front of `nodeUrl` that models a load-balanced
 * provider: `eth_sendRawTransaction` (and all else) reaches an up-to-date
 * backend, while the reads in `lagging` hit one `lag` blocks behind the head.
 * These answer as geth does for what it has not imported yet
 * (internal/ethapi/api.go: a block or receipt it lacks is null;
 * eth/api_backend.go StateAndHeaderByNumberOrHash: state asked of a block it
 * lacks is the error "header not found", or "header for hash not found").
 */
export async function laggingProxy(nodeUrl: string) {
  const call = async (body: unknown) => {
    const res = await fetch(nodeUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return (await res.json()) as { id: unknown; result?: any; error?: unknown };
  };
  const stateReads = new Set(['eth_getTransactionCount', 'eth_getBalance', 'eth_getCode', 'eth_call']);
  const proxy = {
    url: '',
    lag: 0,
    /** Only reads of the latest block lag: a backend asked for a block by number or hash is one that has it. */
    latestOnly: false,
    /**
     * The backend that takes transactions refuses a tip below this (geth's --txpool.pricelimit), and checks it
     * before the nonce (core/txpool/validation.go: ValidateTransaction, then ValidateTransactionWithState; the
     * words are geth 1.13's ErrUnderpriced, later ErrTxGasPriceTooLow): a transaction mined already is refused
     * for its tip, not as known.
     */
    minTip: 0n,
    /**
     * Blocks of state the backends keep (0: all, as Hardhat does; a geth full node keeps 128): state asked of
     * an older block is geth's trie.MissingNodeError (trie/errors.go), "missing trie node …".
     */
    stateKept: 0,
    lagging: new Set([
      'eth_getTransactionReceipt',
      'eth_getTransactionByHash',
      'eth_blockNumber',
      'eth_getBlockByNumber',
      'eth_getBlockByHash',
      ...stateReads,
    ]),
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
  const hex = (n: number) => '0x' + n.toString(16);
  const nodeError = (id: unknown, message: string) => ({ jsonrpc: '2.0', id, error: { code: -32000, message } });
  async function answer(request: { id: unknown; method: string; params?: any[] }) {
    const { id, method } = request;
    const params = [...(request.params ?? [])];
    if (method === 'eth_sendRawTransaction') {
      const tip = Transaction.from(params[0]).maxPriorityFeePerGas ?? Transaction.from(params[0]).gasPrice!;
      if (tip < proxy.minTip) {
        return nodeError(id, `transaction underpriced: tip needed ${proxy.minTip}, tip permitted ${tip}`);
      }
    }
    const latest = (tag: unknown) => typeof tag === 'string' && !tag.startsWith('0x');
    if (proxy.stateKept > 0 && stateReads.has(method)) {
      const at = params[params.length - 1];
      const tip = Number((await call({ jsonrpc: '2.0', id: 0, method: 'eth_blockNumber' })).result);
      const byHash = at && typeof at === 'object' && 'blockHash' in at;
      const height = byHash
        ? Number(
            (await call({ jsonrpc: '2.0', id: 0, method: 'eth_getBlockByHash', params: [at.blockHash, false] })).result
              ?.number ?? tip,
          )
        : latest(at)
          ? tip
          : Number(at && typeof at === 'object' ? at.blockNumber : at);
      if (tip - height >= proxy.stateKept) {
        return nodeError(id, `missing trie node ${'0'.repeat(64)} (owner ${'0'.repeat(64)}) (path ) <nil>`);
      }
    }
    if (proxy.lag === 0 || !proxy.lagging.has(method)) return call(request);
    const head = Number((await call({ jsonrpc: '2.0', id: 0, method: 'eth_blockNumber' })).result) - proxy.lag;
    const heightOf = (tag: unknown) => (latest(tag) ? head : Number(tag));
    const mined = (result: { blockNumber?: string | null } | null) =>
      result && result.blockNumber != null && Number(result.blockNumber) > head ? null : result;
    switch (method) {
      case 'eth_blockNumber':
        return { jsonrpc: '2.0', id, result: hex(head) };
      case 'eth_getBlockByNumber': {
        if (proxy.latestOnly && !latest(params[0])) return call(request);
        const height = heightOf(params[0]);
        if (height > head) return { jsonrpc: '2.0', id, result: null };
        return call({ ...request, params: [hex(height), ...params.slice(1)] });
      }
      case 'eth_getBlockByHash':
      case 'eth_getTransactionReceipt':
      case 'eth_getTransactionByHash': {
        const answered = await call(request);
        return { ...answered, result: mined(answered.result ?? null) };
      }
    }
    // State as of a block: the last parameter names it (a tag, a number, or EIP-1898's object).
    const at = params[params.length - 1];
    if (proxy.latestOnly && !latest(at)) return call(request);
    if (at && typeof at === 'object' && 'blockHash' in at) {
      const block = (await call({ jsonrpc: '2.0', id: 0, method: 'eth_getBlockByHash', params: [at.blockHash, false] }))
        .result;
      if (!block || Number(block.number) > head) return nodeError(id, 'header for hash not found');
      return call(request);
    }
    const height = heightOf(at && typeof at === 'object' ? at.blockNumber : at);
    if (height > head) return nodeError(id, 'header not found');
    params[params.length - 1] = hex(height);
    return call({ ...request, params });
  }
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', async () => {
      const request = JSON.parse(body);
      const answered = Array.isArray(request) ? await Promise.all(request.map(answer)) : await answer(request);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answered));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  proxy.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return proxy;
}
