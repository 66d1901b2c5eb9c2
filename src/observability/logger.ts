// pino, JSON lines, with redaction paths compiled once at construction. The call path never hands a
// handle, bearer token, checkout URL or argument to the logger in the first place; redaction is the
// second line of defence for headers and error objects.
import pino, { type Logger } from 'pino';
import { MASK } from '../config/mask.js';

export type { Logger };

const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'headers.cookie',
  '*.apiKey',
  '*.webhookSecret',
  '*.hashSecret',
  'apiKey',
  'webhookSecret',
  'hashSecret',
  // The effective config (start line) is masked before it is logged; these catch an unmasked one.
  'config.payments.moove.apiKey',
  'config.payments.moove.webhookSecret',
  'config.handles.hashSecret',
  'config.upstream.headers.*',
];

/** Already-masked values (config/mask.ts: "***", or "" for unset) stay as they are; anything else is hidden. */
const censor = (value: unknown): unknown => (value === MASK || value === '' ? value : '[redacted]');

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    base: { name: 'tollbooth' },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: REDACT_PATHS, censor },
    formatters: { level: (label) => ({ level: label }) },
  };
  return destination ? pino(options, destination) : pino(options);
}
