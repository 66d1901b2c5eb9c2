// SPEC §18: several MCP endpoints behind one gateway. A real gateway with two endpoints: the default one
// in front of an HTTP SDK upstream and `files` in front of a stdio SDK server the gateway spawns. Both
// upstreams have tools named `echo` and `slow`: each endpoint's list and calls reach only its own
// upstream, one handle pays on both, metrics and call log lines name the endpoint; in oauth mode each
// endpoint is its own resource (audience, PRM), a handle stays bound to its principal on both, and a
// session handed out by one endpoint is refused at the other.
import t from 'tap';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { STDIO_FIXTURE_COMMAND } from '../helpers/interop-upstreams.js';
import { startOidcIssuer } from '../helpers/oidc-issuer.js';
import { metricValue } from '../helpers/scripted-upstream.js';
import { startFakeFacilitator } from '../helpers/x402-facilitator.js';
import { paymentRequiredOf, withX402 } from '../helpers/x402-gateway.js';

type Json = Record<string, any>;

const upstream = await startPaidUpstream('stateless-json');
t.teardown(() => upstream.close());

const research = { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 3 };
const limits = { perHandle: { ratePerSecond: 100, burst: 100 }, challengesPerClient: { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 10_000 };

/** Port 0: the gateway binds a free port; its public URL (and every endpoint's) names the bound one. */
function twoEndpoints(extra: Json = {}): Json {
  return {
    ...testConfig(upstream.url),
    server: { host: '127.0.0.1', port: 0, publicUrl: 'http://127.0.0.1:0/mcp' },
    skus: { research },
    tools: { echo: { sku: 'research', cost: 1 }, fetch_readable: { sku: 'research', cost: 1 } },
    servers: {
      files: {
        path: '/mcp/files',
        upstream: { command: STDIO_FIXTURE_COMMAND, stdio: { sessions: 'shared' } },
        tools: { echo: { sku: 'research', cost: 2 }, slow: { hidden: true } },
        ...(extra.filesToolScopes ? { toolScopes: extra.filesToolScopes } : {}),
      },
    },
    limits,
    ...(extra.auth ? { auth: extra.auth } : {}),
  };
}

let nextId = 1;
interface Reply {
  status: number;
  body: Json;
  text: string;
  session: string | null;
  wwwAuthenticate: string | null;
}
async function post(url: string, message: Json, headers: Record<string, string> = {}): Promise<Reply> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', ...headers },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, ...message }),
  });
  const text = await response.text();
  // A reply may come as one SSE event: its data line is the message.
  const data = /^data: (.*)$/m.exec(text)?.[1];
  let body: Json;
  try {
    body = JSON.parse(data ?? text) as Json;
  } catch {
    body = {};
  }
  return { status: response.status, body, text, session: response.headers.get('mcp-session-id'), wwwAuthenticate: response.headers.get('www-authenticate') };
}
const initialize = { method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'servers-test', version: '1' } } };
const callTool = (name: string, args: Json) => ({ method: 'tools/call', params: { name, arguments: args } });
const names = (reply: Reply): string[] => (reply.body.result?.tools ?? []).map((tool: Json) => tool.name as string).sort();

/** A session at the endpoint: initialize, then notifications/initialized. */
async function openSession(url: string, headers: Record<string, string> = {}): Promise<string> {
  const init = await post(url, initialize, headers);
  if (!init.session) throw new Error(`no session from ${url}: ${init.status} ${init.text}`);
  await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', 'mcp-session-id': init.session, ...headers },
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
  });
  return init.session;
}

