// The check of a merchant's settlement wallet when it is configured, by the
// operator (api/routes/admin.ts) or in the dashboard's Settings: its form on
// its chain, then, where a node is there to ask, whether it can take a payout
// (the chain port's `receivingProblem`). One check, so both refuse the same.
import type { FastifyBaseLogger } from 'fastify';
import { withDeadline } from '../adapters/deadline.ts';
import type { ChainName } from '../domain/catalogue.ts';
import { HttpError } from './errors.ts';

/** How long a settlement wallet's check may wait for its chain's node. */
const WALLET_CHECK_MS = 10_000;

/**
 * What is wrong with `address` as the wallet on `chain`, or undefined; a 503
 * when the chain's node cannot be asked (the address may be fine: try again).
 */
export async function settlementWalletProblem(
  ctx: { settlementWalletProblem: (chain: ChainName, address: string) => Promise<string | undefined> },
  chain: ChainName,
  address: string,
  log: FastifyBaseLogger,
): Promise<string | undefined> {
  try {
    return await withDeadline(ctx.settlementWalletProblem(chain, address), WALLET_CHECK_MS, `${chain} node`);
  } catch (error) {
    log.warn({ err: error, chain }, 'settlement wallet check failed');
    throw new HttpError(503, `Could not check the ${chain} settlement wallet with the ${chain} node; try again`);
  }
}
