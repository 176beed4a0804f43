// An invoice's history as an auditor takes it away: one line per event, each
// carrying the SHA-256 of the line before it and its own, over the event's
// canonical JSON (RFC 8785), so that an altered, removed or reordered event
// shows; and its replay through the same folds the service uses, so that the
// resulting state needs neither our database nor our word.
//
// What the chain alone cannot show: a file cut short, or rebuilt whole with
// fresh hashes. The revisions of each stream must run 0, 1, 2… without a
// gap (a removed event shows even with the hashes redone, unless it was a
// stream's last), and `audit verify --url` compares the replay with the
// service, which holds the rest.
import { createHash } from 'node:crypto';
import canonicalizeModule from 'canonicalize';
import { fold } from './decider.ts';
import { invoiceDecider, invoicePaymentView, invoiceStreamName, refundStatusOf, type InvoiceEvent } from './invoice.ts';
import { refundDecider, type RefundEvent } from './refund.ts';
import { formatUnits } from './money.ts';
import { requestedSettlement, settlementDecider, settlementStreamOf, type SettlementEvent } from './settlement.ts';
import { streams } from './streams.ts';

export interface AuditEvent {
  eventId: string;
  streamId: string;
  revision: number;
  position: string;
  recordedAt: string;
  type: string;
  data: unknown;
}

export interface AuditLine extends AuditEvent {
  /** The hash of the line before, or 64 zeros on the first line. */
  previousHash: string;
  /** SHA-256 (hex) of this line's canonical JSON without `hash`. */
  hash: string;
}

export const FIRST_PREVIOUS_HASH = '0'.repeat(64);

// canonicalize is CommonJS exporting the function itself; under NodeNext its
// types describe a module object instead.
const canonicalize = canonicalizeModule as unknown as (input: unknown) => string | undefined;

function hashOf(line: Omit<AuditLine, 'hash'>): string {
  const { eventId, streamId, revision, position, recordedAt, type, data, previousHash } = line;
  const text = canonicalize({ eventId, streamId, revision, position, recordedAt, type, data, previousHash })!;
  return createHash('sha256').update(text).digest('hex');
}

/** The events, in the log's order, as hash-chained lines. */
export function chainAuditTrail(events: readonly AuditEvent[]): AuditLine[] {
  const lines: AuditLine[] = [];
  let previousHash = FIRST_PREVIOUS_HASH;
  for (const event of events) {
    const line = { ...event, previousHash };
    previousHash = hashOf(line);
    lines.push({ ...line, hash: previousHash });
  }
  return lines;
}

export interface AuditProblem {
  /** 1-based line number in the file. */
  line: number;
  kind: 'unreadable' | 'altered' | 'missing' | 'reordered';
  message: string;
}

/** Every break in the chain, named; [] for a genuine trail. */
export function verifyAuditTrail(lines: readonly AuditLine[]): AuditProblem[] {
  const problems: AuditProblem[] = [];
  const hashes = new Set(lines.map((l) => l.hash));
  lines.forEach((line, i) => {
    const n = i + 1;
    if (hashOf(line) !== line.hash) {
      problems.push({
        line: n,
        kind: 'altered',
        message: `line ${n} (${line.type}) was altered: its content does not match its hash`,
      });
    }
    const expected = i === 0 ? FIRST_PREVIOUS_HASH : lines[i - 1]!.hash;
    if (line.previousHash !== expected) {
      // Its predecessor is elsewhere in the file: lines were moved; nowhere: lines were removed.
      const moved = line.previousHash === FIRST_PREVIOUS_HASH || hashes.has(line.previousHash);
      problems.push(
        moved
          ? {
              line: n,
              kind: 'reordered',
              message: `line ${n} (${line.type}) is out of place: the line it follows is elsewhere in the file`,
            }
          : {
              line: n,
              kind: 'missing',
              message: `line ${n} (${line.type}) follows a line that is not in the file: an event was removed before it`,
            },
      );
    }
  });
  // Revisions of each stream, in file order: a gap is a removed event even where the hashes were redone.
  const lastRevision = new Map<string, number>();
  lines.forEach((line, i) => {
    const before = lastRevision.get(line.streamId) ?? -1;
    if (line.revision > before + 1) {
      problems.push({
        line: i + 1,
        kind: 'missing',
        message: `line ${i + 1}: ${line.streamId} jumps from revision ${before} to ${line.revision}: an event is missing`,
      });
    } else if (line.revision <= before) {
      problems.push({
        line: i + 1,
        kind: 'reordered',
        message: `line ${i + 1}: ${line.streamId} revision ${line.revision} comes after revision ${before}`,
      });
    }
    lastRevision.set(line.streamId, Math.max(before, line.revision));
  });
  return problems.sort((a, b) => a.line - b.line);
}