/** Pays the challenge in a reply through the dev checkout; the handle. */
async function pay(reply: Reply): Promise<string> {
  const challenge = reply.body.result?._meta?.['xyz.tollbooth/challenge'];
  if (!challenge) throw new Error(`no challenge: ${reply.text}`);
  const paid = await fetch(`${challenge.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  if (paid.status !== 303) throw new Error(`pay failed: ${paid.status}`);
  return challenge.retry.value as string;
}

t.test('auth none: each endpoint lists and calls only its own upstream; one handle pays on both', async (t) => {
  const gateway: TestGateway = await startTestGateway(t, twoEndpoints() as never);
  const files = `${gateway.origin}/mcp/files`;
  const filesSession = await openSession(files);
  const asFiles = { 'mcp-session-id': filesSession };

  const defaultList = await post(gateway.url, { method: 'tools/list', params: {} });
  const filesList = await post(files, { method: 'tools/list', params: {} }, asFiles);
  t.ok(names(defaultList).includes('fetch_readable') && names(defaultList).includes('echo'), 'default lists the HTTP upstream');
  t.notOk(names(defaultList).includes('stats'), "default does not list the stdio server's tools");
  t.ok(names(filesList).includes('stats') && names(filesList).includes('echo'), 'files lists the stdio server');
  t.notOk(names(filesList).includes('fetch_readable'), "files does not list the HTTP upstream's tools");
  // Visibility is per endpoint: `slow` is hidden at files only.
  t.notOk(names(filesList).includes('slow'), 'slow is hidden at files');
  t.ok(names(defaultList).includes('slow'), 'and listed at default');
  const hiddenCall = await post(files, callTool('slow', { ms: 1 }), asFiles);
  t.same(hiddenCall.body.error, { code: -32602, message: 'Unknown tool: slow' }, 'a call to it at files is answered as an unknown tool');
  t.match((await post(gateway.url, callTool('slow', { ms: 1 }))).body.result?.content?.[0]?.text, 'slept:1', 'and reaches the upstream at default');
  const price = (reply: Reply, tool: string) => (reply.body.result.tools as Json[]).find((entry) => entry.name === tool)?._meta?.['xyz.tollbooth/price'];
  t.match(price(defaultList, 'echo'), { sku: 'research', cost: 1 }, "echo priced at default's cost");
  t.match(price(filesList, 'echo'), { sku: 'research', cost: 2 }, "echo priced at files' cost");

  // One handle, funded at the default endpoint, pays on both.
  const handle = await pay(await post(gateway.url, callTool('echo', { text: 'fund' })));
  const atDefault = await post(gateway.url, callTool('echo', { text: 'one', tollboothToken: handle }));
  t.same(atDefault.body.result?._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 });
  t.match(atDefault.body.result?.content?.[0]?.text, '"text":"one"', 'the HTTP upstream answered (it echoes its arguments as JSON)');
  const callsBefore = upstream.callsOf('echo').length;
  const atFiles = await post(files, callTool('echo', { text: 'two', tollboothToken: handle }), asFiles);
  t.same(atFiles.body.result?._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 2, remaining: 0 }, 'the same credits pay at files, at its price');
  t.equal(atFiles.body.result?.content?.[0]?.text, 'two', 'the stdio server answered');
  t.equal(upstream.callsOf('echo').length, callsBefore, "files' call never reached the HTTP upstream");
  t.notOk(upstream.sawText(handle), 'the handle never reached the HTTP upstream');

  // Metrics and the call log line name the endpoint.
  t.equal(await metricValue(gateway.origin, 'tollbooth_paid_calls_total', { server: 'files', tool: 'echo', outcome: 'authorised' }), 1);
  t.equal(await metricValue(gateway.origin, 'tollbooth_paid_calls_total', { server: 'default', tool: 'echo', outcome: 'authorised' }), 1);
  t.ok((await metricValue(gateway.origin, 'tollbooth_mcp_requests_total', { server: 'files', method: 'tools/list' })) >= 1);
  t.ok((await metricValue(gateway.origin, 'tollbooth_upstream_duration_seconds_count', { server: 'files', method: 'tools/call' })) >= 1);
  const callLines = gateway.logs().filter((line) => line.evt === 'call' && line.outcome === 'authorised');
  t.same(callLines.map((line) => line.server).sort(), ['default', 'files']);

  // Admin output names the endpoint: the ledger's spend entries (handle show) and charges (charges list) record `<server>/<tool>` outside the default.
  const { hashHandle } = await import('../../src/paywall/handles.js');
  const spends = (await gateway.store.ledgerTail(hashHandle(handle, gateway.config.handles.hashSecret), 10)).filter((entry) => entry.kind === 'spend');
  t.same(spends.map((entry) => entry.tool), ['echo', 'files/echo']);
  const filesHandle = await pay(await post(files, callTool('echo', { text: 'fund-at-files' }), asFiles));
  t.ok(filesHandle.startsWith('tb_s_'));
  t.ok((await gateway.store.listCharges()).some((charge) => charge.tool === 'files/echo'), 'a charge opened at files names it');

  // readyz probes every endpoint's upstream.
  const ready = (await (await fetch(`${gateway.origin}/readyz`)).json()) as Json;
  t.equal(ready.ok, true);
  t.equal(ready.servers?.files?.ok, true, "files' upstream is probed");
});

t.test('oauth: each endpoint is its own resource; a handle stays bound to its principal on both; sessions stay at their endpoint', async (t) => {
  // A real OpenID Provider (test/helpers/oidc-issuer.ts): one token per resource indicator (endpoint).
  const issuer = await startOidcIssuer();
  t.teardown(() => issuer.close());
  const auth = { mode: 'oauth', issuer: issuer.issuer, jwksUrl: issuer.jwksUri, authorizationServers: [issuer.issuer], requiredScopes: ['mcp:use'], toolScopes: { fetch_readable: ['research:pay'] } };
  const gateway = await startTestGateway(t, twoEndpoints({ auth, filesToolScopes: { echo: ['files:write'] } }) as never);
  const defaultUrl = `${gateway.origin}/mcp`;
  const filesUrl = `${gateway.origin}/mcp/files`;
  const token = (sub: string, aud: string, scope = 'mcp:use research:pay files:write') => issuer.tokenFor({ clientId: 'mcp-client', sub, scope, resource: aud });
  const bearer = async (sub: string, aud: string, scope?: string) => ({ authorization: `Bearer ${await token(sub, aud, scope)}` });

  // PRM per endpoint: its own resource, its own scopes.
  const prm = (await (await fetch(`${gateway.origin}/.well-known/oauth-protected-resource/mcp/files`)).json()) as Json;
  t.equal(prm.resource, filesUrl);
  t.same(prm.scopes_supported, ['mcp:use', 'files:write']);
  const defaultPrm = (await (await fetch(`${gateway.origin}/.well-known/oauth-protected-resource/mcp`)).json()) as Json;
  t.equal(defaultPrm.resource, defaultUrl);

  // The audience of one endpoint is refused at the other.
  const wrongAudience = await post(filesUrl, { method: 'tools/list', params: {} }, await bearer('alice', defaultUrl));
  t.equal(wrongAudience.status, 401, "default's audience is refused at files");
  t.match(wrongAudience.wwwAuthenticate, 'oauth-protected-resource/mcp/files', "the challenge points at files' PRM");
  t.equal((await post(defaultUrl, { method: 'tools/list', params: {} }, await bearer('alice', filesUrl))).status, 401, "files' audience is refused at default");
  // Scopes per endpoint: files' echo needs files:write.
  const noWrite = await post(filesUrl, callTool('echo', { text: 'x' }), await bearer('alice', filesUrl, 'mcp:use'));
  t.equal(noWrite.status, 403, "files' toolScopes apply at files");

  // A handle minted for alice at default is hers at files too.
  const aliceDefault = await bearer('alice', defaultUrl);
  const handle = await pay(await post(defaultUrl, callTool('echo', { text: 'fund' }), aliceDefault));
  const aliceFiles = await bearer('alice', filesUrl);
  const filesSession = await openSession(filesUrl, aliceFiles);
  const forAlice = await post(filesUrl, callTool('echo', { text: 'hers', tollboothToken: handle }), { ...aliceFiles, 'mcp-session-id': filesSession });
  t.same(forAlice.body.result?._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 2, remaining: 1 }, 'alice pays at files with the handle from default');
  const bobFiles = await bearer('bob', filesUrl);
  const bobSession = await openSession(filesUrl, bobFiles);
  const forBob = await post(filesUrl, callTool('echo', { text: 'his', tollboothToken: handle }), { ...bobFiles, 'mcp-session-id': bobSession });
  t.same(forBob.body.result?._meta?.['xyz.tollbooth/refusal'], { reason: 'bound_to_other_principal' }, 'bob is refused at files');
  t.equal(await metricValue(gateway.origin, 'tollbooth_paid_calls_total', { server: 'files', outcome: 'refused_bound' }), 1);

  // A session files handed out is refused at default (404), even for its owner.
  const crossed = await post(defaultUrl, { method: 'tools/list', params: {} }, { ...aliceDefault, 'mcp-session-id': filesSession });
  t.equal(crossed.status, 404, "files' session is unknown at default");
  const home = await post(filesUrl, { method: 'tools/list', params: {} }, { ...aliceFiles, 'mcp-session-id': filesSession });
  t.equal(home.status, 200, 'and still good at files');
});

t.test('x402: the resource a payment is for is the endpoint it was asked at', async (t) => {
  const facilitator = await startFakeFacilitator();
  t.teardown(() => facilitator.close());
  const gateway = await startTestGateway(t, withX402(twoEndpoints() as never, facilitator.url));
  const files = `${gateway.origin}/mcp/files`;
  const session = await openSession(files);
  const atFiles = await post(files, callTool('echo', { text: 'x' }), { 'mcp-session-id': session });
  t.equal(paymentRequiredOf(atFiles.body.result).resource.url, `${gateway.origin}/mcp/files#tool=echo`);
  t.match(paymentRequiredOf(atFiles.body.result).accepts, [{ amount: '20000' }], "files' price: 2 credits at 0.01");
  const atDefault = await post(gateway.url, callTool('echo', { text: 'x' }));
  t.equal(paymentRequiredOf(atDefault.body.result).resource.url, `${gateway.origin}/mcp#tool=echo`);
});
