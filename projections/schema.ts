// Read-model tables, the ones finance tools may query directly (documented in
// the README). Every table belongs to one projector and is rebuilt from the
// events by it.
import { sql, type Kysely, type Migration } from 'kysely';

export interface MerchantsTable {
  id: string;
  name: string;
  tier: string;
  status: string;
  webhook_url: string | null;
  settlement_wallets: Record<string, string>;
  webhook_secret: string;
  created_at: Date;
  updated_at: Date;
}

export interface ApiKeysTable {
  id: string;
  merchant_id: string;
  name: string | null;
  key_hash: string;
  key_prefix: string;
  permissions: string[] | null;
  expires_at: Date | null;
  revoked_at: Date | null;
  created_at: Date;
}

export interface InvoicesTable {
  id: string;
  merchant_id: string;
  /** fiat decimal as given */
  amount: string;
  currency: string;
  /** pending, partial, confirmed, settled, expired */
  status: string;
  cancelled: boolean;
  description: string | null;
  expires_at: Date;
  webhook_url: string | null;
  metadata: Record<string, unknown> | null;
  subscriber_id: string | null;
  /** the quote being paid: chain and token, null before an address exists */
  chain: string | null;
  token: string | null;
  crypto_amount: string | null;
  payment_status: string;
  payment_status_detail: string | null;
  payment_issue_type: string | null;
  paid_late: boolean;
  total_received_amount: string;
  total_received_currency: string;
  remaining_amount: string;
  payment_progress: number;
  has_detected_payment: boolean;
  detected_payment_amount: string | null;
  detected_payment_currency: string | null;
  mismatch_payment: Record<string, string> | null;
  tx_hash: string | null;
  settled_amount: string | null;
  /** none, partial, full (refunds.md) */
  refund_status: string;
  created_at: Date;
  updated_at: Date;
}

export interface InvoiceAddressesTable {
  invoice_id: string;
  chain: string;
  token: string;
  token_decimals: number;
  address: string;
  derivation_index: number;
  rate: string;
  /** base units */
  crypto_amount: string;
  quoted_at: Date;
  rate_valid_until: Date;
  /** The sources whose answers made the rate, joined by '+' (null: a quote from before they were recorded). */
  rate_source: string | null;
  rate_observed_at: Date | null;
}

export interface PaymentsTable {
  payment_id: string;
  invoice_id: string;
  chain: string;
  token: string;
  token_decimals: number;
  /** base units */
  amount: string;
  to_address: string;
  tx_hash: string;
  output_index: number;
  block_number: number;
  block_hash: string;
  wrong_token: boolean;
  /** detected, confirmed, reorged */
  status: string;
  confirmations: number;
  required_confirmations: number;
  detected_at: Date;
  confirmed_at: Date | null;
}

