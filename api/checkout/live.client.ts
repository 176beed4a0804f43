/// <reference lib="dom" />
// Following an invoice live from the browser, as the checkout page and the
// dashboard's invoice page both do: its WebSocket (/ws/invoices/{id},
// api/routes/live.ts) first, the public status endpoint polled if that fails.
// Bundled into each page's script by clientScriptRoute (api/routes/checkout.ts).
import type { InvoiceStatusView } from '../../projections/invoice-queries.ts';

/** Close code of /ws/invoices/{id} once the invoice is settled or expired (api/routes/live.ts). */
export const CLOSE_FINAL = 4000;
export const CLOSE_NOT_FOUND = 4404;

/** The invoice's WebSocket, or null where the browser refuses to open one (then the page polls). */
export function invoiceSocket(invoiceId: string): WebSocket | null {
  const scheme = window.location.protocol === 'https:' ? 'wss:' : 'ws:';
  try {
    return new WebSocket(`${scheme}//${window.location.host}/ws/invoices/${encodeURIComponent(invoiceId)}`);
  } catch {
    return null;
  }
}

/** The invoice's public status now, or undefined when the service did not give it; throws when offline. */
export async function polledStatus(invoiceId: string): Promise<InvoiceStatusView | undefined> {
  const response = await fetch(`/api/v1/invoices/${encodeURIComponent(invoiceId)}/status`, {
    headers: { accept: 'application/json' },
  });
  if (!response.ok) return undefined;
  return ((await response.json()) as { data: InvoiceStatusView }).data;
}
