// A raw MCP client for the namespace tests (SPEC §20), legacy (a session) or 2026-07-28, that keeps
// what the client would parse: the JSON body or each event's data, and the event ids. The assertions
// say what must never be in it: a key of the gateway's namespace from the upstream, a link to the
// attacker's host, a token argument on a free tool.
import type { Test } from 'tap';
import { ATTACKER_HOST, GATEWAY_WORDING, namespaceKeysIn } from './forging-upstream.js';

type Json = Record<string, any>;

export const LEGACY = '2025-11-25';
export const MODERN = '2026-07-28';
export const PRICE = 'xyz.tollbooth/price';
export const RECEIPT = 'xyz.tollbooth/receipt';

export interface Reply {
  status: number;
  headers: Headers;
  text: string;
  /** The messages as the client parses them: the JSON body, or each event's data. */
  messages: Json[];
  /** The SSE event ids, in order. */
  eventIds: string[];
}

export function parseReply(status: number, headers: Headers, text: string): Reply {
  const messages: Json[] = [];
  const eventIds: string[] = [];
  if ((headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    for (const block of text.split(/\r?\n\r?\n/)) {
      const data: string[] = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
        if (line.startsWith('id:')) eventIds.push(line.slice(3).trim());
      }
      if (data.length > 0 && data.join('') !== '') messages.push(JSON.parse(data.join('\n')) as Json); // an empty priming event carries nothing
    }
  } else if (text !== '') {
    const parsed = JSON.parse(text) as Json | Json[];
    messages.push(...(Array.isArray(parsed) ? parsed : [parsed]));
  }
  return { status, headers, text, messages, eventIds };
}

export async function send(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body: JSON.stringify(body) });
  return parseReply(response.status, response.headers, await response.text());
}

/** A client of one era: legacy opens a session; modern sends the per-request envelope and headers. */
export interface Client {
  era: 'legacy' | 'modern';
  sessionId: string | undefined;
  request(id: number, method: string, params?: Json): Promise<Reply>;
}

export async function legacyClient(url: string): Promise<{ client: Client; initialize: Reply }> {
  const initialize = await send(url, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: LEGACY, capabilities: {}, clientInfo: { name: 'namespace-test', version: '1' } } });
  const sessionId = initialize.headers.get('mcp-session-id') ?? undefined;
  if (!sessionId) throw new Error(`no session (HTTP ${initialize.status})`);
  const headers = { 'mcp-session-id': sessionId, 'mcp-protocol-version': LEGACY };
  await send(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
  return { initialize, client: { era: 'legacy', sessionId, request: (id, method, params = {}) => send(url, { jsonrpc: '2.0', id, method, params }, headers) } };
}

export function modernClient(url: string): Client {
  return {
    era: 'modern',
    sessionId: undefined,
    request: (id, method, params = {}) => {
      const headers: Record<string, string> = { 'mcp-protocol-version': MODERN, 'mcp-method': method };
      if (method === 'tools/call') headers['mcp-name'] = String(params.name);
      return send(url, { jsonrpc: '2.0', id, method, params: { ...params, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN } } }, headers);
    },
  };
}

/** Nothing of the namespace in what the client parsed, but the keys `allowed` lists (path → key); no attacker link anywhere. */
export function assertClean(t: Test, reply: Reply, what: string, allowed: string[] = []): void {
  const found = reply.messages.flatMap((message, index) => namespaceKeysIn(message, `#${index}`)).filter((key) => !allowed.some((path) => key.endsWith(path)));
  t.same(found, [], `${what}: no key of the gateway's namespace from the upstream`);
  t.notOk(JSON.stringify(reply.messages).includes(ATTACKER_HOST) || reply.text.includes(ATTACKER_HOST), `${what}: no link to the attacker's host`);
}

export function assertListing(t: Test, reply: Reply, what: string, options: { priced: boolean } = { priced: true }): void {
  assertClean(t, reply, what, options.priced ? [`.result.tools.1._meta["${PRICE}"]`] : []);
  const tools = reply.messages.find((message) => message.result?.tools)?.result.tools as Json[];
  const echo = tools.find((tool) => tool.name === 'echo') as Json;
  t.same(echo.inputSchema, { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] }, `${what}: the free tool has no token argument`);
  const other = tools.find((tool) => tool.name === 'fetch_readable') as Json;
  t.equal(other._meta['vendor.example/kept'], 1, `${what}: the upstream's other _meta keys stay`);
  if (!options.priced) {
    t.same(other.inputSchema, { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] }, `${what}: no tool priced, no token argument anywhere`);
    return;
  }
  t.same(other._meta[PRICE], { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 3, label: 'Research tools' }, `${what}: the priced tool carries the gateway's own price`);
  t.equal(other.inputSchema.properties.tollboothToken.type, 'string', `${what}: the gateway's own token argument`);
  t.equal(other.inputSchema.properties.tollboothToken.description, GATEWAY_WORDING);
  t.same(other.inputSchema.required, ['url'], `${what}: never required`);
}

/** Reads a GET stream until `count` messages arrived (or 5 s), then hangs up. */
export async function readStream(url: string, headers: Record<string, string>, count: number, onOpen?: () => void): Promise<Reply> {
  const controller = new AbortController();
  const response = await fetch(url, { method: 'GET', headers: { accept: 'text/event-stream', ...headers }, signal: controller.signal });
  onOpen?.();
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = '';
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline && (text.match(/^data:/gm) ?? []).length < count) {
    const next = await Promise.race([reader.read(), new Promise<null>((resolve) => setTimeout(() => resolve(null), Math.max(1, deadline - Date.now())))]);
    if (next === null || next.done) break;
    text += decoder.decode(next.value, { stream: true });
  }
  controller.abort();
  return parseReply(response.status, response.headers, text);
}
