// A real dual-era MCP upstream for tests: the v2 SDK's `createMcpHandler` (2026-07-28 per-request
// envelope, plus the stateless 2025 fallback) with the same tools as paid-upstream.ts, served on a
// plain node:http server. It records every tools/call it runs, so a test can assert exactly what
// reached the upstream in either era.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { listenRecording, type ReceivedCall, type RecordingUpstream } from './paid-upstream.js';

export type DualEraUpstream = RecordingUpstream<ReceivedCall & { era: 'legacy' | 'modern' }>;

export async function startDualEraUpstream(): Promise<DualEraUpstream> {
  const calls: DualEraUpstream['calls'] = [];
  const bodies: string[] = [];

  const handler = createMcpHandler(({ era }) => {
    const server = new McpServer({ name: 'dual-era-upstream', version: '1.0.0' });
    const text = (value: string) => ({ content: [{ type: 'text' as const, text: value }] });
    const recorded = (name: string, args: Record<string, unknown>) => calls.push({ name, arguments: args, headers: {}, era });
    server.registerTool('echo', { description: 'Returns its arguments as JSON text.', inputSchema: z.object({ text: z.string().optional() }) }, async (args) => {
      recorded('echo', args);
      return text(JSON.stringify(args));
    });
    server.registerTool('fetch_readable', { description: 'Fetches a page and returns its readable text.', inputSchema: z.object({ url: z.string() }) }, async (args) => {
      recorded('fetch_readable', args);
      return text('ok:' + JSON.stringify(args));
    });
    server.registerTool('costly', { description: 'An expensive lookup.', inputSchema: z.object({ q: z.string() }) }, async (args) => {
      recorded('costly', args);
      return text('ok:' + JSON.stringify(args));
    });
    server.registerTool('failing', { description: 'Always fails with a tool error.', inputSchema: z.object({}) }, async (args) => {
      recorded('failing', args);
      return { ...text('upstream failure'), isError: true };
    });
    server.registerTool('throwing', { description: 'Answers with a JSON-RPC error.', inputSchema: z.object({}) }, async (args) => {
      recorded('throwing', args);
      throw new Error('this tool throws');
    });
    server.registerTool('slow', { description: 'Waits ms milliseconds.', inputSchema: z.object({ ms: z.number() }) }, async (args) => {
      recorded('slow', args);
      await sleep(args.ms);
      return text('slept:' + args.ms);
    });
    server.registerTool(
      'with_schema',
      { description: 'Returns the temperature.', inputSchema: z.object({ city: z.string().optional() }), outputSchema: z.object({ temp: z.number() }) },
      async (args) => {
        recorded('with_schema', args);
        return { ...text(JSON.stringify({ temp: 21 })), structuredContent: { temp: 21 } };
      },
    );
    return server;
  });

  const serve = serveFetchHandler(handler, bodies);

  return listenRecording(serve, calls, bodies, async () => {
    await handler.close().catch(() => undefined);
  });
}

/** A node:http handler for an SDK fetch-style handler (`createMcpHandler`); every non-empty body is kept in `bodies`. */
export function serveFetchHandler(handler: { fetch(request: Request): Promise<Response> }, bodies: string[]): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return async (req, res) => {
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
    if (response.body) {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) res.write(chunk);
    }
    res.end();
  };
}
