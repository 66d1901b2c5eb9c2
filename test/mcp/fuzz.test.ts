// Property-based tests (issue 7): the request classifier over arbitrary JSON and headers, and the SSE
// rewriter over random event streams cut into random chunks.
import t from 'tap';
import fc from 'fast-check';
import { classifyBody, MODERN_VERSION, VERSION_META_KEY } from '../../src/mcp/classify.js';
import { GatewayError, type ErrorCode } from '../../src/errors.js';
import { rewriteSse, type SseHook } from '../../src/mcp/sse.js';

type Headers = Record<string, string | string[] | undefined>;

// ---------------------------------------------------------------- classifier

const CLASSIFIER_CODES: ReadonlySet<ErrorCode> = new Set(['TB_ERR_INVALID_REQUEST', 'TB_ERR_INVALID_PARAMS', 'TB_ERR_HEADER_MISMATCH']);
const METHODS = ['tools/call', 'tools/list', 'resources/read', 'prompts/get', 'initialize', 'ping', 'notifications/initialized', '__proto__', 'constructor', 'toString'];
const HEADER_NAMES = ['mcp-protocol-version', 'mcp-method', 'mcp-name', 'mcp-session-id', 'content-type'];

const b64 = (text: string): string => `=?base64?${Buffer.from(text, 'utf8').toString('base64')}?=`;
/** How a client puts a value in a header: plain when it is safe ASCII, else =?base64?…?=. */
const headerValue = (text: string): string => (/^[A-Za-z0-9_./:@-]+$/.test(text) ? text : b64(text));

const text = fc.string({ unit: 'grapheme', maxLength: 12 });
const anyJson = fc.oneof(fc.jsonValue({ maxDepth: 4 }), fc.json({ maxDepth: 4 }).map((s) => JSON.parse(s) as unknown));

/** Objects that look a lot like JSON-RPC messages, so the fuzzer gets past the first checks. */
const nearMessage = fc.record(
  {
    jsonrpc: fc.constantFrom<unknown>('2.0', '1.0', 2, null),
    id: fc.oneof(fc.integer(), text, fc.constant(null), anyJson),
    method: fc.oneof(fc.constantFrom(...METHODS), text, anyJson),
    params: fc.oneof(
      anyJson,
      fc.record(
        {
          name: fc.oneof(text, anyJson),
          uri: fc.oneof(text, anyJson),
          arguments: anyJson,
          _meta: fc.oneof(anyJson, fc.record({ [VERSION_META_KEY]: fc.oneof(fc.constant(MODERN_VERSION), text, anyJson) }, { requiredKeys: [] })),
        },
        { requiredKeys: [] },
      ),
    ),
    result: anyJson,
    error: anyJson,
  },
  { requiredKeys: [] },
);

const anyBody = fc.oneof(anyJson, nearMessage, fc.array(fc.oneof(nearMessage, anyJson), { maxLength: 4 }));
const anyHeaders: fc.Arbitrary<Headers> = fc.dictionary(
  fc.constantFrom(...HEADER_NAMES),
  fc.oneof(text, text.map(b64), fc.constantFrom(MODERN_VERSION, 'tools/call', 'echo'), fc.array(text, { maxLength: 3 }), fc.constant(undefined)),
);

t.test('the classifier only ever throws a GatewayError with a classifier code', async (t) => {
  fc.assert(
    fc.property(anyBody, anyHeaders, (body, headers) => {
      try {
        const c = classifyBody(body, headers);
        return c.messages.length > 0 && c.toolCalls.every((call) => typeof call.name === 'string' && typeof call.args === 'object' && call.args !== null);
      } catch (error) {
        return error instanceof GatewayError && CLASSIFIER_CODES.has(error.code);
      }
    }),
    { numRuns: 2000 },
  );
  t.pass('2000 arbitrary bodies and headers');
});

t.test('a header mismatch is only ever raised for a modern request', async (t) => {
  fc.assert(
    fc.property(anyBody, anyHeaders, (body, headers) => {
      try {
        classifyBody(body, headers);
      } catch (error) {
        if ((error as GatewayError).code !== 'TB_ERR_HEADER_MISMATCH') return true;
        const params = (body as { params?: { _meta?: object } }).params;
        return !Array.isArray(body) && typeof params?._meta === 'object' && params._meta !== null && Object.hasOwn(params._meta, VERSION_META_KEY);
      }
      return true;
    }),
    { numRuns: 1000 },
  );
  t.pass();
});

const id = fc.oneof(fc.integer(), fc.string({ maxLength: 8 }), fc.constant(null));
const argsObject = fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 });
const toolName = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 16 });

