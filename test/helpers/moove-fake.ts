// A local HTTP fake of the Moove payment-link API (SPEC §7.2), faithful in the ways the gateway
// depends on: key checks and their error codes, body validation, amounts echoed back normalised
// ("5.00" → "5"), links turning `inactive` after expiry (with a configurable lag), public reads,
// and the failure modes a provider shows in production (429 without Retry-After, 5xx, dropped
// connections, hung requests). Tests drive it with pay / expire / failNext and read `requests`.
//
// Invented where the public docs are silent (kept plausible, asserted nowhere in src/): the 400
// code `INVALID_REQUEST` for a malformed body, 422 for more than 6 decimals, link ids as UUIDs,
// 201 on create, the webhook payload shape `{id, type, createdAt, data: {id, paymentLinkId, status,
// receivedAmount}}`.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { compareDecimal, formatDecimal, isDecimalString, parseDecimal } from '../../src/money/decimal.js';
import { signMoovePayload } from '../../src/payments/webhook.js';

export type MooveLinkStatus = 'active' | 'completed' | 'inactive';

export interface FakeLink {
  id: string;
  toAmount: string; // normalised
  description: string;
  maxUsage: number;
  expirationDate: string; // ISO, as sent
  status: MooveLinkStatus;
  receivedAmount: string | null; // normalised
  transactionUrl: string | null;
  createdWithKey: string;
}

export interface FakeRequest {
  method: string;
  path: string;
  hadKey: boolean;
  /** Parsed JSON body for POSTs (undefined when absent or unparseable). */
  body: unknown;
  /** Real time the request arrived (Date.now()), for pacing assertions. */
  at: number;
  /** What the fake answered: a status, or 'drop' / 'hang'. */
  answer: number | 'drop' | 'hang';
}

/** An HTTP failure (Moove's error body with `code`, or `rawBody` verbatim), a dropped connection, or no answer. */
export type FailureSpec = { status: number; code?: string; rawBody?: string } | 'drop' | 'hang';

export interface MooveFakeOptions {
  /** Keys that work (default ['test-key']). */
  apiKeys?: string[];
  /** Keys Moove knows but that have expired → 401 EXPIRED_API_KEY. */
  expiredKeys?: string[];
  /** Keys without payment-link scope → 403 INSUFFICIENT_API_SCOPE. */
  unscopedKeys?: string[];
  /** ms after expirationDate before a link reads `inactive` (Moove sweeps expired links lazily). */
  inactiveLagMs?: number;
  clock?: () => number;
}

interface PendingFailure {
  remaining: number;
  spec: FailureSpec;
  method: string | undefined;
  path: string | undefined;
}

const DESCRIPTION_MAX = 500;

export class MooveFake {
  readonly links = new Map<string, FakeLink>();
  readonly requests: FakeRequest[] = [];
  /** 409 PAYMENT_LINK_ACCOUNT_NOT_READY on create (no Moove handle / default wallet yet). */
  accountNotReady = false;
  /** Reads without a key answer 401 UNAUTHENTICATED (an account that disabled public reads). */
  requirePublicAuth = false;
  /** Where pay() delivers a signed webhook, when set. */
  webhookTarget: { url: string; secret: string } | null = null;
  /** How long a link read takes to answer (Moove's latency); the link's state is taken when the request arrives. */
  readDelayMs = 0;
  inactiveLagMs: number;

  readonly #server: Server;
  readonly #apiKeys: Set<string>;
  readonly #expiredKeys: Set<string>;
  readonly #unscopedKeys: Set<string>;
  readonly #clock: () => number;
  readonly #failures: PendingFailure[] = [];
  #url = '';

