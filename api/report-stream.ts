// A finance report as text, CSV or NDJSON, produced a page of rows at a time:
// the stream asks for the next page only when the reader took the last one
// (Readable.from pulls), so a slow client holds back the database reads and
// memory stays at a page.
import { Readable } from 'node:stream';
import type { Kysely } from 'kysely';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import {
  columnsOf,
  invoiceCsvText,
  ledgerCells,
  ledgerColumns,
  ledgerOf,
  metadataCell,
  metadataKeysOf,
  reportPages,
  type RecordKind,
  type ReportCell,
  type ReportKind,
  type ReportScope,
} from '../projections/reports.ts';
import type { ReadModelTables } from '../projections/schema.ts';
import { csvLine } from './csv.ts';

export type ReportFormat = 'csv' | 'ndjson';

export interface ReportRequest {
  kind: ReportKind;
  format: ReportFormat;
  scope: ReportScope;
  timeZone: string;
}

/** The CSV column of a metadata key. */
export const metadataColumn = (key: string) => `metadata.${key}`;

/**
 * The report's text in chunks of a page each. The header (and, for CSV, the
 * metadata pre-pass that decides it) is read before the first chunk, so a
 * failing query fails the request before anything is sent.
 */
export async function reportChunks(
  database: Pick<SqlDatabase, 'db' | 'engine' | 'copyText'>,
  { kind, format, scope, timeZone }: ReportRequest,
): Promise<AsyncIterable<string | Uint8Array>> {
  const db = database.db as Kysely<ReadModelTables>;
  const engine = database.engine;
  if (kind === 'ledger') {
    const rows = (await ledgerOf(db, scope)).map(ledgerCells);
    return (async function* () {
      if (format === 'csv') yield [ledgerColumns, ...rows].map(csvLine).join('');
      else yield rows.map((cells) => `${JSON.stringify(objectOf(ledgerColumns, cells))}\n`).join('');
    })();
  }
  const columns = columnsOf(kind);
  if (format === 'ndjson') {
    return (async function* () {
      for await (const page of reportPages(db, kind, scope, timeZone, { engine })) {
        yield page
          .map(
            (record) => `${JSON.stringify({ ...objectOf(columns, record.cells), metadata: record.metadata ?? {} })}\n`,
          )
          .join('');
      }
    })();
  }
  const keys = await metadataKeysOf(db, kind as RecordKind, scope);
  return (async function* () {
    yield csvLine([...columns, ...keys.map(metadataColumn)]);
    if (kind === 'invoices') {
      yield* invoiceCsvText(db, scope, timeZone, keys, { copy: database.copyText });
      return;
    }
    for await (const page of reportPages(db, kind, scope, timeZone, { engine })) {
      let chunk = '';
      for (const record of page) {
        const metadata = record.metadata ?? {};
        chunk += csvLine(
          keys.length === 0 ? record.cells : [...record.cells, ...keys.map((k) => metadataCell(metadata[k]))],
        );
      }
      yield chunk;
    }
  })();
}

function objectOf(columns: readonly string[], cells: readonly ReportCell[]): Record<string, ReportCell> {
  const record: Record<string, ReportCell> = {};
  for (let i = 0; i < columns.length; i++) record[columns[i]!] = cells[i] ?? null;
  return record;
}

/** The report as a byte stream with backpressure. */
export async function reportStream(
  database: Pick<SqlDatabase, 'db' | 'engine' | 'copyText'>,
  request: ReportRequest,
): Promise<Readable> {
  return Readable.from(await reportChunks(database, request), { objectMode: false });
}

export const contentTypeOf = (format: ReportFormat) =>
  format === 'csv' ? 'text/csv; charset=utf-8; header=present' : 'application/x-ndjson; charset=utf-8';
