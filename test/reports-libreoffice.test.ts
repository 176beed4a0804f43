// A report opened in LibreOffice shows its amounts as text with every decimal
// (issue 31): the ledger CSV, imported with the settings docs/reports.md gives
// finance ("Format quoted field as text"), converted to PDF headless and read
// back with pdftotext. Opt-in: skipped, saying so, where `soffice` or
// `pdftotext` is not installed (Debian: libreoffice-calc-nogui, poppler-utils).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import type { Kysely } from 'kysely';
import { openPglite, type SqlDatabase } from '../adapters/sql/database.ts';
import { reportChunks } from '../api/report-stream.ts';
import { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { readModelMigrations, type PaymentsTable, type ReadModelTables } from '../projections/schema.ts';
import { generateHistory, insertHistory } from './support/report-history.ts';

const run = promisify(execFile);

/** LibreOffice's CSV import: comma, double quote, UTF-8, from line 1, no column types, English, quoted fields as text. */
export const LIBREOFFICE_CSV_FILTER = 'CSV:44,34,76,1,,1033,true,false';

async function installed(command: string): Promise<boolean> {
  try {
    await run('which', [command]);
    return true;
  } catch {
    return false;
  }
}

const missing = async () => {
  for (const command of ['soffice', 'pdftotext']) if (!(await installed(command))) return command;
  return undefined;
};

describe('a report opened in LibreOffice', async () => {
  const absent = await missing();
  if (absent)
    console.log(
      `# skipped LibreOffice test: ${absent} is not installed (apt-get install libreoffice-calc-nogui poppler-utils)`,
    );
  let database: SqlDatabase;
  let dir: string;
  const merchantId = randomUUID();

  before(async () => {
    if (absent) return;
    dir = await mkdtemp(join(tmpdir(), 'report-lo-'));
    database = await openPglite('memory://');
    await ProjectionEngine.migrate(database, readModelMigrations);
    // One wei of ETH and a hundred USDT, both confirmed: the amounts a spreadsheet would shorten.
    const history = generateHistory(3, merchantId, 1);
    const invoiceId = history.invoices[0]!.id;
    const payment = (chain: string, token: string, decimals: number, amount: string): PaymentsTable => ({
      payment_id: randomUUID(),
      invoice_id: invoiceId,
      chain,
      token,
      token_decimals: decimals,
      amount,
      to_address: `addr-${chain}`,
      tx_hash: `0x${randomUUID()}`,
      output_index: 0,
      block_number: 1,
      block_hash: '0xb',
      wrong_token: false,
      status: 'confirmed',
      confirmations: 20,
      required_confirmations: 12,
      detected_at: new Date('2026-02-01T10:00:00Z'),
      confirmed_at: new Date('2026-02-01T10:05:00Z'),
    });
    await insertHistory(database.db as Kysely<ReadModelTables>, {
      ...history,
      payments: [payment('ethereum', 'ETH', 18, '1'), payment('tron', 'USDT', 6, '100000000')],
      settlements: [],
      refunds: [],
    });
  });
  after(async () => {
    if (absent) return;
    await database.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('shows amounts as text with all their decimals', { skip: absent !== undefined }, async () => {
    const chunks = await reportChunks(database, {
      kind: 'ledger',
      format: 'csv',
      timeZone: 'UTC',
      scope: { merchantId, from: undefined, to: undefined },
    });
    let csv = '';
    for await (const chunk of chunks) csv += chunk;
    const csvPath = join(dir, 'ledger.csv');
    await writeFile(csvPath, csv);
    await run(
      'soffice',
      ['--headless', `--infilter=${LIBREOFFICE_CSV_FILTER}`, '--convert-to', 'pdf', '--outdir', dir, csvPath],
      {
        timeout: 180_000,
        env: { ...process.env, HOME: dir },
      },
    );
    const { stdout: text } = await run('pdftotext', ['-layout', join(dir, 'ledger.pdf'), '-']);
    assert.match(text, /0\.000000000000000001/, text);
    assert.match(text, /100\.000000\b/, text);
    assert.doesNotMatch(text, /1E-18/i, text);
    // A picture of the page for docs/reports.md, when poppler's pdftoppm is there (REPORT_PNG names where).
    if (process.env.REPORT_PNG && (await installed('pdftoppm'))) {
      await run('pdftoppm', ['-png', '-r', '90', '-singlefile', join(dir, 'ledger.pdf'), process.env.REPORT_PNG]);
      assert.ok((await readFile(`${process.env.REPORT_PNG}.png`)).length > 0);
    }
  });
});
