// The subscription plan aggregate, stream `plan-<id>` (operations.md §3): what
// a subscriber is billed (a fiat amount every `intervalCount` intervals) and
// how long each invoice may stay unpaid (the grace period). An archived plan
// takes no new subscribers; those already enrolled keep the terms they were
// enrolled on (the subscriber keeps a copy of them).
import { type Decider, type DomainEvent, DomainError } from './decider.ts';
import { FIAT_DECIMALS, parseUnits } from './money.ts';
import { streams } from './streams.ts';

export const planStreamName = streams.plan.name;

export const billingIntervals = ['day', 'week', 'month', 'year'] as const;
export type BillingInterval = (typeof billingIntervals)[number];
export type PlanStatus = 'active' | 'archived';

export const DEFAULT_GRACE_PERIOD_HOURS = 72;
export const MAX_GRACE_PERIOD_HOURS = 8760;
export const MAX_INTERVAL_COUNT = 365;
export const MAX_PLAN_NAME_LENGTH = 200;
export const MAX_PLAN_DESCRIPTION_LENGTH = 1000;
/** The longest billing period a plan may have, in months (10 years). */
const MAX_PERIOD_MONTHS = 120;

/** The terms a subscriber is billed on: copied from the plan at enrollment. */
export interface PlanTerms {
  name: string;
  /** fiat decimal string, as given */
  amount: string;
  currency: string;
  interval: BillingInterval;
  intervalCount: number;
  gracePeriodHours: number;
}

export interface Plan extends PlanTerms {
  id: string;
  merchantId: string;
  description: string | null;
  status: PlanStatus;
  archivedAt: string | null;
  createdAt: string;
  updatedAt: string;
}

export type PlanState = Plan | null;

// ---------------------------------------------------------------- events and commands

export type PlanCreated = DomainEvent<
  'PlanCreated',
  PlanTerms & { id: string; merchantId: string; description: string | null; createdAt: string }
>;
export type PlanArchived = DomainEvent<'PlanArchived', { archivedAt: string }>;
export type PlanEvent = PlanCreated | PlanArchived;

export type PlanCommand =
  | (PlanTerms & { type: 'CreatePlan'; id: string; merchantId: string; description: string | null; now: string })
  | { type: 'ArchivePlan'; now: string };

// ---------------------------------------------------------------- rules

const isWholeNumber = (value: unknown, min: number, max: number): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max;

/** The length of one billing period in months, or undefined for day and week intervals. */
function periodMonths(interval: BillingInterval, count: number): number | undefined {
  if (interval === 'month') return count;
  if (interval === 'year') return count * 12;
  return undefined;
}

/**
 * Checks the terms and description of a new plan; throws a DomainError
 * (bad_request) with the first problem found. The API checks the same way,
 * so every message is the one a merchant sees.
 */
export function checkPlanTerms(input: PlanTerms & { description: string | null }): void {
  const fail = (message: string) => {
    throw new DomainError('bad_request', message);
  };
  if (typeof input.name !== 'string' || input.name.trim() === '') fail('Name is required');
  if (input.name.length > MAX_PLAN_NAME_LENGTH) fail(`Name must be at most ${MAX_PLAN_NAME_LENGTH} characters`);
  if (typeof input.amount !== 'string' || !((parseUnits(input.amount, FIAT_DECIMALS) ?? 0n) > 0n)) {
    fail('Amount must be greater than 0');
  }
  if (typeof input.currency !== 'string' || input.currency.trim() === '') fail('Currency is required');
  if (!/^[A-Z]{3}$/.test(input.currency)) fail('Currency must be a 3-letter ISO 4217 code');
  if (!(billingIntervals as readonly string[]).includes(input.interval)) {
    fail(`Interval must be one of ${billingIntervals.join(', ')}`);
  }
  if (!isWholeNumber(input.intervalCount, 1, MAX_INTERVAL_COUNT)) {
    fail(`Interval count must be a whole number from 1 to ${MAX_INTERVAL_COUNT}`);
  }
  if ((periodMonths(input.interval, input.intervalCount) ?? 0) > MAX_PERIOD_MONTHS) {
    fail('A billing period cannot be longer than 10 years');
  }
  if (!isWholeNumber(input.gracePeriodHours, 1, MAX_GRACE_PERIOD_HOURS)) {
    fail(`Grace period hours must be a whole number from 1 to ${MAX_GRACE_PERIOD_HOURS}`);
  }
  if (input.description !== null) {
    if (typeof input.description !== 'string') fail('Description must be a string');
    if (input.description.length > MAX_PLAN_DESCRIPTION_LENGTH) {
      fail(`Description must be at most ${MAX_PLAN_DESCRIPTION_LENGTH} characters`);
    }
  }
}

