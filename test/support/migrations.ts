// Every migration set the service runs, each under the table that records
// it, and the schema they leave as the catalogue describes it: for holding
// a rewritten migration to the effect the databases in the field already had.
import { sql, type Kysely, type Migration } from 'kysely';
import { migrate } from '../../adapters/sql/migrate.ts';
import { eventStoreMigrations } from '../../adapters/event-store/sql.ts';
import { checkpointMigrations } from '../../adapters/event-store/followers.ts';
import { readModelMigrations } from '../../projections/schema.ts';
import { watcherMigrations } from '../../commands/chain-watcher.ts';
import { webhookMigrations } from '../../commands/webhook-delivery.ts';
import { queueMigrations } from '../../commands/payouts.ts';
import { keyUsageMigrations } from '../../api/key-usage.ts';
import { idempotencyMigrations } from '../../api/idempotency.ts';
import { sessionMigrations } from '../../api/dashboard/sessions.ts';
import { expiryMigrations } from '../../commands/expiry.ts';
import { claimMigrations } from '../../commands/refund-expiry.ts';
import { renewalMigrations } from '../../commands/renewals.ts';

/** In the order api/service.ts and the API's plugins run them. */
export const migrationSets: [table: string, migrations: Record<string, Migration>][] = [
  ['es_migrations', eventStoreMigrations],
  ['projection_migrations', checkpointMigrations],
  ['read_model_migrations', readModelMigrations],
  ['watcher_migrations', watcherMigrations],
  ['webhook_migrations', webhookMigrations],
  ['payout_migrations', queueMigrations],
  ['key_usage_migrations', keyUsageMigrations],
  ['idempotency_migrations', idempotencyMigrations],
  ['dashboard_migrations', sessionMigrations],
  ['expiry_migrations', expiryMigrations],
  ['refund_claim_migrations', claimMigrations],
  ['renewal_migrations', renewalMigrations],
];

/** Runs every set; with `only`, of each set only the migrations it names (those a snapshot was taken after). */
export async function migrateAll(db: Kysely<any>, only?: Record<string, string[]>): Promise<void> {
  for (const [table, migrations] of migrationSets) {
    const names = only ? (only[table] ?? []) : Object.keys(migrations);
    if (names.length === 0) continue; // a set newer than the snapshot: not even its table
    const missing = names.filter((name) => !migrations[name]);
    if (missing.length > 0)
      throw new Error(`${table} no longer has ${missing.join(', ')}: a migration run in the field`);
    await migrate(db, table, Object.fromEntries(names.map((name) => [name, migrations[name]!])));
  }
}

/** The rows of `query`, each without its null fields (shorter to keep, and no less exact). */
const rows = async (db: Kysely<any>, query: ReturnType<typeof sql>) =>
  (await query.execute(db)).rows.map((row) =>
    Object.fromEntries(Object.entries(row as object).filter(([, value]) => value !== null)),
  );

/** The public schema as information_schema and pg_catalog describe it, in a stable order. */
export async function schemaOf(db: Kysely<any>) {
  const applied: Record<string, string[]> = {};
  for (const [table] of migrationSets) {
    const exists = await rows(db, sql`select 1 from information_schema.tables where table_name = ${table}`);
    if (exists.length === 0) continue; // a set newer than the snapshot
    applied[table] = (await rows(db, sql`select name from ${sql.table(table)} order by name`)).map(
      (r: any) => r.name as string,
    );
  }
  return {
    applied,
    columns: await rows(
      db,
      sql`select table_name, column_name, ordinal_position, column_default, is_nullable, data_type, udt_name,
            character_maximum_length, numeric_precision, numeric_scale, is_identity, identity_generation,
            identity_start, identity_increment, is_generated, generation_expression
          from information_schema.columns where table_schema = 'public' order by table_name, ordinal_position`,
    ),
    constraints: await rows(
      db,
      sql`select tc.table_name, tc.constraint_name, tc.constraint_type, pg_get_constraintdef(c.oid) as definition,
            rc.update_rule, rc.delete_rule
          from information_schema.table_constraints tc
          join pg_constraint c on c.conname = tc.constraint_name and c.connamespace = 'public'::regnamespace
          left join information_schema.referential_constraints rc
            on rc.constraint_name = tc.constraint_name and rc.constraint_schema = tc.constraint_schema
          where tc.table_schema = 'public' and tc.constraint_type <> 'CHECK'
          order by tc.table_name, tc.constraint_name`,
    ),
    indexes: await rows(
      db,
      sql`select tablename, indexname, indexdef from pg_indexes where schemaname = 'public' order by tablename, indexname`,
    ),
    sequences: await rows(
      db,
      sql`select sequence_name, data_type, start_value, minimum_value, maximum_value, increment, cycle_option
          from information_schema.sequences where sequence_schema = 'public' order by sequence_name`,
    ),
    routines: await rows(
      db,
      sql`select p.proname, pg_get_function_identity_arguments(p.oid) as arguments, pg_get_functiondef(p.oid) as definition
          from pg_proc p where p.pronamespace = 'public'::regnamespace order by p.proname`,
    ),
  };
}
