// A random but seeded history of a merchant's money for the report tests:
// invoices with their quotes, payments (partial, late, wrong-token, some
// unconfirmed or reorged), settlements and refunds (from the deposit and from
// the refund wallet, completed or not), written as the projectors write the
// read-model rows. Beside the rows it keeps the plain list of what moved the
// merchant's held money and when: the independent fold the ledger is checked
// against.
import { randomUUID } from 'node:crypto';
import { sql, type Kysely } from 'kysely';
import { formatUnits } from '../../domain/money.ts';
import type {
  InvoiceAddressesTable,
  InvoicesTable,
  PaymentsTable,
  ReadModelTables,
  RefundsTable,
  SettlementsTable,
} from '../../projections/schema.ts';

/** mulberry32: small, fast, and the same sequence for the same seed. */
export function seededRandom(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (below: number) => Math.floor(next() * below),
    /** A bigint from 1 to `max` (inclusive), spread over its digits. */
    units: (max: bigint) => {
      let n = 0n;
      for (let i = 0; i < 4; i++) n = (n << 32n) | BigInt(Math.floor(next() * 2 ** 32));
      return (n % max) + 1n;
    },
    pick: <T>(items: readonly T[]) => items[Math.floor(next() * items.length)]!,
  };
}

export interface Movement {
  chain: string;
  token: string;
  at: Date;
  column: 'received' | 'settled' | 'refunded' | 'fees';
  units: bigint;
}

export interface History {
  invoices: InvoicesTable[];
  addresses: InvoiceAddressesTable[];
  payments: PaymentsTable[];
  settlements: SettlementsTable[];
  refunds: RefundsTable[];
  /** What moved the merchant's held money, as the ledger defines it (docs/reports.md). */
  movements: Movement[];
}

const ASSETS = [
  { chain: 'ethereum', token: 'ETH', decimals: 18, max: 5n * 10n ** 18n, rate: '3012.55' },
  { chain: 'tron', token: 'USDT', decimals: 6, max: 2_000n * 10n ** 6n, rate: '1.0001' },
  { chain: 'bitcoin', token: 'BTC', decimals: 8, max: 10n ** 8n, rate: '97000.12345678' },
] as const;

export const HISTORY_START = Date.UTC(2026, 0, 1);
const DAY = 86_400_000;

