// A settlement's amounts as its history last set them: requested, then
// re-priced when the payout was prepared (the network fee priced anew) or
// when the invoice's receipts changed before it.
export interface SettlementAmounts {
  grossAmount: string;
  platformFee: string;
  networkFee: string;
  netAmount: string;
}

export function settlementAmounts(history: readonly { type: string; data: any }[]): SettlementAmounts {
  const priced = history.filter((e) => e.type === 'SettlementRequested' || e.type === 'SettlementRepriced');
  if (priced.length === 0) throw new Error('no SettlementRequested in the history');
  return Object.assign({}, ...priced.map((e) => e.data));
}

/**
 * Waits until every invoice is settled, calling `nudge` between looks (mine a
 * block, move the clock on); fails naming the states of the others after `ms`.
 */
export async function untilAllSettled(
  status: (id: string) => Promise<{ status: string }>,
  ids: readonly string[],
  nudge: () => unknown,
  /** Says why the invoices still not settled at the deadline are not, for the failure's message. */
  whyNot: (stuck: string[]) => Promise<string> = async () => '',
  ms = 400_000,
): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const states = await Promise.all(ids.map(status));
    if (states.every((s) => s.status === 'settled')) return;
    if (Date.now() > deadline) {
      const stuck = ids.filter((_, i) => states[i]!.status !== 'settled');
      throw new Error(
        `${stuck.length} not settled: ${JSON.stringify(states.filter((s) => s.status !== 'settled').map((s) => s.status))} ${await whyNot(stuck)}`,
      );
    }
    await nudge();
    await new Promise((r) => setTimeout(r, 100));
  }
}
