// The fidelity matrix (SPEC §5.5, issue 13): for each stdio server and each client, what the client sees
// through the bridge (perClient, over its private socket) is what it sees over a direct stdio connection —
// the initialize result, tools/list (every field), a free call, and where the client declares them a roots,
// sampling and elicitation round trip, logging levels and a subscription. The documented differences: a
// client pinned to 2026-07-28 cannot talk to a legacy stdio server directly but can through the bridge, and
// an auto-negotiating client finds 2026-07-28 at the bridge (it then sees the same server in that era, minus
// server→client requests, which 2026-07-28 does not have).
import { Client as V2Client, StreamableHTTPClientTransport as V2HttpTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport as V2StdioTransport } from '@modelcontextprotocol/client/stdio';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as V1StdioTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as V1HttpTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema, CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema, LoggingMessageNotificationSchema, ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import t, { type Test } from 'tap';
import { childEnv, everythingEntry } from '../helpers/interop-upstreams.js';
import { CAPABILITIES_SERVER, RESEARCH_SERVER, startTestBridge, type Json, type TestBridge } from './helpers.js';

const CLIENTS = ['sdk-v1', 'v2@2025-03-26', 'v2@2025-06-18', 'v2@2025-11-25', 'v2@pin-2026-07-28', 'v2@auto'] as const;
type ClientKind = (typeof CLIENTS)[number];
type Target = { stdio: readonly string[] } | { bridge: TestBridge };
const MODERN = '2026-07-28';

const CAPABILITIES = { roots: { listChanged: true }, sampling: {}, elicitation: { form: {}, url: {} } };
const ROOTS = [{ uri: 'file:///work/project', name: 'project' }];

interface Scenario {
  call: { name: string; arguments: Json };
  /**
   * Legacy-only calls (2026-07-28 has no server→client requests), most of which make the server ask the client
   * something (`asks`). `rootsOnItsOwnSchedule`: the server also lists roots by itself after initialize, so
   * whether this call asks again depends on timing — only its result is compared.
   */
  roundTrips: { name: string; arguments: Json; asks?: boolean; rootsOnItsOwnSchedule?: boolean }[];
  /** Logging level and a subscription, for servers that support them. */
  loggingAndSubscription?: { uri: string; logTool: string; touchTool: string };
  /** Extra client capabilities (the fixture reacts to `tasks`). */
  capabilities?: Json;
}

interface Outcome {
  connected: boolean;
  error?: string;
  version?: string;
  initialize?: { capabilities: unknown; serverInfo: unknown; instructions: unknown };
  tools?: unknown;
  call?: unknown;
  roundTrips?: { result: unknown; asked: { method: string; params: unknown }[] }[];
  logged?: unknown[];
  updated?: unknown[];
}

interface Recorded {
  asked: { method: string; params: unknown }[];
  notifications: { method: string; params: unknown }[];
}

interface AnyClient {
  version(): string | undefined;
  initialize(): Outcome['initialize'];
  listTools(): Promise<Json>;
  callTool(name: string, args: Json): Promise<unknown>;
  setLoggingLevel(level: 'warning'): Promise<unknown>;
  subscribe(uri: string): Promise<unknown>;
  close(): Promise<void>;
}

const withoutMeta = (params: unknown): unknown => {
  if (typeof params !== 'object' || params === null) return params;
  const { _meta: _dropped, ...rest } = params as Json;
  return rest;
};

