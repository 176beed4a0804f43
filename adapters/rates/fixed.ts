// The fixed rate table of development and tests (RATE_PROVIDER=fixed): a
// built-in table of plausible rates, changeable through PUT /dev/v1/rates.
// Changes are events on stream `sandbox-rates`, so a restart keeps them.
// The built-in numbers are round figures for demos, not market data.
import { catalogue } from '../../domain/catalogue.ts';
import { DomainError } from '../../domain/decider.ts';
import { parseUnits } from '../../domain/money.ts';
import { systemClock, type Clock } from '../clock.ts';
import type { EventStore, RecordedEvent } from '../event-store/port.ts';
import { SandboxStream } from '../sandbox-stream.ts';
import type { Rate, RateProvider } from './port.ts';

export const sandboxRatesStreamName = 'sandbox-rates';

/** Rates are accepted with at most this many decimal places. */
export const RATE_DECIMALS = 18;

/** Fiat per whole token. Stablecoins at par with USD; EUR and GBP at about 0.925 and 0.79 per USD. */
export const builtInRates: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  BTC: { USD: '97000', EUR: '89725', GBP: '76630' },
  ETH: { USD: '3400', EUR: '3145', GBP: '2686' },
  BNB: { USD: '650', EUR: '601.25', GBP: '513.5' },
  POL: { USD: '0.45', EUR: '0.41625', GBP: '0.3555' },
  SOL: { USD: '180', EUR: '166.5', GBP: '142.2' },
  TRX: { USD: '0.25', EUR: '0.23125', GBP: '0.1975' },
  USDT: { USD: '1', EUR: '0.925', GBP: '0.79' },
  USDC: { USD: '1', EUR: '0.925', GBP: '0.79' },
};

export interface RateSet {
  type: 'RateSet';
  data: { token: string; fiat: string; rate: string; at: string };
}

const knownTokens = (): string[] => [...new Set(catalogue.flatMap((c) => c.supportedTokens.map((t) => t.symbol)))];

/** The rate as it will be kept: token and fiat upper-cased, or a DomainError naming what is wrong. */
export function validRate(token: string, fiat: string, rate: string): { token: string; fiat: string; rate: string } {
  const symbol = String(token).toUpperCase();
  const code = String(fiat).toUpperCase();
  if (!knownTokens().includes(symbol)) {
    throw new DomainError('bad_request', `Token ${token} is not in the catalogue (known: ${knownTokens().join(', ')})`);
  }
  if (!/^[A-Z]{3}$/.test(code))
    throw new DomainError('bad_request', `Fiat currency must be a 3-letter code such as USD, got '${fiat}'`);
  const units = typeof rate === 'string' ? parseUnits(rate, RATE_DECIMALS) : undefined;
  if (units === undefined || units === 0n) {
    throw new DomainError(
      'bad_request',
      `Rate must be a positive decimal string with at most ${RATE_DECIMALS} decimals, got '${rate}'`,
    );
  }
  return { token: symbol, fiat: code, rate };
}

const key = (token: string, fiat: string) => `${token.toUpperCase()}/${fiat.toUpperCase()}`;

export class FixedRateProvider implements RateProvider {
  readonly name = 'fixed';
  /** Rates set through the sandbox API, over the built-in table. */
  private readonly overrides = new Map<string, string>();
  private readonly stream: SandboxStream;

  private constructor(
    store: EventStore,
    private readonly clock: Clock,
  ) {
    this.stream = new SandboxStream(store, sandboxRatesStreamName, (recorded) => this.fold(recorded));
  }

  static async open(store: EventStore, clock: Clock = systemClock): Promise<FixedRateProvider> {
    const provider = new FixedRateProvider(store, clock);
    await provider.stream.catchUp();
    return provider;
  }

  async rate(token: string, fiat: string): Promise<Rate | undefined> {
    const rate = this.overrides.get(key(token, fiat)) ?? builtInRates[token.toUpperCase()]?.[fiat.toUpperCase()];
    // A fixed rate is current by decree: observed whenever asked.
    return rate === undefined ? undefined : { rate, observedAt: this.clock.now() };
  }

  /** Sets the rate of `token` in `fiat` (fiat per whole token) from now on. */
  async setRate(token: string, fiat: string, rate: string): Promise<void> {
    const valid = validRate(token, fiat, rate);
    const event: RateSet = { type: 'RateSet', data: { ...valid, at: this.clock.now().toISOString() } };
    // The last rate set wins, whoever set it.
    await this.stream.append(event);
  }

  private fold(recorded: RecordedEvent): void {
    const data = recorded.data as Partial<RateSet['data']> | null;
    if (recorded.type === 'RateSet' && data?.token && data.fiat && data.rate)
      this.overrides.set(key(data.token, data.fiat), data.rate);
  }
}
