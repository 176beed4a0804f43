// The real price sources RATE_PROVIDER may name, and how a list of them
// becomes one provider: their median (median.ts). A list of one (the previous
// `coingecko` setting) is that source under the same deadline and records.
import { BitstampRateProvider } from './bitstamp.ts';
import { CoinbaseRateProvider } from './coinbase.ts';
import { CoinGeckoRateProvider } from './coingecko.ts';
import { KrakenRateProvider } from './kraken.ts';
import { MedianRateProvider } from './median.ts';
import type { SourceOptions } from './source.ts';

export const rateSourceNames = ['kraken', 'coinbase', 'bitstamp', 'coingecko'] as const;
export type RateSourceName = (typeof rateSourceNames)[number];

export const isRateSourceName = (name: string): name is RateSourceName =>
  (rateSourceNames as readonly string[]).includes(name);

export interface RateSourceSettings {
  /** Base URLs instead of the public APIs (a test's fake, a proxy). */
  baseUrls: Partial<Record<RateSourceName, string>>;
  coinGeckoApiKey?: string;
  /** How old a source's last answer may be while it fails. */
  maxStaleMs: number;
  /** How long a quote waits for the sources. */
  deadlineMs: number;
  /** Percent (decimal string) beyond which an answer disagrees with the median. */
  maxSpreadPercent: string;
  onError?: (source: RateSourceName, error: unknown) => void;
}

/** One provider for the sources named, in their order. */
export function openRateSources(names: readonly RateSourceName[], settings: RateSourceSettings): MedianRateProvider {
  const sources = names.map((name) => {
    const options: SourceOptions = {
      baseUrl: settings.baseUrls[name],
      maxStaleMs: settings.maxStaleMs,
      onError: (error) => settings.onError?.(name, error),
    };
    switch (name) {
      case 'kraken':
        return new KrakenRateProvider(options);
      case 'coinbase':
        return new CoinbaseRateProvider(options);
      case 'bitstamp':
        return new BitstampRateProvider(options);
      case 'coingecko':
        return new CoinGeckoRateProvider({ ...options, apiKey: settings.coinGeckoApiKey });
    }
  });
  return new MedianRateProvider(sources, {
    deadlineMs: settings.deadlineMs,
    maxSpreadPercent: settings.maxSpreadPercent,
  });
}
