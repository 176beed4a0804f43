// Schema pieces every route module shares: the contract's `{ data }`
// envelope, nullable fields, the pagination block of list answers and the
// query-string pieces every list endpoint takes.
import { Type } from 'typebox';

export const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) =>
  Type.Union([schema, Type.Null()]);

export const data = <T extends Parameters<typeof Type.Object>[0][string]>(schema: T) => Type.Object({ data: schema });

export const Pagination = Type.Object({
  total: Type.Integer(),
  page: Type.Integer(),
  limit: Type.Integer(),
  totalPages: Type.Integer(),
});

/** A list answer: a page of `schema` and where the page stands. */
export const Paged = <T extends Parameters<typeof Type.Array>[0]>(schema: T) =>
  Type.Object({ data: Type.Array(schema), pagination: Pagination });

export const IdParams = Type.Object({ id: Type.String() });

/** `limit` and `page` of a list's query string, checked by pageOf (query.ts). */
export const PageQuery = {
  limit: Type.Optional(Type.String({ description: '1 to 100, default 20' })),
  page: Type.Optional(Type.String({ description: '1-indexed, default 1' })),
};

/** `from` and `to` of a list bounded by creation time, checked by timeOf (query.ts). */
export const CreatedQuery = {
  from: Type.Optional(Type.String({ description: 'ISO 8601; created on or after' })),
  to: Type.Optional(Type.String({ description: 'ISO 8601; created on or before' })),
};

/** A list's `status`: one of `statuses`, any other the contract's 400. */
export const StatusQuery = (statuses: readonly string[]) =>
  Type.Optional(Type.String({ enum: [...statuses], errorMessage: `Status must be one of ${statuses.join(', ')}` }));
