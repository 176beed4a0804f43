// The HTTP API under load (autocannon), each beside a bare fastify route on
// the same database in the same run, on PGlite and on PostgreSQL, with the
// ratio goals of issue 13: the public status endpoint at 64 connections
// beside a one-row primary-key select (goal 0.70), and POST /api/v1/payments
// at 16 connections beside a one-row insert (goal 0.25).
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { WebSocket } from 'ws';
import { freshPostgres } from '../support/postgres.ts';
import { bundleMain } from '../../api/build.ts';
import { DepositKeyring, WatchOnlyDeriver } from '../../adapters/keys/derivation.ts';
import { qrCodePng } from '../../adapters/keys/qr.ts';
import { findToken } from '../../domain/catalogue.ts';
import { paymentUri } from '../../domain/payment-uri.ts';
import { freePort } from '../support/process.ts';
import type { BenchSuite } from './support.ts';
import { formatMegabytes, formatRate, formatRatio, markdownTable } from './table.ts';

const READ_CONNECTIONS = 64;
const WRITE_CONNECTIONS = 16;
const root = fileURLToPath(new URL('../..', import.meta.url));

interface Ready {
  serviceUrl: string;
  bareUrl: string;
  key: string;
  invoiceId: string;
}

interface Measured {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
}

async function load(options: autocannon.Options): Promise<Measured> {
  const result = await autocannon({ connections: READ_CONNECTIONS, ...options });
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts + result.non2xx,
  };
}

async function startServer(env: Record<string, string>) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/bench/http-server.ts'], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const ready = await new Promise<Ready>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.once('line', (line) => resolve(JSON.parse(line) as Ready));
    child.once('exit', (code) => reject(new Error(`bench server exited with ${code}`)));
  });
  const rss = () => {
    try {
      return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1]) * 1024;
    } catch {
      return NaN;
    }
  };
  return {
    ready,
    rss,
    stop: () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

const IDLE_SOCKETS = 2000;

/** The resident memory of every process in process group `pgid` (npm, its shell, the service). */
function groupRss(pgid: number): number {
  let total = 0;
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // Fields after the command's closing parenthesis: state ppid pgrp …
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) !== pgid) continue;
      total += Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
    } catch {
      // The process ended meanwhile.
    }
  }
  return total;
}

/**
 * `command` as an operator runs it (`npm start`, or the bundle it built for
 * another instance): its whole process group's RSS 10 s after it answers
 * /healthz, still holding start-up's garbage, and 60 s after, once V8 has
 * given back what start-up grew (its young generation, a fragmented old one;
 * on this machine that happens 25–30 s after start), which is what an idle
 * instance keeps.
 */
