// Runs the hostile-input corpus (hostile-cases.ts) against two real gateways: one in front of a real
// SDK upstream, one in front of a deliberately misbehaving upstream. Every case checks the invariants
// of SPEC §11 — the gateway answers (and is still alive after), never with 500, never with a stack
// trace, with exactly the expected JSON-RPC error or refusal — and the paywall invariant: the
// upstream received exactly the priced calls the case allows, each one backed by a credit reserved
// for it (spent, or refunded after a failure), and never saw the handle.
import t from 'tap';
import { request } from 'undici';
import { cases, type Expectation, type HostileCase } from './hostile-cases.js';
import { startHostileUpstream } from '../helpers/hostile-upstream.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';

const PRICED = new Map([
  ['fetch_readable', 1],
  ['costly', 2],
]);

const sdkUpstream = await startPaidUpstream('stateless-json');
const hostileUpstream = await startHostileUpstream();
t.teardown(() => sdkUpstream.close());
t.teardown(() => hostileUpstream.close());

function config(upstreamUrl: string) {
  return testConfig(upstreamUrl, {
    server: { host: '127.0.0.1', port: 0, bodyLimit: '64kb', allowedHosts: ['127.0.0.1'] },
    upstream: { url: upstreamUrl, callDeadline: '1500ms', maxResponseBytes: '64kb' },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 1000 } },
  });
}

const sdkGateway = await startTestGateway(t, config(sdkUpstream.url));
const hostileGateway = await startTestGateway(t, config(hostileUpstream.url));

interface Target {
  gateway: TestGateway;
  handle: string;
  /** priced tools/call requests the upstream has received, weighted by cost */
  pricedCalls(): { count: number; cost: number };
  sawHandle(handle: string): boolean;
}

const BASE_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

/** undici's request, not fetch: fetch would drop a spoofed Host header. */
async function post(gateway: TestGateway, body: string | Buffer, headers: Record<string, string> = {}): Promise<{ status: number; contentType: string; text: string }> {
  const response = await request(gateway.url, { method: 'POST', headers: { ...BASE_HEADERS, ...headers }, body });
  const contentType = response.headers['content-type'];
  return { status: response.statusCode, contentType: typeof contentType === 'string' ? contentType : '', text: await response.body.text() };
}

/** Challenge, pay on the dev checkout page, return the funded handle. */
async function fundedHandle(gateway: TestGateway): Promise<string> {
  const reply = await post(gateway, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fetch_readable', arguments: { url: 'x' } } }));
  const challenge = (JSON.parse(reply.text) as { result: { _meta: Record<string, { checkoutUrl: string; retry: { value: string } }> } }).result._meta['xyz.tollbooth/challenge']!;
  const pay = await fetch(`${challenge.checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '', redirect: 'manual' });
  if (pay.status !== 303) throw new Error(`paying failed: ${pay.status}`);
  return challenge.retry.value;
}

function weigh(names: string[]): { count: number; cost: number } {
  const priced = names.filter((name) => PRICED.has(name));
  return { count: priced.length, cost: priced.reduce((sum, name) => sum + (PRICED.get(name) as number), 0) };
}

const targets: Record<'sdk' | 'hostile', Target> = {
  sdk: {
    gateway: sdkGateway,
    handle: await fundedHandle(sdkGateway),
    pricedCalls: () => weigh(sdkUpstream.calls.map((c) => c.name)),
    sawHandle: (handle) => sdkUpstream.sawText(handle),
  },
  hostile: {
    gateway: hostileGateway,
    handle: await fundedHandle(hostileGateway),
    pricedCalls: () => weigh(hostileUpstream.calls.map((c) => c.name)),
    sawHandle: (handle) => hostileUpstream.bodies.some((b) => b.includes(handle)),
  },
};

async function credits(gateway: TestGateway): Promise<{ spent: number; refunded: number }> {
  const text = await (await fetch(`${gateway.origin}/metrics`)).text();
  const read = (kind: string) => Number(new RegExp(`^tollbooth_credits_total\\{[^}]*kind="${kind}"[^}]*\\} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  return { spent: read('spent'), refunded: read('refunded') };
}

const FULLWIDTH = (text: string) => [...text].map((c) => (/[A-Za-z0-9]/.test(c) ? String.fromCodePoint((c.codePointAt(0) as number) + 0xfee0) : c)).join('');

function bodyOf(testCase: HostileCase, handle: string): string | Buffer {
  const raw = testCase.request.body;
  if (Buffer.isBuffer(raw)) return raw;
  const text = typeof raw === 'string' ? raw : JSON.stringify(raw);
  return text
    .replaceAll('$HANDLE_UPPER', handle.toUpperCase())
    .replaceAll('$HANDLE_FULLWIDTH', FULLWIDTH(handle))
    .replaceAll('$HANDLE_LOOKALIKE', handle.replace('tb_s_', 'tb_\u0455_'))
    .replaceAll('$HANDLE', handle);
}

