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
