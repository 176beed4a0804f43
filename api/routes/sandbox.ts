// The sandbox API (operations.md §4): drives the built-in ledgers of chains
// without a node, the fixed rate table and the business clock. It does not
// exist in production.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { SandboxLedger } from '../../adapters/chains/sandbox/ledger.ts';
import { isValidAddress } from '../../adapters/keys/derivation.ts';
import type { FixedRateProvider } from '../../adapters/rates/fixed.ts';
import type { SandboxClock } from '../../adapters/sandbox-clock.ts';
import { findChain, findToken, type ChainName } from '../../domain/catalogue.ts';
import { formatUnits, parseUnits } from '../../domain/money.ts';
import type { Authentication } from '../auth.ts';
import { badRequest, notFound } from '../errors.ts';

export interface Sandbox {
  ledgers: ReadonlyMap<ChainName, SandboxLedger>;
  clock: SandboxClock;
  /** The fixed table, when it is the rate provider in use. */
  rates: FixedRateProvider | undefined;
  /** Called after the business clock moved, so time rules run at once. */
  clockAdvanced(): void;
}

const ChainParams = Type.Object({ chain: Type.String() });
const security = [{ adminToken: [] }];

/** What these routes use of the service. */
export interface SandboxRouteDeps {
  auth: Authentication;
  sandbox: Sandbox;
}

export async function sandboxRoutes(scope: FastifyInstance, { auth, sandbox }: SandboxRouteDeps) {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  app.addHook('onRequest', auth.admin);

  const ledgerOf = (chain: string) => {
    const ledger = sandbox.ledgers.get(chain as ChainName);
    if (!ledger) throw notFound(`Chain ${chain} has no sandbox ledger (unknown, disabled, or on a real node)`);
    return ledger;
  };

  app.post(
    '/dev/v1/chains/:chain/transfers',
    {
      schema: {
        tags: ['sandbox'],
        summary: 'Pay an address: a transfer in a new block (1 confirmation)',
        security,
        params: ChainParams,
        body: Type.Object({
          to: Type.String({ minLength: 1, errorMessage: 'to must be an address' }),
          amount: Type.String({ errorMessage: 'Amount must be a decimal string in token units' }),
          token: Type.Optional(Type.String()),
          txHash: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
        }),
      },
    },
    async (request, reply) => {
      const ledger = ledgerOf(request.params.chain);
      const chain = ledger.chain;
      const symbol = (request.body.token ?? findChain(chain)!.nativeCurrency).toUpperCase();
      const token = findToken(chain, symbol);
      if (!token) throw badRequest(`Token ${symbol} is not supported on ${chain}`);
      const amount = parseUnits(request.body.amount, token.decimals);
      if (amount === undefined || amount <= 0n) {
        throw badRequest(`Amount must be greater than 0 with at most ${token.decimals} decimals`);
      }
      if (!isValidAddress(chain, request.body.to))
        throw badRequest(`${request.body.to} is not a valid ${chain} address`);
      const { txHash, blockNumber } = await ledger.transfer({
        to: request.body.to,
        token: token.symbol,
        amount,
        ...(request.body.txHash !== undefined && { txHash: request.body.txHash }),
      });
      return reply.code(201).send({
        data: {
          txHash,
          chain,
          token: token.symbol,
          amount: formatUnits(amount, token.decimals, token.decimals),
          to: request.body.to,
          blockNumber,
        },
      });
    },
  );

  app.post(
    '/dev/v1/chains/:chain/blocks',
    {
      schema: {
        tags: ['sandbox'],
        summary: 'Mine empty blocks, adding confirmations',
        security,
        params: ChainParams,
        body: Type.Optional(
          Type.Object({
            count: Type.Optional(
              Type.Integer({
                minimum: 1,
                maximum: 10_000,
                errorMessage: 'count must be a whole number from 1 to 10000',
              }),
            ),
          }),
        ),
      },
      preValidation: async (request) => {
        request.body ??= {};
      },
    },
    async (request, reply) => {
      const height = await ledgerOf(request.params.chain).mine(request.body?.count ?? 1);
      return reply.code(201).send({ data: { height } });
    },
  );

  app.post(
    '/dev/v1/chains/:chain/reorg',
    {
      schema: {
        tags: ['sandbox'],
        summary: 'Drop the last blocks and their transfers',
        security,
        params: ChainParams,
        body: Type.Object({
          depth: Type.Integer({ minimum: 1, errorMessage: 'depth must be a whole number of at least 1' }),
        }),
      },
    },
    async (request, reply) => {
      const height = await ledgerOf(request.params.chain).reorg(request.body.depth);
      return reply.code(201).send({ data: { height } });
    },
  );

  app.get(
    '/dev/v1/chains/:chain/addresses/:address',
    {
      schema: {
        tags: ['sandbox'],
        summary:
          'What an address received on the sandbox ledger, per token, and the transfers (the ledger records no senders)',
        security,
        params: Type.Object({ chain: Type.String(), address: Type.String() }),
      },
    },
    async (request) => {
      const ledger = ledgerOf(request.params.chain);
      const transfers = ledger.transfersTo(request.params.address);
      const received = new Map<string, bigint>();
      for (const t of transfers) received.set(t.token, (received.get(t.token) ?? 0n) + t.amount);
      const shown = (token: string, amount: bigint) => {
        const decimals = findToken(ledger.chain, token)!.decimals;
        return formatUnits(amount, decimals, decimals);
      };
      return {
        data: {
          chain: ledger.chain,
          address: request.params.address,
          received: Object.fromEntries([...received].map(([token, amount]) => [token, shown(token, amount)])),
          transfers: transfers.map((t) => ({
            txHash: t.txHash,
            token: t.token,
            amount: shown(t.token, t.amount),
            blockNumber: t.blockNumber,
          })),
        },
      };
    },
  );

  app.put(
    '/dev/v1/rates',
    {
      schema: {
        tags: ['sandbox'],
        summary: 'Set a rate of the fixed table (fiat per whole token)',
        security,
        body: Type.Object({
          base: Type.String({ minLength: 1, errorMessage: 'base must be a token symbol' }),
          quote: Type.String({ minLength: 1, errorMessage: 'quote must be a fiat code' }),
          rate: Type.String({ minLength: 1, errorMessage: 'rate must be a decimal string' }),
        }),
      },
    },
    async (request) => {
      const base = request.body.base.toUpperCase();
      const quote = request.body.quote.toUpperCase();
      if (!sandbox.rates) throw badRequest('RATE_PROVIDER is not fixed: the fixed rate table is not in use');
      await sandbox.rates.setRate(base, quote, request.body.rate);
      return { data: { base, quote, rate: request.body.rate } };
    },
  );

  app.post(
    '/dev/v1/clock/advance',
    {
      schema: {
        tags: ['sandbox'],
        summary: 'Move business time forward (expiry, billing periods)',
        security,
        body: Type.Object({
          seconds: Type.Integer({ minimum: 1, errorMessage: 'seconds must be a whole number of at least 1' }),
        }),
      },
    },
    async (request) => {
      await sandbox.clock.advance(request.body.seconds);
      sandbox.clockAdvanced();
      return { data: { now: sandbox.clock.now().toISOString() } };
    },
  );
}
