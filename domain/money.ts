// Money rules. Amounts are never JS numbers: on-chain amounts are bigint base
// units of their token (1 BTC = 10^8 satoshi, 1 ETH = 10^18 wei, 1 USDT on
// Ethereum = 10^6), fiat amounts and exchange rates are decimal strings.
// Everything here is exact integer arithmetic.

/** The contract shows cryptoAmount, fiatAmount and remainingAmount with 8 decimal places. */
export const DISPLAY_DECIMALS = 8;

/** Fiat amounts are accepted with at most this many decimal places (the contract shows them with 8). */
export const FIAT_DECIMALS = 8;

/** A payment within 1% under the quoted amount counts as full payment (interface.md, payment rule 2). */
export const TOLERANCE_PERCENT = 1n;

// Plain decimal notation only: digits, optionally a dot and more digits.
// No sign, no exponent, no spaces, no '.5' or '5.'.
const DECIMAL = /^\d+(?:\.\d+)?$/;

// A uint256 has 78 digits; anything longer is not an amount but an attack on BigInt parsing.
const MAX_DECIMAL_LENGTH = 100;

/** A decimal string as an exact integer and its scale: '12.340' -> { digits: 12340n, scale: 3 }. */
interface ExactDecimal {
  digits: bigint;
  scale: number;
}

function parseExactDecimal(text: string): ExactDecimal | undefined {
  if (typeof text !== 'string' || text.length > MAX_DECIMAL_LENGTH || !DECIMAL.test(text)) return undefined;
  const [whole = '', fraction = ''] = text.split('.');
  return { digits: BigInt(whole + fraction), scale: fraction.length };
}

function assertDecimals(decimals: number): void {
  if (!Number.isInteger(decimals) || decimals < 0 || decimals > 36) {
    throw new RangeError(`Token decimals must be an integer from 0 to 36, got ${decimals}`);
  }
}

const pow10 = (exponent: number): bigint => 10n ** BigInt(exponent);

/** Division of non-negative integers, rounded up. */
function ceilDiv(numerator: bigint, denominator: bigint): bigint {
  return (numerator + denominator - 1n) / denominator;
}

/**
 * Parses a decimal string into base units of a token (or fiat) with `decimals`
 * decimal places. Returns undefined for anything that is not a plain
 * non-negative decimal ('', '-1', '1e5', ' 1', 'abc', '.5') or that has more
 * significant decimal places than the unit can hold ('0.1234567' for 6).
 * Trailing zeros beyond `decimals` are accepted because the value is exact.
 * Zero parses to 0n: "greater than 0" is the caller's rule.
 */
export function parseUnits(text: string, decimals: number): bigint | undefined {
  assertDecimals(decimals);
  const exact = parseExactDecimal(text);
  if (exact === undefined) return undefined;
  if (exact.scale <= decimals) return exact.digits * pow10(decimals - exact.scale);
  const excess = pow10(exact.scale - decimals);
  if (exact.digits % excess !== 0n) return undefined;
  return exact.digits / excess;
}

/**
 * Formats base units as a decimal string with exactly `places` decimal places.
 * When the token has more decimals than shown (ETH 18 shown with 8), the cut
 * digits are rounded: 'up' for amounts the customer has to pay (so he never
 * pays less than owed), 'down' for amounts received (so we never claim more
 * than arrived). Fewer decimals (USDT 6) are padded with zeros.
 */
export function formatUnits(
  units: bigint,
  decimals: number,
  places: number = DISPLAY_DECIMALS,
  rounding: 'up' | 'down' = 'up',
): string {
  assertDecimals(decimals);
  assertDecimals(places);
  if (units < 0n) throw new RangeError(`Amounts are never negative, got ${units} base units`);
  const scaled =
    decimals > places
      ? rounding === 'up'
        ? ceilDiv(units, pow10(decimals - places))
        : units / pow10(decimals - places)
      : units * pow10(places - decimals);
  if (places === 0) return scaled.toString();
  const digits = scaled.toString().padStart(places + 1, '0');
  return `${digits.slice(0, -places)}.${digits.slice(-places)}`;
}

/** A fiat decimal string shown with 8 decimal places ('10.5' -> '10.50000000'), or undefined if not a valid amount. */
export function formatFiat(amount: string): string | undefined {
  const units = parseUnits(amount, FIAT_DECIMALS);
  return units === undefined ? undefined : formatUnits(units, FIAT_DECIMALS);
}

/**
 * The crypto amount to ask for: `fiatAmount` divided by `fiatPerToken` (the
 * price of one whole token in the invoice's fiat currency), in base units of a
 * token with `tokenDecimals` decimals.
 *
 * Rounded UP so the merchant never receives less than priced: to the token's
 * smallest unit, or to 10^-8 of a token when the token is finer than 8
 * decimals, so that the 8-decimal amount the customer is shown is exactly the
 * amount required. A positive price therefore never quotes below one base unit.
 * Throws RangeError on a non-positive or malformed amount or rate: those are
 * validated before a quote is asked for.
 */
export function quoteCryptoAmount(fiatAmount: string, fiatPerToken: string, tokenDecimals: number): bigint {
  assertDecimals(tokenDecimals);
  const fiat = parseExactDecimal(fiatAmount);
  const rate = parseExactDecimal(fiatPerToken);
  if (fiat === undefined || fiat.digits === 0n)
    throw new RangeError(`Fiat amount must be a positive decimal, got '${fiatAmount}'`);
  if (rate === undefined || rate.digits === 0n)
    throw new RangeError(`Exchange rate must be a positive decimal, got '${fiatPerToken}'`);
  const shownDecimals = Math.min(tokenDecimals, DISPLAY_DECIMALS);
  // tokens = (fiat.digits / 10^fiat.scale) / (rate.digits / 10^rate.scale);
  // counted in steps of 10^-shownDecimals token, rounded up.
  const steps = ceilDiv(fiat.digits * pow10(rate.scale + shownDecimals), rate.digits * pow10(fiat.scale));
  return steps * pow10(tokenDecimals - shownDecimals);
}

/**
 * True when `received` counts as paying `quoted` in full: at most 1% under,
 * compared in base units without rounding (received * 100 >= quoted * 99).
 */
export function isFullPayment(received: bigint, quoted: bigint): boolean {
  return received * 100n >= quoted * (100n - TOLERANCE_PERCENT);
}

/** Integer percent of `quoted` that `received` covers: floored, 0 to 100. */
export function paymentProgress(received: bigint, quoted: bigint): number {
  if (quoted <= 0n || received <= 0n) return 0;
  const percent = (received * 100n) / quoted;
  return Number(percent > 100n ? 100n : percent);
}

/**
 * The fiat value of `units` base units of a token with `tokenDecimals`
 * decimals at `fiatPerToken`, as a decimal with FIAT_DECIMALS places, rounded
 * down: a refund's value is never shown above what it gives back.
 */
export function fiatValueOf(units: bigint, tokenDecimals: number, fiatPerToken: string): string {
  assertDecimals(tokenDecimals);
  const rate = parseExactDecimal(fiatPerToken);
  if (rate === undefined) throw new RangeError(`Exchange rate must be a decimal, got '${fiatPerToken}'`);
  const value = (units * rate.digits * pow10(FIAT_DECIMALS)) / pow10(tokenDecimals + rate.scale);
  return formatUnits(value, FIAT_DECIMALS);
}
