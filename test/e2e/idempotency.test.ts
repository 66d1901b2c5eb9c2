// Idempotent retries across replicas (SPEC §24): three `tollbooth start` processes on one real Redis,
// a real MCP upstream behind a front the test can make fail once, a handle funded through the dev
// checkout. 50 duplicates of one keyed call spread over the three reach the upstream once, are charged
// once and all get the same result bytes; a finished call is replayed by another replica; the key with
// other arguments is refused idempotency_conflict; a released call's retry runs and is charged once.
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { Agent, request } from 'undici';
import { balanceOf, callTool, connectStore, payDevCheckout, redisGatewayConfig, scrape, startGatewayProcess, sumCounter } from '../helpers/gateway-process.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';

type Json = Record<string, any>;

const CREDITS = 10;
const DUPLICATES = 50;

/** A front before the upstream: passes every request through, except that, armed, it answers the next tools/call 503 itself. */
async function startFlakyFront(target: string): Promise<{ url: string; failNextCall(): void; close(): Promise<void> }> {
  let armed = false;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (armed && body.includes('"tools/call"')) {
        armed = false;
        res.writeHead(503, { 'content-type': 'text/plain' }).end('unavailable');
        return;
      }
      const headers: Record<string, string> = {};
      for (const name of ['content-type', 'accept', 'mcp-protocol-version', 'mcp-session-id']) if (typeof req.headers[name] === 'string') headers[name] = req.headers[name];
      request(target, { method: (req.method ?? 'POST') as 'POST', headers, body: req.method === 'GET' ? undefined : body })
        .then(async (upstream) => {
          const type = upstream.headers['content-type'];
          res.writeHead(upstream.statusCode, typeof type === 'string' ? { 'content-type': type } : {});
          res.end(Buffer.from(await upstream.body.arrayBuffer()));
        })
        .catch(() => res.writeHead(502).end());
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    failNextCall: () => (armed = true),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

let nextId = 1;

/** One tools/call with an Idempotency-Key header: the reply's `result` as JSON text and parsed. */
async function keyedCall(url: string, key: string, name: string, args: Json, dispatcher?: Agent): Promise<{ status: number; raw: string; result: Json | undefined; error: Json | undefined }> {
  const id = nextId++;
  const response = await request(url, {
    method: 'POST',
    dispatcher,
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', 'idempotency-key': key },
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } }),
  });
  let text = await response.body.text();
  if (!text.startsWith('{')) text = text.split('\n').filter((line) => line.startsWith('data:')).pop()?.slice(5).trim() ?? '';
  const message = JSON.parse(text) as Json;
  // The replies are compact JSON, so the result re-serialised is its text as sent (key order included).
  return { status: response.statusCode, raw: JSON.stringify(message.result ?? null), result: message.result as Json | undefined, error: message.error as Json | undefined };
}

const receiptOf = (result: Json | undefined): Json | undefined => result?._meta?.['xyz.tollbooth/receipt'] as Json | undefined;
const refusalOf = (result: Json | undefined): Json | undefined => result?._meta?.['xyz.tollbooth/refusal'] as Json | undefined;

