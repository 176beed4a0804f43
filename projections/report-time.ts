// Time in the finance reports: a `from`/`to` given without an offset means
// the report's zone's wall clock (a finance team's "2026-01-01" in
// Europe/Berlin is Berlin's midnight, not UTC's). The dates written are
// formatted by PostgreSQL in that zone (projections/reports.ts, `zoned`).

/** True for a time zone Intl knows by its IANA name ('UTC', 'Europe/Berlin'). */
export function isTimeZone(name: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: name });
    return name.length > 0;
  } catch {
    return false;
  }
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterOf(timeZone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(timeZone);
  if (!formatter) {
    formatter = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatters.set(timeZone, formatter);
  }
  return formatter;
}

/** Minutes the zone's wall clock is ahead of UTC at `ms`. */
function offsetMinutesAt(timeZone: string, ms: number): number {
  const parts: Record<string, number> = {};
  for (const part of formatterOf(timeZone).formatToParts(ms)) {
    if (part.type !== 'literal') parts[part.type] = Number(part.value);
  }
  const wall = Date.UTC(parts.year!, parts.month! - 1, parts.day!, parts.hour!, parts.minute!, parts.second!);
  return Math.round((wall - (ms - (((ms % 1000) + 1000) % 1000))) / 60_000);
}

const DATE_TIME = /^(\d{4})-(\d\d)-(\d\d)(?:T(\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,9}))?)?)?(Z|[+-]\d\d:?\d\d)?$/;

/**
 * The instant an ISO 8601 date or date-time names, reading one without an
 * offset on the wall clock of `timeZone`; undefined when it is not one.
 */
export function instantOf(text: string, timeZone: string): Date | undefined {
  const m = DATE_TIME.exec(text);
  if (!m) return undefined;
  const [, y, mo, d, h = '00', mi = '00', s = '00', fraction = '', zone] = m;
  const fields = [Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s)] as const;
  const wall = Date.UTC(...fields, Number(fraction.padEnd(3, '0').slice(0, 3)));
  // Date.UTC rolls over (month 13, day 32, hour 25): a date that does not exist is not a date.
  const check = new Date(wall);
  if (
    check.getUTCFullYear() !== fields[0] ||
    check.getUTCMonth() !== fields[1] ||
    check.getUTCDate() !== fields[2] ||
    check.getUTCHours() !== fields[3] ||
    check.getUTCMinutes() !== fields[4] ||
    check.getUTCSeconds() !== fields[5]
  ) {
    return undefined;
  }
  if (zone !== undefined) {
    if (zone === 'Z') return new Date(wall);
    const sign = zone.startsWith('-') ? -1 : 1;
    const digits = zone.slice(1).replace(':', '');
    const minutes = Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2));
    return new Date(wall - sign * minutes * 60_000);
  }
  // The wall clock of the zone: the offset at the guess, then at the corrected guess (near a change).
  let ms = wall - offsetMinutesAt(timeZone, wall) * 60_000;
  ms = wall - offsetMinutesAt(timeZone, ms) * 60_000;
  return new Date(ms);
}