export interface SettlementsTable {
  id: string;
  invoice_id: string;
  merchant_id: string;
  chain: string;
  /** token symbol */
  currency: string;
  /** net, gross and fees as decimal strings in the token */
  amount: string;
  gross_amount: string;
  platform_fee: string;
  network_fee: string;
  from_address: string;
  merchant_wallet: string | null;
  /** pending, submitted, completed, failed */
  status: string;
  attempt: number;
  transaction_hash: string | null;
  /** The last failure in words (the node's or the adapter's message). */
  failure_reason: string | null;
  /** Why it is not going on, as operations.md §3 names it (`failureReason` in the API). */
  failure_code: string | null;
  /** Attempts that reached the chain or failed trying. */
  attempts: number;
  /** The newest change a person must look at (payment_reversed, received_after_payout), when there is one. */
  attention: string | null;
  next_attempt_at: Date | null;
  initiated_at: Date | null;
  completed_at: Date | null;
  failed_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

export interface SubscriptionPlansTable {
  id: string;
  merchant_id: string;
  name: string;
  description: string | null;
  /** fiat decimal as given */
  amount: string;
  currency: string;
  /** day, week, month, year */
  interval: string;
  interval_count: number;
  grace_period_hours: number;
  /** active, archived */
  status: string;
  archived_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

export interface SubscribersTable {
  id: string;
  merchant_id: string;
  plan_id: string;
  email: string;
  external_id: string | null;
  /** pending, active, past_due, cancelled */
  status: string;
  /** index of the current billing period, 0 for the first */
  period: number;
  current_period_start: Date;
  current_period_end: Date;
  grace_period_ends_at: Date;
  cancel_at_end: boolean;
  metadata: Record<string, unknown> | null;
  /** the current period's invoice, and when it was paid (confirmed) */
  current_invoice_id: string;
  current_invoice_paid_at: Date | null;
  activated_at: Date | null;
  past_due_at: Date | null;
  cancelled_at: Date | null;
  /** merchant, period_end, unpaid */
  cancellation_reason: string | null;
  created_at: Date;
  updated_at: Date;
}

/** One row per refund (refunds.md); amounts in token units, decimal text. */
export interface RefundsTable {
  id: string;
  invoice_id: string;
  merchant_id: string;
  chain: string;
  token: string;
  amount: string;
  network_fee: string;
  net_amount: string;
  fiat_amount: string;
  fiat_currency: string;
  reason: string | null;
  destination: string | null;
  claim_token: string;
  claim_expires_at: Date;
  /** awaiting_destination, awaiting_approval, awaiting_funds, sending, completed, canceled, expired, failed */
  status: string;
  /** deposit, refund_wallet; null until approved */
  funded_from: string | null;
  transaction_hash: string | null;
  failure_code: string | null;
  created_at: Date;
  updated_at: Date;
  approved_at: Date | null;
  completed_at: Date | null;
}

/** One row per dashboard user (dashboard.md); never a password hash, TOTP secret or invitation token. */
export interface MerchantUsersTable {
  id: string;
  merchant_id: string;
  email: string;
  /** owner, admin, finance, support, developer, viewer */
  role: string;
  /** invited, active, disabled */
  status: string;
  /** SHA-256 of the invitation's token while it can be used, for finding it; null once used */
  invite_token_hash: string | null;
  invite_expires_at: Date;
  totp_enrolled: boolean;
  invited_at: Date;
  accepted_at: Date | null;
  disabled_at: Date | null;
  updated_at: Date;
}

/** One row per event an actor asked for (projections/activity.ts). */
export interface ActivityTable {
  /** The event's id. */
  id: string;
  merchant_id: string;
  stream_id: string;
  event_type: string;
  /** user, operator or api_key */
  actor_type: string;
  /** The user's or the key's id; null for the operator. */
  actor_id: string | null;
  actor_email: string | null;
  /** What changed, where the type does not say: a merchant's changed fields, a user's new role. */
  detail: string | null;
  /** When the event was recorded. */
  created_at: Date;
}

export interface ReadModelTables {
  activity: ActivityTable;
  merchant_users: MerchantUsersTable;
  refunds: RefundsTable;
  subscription_plans: SubscriptionPlansTable;
  subscribers: SubscribersTable;
  settlements: SettlementsTable;
  merchants: MerchantsTable;
  api_keys: ApiKeysTable;
  invoices: InvoicesTable;
  invoice_addresses: InvoiceAddressesTable;
  payments: PaymentsTable;
}

/** The read models' database, as the API and the queries beside each projector read it. */
export type ReadModels = Kysely<ReadModelTables>;

export const readModelMigrations: Record<string, Migration> = {
  '0001_merchants_and_keys': {
    async up(db) {
      await db.schema
        .createTable('merchants')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('tier', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('webhook_url', 'text')
        .addColumn('settlement_wallets', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
        .addColumn('webhook_secret', 'text', (c) => c.notNull())
        .addColumn('created_at', 'timestamptz', (c) => c.notNull())
        .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('api_keys')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('merchant_id', 'uuid', (c) => c.notNull())
        .addColumn('name', 'text')
        .addColumn('key_hash', 'text', (c) => c.notNull().unique())
        .addColumn('key_prefix', 'text', (c) => c.notNull())
        .addColumn('permissions', 'jsonb')
        .addColumn('expires_at', 'timestamptz')
        .addColumn('revoked_at', 'timestamptz')
        .addColumn('created_at', 'timestamptz', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('api_keys_merchant').on('api_keys').columns(['merchant_id', 'created_at']).execute();
    },
  },
};

readModelMigrations['0002_invoices_and_payments'] = {
  async up(db) {
    await db.schema
      .createTable('invoices')
      .addColumn('id', 'uuid', (c) => c.primaryKey())
      .addColumn('merchant_id', 'uuid', (c) => c.notNull())
      .addColumn('amount', 'text', (c) => c.notNull())
      .addColumn('currency', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('cancelled', 'boolean', (c) => c.notNull())
      .addColumn('description', 'text')
      .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
      .addColumn('webhook_url', 'text')
      .addColumn('metadata', 'jsonb')
      .addColumn('subscriber_id', 'uuid')
      .addColumn('chain', 'text')
      .addColumn('token', 'text')
      .addColumn('crypto_amount', 'text')
      .addColumn('payment_status', 'text', (c) => c.notNull())
      .addColumn('payment_status_detail', 'text')
      .addColumn('payment_issue_type', 'text')
      .addColumn('paid_late', 'boolean', (c) => c.notNull())
      .addColumn('total_received_amount', 'text', (c) => c.notNull())
      .addColumn('total_received_currency', 'text', (c) => c.notNull())
      .addColumn('remaining_amount', 'text', (c) => c.notNull())
      .addColumn('payment_progress', 'integer', (c) => c.notNull())
      .addColumn('has_detected_payment', 'boolean', (c) => c.notNull())
      .addColumn('detected_payment_amount', 'text')
      .addColumn('detected_payment_currency', 'text')
      .addColumn('mismatch_payment', 'jsonb')
      .addColumn('tx_hash', 'text')
      .addColumn('settled_amount', 'text')
      .addColumn('created_at', 'timestamptz', (c) => c.notNull())
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('invoices_merchant_created')
      .on('invoices')
      .columns(['merchant_id', 'created_at'])
      .execute();
    await db.schema.createIndex('invoices_open_expiry').on('invoices').columns(['status', 'expires_at']).execute();
    await db.schema
      .createTable('invoice_addresses')
      .addColumn('chain', 'text', (c) => c.notNull())
      .addColumn('address', 'text', (c) => c.notNull())
      .addColumn('invoice_id', 'uuid', (c) => c.notNull())
      .addColumn('token', 'text', (c) => c.notNull())
      .addColumn('token_decimals', 'integer', (c) => c.notNull())
      .addColumn('derivation_index', 'integer', (c) => c.notNull())
      .addColumn('rate', 'text', (c) => c.notNull())
      .addColumn('crypto_amount', sql`numeric(78,0)`, (c) => c.notNull())
      .addColumn('quoted_at', 'timestamptz', (c) => c.notNull())
      .addColumn('rate_valid_until', 'timestamptz', (c) => c.notNull())
      .addPrimaryKeyConstraint('invoice_addresses_pk', ['chain', 'address'])
      .execute();
    await db.schema.createIndex('invoice_addresses_invoice').on('invoice_addresses').column('invoice_id').execute();
    await db.schema
      .createTable('payments')
      .addColumn('payment_id', 'uuid', (c) => c.primaryKey())
      .addColumn('invoice_id', 'uuid', (c) => c.notNull())
      .addColumn('chain', 'text', (c) => c.notNull())
      .addColumn('token', 'text', (c) => c.notNull())
      .addColumn('token_decimals', 'integer', (c) => c.notNull())
      .addColumn('amount', sql`numeric(78,0)`, (c) => c.notNull())
      .addColumn('to_address', 'text', (c) => c.notNull())
      .addColumn('tx_hash', 'text', (c) => c.notNull())
      .addColumn('output_index', 'integer', (c) => c.notNull())
      .addColumn('block_number', 'integer', (c) => c.notNull())
      .addColumn('block_hash', 'text', (c) => c.notNull())
      .addColumn('wrong_token', 'boolean', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('confirmations', 'integer', (c) => c.notNull())
      .addColumn('required_confirmations', 'integer', (c) => c.notNull())
      .addColumn('detected_at', 'timestamptz', (c) => c.notNull())
      .addColumn('confirmed_at', 'timestamptz')
      .execute();
    await db.schema.createIndex('payments_invoice').on('payments').columns(['invoice_id', 'detected_at']).execute();
    await db.schema.createIndex('payments_open').on('payments').columns(['chain', 'status']).execute();
  },
};

readModelMigrations['0003_settlements'] = {
  async up(db) {
    await db.schema
      .createTable('settlements')
      .addColumn('id', 'uuid', (c) => c.primaryKey())
      .addColumn('invoice_id', 'uuid', (c) => c.notNull().unique())
      .addColumn('merchant_id', 'uuid', (c) => c.notNull())
      .addColumn('chain', 'text', (c) => c.notNull())
      .addColumn('currency', 'text', (c) => c.notNull())
      .addColumn('amount', 'text', (c) => c.notNull())
      .addColumn('gross_amount', 'text', (c) => c.notNull())
      .addColumn('platform_fee', 'text', (c) => c.notNull())
      .addColumn('network_fee', 'text', (c) => c.notNull())
      .addColumn('from_address', 'text', (c) => c.notNull())
      .addColumn('merchant_wallet', 'text')
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('attempt', 'integer', (c) => c.notNull())
      .addColumn('transaction_hash', 'text')
      .addColumn('failure_reason', 'text')
      .addColumn('next_attempt_at', 'timestamptz')
      .addColumn('initiated_at', 'timestamptz')
      .addColumn('completed_at', 'timestamptz')
      .addColumn('failed_at', 'timestamptz')
      .addColumn('created_at', 'timestamptz', (c) => c.notNull())
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('settlements_merchant_created')
      .on('settlements')
      .columns(['merchant_id', 'created_at'])
      .execute();
    await db.schema.createIndex('settlements_open').on('settlements').columns(['status']).execute();
  },
};

readModelMigrations['0004_subscriptions'] = {
  async up(db) {
    await db.schema
      .createTable('subscription_plans')
      .addColumn('id', 'uuid', (c) => c.primaryKey())
      .addColumn('merchant_id', 'uuid', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('description', 'text')
      .addColumn('amount', 'text', (c) => c.notNull())
      .addColumn('currency', 'text', (c) => c.notNull())
      .addColumn('interval', 'text', (c) => c.notNull())
      .addColumn('interval_count', 'integer', (c) => c.notNull())
      .addColumn('grace_period_hours', 'integer', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('archived_at', 'timestamptz')
      .addColumn('created_at', 'timestamptz', (c) => c.notNull())
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('subscription_plans_merchant_created')
      .on('subscription_plans')
      .columns(['merchant_id', 'created_at'])
      .execute();
    await db.schema
      .createTable('subscribers')
      .addColumn('id', 'uuid', (c) => c.primaryKey())
      .addColumn('merchant_id', 'uuid', (c) => c.notNull())
      .addColumn('plan_id', 'uuid', (c) => c.notNull())
      .addColumn('email', 'text', (c) => c.notNull())
      .addColumn('external_id', 'text')
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('period', 'integer', (c) => c.notNull())
      .addColumn('current_period_start', 'timestamptz', (c) => c.notNull())
      .addColumn('current_period_end', 'timestamptz', (c) => c.notNull())
      .addColumn('grace_period_ends_at', 'timestamptz', (c) => c.notNull())
      .addColumn('cancel_at_end', 'boolean', (c) => c.notNull())
      .addColumn('metadata', 'jsonb')
      .addColumn('current_invoice_id', 'uuid', (c) => c.notNull())
      .addColumn('current_invoice_paid_at', 'timestamptz')
      .addColumn('activated_at', 'timestamptz')
      .addColumn('past_due_at', 'timestamptz')
      .addColumn('cancelled_at', 'timestamptz')
      .addColumn('cancellation_reason', 'text')
      .addColumn('created_at', 'timestamptz', (c) => c.notNull())
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('subscribers_merchant_created')
      .on('subscribers')
      .columns(['merchant_id', 'created_at'])
      .execute();
    await db.schema.createIndex('subscribers_plan_status').on('subscribers').columns(['plan_id', 'status']).execute();
    // The renewal scheduler's questions: periods ending, grace periods running out.
    await db.schema
      .createIndex('subscribers_period_end')
      .on('subscribers')
      .columns(['status', 'current_period_end'])
      .execute();
    await db.schema
      .createIndex('subscribers_grace_end')
      .on('subscribers')
      .columns(['status', 'grace_period_ends_at'])
      .execute();
    // A subscriber's invoices (GET /api/v1/subscriptions/subscribers/{id}/invoices).
    await db.schema
      .createIndex('invoices_subscriber')
      .on('invoices')
      .columns(['subscriber_id', 'created_at'])
      .where(sql.ref('subscriber_id'), 'is not', null)
      .execute();
  },
};

readModelMigrations['0005_settlement_failures'] = {
  async up(db) {
    await db.schema
      .alterTable('settlements')
      .addColumn('failure_code', 'text')
      .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('attention', 'text')
      .execute();
    // The operator's views: failed settlements of every merchant, and what needs a person.
    await db.schema
      .createIndex('settlements_failure')
      .on('settlements')
      .columns(['failure_code', 'updated_at'])
      .execute();
  },
};

readModelMigrations['0006_refund_status'] = {
  async up(db) {
    // Every invoice so far has had no refund.
    await db.schema
      .alterTable('invoices')
      .addColumn('refund_status', 'text', (c) => c.notNull().defaultTo('none'))
      .execute();
  },
};

readModelMigrations['0007_refunds'] = {
  async up(db) {
    await db.schema
      .createTable('refunds')
      .addColumn('id', 'uuid', (c) => c.primaryKey())
      .addColumn('invoice_id', 'uuid', (c) => c.notNull())
      .addColumn('merchant_id', 'uuid', (c) => c.notNull())
      .addColumn('chain', 'text', (c) => c.notNull())
      .addColumn('token', 'text', (c) => c.notNull())
      .addColumn('amount', 'text', (c) => c.notNull())
      .addColumn('network_fee', 'text', (c) => c.notNull())
      .addColumn('net_amount', 'text', (c) => c.notNull())
      .addColumn('fiat_amount', 'text', (c) => c.notNull())
      .addColumn('fiat_currency', 'text', (c) => c.notNull())
      .addColumn('reason', 'text')
      .addColumn('destination', 'text')
      .addColumn('claim_token', 'text', (c) => c.notNull().unique())
      .addColumn('claim_expires_at', 'timestamptz', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('funded_from', 'text')
      .addColumn('transaction_hash', 'text')
      .addColumn('failure_code', 'text')
      .addColumn('created_at', 'timestamptz', (c) => c.notNull())
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
      .addColumn('approved_at', 'timestamptz')
      .addColumn('completed_at', 'timestamptz')
      .execute();
    await db.schema
      .createIndex('refunds_merchant_created')
      .on('refunds')
      .columns(['merchant_id', 'created_at'])
      .execute();
    await db.schema.createIndex('refunds_invoice').on('refunds').columns(['invoice_id', 'created_at']).execute();
    // The expiry timer's look: unused claim links, soonest first.
    await db.schema.createIndex('refunds_claim_expiry').on('refunds').columns(['status', 'claim_expires_at']).execute();
  },
};

readModelMigrations['0009_merchant_users'] = {
  async up(db) {
    await db.schema
      .createTable('merchant_users')
      .addColumn('id', 'uuid', (c) => c.primaryKey())
      .addColumn('merchant_id', 'uuid', (c) => c.notNull())
      .addColumn('email', 'text', (c) => c.notNull().unique())
      .addColumn('role', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('invite_token_hash', 'text', (c) => c.unique())
      .addColumn('invite_expires_at', 'timestamptz', (c) => c.notNull())
      .addColumn('totp_enrolled', 'boolean', (c) => c.notNull())
      .addColumn('invited_at', 'timestamptz', (c) => c.notNull())
      .addColumn('accepted_at', 'timestamptz')
      .addColumn('disabled_at', 'timestamptz')
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('merchant_users_merchant')
      .on('merchant_users')
      .columns(['merchant_id', 'invited_at'])
      .execute();
  },
};

readModelMigrations['0010_report_paging'] = {
  async up(db) {
    // The finance reports page through a merchant's rows in (time, id) order
    // (projections/reports.ts): these let each page start at its cursor in an
    // index instead of sorting what is left of the merchant's rows.
    await db.schema
      .createIndex('invoices_merchant_created_id')
      .on('invoices')
      .columns(['merchant_id', 'created_at', 'id'])
      .execute();
    await db.schema.createIndex('payments_detected').on('payments').columns(['detected_at', 'payment_id']).execute();
    // Fees and the ledger count what completed, when it completed.
    await db.schema
      .createIndex('settlements_merchant_completed')
      .on('settlements')
      .columns(['merchant_id', 'completed_at'])
      .where(sql.ref('status'), '=', 'completed')
      .execute();
    await db.schema
      .createIndex('refunds_merchant_completed')
      .on('refunds')
      .columns(['merchant_id', 'completed_at'])
      .where(sql.ref('status'), '=', 'completed')
      .execute();
    // One CSV cell as api/csv.ts writes it (quoted, quotes doubled, a formula
    // start made text with a single quote), for the reports PostgreSQL writes
    // line by line (projections/reports.ts, invoiceCsvPages).
    await sql`
      create or replace function report_csv_cell(v text) returns text language sql immutable parallel safe as $$
        select case when v is null or v = '' then ''
          else '"' || case when left(v, 1) in ('=', '+', '-', '@', chr(9), chr(13)) then '''' else '' end
            || replace(v, '"', '""') || '"' end
      $$`.execute(db);
  },
};

readModelMigrations['0011_rate_provenance'] = {
  async up(db) {
    // Where each quote's rate came from, for the finance reports' rate_source (docs/rates.md).
    await db.schema
      .alterTable('invoice_addresses')
      .addColumn('rate_source', 'text')
      .addColumn('rate_observed_at', 'timestamptz')
      .execute();
  },
};

readModelMigrations['0012_activity'] = {
  async up(db) {
    await db.schema
      .createTable('activity')
      .addColumn('id', 'uuid', (c) => c.primaryKey())
      .addColumn('merchant_id', 'uuid', (c) => c.notNull())
      .addColumn('stream_id', 'text', (c) => c.notNull())
      .addColumn('event_type', 'text', (c) => c.notNull())
      .addColumn('actor_type', 'text', (c) => c.notNull())
      .addColumn('actor_id', 'text')
      .addColumn('actor_email', 'text')
      .addColumn('detail', 'text')
      .addColumn('created_at', 'timestamptz', (c) => c.notNull())
      .execute();
    // The Activity page: a merchant's rows, newest first (projections/paging.ts).
    await db.schema
      .createIndex('activity_merchant_created')
      .on('activity')
      .columns(['merchant_id', 'created_at', 'id'])
      .execute();
  },
};

readModelMigrations['0013_one_quote_per_token'] = {
  async up(db) {
    // An invoice has at most one address, and so one quote, per chain and
    // token: domain/invoice.ts `assignAddress` makes a second AddressAssigned
    // for a chain+token a no-op, and a requote updates the address's row
    // (projections/invoices.ts). Said here as a constraint, the reports join
    // the quote with a plain join, which PostgreSQL may plan as it likes
    // (a hash join, a parallel scan), rather than a lateral sort-and-limit
    // per row. It leads with invoice_id, so it serves every lookup the index
    // it replaces did.
    await db.schema
      .createIndex('invoice_addresses_invoice_token')
      .on('invoice_addresses')
      .columns(['invoice_id', 'chain', 'token'])
      .unique()
      .execute();
    await db.schema.dropIndex('invoice_addresses_invoice').execute();
    // report_csv_cell (0010) with the same rule, cheaper: ascii() reads the
    // first character's code where left() made a text of it and compared it
    // six times under the collation (the invoices report of 200,000 rows,
    // 24 cells each: 2.53 → 2.06 s of backend CPU). It assumes a UTF8
    // database, as PGlite always is: in other multibyte encodings ascii()
    // refuses a non-ASCII character. test/reports-csv.test.ts holds it to
    // api/csv.ts's csvCell.
    await sql`
      create or replace function report_csv_cell(v text) returns text language sql immutable parallel safe as $$
        select case when v is null or v = '' then ''
          when ascii(v) in (61, 43, 45, 64, 9, 13) then '"''' || replace(v, '"', '""') || '"'
          else '"' || replace(v, '"', '""') || '"' end
      $$`.execute(db);
  },
};
