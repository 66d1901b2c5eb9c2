// SPEC §10 metrics, observed the way Prometheus sees them: one paid flow through a real gateway
// (OAuth on, real SDK v1 client, real SDK upstream, dev checkout), with the /metrics exposition
// scraped after every step. The assertions are on the deltas between scrapes and on the label
// values of every series: none may carry a handle, URL, principal, token or argument.
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startTestGateway, testConfig } from '../helpers/gateway.js';
import { statusClass } from '../../src/observability/metrics.js';
import { startOidcIssuer } from '../helpers/oidc-issuer.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The text exposition format, enough of it for these assertions (no timestamps are emitted). */
function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`unparseable exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1] as string] = pair[2] as string;
    samples.push({ name: match[1] as string, labels, value: Number(match[3]) });
  }
  return samples;
}

/** Sum of the samples of `name` whose labels include `where` (0 when there are none). */
function valueOf(samples: Sample[], name: string, where: Record<string, string> = {}): number {
  return samples
    .filter((s) => s.name === name && Object.entries(where).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0);
}

function promtoolCheckMetrics(text: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('promtool', ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, output }));
    child.stdin.end(text);
  });
}

// ---- the flow, run once; each test below asserts one behaviour of it ----

const PRINCIPAL = 'principal-metrics-7Qx';
const ARGUMENT = 'arg-marker-Vb3k';

// A real OpenID Provider (test/helpers/oidc-issuer.ts): the principal signs in by authorization code.
const issuer = await startOidcIssuer();
t.teardown(() => issuer.close());
const upstream = await startPaidUpstream('stateless-json');
t.teardown(() => upstream.close());
// Port 0: the gateway binds a free port; its public URL (and so the audience) names the bound one.
const gateway = await startTestGateway(
  t,
  testConfig(upstream.url, {
    server: { host: '127.0.0.1', port: 0, publicUrl: 'http://127.0.0.1:0' },
    auth: { mode: 'oauth', issuer: issuer.issuer, jwksUrl: issuer.jwksUri, authorizationServers: [issuer.issuer] },
  }),
);
const bearer = await issuer.tokenFor({ clientId: 'mcp-client', sub: PRINCIPAL, scope: 'mcp:use', resource: gateway.config.auth.audience });
const authHeaders = { authorization: `Bearer ${bearer}` };

async function scrape(): Promise<{ text: string; samples: Sample[] }> {
  const response = await fetch(`${gateway.origin}${gateway.config.metrics.path}`);
  const text = await response.text();
  return { text, samples: parseExposition(text) };
}

const client = new Client({ name: 'metrics-test', version: '1.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url), { requestInit: { headers: authHeaders } }));
t.teardown(() => client.close());

const atStart = await scrape();
const challenge = await client.callTool({ name: 'fetch_readable', arguments: { url: `https://example.com/${ARGUMENT}` } });
const meta = (challenge._meta as Record<string, { checkoutUrl: string; retry: { value: string } }>)['xyz.tollbooth/challenge'];
if (!meta) throw new Error('the first call was not a challenge');
const handle = meta.retry.value;
const afterChallenge = await scrape();
const pay = await fetch(`${meta.checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '', redirect: 'manual' });
if (pay.status !== 303) throw new Error(`checkout answered ${pay.status}`);
const afterPay = await scrape();
const paid = await client.callTool({ name: 'fetch_readable', arguments: { url: `https://example.com/${ARGUMENT}`, tollboothToken: handle } });
const afterSpend = await scrape();
const failed = await client.callTool({ name: 'failing', arguments: { tollboothToken: handle } });
const afterRefund = await scrape();
const unknown = await fetch(gateway.url, {
  method: 'POST',
  headers: { ...authHeaders, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
  body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: `x/${ARGUMENT}`, params: {} }),
});
await unknown.text();
const noToken = await fetch(gateway.url, {
  method: 'POST',
  headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
  body: JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/list', params: {} }),
});
await noToken.text();
const atEnd = await scrape();

const delta = (from: { samples: Sample[] }, to: { samples: Sample[] }, name: string, where: Record<string, string> = {}) =>
  valueOf(to.samples, name, where) - valueOf(from.samples, name, where);

t.test('the flow itself went as planned (challenge, paid call, refunded tool error)', async (t) => {
  t.equal(challenge.isError, true);
  t.not(paid.isError, true);
  t.equal(failed.isError, true);
  t.same((failed._meta)?.['xyz.tollbooth/receipt'], undefined, 'no receipt for a refunded call');
});

