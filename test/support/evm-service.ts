// The frame of a suite that runs the service against the local Hardhat node:
// the node or the reason its tests skip, and the service started before the
// tests and stopped, with the node, after them.
import { after, before } from 'node:test';
import { evmFixture, type EvmFixture } from './evm-flow.ts';
import { startHardhat, type LocalNode } from './hardhat.ts';
import { startTestService, type RunningService } from './service.ts';

/** The Hardhat node for a suite, or why its tests skip (said once, naming `tests`). */
export async function hardhatOrSkip(tests: string): Promise<{ node: LocalNode; skip: string | false }> {
  const started = await startHardhat();
  const skip = 'skip' in started ? started.skip : false;
  if (skip) console.log(`# skipped ${tests}: ${skip}`);
  return { node: started as LocalNode, skip };
}

/**
 * Inside a describe: the fixture and a service on it before the tests
 * (handed to `ready`), the service and the node stopped after them.
 */
export function serviceOnNode(node: LocalNode, ready: (fx: EvmFixture, svc: RunningService) => void): void {
  let svc: RunningService | undefined;
  before(async () => {
    const fx = await evmFixture(node);
    svc = await startTestService(fx.env);
    ready(fx, svc);
  });
  after(async () => {
    await svc?.close();
    await node.stop();
  });
}
