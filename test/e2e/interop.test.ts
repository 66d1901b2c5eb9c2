// The interop matrix (issue 2): every client × upstream pair that works directly must work identically
// through a gateway with no priced tools — connect (negotiated revision), tools/list, a tools/call, a call
// with progress notifications, and a server→client request where the upstream makes one. Pairs that fail
// directly must fail through the gateway too, except on the stdio upstream, which the gateway serves to
// 2026-07-28 clients itself (SPEC §5.5). One gateway per upstream; the matrix is printed as a tap comment.
import { Client as V2Client, StreamableHTTPClientTransport as V2HttpTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport as V2StdioTransport } from '@modelcontextprotocol/client/stdio';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as V1StdioTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as V1HttpTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import t, { type Test } from 'tap';
import { startTestGateway, testConfig } from '../helpers/gateway.js';
import { childEnv, everythingEntry, startDualEraServer, startServerEverything, type RunningUpstream } from '../helpers/interop-upstreams.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

type Json = Record<string, any>;

const CLIENTS = ['sdk-v1', 'v2@2025-03-26', 'v2@2025-06-18', 'v2@2025-11-25', 'v2@pin-2026-07-28', 'v2@auto'] as const;
type ClientKind = (typeof CLIENTS)[number];
type Target = { http: string } | { stdio: readonly string[] };

interface Scenario {
  echo: { name: string; arguments: Json };
  progress: { name: string; arguments: Json };
  /** A tool that makes the upstream ask the client something (legacy: a server→client request; modern: input_required). */
  ask?: { name: string; arguments: Json; eras: ('legacy' | 'modern')[] };
  /** False for an upstream that answers in JSON only (no channel for progress before the result). */
  progressExpected: boolean;
}

interface Outcome {
  connected: boolean;
  error?: string;
  version?: string;
  tools?: string[];
  echo?: unknown;
  /** The result, and the totals the progress notifications announced (how many arrive before the result varies by transport timing). */
  progress?: { result: unknown; totals: (number | undefined)[] };
  ask?: unknown;
  asked?: string[];
}

/** One uniform face over both SDKs' clients. */
interface AnyClient {
  version(): string | undefined;
  listTools(): Promise<{ tools: { name: string }[] }>;
  callTool(name: string, args: Json, onprogress?: (p: { progress: number; total?: number }) => void): Promise<unknown>;
  close(): Promise<void>;
}

async function connect(kind: ClientKind, target: Target, asked: string[]): Promise<AnyClient> {
  // What the gateway itself declares to a stdio child (it initialises the child once for everyone), so a
  // server that registers tools by client capability lists the same tools directly and through the gateway.
  const capabilities = { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } };
  const elicited = { action: 'accept' as const, content: { name: 'Ada' } };
  const sampled = { role: 'assistant' as const, content: { type: 'text' as const, text: 'hi' }, model: 'interop' };
  if (kind === 'sdk-v1') {
    const client = new V1Client({ name: 'interop-v1', version: '1.0.0' }, { capabilities });
    client.setRequestHandler(ElicitRequestSchema, async () => (asked.push('elicitation/create'), elicited));
    client.setRequestHandler(CreateMessageRequestSchema, async () => (asked.push('sampling/createMessage'), sampled));
    client.setRequestHandler(ListRootsRequestSchema, async () => (asked.push('roots/list'), { roots: [] }));
    const transport = 'http' in target
      ? new V1HttpTransport(new URL(target.http))
      : new V1StdioTransport({ command: target.stdio[0] as string, args: target.stdio.slice(1), env: childEnv() as Record<string, string>, stderr: 'ignore' });
    // The v1 client tells its transport the negotiated revision; the stdio transport just has nowhere to keep it.
    let negotiated: string | undefined;
    const settable = transport as { setProtocolVersion?: (version: string) => void };
    const original = settable.setProtocolVersion?.bind(transport);
    settable.setProtocolVersion = (version: string) => {
      negotiated = version;
      original?.(version);
    };
    await client.connect(transport);
    return {
      version: () => negotiated,
      listTools: () => client.listTools(),
      callTool: (name, args, onprogress) => client.callTool({ name, arguments: args }, CallToolResultSchema, onprogress ? { onprogress } : undefined),
      close: () => client.close(),
    };
  }
  const options: Json = { capabilities };
  if (kind === 'v2@pin-2026-07-28') options.versionNegotiation = { mode: { pin: '2026-07-28' } };
  else if (kind === 'v2@auto') options.versionNegotiation = { mode: 'auto' };
  else options.supportedProtocolVersions = [kind.slice('v2@'.length)];
  const client = new V2Client({ name: 'interop-v2', version: '1.0.0' }, options);
  client.setRequestHandler('elicitation/create', async () => (asked.push('elicitation/create'), elicited));
  client.setRequestHandler('sampling/createMessage', async () => (asked.push('sampling/createMessage'), sampled));
  client.setRequestHandler('roots/list', async () => (asked.push('roots/list'), { roots: [] }));
  const transport = 'http' in target
    ? new V2HttpTransport(new URL(target.http))
    : new V2StdioTransport({ command: target.stdio[0] as string, args: target.stdio.slice(1), env: childEnv() as Record<string, string>, stderr: 'ignore' });
  await client.connect(transport);
  return {
    version: () => client.getNegotiatedProtocolVersion(),
    listTools: () => client.listTools(),
    callTool: (name, args, onprogress) => client.callTool({ name, arguments: args }, onprogress ? { onprogress } : undefined),
    close: () => client.close(),
  };
}

