// The baseline: the cheapest correct JSON-RPC proxy (SPEC §12). Fastify's default JSON parser, then
// @fastify/reply-from re-serialising the parsed body to the origin. No policy, no classification,
// no paywall: whatever the gateway costs above this is the price of what it does.
//
// Run alone: node --import tsx bench/bare-proxy.ts --upstream http://127.0.0.1:PORT/mcp [--port N]
import replyFrom from '@fastify/reply-from';
import Fastify from 'fastify';
import { isEntrypoint } from '../src/research/main-module.js';

export async function createBareProxy(upstreamUrl: string) {
  const upstream = new URL(upstreamUrl);
  const app = Fastify({ logger: false });
  await app.register(replyFrom, { base: upstream.origin });
  app.post('/mcp', (request, reply) => reply.from(upstream.pathname, { body: request.body as object }));
  return app;
}

if (isEntrypoint(import.meta.url)) {
  const arg = (name: string): string | undefined => {
    const at = process.argv.indexOf(name);
    return at === -1 ? undefined : process.argv[at + 1];
  };
  const upstream = arg('--upstream');
  if (!upstream) throw new Error('--upstream http://127.0.0.1:PORT/mcp is required');
  const app = await createBareProxy(upstream);
  await app.listen({ host: '127.0.0.1', port: Number(arg('--port') ?? 0) });
  const address = app.server.address();
  process.stdout.write(`listening ${typeof address === 'object' && address ? address.port : 0}\n`);
  process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));
}
