// The chains and tokens the service accepts, with their mainnet contracts.
// One catalogue feeds GET /api/v1/chains, GET /api/v1/tokens, quoting,
// detection and settlement, so they can never disagree.

export const chainNames = ['ethereum', 'bsc', 'polygon', 'solana', 'tron', 'bitcoin'] as const;
export type ChainName = (typeof chainNames)[number];
export type ChainType = 'evm' | 'solana' | 'tron' | 'bitcoin';
export type TokenStandard = 'NATIVE' | 'ERC20' | 'BEP-20' | 'TRC20' | 'SPL';

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
const token = (
  symbol: 'USDT' | 'USDC',
  standard: TokenStandard,
  contractAddress: string,
  decimals: number,
): TokenOnChain => ({
  symbol,
  name: symbol === 'USDT' ? 'Tether USD' : 'USD Coin',
  contractAddress,
  decimals,
  standard,
  iconUrl: null,
});

// Icons are not served from any third-party host, so iconUrl stays null and
// clients build their own from `icon`.
export const catalogue: readonly Chain[] = [
  {
    name: 'ethereum',
    displayName: 'Ethereum',
    chainType: 'evm',
    nativeCurrency: 'ETH',
    supportedTokens: [
      native('ETH', 'Ether', 18),
      token('USDT', 'ERC20', '0xdAC17F958D2ee523a2206206994597C13D831ec7', 6),
      token('USDC', 'ERC20', '0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48', 6),
    ],
  },
  {
    name: 'bsc',
    displayName: 'BNB Smart Chain',
    chainType: 'evm',
    nativeCurrency: 'BNB',
    supportedTokens: [
      native('BNB', 'BNB', 18),
      // Binance-Peg stablecoins on BSC use 18 decimals, not 6.
      token('USDT', 'BEP-20', '0x55d398326f99059fF775485246999027B3197955', 18),
      token('USDC', 'BEP-20', '0x8AC76a51cc950d9822D68b83fE1Ad97B32Cd580d', 18),
    ],
  },
  {
    name: 'polygon',
    displayName: 'Polygon PoS',
    chainType: 'evm',
    nativeCurrency: 'POL',
    supportedTokens: [
      native('POL', 'Polygon Ecosystem Token', 18),
      token('USDT', 'ERC20', '0xc2132D05D31c914a87C6611C10748AEb04B58e8F', 6),
      // Circle's native USDC, not the bridged USDC.e.
      token('USDC', 'ERC20', '0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359', 6),
    ],
  },
  {
    name: 'solana',
    displayName: 'Solana',
    chainType: 'solana',
    nativeCurrency: 'SOL',
    supportedTokens: [
      native('SOL', 'Solana', 9),
      token('USDT', 'SPL', 'Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB', 6),
      token('USDC', 'SPL', 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v', 6),
    ],
  },
  {
    name: 'tron',
    displayName: 'Tron',
    chainType: 'tron',
    nativeCurrency: 'TRX',
    // No USDC: Circle ended USDC support on Tron, so it is not accepted here.
    supportedTokens: [native('TRX', 'Tronix', 6), token('USDT', 'TRC20', 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t', 6)],
  },
  {
    name: 'bitcoin',
    displayName: 'Bitcoin',
    chainType: 'bitcoin',
    nativeCurrency: 'BTC',
    supportedTokens: [native('BTC', 'Bitcoin', 8)],
  },
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
