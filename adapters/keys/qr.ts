// QR codes for the checkout page and the payment answers: a PNG data URI of a
// deposit address or payment URI.
//
// paulmillr's qr lays out the modules (with the ISO mask choice, scored
// word by word: 0.06 ms a payment URI, where qrcode took 0.4 ms); pngjs
// writes the PNG from them, one byte per pixel of grey, rows filtered with
// "Up". A payment creation draws one, so it was the largest CPU cost of its
// request: measured on this machine, 2.3 ms a code with qrcode's own RGBA
// renderer (6.9 ms before its rows were filtered with "Up"), ~0.5 ms this
// way, about half that again without pngjs's PNG object (docs/benchmarks.md).
//
// The same text is asked for again and again (every checkout page load of an
// invoice shows the same address), so recent results are kept. The cache is
// bounded, least recently used first out, so memory stays flat however many
// invoices are created.

import { PNG } from 'pngjs';
import encodeQR from 'qr';

/** Quiet zone around the code, in modules, as ISO/IEC 18004 asks. */
const QUIET_ZONE = 4;
/** The image is at most this wide: each module a whole number of pixels, so its edges stay sharp. */
const MAX_WIDTH = 256;
const GREY = { colorType: 0, inputColorType: 0, inputHasAlpha: false, bitDepth: 8 } as const;

/** ~1,000 entries × ~2.5 KB of base64 PNG each: a few MB at most. */
const DEFAULT_MAX_ENTRIES = 1000;

/** The PNG of `text` as a QR code, black on white. */
export function qrCodePng(text: string): Buffer {
  // Byte mode: the texts are URIs. Level M survives a smudged or glare-hit
  // screen; H would make a denser code for no gain on a display.
  const modules = encodeQR(text, 'raw', { ecc: 'medium', encoding: 'byte', border: QUIET_ZONE });
  const scale = Math.max(1, Math.floor(MAX_WIDTH / modules.length));
  const width = modules.length * scale;
  // Every byte is written below; a PNG object is not made, since its
  // constructor zero-fills an RGBA buffer four times this size and sets up
  // stream parsers (half of a code's time): the writer reads only the
  // width, the height and the pixels.
  const data = Buffer.allocUnsafe(width * width);
  const row = Buffer.alloc(width);
  modules.forEach((dark, y) => {
    row.fill(0xff);
    dark.forEach((isDark, x) => isDark && row.fill(0, x * scale, (x + 1) * scale));
    for (let dy = 0; dy < scale; dy++) row.copy(data, (y * scale + dy) * width);
  });
  // PNG's "Up" filter: a module's rows repeat, and each repeat filters to zeros.
  return PNG.sync.write({ width, height: width, data } as PNG, { ...GREY, filterType: 2 });
}

export class QrCodeRenderer {
  readonly #maxEntries: number;
  // A Map iterates in insertion order; re-inserting on every hit keeps the
  // least recently used entry first.
  readonly #rendered = new Map<string, string>();

  constructor(maxEntries: number = DEFAULT_MAX_ENTRIES) {
    if (!Number.isSafeInteger(maxEntries) || maxEntries < 0)
      throw new RangeError('maxEntries must be a non-negative integer');
    this.#maxEntries = maxEntries;
  }

  get cachedCount(): number {
    return this.#rendered.size;
  }

  dataUri(text: string): string {
    const rendered = this.#rendered.get(text);
    if (rendered !== undefined) {
      this.#rendered.delete(text);
      this.#rendered.set(text, rendered);
      return rendered;
    }
    const dataUri = `data:image/png;base64,${qrCodePng(text).toString('base64')}`;
    this.#remember(text, dataUri);
    return dataUri;
  }

  #remember(text: string, dataUri: string): void {
    if (this.#maxEntries === 0) return;
    this.#rendered.set(text, dataUri);
    if (this.#rendered.size > this.#maxEntries) {
      const oldest = this.#rendered.keys().next();
      if (!oldest.done) this.#rendered.delete(oldest.value);
    }
  }
}

const shared = new QrCodeRenderer();

/** PNG data URI (`data:image/png;base64,…`) of `text`, cached process-wide. */
export function qrCodeDataUri(text: string): string {
  return shared.dataUri(text);
}
