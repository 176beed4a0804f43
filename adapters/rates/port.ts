// Exchange rates: how many units of a fiat currency one whole token is worth.
export interface Rate {
  /** Fiat per whole token, a decimal string (never a JS number). */
  rate: string;
  /** When the provider observed it (of a median: the oldest answer it used). */
  observedAt: Date;
  /** The answers a median was made of, those left out included; absent for a single source (it is the provider). */
  sources?: RateObservation[];
}

/** One source's answer, as recorded with a quote. */
export interface RateObservation {
  /** The source, e.g. kraken. */
  name: string;
  rate: string;
  observedAt: Date;
  /** False when it was left out (too far from the others). */
  used: boolean;
}

export interface RateProvider {
  /** The source, or of a median the sources' names (e.g. "kraken, coinbase, coingecko"). */
  readonly name: string;
  /** The current rate of `token` (symbol, e.g. BTC) in `fiat` (code, e.g. USD), or undefined when unknown. */
  rate(token: string, fiat: string): Promise<Rate | undefined>;
  /** Why the last rate() of the pair answered undefined, as a sentence naming the sources asked. */
  whyNoRate?(token: string, fiat: string): string;
}

/** The sources of a rate as recorded on a quote: a single provider's answer is its own one source. */
export function observationsOf(provider: Pick<RateProvider, 'name'>, rate: Rate): RateObservation[] {
  return rate.sources ?? [{ name: provider.name, rate: rate.rate, observedAt: rate.observedAt, used: true }];
}
