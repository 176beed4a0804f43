// Merchant and customer commands on refunds (refunds.md) and the refund
// saga's manager (the timer that expires unused claim links: refund-expiry.ts).
//
// A refund is created on its own stream first; its amount is then reserved on
// the invoice, where the limit is decided. The request does both, so that a
// merchant who asks for too much hears it at once; the saga's manager does
// the reservation again from the recorded RefundCreated, so a crash between
// the two leaves no refund without its reservation (both caused by that
// event, so their events' ids are the same). A refund that loses a
// race for the last of the refundable amount is canceled, saying why.
import { randomBytes, randomUUID } from 'node:crypto';
import type { Clock } from '../adapters/clock.ts';
import { failpoint } from '../adapters/failpoints.ts';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import { DomainError } from '../domain/decider.ts';
import { canPay, PayerBusyError, type ChainAdapter, type PreparedTransaction } from '../adapters/chains/port.ts';
import type { DepositAddressDeriver } from '../adapters/keys/derivation.ts';
import { findChain, type ChainName } from '../domain/catalogue.ts';
import { merchantDecider, merchantStream, type RefundWallet } from '../domain/merchant.ts';
import {
  beyondSettlementOf,
  coinsBeforeSettlement,
  depositBeforeSettlement,
  invoiceDecider,
  unpaidRefundsOf,
  invoiceStreamName,
  refundableOf,
  type Invoice,
  type RefundableAsset,
} from '../domain/invoice.ts';
import { fiatValueOf, formatUnits, parseUnits } from '../domain/money.ts';
import {
  mayAwaitFunds,
  refundDecider,
  refundStreamName,
  type Refund,
  type RefundCommand,
  type RefundEvent,
  type RefundFailureReason,
  type RefundPayer,
} from '../domain/refund.ts';
import { cancelOverLimit, OVER_LIMIT, reactToRefundEvent, type RefundSagaAction } from '../domain/refund-saga.ts';
import {
  holdsRefunds,
  isPendingHolds,
  type PayoutSource,
  payoutSources,
  type PendingHolds,
  type RefundCoins,
  requestedSettlement,
  type SettlementCommand,
  settlementDecider,
  type SettlementState,
  settlementStreamName,
  settlementStreamOf,
  sourcesBeforeRequest,
  unpaidHoldsOf,
} from '../domain/settlement.ts';
import type { Reactor } from '../adapters/event-store/followers.ts';
import type { SqlDatabase } from '../adapters/sql/database.ts';
import { DerivationIndexes } from './derivation-indexes.ts';
import { loadSettlement } from './settlements.ts';
import { handleCommand, loadState, unlessRefused, type Actor } from './handle.ts';
import {
  failureCodeOf,
  queuedPayouts,
  recordedSteps,
  RecordedPayoutKind,
  type PayoutLook,
  type PayoutRecorder,
  type PayoutStanding,
} from './payouts.ts';
import { streams } from '../domain/streams.ts';

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
  /** The chains refunds are paid on (the same adapters settlements are paid through). */
  chains: ReadonlyMap<ChainName, ChainAdapter>;
  /** Derives the address of a refund wallet, as deposit addresses are derived. */
  addresses: DepositAddressDeriver;
  /** The payout engine's queue: which other refunds from a refund wallet are on their way. */
  database: SqlDatabase;
  /** What sending `token` on `chain` from `coins` coins (a UTXO chain's) costs, base units of `token`, taken out of the refund. */
  networkFee(chain: string, token: string, coins: number): bigint;
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

/**
 * How many coins a refund of `asset` is quoted for (a UTXO chain's fee grows
 * with them; an account chain's ignores it). Quoted at creation, since the
 * customer is shown `netAmount` from then on (refunds.md): from the deposit a
 * refund spends all the settlement's coins (payoutSources) and pays exactly
 * its quote, so the quote is sized for them, or for the invoice's payments
 * before there is a settlement; a settlement already paid out leaves the
 * refund wallet, quoted for one coin, its change paying for any more. A
 * quote too small after all (a payment arriving later) fails the refund for
 * good rather than let it hold the settlement back (bitcoin/payer.ts prepareTransfer).
 */
