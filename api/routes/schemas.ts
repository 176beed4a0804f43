// Schema pieces every route module shares: the contract's `{ data }`
// envelope, nullable fields and the pagination block of list answers.
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
