// The migrations as written now leave exactly the schema that databases in
// the field got from them as first written (kysely's schema builder, before
// they became SQL DDL): test/fixtures/field-schema.json was taken from that
// code, on PGlite and on PostgreSQL alike. A migration added later is not
// held to it: each set runs only the migrations the fixture names.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { openPglite, type SqlDatabase } from '../adapters/sql/database.ts';
import { freshPostgres } from './support/postgres.ts';
import { migrateAll, schemaOf } from './support/migrations.ts';

const field = JSON.parse(await readFile(new URL('./fixtures/field-schema.json', import.meta.url), 'utf8'));

async function sameSchema(database: SqlDatabase) {
  try {
    await migrateAll(database.db, field.applied);
    const schema = await schemaOf(database.db);
    for (const part of Object.keys(field)) assert.deepEqual(schema[part as keyof typeof schema], field[part], part);
  } finally {
    await database.close();
  }
}

describe('the migrations leave the schema databases in the field have', () => {
  it('on PGlite', async () => sameSchema(await openPglite('memory://')));

  it('on PostgreSQL', async (t) => {
    const postgres = await freshPostgres();
    if (!postgres) return t.skip('no PostgreSQL');
    try {
      await sameSchema(await postgres.open());
    } finally {
      await postgres.drop();
    }
  });
});
