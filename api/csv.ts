// The CSV of the finance reports (operations.md §3): RFC 4180 with CRLF line
// ends, and safe to open in a spreadsheet.
//
// Written by hand rather than with a CSV library: the quoting is a few lines,
// the rows are already strings, and the two rules that matter here are ours
// either way:
//
// - Every non-empty cell is quoted. A CSV cell has no type, and a spreadsheet
//   that guesses turns "100.000000" into 100 and "0.000000000000000001" into
//   1E-18; with every value quoted, LibreOffice's "Format quoted field as
//   text" import option (docs/reports.md) keeps each amount exactly as written.
// - Formula injection (OWASP "CSV Injection"): a cell that begins with =, +,
//   -, @, a tab or a carriage return could be run as a formula, quoted or not.
//   Such a cell gets a single quote in front, inside its quotes ("'=1+1"),
//   which spreadsheets show as text. The cost: a value that merely looks like
//   a negative number ("-1.5" in metadata) is shown as '-1.5. No amount of a
//   report is ever negative (base units are never below zero and every
//   report column is a non-negative amount), so only free text (metadata,
//   descriptions, reasons) can meet this rule, and for free text we prefer a
//   visible apostrophe to a formula the customer wrote.

export type Cell = string | null | undefined;

const FORMULA_START = /^[=+\-@\t\r]/;
const NEEDS_DOUBLING = /"/g;

/** One cell as written: empty for no value, otherwise quoted, quotes doubled, formulas made text. */
export function csvCell(value: Cell): string {
  if (value === null || value === undefined || value === '') return '';
  const text = FORMULA_START.test(value) ? `'${value}` : value;
  return `"${text.includes('"') ? text.replace(NEEDS_DOUBLING, '""') : text}"`;
}

/** One record: its cells joined by commas, ended by CRLF. */
export function csvLine(cells: readonly Cell[]): string {
  let line = '';
  for (let i = 0; i < cells.length; i++) line += (i === 0 ? '' : ',') + csvCell(cells[i]);
  return `${line}\r\n`;
}
