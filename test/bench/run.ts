// `npm run bench`: prints the machine, the databases, then each suite's report.
// BENCH_SCALE=0.1 for a quick run; TEST_DATABASE_URL picks the PostgreSQL
// server (else postgres://postgres@127.0.0.1:5432/postgres if it answers).
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { eventStoreSuite } from './event-store.ts';
import { evmSuite } from './evm.ts';
import { tronRequestsSuite, tronSuite } from './tron.ts';
import { bitcoinSuite } from './bitcoin.ts';
import { solanaSuite } from './solana.ts';
import { httpSuite } from './http.ts';
import { reportsSuite } from './reports.ts';
import { benchScale, resolveTargets, wasInterrupted, type BenchSuite, type BenchTarget } from './support.ts';
import { formatMegabytes, formatSeconds } from './table.ts';

/** The suites, run in this order. */
const suites: readonly BenchSuite[] = [
  eventStoreSuite,
  httpSuite,
  evmSuite,
  tronSuite,
  tronRequestsSuite,
  bitcoinSuite,
  solanaSuite,
  reportsSuite,
];

const rssAtStart = process.memoryUsage().rss;

async function main(): Promise<void> {
  const started = performance.now();
  const scale = benchScale();
  const { targets, close } = await resolveTargets();
  try {
    printHeader(scale, targets);
    // BENCH_ONLY=http (or any part of a suite's name) runs just that suite.
    const only = process.env.BENCH_ONLY?.toLowerCase();
    for (const suite of suites.filter((s) => !only || s.name.toLowerCase().includes(only))) {
      if (wasInterrupted()) break;
      console.error(`running: ${suite.name}`);
      await suite.run({ scale, targets });
    }
  } finally {
    await close();
  }
  console.log(`\nTotal: ${formatSeconds(performance.now() - started)}`);
}

function printHeader(scale: number, targets: readonly BenchTarget[]): void {
  const cpus = os.cpus();
  console.log('# Benchmarks');
  console.log('');
  console.log(
    `- machine: ${cpus.length} cores (${cpus[0]?.model.trim() ?? 'unknown CPU'}), ` +
      `${formatMegabytes(os.totalmem())} RAM, ${os.platform()} ${os.release()}`,
  );
  console.log(`- node ${process.version}; scale ${scale}${scale === 1 ? '' : ' (BENCH_SCALE)'}`);
  for (const target of targets) {
    if (target.skipped) console.log(`- ${target.label}: ${target.skipped}`);
    else console.log(`- ${target.label}: ${target.version} [${target.settings}]`);
  }
  console.log(
    `- RSS: ${formatMegabytes(rssAtStart)} at start, ` +
      `${formatMegabytes(process.memoryUsage().rss)} once a PGlite instance is up (for its version)`,
  );
}

try {
  await main();
} catch (error) {
  console.error(error);
  process.exitCode = 1;
} finally {
  // Everything is closed by now; if a handle still holds the loop, say so and exit anyway.
  setTimeout(() => {
    console.error('bench: open handles remain after the run; exiting');
    process.exit(process.exitCode ?? 0);
  }, 2000).unref();
}