export function generateHistory(seed: number, merchantId: string, invoiceCount: number): History {
  const rnd = seededRandom(seed);
  const h: History = { invoices: [], addresses: [], payments: [], settlements: [], refunds: [], movements: [] };
  const at = (ms: number) => new Date(Math.floor(ms));
  for (let n = 0; n < invoiceCount; n++) {
    const asset = rnd.pick(ASSETS);
    const id = randomUUID();
    const created = HISTORY_START + rnd.next() * 300 * DAY;
    const expires = created + 3_600_000;
    const quoted = rnd.units(asset.max);
    const shown = (units: bigint) => formatUnits(units, asset.decimals, asset.decimals);
    const address = `addr-${id}`;
    h.addresses.push({
      invoice_id: id,
      chain: asset.chain,
      token: asset.token,
      token_decimals: asset.decimals,
      address,
      derivation_index: n,
      rate: asset.rate,
      crypto_amount: quoted.toString(),
      quoted_at: at(created),
      rate_valid_until: at(created + 900_000),
      rate_source: 'kraken+coinbase',
      rate_observed_at: at(created - 1_000),
    });
    // Payments: one in full, or partial ones, some after the invoice expired (late).
    const paymentCount = rnd.int(4);
    let confirmedUnits = 0n;
    let lastConfirmed = created;
    let late = false;
    for (let k = 0; k < paymentCount; k++) {
      const detected = created + rnd.next() * 2 * 3_600_000;
      late ||= detected > expires;
      const fate = rnd.next();
      const status = fate < 0.75 ? 'confirmed' : fate < 0.9 ? 'detected' : 'reorged';
      const confirmedAt = status === 'confirmed' ? detected + rnd.next() * 3_600_000 : null;
      const wrongToken = asset.chain === 'ethereum' && rnd.next() < 0.15;
      const token = wrongToken ? 'USDT' : asset.token;
      const decimals = wrongToken ? 6 : asset.decimals;
      const units = paymentCount === 1 ? quoted : rnd.units(wrongToken ? 10n ** 9n : quoted);
      h.payments.push({
        payment_id: randomUUID(),
        invoice_id: id,
        chain: asset.chain,
        token,
        token_decimals: decimals,
        amount: units.toString(),
        to_address: address,
        tx_hash: `0x${randomUUID().replaceAll('-', '')}`,
        output_index: k,
        block_number: 1000 + n,
        block_hash: `0xblock${n}`,
        wrong_token: wrongToken,
        status,
        confirmations: status === 'confirmed' ? 12 : 1,
        required_confirmations: 12,
        detected_at: at(detected),
        confirmed_at: confirmedAt === null ? null : at(confirmedAt),
      });
      if (confirmedAt !== null) {
        h.movements.push({ chain: asset.chain, token, at: at(confirmedAt), column: 'received', units });
        if (!wrongToken) {
          confirmedUnits += units;
          lastConfirmed = Math.max(lastConfirmed, confirmedAt);
        }
      }
    }
    // A refund of part of what arrived, from the deposit (before the settlement) or the refund wallet.
    let refundedFromDeposit = 0n;
    if (confirmedUnits > 10n && rnd.next() < 0.35) {
      const amount = rnd.units(confirmedUnits - 1n) + 1n;
      const networkFee = rnd.units(amount - 1n) / 50n;
      const fundedFrom = rnd.next() < 0.6 ? 'deposit' : 'refund_wallet';
      const status = rnd.pick(['completed', 'completed', 'sending', 'canceled'] as const);
      const completedAt = status === 'completed' ? lastConfirmed + rnd.next() * 5 * DAY : null;
      const rid = randomUUID();
      h.refunds.push({
        id: rid,
        invoice_id: id,
        merchant_id: merchantId,
        chain: asset.chain,
        token: asset.token,
        amount: shown(amount),
        network_fee: shown(networkFee),
        net_amount: shown(amount - networkFee),
        fiat_amount: '0.00000000',
        fiat_currency: 'USD',
        reason: rnd.next() < 0.5 ? '=HYPERLINK("http://evil.example")' : 'customer asked',
        destination: `dest-${rid}`,
        claim_token: `claim-${rid}`,
        claim_expires_at: at(created + 30 * DAY),
        status,
        funded_from: status === 'canceled' ? null : fundedFrom,
        transaction_hash: status === 'completed' ? `0xrefund${n}` : null,
        failure_code: null,
        failure_reason: null,
        created_at: at(lastConfirmed + 1000),
        updated_at: at(completedAt ?? lastConfirmed + 1000),
        approved_at: status === 'canceled' ? null : at(lastConfirmed + 2000),
        completed_at: completedAt === null ? null : at(completedAt),
      });
      if (completedAt !== null && fundedFrom === 'deposit') {
        refundedFromDeposit = amount;
        const when = at(completedAt);
        h.movements.push({
          chain: asset.chain,
          token: asset.token,
          at: when,
          column: 'refunded',
          units: amount - networkFee,
        });
        h.movements.push({ chain: asset.chain, token: asset.token, at: when, column: 'fees', units: networkFee });
      }
    }
    // The settlement of what remains: 1% platform fee, a network fee, the rest to the merchant.
    const gross = confirmedUnits - refundedFromDeposit;
    if (gross > 200n && rnd.next() < 0.8) {
      const platformFee = gross / 100n;
      const networkFee = rnd.units(gross / 10n);
      const net = gross - platformFee - networkFee;
      const status = rnd.pick(['completed', 'completed', 'completed', 'pending', 'failed'] as const);
      const completedAt = status === 'completed' ? lastConfirmed + 6 * DAY + rnd.next() * 20 * DAY : null;
      h.settlements.push({
        id: randomUUID(),
        invoice_id: id,
        merchant_id: merchantId,
        chain: asset.chain,
        currency: asset.token,
        amount: shown(net),
        gross_amount: shown(gross),
        platform_fee: shown(platformFee),
        network_fee: shown(networkFee),
        from_address: address,
        merchant_wallet: 'merchant-wallet',
        status,
        attempt: 1,
        transaction_hash: status === 'completed' ? `0xsettle${n}` : null,
        failure_reason: null,
        failure_code: status === 'failed' ? 'rejected_by_network' : null,
        attempts: 1,
        attention: null,
        next_attempt_at: null,
        initiated_at: at(lastConfirmed + 6 * DAY),
        completed_at: completedAt === null ? null : at(completedAt),
        failed_at: null,
        created_at: at(lastConfirmed + 6 * DAY),
        updated_at: at(completedAt ?? lastConfirmed + 6 * DAY),
      });
      if (completedAt !== null) {
        const when = at(completedAt);
        h.movements.push({ chain: asset.chain, token: asset.token, at: when, column: 'settled', units: net });
        h.movements.push({
          chain: asset.chain,
          token: asset.token,
          at: when,
          column: 'fees',
          units: platformFee + networkFee,
        });
      }
    }
    h.invoices.push({
      id,
      merchant_id: merchantId,
      amount: `${1 + rnd.int(100_000)}.${String(rnd.int(100)).padStart(2, '0')}`,
      currency: 'USD',
      status: confirmedUnits > 0n ? 'confirmed' : 'pending',
      cancelled: false,
      description: rnd.next() < 0.2 ? '-1.5 discount' : `order ${n}`,
      expires_at: at(expires),
      webhook_url: null,
      metadata:
        rnd.next() < 0.3 ? null : { orderId: `A-${n}`, ...(rnd.next() < 0.5 && { region: rnd.pick(['eu', 'us']) }) },
      subscriber_id: null,
      chain: asset.chain,
      token: asset.token,
      crypto_amount: shown(quoted),
      payment_status: confirmedUnits > 0n ? 'paid' : 'pending',
      payment_status_detail: null,
      payment_issue_type: null,
      paid_late: late,
      total_received_amount: shown(confirmedUnits),
      total_received_currency: asset.token,
      remaining_amount: '0',
      payment_progress: 0,
      has_detected_payment: paymentCount > 0,
      detected_payment_amount: null,
      detected_payment_currency: null,
      mismatch_payment: null,
      tx_hash: null,
      settled_amount: null,
      refund_status: 'none',
      created_at: at(created),
      updated_at: at(created),
    });
  }
  return h;
}