async function coinsToQuote(store: EventStore, invoice: Invoice, asset: RefundableAsset): Promise<number> {
  const state = await loadState(store, settlementDecider, settlementStreamOf(invoice.id));
  const settlement = requestedSettlement(state);
  if (settlement && settlement.chain === asset.chain) {
    if (!holdsRefunds(settlement)) return 1;
    const sources = payoutSources(settlement);
    if (sources) return Math.max(sources.length, 1);
  }
  const deposit = settlement ? undefined : depositBeforeSettlement(invoice, asset);
  if (deposit) return Math.max(coinsBeforeRequest(invoice, state, asset, deposit.address).length, 1);
  const paid = invoice.payments.filter((p) => !p.withdrawn && p.chain === asset.chain && p.token === asset.token);
  return Math.max(paid.length, 1);
}

/**
 * The coins a refund from the deposit at `address` spends before the
 * settlement is requested: the payments the settlement will pay out, as the
 * request will name them, after the refunds from it before (their change).
 */
const coinsBeforeRequest = (
  invoice: Invoice,
  state: SettlementState,
  asset: { chain: string; token: string },
  address: string,
) =>
  sourcesBeforeRequest(coinsBeforeSettlement(invoice, asset, address), isPendingHolds(state) ? state : null, {
    chain: asset.chain,
    fromAddress: address,
  });

/** The rate the payment of this token was quoted at, or undefined for a token the invoice never quoted. */
const quotedRate = (invoice: Invoice, asset: RefundableAsset) =>
  invoice.addresses.find((a) => a.chain === asset.chain && a.token === asset.token)?.rate;

export function refundCommands(deps: RefundCommandDeps) {
  const { store, clock, networkFee, destinationProblem } = deps;
  const now = () => clock.now().toISOString();
  // The actor, where given (a dashboard user), is recorded on the refund's events.
  const act = (refundId: string, command: RefundCommand, actor?: Actor) =>
    handleCommand(store, refundDecider, refundStreamName(refundId), command, { actor });
  const wallets = refundWallets(deps);

  async function checkedDestination(chain: string, address: string) {
    const problem = await destinationProblem(chain, address);
    if (problem) throw bad(problem);
    return address;
  }

  /**
   * The hold an approval took, given back at once when the refund will not
   * be paid from the deposit after all: canceled or expired while the hold
   * was being taken (its saga found no hold to give back then), or approved
   * meanwhile by another request that chose the refund wallet. A refund
   * still waiting for its approval (this one's failed) keeps it: approving
   * again takes it, else it is released after the grace (refund-holds.ts).
   */
  async function giveBackUnusedHold(before: Refund) {
    const refund = await loadState(store, refundDecider, refundStreamName(before.id));
    if (!refund || refund.payer?.fundedFrom === 'deposit') return;
    if (refund.payer === null && refund.status !== 'canceled' && refund.status !== 'expired') return;
    const release: SettlementCommand = { type: 'ReleaseRefund', refundId: refund.id, paid: false, now: now() };
    await handleCommand(store, settlementDecider, settlementStreamOf(refund.invoiceId), release);
  }

  return {
    /**
     * `id`: the refund's id when it follows from the request's Idempotency-Key;
     * a retry after a lost reply then finds the refund the first one made,
     * before the limit (which that refund now holds) is checked again.
     */
    async create(merchantId: string, invoiceId: string, input: NewRefund, id?: string, actor?: Actor) {
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
      const created = await act(
        refundId,
        {
          type: 'CreateRefund',
          refundId,
          invoiceId,
          merchantId,
          chain: asset.chain,
          token: asset.token,
          tokenDecimals: asset.tokenDecimals,
          amount,
          networkFee: networkFee(asset.chain, asset.token, await coinsToQuote(store, invoice, asset)),
          // A token the invoice never quoted (a wrong-token payment) has no rate of its own: its value is not claimed.
          fiatAmount: rate === undefined ? '0.00000000' : fiatValueOf(amount, asset.tokenDecimals, rate),
          fiatCurrency: invoice.currency,
          reason: input.reason ?? null,
          destination,
          // 256 random bits, URL-safe: the link is the customer's only credential.
          claimToken: randomBytes(32).toString('base64url'),
          claimExpiresAt: new Date(at.getTime() + days * 86_400_000).toISOString(),
          now: at.toISOString(),
        },
        actor,
      );
      // The saga's first step, taken now so that a refund over the limit is refused in this answer. Caused by
      // the recorded RefundCreated, as the manager's run of it is: the two derive the same event ids, so the
      // manager's, repeated after a crash once a cancel has released the claim, cannot reserve it again.
      const [recorded] = created.events as RefundEvent[];
      const cause = created.eventIds[0]!;
      for (const action of reactToRefundEvent(refundId, recorded!)) await runRefusable(store, action, now(), cause);
      const refund = (await loadState(store, refundDecider, refundStreamName(refundId)))!;
      if (refund.status === 'canceled') throw bad(OVER_LIMIT);
      return { refundId, position: created.position };
    },

    async giveDestination(refundId: string, chain: string, address: string) {
      await checkedDestination(chain, address);
      return act(refundId, { type: 'GiveDestination', destination: address, now: now() });
    },

    /**
     * The merchant's approval: the refund is paid from the deposit when its
     * settlement takes the hold (nothing prepared yet), else from the
     * merchant's refund wallet, at once when it holds enough, else once it
     * does. Approving again changes nothing.
     */
    async approve(merchantId: string, refundId: string, actor?: Actor) {
      const refund = await loadState(store, refundDecider, refundStreamName(refundId));
      if (!refund || refund.merchantId !== merchantId) throw new DomainError('not_found', 'Refund not found');
      if (refund.approvedAt !== null) return { position: undefined };
      // Refused here, before any hold is taken, when the refund is not waiting for its approval.
      refundDecider.decide({ type: 'Approve', payer: NO_PAYER, funded: false, now: now() }, refund);
      // Its amount claimed on the invoice first (refunds.md: approved, the amount is reserved). A request
      // repeated after a crash answers with a refund the saga has not reserved yet; approved before the
      // saga tried, and refused then (another refund took the rest), it would be paid with no claim.
      const invoice = await loadState(store, invoiceDecider, invoiceStreamName(refund.invoiceId));
      if (!invoice?.refunds.some((claim) => claim.refundId === refundId)) {
        throw new DomainError('conflict', 'The refund is not reserved on its invoice yet: approve it again shortly');
      }
      const payer = (await fromDeposit(deps, refund)) ?? (await wallets.payerOf(merchantId, refund.chain));
      // A crash here leaves a hold without its approval: approving again finds the hold and takes it.
      failpoint('refund:after-payer');
      const funded = payer.fundedFrom === 'deposit' || (await wallets.holds(refund, payer));
      try {
        return await act(refundId, { type: 'Approve', payer, funded, now: now() }, actor);
      } finally {
        if (payer.fundedFrom === 'deposit') await giveBackUnusedHold(refund);
      }
    },

    refundWallets: wallets.list,

    cancel: (refundId: string, actor?: Actor) => act(refundId, { type: 'Cancel', now: now() }, actor),
    expire: (refundId: string) => act(refundId, { type: 'Expire', now: now() }),
  };
}

