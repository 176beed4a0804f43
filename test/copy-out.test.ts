// The COPY of report lines out of PostgreSQL (adapters/sql/copy-out.ts),
// without a database: the binary COPY framing taken off whatever the chunks,
// and the query's values written in as literals.
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { buffer } from 'node:stream/consumers';
import { describe, it } from 'node:test';
import { CompiledQuery } from 'kysely';
import { textOfBinaryCopy, withLiterals } from '../adapters/sql/copy-out.ts';

/** A binary COPY of one text column as PostgreSQL's copyto.c writes it (header, rows, trailer). */
function binaryCopy(rows: readonly (string | null)[], extension = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(19);
  header.write('PGCOPY\n\xff\r\n\0', 'latin1');
  header.writeInt32BE(0, 11);
  header.writeInt32BE(extension.length, 15);
  const body = rows.map((row) => {
    const text = row === null ? Buffer.alloc(0) : Buffer.from(row);
    const frame = Buffer.alloc(6);
    frame.writeInt16BE(1, 0);
    frame.writeInt32BE(row === null ? -1 : text.length, 2);
    return Buffer.concat([frame, text]);
  });
  return Buffer.concat([header, extension, ...body, Buffer.from([0xff, 0xff])]);
}

const through = async (chunks: Buffer[]) => (await buffer(Readable.from(chunks).pipe(textOfBinaryCopy()))).toString();

describe('binary COPY of report lines', () => {
  const rows = ['"a","b ""c"""\r\n', null, '"line\r\nbreak","\\N \\t é€😀"\r\n', '', '"last"\r\n'];
  const expected = rows.map((r) => r ?? '').join('');

  it('gives the texts back to back, byte for byte, however the stream is cut', async () => {
    const whole = binaryCopy(rows);
    assert.equal(await through([whole]), expected);
    for (let size = 1; size <= 40; size++) {
      const chunks: Buffer[] = [];
      for (let at = 0; at < whole.length; at += size) chunks.push(whole.subarray(at, at + size));
      assert.equal(await through(chunks), expected, `chunks of ${size} bytes`);
    }
    assert.equal(await through([binaryCopy(rows, Buffer.from('ext'))]), expected, 'a header extension is skipped');
    assert.equal(await through([binaryCopy([])]), '');
  });

  it('refuses what is not a whole binary COPY of one column', async () => {
    const whole = binaryCopy(rows);
    await assert.rejects(through([whole.subarray(0, whole.length - 2)]), /stopped before its end/);
    await assert.rejects(through([Buffer.from('id,name\n1,a\n'.repeat(3))]), /not a binary COPY/);
    const twoColumns = Buffer.from(whole);
    twoColumns.writeInt16BE(2, 19);
    await assert.rejects(through([twoColumns]), /2 fields, not 1/);
    await assert.rejects(through([Buffer.concat([whole, Buffer.from('x')])]), /after the end/);
  });
});

describe('COPY query literals', () => {
  it("writes each value in its placeholder's place, quotes and backslashes escaped", () => {
    const query = CompiledQuery.raw('select $1 as a, $2 as b, $3 as c where x = $4', [
      "it's",
      'back\\slash',
      5000,
      'plain',
    ]);
    // pg writes a string with a backslash as E'…', after a space.
    assert.equal(withLiterals(query), `select 'it''s' as a,  E'back\\\\slash' as b, 5000 as c where x = 'plain'`);
  });

  it('refuses what it cannot write for sure', () => {
    assert.throws(() => withLiterals(CompiledQuery.raw("select '$2', $1", ['a'])), /out of order/);
    assert.throws(() => withLiterals(CompiledQuery.raw('select $1', ['a', 'b'])), /without its placeholder/);
    assert.throws(() => withLiterals(CompiledQuery.raw('select $1', [new Date()])), /type object/);
  });
});
