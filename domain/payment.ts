// The payment aggregate, stream `payment-<chain>-<txHash>-<index>`: one
// on-chain transfer (a Bitcoin output, an EVM/Tron log or native transfer, a
// Solana instruction) to one invoice's deposit address, from detection through
// confirmations, or until a reorg drops it.
//
// A transfer of the wrong token is not a separate event type: it has the same
// lifecycle (confirmations, reorgs) as any other, so PaymentDetected carries a
// `wrongToken` flag and every reader handles one event instead of two.
import { v5 as uuidv5 } from 'uuid';
import { type Decider, type DomainEvent, DomainError } from './decider.ts';
import { streams } from './streams.ts';

/** Fixed namespace of payment ids. Never change it: ids already stored would no longer match. */
export const PAYMENT_ID_NAMESPACE = 'a9d7d292-d32c-4981-aa64-803e6756124f';

/**
 * The payment id of a transfer: UUIDv5 of chain, transaction hash and
 * output/log index, so the same transfer seen twice (two watchers, a restart,
 * a re-mined transaction) is the same payment. Hashes are taken as given:
 * the chain adapter passes its canonical form (EVM lowercase hex; Solana
 * signatures are case-sensitive base58 and must not be case-folded).
 */
export function paymentId(chain: string, txHash: string, outputIndex: number): string {
  return uuidv5(`${chain}:${txHash}:${outputIndex}`, PAYMENT_ID_NAMESPACE);
}

export const paymentStreamName = (chain: string, txHash: string, outputIndex: number): string =>
  streams.payment.name(`${chain}-${txHash}-${outputIndex}`);

// ---------------------------------------------------------------- events

export type PaymentDetected = DomainEvent<
  'PaymentDetected',
  {
    paymentId: string;
    invoiceId: string;
    chain: string;
    /** the token actually sent */
    token: string;
    tokenDecimals: number;
    /** base units of `token`, integer string */
    amount: string;
    toAddress: string;
    txHash: string;
    outputIndex: number;
    blockNumber: number;
    blockHash: string;
    /** not the token quoted for `toAddress` (or not the invoice's payment token) */
    wrongToken: boolean;
    confirmations: number;
    /** the chain's configured requirement, fixed at detection */
    requiredConfirmations: number;
    detectedAt: string;
    /** When the chain says the transfer was made (its block's time); judges lateness. */
    paidAt?: string;
  }
>;

export type PaymentConfirmationsUpdated = DomainEvent<
  'PaymentConfirmationsUpdated',
  { paymentId: string; confirmations: number; observedAt: string }
>;

export type PaymentConfirmed = DomainEvent<
  'PaymentConfirmed',
  { paymentId: string; invoiceId: string; confirmations: number; confirmedAt: string }
>;

/** A payment first seen in the mempool (MEMPOOL_BLOCK_HASH) is now in a block. */
export type PaymentMined = DomainEvent<
  'PaymentMined',
  { paymentId: string; blockNumber: number; blockHash: string; confirmations: number; minedAt: string }
>;

/**
 * The block hash of a payment seen in the node's mempool, not in a block yet
 * (Bitcoin): 0 confirmations, block number -1. Mined, it gets its block
 * (PaymentMined); dropped from the mempool (replaced, evicted), it is
 * withdrawn like a payment whose block left the chain.
 */
export const MEMPOOL_BLOCK_HASH = 'mempool';

export type PaymentReorged = DomainEvent<
  'PaymentReorged',
  { paymentId: string; invoiceId: string; blockHash: string; reorgedAt: string }
>;

export type PaymentEvent =
  PaymentDetected | PaymentConfirmationsUpdated | PaymentConfirmed | PaymentMined | PaymentReorged;

// ---------------------------------------------------------------- commands