async function connect(kind: ClientKind, target: Target, capabilities: Json, recorded: Recorded): Promise<AnyClient> {
  const answer = (method: string, params: unknown): unknown => {
    recorded.asked.push({ method, params: withoutMeta(params) });
    if (method === 'roots/list') return { roots: ROOTS };
    if (method === 'sampling/createMessage') return { role: 'assistant', content: { type: 'text', text: 'hi' }, model: 'fidelity' };
    return (params as Json).message === 'Your name?' ? { action: 'accept', content: { name: 'Ada' } } : { action: 'decline' };
  };
  const note = (method: string, params: unknown): void => void recorded.notifications.push({ method, params: withoutMeta(params) });
  const stdioEnv = childEnv() as Record<string, string>;
  if (kind === 'sdk-v1') {
    const client = new V1Client({ name: 'fidelity-v1', version: '1.0.0' }, { capabilities });
    client.setRequestHandler(ElicitRequestSchema, async (request) => answer(request.method, request.params) as never);
    client.setRequestHandler(CreateMessageRequestSchema, async (request) => answer(request.method, request.params) as never);
    client.setRequestHandler(ListRootsRequestSchema, async (request) => answer(request.method, request.params) as never);
    client.setNotificationHandler(LoggingMessageNotificationSchema, async (n) => note(n.method, n.params));
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => note(n.method, n.params));
    const transport = 'bridge' in target
      ? new V1HttpTransport(new URL(target.bridge.url), { fetch: target.bridge.fetch })
      : new V1StdioTransport({ command: target.stdio[0] as string, args: target.stdio.slice(1), env: stdioEnv, stderr: 'ignore' });
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
      initialize: () => ({ capabilities: client.getServerCapabilities(), serverInfo: client.getServerVersion(), instructions: client.getInstructions() }),
      listTools: () => client.listTools(),
      callTool: (name, args) => client.callTool({ name, arguments: args }, CallToolResultSchema),
      setLoggingLevel: (level) => client.setLoggingLevel(level),
      subscribe: (uri) => client.subscribeResource({ uri }),
      close: () => client.close(),
    };
  }
  const options: Json = { capabilities };
  if (kind === 'v2@pin-2026-07-28') options.versionNegotiation = { mode: { pin: MODERN } };
  else if (kind === 'v2@auto') options.versionNegotiation = { mode: 'auto' };
  else options.supportedProtocolVersions = [kind.slice('v2@'.length)];
  const client = new V2Client({ name: 'fidelity-v2', version: '1.0.0' }, options);
  for (const method of ['elicitation/create', 'sampling/createMessage', 'roots/list'] as const) {
    client.setRequestHandler(method, (async (request: { params?: unknown }) => answer(method, request.params)) as never);
  }
  for (const method of ['notifications/message', 'notifications/resources/updated'] as const) {
    client.setNotificationHandler(method, (async (n: { params?: unknown }) => note(method, n.params)) as never);
  }
  const transport = 'bridge' in target
    ? new V2HttpTransport(new URL(target.bridge.url), { fetch: target.bridge.fetch })
    : new V2StdioTransport({ command: target.stdio[0] as string, args: target.stdio.slice(1), env: stdioEnv, stderr: 'ignore' });
  await client.connect(transport);
  return {
    version: () => client.getNegotiatedProtocolVersion(),
    initialize: () => ({ capabilities: client.getServerCapabilities(), serverInfo: client.getServerVersion(), instructions: client.getInstructions() }),
    listTools: () => client.listTools(),
    callTool: (name, args) => client.callTool({ name, arguments: args }),
    setLoggingLevel: (level) => client.setLoggingLevel(level),
    subscribe: (uri) => client.subscribeResource({ uri }),
    close: () => client.close(),
  };
}

const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 50));

async function run(kind: ClientKind, target: Target, scenario: Scenario): Promise<Outcome> {
  const recorded: Recorded = { asked: [], notifications: [] };
  let client: AnyClient;
  try {
    client = await connect(kind, target, { ...CAPABILITIES, ...scenario.capabilities }, recorded);
  } catch (error) {
    return { connected: false, error: (error as Error).constructor.name };
  }
  try {
    const version = client.version();
    const outcome: Outcome = { connected: true, version, initialize: client.initialize() };
    const listed = await client.listTools();
    outcome.tools = { tools: listed.tools, nextCursor: listed.nextCursor };
    outcome.call = await client.callTool(scenario.call.name, scenario.call.arguments);
    if (version === MODERN) return outcome;
    outcome.roundTrips = [];
    for (const trip of scenario.roundTrips) {
      recorded.asked.length = 0;
      const result = await client.callTool(trip.name, trip.arguments);
      // roots/list also comes on the server's own schedule (server-everything asks 350 ms after initialize).
      const asked = recorded.asked.filter((entry) => entry.method !== 'roots/list' || (/roots/.test(trip.name) && !trip.rootsOnItsOwnSchedule));
      outcome.roundTrips.push({ result, asked });
    }
    if (scenario.loggingAndSubscription) {
      const { uri, logTool, touchTool } = scenario.loggingAndSubscription;
      await client.setLoggingLevel('warning');
      recorded.notifications.length = 0;
      await client.callTool(logTool, {});
      await settle();
      outcome.logged = recorded.notifications.filter((n) => n.method === 'notifications/message').map((n) => n.params);
      await client.subscribe(uri);
      await client.callTool(touchTool, {});
      await settle();
      outcome.updated = recorded.notifications.filter((n) => n.method === 'notifications/resources/updated').map((n) => n.params);
    }
    return outcome;
  } finally {
    await client.close().catch(() => undefined);
  }
}

/**
 * What an era does not change: the server's face and its answers. The v2 client reads 2026-07-28 results
 * with that revision's schemas, which have no `tasks` server capability and no tool `execution` (the bridge
 * passes both through: modern.test.ts shows it on the wire), so those two are left out here.
 */