/** Runs the scenario; results are kept whole (a pass-through gateway must not change a byte of meaning). */
async function run(kind: ClientKind, target: Target, scenario: Scenario): Promise<Outcome> {
  const asked: string[] = [];
  let client: AnyClient;
  try {
    client = await connect(kind, target, asked);
  } catch (error) {
    return { connected: false, error: (error as Error).constructor.name };
  }
  try {
    const outcome: Outcome = { connected: true, version: client.version() };
    outcome.tools = (await client.listTools()).tools.map((tool) => tool.name).sort();
    outcome.echo = await client.callTool(scenario.echo.name, scenario.echo.arguments);
    const notifications: [number, number | undefined][] = [];
    const result = await client.callTool(scenario.progress.name, scenario.progress.arguments, (p) => void notifications.push([p.progress, p.total]));
    outcome.progress = { result, totals: [...new Set(notifications.map(([, total]) => total))] };
    const era = outcome.version === '2026-07-28' ? 'modern' : 'legacy';
    if (scenario.ask?.eras.includes(era)) {
      // Only what the ask call itself triggers (sampling, elicitation). A server that lists roots on connect
      // does so on its own schedule (its roots/list may land during this call or before it), and on a shared
      // stdio child it asks the gateway, its one client, not this one: roots/list is not the ask's doing.
      asked.length = 0;
      outcome.ask = await client.callTool(scenario.ask.name, scenario.ask.arguments);
      outcome.asked = asked.filter((method) => method !== 'roots/list');
    }
    return outcome;
  } finally {
    await client.close().catch(() => undefined);
  }
}

const MODERN = '2026-07-28';

/** What must match whatever era carried it: tool names, the text of each answer, the progress seen. */
function sameInEveryEra(o: Outcome): unknown {
  const content = (result: unknown) => (result as { content?: unknown } | undefined)?.content;
  return { tools: o.tools, echo: content(o.echo), progress: content(o.progress?.result), totals: o.progress?.totals };
}

const describe = (o: Outcome): string => (o.connected ? `ok ${o.version}` : `fails (${o.error})`);

interface Row {
  upstream: string;
  cells: string[];
}
const matrix: Row[] = [];

/** For one upstream: every client directly (stdio: each SDK's stdio transport) and through one gateway. */
async function checkUpstream(
  t: Test,
  name: string,
  direct: Target,
  gatewayUpstream: { url: string } | { command: string[] },
  scenario: Scenario,
  expectDirect: Partial<Record<ClientKind, boolean>>,
): Promise<void> {
  const upstreamConfig = 'url' in gatewayUpstream ? { url: gatewayUpstream.url } : { command: gatewayUpstream.command };
  const gateway = await startTestGateway(t, { ...testConfig('http://127.0.0.1:9/mcp', { tools: {} }), upstream: upstreamConfig });
  const row: Row = { upstream: name, cells: [] };
  matrix.push(row);
  // Direct runs are independent (own sessions or own processes): run them side by side. Through a stdio
  // gateway the clients share one child, where a server→client request finds its client only while that
  // client alone has a call running (SPEC §5.5): those runs go one after the other.
  const stdio = 'command' in gatewayUpstream;
  const straights = Object.fromEntries(CLIENTS.map((kind) => [kind, run(kind, direct, scenario)])) as Record<ClientKind, Promise<Outcome>>;
  const throughs = (stdio ? {} : Object.fromEntries(CLIENTS.map((kind) => [kind, run(kind, { http: gateway.url }, scenario)]))) as Record<ClientKind, Promise<Outcome>>;
  for (const kind of CLIENTS) {
    const straight = await straights[kind];
    const through = stdio ? await run(kind, { http: gateway.url }, scenario) : await throughs[kind];
    row.cells.push(`${describe(straight)} / ${describe(through)}`);
    const expected = expectDirect[kind] ?? true;
    t.equal(straight.connected, expected, `${kind} ${expected ? 'works' : 'fails'} directly against ${name}`);
    if (straight.connected && stdio && through.version === MODERN && straight.version !== MODERN) {
      // An auto-negotiating client finds 2026-07-28 at the gateway, which serves it on top of the legacy child.
      t.same(sameInEveryEra(through), sameInEveryEra(straight), `${kind} → gateway → ${name} negotiates 2026-07-28 and sees the same tools and answers`);
    } else if (straight.connected) {
      t.same(through, straight, `${kind} → gateway → ${name} behaves exactly as ${kind} → ${name}`);
      if (scenario.ask?.eras.includes(straight.version === MODERN ? 'modern' : 'legacy')) {
        t.ok((straight.asked ?? []).length > 0, `${kind} was asked something by ${name}`);
      }
      if (scenario.progressExpected) t.ok((straight.progress?.totals ?? []).length > 0, `${kind} saw progress from ${name}`);
    } else if (stdio) {
      t.equal(through.version, MODERN, `${kind} works through the gateway even though the stdio server alone does not speak its revision`);
    } else {
      t.same({ connected: through.connected, error: through.error }, { connected: false, error: straight.error }, `${kind} fails the same way through the gateway`);
    }
  }
}