const validLegacyRequest = fc.oneof(
  fc.record({ jsonrpc: fc.constant('2.0'), id, method: fc.constant('tools/call'), params: fc.record({ name: toolName, arguments: argsObject }, { requiredKeys: ['name'] }) }),
  fc.record({ jsonrpc: fc.constant('2.0'), id, method: fc.constantFrom('tools/list', 'initialize', 'ping', 'resources/read'), params: fc.option(argsObject, { nil: undefined }) }, { requiredKeys: ['jsonrpc', 'id', 'method'] }),
  fc.record({ jsonrpc: fc.constant('2.0'), method: fc.constantFrom('notifications/initialized', 'notifications/cancelled') }),
  fc.record({ jsonrpc: fc.constant('2.0'), id, result: fc.jsonValue({ maxDepth: 2 }) }),
);

t.test('valid legacy requests, alone or batched, are always accepted', async (t) => {
  fc.assert(
    fc.property(fc.oneof(validLegacyRequest, fc.array(validLegacyRequest, { minLength: 1, maxLength: 5 })), anyHeaders, (body, headers) => {
      const c = classifyBody(body, headers);
      const messages = Array.isArray(body) ? body : [body];
      return c.era === 'legacy' && c.messages.length === messages.length && c.toolCalls.length === messages.filter((m) => 'method' in m && m.method === 'tools/call').length;
    }),
    { numRuns: 500 },
  );
  t.pass();
});

const validModern = fc.oneof(
  fc.record({ method: fc.constant('tools/call'), name: toolName, args: fc.option(argsObject, { nil: undefined }) }),
  fc.record({ method: fc.constant('resources/read'), name: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 24 }), args: fc.constant(undefined) }),
  fc.record({ method: fc.constant('prompts/get'), name: toolName, args: fc.constant(undefined) }),
  fc.record({ method: fc.constantFrom('tools/list', 'ping', 'server/discover'), name: fc.constant(undefined), args: fc.constant(undefined) }),
);

