// Moove webhooks (SPEC §7.2): a signed delivery is a *trigger* to re-read a payment link from the
// API, never evidence of payment. So the receiver only has to (1) prove the bytes came from Moove
// recently, (2) find which link to re-read, and (3) answer fast: Moove's retry timer must never
// depend on our provider latency, so settlement runs after the 200 has been sent.
//
// Signature: `moove-signature: v1=<hex HMAC-SHA256(secret, "{moove-timestamp}." + raw body)>`.
// Several entries (comma- or space-separated, e.g. during a secret rotation) are accepted; any
// matching v1 entry is enough. `moove-timestamp` is unix seconds and must be within ±300 s.
//
// Link id, looked for in this order (first string that looks like an id wins):
//   data.paymentLinkId, data.paymentLink.id, paymentLinkId, paymentLink.id, data.id
// Explicit payment-link fields come first because `data.id` may name another object (a transaction)
// in some event types; a wrong id is harmless anyway: onLink re-reads it and finds nothing to do.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

export const MOOVE_WEBHOOK_PATH = '/tollbooth/webhooks/moove';
export const MOOVE_WEBHOOK_BODY_LIMIT = 64 * 1024;
export const MOOVE_WEBHOOK_TOLERANCE_SECONDS = 300;
/**
 * How long a processed `moove-event-id` is remembered (§20: ≥ 10 minutes). A delivery is accepted
 * while its timestamp is within ±300 s, so any replay of it arrives within 10 minutes of the first
 * acceptable moment: 15 minutes covers that with room for clock skew between replicas.
 */
export const MOOVE_WEBHOOK_EVENT_MEMORY_MS = 15 * 60_000;

const MAX_SIGNATURE_ENTRIES = 8;
const LINK_ID_PATTERN = /^[A-Za-z0-9._:-]{1,200}$/;
const EVENT_ID_PATTERN = /^[\x21-\x7e]{1,200}$/;

export interface MooveWebhookEvent {
  /** `moove-event-id` header, else the payload's top-level `id`; null when neither is usable. */
  id: string | null;
  linkId: string | null;
}

export type MooveWebhookVerdict = { ok: true; event: MooveWebhookEvent } | { ok: false; status: 400 | 401; reason: string };

export interface VerifyMooveWebhookInput {
  rawBody: Buffer;
  headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>;
  secret: string;
  /** epoch ms */
  now: number;
}

/** The `moove-signature` value for a body: what Moove sends, and what tests sign with. */
export function signMoovePayload(secret: string, timestamp: number | string, rawBody: Buffer | string): string {
  const mac = createHmac('sha256', secret).update(`${timestamp}.`).update(rawBody).digest('hex');
  return `v1=${mac}`;
}

export function verifyMooveWebhook({ rawBody, headers, secret, now }: VerifyMooveWebhookInput): MooveWebhookVerdict {
  if (!secret) return { ok: false, status: 401, reason: 'webhook secret not configured' };
  const signatureHeader = singleHeader(headers['moove-signature']);
  const timestampHeader = singleHeader(headers['moove-timestamp']);
  if (!signatureHeader) return { ok: false, status: 401, reason: 'missing moove-signature header' };
  if (!timestampHeader) return { ok: false, status: 401, reason: 'missing moove-timestamp header' };
  if (!/^\d{1,12}$/.test(timestampHeader)) return { ok: false, status: 401, reason: 'moove-timestamp is not unix seconds' };
  const skewSeconds = Math.abs(now / 1000 - Number(timestampHeader));
  if (skewSeconds > MOOVE_WEBHOOK_TOLERANCE_SECONDS) return { ok: false, status: 401, reason: 'moove-timestamp is outside the 300 s tolerance' };

  const candidates = signatureHeader
    .split(/[\s,]+/)
    .filter((entry) => entry.startsWith('v1='))
    .slice(0, MAX_SIGNATURE_ENTRIES)
    .map((entry) => entry.slice(3))
    .filter((hex) => /^[0-9a-fA-F]{64}$/.test(hex));
  if (candidates.length === 0) return { ok: false, status: 401, reason: 'moove-signature has no v1 entry' };
  const expected = createHmac('sha256', secret).update(`${timestampHeader}.`).update(rawBody).digest();
  let matched = false;
  for (const hex of candidates) {
    // Both buffers are 32 bytes (64 hex digits checked above); every entry is compared, no early exit.
    if (timingSafeEqual(Buffer.from(hex, 'hex'), expected)) matched = true;
  }
  if (!matched) return { ok: false, status: 401, reason: 'moove-signature does not match' };

  let payload: unknown;
  try {
    payload = JSON.parse(rawBody.toString('utf8'));
  } catch {
    return { ok: false, status: 400, reason: 'signed body is not JSON' };
  }
  const headerEventId = singleHeader(headers['moove-event-id']);
  const eventId = headerEventId && EVENT_ID_PATTERN.test(headerEventId) ? headerEventId : idLike(field(payload, 'id'), EVENT_ID_PATTERN);
  return { ok: true, event: { id: eventId, linkId: extractLinkId(payload) } };
}

/** The payment link a delivery is about, or null (see the order at the top of this file). */
export function extractLinkId(payload: unknown): string | null {
  const data = field(payload, 'data');
  const candidates = [
    field(data, 'paymentLinkId'),
    field(field(data, 'paymentLink'), 'id'),
    field(payload, 'paymentLinkId'),
    field(field(payload, 'paymentLink'), 'id'),
    field(data, 'id'),
  ];
  for (const candidate of candidates) {
    const id = idLike(candidate, LINK_ID_PATTERN);
    if (id) return id;
  }
  return null;
}

function singleHeader(value: string | string[] | undefined): string | undefined {
  const text = Array.isArray(value) ? value.join(',') : value;
  const trimmed = text?.trim();
  return trimmed ? trimmed : undefined;
}

function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && Object.hasOwn(value, key) ? (value as Record<string, unknown>)[key] : undefined;
}

function idLike(value: unknown, pattern: RegExp): string | null {
  if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value);
  return typeof value === 'string' && pattern.test(value) ? value : null;
}
