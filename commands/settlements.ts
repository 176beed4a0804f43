// Settlement: the process manager that asks for one when an invoice is
// confirmed, and the sweeper that pays it out through the chain port.
import type { Kysely } from 'kysely';
import type { Clock } from '../adapters/clock.ts';
import { failpoint } from '../adapters/failpoints.ts';
import { TransactionRejectedError, type ChainAdapter } from '../adapters/chains/port.ts';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import type { ChainName } from '../domain/catalogue.ts';
import { DomainError } from '../domain/decider.ts';
import { invoiceDecider, invoiceStreamName, paymentQuote } from '../domain/invoice.ts';
import { merchantDecider, merchantStream, type MerchantEvent } from '../domain/merchant.ts';
import { formatUnits } from '../domain/money.ts';
import {
  settlementDecider,
  settlementIdOf,
  settlementStreamName,
  type SettlementCommand,
  type SettlementEvent,
} from '../domain/settlement.ts';
import type { Reactor } from '../projections/engine.ts';
import type { ReadModelTables } from '../projections/schema.ts';
import { handleCommand, loadState } from './handle.ts';
import { Periodic, type PeriodicOptions } from './periodic.ts';

/** Growing delays between attempts of a failed payout. */
const RETRY_DELAYS_MS = [10_000, 60_000, 5 * 60_000, 30 * 60_000, 2 * 3600_000, 6 * 3600_000];

export interface SettlementDeps {
  store: EventStore;
  clock: Clock;
  chains: ReadonlyMap<ChainName, ChainAdapter>;
  platformFeeBps: number;
  requiredConfirmations: Record<ChainName, number>;
}

/**
 * Invoice confirmed → settlement requested (one per invoice, its id derived
 * from the invoice); merchant wallet set → waiting settlements get it;
 * settlement completed → invoice settled.
 */
export function settlementManager(
  { store, clock, chains, platformFeeBps }: SettlementDeps,
  db: Kysely<ReadModelTables>,
): Reactor {
  const now = () => clock.now().toISOString();
  const settle = (settlementId: string, command: SettlementCommand, causationId: string) =>
    handleCommand(store, settlementDecider, settlementStreamName(settlementId), command, { causationId });

  async function requestFor(invoiceId: string, causationId: string) {
    const invoice = await loadState(store, invoiceDecider, invoiceStreamName(invoiceId));
    const quote = invoice && paymentQuote(invoice);
    if (!invoice || !quote) return;
    const merchant = await loadState(store, merchantDecider, merchantStream(invoice.merchantId));
    const chain = chains.get(quote.chain as ChainName);
    const received = invoice.payments
      .filter((p) => !p.withdrawn && !p.wrongToken && !p.late)
      .reduce((total, p) => total + p.amount, 0n);
    const settlementId = settlementIdOf(invoiceId);
    await settle(
      settlementId,
      {
        type: 'RequestSettlement',
        settlementId,
        invoiceId,
        merchantId: invoice.merchantId,
        chain: quote.chain,
        token: quote.token,
        tokenDecimals: quote.tokenDecimals,
        fromAddress: quote.address,
        derivationIndex: quote.derivationIndex,
        grossAmount: received,
        networkFee: chain?.networkFee(quote.token) ?? 0n,
        platformFeeBps,
        merchantWallet: merchant?.settlementWallets[quote.chain] ?? null,
        now: now(),
      },
      causationId,
    );
  }

  async function giveWallets(merchantId: string, wallets: Record<string, string>, causationId: string) {
    const waiting = await db
      .selectFrom('settlements')
      .select(['id', 'chain'])
      .where('merchant_id', '=', merchantId)
      .where('merchant_wallet', 'is', null)
      .execute();
    for (const s of waiting) {
      const wallet = wallets[s.chain];
      if (wallet) await settle(s.id, { type: 'SetWallet', merchantWallet: wallet, now: now() }, causationId);
    }
  }

  return {
    name: 'settlement-manager',
    async react(recorded: RecordedEvent) {
      try {
        if (recorded.type === 'InvoiceConfirmed') {
          await requestFor(recorded.streamId.slice('invoice-'.length), recorded.id);
        } else if (recorded.type === 'MerchantUpdated') {
          const { changes } = (recorded as unknown as Extract<MerchantEvent, { type: 'MerchantUpdated' }>).data;
          if (changes.settlementWallets) {
            await giveWallets(recorded.streamId.slice('merchant-'.length), changes.settlementWallets, recorded.id);
          }
        } else if (recorded.type === 'SettlementCompleted') {
          const settlement = await loadState(store, settlementDecider, recorded.streamId);
          if (!settlement) return;
          const d = (recorded as unknown as Extract<SettlementEvent, { type: 'SettlementCompleted' }>).data;
          await handleCommand(
            store,
            invoiceDecider,
            invoiceStreamName(settlement.invoiceId),
            {
              type: 'SettleInvoice',
              settlementId: settlement.id,
              settledAmount: formatUnits(settlement.netAmount, settlement.tokenDecimals, settlement.tokenDecimals),
              settledCurrency: settlement.token,
              txHash: d.txHash,
              settledAt: d.completedAt,
            },
            { causationId: recorded.id },
          );
        }
      } catch (error) {
        // A refusal is deterministic: retrying would refuse again and hold up everything after it.
        if (!(error instanceof DomainError)) throw error;
      }
    },
  };
}