export async function insertHistory(db: Kysely<ReadModelTables>, h: History): Promise<void> {
  const chunks = <T>(rows: T[]) =>
    Array.from({ length: Math.ceil(rows.length / 500) }, (_, i) => rows.slice(i * 500, i * 500 + 500));
  for (const rows of chunks(h.invoices))
    await db
      .insertInto('invoices')
      .values(rows as never)
      .execute();
  for (const rows of chunks(h.addresses)) await db.insertInto('invoice_addresses').values(rows).execute();
  for (const rows of chunks(h.payments)) await db.insertInto('payments').values(rows).execute();
  for (const rows of chunks(h.settlements)) await db.insertInto('settlements').values(rows).execute();
  for (const rows of chunks(h.refunds)) await db.insertInto('refunds').values(rows).execute();
}

/** The independent fold: the ledger's columns from the movements alone. */
export function foldLedger(movements: readonly Movement[], from: Date | undefined, to: Date | undefined) {
  const rows = new Map<string, Record<'opening' | 'received' | 'settled' | 'refunded' | 'fees' | 'closing', bigint>>();
  for (const m of movements) {
    const key = `${m.chain}/${m.token}`;
    const row = rows.get(key) ?? { opening: 0n, received: 0n, settled: 0n, refunded: 0n, fees: 0n, closing: 0n };
    rows.set(key, row);
    const signed = m.column === 'received' ? m.units : -m.units;
    const t = m.at.getTime();
    if (from !== undefined && t < from.getTime()) row.opening += signed;
    else if (to === undefined || t < to.getTime()) row[m.column] += m.units;
    if (to === undefined || t < to.getTime()) row.closing += signed;
  }
  return rows;
}

/**
 * Writes `n` invoices of one merchant, each with its quote and two metadata
 * keys, in two statements: the large reports of the bench and of the
 * streaming tests. `descriptionBytes` pads each description, for a report
 * larger than every buffer between PostgreSQL and an HTTP client.
 */
export async function seedInvoices(
  db: Kysely<ReadModelTables>,
  merchantId: string,
  n: number,
  { descriptionBytes = 0 }: { descriptionBytes?: number } = {},
) {
  await sql`
    insert into invoices (id, merchant_id, amount, currency, status, cancelled, description, expires_at, metadata,
      chain, token, crypto_amount, payment_status, paid_late, total_received_amount, total_received_currency,
      remaining_amount, payment_progress, has_detected_payment, refund_status, created_at, updated_at)
    select md5(g::text)::uuid, ${merchantId}::uuid, (g % 100000)::text || '.25', 'USD', 'confirmed', false,
      'order ' || g || repeat('.', ${descriptionBytes}), ts + interval '1 hour',
      jsonb_build_object('orderId', 'A-' || g, 'region', case when g % 3 = 0 then 'eu' else 'us' end),
      'ethereum', 'ETH', '0.01234567', 'paid', false, '0.012345670000000000', 'ETH', '0', 100, true, 'none', ts, ts
    from (select g, timestamptz '2026-01-01' + g * interval '31 millisecond' as ts from generate_series(1, ${n}) g) s`.execute(
    db,
  );
  await sql`
    insert into invoice_addresses (invoice_id, chain, token, token_decimals, address, derivation_index, rate,
      crypto_amount, quoted_at, rate_valid_until)
    select md5(g::text)::uuid, 'ethereum', 'ETH', 18, '0x' || md5(g::text), g, '3012.55',
      12345670000000000, timestamptz '2026-01-01' + g * interval '31 millisecond',
      timestamptz '2026-01-01' + g * interval '31 millisecond' + interval '15 minutes'
    from generate_series(1, ${n}) g`.execute(db);
  await sql`analyze`.execute(db);
}
