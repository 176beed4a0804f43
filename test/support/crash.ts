// The crash tests' one harness: the real service process over a data
// directory of its own, started, killed (SIGKILL from the test, or by the
// service's own failpoint at a named step) and started again on the same
// directory, so that what it wrote before the kill is what it reads after.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startProcess, type ServiceProcess } from './process.ts';

export interface CrashHarness {
  /** The process started last (killed or not). */
  readonly running: ServiceProcess | undefined;
  /**
   * Starts the service over the data directory and answers its URL;
   * `extra` adds to the environment, `FAILPOINTS` naming the step where it kills itself.
   */
  start(extra?: Record<string, string>): Promise<string>;
  /** Ends it as a deploy does (SIGTERM) and waits for it. */
  stop(): Promise<void>;
  /** Kills it (SIGKILL) wherever it is, and waits for it. */
  kill(): Promise<void>;
  /** Calls `mine` (a block at a time) until the failpoint has killed it; throws unless it died of SIGKILL within a minute. */
  untilKilled(mine: () => unknown): Promise<void>;
  /** Waits up to `ms` for a failpoint the flow reaches by itself; asserts that it killed the process. */
  killedWithin(ms: number): Promise<void>;
  /** Runs `work` over a fresh data directory, then stops whatever still runs and removes the directory. */
  withDataDir(work: () => Promise<void>): Promise<void>;
}

/**
 * `env` is the service's environment (read at each start, so that it may
 * name what a `before` hook set up); `name` prefixes the data directory.
 */
export function crashHarness(name: string, env: () => Record<string, string> = () => ({})): CrashHarness {
  let running: ServiceProcess | undefined;
  let dir: string | undefined;
  const alive = () => running !== undefined && running.child.exitCode === null && running.child.signalCode === null;
  return {
    get running() {
      return running;
    },
    async start(extra = {}) {
      if (!dir) throw new Error('start the service inside withDataDir');
      running = await startProcess({ ...env(), DATA_DIR: dir, ...extra });
      return running.url;
    },
    async stop() {
      if (alive()) await running!.stop();
    },
    async kill() {
      running!.child.kill('SIGKILL');
      await running!.exited;
    },
    async untilKilled(mine) {
      const deadline = Date.now() + 60_000;
      while (alive()) {
        if (Date.now() > deadline) throw new Error('the failpoint did not kill the service in time');
        await mine();
        await new Promise((r) => setTimeout(r, 25));
      }
      if (running!.child.signalCode !== 'SIGKILL') {
        throw new Error(`the service ended with ${running!.child.signalCode ?? running!.child.exitCode}, not SIGKILL`);
      }
    },
    async killedWithin(ms) {
      const exit = await Promise.race([running!.exited, new Promise((r) => setTimeout(() => r('alive'), ms))]);
      assert.notEqual(exit, 'alive', 'the failpoint killed the process');
      assert.equal(running!.child.signalCode, 'SIGKILL');
    },
    async withDataDir(work) {
      dir = await mkdtemp(join(tmpdir(), `invoicing-${name}-`));
      try {
        await work();
      } finally {
        if (alive()) await running!.stop();
        await rm(dir, { recursive: true, force: true });
        dir = undefined;
      }
    },
  };
}
