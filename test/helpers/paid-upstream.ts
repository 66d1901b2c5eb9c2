// A real MCP upstream for tests, built with the official SDK v1 server: the tools the paywall tests
// price, served over Streamable HTTP in one of two modes. It records every tools/call it receives, so
// a test can assert exactly what reached the upstream (the token must never be there).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { OrderedEventStore } from './ordered-event-store.js';
import { z } from 'zod';

export interface ReceivedCall {
  name: string;
  arguments: Record<string, unknown>;
  headers: Record<string, string | string[] | undefined>;
}

/** An upstream that records what reached it. */
export interface RecordingUpstream<C extends ReceivedCall = ReceivedCall> {
  url: string;
  calls: C[];
  callsOf(name: string): C[];
  /** Every raw request body received (for "never reached the upstream" checks). */
  bodies: string[];
  sawText(marker: string): boolean;
  close(): Promise<void>;
}

export interface PaidUpstream extends RecordingUpstream {
  /** notifications/cancelled the upstream received (all modes), with the session they named. */
  cancellations: { requestId: unknown; sessionId: string | undefined }[];
  /** Every HTTP request received (all modes): method, session and Last-Event-ID headers. */
  requests: { method: string; sessionId: string | undefined; lastEventId: string | undefined }[];
}

/**
 * - `stateless-json`: a fresh transport per request, JSON replies, no sessions;
 * - `sessions-sse`: sessions, SSE replies;
 * - `sessions-resumable`: sessions, SSE replies and an event store (`OrderedEventStore`: the SDK example's, replayed in storage order):
 *   every event carries an id, a priming event opens each POST stream (2025-11-25 clients), and a
 *   GET with `Last-Event-ID` replays a stream, re-mapping its request to the GET connection.
 */
export type UpstreamMode = 'stateless-json' | 'sessions-sse' | 'sessions-resumable';

export interface PaidUpstreamOptions {
  /** Drop notifications/cancelled before the SDK sees them: a cancelled tool finishes and its result is stored. */
  ignoreCancellation?: boolean;
  /** `retry:` of the priming event (sessions-resumable), ms; default 100. */
  retryMs?: number;
}

function buildServer(record: (call: ReceivedCall) => void, headersOf: () => ReceivedCall['headers']): McpServer {
  const server = new McpServer({ name: 'paid-upstream', version: '1.0.0' });
  const text = (value: string) => ({ content: [{ type: 'text' as const, text: value }] });
  const recorded = (name: string, args: Record<string, unknown>) => record({ name, arguments: args, headers: headersOf() });
  server.registerTool('echo', { description: 'Returns its arguments as JSON text.', inputSchema: { text: z.string().optional() } }, async (args) => {
    recorded('echo', args);
    return text(JSON.stringify(args));
  });
  server.registerTool('fetch_readable', { description: 'Fetches a page and returns its readable text.', inputSchema: { url: z.string() } }, async (args) => {
    recorded('fetch_readable', args);
    return text('ok:' + JSON.stringify(args));
  });
  server.registerTool('costly', { description: 'An expensive lookup.', inputSchema: { q: z.string() } }, async (args) => {
    recorded('costly', args);
    return text('ok:' + JSON.stringify(args));
  });
  server.registerTool('failing', { description: 'Always fails with a tool error.', inputSchema: {} }, async (args) => {
    recorded('failing', args);
    return { ...text('upstream failure'), isError: true };
  });
  server.registerTool('throwing', { description: 'Answers with a JSON-RPC error.', inputSchema: {} }, async (args) => {
    recorded('throwing', args);
    throw new Error('this tool throws');
  });
  server.registerTool('slow', { description: 'Waits ms milliseconds.', inputSchema: { ms: z.number() } }, async (args, extra) => {
    recorded('slow', args);
    await sleep(args.ms, undefined, { signal: extra.signal }).catch(() => undefined);
    return text('slept:' + args.ms);
  });
  server.registerTool(
    'progress',
    { description: 'Sends `steps` progress notifications, then answers.', inputSchema: { steps: z.number() } },
    async (args, extra) => {
      recorded('progress', args);
      const token = extra._meta?.progressToken;
      for (let i = 1; i <= args.steps; i++) {
        if (token !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: args.steps } });
        await sleep(20);
      }
      return text(`done:${args.steps}`);
    },
  );
  server.registerTool(
    'polling',
    { description: 'Closes its SSE stream (2025-11-25 polling), waits ms milliseconds, then answers on the resumed stream.', inputSchema: { ms: z.number() } },
    async (args, extra) => {
      recorded('polling', args);
      const token = extra._meta?.progressToken;
      if (token !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: 1, total: 2 } });
      extra.closeSSEStream?.();
      await sleep(args.ms);
      return text('polled:' + args.ms);
    },
  );
  server.registerTool(
    'with_schema',
    { description: 'Returns the temperature.', inputSchema: { city: z.string().optional() }, outputSchema: { temp: z.number() } },
    async (args) => {
      recorded('with_schema', args);
      return { ...text(JSON.stringify({ temp: 21 })), structuredContent: { temp: 21 } };
    },
  );
  return server;
}

