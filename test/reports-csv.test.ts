// The report CSV writer (RFC 4180, formula-safe) and the report's time rules,
// without a database; and the same cell rule as the SQL function PostgreSQL
// writes the invoices report with.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sql } from 'kysely';
import { openPglite } from '../adapters/sql/database.ts';
import { csvCell, csvLine } from '../api/csv.ts';
import { ProjectionEngine } from '../adapters/event-store/followers.ts';
import { readModelMigrations } from '../projections/schema.ts';
import { parseCsv } from './support/csv.ts';
import { instantOf, isTimeZone } from '../projections/report-time.ts';

describe('report CSV', () => {
  it('quotes every value, doubles quotes, keeps commas and line breaks inside, ends lines with CRLF', () => {
    const line = csvLine(['a', 'say "hi"', 'one, two', 'line\r\nbreak', null, '']);
    assert.equal(line, '"a","say ""hi""","one, two","line\r\nbreak",,\r\n');
    assert.deepEqual(parseCsv(line), [['a', 'say "hi"', 'one, two', 'line\r\nbreak', '', '']]);
  });

  it('makes a cell that begins with = + - @ tab or CR text, with a single quote inside its quotes', () => {
    for (const start of ['=', '+', '-', '@', '\t', '\r']) {
      const value = `${start}HYPERLINK("http://evil.example")`;
      assert.equal(csvCell(value), `"'${value.replaceAll('"', '""')}"`, JSON.stringify(start));
      assert.equal(parseCsv(csvLine([value]))[0]![0], `'${value}`);
    }
    // A metadata value that looks like a negative number is text too; report amounts are never negative.
    assert.equal(csvCell('-1.5'), `"'-1.5"`);
    assert.equal(csvCell('1.5'), '"1.5"');
    assert.equal(csvCell('a=b'), '"a=b"');
  });

  it('keeps every decimal of an amount', () => {
    assert.equal(csvCell('0.000000000000000001'), '"0.000000000000000001"');
    assert.equal(csvCell('100.000000'), '"100.000000"');
  });
});

describe('report_csv_cell, the cell rule in SQL (migration 0012)', () => {
  it('writes every cell as csvCell does', async () => {
    const database = await openPglite('memory://');
    try {
      await ProjectionEngine.migrate(database, readModelMigrations);
      const values = [
        ...[null, '', 'a', 'say "hi"', '""', 'one, two', 'line\r\nbreak', '\nfirst', ' =', 'a=b', "'quoted"],
        ...['=', '+', '-', '@', '\t', '\r'].flatMap((start) => [start, `${start}HYPERLINK("http://evil.example")`]),
        ...['-1.5', '0.000000000000000001', 'é-start', '€', '😀=', '\u00a0=', 'ＡＢ'],
      ];
      for (const value of values) {
        const { rows } = await sql<{ cell: string }>`select report_csv_cell(${value}) as cell`.execute(database.db);
        assert.equal(rows[0]!.cell, csvCell(value), JSON.stringify(value));
      }
    } finally {
      await database.close();
    }
  });
});

describe('report time', () => {
  it('knows IANA zones and refuses others', () => {
    assert.ok(isTimeZone('UTC'));
    assert.ok(isTimeZone('Europe/Berlin'));
    assert.ok(!isTimeZone('Mars/Olympus'));
    assert.ok(!isTimeZone(''));
  });

  it("reads a date or date-time without offset on the zone's wall clock, with one as given", () => {
    assert.equal(instantOf('2026-01-01', 'Europe/Berlin')?.toISOString(), '2025-12-31T23:00:00.000Z');
    assert.equal(instantOf('2026-07-01T12:30', 'Europe/Berlin')?.toISOString(), '2026-07-01T10:30:00.000Z');
    assert.equal(instantOf('2026-07-01T12:30:00Z', 'Europe/Berlin')?.toISOString(), '2026-07-01T12:30:00.000Z');
    assert.equal(instantOf('2026-07-01T12:30:00.25-02:00', 'UTC')?.toISOString(), '2026-07-01T14:30:00.250Z');
    assert.equal(instantOf('2026-01-01', 'UTC')?.toISOString(), '2026-01-01T00:00:00.000Z');
    for (const bad of ['2026-13-01', '2026-02-30', 'yesterday', '2026-01-01T25:00', '1700000000']) {
      assert.equal(instantOf(bad, 'UTC'), undefined, bad);
    }
  });
});