export type RefundCommands = ReturnType<typeof refundCommands>;

/** What taking a hold on the settlement's stream needs. */
type HoldDeps = Pick<RefundCommandDeps, 'store' | 'clock' | 'chains'>;

/** Stands in for the payer when only asking whether an approval would be taken. */
const NO_PAYER: RefundPayer = { fundedFrom: 'deposit', fromAddress: '', derivationIndex: 0 };

/**
 * The deposit pays the refund when the invoice's settlement, paying out the
 * address the refunded token arrived on, takes the hold: decided on the
 * settlement's stream, so a refund and the settlement's payout never both
 * spend from that address at once (refunds.md: from the deposit while the
 * settlement is not prepared, a wrong-token payment included); with no
 * settlement ever to come, the deposit pays without one. Undefined when it
 * does not (already being paid out, another address, a settlement yet to be
 * requested, or on a chain whose payouts spend coins whole another refund
 * from the deposit on its way), or when the chain says the deposit cannot
 * pay it.
 */
async function fromDeposit(deps: HoldDeps, refund: Refund, approved?: true): Promise<RefundPayer | undefined> {
  const { store } = deps;
  const state = await loadState(store, settlementDecider, settlementStreamOf(refund.invoiceId));
  const invoice = await loadState(store, invoiceDecider, invoiceStreamName(refund.invoiceId));
  const settlement = requestedSettlement(state);
  if (!settlement)
    return invoice
      ? beforeSettlement(deps, invoice, refund, isPendingHolds(state) ? state : null, approved)
      : undefined;
  if (settlement.chain !== refund.chain) return undefined;
  const paidTo = new Set(
    invoice?.payments
      .filter((p) => !p.withdrawn && p.chain === refund.chain && p.token === refund.token)
      .map((p) => p.address),
  );
  // Paid to more than one address: no one deposit holds it all.
  if (paidTo.size !== 1) return undefined;
  const fromAddress = [...paidTo][0]!;
  const chain = deps.chains.get(refund.chain as ChainName);
  const holding = settlement.refundHolds.some((h) => h.refundId === refund.id);
  // The chain's own rule for what a payer must keep (Solana: 0 or the rent-exempt minimum, else the runtime refuses
  // it at every retry): a deposit that cannot pay by it leaves the refund to the refund wallet, and the settlement,
  // never held, pays out the whole deposit un-repriced. The merchant ends with what a deposit refund would have left
  // and every lamport has an owner; re-pricing instead, and sweeping the rest in the refund's transaction, would tie
  // the customer's refund to the merchant's wallet (a new one refuses less than the minimum too). A hold already
  // taken (a crash before the approval was recorded) is kept: its settlement waits for it.
  if (!holding && chain?.canPay) {
    const owed = refund.amount + unpaidHoldsOf(settlement, refund.token, refund.id);
    if (!(await chain.canPay(fromAddress, refund.token, owed))) return undefined;
  }
  return takeHold(deps, refund, settlement, {
    fromAddress,
    // Not on a chain whose payouts spend coins whole (Bitcoin): the refund spends the settlement's own coins
    // (payoutSources), never the late one, so all of it comes out of the settlement.
    beyond: invoice && !chain?.spendsCoinsWhole ? beyondSettlementOf(invoice, refund, fromAddress) : 0n,
    ...(chain?.spendsCoinsWhole && { oneAtATime: true }),
    ...(approved && { approved }),
  });
}

