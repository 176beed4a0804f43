// A local Hardhat 2 node on 127.0.0.1 for the EVM integration tests, and the
// small ERC-20 of test/fixtures/TestToken.sol compiled with solc-js and
// deployed on it. When the node cannot start, `startHardhat` says why and
// the tests skip with that reason.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { ContractFactory, JsonRpcProvider, Network, NonceManager, Wallet, type Contract } from 'ethers';
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
