// The rate of several price sources (RATE_PROVIDER=kraken,coinbase,coingecko):
// all are asked at once, and those that answer within the deadline count. A
// source that misses the deadline keeps fetching, and its answer is cached for
// the next quote; each source serves its last answer while it fails, but only
// within its staleness bound (adapters/rates/source.ts).
//
// The rule (docs/rates.md):
// - answers that are not a positive decimal are dropped (a zero, a negative, text);
// - one answer: it is the rate; nothing can be compared;
// - two answers: their mean, when they differ by at most the spread; further
//   apart, no rate: one of them is wrong and nothing tells which;
// - three or more: the median of all; answers further than the spread from it
//   are left out, and the rate is the median of those left, provided they are
//   more than half of the answers (else no rate: the sources disagree).
// A median of an even count is the mean of the two middle answers, exact in
// decimal: the mean of two decimals needs at most one more decimal place, so
// nothing is rounded. Every disagreement is kept for the operators' attention
// list; every rate carries the answers it was made of and the time of the
// oldest one it used.
import type { Rate, RateObservation, RateProvider } from './port.ts';

export interface MedianOptions {
  /** How long a quote waits for the sources. Default 3 s. */
  deadlineMs?: number;
  /** The largest difference from the median, in percent of it (a decimal string), that counts as agreeing. Default '2'. */
  maxSpreadPercent?: string;
  /** How long a disagreement stays on the attention list after it was last seen. Default 1 h. */
  rememberDisagreementMs?: number;
  now?: () => Date;
}

export type Aggregate =
  | { ok: true; rate: string; observedAt: Date; sources: RateObservation[]; outliers: RateObservation[] }
  | { ok: false; reason: string; outliers: RateObservation[] };

/** A disagreement of the sources about a pair, for GET /admin/v1/attention. */
export interface RateDisagreement {
  /** e.g. BTC/USD */
  pair: string;
  reason: string;
  /** Each answer, e.g. "kraken 97000 (left out)". */
  detail: string;
  since: Date;
  lastSeen: Date;
}

// ---------------------------------------------------------------- decimals

const DECIMAL = /^\d{1,40}(?:\.\d{1,40})?$/;

/** A positive decimal string as digits and scale ('12.5' -> 125n, 1); undefined for anything else. */
function exact(text: string): { digits: bigint; scale: number } | undefined {
  if (typeof text !== 'string' || !DECIMAL.test(text)) return undefined;
  const [whole = '', fraction = ''] = text.split('.');
  const digits = BigInt(whole + fraction);
  return digits > 0n ? { digits, scale: fraction.length } : undefined;
}

const scaled = (text: string, scale: number): bigint => {
  const e = exact(text)!;
  return e.digits * 10n ** BigInt(scale - e.scale);
};

/** `units` at `scale` decimal places as a plain decimal string, trailing zeros cut. */
function decimalOf(units: bigint, scale: number): string {
  if (scale === 0) return units.toString();
  const digits = units.toString().padStart(scale + 1, '0');
  const fraction = digits.slice(-scale).replace(/0+$/, '');
  return fraction ? `${digits.slice(0, -scale)}.${fraction}` : digits.slice(0, -scale);
}

