// The service's logger: pino, JSON lines, with secrets redacted wherever they
// appear in a logged object.
import pino, { type DestinationStream } from 'pino';

const redactedPaths = [
  'req.headers.authorization',
  '*.authorization',
  '*.adminToken',
  '*.walletMnemonic',
  '*.mnemonic',
  '*.webhookSecret',
  '*.key',
  '*.apiKey',
  '*.privateKey',
];

/** Writes to stdout unless given another destination (the benchmark's sink). */
export function serviceLogger(level: string, destination?: DestinationStream) {
  return pino({ level, redact: { paths: redactedPaths, censor: '[redacted]' } }, destination);
}
