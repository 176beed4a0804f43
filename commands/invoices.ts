// Merchant commands on invoices: create, give a deposit address with its
// quote, cancel, expire.
import { randomUUID } from 'node:crypto';
import type { Clock } from '../adapters/clock.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import type { DepositAddressDeriver } from '../adapters/keys/derivation.ts';
import { observationsOf, type Rate, type RateProvider } from '../adapters/rates/port.ts';
import { findChain, findToken, type ChainName } from '../domain/catalogue.ts';
import { DomainError, fold } from '../domain/decider.ts';
import {
  quoteForNewAddress,
  invoiceDecider,
  invoiceStreamName,
  type AssignedAddress,
  type Invoice,
  type JsonObject,
  type RateProvenance,
} from '../domain/invoice.ts';
import { DerivationIndexes } from './derivation-indexes.ts';
import { handleCommand, handleCommands, handleWritten, loadState, type Actor, type Written } from './handle.ts';

/** A quote's rate holds for this long; it is also the longest life of a payment created with its address. */
export const RATE_WINDOW_MINUTES = 15;
export interface NewInvoice {
  amount: string;
  currency: string;
  description: string | null;
  expiresInMinutes: number;
  webhookUrl: string | null;
  metadata: JsonObject | null;
  subscriberId?: string;
  /**
   * A caller-chosen id (a subscription period's invoice): creating it again
   * gives the invoice created the first time, so a retry or a second process
   * never makes a second invoice.
   */
  id?: string;
}

export interface InvoiceCommandDeps {
  store: EventStore;
  clock: Clock;
  rates: RateProvider;
  addresses: DepositAddressDeriver;
  enabledChains: readonly ChainName[];
}

/** The quote's record of where its rate came from (RATE_PROVIDER): when observed, and each source's answer. */
export function provenanceOf(rates: Pick<RateProvider, 'name'>, rate: Rate): Required<RateProvenance> {
  return {
    rateObservedAt: rate.observedAt.toISOString(),
    rateSources: observationsOf(rates, rate).map((o) => ({ ...o, observedAt: o.observedAt.toISOString() })),
  };
}