async function idleRss(
  databaseUrl: string,
  command: [string, ...string[]],
): Promise<{ early: number; settled: number }> {
  const port = await freePort();
  const child = spawn(command[0], command.slice(1), {
    cwd: root,
    detached: true,
    env: { ...process.env, DATABASE_URL: databaseUrl, PORT: String(port), DATA_DIR: 'memory://' },
    stdio: 'ignore',
  });
  try {
    for (let tries = 0; ; tries++) {
      if (tries > 600) throw new Error('npm start did not answer /healthz in 60 s');
      const up = await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.ok,
        () => false,
      );
      if (up) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    const early = groupRss(child.pid!);
    await new Promise((resolve) => setTimeout(resolve, 50_000));
    return { early, settled: groupRss(child.pid!) };
  } finally {
    process.kill(-child.pid!, 'SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
  }
}

/**
 * The CPU a payment needs whatever the code around it: its deposit address
 * (BIP-32 public derivation and the address encoding) and its QR code (the
 * contract's PNG), timed here one after the other, beside the time a payment
 * may take on the service's one thread at the goal (a quarter of the same
 * run's one-row inserts per second).
 */
function paymentFloor(insertsPerSecond: number): string {
  const keyring = DepositKeyring.fromMnemonic('test test test test test test test test test test test junk');
  const deriver = new WatchOnlyDeriver(keyring.accountXpubs());
  // The bench's payments: 10 USDT on Tron. qrCodePng itself caches nothing.
  const usdt = findToken('tron', 'USDT')!;
  const uris = Array.from({ length: 50 }, (_, i) =>
    paymentUri({
      chain: 'tron',
      address: deriver.deriveAddress('tron', i),
      contract: usdt.contractAddress,
      amount: 10_000_000n,
      decimals: usdt.decimals,
    }),
  );
  const perCall = (work: (i: number) => void) => {
    for (let i = 0; i < 200; i++) work(i); // warm-up
    const calls = 2000;
    const started = performance.now();
    for (let i = 0; i < calls; i++) work(1000 + i);
    return (performance.now() - started) / calls;
  };
  const deriveMs = perCall((i) => deriver.deriveAddress('tron', i));
  const qrMs = perCall((i) => qrCodePng(uris[i % uris.length]!));
  const budgetMs = 1000 / (0.25 * insertsPerSecond);
  return (
    `address ${deriveMs.toFixed(2)} ms + QR code ${qrMs.toFixed(2)} ms = ${(deriveMs + qrMs).toFixed(2)} ms ` +
    `of the ${budgetMs.toFixed(2)} ms a payment may take at the goal (0.25 × ${formatRate(insertsPerSecond)}), ` +
    `leaving ${(budgetMs - deriveMs - qrMs).toFixed(2)} ms for HTTP, authentication, the append and the consumers`
  );
}

/** Server memory per idle socket: RSS with the sockets open minus RSS before, over their number. */
async function idleSocketCost(serviceUrl: string, invoiceId: string, rss: () => number): Promise<string> {
  const before = rss();
  const url = `${serviceUrl.replace('http://', 'ws://')}/ws/invoices/${invoiceId}`;
  const sockets: WebSocket[] = [];
  for (let i = 0; i < IDLE_SOCKETS; i += 250) {
    const batch = Array.from(
      { length: Math.min(250, IDLE_SOCKETS - i) },
      () =>
        new Promise<WebSocket>((resolve, reject) => {
          const socket = new WebSocket(url, { perMessageDeflate: false });
          socket.once('message', () => resolve(socket));
          socket.once('error', reject);
        }),
    );
    sockets.push(...(await Promise.all(batch)));
  }
  await new Promise((r) => setTimeout(r, 1000));
  const after = rss();
  for (const socket of sockets) socket.close();
  const perSocket = (after - before) / IDLE_SOCKETS;
  return `server RSS ${formatMegabytes(before)} → ${formatMegabytes(after)} with ${IDLE_SOCKETS} open: about ${(perSocket / 1024).toFixed(1)} KB per idle socket`;
}

export const httpSuite: BenchSuite = {
  name: 'HTTP API under load',
  async run({ scale, targets }) {
    const duration = Math.max(2, Math.round(10 * scale));
    const rows: string[][] = [];
    const notes: string[] = [];
    const socketNotes: string[] = [];
    const idleNotes: string[] = [];
    const floorNotes: string[] = [];
    for (const target of targets) {
      if (target.skipped) {
        notes.push(`- ${target.label}: ${target.skipped}`);
        continue;
      }
      const postgres = target.engine === 'postgres' ? await freshPostgres() : undefined;
      const server = await startServer(postgres ? { DATABASE_URL: postgres.url } : { DATA_DIR: 'memory://' });
      try {
        const { serviceUrl, bareUrl, key, invoiceId } = server.ready;
        const paymentBody = JSON.stringify({ amount: '10', currency: 'USD', chain: 'tron', token: 'USDT' });
        const post = (url: string, headers: Record<string, string> = {}) =>
          load({
            url,
            method: 'POST',
            headers: { ...headers, 'content-type': 'application/json' },
            body: paymentBody,
            duration,
            connections: WRITE_CONNECTIONS,
          });
        const baseline = await load({ url: `${bareUrl}/pk/${invoiceId}`, duration });
        const status = await load({ url: `${serviceUrl}/api/v1/invoices/${invoiceId}/status`, duration });
        const inserts = await post(`${bareUrl}/insert`);
        const payments = await post(`${serviceUrl}/api/v1/payments`, { authorization: `Bearer ${key}` });
        const row = (name: string, m: Measured, base: Measured | undefined, goal: string) => [
          target.label,
          name,
          formatRate(m.rps),
          `${m.p50} ms`,
          `${m.p99} ms`,
          base ? formatRatio(m.rps, base.rps) : '',
          goal,
          String(m.errors),
        ];
        socketNotes.push(`- ${target.label}: ${await idleSocketCost(serviceUrl, invoiceId, server.rss)}`);
        rows.push(row(`bare route, one PK select, ${READ_CONNECTIONS} conn. (baseline)`, baseline, undefined, ''));
        rows.push(row(`GET /api/v1/invoices/{id}/status, ${READ_CONNECTIONS} conn.`, status, baseline, '≥ 0.70'));
        rows.push(row(`bare route, one-row insert, ${WRITE_CONNECTIONS} conn. (baseline)`, inserts, undefined, ''));
        rows.push(row(`POST /api/v1/payments, ${WRITE_CONNECTIONS} conn.`, payments, inserts, '≥ 0.25'));
        floorNotes.push(`- ${target.label}: ${paymentFloor(inserts.rps)}`);
        notes.push(`- ${target.label}: server RSS after the runs ${formatMegabytes(server.rss())}`);
      } finally {
        await server.stop();
        await postgres?.drop();
      }
      if (postgres) {
        // npm start builds the bundle (prestart) that the extra instance then runs.
        for (const [label, command, goal] of [
          ['`npm start` (npm, its shell, the service)', ['npm', 'start'], '< 200 MB'],
          [
            'an extra instance (`node api/dist/main.js`)',
            [process.execPath, '--enable-source-maps', bundleMain],
            '< 150 MB',
          ],
        ] as const) {
          const idle = await freshPostgres();
          try {
            const { early, settled } = await idleRss(idle!.url, [...command]);
            idleNotes.push(
              `- ${label}: ${formatMegabytes(settled)} 60 s after /healthz (goal ${goal}); ${formatMegabytes(early)} at 10 s`,
            );
          } finally {
            await idle?.drop();
          }
        }
      }
    }
    console.log('\n## HTTP API under load (autocannon)\n');
    console.log(
      markdownTable(
        ['database', 'request', 'requests/s', 'p50', 'p99', 'ratio to its baseline', 'goal', 'errors'],
        rows,
      ),
    );
    console.log(`\n${duration} s per run; the server runs in its own process, autocannon in this one.`);
    for (const note of notes) console.log(note);
    console.log(`\n## What a payment cannot do without, on the service's one thread\n`);
    for (const note of floorNotes) console.log(note);
    console.log('\n## Idle RSS on PostgreSQL, whole process group\n');
    for (const note of idleNotes) console.log(note);
    console.log(`\n## Idle WebSockets on /ws/invoices/{id} (${IDLE_SOCKETS} sockets on one invoice)\n`);
    for (const note of socketNotes) console.log(note);
  },
};
