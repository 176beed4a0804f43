// Every stream's name, made and read in one place: `<category>-<id>`. The
// category says which aggregate's events a stream holds; readers of the log
// (projectors, process managers) pick their streams by it and take the id
// back from the name.

export interface StreamCategory {
  /** The stream of the aggregate with this id. */
  name(id: string): string;
  /** True when `streamId` is a stream of this category. */
  holds(streamId: string): boolean;
  /** The aggregate's id in a stream name of this category (the stream name itself is not checked). */
  idOf(streamId: string): string;
}

function category(prefix: string): StreamCategory {
  const start = `${prefix}-`;
  return {
    name: (id) => `${start}${id}`,
    holds: (streamId) => streamId.startsWith(start),
    idOf: (streamId) => streamId.slice(start.length),
  };
}

export const streams = {
  merchant: category('merchant'),
  apiKey: category('apikey'),
  merchantUser: category('merchantuser'),
  invoice: category('invoice'),
  /** Named by the transfer (`<chain>-<txHash>-<outputIndex>`), so a transfer is recorded once whatever races. */
  payment: category('payment'),
  settlement: category('settlement'),
  refund: category('refund'),
  plan: category('plan'),
  subscriber: category('subscriber'),
  /** Named by a UUIDv5 of merchant, plan and e-mail: one enrollment per address and plan. */
  enrollment: category('enrollment'),
  /** The sandbox's toy chain of each chain name. */
  sandboxLedger: category('sandbox-ledger'),
} as const;