/**
 * Pays out settlements: prepares and records the transaction of an attempt,
 * broadcasts it, follows it to its confirmations, and retries failures with
 * growing delays. Before any new attempt it asks the chain for every
 * transaction prepared so far, so a payout that did go out is never sent again.
 */
export class SettlementSweeper {
  private readonly periodic: Periodic;

  constructor(
    private readonly deps: SettlementDeps,
    private readonly db: Kysely<ReadModelTables>,
    private readonly options: PeriodicOptions = {},
  ) {
    this.periodic = new Periodic(() => this.sweep(), options);
  }

  start() {
    this.periodic.start();
  }

  async stop() {
    await this.periodic.stop();
  }

  poke() {
    this.periodic.poke();
  }

  /** One pass over the open settlements. */
  async sweep(): Promise<void> {
    const open = await this.db
      .selectFrom('settlements')
      .select('id')
      .where('status', 'in', ['pending', 'submitted', 'failed'])
      .where('merchant_wallet', 'is not', null)
      .orderBy('created_at')
      .limit(100)
      .execute();
    for (const { id } of open) {
      try {
        await this.advance(id);
      } catch (error) {
        this.options.onError?.(error);
      }
    }
  }

  /** Moves one settlement as far as it can go now. */
  async advance(settlementId: string): Promise<void> {
    const { store, clock, chains, requiredConfirmations } = this.deps;
    const stream = settlementStreamName(settlementId);
    const act = (command: SettlementCommand) => handleCommand(store, settlementDecider, stream, command);
    const now = () => clock.now().toISOString();
    const settlement = await loadState(store, settlementDecider, stream);
    if (!settlement || settlement.status === 'completed' || !settlement.merchantWallet) return;
    const chain = chains.get(settlement.chain as ChainName);
    if (!chain) return;

    // Whatever attempt we are at: if any prepared transaction is on the chain, it is the payout.
    for (const txHash of settlement.preparedHashes) {
      const onChain = await chain.transactionStatus(txHash);
      if (!onChain) continue;
      if (settlement.status !== 'submitted' || settlement.txHash !== txHash) {
        if (settlement.status === 'failed') await act({ type: 'Retry', now: now() });
        await act({ type: 'MarkSubmitted', txHash, now: now() });
      }
      if (onChain.confirmations >= requiredConfirmations[settlement.chain as ChainName]) {
        await act({
          type: 'MarkCompleted',
          txHash,
          blockNumber: onChain.blockNumber,
          confirmations: onChain.confirmations,
          now: now(),
        });
      }
      return;
    }

    if (settlement.status === 'failed') {
      if (settlement.retryAt && Date.parse(settlement.retryAt) > clock.now().getTime()) return;
      // After an unknown outcome the retry keeps the prepared transaction and sends it again.
      await act({ type: 'Retry', now: now() });
      return this.advance(settlementId);
    }
    if (settlement.status === 'submitted') {
      // Broadcast but not on the chain (dropped, or removed by a reorg): send the same transaction again.
      if (settlement.prepared) await this.broadcast(settlementId, settlement.prepared, settlement.attempt);
      return;
    }
    // pending: record the transaction before it leaves, then send it.
    let prepared = settlement.prepared;
    if (!prepared) {
      const ours = await chain.prepareTransfer({
        from: { address: settlement.fromAddress, derivationIndex: settlement.derivationIndex },
        to: settlement.merchantWallet,
        token: settlement.token,
        amount: settlement.netAmount,
        reference: `${settlement.id}/${settlement.attempt}`,
        fees: { platform: settlement.platformFee, network: settlement.networkFee },
      });
      const { state } = await act({ type: 'PrepareTransaction', txHash: ours.txHash, raw: ours.raw, now: now() });
      // Only what the stream holds is ever sent: if another process recorded
      // its own transaction for this attempt first, that one is the payout.
      prepared = state?.prepared ?? null;
      if (!prepared || state?.status !== 'pending') return;
      failpoint('settlement:after-prepare');
    }
    if (await this.broadcast(settlementId, prepared, settlement.attempt)) {
      failpoint('settlement:after-broadcast');
      await act({ type: 'MarkSubmitted', txHash: prepared.txHash, now: now() });
    }
  }

  /** True when the chain took the transaction; a failure is recorded with the time of the next attempt. */
  private async broadcast(
    settlementId: string,
    prepared: { txHash: string; raw: string },
    attempt: number,
  ): Promise<boolean> {
    const { store, clock, chains } = this.deps;
    const settlement = await loadState(store, settlementDecider, settlementStreamName(settlementId));
    try {
      await chains.get(settlement!.chain as ChainName)!.broadcast(prepared);
      return true;
    } catch (error) {
      const delay = RETRY_DELAYS_MS[Math.min(attempt - 1, RETRY_DELAYS_MS.length - 1)]!;
      await handleCommand(store, settlementDecider, settlementStreamName(settlementId), {
        type: 'MarkFailed',
        reason: error instanceof Error ? error.message : String(error),
        rejected: error instanceof TransactionRejectedError,
        retryAt: new Date(clock.now().getTime() + delay).toISOString(),
        now: clock.now().toISOString(),
      });
      return false;
    }
  }
}
