// Dashboard sessions and sign-in failures, kept in SQL so that every
// instance sees them: a session signed in on one is known on another, and is
// ended on all of them when its user is disabled. Not read models: nothing
// here is in the events, and a rebuild does not touch it.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { sql, type Kysely, type Migration } from 'kysely';
import type { SqlDatabase } from '../../adapters/sql/database.ts';
import { ddl, migrate } from '../../adapters/sql/migrate.ts';
import { isUserRole, type UserRole } from '../../domain/merchant-user.ts';
import type { ReadModelTables } from '../../projections/schema.ts';

/** A session ends 12 hours after sign-in, or after 30 minutes without a request. */
export const SESSION_ABSOLUTE_MS = 12 * 60 * 60 * 1000;
export const SESSION_IDLE_MS = 30 * 60 * 1000;
/** Sensitive actions ask for the password again when it was last given longer ago than this. */
export const REAUTHENTICATION_MS = 5 * 60 * 1000;
/** Ten failed sign-ins of one address within 15 minutes lock it for 15 minutes. */
export const LOCK_AFTER_FAILURES = 10;
export const FAILURE_WINDOW_MS = 15 * 60 * 1000;

interface SessionTables {
  dashboard_sessions: {
    /** SHA-256 of the cookie's value: a copy of the table signs nobody in. */
    id_hash: string;
    user_id: string;
    csrf_token: string;
    created_at: Date;
    last_seen_at: Date;
    authenticated_at: Date;
  };
  dashboard_sign_in_failures: { email: string; failed_at: Date };
  /** The TOTP time steps each user has signed in with: a code is good once (RFC 6238 §5.2). */
  dashboard_totp_steps: { user_id: string; step: number; used_at: Date };
}

export const sessionMigrations: Record<string, Migration> = {
  '0001_sessions': ddl(
    `create table dashboard_sessions (
      id_hash text primary key,
      user_id uuid not null,
      csrf_token text not null,
      created_at timestamptz not null,
      last_seen_at timestamptz not null,
      authenticated_at timestamptz not null
    )`,
    `create index dashboard_sessions_user on dashboard_sessions (user_id)`,
    `create table dashboard_sign_in_failures (
      email text not null,
      failed_at timestamptz not null
    )`,
    `create index dashboard_sign_in_failures_email on dashboard_sign_in_failures (email, failed_at)`,
  ),
  '0002_totp_steps': ddl(
    `create table dashboard_totp_steps (
      user_id uuid not null,
      step bigint not null,
      used_at timestamptz not null,
      constraint dashboard_totp_steps_pk primary key (user_id, step)
    )`,
  ),
};

/** The signed-in person behind a request. */
export interface DashboardSession {
  userId: string;
  email: string;
  role: UserRole;
  merchantId: string;
  merchantName: string;
  csrfToken: string;
  totpEnrolled: boolean;
  authenticatedAt: Date;
}

const hashSessionId = (id: string) => createHash('sha256').update(id).digest('hex');

/** Whether a session of these times is over at `now` (pure, for the rule's own test). */
export function sessionOver(times: { createdAt: Date; lastSeenAt: Date }, now: Date): boolean {
  return (
    now.getTime() - times.createdAt.getTime() >= SESSION_ABSOLUTE_MS ||
    now.getTime() - times.lastSeenAt.getTime() >= SESSION_IDLE_MS
  );
}

/** Whether a sensitive action must ask for the password again. */
export const needsReauthentication = (session: Pick<DashboardSession, 'authenticatedAt'>, now: Date) =>
  now.getTime() - session.authenticatedAt.getTime() > REAUTHENTICATION_MS;

/** Whether the failures of an address within the window lock it (pure). */
export const lockedOut = (recentFailures: number) => recentFailures >= LOCK_AFTER_FAILURES;

/** Two secrets compared in constant time (their hashes, so lengths do not matter). */
export function sameSecret(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}

export function csrfTokenMatches(session: DashboardSession, token: unknown): boolean {
  return typeof token === 'string' && sameSecret(session.csrfToken, token);
}

