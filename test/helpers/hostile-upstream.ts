// A tiny node:http MCP upstream that misbehaves on purpose (issue 7): it answers `initialize`,
// `tools/list` and notifications like a plain stateless server, and answers `tools/call` the way the
// current `behaviour` says — a correct result, or malformed SSE, an event stream that never ends,
// bodies over the gateway's maxResponseBytes, garbage, a 500, a reset. It records every tools/call
// it receives (name and arguments), so a test can compare what reached it with the credits spent.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type HostileBehaviour =
  /** a correct JSON result echoing the arguments */
  | 'ok-json'
  /** a correct result inside a well-formed event stream */
  | 'ok-sse'
  /** the right id answered inside a JSON array (a batch-shaped reply to one request) */
  | 'ok-json-array'
  /** event-stream lines with no blank line, no data field and bytes that are not UTF-8, then the end */
  | 'sse-malformed'
  /** an event whose data is not JSON, then the end */
  | 'sse-garbage-data'
  /** keep-alive comments forever, never the result */
  | 'sse-never-ends'
  /** headers of a JSON reply, then nothing, forever */
  | 'json-hangs'
  /** a JSON body of `hugeBytes` (over the gateway's maxResponseBytes) */
  | 'json-huge'
  /** one SSE event of `hugeBytes` */
  | 'sse-huge-event'
  /** `application/json` holding HTML */
  | 'json-garbage'
  /** `text/html` */
  | 'wrong-content-type'
  /** 200 with no content type and an empty body */
  | 'empty'
  /** HTTP 500 with a stack-trace-looking body */
  | 'status-500'
  /** the socket is destroyed after the headers and half a body */
  | 'reset'
  /** a result for another request id */
  | 'wrong-id'
  /** a result with isError: true */
  | 'tool-error'
  /** the result under the id as a string ("1" for 1), JSON */
  | 'json-string-id'
  /** the result under the id as a string, in an event stream */
  | 'sse-string-id'
  /** the result wrapped in an array inside an event */
  | 'sse-array-wrapped'
  /** the result twice, in one write */
  | 'sse-two-results'
  /** a result for another id, then the right one */
  | 'sse-other-id-first'
  /** a batch reply that answers the tools/call entry twice */
  | 'batch-duplicate'
  /** a batch reply whose ids are all strings */
  | 'batch-string-ids'
  /** a batch reply without the tools/call entry's reply */
  | 'batch-missing';

export interface HostileCall {
  name: string;
  arguments: Record<string, unknown>;
}

export interface HostileUpstream {
  url: string;
  behaviour: HostileBehaviour;
  /** bytes of the huge bodies (default 256 KiB) */
  hugeBytes: number;
  /** every tools/call received, batches included */
  calls: HostileCall[];
  /** every raw body received */
  bodies: string[];
  close(): Promise<void>;
}

const TOOLS = [
  { name: 'echo', description: 'Echoes.', inputSchema: { type: 'object', properties: { text: { type: 'string' } } } },
  { name: 'fetch_readable', description: 'Fetches a page.', inputSchema: { type: 'object', properties: { url: { type: 'string' } } } },
];

