// Projects settlements into `settlements`, which the settlement endpoints and
// the sweeper read. Each row is the settlement folded up to the event.
import type { Kysely } from 'kysely';
import type { EventStore, RecordedEvent } from '../adapters/event-store/port.ts';
import { formatUnits } from '../domain/money.ts';
import { settlementDecider, type SettlementEvent } from '../domain/settlement.ts';
import type { Projector } from './engine.ts';
import type { ReadModelTables } from './schema.ts';

const isSettlementStream = (streamId: string) => streamId.startsWith('settlement-');
const date = (iso: string | null) => (iso === null ? null : new Date(iso));

export const settlementsProjector: Projector<Map<string, RecordedEvent[]>> = {
  name: 'settlements',
  tables: ['settlements'],

  async prepare(batch: readonly RecordedEvent[], store: EventStore) {
    const streams = [...new Set(batch.filter((e) => isSettlementStream(e.streamId)).map((e) => e.streamId))];
    return new Map(await Promise.all(streams.map(async (s) => [s, await store.readStream(s)] as const)));
  },

  async apply(trx: Kysely<ReadModelTables>, recorded: RecordedEvent, histories: Map<string, RecordedEvent[]>) {
    if (!isSettlementStream(recorded.streamId)) return;
    const s = histories
      .get(recorded.streamId)!
      .filter((e) => e.revision <= recorded.revision)
      .reduce(
        (state, e) => settlementDecider.evolve(state, { type: e.type, data: e.data } as SettlementEvent),
        settlementDecider.initialState,
      );
    if (!s) return;
    const shown = (units: bigint) => formatUnits(units, s.tokenDecimals, s.tokenDecimals);
    const row = {
      id: s.id,
      invoice_id: s.invoiceId,
      merchant_id: s.merchantId,
      chain: s.chain,
      currency: s.token,
      amount: shown(s.netAmount),
      gross_amount: shown(s.grossAmount),
      platform_fee: shown(s.platformFee),
      network_fee: shown(s.networkFee),
      from_address: s.fromAddress,
      merchant_wallet: s.merchantWallet,
      status: s.status,
      attempt: s.attempt,
      transaction_hash: s.txHash ?? s.prepared?.txHash ?? null,
      failure_reason: s.failureReason,
      next_attempt_at: date(s.retryAt),
      initiated_at: date(s.initiatedAt),
      completed_at: date(s.completedAt),
      failed_at: date(s.failedAt),
      created_at: new Date(s.createdAt),
      updated_at: new Date(s.updatedAt),
    };
    await trx
      .insertInto('settlements')
      .values(row)
      .onConflict((oc) => oc.column('id').doUpdateSet(row))
      .execute();
  },
};
