import { Migrator, type Kysely, type Migration } from 'kysely';

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