t.test('a challenge counts one challenged paid call and one opened charge', async (t) => {
  t.equal(delta(atStart, afterChallenge, 'tollbooth_paid_calls_total', { tool: 'fetch_readable', sku: 'research', outcome: 'challenged' }), 1);
  t.equal(delta(atStart, afterChallenge, 'tollbooth_paid_calls_total', { outcome: 'authorised' }), 0);
  t.equal(delta(atStart, afterChallenge, 'tollbooth_charges_opened_total', { sku: 'research' }), 1);
});

t.test('tollbooth_pending_charges is read at scrape time: 0, then 1 after the challenge, 0 after settlement', async (t) => {
  t.equal(valueOf(atStart.samples, 'tollbooth_pending_charges'), 0);
  t.equal(valueOf(afterChallenge.samples, 'tollbooth_pending_charges'), 1);
  t.equal(valueOf(afterPay.samples, 'tollbooth_pending_charges'), 0);
});

t.test('paying settles one charge as granted and grants the SKU credits', async (t) => {
  t.equal(delta(afterChallenge, afterPay, 'tollbooth_settlements_total', { sku: 'research', result: 'granted' }), 1);
  t.equal(delta(afterChallenge, afterPay, 'tollbooth_settlements_total'), 1, 'no other settlement result moved');
  t.equal(delta(afterChallenge, afterPay, 'tollbooth_credits_total', { sku: 'research', kind: 'granted' }), 3);
});

t.test('a paid call counts as authorised and spends its cost', async (t) => {
  t.equal(delta(afterPay, afterSpend, 'tollbooth_paid_calls_total', { tool: 'fetch_readable', sku: 'research', outcome: 'authorised' }), 1);
  t.equal(delta(afterPay, afterSpend, 'tollbooth_credits_total', { sku: 'research', kind: 'spent' }), 1);
  t.equal(delta(afterPay, afterSpend, 'tollbooth_credits_total', { kind: 'refunded' }), 0);
  t.equal(delta(afterPay, afterSpend, 'tollbooth_upstream_duration_seconds_count', { method: 'tools/call', outcome: 'answered' }), 1);
});

t.test('a tool error refunds its reservation: refunded moves, spent does not', async (t) => {
  t.equal(delta(afterSpend, afterRefund, 'tollbooth_paid_calls_total', { tool: 'failing', sku: 'research', outcome: 'authorised' }), 1);
  t.equal(delta(afterSpend, afterRefund, 'tollbooth_credits_total', { sku: 'research', kind: 'refunded' }), 1);
  t.equal(delta(afterSpend, afterRefund, 'tollbooth_credits_total', { kind: 'spent' }), 0);
});

t.test('tollbooth_mcp_requests_total counts by method, era and status class; an unknown method is `other`', async (t) => {
  t.equal(delta(atStart, afterChallenge, 'tollbooth_mcp_requests_total', { method: 'tools/call', status: '2xx' }), 1);
  t.equal(delta(afterRefund, atEnd, 'tollbooth_mcp_requests_total', { method: 'other' }), 1);
  const methods = new Set(atEnd.samples.filter((s) => s.name === 'tollbooth_mcp_requests_total').map((s) => s.labels.method));
  t.ok(methods.has('initialize'), 'the client handshake is counted');
  t.notOk([...methods].some((m) => m?.includes(ARGUMENT)), 'the unknown method name is not a label value');
  for (const sample of atEnd.samples.filter((s) => s.name === 'tollbooth_mcp_requests_total')) {
    t.match(sample.labels.era, /^(legacy|modern)$/, 'era is legacy or modern');
    t.match(sample.labels.status, /^[2-5]xx$/, 'status is a status class (SPEC §20)');
  }
});

t.test('a request without a bearer token counts one auth failure, reason missing_token', async (t) => {
  t.equal(noToken.status, 401);
  t.equal(delta(afterRefund, atEnd, 'tollbooth_auth_failures_total', { reason: 'missing_token' }), 1);
  t.equal(delta(afterRefund, atEnd, 'tollbooth_auth_failures_total'), 1, 'no other reason moved');
  t.equal(delta(afterRefund, atEnd, 'tollbooth_mcp_requests_total', { method: 'tools/list', status: '4xx' }), 1);
});