/**
 * No settlement requested yet (the invoice open, confirmed and not yet
 * settling, or closed unconfirmed and never to settle): the deposit the
 * asset arrived on pays the refund once the settlement's stream takes the
 * hold. A settlement requested later starts with it (re-priced, waiting for
 * it: domain/settlement.ts `request`); one requested meanwhile decides the
 * hold by its own rules; two refunds from the deposit are put in line on the
 * one stream. On a chain whose payouts spend coins whole (Bitcoin) one at a
 * time, each spending the deposit's payments the settlement will pay out
 * (coinsToSpend), all of it out of the settlement.
 */
async function beforeSettlement(
  deps: HoldDeps,
  invoice: Invoice,
  refund: Refund,
  pending: PendingHolds | null,
  approved?: true,
): Promise<RefundPayer | undefined> {
  const chain = deps.chains.get(refund.chain as ChainName);
  const deposit = depositBeforeSettlement(invoice, refund);
  if (!deposit) return undefined;
  const holding = pending?.refundHolds.some((h) => h.refundId === refund.id) ?? false;
  // The chain's own rule for what a payer must keep (Solana's rent), as with a settlement above, for this refund
  // and the others of the asset not paid yet (their claims are reserved at creation, so two approvals at once
  // count each other): paid in any order, none may leave the deposit where the next could not pay. A hold
  // already taken (a crash before the approval was recorded) is kept.
  if (!holding && chain?.canPay) {
    const owed = refund.amount + unpaidRefundsOf(invoice, refund, refund.id);
    if (!(await chain.canPay(deposit.address, refund.token, owed))) return undefined;
  }
  const payer = { fromAddress: deposit.address, derivationIndex: deposit.derivationIndex };
  return takeHold(deps, refund, payer, {
    chain: refund.chain,
    fromAddress: deposit.address,
    ...(chain?.spendsCoinsWhole
      ? { beyond: 0n, oneAtATime: true }
      : { beyond: beyondSettlementOf(invoice, refund, deposit.address) }),
    ...(approved && { approved }),
  });
}

/**
 * Asks the invoice's settlement stream to hold the refund's amount on the
 * deposit, which then pays the refund; undefined when it refuses (already
 * being paid out, another address, another refund on its way): the refund
 * wallet pays instead.
 */
async function takeHold(
  deps: HoldDeps,
  refund: Refund,
  deposit: Pick<RefundPayer, 'fromAddress' | 'derivationIndex'>,
  on: Pick<
    Extract<SettlementCommand, { type: 'HoldForRefund' }>,
    'chain' | 'fromAddress' | 'beyond' | 'oneAtATime' | 'approved'
  >,
): Promise<RefundPayer | undefined> {
  try {
    await handleCommand(deps.store, settlementDecider, settlementStreamOf(refund.invoiceId), {
      type: 'HoldForRefund',
      refundId: refund.id,
      token: refund.token,
      amount: refund.amount,
      ...on,
      now: deps.clock.now().toISOString(),
    });
    return { fundedFrom: 'deposit', fromAddress: deposit.fromAddress, derivationIndex: deposit.derivationIndex };
  } catch (error) {
    if (error instanceof DomainError) return undefined;
    throw error;
  }
}