t.test('idempotent retries over 3 gateway processes on one Redis', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const front = await startFlakyFront(upstream.url);
  t.teardown(() => front.close());
  const keyPrefix = `tbidem${randomBytes(3).toString('hex')}:`;
  const target = { url: redis.url };
  const config = redisGatewayConfig(front.url, target, keyPrefix, {
    upstream: { url: front.url, callDeadline: '5s' },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: CREDITS } },
  });
  const gateways = await Promise.all([0, 1, 2].map(() => startGatewayProcess(t, config)));
  const [first, second, third] = gateways as [(typeof gateways)[0], (typeof gateways)[0], (typeof gateways)[0]];
  const store = await connectStore(t, target, keyPrefix);

  // Fund one handle as a payer would; each replica answers once, so all three have read the tool list.
  const challenge = await callTool(first.url, 'fetch_readable', { url: 'https://example.com/fund' });
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  const handle = challenge.handle;
  t.equal(await payDevCheckout(challenge.checkoutUrl, second.origin), 303, 'paid through the second replica');
  t.match(await callTool(third.url, 'fetch_readable', { url: 'https://example.com/fund', tollboothToken: handle }), { kind: 'paid', remaining: CREDITS - 1 });
  t.match(await callTool(second.url, 'fetch_readable', { url: 'https://example.com/warm' }), { kind: 'challenged' });
  let credits = CREDITS - 1;

  await t.test(`${DUPLICATES} parallel duplicates over the 3 processes: 1 upstream call, 1 charge, ${DUPLICATES} identical results`, async (t) => {
    const agent = new Agent({ connections: 32 });
    t.teardown(() => agent.close());
    const started = performance.now();
    const answers = await Promise.all(
      Array.from({ length: DUPLICATES }, (_, i) => keyedCall(gateways[i % 3]!.url, 'order-burst', 'slow', { ms: 400, tollboothToken: handle }, agent)),
    );
    const ms = Math.round(performance.now() - started);
    t.equal(upstream.callsOf('slow').length, 1, 'the upstream ran the tool once');
    credits -= 1;
    t.equal(await balanceOf(store, handle), credits, 'one credit spent');
    t.same([...new Set(answers.map((a) => a.status))], [200]);
    const distinct = [...new Set(answers.map((a) => a.raw))];
    t.equal(distinct.length, 1, 'every duplicate got the same result bytes');
    if (distinct.length > 1) t.comment(distinct.map((raw) => `${answers.filter((a) => a.raw === raw).length} × ${raw.slice(0, 300)}`).join('\n'));
    t.match(receiptOf(answers[0]?.result), { sku: 'research', cost: 1, remaining: credits }, 'with the first call\'s receipt');
    t.match(answers[0]?.result?.content, [{ type: 'text', text: 'slept:400' }]);
    const expositions = await Promise.all(gateways.map((gateway) => scrape(gateway.origin)));
    const replays = expositions.reduce((sum, text) => sum + sumCounter(text, 'tollbooth_idempotent_replays_total'), 0);
    t.equal(replays, DUPLICATES - 1, 'every other duplicate was a replay');
    t.comment(`${DUPLICATES} duplicates answered in ${ms} ms; replays per replica ${expositions.map((text) => sumCounter(text, 'tollbooth_idempotent_replays_total')).join('/')}`);
  });

  await t.test('a call finished on one replica is replayed by another; the key with other arguments is refused', async (t) => {
    const done = await keyedCall(first.url, 'order-2', 'fetch_readable', { url: 'https://example.com/a', tollboothToken: handle });
    credits -= 1;
    t.match(receiptOf(done.result), { remaining: credits });
    const replay = await keyedCall(second.url, 'order-2', 'fetch_readable', { url: 'https://example.com/a', tollboothToken: handle });
    t.equal(replay.raw, done.raw, 'the same result bytes, from another replica');
    const conflict = await keyedCall(third.url, 'order-2', 'fetch_readable', { url: 'https://example.com/b', tollboothToken: handle });
    t.match(refusalOf(conflict.result), { reason: 'idempotency_conflict' });
    t.equal(conflict.result?.isError, true);
    t.equal(upstream.callsOf('fetch_readable').filter((c) => String(c.arguments.url).endsWith('/a') || String(c.arguments.url).endsWith('/b')).length, 1, 'one upstream call for the three');
    t.equal(await balanceOf(store, handle), credits, 'one charge for the three');
  });

  await t.test('a released call keeps nothing: its retry runs, is charged once, and is then replayed', async (t) => {
    front.failNextCall();
    const failed = await keyedCall(first.url, 'order-3', 'fetch_readable', { url: 'https://example.com/flaky', tollboothToken: handle });
    t.match(refusalOf(failed.result), { reason: 'upstream_unavailable' });
    t.equal(await balanceOf(store, handle), credits, 'the failed call was released');
    const retry = await keyedCall(second.url, 'order-3', 'fetch_readable', { url: 'https://example.com/flaky', tollboothToken: handle });
    credits -= 1;
    t.match(receiptOf(retry.result), { remaining: credits }, 'the retry ran and was charged');
    const again = await keyedCall(third.url, 'order-3', 'fetch_readable', { url: 'https://example.com/flaky', tollboothToken: handle });
    t.equal(again.raw, retry.raw, 'then replayed');
    t.equal(upstream.callsOf('fetch_readable').filter((c) => String(c.arguments.url).endsWith('/flaky')).length, 1, 'the upstream ran it once');
    t.equal(await balanceOf(store, handle), credits, 'charged once');
  });

  await t.test('an invalid key is refused before anything runs', async (t) => {
    const answer = await keyedCall(first.url, 'caf\u00e9', 'fetch_readable', { url: 'https://example.com/c', tollboothToken: handle }).catch((error: Error) => ({ status: 0, error: { message: error.message } }) as const);
    // undici refuses a non-ASCII header value itself; a control character is sent as is.
    const sent = answer.status === 0 ? await keyedCall(first.url, 'k'.repeat(256), 'fetch_readable', { url: 'https://example.com/c', tollboothToken: handle }) : answer;
    t.equal(sent.status, 400);
    t.match(sent.error, { code: -32602, message: /Invalid idempotency key/ });
    t.equal(await balanceOf(store, handle), credits);
  });
});
