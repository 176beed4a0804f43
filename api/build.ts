// The service as one ES module bundle, which `npm start` (prestart) and the
// image build make and plain node runs: no TypeScript loader thread nor
// esbuild helper process stays resident beside the service (about 70 MB of
// an idle process group; docs/benchmarks.md). Tests and the CLI still run
// the sources through tsx; the black-box tests run this bundle.
//
// Packages stay external: node resolves node_modules as usual, and a chain
// adapter imported only when its chain has a node becomes a chunk of its own.
// The bundle sits one folder below api/, as api/routes/ does, so a path
// relative to a module (the checkout page's stylesheet and script) resolves
// to the same file from the sources and from the bundle.
//
// Several `npm start` in one checkout build at once, beside services already
// running from an earlier bundle: so no bundle is ever changed in place. Each
// is written once, to a folder named by its content hash (api/.dist-<hash>,
// made whole under a temporary name and renamed into place), and api/dist is
// a symbolic link swapped to it in one rename. Node runs main.js by its real
// path, so a running service keeps loading its chunks from its own folder.
import { createHash, randomUUID } from 'node:crypto';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const apiDir = fileURLToPath(new URL('./', import.meta.url));
export const bundleDir = join(apiDir, 'dist/');
export const bundleMain = `${bundleDir}main.js`;

/** A bundle no longer linked is kept this long for services still running from it. */
const KEEP_OLD_BUNDLE_MS = 24 * 60 * 60 * 1000;

export async function buildBundle(): Promise<void> {
  const { outputFiles } = await esbuild.build({
    entryPoints: [fileURLToPath(new URL('./main.ts', import.meta.url))],
    outdir: bundleDir,
    write: false,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    packages: 'external',
    sourcemap: 'linked',
    logLevel: 'warning',
  });
  await esbuild.stop();
  const files = outputFiles.map((f) => ({ path: relative(bundleDir, f.path), contents: f.contents }));
  const hash = createHash('sha256');
  for (const file of files) hash.update(file.path).update('\0').update(file.contents);
  const name = `.dist-${hash.digest('hex').slice(0, 16)}`;
  const folder = join(apiDir, name);
  if (!existsSync(folder)) {
    const partial = `${folder}.${randomUUID()}.partial`;
    for (const file of files) {
      mkdirSync(dirname(join(partial, file.path)), { recursive: true });
      writeFileSync(join(partial, file.path), file.contents);
    }
    try {
      renameSync(partial, folder);
    } catch {
      rmSync(partial, { recursive: true, force: true }); // another build put the same bundle there first
    }
  }
  linkBundle(name);
  pruneBundles(name);
}

/** Points api/dist at the bundle `name`, in one rename. */
function linkBundle(name: string) {
  const link = bundleDir.replace(/\/$/, '');
  // A checkout built before bundles were linked has api/dist as a folder.
  if (existsSync(link) && !lstatSync(link).isSymbolicLink()) rmSync(link, { recursive: true, force: true });
  const next = `${link}.${randomUUID()}.link`;
  symlinkSync(name, next, 'junction');
  renameSync(next, link);
}

/** Bundles neither linked nor written lately, and partial ones a build that died left. */
function pruneBundles(current: string) {
  for (const entry of readdirSync(apiDir)) {
    if (!entry.startsWith('.dist-') || entry === current) continue;
    const path = join(apiDir, entry);
    const age = Date.now() - (statSync(path, { throwIfNoEntry: false })?.mtimeMs ?? Date.now());
    if (age > KEEP_OLD_BUNDLE_MS) rmSync(path, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await buildBundle();