const eraFree = (o: Outcome): unknown => ({
  capabilities: (({ tasks: _tasks, ...rest }: Json) => rest)((o.initialize?.capabilities ?? {})),
  serverInfo: o.initialize?.serverInfo,
  instructions: o.initialize?.instructions,
  tools: ((o.tools as Json | undefined)?.tools as Json[] | undefined)?.map(({ execution: _execution, ...tool }) => tool),
  call: (o.call as Json | undefined)?.content,
  isError: (o.call as Json | undefined)?.isError,
  structuredContent: (o.call as Json | undefined)?.structuredContent,
});

const describe = (o: Outcome): string => (o.connected ? `ok ${o.version}` : `fails (${o.error})`);
const matrix: string[] = [];

async function checkServer(t: Test, name: string, command: readonly string[], scenario: Scenario): Promise<void> {
  const bridge = await startTestBridge(t, { command: [...command], maxChildren: 16 });
  const cells: string[] = [];
  // Side by side, two clients at a time: every direct run has its own process, every bridge run its own session and child.
  const outcomes: Partial<Record<ClientKind, [Outcome, Outcome]>> = {};
  const queue = [...CLIENTS];
  await Promise.all(
    [0, 1].map(async () => {
      for (let kind = queue.shift(); kind !== undefined; kind = queue.shift()) {
        outcomes[kind] = await Promise.all([run(kind, { stdio: command }, scenario), run(kind, { bridge }, scenario)]);
      }
    }),
  );
  for (const kind of CLIENTS) {
    const [direct, bridged] = outcomes[kind]!;
    cells.push(`${describe(direct)} / ${describe(bridged)}`);
    if (kind === 'v2@pin-2026-07-28') {
      t.notOk(direct.connected, `${kind} cannot talk to ${name} directly (a legacy stdio server)`);
      t.equal(bridged.version, MODERN, `${kind} is served 2026-07-28 through the bridge`);
      t.strictSame(eraFree(bridged), eraFree(outcomes['v2@2025-11-25']![0]), `${kind} through the bridge sees the server a 2025-11-25 client sees directly`);
      continue;
    }
    t.ok(direct.connected, `${kind} connects to ${name} directly`);
    if (bridged.version === MODERN && direct.version !== MODERN) {
      t.equal(kind, 'v2@auto', 'only the auto-negotiating client changes era');
      t.strictSame(eraFree(bridged), eraFree(direct), `${kind} negotiates 2026-07-28 at the bridge and sees the same server`);
      continue;
    }
    t.strictSame(bridged, direct, `${kind} → bridge → ${name} is identical to ${kind} → ${name} over stdio`);
    scenario.roundTrips.forEach((trip, i) => {
      if (trip.asks !== false) t.ok((direct.roundTrips?.[i]?.asked.length ?? 0) > 0 || trip.rootsOnItsOwnSchedule, `${kind}: ${trip.name} asked the client something`);
    });
  }
  matrix.push(`${name} | ${cells.join(' | ')}`);
}

t.setTimeout(600_000);

t.test('server-everything (stdio)', async (t) => {
  await checkServer(t, 'server-everything', [process.execPath, everythingEntry(), 'stdio'], {
    call: { name: 'echo', arguments: { message: 'fidelity' } },
    roundTrips: [
      { name: 'get-roots-list', arguments: {}, rootsOnItsOwnSchedule: true },
      { name: 'trigger-sampling-request', arguments: { prompt: 'hello', maxTokens: 5 } },
      { name: 'trigger-elicitation-request', arguments: {} },
    ],
  });
});

t.test('an SDK v1 stdio server whose tools depend on the client (roots → a tool; tasks → execution.taskSupport)', async (t) => {
  await checkServer(t, 'capabilities fixture', CAPABILITIES_SERVER, {
    call: { name: 'echo', arguments: { text: 'fidelity' } },
    capabilities: { tasks: { list: {}, cancel: {} } },
    roundTrips: [
      // What the server was told at initialize: the client's own capabilities and clientInfo.
      { name: 'whoami', arguments: {}, asks: false },
      { name: 'list_roots', arguments: {} },
      { name: 'ask', arguments: { via: 'sample' } },
      { name: 'ask', arguments: { via: 'elicit' } },
    ],
    loggingAndSubscription: { uri: 'fixture://counter', logTool: 'log', touchTool: 'touch' },
  });
});

t.test('the research server (dist/research/stdio.js)', async (t) => {
  await checkServer(t, 'research', RESEARCH_SERVER, {
    // Refused without touching the network: a loopback address is not a public host.
    call: { name: 'fetch_readable', arguments: { url: 'http://127.0.0.1/' } },
    roundTrips: [],
  });
});

t.test('the matrix, for the record', async (t) => {
  t.comment(['fidelity matrix (direct stdio / through the bridge):', `server | ${CLIENTS.join(' | ')}`, ...matrix].join('\n'));
  t.equal(matrix.length, 3, 'every server was tried');
});
