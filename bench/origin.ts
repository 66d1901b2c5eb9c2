// The benchmark origin: the cheapest MCP upstream we can write (node:http, no SDK), so that what the
// bench measures is the proxy hop, not the upstream. It speaks just enough legacy MCP for the
// gateway's tool catalog (initialize, notifications, tools/list) and answers tools/call by echoing
// the arguments. Replies are JSON, except tools whose name starts with `stream`: those answer as an
// event stream, one progress notification at once and the result `STREAM_DELAY_MS` later, which is
// what the time-to-first-event measurement needs. `--sse` makes every reply an event stream.
//
// Run alone: node --import tsx bench/origin.ts [--port N] [--sse]; prints `listening <port>` on stdout.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isEntrypoint } from '../src/research/main-module.js';

const STREAM_DELAY_MS = 20;
const TOOLS = ['echo', 'echo_paid', 'stream', 'stream_paid'].map((name) => ({
  name,
  description: `${name}: returns its arguments`,
  inputSchema: { type: 'object', properties: { text: { type: 'string' } } },
}));

interface Message {
  jsonrpc?: string;
  id?: string | number | null;
  method?: string;
  params?: { name?: unknown; arguments?: unknown; _meta?: { progressToken?: unknown } };
}

export function createOrigin(options: { sse: boolean }) {
  return createServer((req, res) => {
    if (req.method !== 'POST') return void res.writeHead(405, { allow: 'POST' }).end();
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => answer(Buffer.concat(chunks).toString('utf8'), req, res, options.sse));
  });
}

function answer(text: string, _req: IncomingMessage, res: ServerResponse, sse: boolean): void {
  let message: Message;
  try {
    message = JSON.parse(text) as Message;
  } catch {
    return void json(res, 400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
  }
  if (message.id === undefined) return void res.writeHead(202).end();
  const id = message.id;
  switch (message.method) {
    case 'initialize':
      return reply(res, sse, { jsonrpc: '2.0', id, result: { protocolVersion: '2025-11-25', capabilities: { tools: {} }, serverInfo: { name: 'bench-origin', version: '1' } } });
    case 'tools/list':
      return reply(res, sse, { jsonrpc: '2.0', id, result: { tools: TOOLS } });
    case 'tools/call': {
      const name = typeof message.params?.name === 'string' ? message.params.name : '';
      const result = { jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: JSON.stringify(message.params?.arguments ?? {}) }] } };
      if (name.startsWith('stream')) return streamed(res, id, result);
      return reply(res, sse, result);
    }
    default:
      return reply(res, sse, { jsonrpc: '2.0', id, error: { code: -32601, message: 'Method not found' } });
  }
}

function reply(res: ServerResponse, sse: boolean, body: unknown): void {
  if (!sse) return json(res, 200, body);
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.end(`event: message\ndata: ${JSON.stringify(body)}\n\n`);
}

function streamed(res: ServerResponse, id: string | number | null, result: unknown): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const progress = { jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: `working on ${String(id)}` } };
  res.write(`event: message\ndata: ${JSON.stringify(progress)}\n\n`);
  setTimeout(() => res.end(`event: message\ndata: ${JSON.stringify(result)}\n\n`), STREAM_DELAY_MS);
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

if (isEntrypoint(import.meta.url)) {
  const portArg = process.argv.indexOf('--port');
  const port = portArg === -1 ? 0 : Number(process.argv[portArg + 1]);
  const server = createOrigin({ sse: process.argv.includes('--sse') });
  server.keepAliveTimeout = 60_000;
  server.listen(port, '127.0.0.1', () => process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`));
  process.once('SIGTERM', () => server.close(() => process.exit(0)));
}