export type PaymentCommand =
  | ({
      type: 'DetectPayment';
      amount: bigint;
      /** whether the token is the one the invoice quoted for this address (see classifyPayment in invoice.ts) */
      tokenMatchesInvoice: boolean;
    } & Omit<PaymentDetected['data'], 'paymentId' | 'amount' | 'wrongToken'>)
  | { type: 'UpdateConfirmations'; confirmations: number; observedAt: string }
  | {
      type: 'RecordReorg';
      /** the block that left the canonical chain */
      blockHash: string;
      reorgedAt: string;
    };

// ---------------------------------------------------------------- state

/** detected: in a block, counting confirmations; confirmed: final; reorged: its block was dropped. */
export type PaymentRecordStatus = 'detected' | 'confirmed' | 'reorged';

export interface Payment extends Omit<PaymentDetected['data'], 'amount' | 'paidAt'> {
  amount: bigint;
  status: PaymentRecordStatus;
  confirmedAt: string | null;
  reorgedAt: string | null;
}

/** null until the first PaymentDetected. */
export type PaymentState = Payment | null;

// ---------------------------------------------------------------- decide

type DetectPayment = Extract<PaymentCommand, { type: 'DetectPayment' }>;

const isCount = (n: number): boolean => Number.isInteger(n) && n >= 0;

function validateDetection(command: DetectPayment): void {
  // Zero-value token transfers are a known address-poisoning trick, never a payment.
  if (command.amount <= 0n) throw new DomainError('bad_request', 'Payment amount must be greater than 0');
  if (!isCount(command.confirmations) || !isCount(command.requiredConfirmations)) {
    throw new DomainError('bad_request', 'Confirmations must be non-negative integers');
  }
}

/** PaymentDetected, followed by PaymentConfirmed when it was first seen already deep enough. */
function detection(command: DetectPayment, invoiceId: string): PaymentEvent[] {
  const id = paymentId(command.chain, command.txHash, command.outputIndex);
  const detected: PaymentDetected = {
    type: 'PaymentDetected',
    data: {
      paymentId: id,
      invoiceId,
      chain: command.chain,
      token: command.token,
      tokenDecimals: command.tokenDecimals,
      amount: command.amount.toString(),
      toAddress: command.toAddress,
      txHash: command.txHash,
      outputIndex: command.outputIndex,
      blockNumber: command.blockNumber,
      blockHash: command.blockHash,
      wrongToken: !command.tokenMatchesInvoice,
      confirmations: command.confirmations,
      requiredConfirmations: command.requiredConfirmations,
      detectedAt: command.detectedAt,
      ...(command.paidAt !== undefined && { paidAt: command.paidAt }),
    },
  };
  if (command.confirmations < command.requiredConfirmations) return [detected];
  return [
    detected,
    {
      type: 'PaymentConfirmed',
      data: { paymentId: id, invoiceId, confirmations: command.confirmations, confirmedAt: command.detectedAt },
    },
  ];
}

function detect(command: DetectPayment, state: PaymentState): PaymentEvent[] {
  validateDetection(command);
  if (state === null) return detection(command, command.invoiceId);
  if (paymentId(command.chain, command.txHash, command.outputIndex) !== state.paymentId) {
    throw new DomainError(
      'conflict',
      `Transfer ${command.txHash}:${command.outputIndex} does not belong to payment ${state.paymentId}`,
    );
  }
  // Re-mined after a reorg: the same payment is detected again, in its new block.
  if (state.status === 'reorged') return detection(command, state.invoiceId);
  // The same transfer in the same block, seen again: nothing new.
  if (command.blockHash === state.blockHash) return [];
  // Still in the mempool after it was mined (the node's answers crossed): the block stands.
  if (command.blockHash === MEMPOOL_BLOCK_HASH) return [];
  // Seen in the mempool, now mined: the same payment, in its block.
  if (state.blockHash === MEMPOOL_BLOCK_HASH) return mined(command, state);
  // Seen in another block while we still hold the old one: the old block was
  // replaced without the reorg being reported first. Record both facts.
  return [
    {
      type: 'PaymentReorged',
      data: {
        paymentId: state.paymentId,
        invoiceId: state.invoiceId,
        blockHash: state.blockHash,
        reorgedAt: command.detectedAt,
      },
    },
    ...detection(command, state.invoiceId),
  ];
}

