// The loader hooks of import-log.mjs (they run on the loader's own thread).
import { appendFileSync } from 'node:fs';

export async function resolve(specifier, context, nextResolve) {
  const resolved = await nextResolve(specifier, context);
  appendFileSync(process.env.IMPORT_LOG, `${resolved.url}\n`);
  return resolved;
}