/** Reads an exported file: one JSON line per event. */
export function parseAuditTrail(text: string): { lines: AuditLine[]; problems: AuditProblem[] } {
  const lines: AuditLine[] = [];
  const problems: AuditProblem[] = [];
  text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .forEach((raw, i) => {
      try {
        const line = JSON.parse(raw) as AuditLine;
        if (typeof line.hash !== 'string' || typeof line.streamId !== 'string' || !Number.isInteger(line.revision)) {
          throw new Error('not an audit line');
        }
        lines.push(line);
      } catch {
        problems.push({ line: i + 1, kind: 'unreadable', message: `line ${i + 1} is not an audit line` });
      }
    });
  return { lines, problems };
}

/** What the events say the invoice is, through the service's own folds. */
export interface ReplayedInvoice {
  invoiceId: string;
  status: string;
  amount: string;
  currency: string;
  totalReceivedAmount: string;
  totalReceivedCurrency: string;
  settlement: {
    status: string;
    grossAmount: string;
    platformFee: string;
    networkFee: string;
    netAmount: string;
    txHash: string | null;
  } | null;
  /** none, partial or full (refunds.md). */
  refundStatus: string;
  /** Each refund of the invoice, in order of creation. */
  refunds: { id: string; status: string; amount: string; transactionHash: string | null }[];
}

export function replayAuditTrail(lines: readonly AuditEvent[]): ReplayedInvoice {
  const invoiceLines = lines.filter((l) => streams.invoice.holds(l.streamId));
  const invoice = fold(
    invoiceDecider,
    invoiceLines.map((l) => ({ type: l.type, data: l.data }) as InvoiceEvent),
  );
  if (!invoice) throw new Error('the trail holds no InvoiceCreated');
  if (invoiceLines.some((l) => l.streamId !== invoiceStreamName(invoice.id))) {
    throw new Error('the trail holds events of more than one invoice');
  }
  // A stream with only refund holds (the settlement not yet requested) shows no settlement.
  const settlement = requestedSettlement(
    fold(
      settlementDecider,
      lines
        .filter((l) => l.streamId === settlementStreamOf(invoice.id))
        .map((l) => ({ type: l.type, data: l.data }) as SettlementEvent),
    ),
  );
  const refunds = [...new Set(lines.filter((l) => streams.refund.holds(l.streamId)).map((l) => l.streamId))].flatMap(
    (streamId) => {
      const refund = fold(
        refundDecider,
        lines.filter((l) => l.streamId === streamId).map((l) => ({ type: l.type, data: l.data }) as RefundEvent),
      );
      if (!refund) return [];
      const amount = formatUnits(refund.amount, refund.tokenDecimals, refund.tokenDecimals);
      return [{ id: refund.id, status: refund.status, amount, transactionHash: refund.txHash }];
    },
  );
  const view = invoicePaymentView(invoice);
  const paid = invoice.addresses.find((a) => a.chain === view.chain && a.token === view.token);
  const decimals = paid?.tokenDecimals ?? 0;
  const amountOf = (units: bigint) => formatUnits(units, decimals);
  return {
    invoiceId: invoice.id,
    status: view.status,
    amount: invoice.amount,
    currency: invoice.currency,
    totalReceivedAmount: view.totalReceivedAmount,
    totalReceivedCurrency: view.totalReceivedCurrency,
    settlement: settlement && {
      status: settlement.status,
      grossAmount: amountOf(settlement.grossAmount),
      platformFee: amountOf(settlement.platformFee),
      networkFee: amountOf(settlement.networkFee),
      netAmount: amountOf(settlement.netAmount),
      txHash: settlement.txHash,
    },
    refundStatus: refundStatusOf(invoice),
    refunds,
  };
}
