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
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

export const bundleDir = fileURLToPath(new URL('./dist/', import.meta.url));
export const bundleMain = `${bundleDir}main.js`;

export async function buildBundle(): Promise<void> {
  // Chunks are named by their content: clear those of an older build.
  rmSync(bundleDir, { recursive: true, force: true });
  await esbuild.build({
    entryPoints: [fileURLToPath(new URL('./main.ts', import.meta.url))],
    outdir: bundleDir,
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
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await buildBundle();
