// Tool visibility (SPEC §18, issue 17) end to end: real gateways in auth.mode oauth, access tokens from a
// real OpenID Provider (oidc-provider, test/helpers/oidc-issuer.ts: authorization code with PKCE, one
// user per principal, the scopes that user granted), real SDK clients (v1 for the
// 2025 era, v2 pinned to 2026-07-28) over real HTTP, in front of real SDK upstreams whose tools/list
// is paginated (test/helpers/paged-upstream.ts), replying in JSON or SSE.
// Three principals with different scopes get three different lists, page by page; a hidden tool is
// answered -32602 "Unknown tool" without reaching the upstream, alone and in a batch; a tools/list
// replayed on a GET stream (Last-Event-ID) is filtered like a POST reply.
import { Client as V2Client, StreamableHTTPClientTransport as V2HttpTransport } from '@modelcontextprotocol/client';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as V1HttpTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t, { type Test } from 'tap';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startOidcIssuer } from '../helpers/oidc-issuer.js';
import { parseReply, send, type Reply } from '../helpers/namespace-client.js';
import { PAGE_SIZE, startPagedUpstream, tool, type PagedMode } from '../helpers/paged-upstream.js';
import type { RecordingUpstream } from '../helpers/paid-upstream.js';

type Json = Record<string, any>;

// Seven tools, three pages: [echo, fetch_readable, costly] [secret_tool, parked, delete_file] [admin_stats].
const TOOLS = ['echo', 'fetch_readable', 'costly', 'secret_tool', 'parked', 'delete_file', 'admin_stats'].map(tool);
const SCOPES = { alice: 'mcp:use', bob: 'mcp:use files:write', carol: 'mcp:use files:write research:pay admin' } as const;
type Principal = keyof typeof SCOPES;
const PRINCIPALS = Object.keys(SCOPES) as Principal[];
/** What each principal may see: never the hidden tools; only the scoped tools its token covers. */
const EXPECTED: Record<Principal, string[]> = {
  alice: ['echo', 'costly'],
  bob: ['echo', 'costly', 'delete_file'],
  carol: ['echo', 'fetch_readable', 'costly', 'delete_file', 'admin_stats'],
};
const PAGES = Math.ceil(TOOLS.length / PAGE_SIZE);

const issuer = await startOidcIssuer();
t.teardown(() => issuer.close());

interface Setup {
  upstream: RecordingUpstream;
  gateway: TestGateway;
  token: (principal: Principal) => Promise<string>;
}

async function setup(t: Test, mode: PagedMode, auth: { hideUnauthorisedTools?: boolean } = {}): Promise<Setup> {
  const upstream = await startPagedUpstream(mode, TOOLS);
  t.teardown(() => upstream.close());
  // Port 0: the gateway binds a free port; the public URL (and the token audience) names the bound one.
  let publicUrl = 'http://127.0.0.1:0/mcp';
  const gateway = await startTestGateway(
    t,
    testConfig(upstream.url, {
      server: { host: '127.0.0.1', port: 0, publicUrl },
      tools: {
        fetch_readable: { sku: 'research', cost: 1 },
        secret_tool: { hidden: true }, // a free tool nobody may see or call
        parked: { sku: 'research', cost: 2, hidden: true }, // a hidden priced tool: hidden and not callable
      },
      auth: {
        mode: 'oauth',
        issuer: issuer.issuer,
        jwksUrl: issuer.jwksUri,
        authorizationServers: [issuer.issuer],
        requiredScopes: ['mcp:use'],
        toolScopes: { fetch_readable: ['research:pay'], delete_file: ['files:write'], admin_stats: ['admin'], secret_tool: ['admin'] },
        ...auth,
      },
    }),
  );
  publicUrl = gateway.config.server.publicUrl;
  return { upstream, gateway, token: (principal) => issuer.tokenFor({ clientId: 'mcp-client', sub: principal, scope: SCOPES[principal], resource: publicUrl }) };
}

/** One face over both SDKs' clients; `listPages` follows nextCursor and returns each page. */
interface AnyClient {
  listPages(): Promise<Json[][]>;
  callTool(name: string, args?: Json): Promise<Json>;
  close(): Promise<void>;
}

