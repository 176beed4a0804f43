// A paid invoice's whole life in the event log, written as the service's
// command handlers write it, one append a step: the invoice and its address,
// the payment detected and confirmed block by block (optionally reorged out
// and mined again), the invoice paid and confirmed, the settlement prepared,
// sent (optionally failing once and retried) and completed, the invoice
// settled. Lives run side by side so that their appends interleave as
// concurrent payments' do. For rebuild benchmarks and read-model tests.
import { randomUUID } from 'node:crypto';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { handleCommand, handleCommands } from '../../commands/handle.ts';
import { invoiceDecider, invoiceStreamName, type InvoiceCommand } from '../../domain/invoice.ts';
import { paymentDecider, paymentId as paymentIdOf, paymentStreamName } from '../../domain/payment.ts';
import {
  settlementDecider,
  settlementIdOf,
  settlementStreamName,
  type SettlementCommand,
} from '../../domain/settlement.ts';

export interface LifeOptions {
  /** Confirmations the payment waits for: one event per new count after the first. */
  confirmations: number;
  /** Reorg the payment out once it has this many confirmations, then mine it again. */
  reorgAt?: number;
  /** The settlement's first submission fails (its outcome unknown) and is retried. */
  settlementFailsOnce?: boolean;
}

/** Events a life appends with these options. */
export function lifeEvents({ confirmations, reorgAt, settlementFailsOnce }: LifeOptions): number {
  const invoice = 2 + 1 + 2 + 1; // created + address, payment applied, payment and invoice confirmed, settled
  const payment = confirmations; // detected at 1, one event per count up to the last (PaymentConfirmed)
  const reorg = reorgAt === undefined ? 0 : 1 + 1 + 1 + 1 + (reorgAt - 1); // reorged, withdrawn, detected, applied, counts again
  const settlement = 4 + (settlementFailsOnce ? 3 : 0); // requested, prepared, submitted, completed (+ failed, retried, submitted)
  return invoice + payment + reorg + settlement;
}

/** The invoice's creation and address as the API writes a payment: one append. */
export function paymentCommands(id: string, merchantId: string, index: number): InvoiceCommand[] {
  const now = new Date();
  const later = new Date(now.getTime() + 15 * 60_000).toISOString();
  return [
    {
      type: 'CreateInvoice',
      id,
      merchantId,
      amount: '10',
      currency: 'USD',
      description: null,
      expiresAt: later,
      webhookUrl: null,
      metadata: null,
      createdAt: now.toISOString(),
    },
    {
      type: 'AssignAddress',
      chain: 'tron',
      token: 'USDT',
      tokenDecimals: 6,
      address: `T${id.replaceAll('-', '')}`,
      derivationIndex: index,
      rate: '1',
      quotedAt: now.toISOString(),
      rateValidUntil: later,
    },
  ];
}

