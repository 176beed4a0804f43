// Read-model tables, the ones finance tools may query directly (documented in
// the README). Every table belongs to one projector and is rebuilt from the
// events by it.
import type { Kysely, Migration } from 'kysely';
import { ddl } from '../adapters/sql/migrate.ts';

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
  /**
   * The newest change a person must look at (payment_reversed, received_after_payout, paid_elsewhere,
   * platform_fee_uncollected), when there is one.
   */
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
  /** The last failure in words, for the operator's attention list (null on rows not written since 0015). */
  failure_reason: string | null;
  created_at: Date;
  updated_at: Date;
  approved_at: Date | null;
  completed_at: Date | null;
}

/**
 * One row per refund held on a settlement's stream and not yet paid or given
 * back (domain/settlement.ts SettlementRefundHeld): what a settlement, or the
 * settlement of an invoice still open, waits for.
 */
export interface RefundHoldsTable {
  settlement_id: string;
  refund_id: string;
  held_at: Date;
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
  refund_holds: RefundHoldsTable;
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
  '0001_merchants_and_keys': ddl(
    `create table merchants (
      id uuid primary key,
      name text not null,
      tier text not null,
      status text not null,
      webhook_url text,
      settlement_wallets jsonb not null default '{}'::jsonb,
      webhook_secret text not null,
      created_at timestamptz not null,
      updated_at timestamptz not null
    )`,
    `create table api_keys (
      id uuid primary key,
      merchant_id uuid not null,
      name text,
      key_hash text not null unique,
      key_prefix text not null,
      permissions jsonb,
      expires_at timestamptz,
      revoked_at timestamptz,
      created_at timestamptz not null
    )`,
    `create index api_keys_merchant on api_keys (merchant_id, created_at)`,
  ),
  '0002_invoices_and_payments': ddl(
    `create table invoices (
      id uuid primary key,
      merchant_id uuid not null,
      amount text not null,
      currency text not null,
      status text not null,
      cancelled boolean not null,
      description text,
      expires_at timestamptz not null,
      webhook_url text,
      metadata jsonb,
      subscriber_id uuid,
      chain text,
      token text,
      crypto_amount text,
      payment_status text not null,
      payment_status_detail text,
      payment_issue_type text,
      paid_late boolean not null,
      total_received_amount text not null,
      total_received_currency text not null,
      remaining_amount text not null,
      payment_progress integer not null,
      has_detected_payment boolean not null,
      detected_payment_amount text,
      detected_payment_currency text,
      mismatch_payment jsonb,
      tx_hash text,
      settled_amount text,
      created_at timestamptz not null,
      updated_at timestamptz not null
    )`,
    `create index invoices_merchant_created on invoices (merchant_id, created_at)`,
    `create index invoices_open_expiry on invoices (status, expires_at)`,
    `create table invoice_addresses (
      chain text not null,
      address text not null,
      invoice_id uuid not null,
      token text not null,
      token_decimals integer not null,
      derivation_index integer not null,
      rate text not null,
      crypto_amount numeric(78,0) not null,
      quoted_at timestamptz not null,
      rate_valid_until timestamptz not null,
      constraint invoice_addresses_pk primary key (chain, address)
    )`,
    `create index invoice_addresses_invoice on invoice_addresses (invoice_id)`,
    `create table payments (
      payment_id uuid primary key,
      invoice_id uuid not null,
      chain text not null,
      token text not null,
      token_decimals integer not null,
      amount numeric(78,0) not null,
      to_address text not null,
      tx_hash text not null,
      output_index integer not null,
      block_number integer not null,
      block_hash text not null,
      wrong_token boolean not null,
      status text not null,
      confirmations integer not null,
      required_confirmations integer not null,
      detected_at timestamptz not null,
      confirmed_at timestamptz
    )`,
    `create index payments_invoice on payments (invoice_id, detected_at)`,
    `create index payments_open on payments (chain, status)`,
  ),
  '0003_settlements': ddl(
    `create table settlements (
      id uuid primary key,
      invoice_id uuid not null unique,
      merchant_id uuid not null,
      chain text not null,
      currency text not null,
      amount text not null,
      gross_amount text not null,
      platform_fee text not null,
      network_fee text not null,
      from_address text not null,
      merchant_wallet text,
      status text not null,
      attempt integer not null,
      transaction_hash text,
      failure_reason text,
      next_attempt_at timestamptz,
      initiated_at timestamptz,
      completed_at timestamptz,
      failed_at timestamptz,
      created_at timestamptz not null,
      updated_at timestamptz not null
    )`,
    `create index settlements_merchant_created on settlements (merchant_id, created_at)`,
    `create index settlements_open on settlements (status)`,
  ),
  '0004_subscriptions': ddl(
    `create table subscription_plans (
      id uuid primary key,
      merchant_id uuid not null,
      name text not null,
      description text,
      amount text not null,
      currency text not null,
      "interval" text not null,
      interval_count integer not null,
      grace_period_hours integer not null,
      status text not null,
      archived_at timestamptz,
      created_at timestamptz not null,
      updated_at timestamptz not null
    )`,
    `create index subscription_plans_merchant_created on subscription_plans (merchant_id, created_at)`,
    `create table subscribers (
      id uuid primary key,
      merchant_id uuid not null,
      plan_id uuid not null,
      email text not null,
      external_id text,
      status text not null,
      period integer not null,
      current_period_start timestamptz not null,
      current_period_end timestamptz not null,
      grace_period_ends_at timestamptz not null,
      cancel_at_end boolean not null,
      metadata jsonb,
      current_invoice_id uuid not null,
      current_invoice_paid_at timestamptz,
      activated_at timestamptz,
      past_due_at timestamptz,
      cancelled_at timestamptz,
      cancellation_reason text,
      created_at timestamptz not null,
      updated_at timestamptz not null
    )`,
    `create index subscribers_merchant_created on subscribers (merchant_id, created_at)`,
    `create index subscribers_plan_status on subscribers (plan_id, status)`,
    // The renewal scheduler's questions: periods ending, grace periods running out.
    `create index subscribers_period_end on subscribers (status, current_period_end)`,
    `create index subscribers_grace_end on subscribers (status, grace_period_ends_at)`,
    // A subscriber's invoices (GET /api/v1/subscriptions/subscribers/{id}/invoices).
    `create index invoices_subscriber on invoices (subscriber_id, created_at) where subscriber_id is not null`,
  ),
  '0005_settlement_failures': ddl(
    `alter table settlements
      add column failure_code text,
      add column attempts integer not null default 0,
      add column attention text`,
    // The operator's views: failed settlements of every merchant, and what needs a person.
    `create index settlements_failure on settlements (failure_code, updated_at)`,
  ),
  '0006_refund_status': ddl(
    // Every invoice so far has had no refund.
    `alter table invoices
      add column refund_status text not null default 'none'`,
  ),
  '0007_refunds': ddl(
    `create table refunds (
      id uuid primary key,
      invoice_id uuid not null,
      merchant_id uuid not null,
      chain text not null,
      token text not null,
      amount text not null,
      network_fee text not null,
      net_amount text not null,
      fiat_amount text not null,
      fiat_currency text not null,
      reason text,
      destination text,
      claim_token text not null unique,
      claim_expires_at timestamptz not null,
      status text not null,
      funded_from text,
      transaction_hash text,
      failure_code text,
      created_at timestamptz not null,
      updated_at timestamptz not null,
      approved_at timestamptz,
      completed_at timestamptz
    )`,
    `create index refunds_merchant_created on refunds (merchant_id, created_at)`,
    `create index refunds_invoice on refunds (invoice_id, created_at)`,
    // The expiry timer's look: unused claim links, soonest first.
    `create index refunds_claim_expiry on refunds (status, claim_expires_at)`,
  ),
  '0009_merchant_users': ddl(
    `create table merchant_users (
      id uuid primary key,
      merchant_id uuid not null,
      email text not null unique,
      role text not null,
      status text not null,
      invite_token_hash text unique,
      invite_expires_at timestamptz not null,
      totp_enrolled boolean not null,
      invited_at timestamptz not null,
      accepted_at timestamptz,
      disabled_at timestamptz,
      updated_at timestamptz not null
    )`,
    `create index merchant_users_merchant on merchant_users (merchant_id, invited_at)`,
  ),
  '0010_report_paging': ddl(
    // The finance reports page through a merchant's rows in (time, id) order
    // (projections/reports.ts): these let each page start at its cursor in an
    // index instead of sorting what is left of the merchant's rows.
    `create index invoices_merchant_created_id on invoices (merchant_id, created_at, id)`,
    `create index payments_detected on payments (detected_at, payment_id)`,
    // Fees and the ledger count what completed, when it completed.
    `create index settlements_merchant_completed on settlements (merchant_id, completed_at) where status = 'completed'`,
    `create index refunds_merchant_completed on refunds (merchant_id, completed_at) where status = 'completed'`,
    // One CSV cell as api/csv.ts writes it (quoted, quotes doubled, a formula
    // start made text with a single quote), for the reports PostgreSQL writes
    // line by line (projections/reports.ts, invoiceCsvPages).
    `create or replace function report_csv_cell(v text) returns text language sql immutable parallel safe as $$
        select case when v is null or v = '' then ''
          else '"' || case when left(v, 1) in ('=', '+', '-', '@', chr(9), chr(13)) then '''' else '' end
            || replace(v, '"', '""') || '"' end
      $$`,
  ),
  '0011_rate_provenance': ddl(
    // Where each quote's rate came from, for the finance reports' rate_source (docs/rates.md).
    `alter table invoice_addresses
      add column rate_source text,
      add column rate_observed_at timestamptz`,
  ),
  '0012_activity': ddl(
    `create table activity (
      id uuid primary key,
      merchant_id uuid not null,
      stream_id text not null,
      event_type text not null,
      actor_type text not null,
      actor_id text,
      actor_email text,
      detail text,
      created_at timestamptz not null
    )`,
    // The Activity page: a merchant's rows, newest first (projections/paging.ts).
    `create index activity_merchant_created on activity (merchant_id, created_at, id)`,
  ),
  '0013_one_quote_per_token': ddl(
    // An invoice has at most one address, and so one quote, per chain and
    // token: domain/invoice.ts `assignAddress` makes a second AddressAssigned
    // for a chain+token a no-op, and a requote updates the address's row
    // (projections/invoices.ts). Said here as a constraint, the reports join
    // the quote with a plain join, which PostgreSQL may plan as it likes
    // (a hash join, a parallel scan), rather than a lateral sort-and-limit
    // per row. It leads with invoice_id, so it serves every lookup the index
    // it replaces did.
    `create unique index invoice_addresses_invoice_token on invoice_addresses (invoice_id, chain, token)`,
    `drop index invoice_addresses_invoice`,
    // report_csv_cell (0010) with the same rule, cheaper: ascii() reads the
    // first character's code where left() made a text of it and compared it
    // six times under the collation (the invoices report of 200,000 rows,
    // 24 cells each: 2.53 → 2.06 s of backend CPU). It assumes a UTF8
    // database, as PGlite always is: in other multibyte encodings ascii()
    // refuses a non-ASCII character. test/reports-csv.test.ts holds it to
    // api/csv.ts's csvCell.
    `create or replace function report_csv_cell(v text) returns text language sql immutable parallel safe as $$
        select case when v is null or v = '' then ''
          when ascii(v) in (61, 43, 45, 64, 9, 13) then '"''' || replace(v, '"', '""') || '"'
          else '"' || replace(v, '"', '""') || '"' end
      $$`,
  ),
  '0014_refund_holds': ddl(
    `create table refund_holds (
      settlement_id uuid not null,
      refund_id uuid not null,
      held_at timestamptz not null,
      primary key (settlement_id, refund_id)
    )`,
    // The attention list: holds older than the grace, oldest first.
    `create index refund_holds_held on refund_holds (held_at)`,
  ),
  '0015_refund_failure_reason': ddl(
    // What a failed refund's payout ran into, as a failed settlement's row keeps it: the operator's attention list.
    `alter table refunds add column failure_reason text`,
    `create index refunds_failed on refunds (status, updated_at) where status = 'failed'`,
  ),
};