async function connect(era: 'legacy' | 'modern', url: string, token: string): Promise<AnyClient> {
  const requestInit = { headers: { authorization: `Bearer ${token}` } };
  const listPages = async (list: (cursor: string | undefined) => Promise<{ tools: Json[]; nextCursor?: string }>) => {
    const pages: Json[][] = [];
    let cursor: string | undefined;
    do {
      const page = await list(cursor);
      pages.push(page.tools);
      cursor = page.nextCursor;
    } while (cursor !== undefined && pages.length < 10);
    return pages;
  };
  if (era === 'legacy') {
    const client = new V1Client({ name: 'visibility-v1', version: '1.0.0' });
    await client.connect(new V1HttpTransport(new URL(url), { requestInit }));
    return {
      listPages: () => listPages((cursor) => client.listTools(cursor === undefined ? {} : { cursor })),
      callTool: (name, args = {}) => client.callTool({ name, arguments: args }),
      close: () => client.close(),
    };
  }
  const client = new V2Client({ name: 'visibility-v2', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await client.connect(new V2HttpTransport(new URL(url), { requestInit }));
  if (client.getNegotiatedProtocolVersion() !== '2026-07-28') throw new Error(`expected a 2026-07-28 client, got ${client.getNegotiatedProtocolVersion()}`);
  return {
    // Without a cursor the v2 client walks every page itself and returns the aggregate: the first page is
    // asked for by the cursor "0" (the upstream's own first cursor), so each page is checked on its own.
    listPages: () => listPages((cursor) => client.listTools({ cursor: cursor ?? '0' })),
    callTool: (name, args = {}) => client.callTool({ name, arguments: args }),
    close: () => client.close(),
  };
}

/** One tools/call as its era sends it on the wire (no session: both upstream kinds answer without one). */
function rawCall(era: 'legacy' | 'modern', url: string, token: string, name: string) {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (era === 'legacy') return send(url, { jsonrpc: '2.0', id: 99, method: 'tools/call', params: { name, arguments: {} } }, { ...headers, 'mcp-protocol-version': '2025-11-25' });
  const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' };
  return send(url, { jsonrpc: '2.0', id: 99, method: 'tools/call', params: { name, arguments: {}, _meta: meta } }, { ...headers, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': name });
}

/** Reads a GET stream until its text holds `marker` in a complete event (or 20 s: generous for a loaded machine, it ends at the marker), then hangs up. */
async function readUntil(url: string, headers: Record<string, string>, marker: string): Promise<Reply> {
  const controller = new AbortController();
  const response = await fetch(url, { method: 'GET', headers: { accept: 'text/event-stream', ...headers }, signal: controller.signal });
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = '';
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline && !(text.includes(marker) && /\n\n$/.test(text))) {
    const next = await Promise.race([reader.read(), new Promise<null>((resolve) => setTimeout(() => resolve(null), Math.max(1, deadline - Date.now())))]);
    if (next === null || next.done) break;
    text += decoder.decode(next.value, { stream: true });
  }
  controller.abort();
  return parseReply(response.status, response.headers, text);
}

const names = (pages: Json[][]): string[] => pages.flat().map((entry) => entry.name as string);

/** The JSON-RPC error a client's call rejected with: { code, message } as the SDK reports it. */
async function rejection(call: Promise<unknown>): Promise<{ code: unknown; message: string }> {
  try {
    const result = await call;
    return { code: 'resolved', message: JSON.stringify(result) };
  } catch (error) {
    return { code: (error as { code?: unknown }).code, message: (error as Error).message };
  }
}

const CASES: { mode: PagedMode; era: 'legacy' | 'modern'; reply: string }[] = [
  { mode: 'v1-json', era: 'legacy', reply: 'JSON' },
  { mode: 'v1-resumable', era: 'legacy', reply: 'SSE (sessions)' },
  { mode: 'v2-json', era: 'modern', reply: 'JSON' },
  { mode: 'v2-sse', era: 'modern', reply: 'SSE' },
  { mode: 'v2-json', era: 'legacy', reply: 'SDK v2 stateless fallback' },
];

for (const { mode, era, reply } of CASES) {
  t.test(`${era} era, ${reply} upstream replies (${mode})`, async (t) => {
    const { upstream, gateway, token } = await setup(t, mode);

    t.test('three principals with different scopes get three different lists, filtered on every page', async (t) => {
      const seen: string[][] = [];
      for (const principal of PRINCIPALS) {
        const client = await connect(era, gateway.url, await token(principal));
        try {
          const pages = await client.listPages();
          t.equal(pages.length, PAGES, `${principal}: every page is served (nextCursor kept even on a page left empty)`);
          t.same(names(pages), EXPECTED[principal], `${principal}: exactly the tools it may call`);
          seen.push(names(pages));
          const priced = pages.flat().find((entry) => entry.name === 'fetch_readable');
          if (priced) t.equal(priced.inputSchema.properties.tollboothToken?.type, 'string', `${principal}: a visible priced tool is still priced`);
        } finally {
          await client.close();
        }
      }
      t.equal(new Set(seen.map((list) => list.join())).size, 3, 'three different lists');
    });

    t.test('a hidden tool is answered -32602 "Unknown tool" by the gateway, as the upstream answers a tool it lacks; never forwarded', async (t) => {
      const client = await connect(era, gateway.url, await token('carol'));
      try {
        const unknown = await rejection(client.callTool('no_such_tool'));
        t.equal(unknown.code, -32602, 'the upstream: -32602 for a tool it does not have');
        t.match(unknown.message, 'Unknown tool: no_such_tool');
        for (const name of ['secret_tool', 'parked']) {
          const hidden = await rejection(client.callTool(name, { text: 'x' }));
          t.equal(hidden.code, -32602, `${name}: -32602`);
          t.equal(hidden.message, unknown.message.replace('no_such_tool', name), `${name}: the very wording of the upstream's unknown tool`);
        }
        const echoed = await client.callTool('echo', { text: 'still works' });
        t.match(echoed.content?.[0]?.text, 'echo:');
      } finally {
        await client.close();
      }
      // The same call on the wire, so no client-side shortcut can make this pass: the gateway's own answer.
      const raw = await rawCall(era, gateway.url, await token('carol'), 'secret_tool');
      t.equal(raw.status, 200);
      t.same(raw.messages, [{ jsonrpc: '2.0', id: 99, error: { code: -32602, message: 'Unknown tool: secret_tool' } }], 'on the wire: -32602 "Unknown tool: secret_tool"');
      t.same(upstream.calls.filter((call) => call.name === 'secret_tool' || call.name === 'parked'), [], 'the upstream never ran a hidden tool');
      t.notOk(upstream.bodies.some((body) => body.includes('secret_tool') || body.includes('"parked"')), 'no request naming a hidden tool reached the upstream');
    });

    t.test('a tool hidden by scopes only is still refused 403 insufficient_scope when called (hiding is not the refusal)', async (t) => {
      const client = await connect(era, gateway.url, await token('alice'));
      try {
        const refused = await rejection(client.callTool('delete_file', { text: 'x' }));
        t.not(refused.code, 'resolved');
        t.match(refused.message, /-32003|Insufficient scope/i, 'the 403 insufficient_scope refusal of SPEC §9 (JSON-RPC -32003)');
      } finally {
        await client.close();
      }
      t.same(upstream.calls.filter((call) => call.name === 'delete_file'), [], 'not forwarded');
    });
  });
}

t.test('legacy batches: a hidden call is answered in place, tools/list filtered, the rest forwarded (JSON upstream)', async (t) => {
  const { upstream, gateway, token } = await setup(t, 'v1-json');
  const auth = (principal: Principal) => token(principal).then((value) => ({ authorization: `Bearer ${value}`, 'mcp-protocol-version': '2025-03-26' }));

  t.test('tools/list + a hidden call + a free call', async (t) => {
    const reply = await send(
      gateway.url,
      [
        { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} },
        { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'secret_tool', arguments: {} } },
        { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'echo', arguments: { text: 'b' } } },
      ],
      await auth('bob'),
    );
    t.equal(reply.status, 200);
    t.same(reply.messages.map((message) => message.id), [1, 2, 3], 'one reply per entry, in order');
    t.same(reply.messages[0]?.result.tools.map((entry: Json) => entry.name), ['echo', 'costly'], "bob's first page");
    t.equal(reply.messages[0]?.result.nextCursor, String(PAGE_SIZE));
    t.same(reply.messages[1]?.error, { code: -32602, message: 'Unknown tool: secret_tool' });
    t.match(reply.messages[2]?.result.content[0].text, 'echo:');
    t.notOk(upstream.bodies.some((body) => body.includes('secret_tool')), 'the hidden call was not forwarded');
  });

  t.test('a batch holding only hidden calls is answered without touching the upstream', async (t) => {
    const before = upstream.bodies.length;
    const reply = await send(
      gateway.url,
      [
        { jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'parked', arguments: {} } },
        { jsonrpc: '2.0', id: 'b', method: 'tools/call', params: { name: 'secret_tool', arguments: {} } },
      ],
      await auth('carol'),
    );
    t.same(reply.messages, [
      { jsonrpc: '2.0', id: 'a', error: { code: -32602, message: 'Unknown tool: parked' } },
      { jsonrpc: '2.0', id: 'b', error: { code: -32602, message: 'Unknown tool: secret_tool' } },
    ]);
    t.equal(upstream.bodies.length, before, 'nothing reached the upstream');
  });

  t.test('tools/list beside a priced call (the split batch path) is filtered too', async (t) => {
    const reply = await send(
      gateway.url,
      [
        { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { cursor: String(PAGE_SIZE) } },
        { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'fetch_readable', arguments: { text: 'x' } } },
      ],
      await auth('carol'),
    );
    t.same(reply.messages[0]?.result.tools.map((entry: Json) => entry.name), ['delete_file'], "carol's second page: the hidden tools are gone");
    t.ok(reply.messages[1]?.result?._meta?.['xyz.tollbooth/challenge'], 'the priced call got its challenge');
  });
});