// ---------------------------------------------------------------- billing periods

const DAY_MS = 24 * 60 * 60 * 1000;

/** `months` calendar months after `from` (UTC), on the same day or the month's last day when it is shorter. */
function addMonths(from: Date, months: number): Date {
  const target = new Date(from.getTime());
  target.setUTCDate(1);
  target.setUTCMonth(target.getUTCMonth() + months);
  const lastDay = new Date(Date.UTC(target.getUTCFullYear(), target.getUTCMonth() + 1, 0)).getUTCDate();
  target.setUTCDate(Math.min(from.getUTCDate(), lastDay));
  return target;
}

/**
 * The end of billing period `period` (0 is the first) of terms whose first
 * period started at `anchor`. Counted from the anchor every time, so a
 * subscription started on 31 January renews on 28 (or 29) February, then on
 * 31 March: days never drift.
 */
export function periodEnd(
  anchor: string,
  terms: Pick<PlanTerms, 'interval' | 'intervalCount'>,
  period: number,
): string {
  const start = new Date(anchor);
  const periods = (period + 1) * terms.intervalCount;
  switch (terms.interval) {
    case 'day':
      return new Date(start.getTime() + periods * DAY_MS).toISOString();
    case 'week':
      return new Date(start.getTime() + periods * 7 * DAY_MS).toISOString();
    case 'month':
      return addMonths(start, periods).toISOString();
    case 'year':
      return addMonths(start, periods * 12).toISOString();
  }
}

export const addHours = (time: string, hours: number): string =>
  new Date(Date.parse(time) + hours * 60 * 60 * 1000).toISOString();

// ---------------------------------------------------------------- decide and evolve

function requireTime(time: string, name: string): void {
  if (typeof time !== 'string' || Number.isNaN(Date.parse(time))) {
    throw new DomainError('bad_request', `${name} must be an ISO 8601 timestamp`);
  }
}

function decide(command: PlanCommand, state: PlanState): PlanEvent[] {
  switch (command.type) {
    case 'CreatePlan': {
      if (state !== null) throw new DomainError('conflict', `Subscription plan ${command.id} already exists`);
      const { type, now, ...plan } = command;
      checkPlanTerms(plan);
      requireTime(now, 'now');
      return [{ type: 'PlanCreated', data: { ...plan, createdAt: now } }];
    }
    case 'ArchivePlan':
      if (state === null) throw new DomainError('not_found', 'Subscription plan not found');
      // Archiving twice changes nothing.
      if (state.status === 'archived') return [];
      requireTime(command.now, 'now');
      return [{ type: 'PlanArchived', data: { archivedAt: command.now } }];
  }
}

function evolve(state: PlanState, event: PlanEvent): PlanState {
  switch (event.type) {
    case 'PlanCreated':
      return { ...event.data, status: 'active', archivedAt: null, updatedAt: event.data.createdAt };
    case 'PlanArchived':
      if (state === null) throw new Error('PlanArchived before PlanCreated');
      return { ...state, status: 'archived', archivedAt: event.data.archivedAt, updatedAt: event.data.archivedAt };
  }
}

export const planDecider: Decider<PlanCommand, PlanState, PlanEvent> = { initialState: null, decide, evolve };