export function invoiceCommands({ store, clock, rates, addresses, enabledChains }: InvoiceCommandDeps) {
  const derivationIndexes = new DerivationIndexes(store);

  /** The rate of `symbol` in `currency`, or a refusal naming the sources asked (they all failed or disagreed). */
  async function rateOf(symbol: string, currency: string): Promise<Rate> {
    const rate = await rates.rate(symbol, currency);
    if (rate) return rate;
    throw new DomainError(
      'bad_request',
      rates.whyNoRate?.(symbol, currency) ??
        `No exchange rate for ${symbol} in ${currency} is available from ${rates.name}`,
    );
  }

  async function invoiceOf(invoiceId: string, merchantId?: string): Promise<Invoice> {
    const invoice = await loadState(store, invoiceDecider, invoiceStreamName(invoiceId));
    // Another merchant's invoice is reported exactly like a missing one.
    if (!invoice || (merchantId !== undefined && invoice.merchantId !== merchantId)) {
      throw new DomainError('not_found', 'Invoice not found');
    }
    return invoice;
  }

  function createCommandOf(merchantId: string, input: NewInvoice, id: string) {
    // One reading of the clock, so `expiresAt - createdAt` is exactly the window asked for.
    const now = clock.now();
    return {
      type: 'CreateInvoice',
      id,
      merchantId,
      amount: input.amount,
      currency: input.currency,
      description: input.description,
      expiresAt: new Date(now.getTime() + input.expiresInMinutes * 60_000).toISOString(),
      webhookUrl: input.webhookUrl,
      metadata: input.metadata,
      createdAt: now.toISOString(),
      ...(input.subscriberId !== undefined && { subscriberId: input.subscriberId }),
    } as const;
  }

  function assignCommandOf(
    chain: ChainName,
    token: { symbol: string; decimals: number },
    rate: Rate,
    quotedAt: Date,
    derivationIndex: number,
    address: string,
  ) {
    return {
      type: 'AssignAddress',
      chain,
      token: token.symbol,
      tokenDecimals: token.decimals,
      address,
      derivationIndex,
      rate: rate.rate,
      quotedAt: quotedAt.toISOString(),
      rateValidUntil: new Date(quotedAt.getTime() + RATE_WINDOW_MINUTES * 60_000).toISOString(),
      ...provenanceOf(rates, rate),
    } as const;
  }

  async function create(
    merchantId: string,
    input: NewInvoice,
    correlationId?: string,
    actor?: Actor,
  ): Promise<Written<Invoice>> {
    if (input.id !== undefined) {
      const existing = await loadState(store, invoiceDecider, invoiceStreamName(input.id));
      if (existing) return { value: existing, position: undefined };
    }
    const id = input.id ?? randomUUID();
    const command = createCommandOf(merchantId, input, id);
    try {
      return await handleWritten(store, invoiceDecider, invoiceStreamName(id), command, {
        correlationId,
        actor,
        newStream: input.id === undefined,
      });
    } catch (error) {
      // Created by another process in between: that one is this invoice.
      if (!(input.id !== undefined && error instanceof DomainError && error.kind === 'conflict')) throw error;
      return { value: await invoiceOf(input.id, merchantId), position: undefined };
    }
  }

  /**
   * The deposit address and quote of `token` on `chain` for the invoice: a new
   * one (`created`), or the one it already has for that pair.
   */
  async function assignAddress(
    invoiceId: string,
    chain: string,
    tokenSymbol: string | undefined,
    correlationId?: string,
  ): Promise<Written<{ invoice: Invoice; address: AssignedAddress; created: boolean }>> {
    const chainInfo = findChain(chain, enabledChains);
    if (!chainInfo) throw new DomainError('bad_request', `Chain ${chain} is not supported or not enabled`);
    const token = findToken(chainInfo.name, tokenSymbol ?? chainInfo.nativeCurrency);
    if (!token) throw new DomainError('bad_request', `Token ${tokenSymbol} is not supported on ${chain}`);
    const invoice = await invoiceOf(invoiceId);
    const existing = invoice.addresses.find((a) => a.chain === chainInfo.name && a.token === token.symbol);
    const quotedAt = clock.now();
    if (existing) {
      if (quotedAt.getTime() < Date.parse(existing.rateValidUntil) || invoice.status !== 'pending') {
        return { value: { invoice, address: existing, created: false }, position: undefined };
      }
      return requote(invoice, existing, quotedAt, correlationId);
    }

    const rate = await rateOf(token.symbol, invoice.currency);
    quoteForNewAddress(invoice, { quotedAt: quotedAt.toISOString(), rate: rate.rate, tokenDecimals: token.decimals });
    const derivationIndex = await derivationIndexes.next();
    const address = await addresses.deriveDepositAddress(chainInfo.name, derivationIndex);
    const { state, position } = await handleCommand(
      store,
      invoiceDecider,
      invoiceStreamName(invoiceId),
      assignCommandOf(chainInfo.name, token, rate, quotedAt, derivationIndex, address),
      { correlationId },
    );
    const assigned = state!.addresses.find((a) => a.chain === chainInfo.name && a.token === token.symbol)!;
    return { value: { invoice: state!, address: assigned, created: assigned.address === address }, position };
  }

  /** A fresh quote for an address whose rate window passed; the decider keeps a quote that was paid against. */
  async function requote(
    invoice: Invoice,
    existing: AssignedAddress,
    quotedAt: Date,
    correlationId?: string,
  ): Promise<Written<{ invoice: Invoice; address: AssignedAddress; created: boolean }>> {
    const rate = await rateOf(existing.token, invoice.currency);
    const { state, position } = await handleCommand(
      store,
      invoiceDecider,
      invoiceStreamName(invoice.id),
      {
        type: 'RequoteAddress',
        chain: existing.chain,
        token: existing.token,
        rate: rate.rate,
        quotedAt: quotedAt.toISOString(),
        rateValidUntil: new Date(quotedAt.getTime() + RATE_WINDOW_MINUTES * 60_000).toISOString(),
        ...provenanceOf(rates, rate),
      },
      { correlationId },
    );
    const address = state!.addresses.find((a) => a.chain === existing.chain && a.address === existing.address)!;
    return { value: { invoice: state!, address, created: false }, position };
  }

  return {
    invoiceOf,
    create,
    assignAddress,

    /** An invoice with its address in one call, for a known chain and token. */
    async createPayment(
      merchantId: string,
      input: NewInvoice & { chain: string; token: string | undefined },
      correlationId?: string,
      actor?: Actor,
    ): Promise<Written<{ invoice: Invoice; address: AssignedAddress }>> {
      // Checked before anything is written, so a bad chain leaves no invoice behind.
      const chainInfo = findChain(input.chain, enabledChains);
      if (!chainInfo) throw new DomainError('bad_request', `Chain ${input.chain} is not supported or not enabled`);
      const token = findToken(chainInfo.name, input.token ?? chainInfo.nativeCurrency);
      if (!token) throw new DomainError('bad_request', `Token ${input.token} is not supported on ${input.chain}`);
      const rate = await rateOf(token.symbol, input.currency);
      // A caller-chosen id created before (a retried request): that invoice, and no index burnt.
      const existing =
        input.id === undefined ? undefined : await loadState(store, invoiceDecider, invoiceStreamName(input.id));
      if (existing) return { value: { invoice: existing, address: existing.addresses[0]! }, position: undefined };
      // The invoice and its address in one append, checked before an index is reserved (a refusal burns none).
      const id = input.id ?? randomUUID();
      const expiresInMinutes = Math.min(input.expiresInMinutes, RATE_WINDOW_MINUTES);
      const createInvoice = createCommandOf(merchantId, { ...input, expiresInMinutes }, id);
      const invoice = fold(invoiceDecider, invoiceDecider.decide(createInvoice, null))!;
      const quotedAt = clock.now();
      quoteForNewAddress(invoice, { quotedAt: quotedAt.toISOString(), rate: rate.rate, tokenDecimals: token.decimals });
      const derivationIndex = await derivationIndexes.next();
      const address = await addresses.deriveDepositAddress(chainInfo.name, derivationIndex);
      try {
        const { state, position } = await handleCommands(
          store,
          invoiceDecider,
          invoiceStreamName(id),
          [createInvoice, assignCommandOf(chainInfo.name, token, rate, quotedAt, derivationIndex, address)],
          { correlationId, actor, newStream: true },
        );
        return { value: { invoice: state!, address: state!.addresses[0]! }, position };
      } catch (error) {
        // Created by another process in between (the same request retried): that one is this invoice.
        if (!(input.id !== undefined && error instanceof DomainError && error.kind === 'conflict')) throw error;
        const invoice = await invoiceOf(input.id, merchantId);
        return { value: { invoice, address: invoice.addresses[0]! }, position: undefined };
      }
    },

    async cancel(
      invoiceId: string,
      merchantId: string,
      correlationId?: string,
      actor?: Actor,
    ): Promise<Written<Invoice>> {
      await invoiceOf(invoiceId, merchantId);
      return handleWritten(
        store,
        invoiceDecider,
        invoiceStreamName(invoiceId),
        { type: 'CancelInvoice', cancelledAt: clock.now().toISOString() },
        { correlationId, actor },
      );
    },

    async expire(invoiceId: string): Promise<void> {
      await handleCommand(store, invoiceDecider, invoiceStreamName(invoiceId), {
        type: 'ExpireInvoice',
        now: clock.now().toISOString(),
      });
    },
  };
}

export type InvoiceCommands = ReturnType<typeof invoiceCommands>;
