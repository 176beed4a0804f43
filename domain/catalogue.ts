// The chains and tokens the service accepts, with their mainnet contracts.
// One catalogue feeds GET /api/v1/chains, GET /api/v1/tokens, quoting,
// detection and settlement, so they can never disagree.

export const chainNames = ['ethereum', 'bsc', 'polygon', 'solana', 'tron', 'bitcoin'] as const;
export type ChainName = (typeof chainNames)[number];
export type ChainType = 'evm' | 'solana' | 'tron' | 'bitcoin';
export type TokenStandard = 'NATIVE' | 'ERC20' | 'BEP-20' | 'TRC20' | 'SPL';

/** Each chain's usual time between blocks on mainnet, in seconds: how long a payout's confirmations take. */
export const blockSeconds: Record<ChainName, number> = {
  ethereum: 12,
  bsc: 3,
  polygon: 2,
  solana: 0.4,
  tron: 3,
  bitcoin: 600,
};

export interface TokenOnChain {
  symbol: string;
  name: string;
  /** null for the chain's native coin. */
  contractAddress: string | null;
  decimals: number;
  standard: TokenStandard;
  iconUrl: string | null;
}

export interface Chain {
  name: ChainName;
  displayName: string;
  chainType: ChainType;
  nativeCurrency: string;
  /** The native coin first. */
  supportedTokens: TokenOnChain[];
}

const native = (symbol: string, name: string, decimals: number): TokenOnChain => ({
  symbol,
  name,
  contractAddress: null,
  decimals,
  standard: 'NATIVE',
  iconUrl: null,
});

// The stablecoins' mainnet contracts: [standard, contract, decimals], per chain.
type Contract = [standard: TokenStandard, contractAddress: string, decimals: number];
const usdt: Partial<Record<ChainName, Contract>> = {
  ethereum: ['ERC20', '0xdAC17F958D2ee523a2206206994597C13D831ec7', 6],
  // Binance-Peg stablecoins on BSC use 18 decimals, not 6.
  bsc: ['BEP-20', '0x55d398326f99059fF775485246999027B3197955', 18],
  polygon: ['ERC20', '0xc2132D05D31c914a87C6611C10748AEb04B58e8F', 6],
  solana: ['SPL', 'Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB', 6],
  tron: ['TRC20', 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t', 6],
};
// No USDC on Tron: Circle ended USDC support there, so it is not accepted.
const usdc: Partial<Record<ChainName, Contract>> = {
  ethereum: ['ERC20', '0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48', 6],
  bsc: ['BEP-20', '0x8AC76a51cc950d9822D68b83fE1Ad97B32Cd580d', 18],
  // Circle's native USDC, not the bridged USDC.e.
  polygon: ['ERC20', '0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359', 6],
  solana: ['SPL', 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v', 6],
};
const stablecoin = (symbol: 'USDT' | 'USDC', name: string, on: Contract | undefined): TokenOnChain[] =>
  on ? [{ symbol, name, contractAddress: on[1], decimals: on[2], standard: on[0], iconUrl: null }] : [];

const chain = (name: ChainName, displayName: string, chainType: ChainType, coin: TokenOnChain): Chain => ({
  name,
  displayName,
  chainType,
  nativeCurrency: coin.symbol,
  supportedTokens: [
    coin,
    ...stablecoin('USDT', 'Tether USD', usdt[name]),
    ...stablecoin('USDC', 'USD Coin', usdc[name]),
  ],
});

// Icons are not served from any third-party host, so iconUrl stays null and
// clients build their own from `icon`.
export const catalogue: readonly Chain[] = [
  chain('ethereum', 'Ethereum', 'evm', native('ETH', 'Ether', 18)),
  chain('bsc', 'BNB Smart Chain', 'evm', native('BNB', 'BNB', 18)),
  chain('polygon', 'Polygon PoS', 'evm', native('POL', 'Polygon Ecosystem Token', 18)),
  chain('solana', 'Solana', 'solana', native('SOL', 'Solana', 9)),
  chain('tron', 'Tron', 'tron', native('TRX', 'Tronix', 6)),
  chain('bitcoin', 'Bitcoin', 'bitcoin', native('BTC', 'Bitcoin', 8)),
];

/** The EIP-155 chain id of each EVM chain's mainnet: what its payment links and signatures carry unless configured. */
export const mainnetChainIds: Partial<Record<ChainName, bigint>> = { ethereum: 1n, bsc: 56n, polygon: 137n };

export function isChainName(value: string): value is ChainName {
  return (chainNames as readonly string[]).includes(value);
}

export function findChain(name: string, enabled: readonly ChainName[] = chainNames): Chain | undefined {
  return catalogue.find((c) => c.name === name && enabled.includes(c.name));
}

export function findToken(chain: ChainName, symbol: string): TokenOnChain | undefined {
  return catalogue.find((c) => c.name === chain)?.supportedTokens.find((t) => t.symbol === symbol.toUpperCase());
}

export interface TokenListing {
  symbol: string;
  name: string;
  icon: string;
  iconUrl: string | null;
  chains: {
    chain: ChainName;
    chainName: string;
    contractAddress: string | null;
    decimals: number;
    standard: TokenStandard;
  }[];
}

const leadingSymbols = ['BTC', 'ETH', 'USDT', 'USDC'];

/** Token-first listing: BTC, ETH, USDT, USDC, then the rest by symbol. */
export function listTokens(enabled: readonly ChainName[]): TokenListing[] {
  const bySymbol = new Map<string, TokenListing>();
  for (const chain of catalogue.filter((c) => enabled.includes(c.name))) {
    for (const t of chain.supportedTokens) {
      const listing = bySymbol.get(t.symbol) ?? {
        symbol: t.symbol,
        name: t.name,
        icon: t.symbol.toLowerCase(),
        iconUrl: t.iconUrl,
        chains: [],
      };
      listing.chains.push({
        chain: chain.name,
        chainName: chain.displayName,
        contractAddress: t.contractAddress,
        decimals: t.decimals,
        standard: t.standard,
      });
      bySymbol.set(t.symbol, listing);
    }
  }
  const rank = (symbol: string) => {
    const i = leadingSymbols.indexOf(symbol);
    return i === -1 ? leadingSymbols.length : i;
  };
  return [...bySymbol.values()].sort((a, b) => rank(a.symbol) - rank(b.symbol) || a.symbol.localeCompare(b.symbol));
}
