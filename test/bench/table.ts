// Formatting for benchmark reports: rates, ratios and markdown tables.

/** A rate per second, rounded, with thousands separators; "–" when missing. */
export function formatRate(perSecond: number | undefined): string {
  if (perSecond === undefined || !Number.isFinite(perSecond)) return '–';
  return `${Math.round(perSecond).toLocaleString('en-US')}/s`;
}

/** store ÷ baseline, e.g. "0.42×"; "–" when either is missing. */
export function formatRatio(measured: number | undefined, baseline: number | undefined): string {
  if (measured === undefined || baseline === undefined || !(baseline > 0)) return '–';
  const ratio = measured / baseline;
  return `${ratio.toFixed(ratio < 10 ? 2 : 1)}×`;
}

export function formatMegabytes(bytes: number): string {
  return `${Math.round(bytes / (1024 * 1024)).toLocaleString('en-US')} MB`;
}

export function formatSeconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

/** A markdown table with padded columns; columns after the first are right-aligned. */
export function markdownTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length), 3));
  const cell = (text: string, i: number) => (i === 0 ? text.padEnd(widths[i]!) : text.padStart(widths[i]!));
  const line = (cells: readonly string[]) => `| ${headers.map((_, i) => cell(cells[i] ?? '', i)).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (i === 0 ? ` ${'-'.repeat(w)} ` : ` ${'-'.repeat(w - 1)}: `)).join('|')}|`;
  return [line(headers), rule, ...rows.map(line)].join('\n');
}
