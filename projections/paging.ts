// One page of a read-model list, the way every list endpoint pages: newest
// first (then by id, so that equal times keep one order), with the number of
// rows the filters match in all.
import { sql, type SelectQueryBuilder } from 'kysely';

/** A row's place in the list's order: its creation time and id. */
export interface Cursor {
  at: Date;
  id: string;
}

export interface Page {
  limit: number;
  page: number;
  /**
   * Keyset paging (the dashboard's): the rows after this one, instead of
   * skipping `page - 1` pages, so that a page deep in thousands costs what the
   * first does and rows created meanwhile do not shift it.
   */
  after?: Cursor;
}

export async function newestFirst<DB, TB extends keyof DB>(
  query: SelectQueryBuilder<DB, TB, {}>,
  { limit, page, after }: Page,
) {
  const rows = after
    ? query.where(sql<boolean>`(created_at < ${after.at} or (created_at = ${after.at} and id > ${after.id}))`)
    : query.offset((page - 1) * limit);
  const [counted, found] = await Promise.all([
    // The count's row type is lost to the generic tables; it is one column.
    query.select(sql<string | number>`count(*)`.as('total')).executeTakeFirstOrThrow() as Promise<{
      total: string | number;
    }>,
    rows
      .selectAll()
      .orderBy(sql`created_at`, 'desc')
      .orderBy(sql`id`)
      .limit(limit)
      .execute(),
  ]);
  return { rows: found, total: Number(counted.total) };
}
