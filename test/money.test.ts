import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  fiatValueOf,
  formatFiat,
  formatUnits,
  isFullPayment,
  parseUnits,
  paymentProgress,
  quoteCryptoAmount,
} from '../domain/money.ts';

describe('parseUnits', () => {
  it('parses plain decimals into base units', () => {
    assert.equal(parseUnits('1.5', 6), 1_500_000n);
    assert.equal(parseUnits('0', 8), 0n);
    assert.equal(parseUnits('10', 0), 10n);
    assert.equal(parseUnits('0.00000001', 8), 1n);
    assert.equal(parseUnits('1.000000000000000001', 18), 1_000_000_000_000_000_001n);
    assert.equal(parseUnits('007.10', 2), 710n);
  });

  it('accepts trailing zeros beyond the unit, since the value is exact', () => {
    assert.equal(parseUnits('1.000000000', 8), 100_000_000n);
    assert.equal(parseUnits('2.50', 1), 25n);
  });

  it('refuses more significant decimals than the unit holds', () => {
    assert.equal(parseUnits('0.1234567', 6), undefined);
    assert.equal(parseUnits('0.000000001', 8), undefined);
    assert.equal(parseUnits('1.1', 0), undefined);
  });

  it('refuses anything that is not a plain non-negative decimal', () => {
    for (const text of [
      '',
      '-1',
      '1e5',
      ' 1',
      '1 ',
      'abc',
      '.5',
      '5.',
      '1,5',
      '+1',
      '0x10',
      '1.2.3',
      'NaN',
      'Infinity',
      '١',
    ]) {
      assert.equal(parseUnits(text, 8), undefined, `'${text}' must be refused`);
    }
    assert.equal(parseUnits('1'.repeat(101), 0), undefined);
    assert.equal(parseUnits(5 as unknown as string, 8), undefined);
  });

  it('refuses impossible decimals', () => {
    assert.throws(() => parseUnits('1', -1), RangeError);
    assert.throws(() => parseUnits('1', 1.5), RangeError);
  });
});

describe('formatUnits', () => {
  it('pads tokens with fewer than 8 decimals (USDT 6)', () => {
    assert.equal(formatUnits(1_500_000n, 6), '1.50000000');
    assert.equal(formatUnits(1n, 6), '0.00000100');
  });

  it('shows 8-decimal tokens exactly (BTC)', () => {
    assert.equal(formatUnits(1n, 8), '0.00000001');
    assert.equal(formatUnits(2_100_000_000_000_000n, 8), '21000000.00000000');
    assert.equal(formatUnits(0n, 8), '0.00000000');
  });

  it('rounds finer tokens up by default (ETH 18), so the customer never pays less', () => {
    assert.equal(formatUnits(1_234_567_890_123_456_789n, 18), '1.23456790');
    assert.equal(formatUnits(1n, 18), '0.00000001');
    assert.equal(formatUnits(10n ** 18n, 18), '1.00000000');
    assert.equal(formatUnits(12_345_678_900_000_000_000n, 18), '12.34567890');
  });

  it('rounds down on request, for amounts received', () => {
    assert.equal(formatUnits(1_234_567_890_123_456_789n, 18, 8, 'down'), '1.23456789');
    assert.equal(formatUnits(1n, 18, 8, 'down'), '0.00000000');
  });

  it('formats with other numbers of places', () => {
    assert.equal(formatUnits(12_345n, 2, 2), '123.45');
    assert.equal(formatUnits(5n, 0, 0), '5');
    assert.equal(formatUnits(1_999n, 3, 2), '2.00');
  });

  it('refuses negative amounts', () => {
    assert.throws(() => formatUnits(-1n, 8), RangeError);
  });

  it('formats fiat decimal strings with 8 places', () => {
    assert.equal(formatFiat('10.5'), '10.50000000');
    assert.equal(formatFiat('100'), '100.00000000');
    assert.equal(formatFiat('abc'), undefined);
    assert.equal(formatFiat('0.000000001'), undefined);
  });
});

