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
  /** Keyset paging back: the `limit` rows just before this one, still newest first. */
  before?: Cursor;
}

export async function newestFirst<DB, TB extends keyof DB>(
  query: SelectQueryBuilder<DB, TB, {}>,
  { limit, page, after, before }: Page,
) {
  // Going back reads the order the other way from the cursor, and turns the page round.
  const rows = after
    ? query
        .where(sql<boolean>`(created_at < ${after.at} or (created_at = ${after.at} and id > ${after.id}))`)
        .orderBy(sql`created_at`, 'desc')
        .orderBy(sql`id`)
    : before
      ? query
          .where(sql<boolean>`(created_at > ${before.at} or (created_at = ${before.at} and id < ${before.id}))`)
          .orderBy(sql`created_at`)
          .orderBy(sql`id`, 'desc')
      : query
          .orderBy(sql`created_at`, 'desc')
          .orderBy(sql`id`)
          .offset((page - 1) * limit);
  const [counted, found] = await Promise.all([
    // The count's row type is lost to the generic tables; it is one column.
    query.select(sql<string | number>`count(*)`.as('total')).executeTakeFirstOrThrow() as Promise<{
      total: string | number;
    }>,
    rows.selectAll().limit(limit).execute(),
  ]);
  return { rows: before ? found.reverse() : found, total: Number(counted.total) };
}
