// Black-box: several service processes on one machine (operations.md §1, §5):
// who gets DATA_DIR, `npm start` beside another, and a rebuild beside a
// running instance.
import assert from 'node:assert/strict';
import { readdirSync, realpathSync, statSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { buildBundle, bundleDir } from '../api/build.ts';
import { freshPostgres } from './support/postgres.ts';
import { runCli, startNpmStart, startProcess, type ServiceProcess } from './support/process.ts';

/** Whether the process came up (startProcess returns once it answers or has exited). */
async function isUp(service: ServiceProcess): Promise<boolean> {
  try {
    return (await fetch(`${service.url}/healthz`)).ok;
  } catch {
    return false;
  }
}

describe('service processes on one machine', () => {
  const dirs: string[] = [];
  const newDataDir = async () => {
    const dir = await mkdtemp(join(tmpdir(), 'invoicing-instances-'));
    dirs.push(dir);
    return dir;
  };
  after(() => Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true }))));

  it('takes DATA_DIR at once after its owner is SIGKILLed, and despite a pid file naming a live process', async () => {
    const dir = await newDataDir();
    const first = await startProcess({ DATA_DIR: dir });
    assert.ok(await isUp(first), first.output());
    first.child.kill('SIGKILL');
    // Started now, without waiting for the killed process to be gone.
    const second = await startProcess({ DATA_DIR: dir });
    assert.ok(await isUp(second), second.output());
    assert.equal(await second.stop(), 0);

    // A container reuses low pids: the file may name a process that is not the service.
    await writeFile(join(dir, 'service.pid'), String(process.pid));
    const third = await startProcess({ DATA_DIR: dir });
    assert.ok(await isUp(third), third.output());
    assert.equal(await third.stop(), 0);
  });

  it('lets exactly one of two processes started at once on one DATA_DIR take it, and names it to the other', async () => {
    const dir = await newDataDir();
    const both = await Promise.all([startProcess({ DATA_DIR: dir }), startProcess({ DATA_DIR: dir })]);
    const up = await Promise.all(both.map(isUp));
    assert.equal(up.filter(Boolean).length, 1, both.map((s) => s.output()).join('\n---\n'));
    const winner = both[up.indexOf(true)]!;
    const loser = both[up.indexOf(false)]!;
    assert.equal(await loser.exited, 1);
    assert.match(loser.output(), new RegExp(`DATA_DIR .* is in use by process ${winner.child.pid}`));
    assert.equal(await winner.stop(), 0);
  });

  it('refuses a projections rebuild while a service projects into the same PostgreSQL database, naming it', async (t) => {
    const postgres = await freshPostgres();
    if (!postgres) return t.skip('TEST_DATABASE_URL is not set');
    try {
      const env = { DATABASE_URL: postgres.url, DATA_DIR: await newDataDir() };
      const service = await startProcess(env);
      try {
        assert.ok(await isUp(service), service.output());
        const refused = await runCli(['projections', 'rebuild'], env);
        assert.equal(refused.code, 1, refused.output);
        assert.match(
          refused.output,
          new RegExp(
            `projection \\w+ is being projected by invoicing service pid ${service.child.pid} port \\d+ host `,
          ),
        );
      } finally {
        assert.equal(await service.stop(), 0);
      }
      const rebuilt = await runCli(['projections', 'rebuild'], env);
      assert.equal(rebuilt.code, 0, rebuilt.output);
    } finally {
      await postgres.drop();
    }
  });

  it('leaves the bundle a running service was started from untouched when the checkout builds again', async () => {
    const service = await startProcess({ DATA_DIR: await newDataDir() });
    try {
      assert.ok(await isUp(service), service.output());
      // The folder it runs from, whatever api/dist points to after the build.
      const folder = realpathSync(bundleDir);
      const files = () =>
        readdirSync(folder).map((name) => {
          const { ino, mtimeMs } = statSync(join(folder, name));
          return { name, ino, mtimeMs };
        });
      const before = files();
      await buildBundle(); // what `npm start` beside it does first (prestart)
      assert.deepEqual(files(), before);
      assert.ok(await isUp(service), service.output());
    } finally {
      await service.stop();
    }
  });

  it('runs two `npm start` in one checkout, started together, each on its own port and DATA_DIR', async () => {
    const both = await Promise.all([
      startNpmStart({ DATA_DIR: await newDataDir() }),
      startNpmStart({ DATA_DIR: await newDataDir() }),
    ]);
    try {
      for (const service of both) assert.ok(await isUp(service), service.output());
    } finally {
      await Promise.all(both.map((service) => service.stop()));
    }
  });
});
