// The real upstreams of the interop matrix (issue 2), each started the way an operator would run it:
// - server-everything (the reference server of the MCP project) in streamableHttp mode: sessions,
//   SSE replies, an event store, server→client requests — run as a child process on a free port;
// - an SDK v1 stateless JSON server: test/helpers/paid-upstream.ts in 'stateless-json' mode;
// - an SDK v2 `createMcpHandler` dual-era server (2026-07-28 per request, 2025 stateless fallback);
// - the stdio fixture (test/fixtures/stdio-server.ts), which the gateway spawns via upstream.command.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { McpServer, acceptedContent, createMcpHandler, inputRequired, type McpHttpHandler } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { freePort } from './gateway.js';

export interface RunningUpstream {
  /** http://127.0.0.1:PORT/mcp */
  url: string;
  close(): Promise<void>;
}

/**
 * The stdio fixture as an upstream.command (tap's NODE_OPTIONS must be cleared in the child env). tsx by its
 * resolved URL: a child runs in its config file's directory, from where the bare name may not resolve.
 */
export const STDIO_FIXTURE_COMMAND = [process.execPath, '--import', import.meta.resolve('tsx'), fileURLToPath(new URL('../fixtures/stdio-server.ts', import.meta.url))];

/** The environment for children the tests spawn: tap's hooks off (they slow children and are not needed). */
export const childEnv = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => ({ ...process.env, NODE_OPTIONS: '', ...extra });

/** The server-everything launcher (`node <it> stdio|streamableHttp`). */
export const everythingEntry = (): string => {
  const require = createRequire(import.meta.url);
  const manifest = require.resolve('@modelcontextprotocol/server-everything/package.json');
  return join(dirname(manifest), 'dist', 'index.js');
};

/**
 * `@modelcontextprotocol/server-everything streamableHttp` on a free port (it reads PORT from the
 * environment and says "listening on port N" on stderr once it accepts connections).
 */
export async function startServerEverything(): Promise<RunningUpstream> {
  // It cannot bind port 0 and report it: a picked port, and a fresh one if another process took it first.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startServerEverythingOn(await freePort());
    } catch (error) {
      if (attempt >= 3 || !String((error as Error).message).includes('EADDRINUSE')) throw error;
    }
  }
}

async function startServerEverythingOn(port: number): Promise<RunningUpstream> {
  const child: ChildProcess = spawn(process.execPath, [everythingEntry(), 'streamableHttp'], {
    env: childEnv({ PORT: String(port) }),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server-everything did not start within 15 s: ${stderr}`)), 15_000);
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
      if (stderr.includes('listening on port')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server-everything exited with ${String(code)}: ${stderr}`));
    });
  });
  child.stderr?.resume();
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * One factory for both eras (the SDK's recommended shape). Tools: echo, progress {steps} (one
 * notifications/progress per step), and ask: on 2026-07-28 it answers input_required with a form
 * elicitation and completes when the client's retry carries the answer (the modern form of a
 * server→client request); on the stateless 2025 fallback there is no channel back, so it says so.
 */
function dualEraServer(era: 'legacy' | 'modern'): McpServer {
  const server = new McpServer({ name: 'v2-dual-era', version: '2.4.0' });
  const text = (value: string) => ({ content: [{ type: 'text' as const, text: value }] });
  server.registerTool('echo', { description: 'Echoes its text.', inputSchema: z.object({ text: z.string() }) }, async ({ text: value }) => text(value));
  server.registerTool(
    'progress',
    { description: 'Sends `steps` progress notifications, then answers.', inputSchema: z.object({ steps: z.number().int() }) },
    async ({ steps }, ctx) => {
      const progressToken = ctx.mcpReq._meta?.progressToken;
      for (let i = 1; i <= steps; i++) {
        if (progressToken !== undefined) await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress: i, total: steps } });
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      return text(`done:${steps}`);
    },
  );
  const nameSchema = z.object({ name: z.string() });
  server.registerTool('ask', { description: 'Asks the client for a name (2026-07-28 input_required).', inputSchema: z.object({}) }, async (_args, ctx) => {
    if (era === 'legacy') return text('no client input on the stateless 2025 fallback');
    const answer = acceptedContent(ctx.mcpReq.inputResponses, 'name', nameSchema);
    if (answer === undefined) {
      return inputRequired({ inputRequests: { name: inputRequired.elicit({ message: 'Your name?', requestedSchema: nameSchema }) } });
    }
    return text(`hello ${answer.name}`);
  });
  return server;
}

/** A `createMcpHandler` server on node:http (the adapter @modelcontextprotocol/node would provide). */
export async function startDualEraServer(): Promise<RunningUpstream> {
  const handler = createMcpHandler(({ era }) => dualEraServer(era));
  const server = createServer((req, res) => {
    serveFetch(handler, req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    async close() {
      await handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function serveFetch(handler: McpHttpHandler, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const controller = new AbortController();
  res.once('close', () => controller.abort());
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one);
  }
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD' && chunks.length > 0;
  const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url ?? '/'}`, {
    method: req.method ?? 'GET',
    headers,
    body: hasBody ? Buffer.concat(chunks) : undefined,
    signal: controller.signal,
  });
  const response = await handler.fetch(request);
  const outHeaders: Record<string, string> = {};
  response.headers.forEach((value, name) => (outHeaders[name] = value));
  res.writeHead(response.status, outHeaders);
  res.flushHeaders();
  if (response.body === null) {
    res.end();
    return;
  }
  const reader = response.body.getReader();
  controller.signal.addEventListener('abort', () => void reader.cancel().catch(() => undefined), { once: true });
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      res.write(value);
    }
  } catch {
    // the client went away
  }
  res.end();
}

export type { Server };
