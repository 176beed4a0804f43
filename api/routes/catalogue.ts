import { Type, type TSchema } from 'typebox';
import type { FastifyInstance } from 'fastify';
import { catalogue, listTokens } from '../../domain/catalogue.ts';
import type { Authentication } from '../auth.ts';
import type { Config } from '../config.ts';

const TokenOnChain = Type.Object({
  symbol: Type.String(),
  name: Type.String(),
  contractAddress: Type.Union([Type.String(), Type.Null()]),
  decimals: Type.Integer(),
  standard: Type.String(),
  iconUrl: Type.Union([Type.String(), Type.Null()]),
});
const Chain = Type.Object({
  name: Type.String(),
  displayName: Type.String(),
  chainType: Type.String(),
  nativeCurrency: Type.String(),
  supportedTokens: Type.Array(TokenOnChain),
});
const Token = Type.Object({
  symbol: Type.String(),
  name: Type.String(),
  icon: Type.String(),
  iconUrl: Type.Union([Type.String(), Type.Null()]),
  chains: Type.Array(
    Type.Object({
      chain: Type.String(),
      chainName: Type.String(),
      contractAddress: Type.Union([Type.String(), Type.Null()]),
      decimals: Type.Integer(),
      standard: Type.String(),
    }),
  ),
});

/** What these routes use of the service. */
export interface CatalogueRouteDeps {
  config: Config;
  auth: Authentication;
}

export async function catalogueRoutes(app: FastifyInstance, { config, auth }: CatalogueRouteDeps) {
  const chains = catalogue.filter((c) => config.chains.includes(c.name));
  const tokens = listTokens(config.chains);
  // Both lists are public, fixed at start-up and answered whole.
  const publicList = (url: string, summary: string, item: TSchema, data: unknown[]) =>
    app.get(
      url,
      {
        preHandler: auth.public,
        schema: { tags: ['public'], summary, response: { 200: Type.Object({ data: Type.Array(item) }) } },
      },
      async () => ({ data }),
    );
  publicList('/api/v1/chains', 'List enabled chains', Chain, chains);
  publicList('/api/v1/tokens', 'List tokens: BTC, ETH, USDT, USDC, then the rest by symbol', Token, tokens);
}
