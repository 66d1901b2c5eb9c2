// SPEC §18 hot reload, as an operator does it: the real CLI (`node dist/cli.js start --config FILE`), the
// file edited in place, a real SIGHUP. Prices changed under load (calls in flight finish at the old price,
// new calls pay the new one, nothing fails); a broken file and a store change leave everything as it was
// with one error line; a server added then removed. Needs `npm run build` first.
import { writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { Agent, request } from 'undici';
import type { ConfigInput } from '../../src/config/schema.js';
import { testConfig } from '../helpers/gateway.js';
import { scrape, startGatewayProcess, sumCounter, type GatewayProcess } from '../helpers/gateway-process.js';
import { STDIO_FIXTURE_COMMAND } from '../helpers/interop-upstreams.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { waitFor } from '../helpers/clock.js';

type Json = Record<string, any>;

const upstream = await startPaidUpstream('stateless-json');
t.teardown(() => upstream.close());
const other = await startPaidUpstream('stateless-json');
t.teardown(() => other.close());

function baseConfig(tools: Json = { slow: { sku: 'research', cost: 1 }, fetch_readable: { sku: 'research', cost: 1 } }): ConfigInput {
  return {
    ...testConfig(upstream.url),
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 10_000 } },
    tools,
    limits: { perHandle: { ratePerSecond: 10_000, burst: 10_000 }, challengesPerClient: { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 10_000 },
  };
}

/** Rewrites the gateway's config file in place (port kept), as an operator edits it. */
function rewrite(gateway: GatewayProcess, input: ConfigInput | string): void {
  const text = typeof input === 'string' ? input : JSON.stringify({ ...input, server: { ...input.server, host: '127.0.0.1', port: gateway.port } }, null, 2);
  writeFileSync(gateway.configPath, text);
}

const reloadLines = (gateway: GatewayProcess) => gateway.logs().filter((line) => line.evt === 'config_reload');

/** SIGHUP, then waits for the reload's result line. */
async function hangUp(gateway: GatewayProcess): Promise<Json> {
  const before = reloadLines(gateway).length;
  gateway.child.kill('SIGHUP');
  const deadline = Date.now() + 30_000;
  while (reloadLines(gateway).length === before) {
    if (Date.now() > deadline) throw new Error(`no config_reload line after SIGHUP:\n${gateway.output()}`);
    await sleep(20);
  }
  const lines = reloadLines(gateway);
  t.equal(lines.length, before + 1, 'one reload line per SIGHUP');
  return lines[lines.length - 1] as Json;
}

let nextId = 1;
const agent = new Agent({ connections: 16 });
t.teardown(() => agent.close());

async function post(url: string, message: Json, extraHeaders: Record<string, string> = {}): Promise<{ status: number; body: Json; session?: string }> {
  const response = await request(url, {
    method: 'POST',
    dispatcher: agent,
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', ...extraHeaders },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, ...message }),
  });
  const text = await response.body.text();
  let body: Json;
  try {
    body = JSON.parse(/^data: (.*)$/m.exec(text)?.[1] ?? text) as Json;
  } catch {
    body = { unparsed: text.slice(0, 200) };
  }
  const session = response.headers['mcp-session-id'];
  return { status: response.statusCode, body, ...(typeof session === 'string' ? { session } : {}) };
}
const call = (url: string, name: string, args: Json) => post(url, { method: 'tools/call', params: { name, arguments: args } });
const receiptOf = (reply: { body: Json }): Json | undefined => reply.body.result?._meta?.['xyz.tollbooth/receipt'];
const priceIn = async (url: string, tool: string): Promise<Json | undefined> =>
  ((await post(url, { method: 'tools/list', params: {} })).body.result?.tools as Json[] | undefined)?.find((entry) => entry.name === tool)?._meta?.['xyz.tollbooth/price'];

