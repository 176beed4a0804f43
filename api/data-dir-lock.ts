// The embedded database has no server to arbitrate between processes: two
// processes opening one DATA_DIR would corrupt it. The lock is a listening
// unix socket named from the directory's real path, so the operating system
// decides: binding is atomic (of two processes started together exactly one
// binds), and the kernel unbinds it as soon as the owner's descriptors close,
// however it died, before it is even a zombie. On Linux the socket lives in
// the abstract namespace (no file to go stale), which is per network
// namespace: two containers given one DATA_DIR volume must share the host's
// or one network namespace to see each other's lock. Elsewhere it is a file
// in DATA_DIR, and one nobody answers on is a dead owner's, taken over (two
// processes taking over the same stale file at once could both bind).
// The pid file only names the owner in the refusal; it decides nothing.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:net';
import { join } from 'node:path';

const PID_FILE = 'service.pid';

/** Where the lock of `dataDir` (an existing directory) is bound. */
function lockAddress(dataDir: string): string {
  const real = realpathSync(dataDir);
  if (process.platform !== 'linux') return join(real, 'service.sock');
  return `\0crypto-invoicing-data-dir-${createHash('sha256').update(real).digest('hex')}`;
}

function bind(address: string): Promise<Server | undefined> {
  return new Promise((resolve, reject) => {
    const server = createServer((socket) => socket.destroy());
    server.once('error', (error: NodeJS.ErrnoException) =>
      error.code === 'EADDRINUSE' ? resolve(undefined) : reject(error),
    );
    server.listen(address, () => resolve(server.unref()));
  });
}

/** A socket file nobody listens on was left by a dead owner. */
function answers(address: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = connect(address, () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
}

function ownerOf(dataDir: string): string {
  try {
    const pid = readFileSync(join(dataDir, PID_FILE), 'utf8').trim();
    if (/^\d+$/.test(pid)) return `process ${pid}`;
  } catch {
    // The owner is still starting and has not written it yet.
  }
  return 'another process';
}

/**
 * An owner killed a moment ago may not have closed its descriptors yet (its
 * threads are still being stopped: 0.15 s measured with PGlite loaded), so a
 * lock found held is tried again for this long before the refusal.
 */
const DYING_OWNER_MS = 2_000;

async function take(address: string): Promise<Server | undefined> {
  const server = await bind(address);
  if (server || address.startsWith('\0') || (await answers(address))) return server;
  rmSync(address, { force: true });
  return bind(address);
}

/** Takes DATA_DIR for this process, or throws naming the process that has it; resolves to its release. */
export async function lockDataDir(dataDir: string): Promise<() => void> {
  mkdirSync(dataDir, { recursive: true });
  const address = lockAddress(dataDir);
  const deadline = Date.now() + DYING_OWNER_MS;
  let server = await take(address);
  while (!server && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    server = await take(address);
  }
  if (!server) {
    throw new Error(
      `DATA_DIR ${dataDir} is in use by ${ownerOf(dataDir)}; stop it first (the embedded database allows one process)`,
    );
  }
  const owned = server;
  const pidFile = join(dataDir, PID_FILE);
  writeFileSync(pidFile, String(process.pid));
  return () => {
    rmSync(pidFile, { force: true });
    owned.close();
  };
}
