// The embedded database has no server to arbitrate between processes: two
// processes opening one DATA_DIR would corrupt it. The process that owns the
// directory keeps its pid there; others refuse to open it while it lives.
import { existsSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

const FILE = 'service.pid';

function holder(dataDir: string): number | undefined {
  const path = join(dataDir, FILE);
  if (!existsSync(path)) return undefined;
  const pid = Number(readFileSync(path, 'utf8'));
  if (!Number.isInteger(pid) || pid === process.pid) return undefined;
  try {
    process.kill(pid, 0); // signal 0 only asks whether the process exists
    return pid;
  } catch {
    return undefined; // a crashed owner left its file behind
  }
}

/** Takes DATA_DIR for this process, or throws naming the process that has it. */
export function lockDataDir(dataDir: string): () => void {
  const pid = holder(dataDir);
  if (pid !== undefined) {
    throw new Error(
      `DATA_DIR ${dataDir} is in use by process ${pid}; stop it first (the embedded database allows one process)`,
    );
  }
  mkdirSync(dataDir, { recursive: true });
  const path = join(dataDir, FILE);
  writeFileSync(path, String(process.pid));
  return () => rmSync(path, { force: true });
}
