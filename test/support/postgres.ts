// Tests that need a real PostgreSQL run when TEST_DATABASE_URL is set, each
// in a database of its own created here and dropped afterwards; without it
// they are skipped with a printed reason, never silently.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { openPostgres, type SqlDatabase } from '../../adapters/sql/database.ts';

export interface FreshPostgres {
  url: string;
  open(): Promise<SqlDatabase>;
  drop(): Promise<void>;
}

export async function freshPostgres(): Promise<FreshPostgres | undefined> {
  const adminUrl = process.env.TEST_DATABASE_URL;
  if (!adminUrl) {
    console.log('# skipped PostgreSQL tests: TEST_DATABASE_URL is not set');
    return undefined;
  }
  const name = `test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  try {
    await admin.connect();
    await admin.query(`create database ${name}`);
  } catch (error) {
    console.log(`# skipped PostgreSQL tests: ${adminUrl} does not answer (${(error as Error).message})`);
    return undefined;
  } finally {
    await admin.end().catch(() => undefined);
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    open: () => openPostgres(url.toString()),
    async drop() {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
    },
  };
}
