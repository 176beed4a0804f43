// One page of a read-model list, the way every list endpoint pages: newest
// first (then by id, so that equal times keep one order), with the number of
// rows the filters match in all.
import { sql, type SelectQueryBuilder } from 'kysely';

export interface Page {
  limit: number;
  page: number;
}

export async function newestFirst<DB, TB extends keyof DB>(
  query: SelectQueryBuilder<DB, TB, {}>,
  { limit, page }: Page,
) {
  const [counted, rows] = await Promise.all([
    // The count's row type is lost to the generic tables; it is one column.
    query.select(sql<string | number>`count(*)`.as('total')).executeTakeFirstOrThrow() as Promise<{
      total: string | number;
    }>,
    query
      .selectAll()
      .orderBy(sql`created_at`, 'desc')
      .orderBy(sql`id`)
      .limit(limit)
      .offset((page - 1) * limit)
      .execute(),
  ]);
  return { rows, total: Number(counted.total) };
}