/** One paid invoice's appends, one a step (see the file's comment). */
export async function* paidInvoiceLife(
  store: EventStore,
  merchantId: string,
  index: number,
  options: LifeOptions,
): AsyncGenerator<void> {
  const id = randomUUID();
  const invoice = invoiceStreamName(id);
  const [created, assigned] = paymentCommands(id, merchantId, index);
  const address = (assigned as Extract<InvoiceCommand, { type: 'AssignAddress' }>).address;
  await handleCommands(store, invoiceDecider, invoice, [created!, assigned!], { newStream: true });
  yield;
  const txHash = randomUUID().replaceAll('-', '').repeat(2);
  const payment = paymentStreamName('tron', txHash, 0);
  const paymentId = paymentIdOf('tron', txHash, 0);
  const at = () => new Date().toISOString();
  const amount = 10_000_000n; // 10 USDT, the invoice's 10 USD at rate 1
  const detect = (blockNumber: number) =>
    handleCommand(store, paymentDecider, payment, {
      type: 'DetectPayment',
      chain: 'tron',
      token: 'USDT',
      tokenDecimals: 6,
      amount,
      toAddress: address,
      txHash,
      outputIndex: 0,
      blockNumber,
      blockHash: `0x${blockNumber.toString(16).padStart(64, '0')}`,
      invoiceId: id,
      tokenMatchesInvoice: true,
      confirmations: 1,
      requiredConfirmations: options.confirmations,
      detectedAt: at(),
    });
  const apply = () =>
    handleCommand(store, invoiceDecider, invoice, {
      type: 'ApplyPayment',
      paymentId,
      chain: 'tron',
      token: 'USDT',
      tokenDecimals: 6,
      address,
      amount,
      txHash,
      detectedAt: at(),
    });
  const confirmUpTo = async function* (from: number, to: number) {
    for (let confirmations = from; confirmations <= to; confirmations++) {
      await handleCommand(store, paymentDecider, payment, {
        type: 'UpdateConfirmations',
        confirmations,
        observedAt: at(),
      });
      yield;
    }
  };
  const block = 1_000_000 + index * 10;
  await detect(block);
  yield;
  await apply();
  yield;
  if (options.reorgAt !== undefined) {
    yield* confirmUpTo(2, options.reorgAt);
    const blockHash = `0x${block.toString(16).padStart(64, '0')}`;
    await handleCommand(store, paymentDecider, payment, { type: 'RecordReorg', blockHash, reorgedAt: at() });
    yield;
    await handleCommand(store, invoiceDecider, invoice, { type: 'WithdrawPayment', paymentId, withdrawnAt: at() });
    yield;
    await detect(block + 1);
    yield;
    await apply();
    yield;
  }
  yield* confirmUpTo(2, options.confirmations);
  await handleCommand(store, invoiceDecider, invoice, { type: 'ConfirmInvoicePayment', paymentId, confirmedAt: at() });
  yield;
  const settlementId = settlementIdOf(id);
  const settlementTx = `0x${randomUUID().replaceAll('-', '')}`;
  const submitted: SettlementCommand = { type: 'MarkSubmitted', txHash: settlementTx, now: at() };
  const settlementCommands: SettlementCommand[] = [
    {
      type: 'RequestSettlement',
      settlementId,
      invoiceId: id,
      merchantId,
      chain: 'tron',
      token: 'USDT',
      tokenDecimals: 6,
      fromAddress: address,
      derivationIndex: index,
      grossAmount: amount,
      networkFee: 1_000_000n,
      platformFeeBps: 100,
      merchantWallet: 'TMerchantWallet',
      now: at(),
    },
    { type: 'PrepareTransaction', txHash: settlementTx, raw: '00', now: at() },
    submitted,
    ...(options.settlementFailsOnce
      ? ([
          { type: 'MarkFailed', reason: 'timeout', rejected: false, retryAt: at(), now: at() },
          { type: 'Retry', now: at() },
          submitted,
        ] satisfies SettlementCommand[])
      : []),
    { type: 'MarkCompleted', txHash: settlementTx, blockNumber: 2_000_000 + index, confirmations: 19, now: at() },
  ];
  for (const command of settlementCommands) {
    await handleCommand(store, settlementDecider, settlementStreamName(settlementId), command);
    yield;
  }
  await handleCommand(store, invoiceDecider, invoice, {
    type: 'SettleInvoice',
    settlementId,
    settledAmount: '8.9',
    settledCurrency: 'USDT',
    txHash: settlementTx,
    settledAt: at(),
  });
}

/**
 * Runs `lives` step by step, `width` appends at a time, until all are done,
 * so that the lives' appends interleave in the log.
 */
export async function liveSideBySide(lives: AsyncGenerator<void>[], width: number): Promise<void> {
  let running = [...lives];
  while (running.length > 0) {
    const done: boolean[] = new Array(running.length);
    let next = 0;
    await Promise.all(
      Array.from({ length: Math.min(width, running.length) }, async () => {
        for (let i = next++; i < running.length; i = next++) done[i] = (await running[i]!.next()).done === true;
      }),
    );
    running = running.filter((_, i) => !done[i]);
  }
}
