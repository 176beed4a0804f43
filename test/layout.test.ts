// The layout's rules (.dependency-cruiser.cjs, issue 28) hold: imports flow
// one way, the domain is pure, nothing imports api/. What the code still
// breaks is listed in .dependency-cruiser-known-violations.json; a new
// violation fails here, and so does a listed one that is gone, so the list
// only ever shrinks (`npm run layout:baseline` writes it again).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

const root = new URL('..', import.meta.url);
const LAYERS = ['domain', 'commands', 'projections', 'adapters', 'api', 'deploy'];

interface Violation {
  from: string;
  to: string;
  rule: { name: string; severity: string };
}

function cruise(): { violations: Violation[]; summary: { error: number; ignore: number } } {
  const output = execFileSync(
    process.execPath,
    [
      'node_modules/dependency-cruiser/bin/dependency-cruise.mjs',
      ...LAYERS,
      '--config',
      '.dependency-cruiser.cjs',
      '--ignore-known',
      '--output-type',
      'json',
    ],
    { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
  );
  const { summary } = JSON.parse(output) as { summary: { violations: Violation[]; error: number; ignore: number } };
  return { violations: summary.violations, summary };
}

test('imports follow the layout rules, but for the listed known violations', () => {
  const { violations, summary } = cruise();
  const broken = violations
    .filter((v) => v.rule.severity === 'error')
    .map((v) => `${v.rule.name}: ${v.from} → ${v.to}`);
  assert.deepEqual(broken, [], 'new imports against the layout rules (.dependency-cruiser.cjs)');
  const known = JSON.parse(
    readFileSync(new URL('.dependency-cruiser-known-violations.json', root), 'utf8'),
  ) as unknown[];
  assert.equal(
    summary.ignore,
    known.length,
    'a known violation is gone: run `npm run layout:baseline` so the list holds only what is still there',
  );
});