/**
 * The merchant's refund wallets (refunds.md): one address per chain, derived
 * by the service at an index no deposit ever gets, assigned on the merchant's
 * stream the first time it is needed (the first one recorded stays).
 */
function refundWallets({
  store,
  database,
  clock,
  chains,
  addresses,
}: Pick<RefundCommandDeps, 'store' | 'database' | 'clock' | 'chains' | 'addresses'>) {
  const indexes = new DerivationIndexes(store);

  async function walletOf(merchantId: string, chain: ChainName): Promise<RefundWallet> {
    const merchant = await loadState(store, merchantDecider, merchantStream(merchantId));
    if (!merchant) throw new DomainError('not_found', 'Merchant not found');
    const known = merchant.refundWallets[chain];
    if (known) return known;
    const derivationIndex = await indexes.next();
    const address = await addresses.deriveDepositAddress(chain, derivationIndex);
    const { state } = await handleCommand(store, merchantDecider, merchantStream(merchantId), {
      type: 'AssignRefundWallet',
      chain,
      wallet: { address, derivationIndex },
      now: clock.now().toISOString(),
    });
    return state!.refundWallets[chain]!;
  }

  const adapterOf = (chain: string) => {
    const adapter = chains.get(chain as ChainName);
    if (!adapter?.balanceOf) {
      throw new DomainError('conflict', `Refunds on ${chain} can be paid only from the deposit, before its settlement`);
    }
    return adapter as ChainAdapter & Required<Pick<ChainAdapter, 'balanceOf'>>;
  };

  return {
    async payerOf(merchantId: string, chain: string): Promise<RefundPayer> {
      adapterOf(chain);
      const wallet = await walletOf(merchantId, chain as ChainName);
      return { fundedFrom: 'refund_wallet', fromAddress: wallet.address, derivationIndex: wallet.derivationIndex };
    },

    /** The refund wallet can pay the refund's amount now (see walletPays). */
    holds: (refund: Refund, payer: RefundPayer) =>
      walletPays({ store, database }, adapterOf(refund.chain), refund, payer.fromAddress),

    /** GET /api/v1/refund-wallets: each enabled chain's wallet and what it holds of each token. */
    async list(merchantId: string, enabled: readonly ChainName[]) {
      const list = [];
      // One chain after another: each first look assigns a wallet on the merchant's one stream.
      for (const chain of enabled) {
        const wallet = await walletOf(merchantId, chain);
        const adapter = chains.get(chain);
        const balances: Record<string, string | null> = {};
        for (const token of findChain(chain)?.supportedTokens ?? []) {
          const units = adapter ? await adapter.balanceOf(wallet.address, token.symbol, wallet.assignedAt) : undefined;
          balances[token.symbol] = units === undefined ? null : formatUnits(units, token.decimals, token.decimals);
        }
        list.push({ chain, address: wallet.address, balances });
      }
      return list;
    },
  };
}

/** When the merchant's refund wallet on the refund's chain was assigned: no coin reached it before. */
async function refundWalletSince(store: EventStore, refund: Pick<Refund, 'merchantId' | 'chain'>) {
  const merchant = await loadState(store, merchantDecider, merchantStream(refund.merchantId));
  return merchant?.refundWallets[refund.chain]?.assignedAt;
}

/**
 * The refund wallet `fromAddress` can pay the refund's amount now (the
 * chain's own rules, see ChainAdapter.canPay), from coins no other refund
 * has prepared (a chain whose payouts spend coins whole): the same coins
 * the payout chooses from, so a refund is not marked funded to fail.
 */