export async function startHostileUpstream(): Promise<HostileUpstream> {
  const state: HostileUpstream = {
    url: '',
    behaviour: 'ok-json',
    hugeBytes: 256 * 1024,
    calls: [],
    bodies: [],
    close: async () => undefined,
  };
  const hanging = new Set<ServerResponse>();

  const server: Server = createServer((req, res) => {
    void handle(req, res).catch(() => res.destroy());
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    state.bodies.push(raw);
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}');
      return;
    }
    const messages = (Array.isArray(parsed) ? parsed : [parsed]) as Record<string, unknown>[];
    const replies: unknown[] = [];
    let toolCallId: unknown;
    for (const message of messages) {
      if (typeof message !== 'object' || message === null || !('id' in message)) continue;
      const params = (message.params ?? {}) as Record<string, unknown>;
      if (message.method === 'tools/call') {
        state.calls.push({ name: String(params.name), arguments: (params.arguments ?? {}) as Record<string, unknown> });
        // The entry the misbehaviour targets: the first tools/call of the batch (the priced one in the cases).
        if (toolCallId === undefined) toolCallId = message.id;
        replies.push(result(message.id, { content: [{ type: 'text', text: JSON.stringify(params.arguments ?? {}) }] }));
      } else if (message.method === 'initialize') {
        replies.push(result(message.id, { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'hostile', version: '1.0.0' } }));
      } else if (message.method === 'tools/list') {
        replies.push(result(message.id, { tools: TOOLS }));
      } else {
        replies.push({ jsonrpc: '2.0', id: message.id, error: { code: -32601, message: 'Method not found' } });
      }
    }
    if (replies.length === 0) {
      res.writeHead(202).end();
      return;
    }
    // Only replies that answer a tools/call misbehave: the gateway's own tools/list still works.
    if (toolCallId === undefined) {
      sendJson(res, Array.isArray(parsed) ? replies : replies[0]);
      return;
    }
    misbehave(res, Array.isArray(parsed) ? replies : replies[0], toolCallId);
  }

  function misbehave(res: ServerResponse, reply: unknown, id: unknown): void {
    const text = JSON.stringify(reply);
    switch (state.behaviour) {
      case 'ok-json':
        return sendJson(res, reply);
      case 'ok-sse':
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`: priming\n\nevent: message\ndata: ${text}\n\n`);
        return;
      case 'ok-json-array':
        return sendJson(res, [{ jsonrpc: '2.0', id: 'someone-else', result: {} }, ...(Array.isArray(reply) ? reply : [reply])]);
      case 'sse-malformed':
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data {"jsonrpc":"2.0"\nretry: soon\r\nid\u0000:\u0001\n');
        res.end(Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0x0a, 0x64, 0x61, 0x74, 0x61]));
        return;
      case 'sse-garbage-data':
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`event: message\ndata: {"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":\n\n`);
        return;
      case 'sse-never-ends': {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        hanging.add(res);
        const timer = setInterval(() => res.write(': still thinking\n\n'), 50);
        res.on('close', () => {
          clearInterval(timer);
          hanging.delete(res);
        });
        return;
      }
      case 'json-hangs':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.flushHeaders();
        hanging.add(res);
        res.on('close', () => hanging.delete(res));
        return;
      case 'json-huge': {
        const padding = 'x'.repeat(state.hugeBytes);
        sendJson(res, { jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: padding }] } });
        return;
      }
      case 'sse-huge-event': {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const padding = 'x'.repeat(state.hugeBytes);
        res.end(`event: message\ndata: {"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[{"type":"text","text":"${padding}"}]}}\n\n`);
        return;
      }
      case 'json-garbage':
        res.writeHead(200, { 'content-type': 'application/json' }).end('<html><body>502 Bad Gateway</body></html>');
        return;
      case 'wrong-content-type':
        res.writeHead(200, { 'content-type': 'text/html' }).end(text);
        return;
      case 'empty':
        res.writeHead(200).end();
        return;
      case 'status-500':
        res.writeHead(500, { 'content-type': 'text/plain' }).end('Error: boom\n    at handler (/srv/upstream/index.js:12:5)\n');
        return;
      case 'reset':
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(text.length * 2) });
        res.write(text.slice(0, Math.floor(text.length / 2)));
        setTimeout(() => res.destroy(), 10);
        return;
      case 'wrong-id':
        return sendJson(res, { jsonrpc: '2.0', id: 'not-your-id', result: { content: [] } });
      case 'tool-error':
        return sendJson(res, { jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'it broke' }], isError: true } });
      case 'json-string-id':
        return sendJson(res, { ...(reply as object), id: String(id) });
      case 'sse-string-id':
        return sendSse(res, [{ ...(reply as object), id: String(id) }]);
      case 'sse-array-wrapped':
        return sendSse(res, [[reply]]);
      case 'sse-two-results':
        return sendSse(res, [reply, reply]);
      case 'sse-other-id-first':
        return sendSse(res, [{ jsonrpc: '2.0', id: 'not-your-id', result: { content: [] } }, reply]);
      case 'batch-duplicate': {
        const replies = reply as { id: unknown }[];
        return sendJson(res, [...replies, ...replies.filter((r) => r.id === id)]);
      }
      case 'batch-string-ids':
        return sendJson(res, (reply as { id: unknown }[]).map((r) => ({ ...r, id: String(r.id) })));
      case 'batch-missing':
        return sendJson(res, (reply as { id: unknown }[]).filter((r) => r.id !== id));
    }
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  state.url = `http://127.0.0.1:${port}/mcp`;
  state.close = async () => {
    for (const res of hanging) res.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return state;
}

function result(id: unknown, value: unknown): unknown {
  return { jsonrpc: '2.0', id, result: value };
}

/** One event per message, all in one write (one network chunk). */
function sendSse(res: ServerResponse, messages: unknown[]): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.end(messages.map((message) => `event: message\ndata: ${JSON.stringify(message)}\n\n`).join(''));
}

function sendJson(res: ServerResponse, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}