/** The median of positive decimal strings, exact: for an even count the mean of the two middle ones. */
export function medianOf(values: readonly string[]): string {
  if (values.length === 0) throw new RangeError('no values');
  const scale = Math.max(...values.map((v) => exact(v)!.scale));
  const sorted = values.map((v) => scaled(v, scale)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const middle = Math.floor(sorted.length / 2);
  if (sorted.length % 2 === 1) return decimalOf(sorted[middle]!, scale);
  // (a + b) / 2 = (a + b) * 5 / 10: one more decimal place, exact.
  return decimalOf((sorted[middle - 1]! + sorted[middle]!) * 5n, scale + 1);
}

/** True when `value` differs from `reference` by more than `percent` percent of `reference`. */
export function beyondSpread(value: string, reference: string, percent: string): boolean {
  const p = exact(percent) ?? { digits: 0n, scale: 0 };
  const scale = Math.max(exact(value)!.scale, exact(reference)!.scale);
  const v = scaled(value, scale);
  const r = scaled(reference, scale);
  const difference = v > r ? v - r : r - v;
  // |v - r| / r > p / 100  <=>  |v - r| * 100 * 10^p.scale > p.digits * r
  return difference * 100n * 10n ** BigInt(p.scale) > p.digits * r;
}

// ---------------------------------------------------------------- the rule

const names = (answers: readonly RateObservation[]) => answers.map((a) => a.name).join(', ');
const oldest = (answers: readonly RateObservation[]) =>
  new Date(Math.min(...answers.map((a) => a.observedAt.getTime())));

/** The rate of the answers that came in time (see the rule at the top of this file). */
export function aggregate(
  answers: readonly { name: string; rate: string; observedAt: Date }[],
  maxSpreadPercent: string,
): Aggregate {
  const valid = answers.filter((a) => exact(a.rate) !== undefined).map((a) => ({ ...a, used: true }));
  if (valid.length === 0) return { ok: false, reason: 'no source answered a price in time', outliers: [] };
  if (valid.length === 1)
    return { ok: true, rate: valid[0]!.rate, observedAt: valid[0]!.observedAt, sources: valid, outliers: [] };
  const median = medianOf(valid.map((a) => a.rate));
  if (valid.length === 2) {
    if (!valid.some((a) => beyondSpread(a.rate, median, maxSpreadPercent)))
      return { ok: true, rate: median, observedAt: oldest(valid), sources: valid, outliers: [] };
    return {
      ok: false,
      reason: `${valid[0]!.name} (${valid[0]!.rate}) and ${valid[1]!.name} (${valid[1]!.rate}) differ by more than ${maxSpreadPercent}%`,
      outliers: valid.map((a) => ({ ...a, used: false })),
    };
  }
  const sources = valid.map((a) => ({ ...a, used: !beyondSpread(a.rate, median, maxSpreadPercent) }));
  const agreeing = sources.filter((a) => a.used);
  const outliers = sources.filter((a) => !a.used);
  if (agreeing.length * 2 <= sources.length) {
    return {
      ok: false,
      reason: `${names(sources)} disagree: fewer than half are within ${maxSpreadPercent}% of the median ${median}`,
      outliers: sources.map((a) => ({ ...a, used: false })),
    };
  }
  return {
    ok: true,
    rate: medianOf(agreeing.map((a) => a.rate)),
    observedAt: oldest(agreeing),
    sources,
    outliers,
  };
}

// ---------------------------------------------------------------- the provider

export class MedianRateProvider implements RateProvider {
  /** The sources' names, e.g. "kraken, coinbase, coingecko". */
  readonly name: string;
  private readonly deadlineMs: number;
  private readonly maxSpreadPercent: string;
  private readonly rememberMs: number;
  private readonly now: () => Date;
  /** Why the last quote of a pair was refused, for the refusal's message. */
  private readonly refusals = new Map<string, string>();
  private readonly disagreements = new Map<string, RateDisagreement>();

  constructor(
    private readonly sources: readonly RateProvider[],
    options: MedianOptions = {},
  ) {
    if (sources.length === 0) throw new RangeError('a median of no sources');
    this.name = sources.map((s) => s.name).join(', ');
    this.deadlineMs = options.deadlineMs ?? 3_000;
    this.maxSpreadPercent = options.maxSpreadPercent ?? '2';
    this.rememberMs = options.rememberDisagreementMs ?? 60 * 60_000;
    this.now = options.now ?? (() => new Date());
  }

  async rate(token: string, fiat: string): Promise<Rate | undefined> {
    const pair = `${token.toUpperCase()}/${fiat.toUpperCase()}`;
    const answers = await this.ask(token, fiat);
    const result = aggregate(answers, this.maxSpreadPercent);
    if (result.outliers.length > 0) this.remember(pair, answers.length, result);
    if (!result.ok) {
      this.refusals.set(pair, result.reason);
      return undefined;
    }
    this.refusals.delete(pair);
    return { rate: result.rate, observedAt: result.observedAt, sources: result.sources };
  }

  whyNoRate(token: string, fiat: string): string {
    const pair = `${token.toUpperCase()}/${fiat.toUpperCase()}`;
    const why = this.refusals.get(pair) ?? 'no source answered a price in time';
    return `No exchange rate for ${token.toUpperCase()} in ${fiat.toUpperCase()} is available from ${this.name}: ${why}`;
  }

  /** The pairs the sources disagreed about lately, newest first. */
  recentDisagreements(): RateDisagreement[] {
    const cutoff = this.now().getTime() - this.rememberMs;
    for (const [pair, d] of this.disagreements) if (d.lastSeen.getTime() < cutoff) this.disagreements.delete(pair);
    return [...this.disagreements.values()].sort((a, b) => b.lastSeen.getTime() - a.lastSeen.getTime());
  }

  /** Every source's answer that came before the deadline; the others (failed, late, no such pair) are absent. */
  private async ask(token: string, fiat: string): Promise<{ name: string; rate: string; observedAt: Date }[]> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<undefined>((resolve) => {
      timer = setTimeout(resolve, this.deadlineMs, undefined);
    });
    try {
      const answers = await Promise.all(
        this.sources.map((source) =>
          Promise.race([source.rate(token, fiat).catch(() => undefined), deadline]).then((rate) =>
            rate ? { name: source.name, rate: rate.rate, observedAt: rate.observedAt } : undefined,
          ),
        ),
      );
      return answers.filter((a) => a !== undefined);
    } finally {
      clearTimeout(timer);
    }
  }

  private remember(pair: string, asked: number, result: Aggregate): void {
    const now = this.now();
    const all = result.ok ? result.sources : result.outliers;
    const reason = result.ok
      ? `${names(result.outliers)} left out: further than ${this.maxSpreadPercent}% from the median of ${asked} answers`
      : `quote refused: ${result.reason}`;
    const detail = all.map((a) => `${a.name} ${a.rate}${a.used ? '' : ' (left out)'}`).join(', ');
    const since = this.disagreements.get(pair)?.since ?? now;
    this.disagreements.set(pair, { pair, reason, detail, since, lastSeen: now });
  }
}
