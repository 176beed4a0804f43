// Runs the real service as a child process, the way `npm start` does: the
// bundle api/build.ts makes, under plain node.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { buildBundle, bundleMain } from '../../api/build.ts';

export const root = fileURLToPath(new URL('../..', import.meta.url));

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

export interface ServiceProcess {
  url: string;
  child: ChildProcess;
  output(): string;
  /** Sends SIGTERM and resolves with the exit code. */
  stop(): Promise<number | null>;
  exited: Promise<number | null>;
}

/** Built once per test file, from the sources as they are now. */
let built: Promise<void> | undefined;

/** `nodeOptions`: node's own options before the bundle's path (`--import` of a test preload). */
export async function startProcess(env: Record<string, string>, nodeOptions: string[] = []): Promise<ServiceProcess> {
  await (built ??= buildBundle());
  return startService(process.execPath, [...nodeOptions, '--enable-source-maps', bundleMain], env);
}

/**
 * `npm start` itself, prestart's build included, in its own process group
 * (npm, its shell and the service), which `stop` ends with SIGTERM.
 */
export function startNpmStart(env: Record<string, string>): Promise<ServiceProcess> {
  return startService('npm', ['start', '--silent'], env, true);
}

async function startService(
  command: string,
  args: string[],
  env: Record<string, string>,
  group = false,
): Promise<ServiceProcess> {
  const port = env.PORT ?? String(await freePort());
  const child = spawn(command, args, {
    cwd: root,
    env: { ...process.env, APP_ENV: 'development', PORT: port, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: group,
  });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  // A child that could not even be spawned ends too ('error' without 'exit'), so nothing waits for it forever.
  const exited = new Promise<number | null>((resolve) => {
    child.on('exit', (code) => resolve(code));
    child.on('error', () => resolve(null));
  });
  const signal = (name: NodeJS.Signals) => {
    if (!group) return child.kill(name);
    try {
      process.kill(-child.pid!, name);
    } catch {
      // the group has ended already
    }
  };
  const url = `http://127.0.0.1:${port}`;
  // Generous: on a loaded 2-core machine a cold start with PGlite can take tens of seconds.
  const deadline = Date.now() + 120_000;
  for (;;) {
    const state = await Promise.race([
      exited.then(() => 'exited'),
      new Promise((r) => setTimeout(() => r('waiting'), 100)),
    ]);
    if (state === 'exited') break;
    try {
      if ((await fetch(`${url}/healthz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      signal('SIGKILL');
      throw new Error(`service did not start:\n${output}`);
    }
  }
  return {
    url,
    child,
    output: () => output,
    exited,
    async stop() {
      signal('SIGTERM');
      return exited;
    },
  };
}

/** Runs a command-line program to its end. */
export async function runCli(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'api/cli.ts', ...args], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  return { code, output };
}

/** JSON over real HTTP against a service process; the body of any answer is parsed. */
export async function callService(url: string, method: string, path: string, token?: string, body?: unknown) {
  const res = await fetch(url + path, {
    method,
    headers: {
      ...(token && { authorization: `Bearer ${token}` }),
      ...(body !== undefined && { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as any };
}