async function walletPays(
  { store, database }: { store: EventStore; database: SqlDatabase },
  chain: ChainAdapter,
  refund: Refund,
  fromAddress: string,
): Promise<boolean> {
  const since = await refundWalletSince(store, refund);
  const taken = chain.spendsCoinsWhole
    ? coinsTakenBy(await othersOnPayer({ database, store }, refund, fromAddress))
    : undefined;
  return canPay(chain, fromAddress, refund.token, refund.amount, since, taken);
}

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
  if (action.to === 'settlement') {
    try {
      await handleCommand(store, settlementDecider, settlementStreamName(action.settlementId), action.command, options);
    } catch (error) {
      // No settlement (the invoice never confirmed): there is no hold to give back.
      if (!(error instanceof DomainError && error.kind === 'not_found')) throw error;
    }
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
      if (!streams.refund.holds(recorded.streamId)) return;
      const refundId = streams.refund.idOf(recorded.streamId);
      const event = { type: recorded.type, data: recorded.data } as RefundEvent;
      for (const action of reactToRefundEvent(refundId, event)) {
        await unlessRefused(
          () => runRefusable(store, action, recorded.recordedAt.toISOString(), recorded.id),
          (error) => onRefused?.(error, recorded),
        );
      }
    },
  };
}

/** The adapter's account of a prepared refund's coins, as the refund records them (amounts as integer strings). */
function coinsOf(txHash: string, coins: NonNullable<PreparedTransaction['coins']>): RefundCoins {
  const { spent, change } = coins;
  return {
    spent: spent.map((c) => ({ txHash: c.txHash, index: c.index, amount: c.amount.toString() })),
    change: change && { txHash, index: change.index, amount: change.amount.toString() },
  };
}

/**
 * The other refunds from the payer `fromAddress` on their way (being sent,
 * or failed and to be tried again: a final failure sends nothing more), read
 * from their streams (what is recorded before anything is sent), so a
 * restart between a refund's record and its broadcast loses nothing; the
 * refunds of one chain are prepared one after another in a pass, so each
 * sees the others' records. A UTXO chain's new refund must not choose the
 * coins they took, nor count them as funds (awaiting_funds), or one of the
 * two could never be mined; an account chain that lends the payer coins
 * (Tron's top-ups) counts what theirs still hold there as not the payer's.
 */
async function othersOnPayer(
  { database, store }: { database: SqlDatabase; store: EventStore },
  refund: Pick<Refund, 'id' | 'merchantId' | 'chain'>,
  fromAddress: string,
): Promise<Refund[]> {
  const ids = await queuedPayouts(database, 'refund', refund.merchantId, refund.chain);
  const others: Refund[] = [];
  for (const id of ids) {
    if (id === refund.id) continue;
    const other = await loadState(store, refundDecider, refundStreamName(id));
    if (!other || other.payer?.fromAddress !== fromAddress) continue;
    if (other.status !== 'sending' && !(other.status === 'failed' && other.retryAt !== null)) continue;
    others.push(other);
  }
  return others;
}

/** The coins (a UTXO chain's) that other refunds' recorded attempts spend. */
const coinsTakenBy = (others: readonly Refund[]) =>
  others.flatMap((o) => Object.values(o.coins).flatMap((c) => c.spent.map(({ txHash, index }) => ({ txHash, index }))));

/** How soon a refund that waits (for its wallet to be funded, behind another from its payer) looks again. */
const WAITING_LOOK_MS = 5_000;

export interface RefundPayoutDeps {
  store: EventStore;
  /** The payout engine's queue: which other refunds from a refund wallet are on their way. */
  database: SqlDatabase;
  clock: Clock;
  chains: ReadonlyMap<ChainName, ChainAdapter>;
  requiredConfirmations: Record<ChainName, number>;
  /** Derives a refund wallet's address, for a refund the deposit no longer holds (see keepsItsHold). */
  addresses: DepositAddressDeriver;
}

/** A refund's standing in the payout's steps. */
function phaseOf(refund: Refund): PayoutStanding['phase'] {
  if (refund.status === 'failed') return 'failed';
  if (refund.status !== 'sending') return 'done';
  return refund.submitted ? 'submitted' : 'sending';
}

/**
 * Pays an approved refund out through the payout engine, by the settlement's
 * rule (see advancePayout): from the deposit or the refund wallet, to the
 * customer's address, the network fee out of the amount; a refund waiting
 * for its wallet to be funded goes on by itself once the wallet holds enough.
 */
export class RefundPayouts extends RecordedPayoutKind<Refund & PayoutStanding, RefundPayoutDeps> {
  readonly kind = 'refund';

  /** The merchant's refund wallets, for a refund the deposit no longer holds (see keepsItsHold). */
  private readonly wallets = refundWallets(this.deps);

  private act(refundId: string, command: RefundCommand) {
    return handleCommand(this.deps.store, refundDecider, refundStreamName(refundId), command);
  }