describe('quoteCryptoAmount', () => {
  it('USDT (6 decimals): an exact division', () => {
    assert.equal(quoteCryptoAmount('100', '1', 6), 100_000_000n);
  });

  it('USDT (6 decimals): rounds up to the smallest unit', () => {
    // 10 / 3 = 3.333333333... -> 3.333334
    assert.equal(quoteCryptoAmount('10', '3', 6), 3_333_334n);
    assert.equal(formatUnits(3_333_334n, 6), '3.33333400');
    // 19.99 / 0.9998 = 19.99399879975... -> 19.993999
    assert.equal(quoteCryptoAmount('19.99', '0.9998', 6), 19_993_999n);
  });

  it('BTC (8 decimals): exact and rounded up', () => {
    assert.equal(quoteCryptoAmount('650', '65000', 8), 1_000_000n);
    // 100 / 65000 = 0.0015384615... -> 0.00153847
    assert.equal(quoteCryptoAmount('100', '65000', 8), 153_847n);
  });

  it('ETH (18 decimals): rounds up to 1e-8 ETH so the shown amount is exactly what is required', () => {
    // 100 / 3000 = 0.0333333333... -> 0.03333334 ETH
    const wei = quoteCryptoAmount('100', '3000', 18);
    assert.equal(wei, 33_333_340_000_000_000n);
    assert.equal(formatUnits(wei, 18), '0.03333334');
    assert.equal(formatUnits(wei, 18, 8, 'down'), '0.03333334');
    assert.equal(quoteCryptoAmount('3000', '1500', 18), 2n * 10n ** 18n);
  });

  it('a tiny amount never quotes below one base unit (or 1e-8 of a finer token)', () => {
    assert.equal(quoteCryptoAmount('0.00000001', '65000', 8), 1n);
    assert.equal(quoteCryptoAmount('0.00000001', '1', 6), 1n);
    assert.equal(quoteCryptoAmount('0.00000001', '3000', 18), 10_000_000_000n);
  });

  it('refuses zero or malformed amounts and rates', () => {
    assert.throws(() => quoteCryptoAmount('0', '1', 6), RangeError);
    assert.throws(() => quoteCryptoAmount('10', '0', 6), RangeError);
    assert.throws(() => quoteCryptoAmount('10', '-1', 6), RangeError);
    assert.throws(() => quoteCryptoAmount('10', '1e3', 6), RangeError);
    assert.throws(() => quoteCryptoAmount('', '1', 6), RangeError);
  });
});

describe('isFullPayment: the 1% tolerance', () => {
  it('counts exactly 1% under as full, one base unit less not', () => {
    assert.equal(isFullPayment(99_000_000n, 100_000_000n), true);
    assert.equal(isFullPayment(98_999_999n, 100_000_000n), false);
  });

  it('compares without rounding when 99% is not a whole number of base units', () => {
    // 99% of 153847 is 152308.53
    assert.equal(isFullPayment(152_309n, 153_847n), true);
    assert.equal(isFullPayment(152_308n, 153_847n), false);
  });

  it('counts the exact amount and more as full, nothing as not', () => {
    assert.equal(isFullPayment(100_000_000n, 100_000_000n), true);
    assert.equal(isFullPayment(150_000_000n, 100_000_000n), true);
    assert.equal(isFullPayment(0n, 100_000_000n), false);
  });
});

describe('paymentProgress', () => {
  it('is an integer percent, floored and capped at 100', () => {
    assert.equal(paymentProgress(50n, 100n), 50);
    assert.equal(paymentProgress(2n, 3n), 66);
    assert.equal(paymentProgress(99_999_999n, 100_000_000n), 99);
    assert.equal(paymentProgress(100n, 100n), 100);
    assert.equal(paymentProgress(150n, 100n), 100);
    assert.equal(paymentProgress(0n, 100n), 0);
    assert.equal(paymentProgress(5n, 0n), 0);
  });
});

describe('fiatValueOf', () => {
  it('values base units at a rate, rounded down to 8 places', () => {
    assert.equal(fiatValueOf(20_000_000n, 6, '1'), '20.00000000');
    // 0.5 ETH at 3,000.12 a whole ETH.
    assert.equal(fiatValueOf(5n * 10n ** 17n, 18, '3000.12'), '1500.06000000');
    // One wei is worth less than 10^-8 of a dollar: shown as nothing rather than rounded up.
    assert.equal(fiatValueOf(1n, 18, '3000'), '0.00000000');
    // 1 satoshi at 97,123.456789 a BTC: 0.00097123456789, cut to 8 places.
    assert.equal(fiatValueOf(1n, 8, '97123.456789'), '0.00097123');
  });

  it('refuses a malformed rate', () => {
    assert.throws(() => fiatValueOf(1n, 6, '1e3'), RangeError);
  });
});