/** Sessions use the wall clock: the sandbox's business clock may run days ahead. */
export async function dashboardSessions(database: SqlDatabase, now: () => Date = () => new Date()) {
  await migrate(database.db, 'dashboard_migrations', sessionMigrations);
  const db = database.db as unknown as Kysely<SessionTables & ReadModelTables>;

  return {
    /** A new session for `userId`; the returned id goes into the cookie and nowhere else. */
    async start(userId: string): Promise<string> {
      const id = randomBytes(32).toString('base64url');
      const at = now();
      await db
        .insertInto('dashboard_sessions')
        .values({
          id_hash: hashSessionId(id),
          user_id: userId,
          csrf_token: randomBytes(32).toString('base64url'),
          created_at: at,
          last_seen_at: at,
          authenticated_at: at,
        })
        .execute();
      return id;
    },

    /** The session of a cookie's value, if it is still on and its user still active; marks it seen. */
    async find(id: string | undefined): Promise<DashboardSession | undefined> {
      if (!id || id.length > 100) return undefined;
      const idHash = hashSessionId(id);
      const row = await db
        .selectFrom('dashboard_sessions as s')
        .innerJoin('merchant_users as u', 'u.id', 's.user_id')
        .innerJoin('merchants as m', 'm.id', 'u.merchant_id')
        .select([
          's.user_id',
          's.csrf_token',
          's.created_at',
          's.last_seen_at',
          's.authenticated_at',
          'u.email',
          'u.role',
          'u.status',
          'u.totp_enrolled',
          'u.merchant_id',
          'm.name as merchant_name',
          'm.status as merchant_status',
        ])
        .where('s.id_hash', '=', idHash)
        .executeTakeFirst();
      if (!row) return undefined;
      const at = now();
      const over = sessionOver({ createdAt: new Date(row.created_at), lastSeenAt: new Date(row.last_seen_at) }, at);
      if (over || row.status !== 'active' || row.merchant_status !== 'active' || !isUserRole(row.role)) {
        await db.deleteFrom('dashboard_sessions').where('id_hash', '=', idHash).execute();
        return undefined;
      }
      await db.updateTable('dashboard_sessions').set({ last_seen_at: at }).where('id_hash', '=', idHash).execute();
      return {
        userId: row.user_id,
        email: row.email,
        role: row.role,
        merchantId: row.merchant_id,
        merchantName: row.merchant_name,
        csrfToken: row.csrf_token,
        totpEnrolled: row.totp_enrolled,
        authenticatedAt: new Date(row.authenticated_at),
      };
    },

    async reauthenticated(id: string) {
      await db
        .updateTable('dashboard_sessions')
        .set({ authenticated_at: now() })
        .where('id_hash', '=', hashSessionId(id))
        .execute();
    },

    async end(id: string) {
      await db.deleteFrom('dashboard_sessions').where('id_hash', '=', hashSessionId(id)).execute();
    },

    /** Every session of a user, at once (disabled). */
    async endAllOf(userId: string) {
      await db.deleteFrom('dashboard_sessions').where('user_id', '=', userId).execute();
    },

    /**
     * Records that `userId` gave the code of TOTP step `step`; false when it
     * was given before, so a code seen over a shoulder or in a log cannot
     * be used again within its 90 seconds.
     */
    async useTotpStep(userId: string, step: number): Promise<boolean> {
      const at = now();
      const inserted = await db
        .insertInto('dashboard_totp_steps')
        .values({ user_id: userId, step, used_at: at })
        .onConflict((oc) => oc.columns(['user_id', 'step']).doNothing())
        .returning('step')
        .execute();
      // Steps older than the window taken are never asked about again.
      await db
        .deleteFrom('dashboard_totp_steps')
        .where('used_at', '<', new Date(at.getTime() - 10 * 60 * 1000))
        .execute();
      return inserted.length === 1;
    },

    /** Failed sign-ins of `email` in the last 15 minutes, known user or not. */
    async recentFailures(email: string): Promise<number> {
      const since = new Date(now().getTime() - FAILURE_WINDOW_MS);
      const row = await db
        .selectFrom('dashboard_sign_in_failures')
        .select(sql<string>`count(*)`.as('n'))
        .where('email', '=', email)
        .where('failed_at', '>', since)
        .executeTakeFirstOrThrow();
      return Number(row.n);
    },

    async recordFailure(email: string) {
      const at = now();
      await db.insertInto('dashboard_sign_in_failures').values({ email, failed_at: at }).execute();
      // What is past the window counts for nothing any more.
      await db
        .deleteFrom('dashboard_sign_in_failures')
        .where('failed_at', '<=', new Date(at.getTime() - FAILURE_WINDOW_MS))
        .execute();
    },
  };
}

export type DashboardSessions = Awaited<ReturnType<typeof dashboardSessions>>;