  /** A refund awaiting funds goes on once its wallet holds enough; then it is a payout as any. */
  override async advance(refundId: string, lease: AbortSignal): Promise<PayoutLook> {
    const { store, chains } = this.deps;
    const refund = await loadState(store, refundDecider, refundStreamName(refundId));
    if (refund?.status === 'awaiting_funds') {
      const chain = chains.get(refund.chain as ChainName);
      if (!chain) return { lookAgainInMs: WAITING_LOOK_MS };
      if (!(await walletPays(this.deps, chain, refund, refund.payer!.fromAddress))) {
        return { lookAgainInMs: WAITING_LOOK_MS };
      }
      await this.act(refundId, { type: 'MarkFunded', now: this.now() });
    }
    return super.advance(refundId, lease);
  }

  /**
   * Whether a refund whose transaction the chain would not prepare was
   * refused for want of funds in its refund wallet: another refund spent from
   * it since it was found funded (on Solana, leaving too little to keep the
   * wallet rent-exempt). It then waits for funds again, as at its approval,
   * instead of failing for good; the wallet's answer unknown (a node down),
   * the refusal is recorded as it came. A deposit keeps the refusal: nothing
   * is added to it, and its refund is not the merchant's to fund.
   */
  private async walletLacksFunds(refund: Refund, chain: ChainAdapter): Promise<boolean> {
    if (!mayAwaitFunds(refund)) return false;
    try {
      return !(await walletPays(this.deps, chain, refund, refund.payer!.fromAddress));
    } catch {
      return false;
    }
  }

  /**
   * Before a refund's first transaction from the deposit: whether the
   * deposit still holds it. The hold found is marked approved on the
   * settlement's stream, where the release of a hold an approval left
   * behind (ReleaseUnapprovedHold) is decided too, so only one of them wins.
   * A hold given back (the approval recorded after its hold was released)
   * is taken again by the approval's own rules; refused (the settlement
   * prepared meanwhile), the refund wallet pays, as the approval would have
   * chosen: false, the refund moved there. Paying from the deposit without
   * its hold would let the settlement, no longer waiting, spend it too.
   */
  private async keepsItsHold(refund: Refund): Promise<boolean> {
    const { store } = this.deps;
    const payer = refund.payer!;
    const stream = settlementStreamOf(refund.invoiceId);
    const settlement = requestedSettlement(await loadState(store, settlementDecider, stream));
    // A deposit the requested settlement does not pay out (another chain or address): nothing else spends it.
    if (settlement && (settlement.chain !== refund.chain || settlement.fromAddress !== payer.fromAddress)) return true;
    try {
      await handleCommand(store, settlementDecider, stream, {
        type: 'ApproveRefundHold',
        refundId: refund.id,
        now: this.now(),
      });
      return true;
    } catch (error) {
      if (!(error instanceof DomainError)) throw error;
    }
    const again = await fromDeposit(this.deps, refund, true);
    if (again?.fromAddress === payer.fromAddress) return true;
    // Held on another address than the one approved: not this refund's to keep.
    if (again) {
      await handleCommand(store, settlementDecider, stream, {
        type: 'ReleaseRefund',
        refundId: refund.id,
        paid: false,
        now: this.now(),
      });
    }
    const wallet = await this.wallets.payerOf(refund.merchantId, refund.chain);
    await this.act(refund.id, {
      type: 'PayFromRefundWallet',
      payer: wallet,
      funded: await this.wallets.holds(refund, wallet),
      reason: 'The deposit no longer held the refund, and its settlement would not hold it again',
      now: this.now(),
    });
    return false;
  }

  /**
   * The coins a refund spends, on a chain that names them (an account chain
   * ignores them): an earlier attempt's, so that at most one attempt can be
   * mined; else, from the deposit, the settlement's (a payment a refund spent
   * already replaced by its change); else none, and the adapter finds the
   * refund wallet's on the chain.
   */
  private async coinsToSpend(refund: Refund): Promise<PayoutSource[] | undefined> {
    const earlier = Object.values(refund.coins)[0];
    if (earlier) return earlier.spent;
    if (refund.payer?.fundedFrom !== 'deposit') return undefined;
    const { store } = this.deps;
    const state = await loadState(store, settlementDecider, settlementStreamOf(refund.invoiceId));
    const settlement = requestedSettlement(state);
    if (settlement) {
      // None recorded (an older settlement): none named, so a UTXO chain refuses rather than scans the deposit.
      return payoutSources(settlement) ?? [];
    }
    const invoice = await loadState(store, invoiceDecider, invoiceStreamName(refund.invoiceId));
    return invoice ? coinsBeforeRequest(invoice, state, refund, refund.payer.fromAddress) : [];
  }