t.test('a tools/list replayed on a GET stream (Last-Event-ID) is filtered for the caller', async (t) => {
  const { gateway, token } = await setup(t, 'v1-resumable');
  for (const principal of ['alice', 'carol'] as const) {
    const authorization = `Bearer ${await token(principal)}`;
    const base = { authorization, 'mcp-protocol-version': '2025-11-25' };
    const init = await send(gateway.url, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'replay', version: '1' } } }, { authorization });
    const sessionId = init.headers.get('mcp-session-id') as string;
    t.ok(sessionId, `${principal}: a session`);
    const headers = { ...base, 'mcp-session-id': sessionId };
    await send(gateway.url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
    const listed = await send(gateway.url, { jsonrpc: '2.0', id: 7, method: 'tools/list', params: {} }, headers);
    const posted = listed.messages.find((message) => message.id === 7);
    t.ok(posted, `${principal}: the POST reply holds the list`);
    const firstPage = EXPECTED[principal].filter((name) => TOOLS.slice(0, PAGE_SIZE).some((entry) => entry.name === name));
    t.same(posted?.result.tools.map((entry: Json) => entry.name), firstPage, `${principal}: POST (SSE) reply filtered`);
    const priming = listed.eventIds[0] as string;
    t.ok(priming, 'the upstream primed the stream with an event id');
    const replay = await readUntil(gateway.url, { ...headers, 'last-event-id': priming }, '"id":7');
    t.equal(replay.status, 200);
    const replayed = replay.messages.find((message) => message.id === 7);
    t.ok(replayed, `${principal}: the GET stream replayed the list`);
    t.same(replayed?.result.tools.map((entry: Json) => entry.name), firstPage, `${principal}: the replayed list is filtered the same way`);
  }
});

