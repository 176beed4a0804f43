// Settlement: the process manager that runs the settlement saga
// (domain/settlement-saga.ts), and the payout kind through which the payout
// engine (payouts.ts) pays a settlement out.
import type { Clock } from '../adapters/clock.ts';
import { failpoint } from '../adapters/failpoints.ts';
import type { ChainAdapter, PreparedTransaction } from '../adapters/chains/port.ts';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import type { ChainName } from '../domain/catalogue.ts';
import { DomainError } from '../domain/decider.ts';
import {
  invoiceDecider,
  invoiceStreamName,
  settlementReceipts,
  type InvoiceConfirmed,
  type InvoiceReceiptsChanged,
} from '../domain/invoice.ts';
import { merchantDecider, merchantStream } from '../domain/merchant.ts';
import { reactToSettlementEvent, type SettlementSagaEvent } from '../domain/settlement-saga.ts';
import {
  requestedSettlement,
  settlementDecider,
  settlementStreamName,
  type Settlement,
  type SettlementCommand,
  type SettlementCompleted,
  type SettlementFailureReason,
  payoutSources,
  waitsForRefund,
} from '../domain/settlement.ts';
import type { Reactor } from '../adapters/event-store/followers.ts';
import { handleCommand, loadState, unlessRefused } from './handle.ts';
import {
  failureCodeOf,
  recordedSteps,
  RecordedPayoutKind,
  type PayoutRecorder,
  type PayoutStanding,
} from './payouts.ts';
import { streams } from '../domain/streams.ts';

/** How soon a settlement waiting for the merchant's wallet looks again (setting one also wakes it). */
const WALLET_LOOK_MS = 60_000;

export interface SettlementDeps {
  store: EventStore;
  clock: Clock;
  chains: ReadonlyMap<ChainName, ChainAdapter>;
  platformFeeBps: number;
  requiredConfirmations: Record<ChainName, number>;
  /** A command the domain refused: deterministic, so it is not retried, but it is never dropped unseen. */
  onRefused?: (error: DomainError, event: RecordedEvent) => void;
}

/** The saga's input, from a recorded event; events recorded before they carried what it needs are completed here. */
async function sagaInput(store: EventStore, recorded: RecordedEvent): Promise<SettlementSagaEvent | undefined> {
  if (recorded.type === 'InvoiceConfirmed' || recorded.type === 'InvoiceReceiptsChanged') {
    const invoiceId = streams.invoice.idOf(recorded.streamId);
    const event = { type: recorded.type, data: recorded.data } as InvoiceConfirmed | InvoiceReceiptsChanged;
    if (event.type === 'InvoiceConfirmed' && event.data.merchantId === undefined) {
      const invoice = await loadState(store, invoiceDecider, recorded.streamId);
      const receipts = invoice && settlementReceipts(invoice);
      if (!receipts) return undefined;
      return { invoiceId, event: { type: 'InvoiceConfirmed', data: { ...event.data, ...receipts } } };
    }
    return { invoiceId, event };
  }
  if (recorded.type === 'SettlementCompleted') {
    const event = { type: recorded.type, data: recorded.data } as SettlementCompleted;
    if (event.data.invoiceId !== undefined) return { event };
    const s = requestedSettlement(await loadState(store, settlementDecider, recorded.streamId));
    if (!s) return undefined;
    const { invoiceId, netAmount, token, tokenDecimals } = s;
    return {
      event: { ...event, data: { ...event.data, invoiceId, netAmount: netAmount.toString(), token, tokenDecimals } },
    };
  }
  return undefined;
}

/**
 * Runs the settlement saga: invoice confirmed → settlement requested;
 * receipts changed → settlement re-priced (or raised for a person);
 * settlement completed → invoice settled. Its commands derive their event
 * ids from the causing event, so a repeat after a crash appends nothing.
 */
