import { Migrator, sql, type Kysely, type Migration } from 'kysely';

/** Applies migrations in name order, recording them in their own table so that several sets can share one database. */
export async function migrate(db: Kysely<any>, table: string, migrations: Record<string, Migration>): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => migrations },
    migrationTableName: table,
    migrationLockTableName: `${table}_lock`,
  });
  const { error } = await migrator.migrateToLatest();
  if (error) throw error;
}

/**
 * A migration written as the SQL it runs, a statement a string, in order:
 * a table reads best as its `create table`. One statement at a time, as
 * PGlite's extended protocol takes one per query.
 */
export function ddl(...statements: string[]): Migration {
  return {
    async up(db) {
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  };
}