t.test('valid modern requests with their headers are always accepted, and pricing uses the body name', async (t) => {
  fc.assert(
    fc.property(validModern, id, fc.boolean(), ({ method, name, args }, requestId, alwaysEncode) => {
      const params: Record<string, unknown> = { _meta: { [VERSION_META_KEY]: MODERN_VERSION } };
      if (name !== undefined) params[method === 'resources/read' ? 'uri' : 'name'] = name;
      if (args !== undefined) params.arguments = args;
      const encode = alwaysEncode ? b64 : headerValue;
      const headers: Headers = { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': encode(method) };
      if (name !== undefined) headers['mcp-name'] = encode(name);
      const c = classifyBody({ jsonrpc: '2.0', id: requestId, method, params }, headers);
      return c.era === 'modern' && c.method === method && (method !== 'tools/call' || c.toolCalls[0]?.name === name);
    }),
    { numRuns: 500 },
  );
  t.pass();
});

// ---------------------------------------------------------------- SSE

type Ending = '\n' | '\r\n' | '\r';
interface Line {
  text: string;
  isData: boolean;
  /** The value of a data line, as the parser should see it. */
  value?: string;
}
interface GenEvent {
  lines: Line[];
  endings: Ending[];
  /** Ending of the blank line that terminates the event. */
  blank: Ending;
}

const lineText = fc.string({ unit: 'grapheme', maxLength: 16 }).map((s) => s.replace(/[\r\n]/g, ''));
const ending = fc.constantFrom<Ending>('\n', '\r\n', '\r');

const line: fc.Arbitrary<Line> = fc.oneof(
  lineText.map((v) => ({ text: `data: ${v}`, isData: true, value: v })),
  // WHATWG: one space after the colon is dropped, so `data:` + ' x' carries 'x'.
  lineText.map((v) => ({ text: `data:${v}`, isData: true, value: v.startsWith(' ') ? v.slice(1) : v })),
  fc.constant({ text: 'data', isData: true, value: '' }),
  fc.constant({ text: 'data:', isData: true, value: '' }),
  fc.stringMatching(/^[A-Za-z0-9_-]{1,12}$/).map((v) => ({ text: `id: ${v}`, isData: false })),
  fc.constantFrom('message', 'ping').map((v) => ({ text: `event: ${v}`, isData: false })),
  fc.nat(100000).map((v) => ({ text: `retry: ${v}`, isData: false })),
  lineText.map((v) => ({ text: `:${v}`, isData: false })),
  fc.constantFrom('datum: x', 'dat', 'data x', 'Data: y', 'foo: bar').map((v) => ({ text: v, isData: false })),
);

const event: fc.Arbitrary<GenEvent> = fc
  .array(fc.tuple(line, ending), { minLength: 1, maxLength: 5 })
  .chain((pairs) => {
    // After a line ended by a lone \r, a blank line ending in \n would merge into one \r\n: SSE cannot
    // express that stream, so the blank line then ends with \r or \r\n.
    const lastEnding = pairs[pairs.length - 1]![1];
    const blank = lastEnding === '\r' ? fc.constantFrom<Ending>('\r', '\r\n') : ending;
    return blank.map((b) => ({ lines: pairs.map(([l]) => l), endings: pairs.map(([, e]) => e), blank: b }));
  });

/** The stream's bytes and, per event, the byte offset at which its blank line starts. */
function encode(events: GenEvent[]): { bytes: Buffer; blankAt: number[] } {
  let text = '';
  const blankAt: number[] = [];
  for (const e of events) {
    e.lines.forEach((l, i) => (text += l.text + e.endings[i]));
    blankAt.push(Buffer.byteLength(text));
    text += e.blank;
  }
  return { bytes: Buffer.from(text, 'utf8'), blankAt };
}

const streamCase = fc.array(event, { minLength: 1, maxLength: 8 }).chain((events) => {
  const { bytes, blankAt } = encode(events);
  // Cuts right after a \r split CRLF pairs (the tricky case); other cuts land anywhere, mid-character too.
  const afterCr = [...bytes.keys()].filter((i) => bytes[i] === 0x0d).map((i) => i + 1);
  const cut = afterCr.length > 0 ? fc.oneof(fc.integer({ min: 0, max: bytes.length }), fc.constantFrom(...afterCr)) : fc.integer({ min: 0, max: bytes.length });
  return fc
    .tuple(fc.uniqueArray(cut, { maxLength: 12 }), fc.boolean())
    .map(([cuts, withEmpty]) => {
      const points = [...cuts].sort((a, b) => a - b);
      const chunks: Buffer[] = [];
      let from = 0;
      for (const at of [...points, bytes.length]) {
        chunks.push(bytes.subarray(from, at)); // may be empty: a zero-length chunk is legal input
        if (withEmpty) chunks.push(Buffer.alloc(0));
        from = at;
      }
      return { events, bytes, blankAt, chunks };
    });
});

interface RunResult {
  output: string;
  violations: string[];
}

/** Feeds the chunks one by one and checks, before each next chunk, that exactly the completed events came out. */
async function runStream(c: { chunks: Buffer[]; blankAt: number[] }, hook: SseHook): Promise<RunResult> {
  let supplied = 0;
  let output = '';
  const violations: string[] = [];
  const completedBy = (bytes: number): number => c.blankAt.filter((at) => at < bytes).length;
  const emitted = (): number => output.split('\n\n').length - 1;
  async function* source(): AsyncGenerator<Buffer> {
    for (const chunk of c.chunks) {
      if (emitted() !== completedBy(supplied)) violations.push(`after ${supplied} bytes: ${emitted()} events out, ${completedBy(supplied)} complete`);
      supplied += chunk.length;
      yield chunk;
    }
  }
  for await (const piece of rewriteSse(source(), hook, { maxEventBytes: 1 << 20 })) {
    output += piece;
    if (emitted() > completedBy(supplied)) violations.push(`an event came out before its blank line (${supplied} bytes in)`);
  }
  return { output, violations };
}

t.test('with an identity hook every event comes out with exactly its lines, whatever the chunking', async (t) => {
  await fc.assert(
    fc.asyncProperty(streamCase, async (c) => {
      const seenData: (string | null)[] = [];
      const { output, violations } = await runStream(c, (e) => {
        seenData.push(e.data);
        return undefined;
      });
      const expected = c.events.map((e) => `${e.lines.map((l) => l.text).join('\n')}\n\n`).join('');
      const expectedData = c.events.filter((e) => e.lines.some((l) => l.isData)).map((e) => e.lines.filter((l) => l.isData).map((l) => l.value).join('\n'));
      return output === expected && violations.length === 0 && JSON.stringify(seenData) === JSON.stringify(expectedData);
    }),
    { numRuns: 300 },
  );
  t.pass();
});

t.test('an event never comes out before its blank line arrived, and always right after', async (t) => {
  await fc.assert(
    fc.asyncProperty(streamCase, async (c) => {
      const { violations } = await runStream(c, () => undefined);
      if (violations.length > 0) throw new Error(violations.join('; '));
    }),
    { numRuns: 300 },
  );
  t.pass();
});

t.test('with a rewriting hook only the data lines change', async (t) => {
  const hook: SseHook = (e) => `R[${JSON.stringify(e.data)}]\nsecond`;
  await fc.assert(
    fc.asyncProperty(streamCase, async (c) => {
      const { output, violations } = await runStream(c, hook);
      const expected = c.events
        .map((e) => {
          const data = e.lines.filter((l) => l.isData);
          if (data.length === 0) return `${e.lines.map((l) => l.text).join('\n')}\n\n`;
          const value = data.map((l) => l.value).join('\n');
          const kept = e.lines.filter((l) => !l.isData).map((l) => l.text);
          return `${[...kept, `data: R[${JSON.stringify(value)}]`, 'data: second'].join('\n')}\n\n`;
        })
        .join('');
      return output === expected && violations.length === 0;
    }),
    { numRuns: 300 },
  );
  t.pass();
});