function mined(command: DetectPayment, payment: Payment): PaymentEvent[] {
  const events: PaymentEvent[] = [
    {
      type: 'PaymentMined',
      data: {
        paymentId: payment.paymentId,
        blockNumber: command.blockNumber,
        blockHash: command.blockHash,
        confirmations: command.confirmations,
        minedAt: command.detectedAt,
      },
    },
  ];
  if (payment.status === 'detected' && command.confirmations >= payment.requiredConfirmations) {
    events.push({
      type: 'PaymentConfirmed',
      data: {
        paymentId: payment.paymentId,
        invoiceId: payment.invoiceId,
        confirmations: command.confirmations,
        confirmedAt: command.detectedAt,
      },
    });
  }
  return events;
}

function updateConfirmations(
  command: Extract<PaymentCommand, { type: 'UpdateConfirmations' }>,
  payment: Payment,
): PaymentEvent[] {
  if (!isCount(command.confirmations))
    throw new DomainError('bad_request', 'Confirmations must be non-negative integers');
  // Final, or dropped: later counts change nothing. Counts never go backwards (a reorg is its own command).
  if (payment.status !== 'detected' || command.confirmations <= payment.confirmations) return [];
  if (command.confirmations >= payment.requiredConfirmations) {
    return [
      {
        type: 'PaymentConfirmed',
        data: {
          paymentId: payment.paymentId,
          invoiceId: payment.invoiceId,
          confirmations: command.confirmations,
          confirmedAt: command.observedAt,
        },
      },
    ];
  }
  return [
    {
      type: 'PaymentConfirmationsUpdated',
      data: { paymentId: payment.paymentId, confirmations: command.confirmations, observedAt: command.observedAt },
    },
  ];
}

function recordReorg(command: Extract<PaymentCommand, { type: 'RecordReorg' }>, payment: Payment): PaymentEvent[] {
  // Already dropped, or the orphaned block is not the one holding this payment: nothing to do.
  if (payment.status === 'reorged' || command.blockHash !== payment.blockHash) return [];
  return [
    {
      type: 'PaymentReorged',
      data: {
        paymentId: payment.paymentId,
        invoiceId: payment.invoiceId,
        blockHash: payment.blockHash,
        reorgedAt: command.reorgedAt,
      },
    },
  ];
}

function decide(command: PaymentCommand, state: PaymentState): PaymentEvent[] {
  if (command.type === 'DetectPayment') return detect(command, state);
  if (state === null) throw new DomainError('not_found', 'Payment not found');
  switch (command.type) {
    case 'UpdateConfirmations':
      return updateConfirmations(command, state);
    case 'RecordReorg':
      return recordReorg(command, state);
  }
}

// ---------------------------------------------------------------- evolve

function evolve(state: PaymentState, event: PaymentEvent): PaymentState {
  if (event.type === 'PaymentDetected') {
    return {
      ...event.data,
      amount: BigInt(event.data.amount),
      status: 'detected',
      confirmedAt: null,
      reorgedAt: null,
    };
  }
  // Every other event follows a PaymentDetected; a stream that says otherwise is corrupt.
  if (state === null) throw new Error(`${event.type} before PaymentDetected`);
  switch (event.type) {
    case 'PaymentConfirmationsUpdated':
      return { ...state, confirmations: event.data.confirmations };
    case 'PaymentConfirmed':
      return {
        ...state,
        status: 'confirmed',
        confirmations: event.data.confirmations,
        confirmedAt: event.data.confirmedAt,
      };
    case 'PaymentMined':
      return {
        ...state,
        blockNumber: event.data.blockNumber,
        blockHash: event.data.blockHash,
        confirmations: event.data.confirmations,
      };
    case 'PaymentReorged':
      return { ...state, status: 'reorged', confirmations: 0, reorgedAt: event.data.reorgedAt };
  }
}

export const paymentDecider: Decider<PaymentCommand, PaymentState, PaymentEvent> = {
  initialState: null,
  decide,
  evolve,
};
