// A real MCP upstream whose tools/list is paginated (pages of PAGE_SIZE, `nextCursor` between them),
// for the visibility tests (SPEC §18): the SDKs' McpServer never paginates, so this one is built on
// the low-level `Server` of each SDK:
// - `v1-json`: SDK v1, stateless, JSON replies;
// - `v1-resumable`: SDK v1, sessions, SSE replies and an event store (a GET with Last-Event-ID replays);
// - `v2-json` / `v2-sse`: SDK v2 `createMcpHandler` (2026-07-28 per request, with the stateless 2025
//   fallback) with that response mode for modern requests.
// Every tool answers its name and arguments; an unknown tool gets -32602 "Unknown tool: <name>" (the MCP
// spec's wording), and every tools/call that reached the upstream is recorded.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createMcpHandler, Server as V2Server } from '@modelcontextprotocol/server';
import { Server as V1Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { OrderedEventStore } from './ordered-event-store.js';
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { listenRecording, type ReceivedCall, type RecordingUpstream } from './paid-upstream.js';

export type PagedMode = 'v1-json' | 'v1-resumable' | 'v2-json' | 'v2-sse';
export const PAGE_SIZE = 3;

export interface PagedTool {
  name: string;
  description: string;
  inputSchema: { type: 'object'; properties: Record<string, { type: string }> };
}

export const tool = (name: string): PagedTool => ({ name, description: `The ${name} tool.`, inputSchema: { type: 'object', properties: { text: { type: 'string' } } } });

type Page = { tools: PagedTool[]; nextCursor?: string };

function page(tools: readonly PagedTool[], cursor: string | undefined): Page {
  const start = cursor === undefined ? 0 : Number(cursor);
  if (!Number.isInteger(start) || start < 0 || start >= Math.max(tools.length, 1)) throw new McpError(ErrorCode.InvalidParams, 'Invalid cursor');
  const next = start + PAGE_SIZE;
  return { tools: tools.slice(start, next), ...(next < tools.length ? { nextCursor: String(next) } : {}) };
}

function answer(tools: readonly PagedTool[], name: string, args: unknown, record: () => void) {
  // A plain error with a code: the SDKs put its message on the wire as it is (McpError would prefix it).
  if (!tools.some((t) => t.name === name)) throw Object.assign(new Error(`Unknown tool: ${name}`), { code: ErrorCode.InvalidParams });
  record();
  return { content: [{ type: 'text' as const, text: `${name}:${JSON.stringify(args ?? {})}` }] };
}

export async function startPagedUpstream(mode: PagedMode, tools: readonly PagedTool[]): Promise<RecordingUpstream> {
  const calls: ReceivedCall[] = [];
  const bodies: string[] = [];
  const record = (name: string, args: unknown) => () => calls.push({ name, arguments: (args ?? {}) as Record<string, unknown>, headers: {} });

  if (mode === 'v2-json' || mode === 'v2-sse') {
    const handler = createMcpHandler(
      () => {
        const server = new V2Server({ name: 'paged-upstream', version: '1.0.0' }, { capabilities: { tools: {} } });
        server.setRequestHandler('tools/list', async (request) => page(tools, request.params?.cursor));
        server.setRequestHandler('tools/call', async (request) => answer(tools, request.params.name, request.params.arguments, record(request.params.name, request.params.arguments)));
        return server;
      },
      { responseMode: mode === 'v2-json' ? 'json' : 'sse' },
    );
    const serve = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const raw = Buffer.concat(chunks);
      if (raw.length > 0) bodies.push(raw.toString('utf8'));
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (typeof value === 'string') headers.set(name, value);
        else if (Array.isArray(value)) for (const v of value) headers.append(name, v);
      }
      const controller = new AbortController();
      res.once('close', () => controller.abort());
      const request = new Request(`http://127.0.0.1${req.url ?? '/'}`, {
        method: req.method ?? 'GET',
        headers,
        body: req.method === 'GET' || req.method === 'HEAD' || raw.length === 0 ? undefined : raw,
        signal: controller.signal,
      });
      const response = await handler.fetch(request);
      const outHeaders: Record<string, string> = {};
      response.headers.forEach((value, name) => {
        outHeaders[name] = value;
      });
      res.writeHead(response.status, outHeaders);
      if (response.body) for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) res.write(chunk);
      res.end();
    };
    return listenRecording(serve, calls, bodies, async () => {
      await handler.close().catch(() => undefined);
    });
  }

  const build = (): V1Server => {
    const server = new V1Server({ name: 'paged-upstream', version: '1.0.0' }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async (request) => page(tools, request.params?.cursor));
    server.setRequestHandler(CallToolRequestSchema, async (request) => answer(tools, request.params.name, request.params.arguments, record(request.params.name, request.params.arguments)));
    return server;
  };
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    if (raw) bodies.push(raw);
    const parsed = raw ? (JSON.parse(raw) as unknown) : undefined;
    if (mode === 'v1-json') {
      const server = build();
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      res.on('close', () => {
        void transport.close();
        void server.close();
      });
      await server.connect(transport);
      await transport.handleRequest(req, res, parsed);
      return;
    }
    const sessionId = req.headers['mcp-session-id'];
    let transport = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined;
    if (!transport) {
      if (typeof sessionId === 'string') {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } }));
        return;
      }
      const created = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: new OrderedEventStore(),
        retryInterval: 100,
        onsessioninitialized: (id) => void sessions.set(id, created),
      });
      created.onclose = () => {
        if (created.sessionId) sessions.delete(created.sessionId);
      };
      await build().connect(created);
      transport = created;
    }
    await transport.handleRequest(req, res, parsed);
  };
  return listenRecording(handle, calls, bodies, async () => {
    for (const transport of sessions.values()) await transport.close().catch(() => undefined);
  });
}
