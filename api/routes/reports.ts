// Reports for finance tools (operations.md §3): GET /api/v1/reports/{kind},
// streamed as CSV or NDJSON. Columns and rules: docs/reports.md.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Kysely } from 'kysely';
import type { SqlEngine } from '../../adapters/sql/database.ts';
import type { ReadModelTables } from '../../projections/schema.ts';
import { Type } from 'typebox';
import { instantOf, isTimeZone } from '../../projections/report-time.ts';
import { isReportKind, reportKinds } from '../../projections/reports.ts';
import type { SqlDatabase } from '../../adapters/sql/database.ts';
import type { Authentication } from '../auth.ts';
import type { ReadModels } from '../../projections/schema.ts';
import { badRequest } from '../errors.ts';
import { contentTypeOf, reportStream, type ReportFormat, type ReportRequest } from '../report-stream.ts';

const ReportQuery = Type.Object({
  from: Type.Optional(
    Type.String({ description: 'ISO 8601 date or date-time, inclusive; without an offset, in `timezone`' }),
  ),
  to: Type.Optional(
    Type.String({ description: 'ISO 8601 date or date-time, exclusive; without an offset, in `timezone`' }),
  ),
  format: Type.Optional(Type.String({ description: 'csv (default) or ndjson' })),
  timezone: Type.Optional(Type.String({ description: 'IANA time zone of the dates written, default UTC' })),
});

/** The report asked for, or a 400 that says what is wrong with the request. */
export function reportRequestOf(
  merchantId: string,
  kind: string,
  query: { from?: string; to?: string; format?: string; timezone?: string },
): ReportRequest {
  if (!isReportKind(kind)) throw badRequest(`Report kind must be one of ${reportKinds.join(', ')}`);
  const format = query.format ?? 'csv';
  if (format !== 'csv' && format !== 'ndjson') throw badRequest('Format must be csv or ndjson');
  const timeZone = query.timezone ?? 'UTC';
  if (!isTimeZone(timeZone)) throw badRequest('Timezone must be an IANA time zone such as UTC or Europe/Berlin');
  const instant = (raw: string | undefined, name: string) => {
    if (raw === undefined) return undefined;
    const at = instantOf(raw, timeZone);
    if (at === undefined) throw badRequest(`${name} must be an ISO 8601 date or date-time`);
    return at;
  };
  const from = instant(query.from, 'from');
  const to = instant(query.to, 'to');
  if (from !== undefined && to !== undefined && to <= from) throw badRequest('to must be after from');
  return { kind, format: format as ReportFormat, timeZone, scope: { merchantId, from, to } };
}

/** The report streamed as an attachment named after its kind and days (also the dashboard's CSV exports). */
export async function sendReport(reply: FastifyReply, database: SqlDatabase, report: ReportRequest) {
  const stream = await reportStream(database, report);
  const span = [report.scope.from, report.scope.to].map((d) => d?.toISOString().slice(0, 10) ?? 'all');
  return reply
    .type(contentTypeOf(report.format))
    .header('Content-Disposition', `attachment; filename="${report.kind}-${span.join('-')}.${report.format}"`)
    .header('Cache-Control', 'no-store')
    .send(stream);
}

/** What these routes use of the service. */
export interface ReportRouteDeps {
  auth: Authentication;
  database: SqlDatabase;
}

export async function reportRoutes(scope: FastifyInstance, { auth, database }: ReportRouteDeps) {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/api/v1/reports/:kind',
    {
      onRequest: auth.merchant('reports:read'),
      schema: {
        tags: ['reports'],
        summary: 'A finance report, streamed as CSV or NDJSON',
        description:
          'kind: invoices, payments, settlements, refunds, fees or ledger. Amounts are exact decimal strings, every fiat value has its rate and rate source, metadata is flattened into metadata.<key> columns (CSV). Columns: docs/reports.md.',
        security: [{ apiKey: [] }],
        params: Type.Object({ kind: Type.String() }),
        querystring: ReportQuery,
      },
    },
    async (request, reply) => {
      const report = reportRequestOf(request.caller!.merchantId, request.params.kind, request.query);
      return sendReport(reply, database, report);
    },
  );
}