export function settlementManager({ store, chains, platformFeeBps, onRefused }: SettlementDeps): Reactor {
  const policy = {
    platformFeeBps,
    // An estimate for the amount shown meanwhile: the engine prices the fee when it prepares the payout.
    networkFeeEstimate: (chain: string, token: string) => {
      try {
        return chains.get(chain as ChainName)?.networkFee(token) ?? 0n;
      } catch {
        return 0n; // no fee quote yet
      }
    },
  };
  return {
    name: 'settlement-manager',
    async react(recorded: RecordedEvent) {
      const input = await sagaInput(store, recorded);
      if (!input) return;
      const options = { causationId: recorded.id };
      for (const action of reactToSettlementEvent(input, policy)) {
        await unlessRefused(
          () =>
            action.to === 'settlement'
              ? handleCommand(
                  store,
                  settlementDecider,
                  settlementStreamName(action.settlementId),
                  action.command,
                  options,
                )
              : handleCommand(store, invoiceDecider, invoiceStreamName(action.invoiceId), action.command, options),
          (error) => onRefused?.(error, recorded),
        );
      }
    },
  };
}

/** A settlement's standing in the payout's steps. */
function phaseOf(s: Settlement): PayoutStanding['phase'] {
  if (s.status === 'completed') return 'done';
  if (s.status === 'submitted') return 'submitted';
  return s.status === 'failed' ? 'failed' : 'sending';
}

/**
 * Pays a settlement out: prices the network fee and takes the merchant's
 * current wallet, prepares and records the transaction of an attempt,
 * broadcasts it, follows it to its confirmations, and retries failures with
 * growing delays. Before any new attempt it asks the chain for every
 * transaction prepared so far, so a payout that did go out is never sent again.
 */
export class SettlementPayouts extends RecordedPayoutKind<Settlement & PayoutStanding, SettlementDeps> {
  readonly kind = 'settlement';

  /** The command's events, and the settlement after them (the payout's commands only follow a request). */
  private async act(settlementId: string, command: SettlementCommand) {
    const handled = await handleCommand(
      this.deps.store,
      settlementDecider,
      settlementStreamName(settlementId),
      command,
    );
    return { ...handled, state: requestedSettlement(handled.state) };
  }

  private readonly steps = recordedSteps<Settlement, SettlementFailureReason>(
    (id, command) => this.act(id, command),
    () => this.deps.clock,
    failureCodeOf,
  );

  protected readonly recorder: PayoutRecorder<Settlement & PayoutStanding> = {
    kind: 'settlement',
    load: async (id) => {
      // Refunds held before any request leave nothing to pay out.
      const s = await loadSettlement(this.deps.store, id);
      return s ? { ...s, phase: phaseOf(s) } : undefined;
    },
    prepare: async (settlement, chain) => {
      // A refund from the deposit goes first; its end (an event) makes this payout due again.
      if (waitsForRefund(settlement)) return { waitMs: null };
      const ready = await this.readyToPrepare(settlement, chain);
      if (ready.waitMs !== undefined) return { waitMs: ready.waitMs };
      const transaction = await this.prepare(ready.settlement, chain);
      // Failed (recorded): look again.
      return transaction ? { transaction } : { waitMs: 0 };
    },
    record: async (settlement, transaction) => {
      const paying = this.builtFor.get(transaction.txHash);
      this.builtFor.delete(transaction.txHash);
      const { state } = await this.act(settlement.id, {
        type: 'PrepareTransaction',
        txHash: transaction.txHash,
        raw: transaction.raw,
        ...(paying && { paying }),
        now: this.now(),
      });
      // Only what the stream holds is ever sent: if another process recorded
      // its own transaction for this attempt first, that one is the payout.
      if (!state?.prepared || state.status !== 'pending') return null;
      return state.prepared;
    },
    ...this.steps,
  };

