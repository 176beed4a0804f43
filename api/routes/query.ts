// Query-string rules shared by the list endpoints (interface.md, "Limits"),
// and the lookup of the caller's own resource by the id in its path.
import { badRequest, notFound } from '../errors.ts';

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The caller's row of the resource `id` names, found by `find` when `id` is a
 * UUID; else the contract's 404 with `message`, also for another merchant's.
 */
export async function ownRow<Row extends { merchant_id: string }>(
  id: string,
  merchantId: string,
  find: (id: string) => Promise<Row | undefined>,
  message: string,
): Promise<Row> {
  const row = UUID.test(id) ? await find(id) : undefined;
  if (!row || row.merchant_id !== merchantId) throw notFound(message);
  return row;
}

/** `limit` 1–100 (default 20) and `page` from 1 (default 1). */
export function pageOf(query: { limit?: string; page?: string }): { limit: number; page: number } {
  return {
    limit: wholeNumber(query.limit, 20, 'Limit must be a whole number from 1 to 100', 1, 100),
    page: wholeNumber(query.page, 1, 'Page must be a whole number of at least 1', 1, 1_000_000),
  };
}

/** The `pagination` block of a list answer. */
const pagination = (total: number, { limit, page }: { limit: number; page: number }) => ({
  total,
  page,
  limit,
  totalPages: Math.ceil(total / limit),
});

/** A list answer: the page the query asks for (pageOf), its rows from `find` shown by `view`, and its pagination. */
export async function listPage<Row, View>(
  query: { limit?: string; page?: string },
  find: (paging: { limit: number; page: number }) => Promise<{ rows: readonly Row[]; total: number }>,
  view: (row: Row) => View,
) {
  const paging = pageOf(query);
  const { rows, total } = await find(paging);
  return { data: rows.map(view), pagination: pagination(total, paging) };
}

function wholeNumber(raw: string | undefined, fallback: number, message: string, min: number, max: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < min || n > max) throw badRequest(message);
  return n;
}

/** An ISO 8601 date or date-time from the query, or a 400 naming the parameter. */
export function timeOf(raw: string | undefined, name: string): Date | undefined {
  if (raw === undefined) return undefined;
  const time = new Date(raw);
  if (Number.isNaN(time.getTime()) || !/^\d{4}-\d\d-\d\d/.test(raw)) {
    throw badRequest(`${name} must be an ISO 8601 date or date-time`);
  }
  return time;
}