async function fund(url: string): Promise<string> {
  const challenge = (await call(url, 'fetch_readable', { url: 'fund' })).body.result?._meta?.['xyz.tollbooth/challenge'];
  const paid = await fetch(`${challenge.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  if (paid.status !== 303) throw new Error(`pay failed: ${paid.status}`);
  return challenge.retry.value as string;
}

const configSha = async (origin: string): Promise<string | undefined> => /^tollbooth_config_info\{sha="([0-9a-f]+)"\} 1$/m.exec(await scrape(origin))?.[1];

t.test('prices changed under load: calls in flight finish at the old price, new calls pay the new one, none fails', async (t) => {
  const gateway = await startGatewayProcess(t, baseConfig());
  const handle = await fund(gateway.url);
  const shaBefore = await configSha(gateway.origin);
  t.match(shaBefore, /^[0-9a-f]{12}$/, 'tollbooth_config_info names the running config');
  t.equal(sumCounter(await scrape(gateway.origin), 'tollbooth_config_reloads_total'), 0, 'the start is not a reload');

  // Load: four loops of priced calls that run across the reload.
  let loading = true;
  const results: { cost: number | undefined; status: number; sentAt: number }[] = [];
  const loop = async (): Promise<void> => {
    while (loading) {
      const sentAt = Date.now();
      const reply = await call(gateway.url, 'fetch_readable', { url: 'load', tollboothToken: handle });
      results.push({ cost: receiptOf(reply)?.cost, status: reply.status, sentAt });
    }
  };
  const loops = [loop(), loop(), loop(), loop()];
  // Calls in flight across the reload: `slow` holds them at the upstream for 1.5 s.
  const slowBefore = upstream.callsOf('slow').length;
  const inFlight = [1, 2, 3].map(() => call(gateway.url, 'slow', { ms: 1_500, tollboothToken: handle }));
  // Until the three are at the upstream and the load has been paid at the old price: then the reload.
  await waitFor(() => upstream.callsOf('slow').length >= slowBefore + 3 && results.some((result) => result.cost === 1), 'calls in flight and load before the reload');

  rewrite(gateway, baseConfig({ slow: { sku: 'research', cost: 2 }, fetch_readable: { sku: 'research', cost: 3 } }));
  const line = await hangUp(gateway);
  const reloadedAt = Date.now();
  t.equal(line.result, 'success');
  t.equal(line.level, 'info', 'a success is logged at info');

  const newSlow = await call(gateway.url, 'slow', { ms: 10, tollboothToken: handle });
  await waitFor(() => results.filter((result) => result.sentAt >= reloadedAt).length >= 8, 'load after the reload');
  loading = false;
  await Promise.all(loops);

  for (const reply of await Promise.all(inFlight)) t.equal(receiptOf(reply)?.cost, 1, 'a call in flight finished at the price it started with');
  t.equal(receiptOf(newSlow)?.cost, 2, 'a new call pays the new price');
  t.same(await priceIn(gateway.url, 'fetch_readable'), { sku: 'research', cost: 3, amount: '5.00', currency: 'USDC', credits: 10_000, label: 'Research tools' }, 'tools/list shows the new price');
  const failed = results.filter((result) => result.status !== 200 || result.cost === undefined);
  t.equal(failed.length, 0, `no request failed across the reload (${results.length} calls)`);
  t.ok(results.some((result) => result.cost === 1) && results.some((result) => result.cost === 3), 'the load ran before and after the reload');
  t.same([...new Set(results.filter((result) => result.sentAt >= reloadedAt).map((result) => result.cost))], [3], 'calls sent after the reload pay the new price');

  const metrics = await scrape(gateway.origin);
  t.equal(sumCounter(metrics, 'tollbooth_config_reloads_total', { result: 'success' }), 1);
  const shaAfter = await configSha(gateway.origin);
  t.match(shaAfter, /^[0-9a-f]{12}$/);
  t.not(shaAfter, shaBefore, 'tollbooth_config_info follows the effective config');
  t.equal((metrics.match(/^tollbooth_config_info\{/gm) ?? []).length, 1, 'one config_info series at a time');
  t.equal(await gateway.stop(), 0, 'SIGTERM after a reload still drains and exits 0');
});

t.test('a broken file changes nothing and is named in one error line', async (t) => {
  const gateway = await startGatewayProcess(t, baseConfig());
  const shaBefore = await configSha(gateway.origin);
  const broken = JSON.stringify(baseConfig({ slow: { sku: 'research', cost: 2 }, fetch_readable: { sku: 'nope', cost: 3 } }), null, 2).replace('"port": 0', `"port": ${gateway.port}`);
  rewrite(gateway, broken);
  const line = await hangUp(gateway);
  t.equal(line.result, 'invalid');
  t.equal(line.level, 'error', 'logged as an error');
  t.equal(line.file, gateway.configPath, 'names the file');
  t.equal(line.path, 'tools.fetch_readable.sku', 'names the path');
  t.type(line.line, 'number', 'names the line');
  t.match(String(line.msg), `${gateway.configPath}:${line.line}:`);
  t.equal(gateway.logs().filter((entry) => entry.level === 'error' || entry.level === 'fatal').length, 1, 'exactly one error line');
  t.same(await priceIn(gateway.url, 'slow'), { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 10_000, label: 'Research tools' }, 'the old prices still apply');
  t.equal(sumCounter(await scrape(gateway.origin), 'tollbooth_config_reloads_total', { result: 'invalid' }), 1);
  t.equal(await configSha(gateway.origin), shaBefore, 'the same config runs');

  // YAML that does not parse at all: the same.
  rewrite(gateway, 'server: { port: [\n');
  const syntax = await hangUp(gateway);
  t.equal(syntax.result, 'invalid');
  t.type(syntax.line, 'number');
  t.same(await priceIn(gateway.url, 'slow'), { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 10_000, label: 'Research tools' });
});

t.test('a store change is refused: nothing changes, one error line names it', async (t) => {
  const gateway = await startGatewayProcess(t, baseConfig());
  const shaBefore = await configSha(gateway.origin);
  rewrite(gateway, { ...baseConfig({ slow: { sku: 'research', cost: 5 } }), store: { type: 'redis', redis: { url: 'redis://127.0.0.1:1/0' } } });
  const line = await hangUp(gateway);
  t.equal(line.result, 'refused');
  t.equal(line.path, 'store');
  t.equal(line.level, 'error');
  t.type(line.line, 'number');
  t.match(String(line.msg), /store: changed, but a running gateway cannot change it/);
  t.same((await priceIn(gateway.url, 'slow'))?.cost, 1, 'the price change in the same file did not apply either');
  t.equal(sumCounter(await scrape(gateway.origin), 'tollbooth_config_reloads_total', { result: 'refused' }), 1);
  t.equal(await configSha(gateway.origin), shaBefore);
  t.equal((await fetch(`${gateway.origin}/readyz`)).status, 200, 'still on its memory store');
});

t.test('a server added, then removed', async (t) => {
  const gateway = await startGatewayProcess(t, baseConfig());
  const extra = `${gateway.origin}/extra`;
  t.equal((await post(extra, { method: 'tools/list', params: {} })).status, 404, 'no /extra before');

  const withExtra = { ...baseConfig(), servers: { extra: { path: '/extra', upstream: { url: other.url }, tools: { costly: { sku: 'research', cost: 4 } } } } } as ConfigInput;
  rewrite(gateway, withExtra);
  t.equal((await hangUp(gateway)).result, 'success');
  t.same((await priceIn(extra, 'costly'))?.cost, 4, '/extra serves its priced tools');
  const handle = await fund(gateway.url);
  const before = other.callsOf('costly').length;
  const paid = await call(extra, 'costly', { q: 'x', tollboothToken: handle });
  t.equal(receiptOf(paid)?.cost, 4, 'a handle funded at the default endpoint pays at the new one');
  t.equal(other.callsOf('costly').length, before + 1, "the call reached the new server's upstream");
  t.ok(sumCounter(await scrape(gateway.origin), 'tollbooth_paid_calls_total', { server: 'extra', outcome: 'authorised' }) >= 1, 'metrics name the new endpoint');

  rewrite(gateway, baseConfig());
  t.equal((await hangUp(gateway)).result, 'success');
  t.equal((await post(extra, { method: 'tools/list', params: {} })).status, 404, '/extra is gone');
  t.equal((await post(gateway.url, { method: 'tools/list', params: {} })).status, 200, 'the default endpoint is untouched');
  t.equal(sumCounter(await scrape(gateway.origin), 'tollbooth_config_reloads_total', { result: 'success' }), 2);
});

t.test('an unchanged stdio upstream keeps its child and sessions across a reload; a changed one is a new bridge', async (t) => {
  const filesConfig = (cost: number, maxChildren = 4): ConfigInput =>
    ({ ...baseConfig(), servers: { files: { path: '/files', upstream: { command: STDIO_FIXTURE_COMMAND, stdio: { sessions: 'perClient', maxChildren } }, tools: { echo: { sku: 'research', cost } } } } });
  const gateway = await startGatewayProcess(t, filesConfig(1));
  const files = `${gateway.origin}/files`;
  const init = await post(files, { method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'reload', version: '1' } } });
  const session = init.session as string;
  t.ok(session, 'a session at /files');
  const inSession = { 'mcp-session-id': session };
  await post(files, { method: 'notifications/initialized' }, inSession);
  const pidOf = async (): Promise<{ status: number; pid?: number }> => {
    const reply = await post(files, { method: 'tools/call', params: { name: 'stats', arguments: {} } }, inSession);
    const text = reply.body.result?.content?.[0]?.text as string | undefined;
    return { status: reply.status, ...(text ? { pid: (JSON.parse(text) as { pid: number }).pid } : {}) };
  };
  const before = await pidOf();
  t.type(before.pid, 'number');

  rewrite(gateway, filesConfig(2));
  t.equal((await hangUp(gateway)).result, 'success');
  const listed = await post(files, { method: 'tools/list', params: {} }, inSession);
  t.equal(listed.status, 200, 'the session is still good after the reload');
  t.equal((listed.body.result?.tools as Json[]).find((tool) => tool.name === 'echo')?._meta?.['xyz.tollbooth/price']?.cost, 2, 'with the new price');
  t.same(await pidOf(), { status: 200, pid: before.pid }, 'the same child serves it');

  rewrite(gateway, filesConfig(2, 8));
  t.equal((await hangUp(gateway)).result, 'success');
  t.equal((await pidOf()).status, 404, 'new stdio settings: a new bridge, which never issued the old session');
});