t.test('hideUnauthorisedTools: false lists every tool that is not hidden, whatever the scopes; calls are still refused by scope', async (t) => {
  const { gateway, token } = await setup(t, 'v1-json', { hideUnauthorisedTools: false });
  const client = await connect('legacy', gateway.url, await token('alice'));
  try {
    t.same(names(await client.listPages()), ['echo', 'fetch_readable', 'costly', 'delete_file', 'admin_stats']);
    t.match((await rejection(client.callTool('delete_file'))).message, /-32003/);
  } finally {
    await client.close();
  }
});

t.test('auth.mode none: hidden tools are out of every list and answered "Unknown tool"; nothing else changes', async (t) => {
  const upstream = await startPagedUpstream('v1-json', TOOLS);
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url, { tools: { fetch_readable: { sku: 'research', cost: 1 }, secret_tool: { hidden: true }, parked: { sku: 'research', cost: 2, hidden: true } } }));
  const client = new V1Client({ name: 'visibility-none', version: '1.0.0' });
  await client.connect(new V1HttpTransport(new URL(gateway.url)));
  try {
    const tools: Json[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor === undefined ? {} : { cursor });
      tools.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    t.same(tools.map((entry) => entry.name), ['echo', 'fetch_readable', 'costly', 'delete_file', 'admin_stats']);
    const hidden = await rejection(client.callTool({ name: 'parked', arguments: {} }));
    t.equal(hidden.code, -32602);
    t.match(hidden.message, 'Unknown tool: parked');
  } finally {
    await client.close();
  }
  t.notOk(upstream.bodies.some((body) => body.includes('"parked"')), 'never forwarded');
});