  constructor(options: MooveFakeOptions = {}) {
    this.#apiKeys = new Set(options.apiKeys ?? ['test-key']);
    this.#expiredKeys = new Set(options.expiredKeys ?? []);
    this.#unscopedKeys = new Set(options.unscopedKeys ?? []);
    this.inactiveLagMs = options.inactiveLagMs ?? 0;
    this.#clock = options.clock ?? Date.now;
    this.#server = createServer((req, res) => {
      this.#handle(req, res).catch(() => {
        if (!res.headersSent) reply(res, 500, { errors: [{ code: 'INTERNAL_ERROR', message: 'fake failure' }] });
      });
    });
  }

  /** Base URL, e.g. http://127.0.0.1:54321 (pass as the provider's baseUrl). */
  get url(): string {
    return this.#url;
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.#url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  /**
   * The next `count` requests (optionally only those with `method`, or to `path`, e.g. one link's
   * `/v1/payment-link/<id>`) fail this way: an HTTP error with Moove's error body (no Retry-After, as
   * Moove sends none), a dropped connection, or no answer at all.
   */
  failNext(count: number, spec: FailureSpec, match: { method?: 'GET' | 'POST'; path?: string } = {}): void {
    this.#failures.push({ remaining: count, spec, method: match.method, path: match.path });
  }

  /** The payer pays: the link completes with this amount (even if it had expired: money that arrived is real). */
  async pay(id: string, receivedAmount: string): Promise<void> {
    const link = this.#link(id);
    if (!isDecimalString(receivedAmount)) throw new Error(`pay(): not a decimal amount: ${JSON.stringify(receivedAmount)}`);
    link.status = 'completed';
    link.receivedAmount = formatDecimal(receivedAmount);
    link.transactionUrl = `https://basescan.org/tx/0x${randomUUID().replaceAll('-', '')}`;
    if (this.webhookTarget) {
      await sendWebhook(this.webhookTarget.url, this.webhookTarget.secret, {
        id: `evt_${randomUUID()}`,
        type: 'payment_link.completed',
        createdAt: new Date(this.#clock()).toISOString(),
        data: { id: link.id, paymentLinkId: link.id, status: link.status, receivedAmount: link.receivedAmount },
      });
    }
  }

  /** The link stops accepting payments now (reads `inactive` straight away, whatever the lag). */
  expire(id: string): void {
    const link = this.#link(id);
    if (link.status === 'active') link.status = 'inactive';
  }

  /**
   * The merchant deletes the link (dashboard): from now on a read answers 404 CANNOT_FIND_PAYMENT_LINK,
   * as for an id Moove never issued.
   */
  remove(id: string): void {
    this.#link(id);
    this.links.delete(id);
  }

  /** The request log without bodies, for compact assertions. */
  get calls(): Array<{ method: string; path: string; hadKey: boolean }> {
    return this.requests.map(({ method, path, hadKey }) => ({ method, path, hadKey }));
  }

  #link(id: string): FakeLink {
    const link = this.links.get(id);
    if (!link) throw new Error(`no fake link ${id}`);
    return link;
  }

  #takeFailure(method: string, path: string): FailureSpec | null {
    const pending = this.#failures.find(
      (failure) => failure.remaining > 0 && (failure.method === undefined || failure.method === method) && (failure.path === undefined || failure.path === path),
    );
    if (!pending) return null;
    pending.remaining -= 1;
    if (pending.remaining === 0) this.#failures.splice(this.#failures.indexOf(pending), 1);
    return pending.spec;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET';
    const path = new URL(req.url ?? '/', 'http://fake').pathname;
    const keyHeader = req.headers['x-api-key'];
    const key = typeof keyHeader === 'string' && keyHeader !== '' ? keyHeader : null;
    const raw = await readBody(req);
    let body: unknown;
    try {
      body = raw.length > 0 ? JSON.parse(raw.toString('utf8')) : undefined;
    } catch {
      body = undefined;
    }
    const entry: FakeRequest = { method, path, hadKey: key !== null, body, at: Date.now(), answer: 0 };
    this.requests.push(entry);

    const failure = this.#takeFailure(method, path);
    if (failure === 'drop') {
      entry.answer = 'drop';
      req.socket.destroy();
      return;
    }
    if (failure === 'hang') {
      entry.answer = 'hang';
      return; // closeAllConnections() in close() ends it
    }
    if (failure) {
      entry.answer = failure.status;
      if (failure.rawBody !== undefined) {
        res.writeHead(failure.status, { 'content-type': 'application/json' });
        res.end(failure.rawBody);
        return;
      }
      const code = failure.code ?? (failure.status === 429 ? 'RATE_LIMIT_EXCEEDED' : 'INTERNAL_SERVER_ERROR');
      reply(res, failure.status, { errors: [{ code, message: 'injected failure' }] });
      return;
    }

    const answer = this.#route(method, path, key, body, raw.length > 0);
    entry.answer = answer.status;
    if (method === 'GET' && this.readDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.readDelayMs));
    reply(res, answer.status, answer.body);
  }

  #route(method: string, path: string, key: string | null, body: unknown, hadBody: boolean): { status: number; body: unknown } {
    if (path === '/v1/payment-link') {
      if (method !== 'POST') return error(405, 'METHOD_NOT_ALLOWED', 'use POST');
      const refused = this.#checkKey(key);
      if (refused) return refused;
      if (this.accountNotReady) {
        return error(409, 'PAYMENT_LINK_ACCOUNT_NOT_READY', 'Create a Moove handle and set a default wallet before creating payment links');
      }
      return this.#create(body, hadBody, key as string);
    }
    const match = /^\/v1\/payment-link\/([^/]+)$/.exec(path);
    if (match) {
      if (method !== 'GET') return error(405, 'METHOD_NOT_ALLOWED', 'use GET');
      if (key !== null || this.requirePublicAuth) {
        const refused = this.#checkKey(key);
        if (refused) return refused;
      }
      const link = this.links.get(decodeURIComponent(match[1] ?? ''));
      if (!link) return error(404, 'CANNOT_FIND_PAYMENT_LINK', 'Payment link not found');
      return { status: 200, body: this.#view(link) };
    }
    return error(404, 'NOT_FOUND', 'no such route');
  }

  #checkKey(key: string | null): { status: number; body: unknown } | null {
    if (key === null) return error(401, 'UNAUTHENTICATED', 'An API key is required');
    if (this.#expiredKeys.has(key)) return error(401, 'EXPIRED_API_KEY', 'The API key has expired');
    if (this.#unscopedKeys.has(key)) return error(403, 'INSUFFICIENT_API_SCOPE', 'The API key cannot manage payment links');
    if (!this.#apiKeys.has(key)) return error(401, 'INVALID_API_KEY', 'The API key is not valid');
    return null;
  }

  #create(body: unknown, hadBody: boolean, key: string): { status: number; body: unknown } {
    if (!hadBody || typeof body !== 'object' || body === null || Array.isArray(body)) return error(400, 'INVALID_REQUEST', 'body must be a JSON object');
    const input = body as Record<string, unknown>;
    const { toAmount, description, maxUsage, expirationDate } = input;
    // Stablecoin amounts carry at most 6 decimals.
    if (!isDecimalString(toAmount) || compareDecimal(toAmount, '0') <= 0 || parseDecimal(toAmount).scale > 6) {
      return error(422, 'INVALID_PAYMENT_LINK_AMOUNT', 'toAmount must be a positive decimal string with at most 6 decimals');
    }
    if (description !== undefined && (typeof description !== 'string' || description.length > DESCRIPTION_MAX)) {
      return error(400, 'INVALID_REQUEST', `description must be a string of at most ${DESCRIPTION_MAX} characters`);
    }
    if (maxUsage !== undefined && (typeof maxUsage !== 'number' || !Number.isInteger(maxUsage) || maxUsage < 1)) {
      return error(400, 'INVALID_REQUEST', 'maxUsage must be a positive integer');
    }
    if (expirationDate !== undefined && (typeof expirationDate !== 'string' || Number.isNaN(Date.parse(expirationDate)) || Date.parse(expirationDate) <= this.#clock())) {
      return error(400, 'INVALID_REQUEST', 'expirationDate must be an ISO date in the future');
    }
    const id = randomUUID();
    this.links.set(id, {
      id,
      toAmount: formatDecimal(toAmount),
      description: typeof description === 'string' ? description : '',
      maxUsage: typeof maxUsage === 'number' ? maxUsage : 1,
      expirationDate: typeof expirationDate === 'string' ? expirationDate : new Date(this.#clock() + 7 * 86_400_000).toISOString(),
      status: 'active',
      receivedAmount: null,
      transactionUrl: null,
      createdWithKey: key,
    });
    return { status: 201, body: { id, url: `https://moove.xyz/@shop/pay/${id}` } };
  }

  #view(link: FakeLink): Record<string, unknown> {
    if (link.status === 'active' && this.#clock() >= Date.parse(link.expirationDate) + this.inactiveLagMs) link.status = 'inactive';
    return {
      id: link.id,
      status: link.status,
      toAmount: link.toAmount,
      receivedAmount: link.receivedAmount,
      expirationDate: link.expirationDate,
      transactionUrl: link.transactionUrl,
      description: link.description,
      maxUsage: link.maxUsage,
    };
  }
}

export async function startMooveFake(options: MooveFakeOptions = {}): Promise<MooveFake> {
  return new MooveFake(options).start();
}

/** `moove-signature` header value for a body, as Moove computes it. */
export function signWebhook(secret: string, body: string | Buffer, timestamp: number): string {
  return signMoovePayload(secret, timestamp, body);
}

export interface WebhookDelivery {
  status: number;
  body: unknown;
  ms: number;
}

/** Delivers a signed webhook like Moove does. `timestamp` is unix seconds (default: now). */
export async function sendWebhook(
  url: string,
  secret: string,
  payload: unknown,
  options: { timestamp?: number; eventId?: string; rawBody?: string | Buffer; signature?: string } = {},
): Promise<WebhookDelivery> {
  const body = options.rawBody ?? JSON.stringify(payload);
  const timestamp = options.timestamp ?? Math.floor(Date.now() / 1000);
  const started = performance.now();
  const response = await request(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'moove-timestamp': String(timestamp),
      'moove-signature': options.signature ?? signWebhook(secret, body, timestamp),
      'moove-event-id': options.eventId ?? `evt_${randomUUID()}`,
    },
    body,
  });
  const text = await response.body.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // keep the text
  }
  return { status: response.statusCode, body: parsed, ms: performance.now() - started };
}

function error(status: number, code: string, message: string): { status: number; body: unknown } {
  return { status, body: { errors: [{ code, message }] } };
}

function reply(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}