t.setTimeout(90_000);

t.test('server-everything (streamableHttp: sessions, SSE replies, sampling)', async (t) => {
  const upstream: RunningUpstream = await startServerEverything();
  t.teardown(() => upstream.close());
  await checkUpstream(
    t,
    'server-everything',
    { http: upstream.url },
    { url: upstream.url },
    {
      echo: { name: 'echo', arguments: { message: 'interop' } },
      progress: { name: 'trigger-long-running-operation', arguments: { duration: 0.1, steps: 2 } },
      ask: { name: 'trigger-sampling-request', arguments: { prompt: 'hello', maxTokens: 5 }, eras: ['legacy'] },
      progressExpected: true,
    },
    { 'v2@pin-2026-07-28': false },
  );
});

t.test('SDK v1 stateless JSON server', async (t) => {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  await checkUpstream(
    t,
    'sdk-v1 stateless JSON',
    { http: upstream.url },
    { url: upstream.url },
    // enableJsonResponse: one JSON body per request, so progress notifications have nowhere to go (directly too).
    { echo: { name: 'echo', arguments: { text: 'interop' } }, progress: { name: 'progress', arguments: { steps: 2 } }, progressExpected: false },
    { 'v2@pin-2026-07-28': false },
  );
});

t.test('SDK v2 createMcpHandler dual-era server', async (t) => {
  const upstream = await startDualEraServer();
  t.teardown(() => upstream.close());
  await checkUpstream(
    t,
    'sdk-v2 dual-era',
    { http: upstream.url },
    { url: upstream.url },
    {
      echo: { name: 'echo', arguments: { text: 'interop' } },
      progress: { name: 'progress', arguments: { steps: 2 } },
      ask: { name: 'ask', arguments: {}, eras: ['modern'] },
      progressExpected: true,
    },
    {},
  );
});

// server-everything again, this time on stdio (the gateway spawns it): a third-party server with sampling,
// progress and capability-dependent tools, and plain JavaScript, so each direct run's spawn stays cheap.
t.test('stdio server via upstream.command (server-everything stdio)', async (t) => {
  const command = [process.execPath, everythingEntry(), 'stdio'];
  await checkUpstream(
    t,
    'stdio server-everything',
    { stdio: command },
    { command: ['env', '-u', 'NODE_OPTIONS', ...command] },
    {
      echo: { name: 'echo', arguments: { message: 'interop' } },
      // A notification and the result can share one read on a pipe, and then the client may drop the
      // notification: a step long enough keeps at least the first one ahead of the result.
      progress: { name: 'trigger-long-running-operation', arguments: { duration: 0.4, steps: 2 } },
      // 2026-07-28 has no server→client requests: a legacy child's sampling request cannot reach a modern client.
      ask: { name: 'trigger-sampling-request', arguments: { prompt: 'hello', maxTokens: 5 }, eras: ['legacy'] },
      progressExpected: true,
    },
    { 'v2@pin-2026-07-28': false },
  );
});

t.test('the matrix, for the record', async (t) => {
  const lines = ['interop matrix (direct / through the gateway):', `upstream | ${CLIENTS.join(' | ')}`];
  for (const row of matrix) lines.push(`${row.upstream} | ${row.cells.join(' | ')}`);
  t.comment(lines.join('\n'));
  t.equal(matrix.length, 4, 'every upstream was tried');
});
