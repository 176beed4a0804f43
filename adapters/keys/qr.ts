// QR codes for the checkout page: a PNG data URI of a deposit address or
// payment URI.
//
// Rendering a PNG costs ~2 ms of CPU, and the same text is asked for again
// and again (every checkout page load of an invoice shows the same address),
// so recent results are kept. The cache is bounded, least recently used first
// out, so memory stays flat however many invoices are created.

import QRCode from 'qrcode';

const PNG_OPTIONS = {
  type: 'image/png',
  // Level M survives a smudged or glare-hit screen; H would make a denser
  // code for no gain on a display.
  errorCorrectionLevel: 'M',
  width: 256,
  // PNG's "Up" filter on every row: a QR code's pixel rows repeat module by
  // module, so each repeat filters to zeros. Measured on this machine: 2.3 ms
  // a code instead of 6.9 ms with pngjs's adaptive choice, which tries all
  // five filters on every row (the largest CPU cost of a payment creation in
  // the profile); the data URI grows from about 2.5 to 6 KB. pngjs takes the
  // option; qrcode's types only know the JPEG quality one, hence the cast.
  rendererOpts: { filterType: 2 },
} as QRCode.QRCodeToDataURLOptions;

/** ~1,000 entries × ~6 KB of base64 PNG each: a few MB at most. */
const DEFAULT_MAX_ENTRIES = 1000;

export class QrCodeRenderer {
  readonly #maxEntries: number;
  // Finished renders only, so a failed render never pushes a good one out.
  // A Map iterates in insertion order; re-inserting on every hit keeps the
  // least recently used entry first.
  readonly #rendered = new Map<string, string>();
  // Renders under way, so concurrent requests for one text render it once.
  readonly #inFlight = new Map<string, Promise<string>>();

  constructor(maxEntries: number = DEFAULT_MAX_ENTRIES) {
    if (!Number.isSafeInteger(maxEntries) || maxEntries < 0)
      throw new RangeError('maxEntries must be a non-negative integer');
    this.#maxEntries = maxEntries;
  }

  get cachedCount(): number {
    return this.#rendered.size;
  }

  async dataUri(text: string): Promise<string> {
    const rendered = this.#rendered.get(text);
    if (rendered !== undefined) {
      this.#rendered.delete(text);
      this.#rendered.set(text, rendered);
      return rendered;
    }
    const pending = this.#inFlight.get(text);
    if (pending) return pending;
    const rendering = QRCode.toDataURL(text, PNG_OPTIONS);
    this.#inFlight.set(text, rendering);
    try {
      const dataUri = await rendering;
      this.#remember(text, dataUri);
      return dataUri;
    } finally {
      this.#inFlight.delete(text);
    }
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
export function qrCodeDataUri(text: string): Promise<string> {
  return shared.dataUri(text);
}
