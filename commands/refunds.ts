// Merchant and customer commands on refunds (refunds.md), the refund saga's
// manager, and the timer that expires unused claim links.
//
// A refund is created on its own stream first; its amount is then reserved on
// the invoice, where the limit is decided. The request does both, so that a
// merchant who asks for too much hears it at once; the saga's manager does
// the reservation again from the recorded RefundCreated, so a crash between
// the two leaves no refund without its reservation. A refund that loses a
// race for the last of the refundable amount is canceled, saying why.
import { randomBytes, randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { Clock } from '../adapters/clock.ts';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import { DomainError, fold } from '../domain/decider.ts';
import { merchantDecider, merchantStream } from '../domain/merchant.ts';
import {
  invoiceDecider,
  invoiceStreamName,
  refundableOf,
  type Invoice,
  type RefundableAsset,
} from '../domain/invoice.ts';
import { fiatValueOf, parseUnits } from '../domain/money.ts';
import { refundDecider, refundStreamName, type RefundCommand, type RefundEvent } from '../domain/refund.ts';
import { cancelOverLimit, OVER_LIMIT, reactToRefundEvent, type RefundSagaAction } from '../domain/refund-saga.ts';
import { eventsByStream } from '../projections/batch.ts';
import type { Projector, Reactor } from '../projections/engine.ts';
import { expiredClaims, refundRowOf, refundView } from '../projections/refunds.ts';
import type { ReadModelTables } from '../projections/schema.ts';
import { handleCommand, loadState } from './handle.ts';
import { enqueueWebhook } from './webhook-delivery.ts';
import { webhookEventId } from './webhook-events.ts';
import { Periodic, type PeriodicOptions } from './periodic.ts';

/** A claim link lives this long unless the merchant says otherwise (refunds.md: 1 to 90 days). */
export const DEFAULT_CLAIM_DAYS = 30;

export interface NewRefund {
  chain?: string;
  token?: string;
  /** Token units, decimal text; or `kind`. */
  amount?: string;
  kind?: 'full' | 'excess';
  destination?: string;
  reason?: string;
  claimExpiresInDays?: number;
}

export interface RefundCommandDeps {
  store: EventStore;
  clock: Clock;
  /** What sending `token` on `chain` costs, base units of `token`, taken out of the refund. */
  networkFee(chain: string, token: string): bigint;
  /** Why `address` cannot receive on `chain` (its form, its network, a token account on Solana), or undefined. */
  destinationProblem(chain: string, address: string): Promise<string | undefined>;
}

const bad = (message: string) => new DomainError('bad_request', message);

/** The asset a refund is of: the one named, or the only one the invoice received. */
function assetOf(assets: RefundableAsset[], chain: string | undefined, token: string | undefined): RefundableAsset {
  if (chain === undefined && token === undefined) {
    if (assets.length === 1) return assets[0]!;
    if (assets.length === 0) throw bad('The invoice has received nothing to refund');
    throw bad('chain and token are required: the invoice received more than one token');
  }
  const found = assets.find(
    (a) =>
      (chain === undefined || a.chain === chain.toLowerCase()) &&
      (token === undefined || a.token === token.toUpperCase()),
  );
  if (!found) throw bad(`The invoice received no ${token ?? 'payment'}${chain ? ` on ${chain}` : ''}`);
  return found;
}

/** Base units the refund takes: the amount given, or all that is refundable, or the excess. */
function amountOf(input: NewRefund, asset: RefundableAsset): bigint {
  if ((input.amount === undefined) === (input.kind === undefined)) throw bad('Give either amount or kind');
  const units =
    input.kind === 'full'
      ? asset.refundable
      : input.kind === 'excess'
        ? asset.excess
        : parseUnits(input.amount!, asset.tokenDecimals);
  if (units === undefined) throw bad(`Amount must be a decimal with at most ${asset.tokenDecimals} decimal places`);
  if (units <= 0n)
    throw bad(input.kind === 'excess' ? 'The invoice has no excess to refund' : 'Amount must be greater than 0');
  if (units > asset.refundable) throw bad(OVER_LIMIT);
  return units;
}

/** The rate the payment of this token was quoted at, or undefined for a token the invoice never quoted. */
const quotedRate = (invoice: Invoice, asset: RefundableAsset) =>
  invoice.addresses.find((a) => a.chain === asset.chain && a.token === asset.token)?.rate;

export function refundCommands({ store, clock, networkFee, destinationProblem }: RefundCommandDeps) {
  const now = () => clock.now().toISOString();
  const act = (refundId: string, command: RefundCommand) =>
    handleCommand(store, refundDecider, refundStreamName(refundId), command);

  async function checkedDestination(chain: string, address: string) {
    const problem = await destinationProblem(chain, address);
    if (problem) throw bad(problem);
    return address;
  }

  return {
    /**
     * `id`: the refund's id when it follows from the request's Idempotency-Key;
     * a retry after a lost reply then finds the refund the first one made,
     * before the limit (which that refund now holds) is checked again.
     */
    async create(merchantId: string, invoiceId: string, input: NewRefund, id?: string) {
      if (id !== undefined) {
        const made = await loadState(store, refundDecider, refundStreamName(id));
        if (made && made.merchantId === merchantId && made.invoiceId === invoiceId) {
          return { refundId: id, position: undefined };
        }
      }
      const invoice = await loadState(store, invoiceDecider, invoiceStreamName(invoiceId));
      if (!invoice || invoice.merchantId !== merchantId) throw new DomainError('not_found', 'Invoice not found');
      const asset = assetOf(refundableOf(invoice), input.chain, input.token);
      const amount = amountOf(input, asset);
      const days = input.claimExpiresInDays ?? DEFAULT_CLAIM_DAYS;
      if (!Number.isInteger(days) || days < 1 || days > 90)
        throw bad('claimExpiresInDays must be an integer from 1 to 90');
      const destination =
        input.destination === undefined ? null : await checkedDestination(asset.chain, input.destination);
      const rate = quotedRate(invoice, asset);
      const at = clock.now();
      const refundId = id ?? randomUUID();
      const created = await act(refundId, {
        type: 'CreateRefund',
        refundId,
        invoiceId,
        merchantId,
        chain: asset.chain,
        token: asset.token,
        tokenDecimals: asset.tokenDecimals,
        amount,
        networkFee: networkFee(asset.chain, asset.token),
        // A token the invoice never quoted (a wrong-token payment) has no rate of its own: its value is not claimed.
        fiatAmount: rate === undefined ? '0.00000000' : fiatValueOf(amount, asset.tokenDecimals, rate),
        fiatCurrency: invoice.currency,
        reason: input.reason ?? null,
        destination,
        // 256 random bits, URL-safe: the link is the customer's only credential.
        claimToken: randomBytes(32).toString('base64url'),
        claimExpiresAt: new Date(at.getTime() + days * 86_400_000).toISOString(),
        now: at.toISOString(),
      });
      // The saga's first step, taken now so that a refund over the limit is refused in this answer.
      const [recorded] = created.events as RefundEvent[];
      for (const action of reactToRefundEvent(refundId, recorded!)) await runRefusable(store, action, now());
      const refund = (await loadState(store, refundDecider, refundStreamName(refundId)))!;
      if (refund.status === 'canceled') throw bad(OVER_LIMIT);
      return { refundId, position: created.position };
    },

    async giveDestination(refundId: string, chain: string, address: string) {
      await checkedDestination(chain, address);
      return act(refundId, { type: 'GiveDestination', destination: address, now: now() });
    },

    cancel: (refundId: string) => act(refundId, { type: 'Cancel', now: now() }),
    expire: (refundId: string) => act(refundId, { type: 'Expire', now: now() }),
  };
}

export type RefundCommands = ReturnType<typeof refundCommands>;

/**
 * Sends one of the saga's actions. The invoice refusing a reservation (the
 * amount was taken by another refund meanwhile) cancels the refund instead:
 * the one refusal the saga expects. `causationId` derives the events' ids,
 * so the same reaction run twice appends nothing twice.
 */
async function runRefusable(store: EventStore, action: RefundSagaAction, now: string, causationId?: string) {
  const options = causationId ? { causationId } : {};
  if (action.to === 'refund') {
    await handleCommand(store, refundDecider, refundStreamName(action.refundId), action.command, options);
    return;
  }
  try {
    await handleCommand(store, invoiceDecider, invoiceStreamName(action.invoiceId), action.command, options);
  } catch (error) {
    if (!(error instanceof DomainError) || action.command.type !== 'ReserveRefund') throw error;
    const cancel = cancelOverLimit(action.command.refundId, now);
    await handleCommand(store, refundDecider, refundStreamName(cancel.refundId), cancel.command, options);
  }
}

/** Runs the refund saga on every refund event (see domain/refund-saga.ts). */
export function refundManager(
  store: EventStore,
  onRefused?: (error: DomainError, event: RecordedEvent) => void,
): Reactor {
  return {
    name: 'refund-manager',
    async react(recorded: RecordedEvent) {
      if (!recorded.streamId.startsWith('refund-')) return;
      const refundId = recorded.streamId.slice('refund-'.length);
      const event = { type: recorded.type, data: recorded.data } as RefundEvent;
      for (const action of reactToRefundEvent(refundId, event)) {
        try {
          await runRefusable(store, action, recorded.recordedAt.toISOString(), recorded.id);
        } catch (error) {
          // Deterministic: retrying would refuse again and hold up everything after it.
          if (!(error instanceof DomainError)) throw error;
          onRefused?.(error, recorded);
        }
      }
    },
  };
}

/** Expires claim links never used once their time is up on the business clock. */
export class RefundExpiry {
  private readonly periodic: Periodic;

  constructor(
    private readonly db: Kysely<ReadModelTables>,
    private readonly refunds: Pick<RefundCommands, 'expire'>,
    private readonly clock: Clock,
    options: PeriodicOptions = {},
  ) {
    this.periodic = new Periodic(() => this.expireDue(), options);
  }

  start = () => this.periodic.start();
  stop = () => this.periodic.stop();
  poke = () => this.periodic.poke();

  async expireDue(): Promise<number> {
    const due = await expiredClaims(this.db, this.clock.now());
    for (const { id } of due) await this.refunds.expire(id);
    return due.length;
  }
}

/** The refunds.md webhook each refund event causes. */
const REFUND_WEBHOOKS: Partial<Record<RefundEvent['type'], string>> = {
  RefundCreated: 'refund.created',
  RefundClaimed: 'refund.claimed',
  RefundApproved: 'refund.approved',
  RefundCompleted: 'refund.completed',
  RefundFailed: 'refund.failed',
  RefundCanceled: 'refund.canceled',
  RefundExpired: 'refund.expired',
};

export const REFUND_WEBHOOK_TYPES = Object.values(REFUND_WEBHOOKS) as string[];

interface RefundHistories {
  refunds: Map<string, RecordedEvent[]>;
  /** Where each refund's webhooks go: its invoice's URL, else its merchant's. */
  urls: Map<string, string | null>;
}

/**
 * Puts each refund webhook in the outbox, with the Refund as it stood after
 * the event as `data`, in the same transaction as its checkpoint: one
 * webhook per event however often this runs (its id follows from the event's).
 */
export function refundWebhooks(publicBaseUrl: string): Projector<RefundHistories> {
  return {
    name: 'refund-webhooks',
    tables: [],

    async prepare(batch: readonly RecordedEvent[], store: EventStore) {
      const streams = [...eventsByStream(batch, (s) => s.startsWith('refund-')).keys()];
      const refunds = new Map(await Promise.all(streams.map(async (s) => [s, await store.readStream(s)] as const)));
      const urls = new Map<string, string | null>();
      for (const [stream, history] of refunds) {
        const refund = fold(
          refundDecider,
          history.map((e) => ({ type: e.type, data: e.data }) as RefundEvent),
        );
        if (!refund) continue;
        const invoice = await loadState(store, invoiceDecider, invoiceStreamName(refund.invoiceId));
        const merchant = await loadState(store, merchantDecider, merchantStream(refund.merchantId));
        urls.set(stream, invoice?.webhookUrl ?? merchant?.webhookUrl ?? null);
      }
      return { refunds, urls };
    },

    async apply(trx: Kysely<any>, event: RecordedEvent, { refunds, urls }: RefundHistories) {
      const name = REFUND_WEBHOOKS[event.type as RefundEvent['type']];
      const url = urls.get(event.streamId);
      if (!name || !url) return;
      const refund = fold(
        refundDecider,
        (refunds.get(event.streamId) ?? [])
          .filter((e) => e.revision <= event.revision)
          .map((e) => ({ type: e.type, data: e.data }) as RefundEvent),
      );
      if (!refund) return;
      const eventId = webhookEventId(event.id, name);
      await enqueueWebhook(trx, {
        eventId,
        event: name,
        merchantId: refund.merchantId,
        url,
        payload: {
          eventId,
          event: name,
          createdAt: event.recordedAt.toISOString(),
          data: refundView(refundRowOf(refund), publicBaseUrl),
        },
      });
    },
  };
}