/** The JSON message(s) of a reply: JSON, or the last message of an event stream. */
function messageOf(contentType: string, text: string): unknown {
  if (!contentType.startsWith('text/event-stream')) return JSON.parse(text);
  const data = text
    .split(/\n\n/)
    .map((event) => event.split('\n').filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trim()).join('\n'))
    .filter((d) => d.startsWith('{') || d.startsWith('['));
  return JSON.parse(data[data.length - 1] as string);
}

type Message = { id?: unknown; result?: Record<string, unknown> & { _meta?: Record<string, { reason?: string }> }; error?: { code: number; message: string } };

function check(t: Tap, message: Message, expect: Expectation, where: string): void {
  if ('batch' in expect) {
    t.ok(Array.isArray(message), `${where}: a batch reply`);
    const replies = message as unknown as Message[];
    t.equal(replies.length, expect.batch.length, `${where}: one reply per request`);
    expect.batch.forEach((entry, i) => replies[i] && check(t, replies[i], entry, `${where}[${i}]`));
    return;
  }
  const meta = message.result?._meta ?? {};
  if ('rpcError' in expect) t.equal(message.error?.code, expect.rpcError, `${where}: JSON-RPC error ${expect.rpcError}`);
  else if ('challenge' in expect) t.equal(meta['xyz.tollbooth/challenge']?.reason, expect.challenge, `${where}: challenge ${expect.challenge}`);
  else if ('refusal' in expect) t.equal(meta['xyz.tollbooth/refusal']?.reason, expect.refusal, `${where}: refusal ${expect.refusal}`);
  else if ('receipt' in expect) t.ok(meta['xyz.tollbooth/receipt'], `${where}: ran with a receipt`);
  else if (expect.upstream === 'result') {
    t.ok(message.result, `${where}: the upstream's result`);
    t.notOk(meta['xyz.tollbooth/challenge'] ?? meta['xyz.tollbooth/refusal'], `${where}: not the gateway's own answer`);
  } else t.equal(message.error?.code, expect.upstream, `${where}: the upstream's error ${expect.upstream}`);
  if ('rpcError' in expect) t.type(message.error?.message, 'string', `${where}: the error says what is wrong`);
}

type Tap = Pick<typeof t, 'ok' | 'notOk' | 'equal' | 'type' | 'not' | 'notMatch'>;

// Frames of a JavaScript stack trace, or a source path.
const STACK_TRACE = /\n\s+at |\bat [\w$.<>]+ \(|node:internal|\/work\/|\.(?:[cm]?js|ts):\d+:\d+/;

t.ok(cases.length >= 60, `the corpus holds ${cases.length} cases`);

t.test('negative control: the stack-trace check recognises a real stack trace', async (t) => {
  t.match(new Error('boom').stack ?? '', STACK_TRACE);
  t.match('Error: boom\n    at handler (/srv/upstream/index.js:12:5)', STACK_TRACE);
});

for (const testCase of cases) {
  t.test(testCase.name, async (t) => {
    const target = targets[testCase.upstream ? 'hostile' : 'sdk'];
    if (testCase.upstream) hostileUpstream.behaviour = testCase.upstream;
    const { gateway, handle } = target;
    const creditsBefore = await credits(gateway);
    const callsBefore = target.pricedCalls();
    const logLinesBefore = gateway.logs().length;

    const reply = await post(gateway, bodyOf(testCase, handle), testCase.request.headers);

    t.not(reply.status, 500, 'never 500');
    t.equal(reply.status, testCase.status, `HTTP ${testCase.status}`);
    t.notMatch(reply.text, STACK_TRACE, 'no stack trace or source path in the body');
    let message: Message | undefined;
    try {
      message = messageOf(reply.contentType, reply.text) as Message;
    } catch {
      t.fail(`the body is JSON: ${reply.text.slice(0, 200)}`);
    }
    if (message) check(t, message, testCase.expect, 'reply');

    const health = await fetch(`${gateway.origin}/healthz`);
    t.equal(health.status, 200, 'the gateway is still alive');

    const creditsAfter = await credits(gateway);
    const callsAfter = target.pricedCalls();
    const spent = creditsAfter.spent - creditsBefore.spent;
    const reserved = spent + creditsAfter.refunded - creditsBefore.refunded;
    t.equal(spent, testCase.spends ?? 0, `spent ${testCase.spends ?? 0} credit(s)`);
    t.equal(callsAfter.count - callsBefore.count, testCase.upstreamPricedCalls ?? 0, `the upstream received ${testCase.upstreamPricedCalls ?? 0} priced call(s)`);
    t.ok(callsAfter.cost - callsBefore.cost <= reserved, 'every priced call that reached the upstream had its credits reserved');
    t.notOk(target.sawHandle(handle), 'the upstream never saw the handle');
    const errors = gateway.logs().slice(logLinesBefore).filter((line) => line.evt === 'internal_error');
    t.same(errors, [], 'no internal error logged');
  });
}