  protected readonly recorder: PayoutRecorder<Refund & PayoutStanding> = {
    kind: 'refund',
    load: async (id) => {
      const refund = await loadState(this.deps.store, refundDecider, refundStreamName(id));
      return refund ? { ...refund, phase: phaseOf(refund) } : undefined;
    },
    prepare: async (refund, chain) => {
      let ours: PreparedTransaction;
      try {
        const depositPays = refund.payer!.fundedFrom === 'deposit';
        // Its first transaction from the deposit, only while the deposit holds it (a later one's hold was found then).
        if (depositPays && refund.preparedHashes.length === 0 && !(await this.keepsItsHold(refund))) {
          return { waitMs: 0 };
        }
        const sources = await this.coinsToSpend(refund);
        const fromWallet = refund.payer!.fundedFrom === 'refund_wallet';
        const fundedSince = fromWallet ? await refundWalletSince(this.deps.store, refund) : undefined;
        const others = await othersOnPayer(this.deps, refund, refund.payer!.fromAddress);
        // Their recorded transactions: a chain that lends a payer coins counts theirs as not the payer's.
        const othersPrepared = others.flatMap((o) => (o.prepared ? [o.prepared.raw] : []));
        ours = await chain.prepareTransfer({
          from: {
            address: refund.payer!.fromAddress,
            derivationIndex: refund.payer!.derivationIndex,
            ...(fundedSince && { fundedSince }),
          },
          to: refund.destination!,
          token: refund.token,
          amount: refund.netAmount,
          // The same reference always prepares the same transaction: it names what this one pays.
          reference: `refund/${refund.id}/${refund.attempt}/${refund.destination}/${refund.netAmount}`,
          fees: { platform: 0n, network: refund.networkFee },
          payout: 'refund',
          ...(sources && { sources: sources.map((s) => ({ ...s, amount: BigInt(s.amount) })) }),
          // From a deposit the rest is the settlement's, priced already: the refund pays its quote, never more.
          ...(!fromWallet && { exactNetworkFee: true }),
          // From a refund wallet, coins found on the chain (no earlier attempt names them): none another refund took.
          ...(fromWallet && !sources && chain.spendsCoinsWhole && { taken: coinsTakenBy(others) }),
          ...(othersPrepared.length > 0 && { othersPrepared }),
          ...(refund.refusedAttempts.length > 0 && { refusedAttempts: refund.refusedAttempts }),
        });
        // Two payouts alike in all (payer, customer, amount, fee) may be built alike: one transaction would then
        // complete both, the customer paid once. The chains' payers make theirs differ; never record one that does not.
        const twin = others.find((o) => o.preparedHashes.includes(ours.txHash));
        if (twin) throw new Error(`${ours.txHash} is refund ${twin.id}'s transaction too: not recorded twice`);
      } catch (error) {
        // Another refund from the payer is on its way, ahead of this one: not a failure.
        if (error instanceof PayerBusyError) return { waitMs: WAITING_LOOK_MS };
        if (await this.walletLacksFunds(refund, chain)) {
          const reason = error instanceof Error ? error.message : String(error);
          await this.act(refund.id, { type: 'AwaitFunds', reason, now: this.now() });
          return { waitMs: WAITING_LOOK_MS };
        }
        await this.recorder.recordFailure(refund, error);
        return { waitMs: 0 };
      }
      return { transaction: ours };
    },
    record: async (refund, ours) => {
      const { state } = await this.act(refund.id, {
        type: 'PrepareTransaction',
        txHash: ours.txHash,
        raw: ours.raw,
        ...(ours.coins && { coins: coinsOf(ours.txHash, ours.coins) }),
        now: this.now(),
      });
      // Only what the stream holds is ever sent: another process's transaction, if it recorded one first.
      if (!state?.prepared || state.status !== 'sending' || state.submitted) return null;
      return state.prepared;
    },
    ...recordedSteps<Refund, RefundFailureReason>(
      (id, command) => this.act(id, command),
      () => this.deps.clock,
      (error) => failureCodeOf(error) as RefundFailureReason,
    ),
  };
}