t.test('tollbooth_mcp_request_duration_seconds has buckets from 0.25 ms to 30 s', async (t) => {
  const bounds = new Set(atEnd.samples.filter((s) => s.name === 'tollbooth_mcp_request_duration_seconds_bucket').map((s) => s.labels.le));
  t.ok(bounds.has('0.00025'), 'smallest bucket 0.25 ms');
  t.ok(bounds.has('30'), 'largest finite bucket 30 s');
  t.ok(bounds.has('+Inf'));
  const finite = [...bounds].filter((b) => b !== '+Inf').map(Number);
  t.equal(Math.min(...finite), 0.00025);
  t.equal(Math.max(...finite), 30);
});

t.test('tollbooth_store_up is 1 while the store answers', async (t) => {
  t.equal(valueOf(atEnd.samples, 'tollbooth_store_up'), 1);
});

t.test("prom-client's default process metrics are on, without the nodejs_active_*_total gauges", async (t) => {
  const names = new Set(atEnd.samples.map((s) => s.name));
  for (const name of ['process_cpu_user_seconds_total', 'process_resident_memory_bytes', 'nodejs_heap_size_used_bytes', 'nodejs_eventloop_lag_seconds']) t.ok(names.has(name), name);
  t.notOk([...names].some((n) => /^nodejs_active_.*_total$/.test(n)), 'no nodejs_active_*_total');
});

t.test('no label value carries a handle, URL, principal, bearer token or argument', async (t) => {
  const forbidden: Record<string, string> = {
    'the handle prefix': 'tb_s_',
    'a URL': 'http',
    'the principal': PRINCIPAL,
    'the argument': ARGUMENT,
    'the handle': handle,
    'the bearer token': bearer.slice(0, 20),
    'the argument host': 'example.com',
    'the client address': '127.0.0.1',
  };
  const values = atEnd.samples.flatMap((s) => Object.values(s.labels));
  t.ok(values.length > 50, `${values.length} label values checked`);
  t.ok(values.includes('fetch_readable') && values.includes('research'), 'the parser sees label values (the scan is not vacuous)');
  for (const [what, marker] of Object.entries(forbidden)) {
    t.equal(values.filter((v) => v.includes(marker)).length, 0, `no label value contains ${what}`);
  }
  t.notOk(atEnd.text.includes(handle), 'the handle appears nowhere in the exposition');
});

t.test('promtool check metrics accepts the live /metrics output', async (t) => {
  const { code, output } = await promtoolCheckMetrics(atEnd.text);
  t.equal(code, 0, output);
  t.equal(output.trim(), '', 'no lint findings');
});

t.test('promtool check metrics rejects a broken exposition (negative control)', async (t) => {
  const { code } = await promtoolCheckMetrics(`${atEnd.text}# TYPE nodejs_active_handles_total gauge\nnodejs_active_handles_total 3\n`);
  t.not(code, 0, 'a gauge named _total is flagged');
});

// SPEC §20: an upstream chooses its status codes; they must not become label values.
t.test('statusClass maps every code to 2xx, 3xx, 4xx or 5xx; anything outside 200–599 counts as 5xx', async (t) => {
  t.same([200, 204, 299, 301, 399, 400, 418, 499, 500, 503, 599].map(statusClass), ['2xx', '2xx', '2xx', '3xx', '3xx', '4xx', '4xx', '4xx', '5xx', '5xx', '5xx']);
  t.same([0, 101, 199, 600, 999, Number.NaN, 250.5].map(statusClass), ['5xx', '5xx', '5xx', '5xx', '5xx', '5xx', '5xx']);
});

t.test("an upstream's odd status codes (299, 418, 599) are counted by class, never as raw label values", async (t) => {
  const odd = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      const id = (JSON.parse(body) as { id: number }).id;
      res.writeHead(id, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id, result: {} }));
    });
  });
  await new Promise<void>((resolve) => odd.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => odd.close(() => resolve())));
  const gw = await startTestGateway(t, testConfig(`http://127.0.0.1:${(odd.address() as AddressInfo).port}/mcp`));
  for (const id of [299, 418, 599]) {
    const response = await fetch(gw.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id, method: 'ping', params: {} }),
    });
    await response.text();
    t.equal(response.status, id, `the client still gets the upstream's ${id}`);
  }
  const samples = parseExposition(await (await fetch(`${gw.origin}/metrics`)).text()).filter((s) => s.name === 'tollbooth_mcp_requests_total');
  t.same(samples.map((s) => s.labels.status).sort(), ['2xx', '4xx', '5xx']);
  t.same(samples.map((s) => [s.labels.method, s.labels.status, s.value]).sort(), [['ping', '2xx', 1], ['ping', '4xx', 1], ['ping', '5xx', 1]]);
});