  /**
   * The merchant's wallet as it stands now (a wallet replaced before the
   * payout is prepared is the one paid) and the network fee as the chain
   * prices it now. Waits while the merchant has no wallet on the chain.
   */
  private async readyToPrepare(
    settlement: Settlement,
    chain: ChainAdapter,
  ): Promise<{ settlement: Settlement; waitMs?: undefined } | { waitMs: number }> {
    const merchant = await loadState(this.deps.store, merchantDecider, merchantStream(settlement.merchantId));
    const wallet = merchant?.settlementWallets[settlement.chain];
    if (!wallet) return { waitMs: WALLET_LOOK_MS };
    let state = settlement;
    if (wallet !== state.merchantWallet) {
      state = (await this.act(state.id, { type: 'SetWallet', merchantWallet: wallet, now: this.now() })).state!;
      failpoint('payout:after-wallet');
    }
    let networkFee: bigint;
    try {
      networkFee = chain.quoteNetworkFee
        ? await chain.quoteNetworkFee({
            from: { address: state.fromAddress, derivationIndex: state.derivationIndex },
            to: wallet,
            token: state.token,
          })
        : chain.networkFee(state.token);
    } catch (error) {
      // No fee quote from the node (or no exchange rate) yet: a failure with its reason and a retry time, not a silent wait.
      await this.recordFailure(state, error);
      return { waitMs: 0 };
    }
    state = (await this.act(state.id, { type: 'PriceNetworkFee', networkFee, now: this.now() })).state!;
    failpoint('payout:after-price');
    // The fees took everything: failed for good, visibly (the decider recorded why).
    if (state.status !== 'pending' || state.prepared) return { waitMs: 0 };
    return { settlement: state };
  }

  /** Prepares the attempt's transaction; a refusal is recorded as a failure. */
  private async prepare(settlement: Settlement, chain: ChainAdapter): Promise<PreparedTransaction | null> {
    const sources = payoutSources(settlement);
    let ours: PreparedTransaction;
    try {
      ours = await chain.prepareTransfer({
        from: { address: settlement.fromAddress, derivationIndex: settlement.derivationIndex },
        to: settlement.merchantWallet!,
        token: settlement.token,
        amount: settlement.netAmount,
        // The same reference always prepares the same transaction: it names what this one pays.
        reference: `${settlement.id}/${settlement.attempt}/${settlement.merchantWallet}/${settlement.netAmount}`,
        fees: { platform: settlement.platformFee, network: settlement.networkFee },
        // What a refused attempt left mined (EVM: its platform fee) is not paid again.
        ...(settlement.refusedAttempts.length > 0 && { refusedAttempts: settlement.refusedAttempts }),
        // The payments, with a refund's change in place of the coins that refund spent.
        ...(sources && {
          sources: sources.map((s) => ({ txHash: s.txHash, index: s.index, amount: BigInt(s.amount) })),
        }),
      });
    } catch (error) {
      await this.recordFailure(settlement, error);
      return null;
    }
    this.builtFor.set(ours.txHash, { netAmount: settlement.netAmount, merchantWallet: settlement.merchantWallet });
    return ours;
  }

  /**
   * What each transaction prepared here pays, by its hash, until it is
   * recorded: building it takes a while (a node, a top-up), and the settlement
   * can be re-priced meanwhile (new receipts, a refund's hold); the stream
   * records it only if it still pays that.
   */
  private readonly builtFor = new Map<string, { netAmount: bigint; merchantWallet: string | null }>();

  private async recordFailure(settlement: Settlement, error: unknown) {
    await this.steps.recordFailure(settlement, error);
  }
}

/** The settlement once requested; a stream with only refund holds (refunds.md) has none. */
export async function loadSettlement(store: EventStore, settlementId: string): Promise<Settlement | null> {
  return requestedSettlement(await loadState(store, settlementDecider, settlementStreamName(settlementId)));
}

/** An operator's word that a settlement raised for attention was dealt with (GET /admin/v1/attention drops it). */
export function resolveSettlementAttention(store: EventStore, settlementId: string, note: string, clock: Clock) {
  return handleCommand(store, settlementDecider, settlementStreamName(settlementId), {
    type: 'ResolveAttention',
    note,
    now: clock.now().toISOString(),
  });
}
