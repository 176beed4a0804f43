// `COPY (query) TO STDOUT` of a query whose rows are one text column each, as
// the bytes of those texts one after the other: for the finance reports whose
// lines PostgreSQL writes (projections/reports.ts). The rows reach this process
// as the bytes PostgreSQL sent, with no row object, string or re-encoding
// each, which was most of this process's cost per row through a cursor.
//
// Binary format, because it leaves each text exactly as it is: the text
// format escapes backslashes and line ends, the CSV format quotes them, and a
// report line has both. Each row comes as its field count and its text's
// length, which are taken off here.
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { CompiledQuery } from 'kysely';
import pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';

/**
 * The rows' text of `query`, in one transaction on a connection of `pool`
 * after `settings` (set_config, local to it). The COPY reads on only as the
 * stream is read: a slow reader holds PostgreSQL back through the socket. A
 * reader that destroys the stream ends the COPY: the connection, mid-COPY, is
 * closed rather than given back to the pool (pg's `end` destroys the socket
 * of a client with a query running), and PostgreSQL ends the query and its
 * transaction when it next writes to it.
 */
export function copyTextOut(pool: pg.Pool, query: CompiledQuery, settings: Readonly<Record<string, string>>): Readable {
  const copy = `copy (${withLiterals(query)}) to stdout (format binary)`;
  const text = textOfBinaryCopy();
  void (async () => {
    let client: pg.PoolClient | undefined;
    let failure: Error | undefined;
    try {
      client = await pool.connect();
      await client.query('begin');
      for (const [name, value] of Object.entries(settings)) {
        await client.query('select set_config($1, $2, true)', [name, value]);
      }
      await pipeline(client.query(copyTo(copy)), text);
      await client.query('commit');
    } catch (error) {
      failure = error instanceof Error ? error : new Error(String(error));
      text.destroy(failure);
    } finally {
      client?.release(failure);
    }
  })();
  return text;
}

/**
 * COPY takes no parameters: the query's values written into its text as
 * literals (pg's escapeLiteral). Kysely numbers its placeholders $1, $2, … in
 * order, each once; anything else (a `$` inside a literal of the query)
 * is refused rather than guessed at.
 */
export function withLiterals({ sql, parameters }: CompiledQuery): string {
  let expected = 1;
  const text = sql.replace(/\$(\d+)/g, (_, n: string) => {
    if (Number(n) !== expected++) throw new Error(`COPY query: placeholder $${n} out of order`);
    return literalOf(parameters[Number(n) - 1]);
  });
  if (expected - 1 !== parameters.length) throw new Error('COPY query: a parameter without its placeholder');
  return text;
}

function literalOf(value: unknown): string {
  if (typeof value === 'string') return pg.escapeLiteral(value);
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw new Error(`COPY query: no literal for a parameter of type ${typeof value}`);
}

/** PostgreSQL's binary COPY header: signature, flags (int32), extension length (int32). */
const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');
const HEADER_BYTES = SIGNATURE.length + 8;

/**
 * A binary COPY of one text column in, the texts out, back to back: each row
 * is a field count (int16, 1), a length (int32, -1 for NULL) and the bytes; a
 * field count of -1 ends the data. Rows are cut anywhere between chunks, so
 * what is left of one waits for the next.
 */
export function textOfBinaryCopy(): Transform {
  let rest: Buffer = Buffer.alloc(0);
  let headerRead = false;
  let ended = false;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      const input = rest.length === 0 ? chunk : Buffer.concat([rest, chunk]);
      let at = 0;
      if (!headerRead) {
        if (input.length < HEADER_BYTES) return void ((rest = input), done());
        if (!input.subarray(0, SIGNATURE.length).equals(SIGNATURE)) return done(new Error('not a binary COPY'));
        at = HEADER_BYTES + input.readInt32BE(HEADER_BYTES - 4);
        if (input.length < at) return void ((rest = input), done());
        headerRead = true;
      }
      // The texts are copied into one buffer per chunk: no object per row.
      const out = Buffer.allocUnsafe(input.length);
      let written = 0;
      while (!ended && at + 2 <= input.length) {
        const fields = input.readInt16BE(at);
        if (fields === -1) {
          ended = true;
          at += 2;
          break;
        }
        if (fields !== 1) return done(new Error(`a binary COPY row of ${fields} fields, not 1`));
        if (at + 6 > input.length) break;
        const length = input.readInt32BE(at + 2);
        const end = at + 6 + Math.max(length, 0);
        if (end > input.length) break;
        written += input.copy(out, written, at + 6, end);
        at = end;
      }
      if (ended && at < input.length) return done(new Error('data after the end of a binary COPY'));
      rest = input.subarray(at);
      done(null, written === 0 ? undefined : out.subarray(0, written));
    },
    flush(done) {
      done(ended ? null : new Error('a binary COPY that stopped before its end'));
    },
  });
}
