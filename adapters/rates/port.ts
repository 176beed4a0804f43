// Exchange rates: how many units of a fiat currency one whole token is worth.
export interface Rate {
  /** Fiat per whole token, a decimal string (never a JS number). */
  rate: string;
  /** When the provider observed it. */
  observedAt: Date;
}

export interface RateProvider {
  readonly name: string;
  /** The current rate of `token` (symbol, e.g. BTC) in `fiat` (code, e.g. USD), or undefined when unknown. */
  rate(token: string, fiat: string): Promise<Rate | undefined>;
}