export async function startPaidUpstream(mode: UpstreamMode = 'stateless-json', options: PaidUpstreamOptions = {}): Promise<PaidUpstream> {
  const calls: ReceivedCall[] = [];
  const bodies: string[] = [];
  const cancellations: PaidUpstream['cancellations'] = [];
  const requests: PaidUpstream['requests'] = [];
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  let currentHeaders: ReceivedCall['headers'] = {};

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const header = (name: string) => (typeof req.headers[name] === 'string' ? (req.headers[name]) : undefined);
    requests.push({ method: req.method ?? '', sessionId: header('mcp-session-id'), lastEventId: header('last-event-id') });
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    if (raw) bodies.push(raw);
    const parsed = raw ? (JSON.parse(raw) as unknown) : undefined;
    currentHeaders = { ...req.headers };
    const message = parsed as { method?: unknown; params?: { requestId?: unknown } } | undefined;
    if (message?.method === 'notifications/cancelled') {
      const sessionHeader = req.headers['mcp-session-id'];
      cancellations.push({ requestId: message.params?.requestId, sessionId: typeof sessionHeader === 'string' ? sessionHeader : undefined });
      if (options.ignoreCancellation) {
        res.writeHead(202).end();
        return;
      }
    }
    if (mode === 'stateless-json') {
      const server = buildServer((c) => calls.push(c), () => currentHeaders);
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
        ...(mode === 'sessions-resumable' ? { eventStore: new OrderedEventStore(), retryInterval: options.retryMs ?? 100 } : {}),
        onsessioninitialized: (id) => {
          sessions.set(id, created);
        },
      });
      created.onclose = () => {
        if (created.sessionId) sessions.delete(created.sessionId);
      };
      await buildServer((c) => calls.push(c), () => currentHeaders).connect(created);
      transport = created;
    }
    await transport.handleRequest(req, res, parsed);
  };

  const recording = await listenRecording(handle, calls, bodies, async () => {
    for (const transport of sessions.values()) await transport.close().catch(() => undefined);
  });
  return { ...recording, cancellations, requests };
}

/**
 * Serves `handle` on a free loopback port as a recording upstream: `calls` and `bodies` are the arrays
 * the handler fills; `beforeClose` releases what the handler holds (sessions, SDK handlers).
 */
export async function listenRecording<C extends ReceivedCall>(
  handle: (req: IncomingMessage, res: ServerResponse) => Promise<void>,
  calls: C[],
  bodies: string[],
  beforeClose: () => Promise<void>,
): Promise<RecordingUpstream<C>> {
  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
      else res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    bodies,
    callsOf: (name) => calls.filter((c) => c.name === name),
    sawText: (marker) => bodies.some((b) => b.includes(marker)),
    async close() {
      await beforeClose();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
