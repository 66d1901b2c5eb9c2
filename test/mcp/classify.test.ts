// The request classifier (SPEC §5.1 eras, §5.2 refusals before anything reaches the upstream).
import t, { type Test } from 'tap';
import { classifyBody, decodeHeaderValue, MODERN_VERSION, VERSION_META_KEY } from '../../src/mcp/classify.js';
import { GatewayError, type ErrorCode } from '../../src/errors.js';

type Headers = Record<string, string | string[] | undefined>;

const b64 = (text: string): string => `=?base64?${Buffer.from(text, 'utf8').toString('base64')}?=`;

function modern(method: string, params: Record<string, unknown> = {}, options: { notification?: boolean } = {}): Record<string, unknown> {
  const message: Record<string, unknown> = { jsonrpc: '2.0', method, params: { ...params, _meta: { [VERSION_META_KEY]: MODERN_VERSION } } };
  if (!options.notification) message.id = 1;
  return message;
}

function refusal(t: Test, body: unknown, headers: Headers, code: ErrorCode, rpc: number): void {
  let thrown: unknown;
  try {
    classifyBody(body, headers);
  } catch (error) {
    thrown = error;
  }
  t.ok(thrown instanceof GatewayError, `refused: ${JSON.stringify(body)}`);
  t.match(thrown, { code, rpcCode: rpc });
}

t.test('a legacy request is classified with its method and no tool calls', async (t) => {
  const c = classifyBody({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18' } }, {});
  t.match(c, { era: 'legacy', batch: false, method: 'initialize', toolCalls: [], listsTools: false });
});

t.test('a request is modern iff params._meta carries the protocol version', async (t) => {
  const headers = { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/list' };
  t.equal(classifyBody(modern('tools/list'), headers).era, 'modern');
  t.equal(classifyBody({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: { progressToken: 1 } } }, headers).era, 'legacy');
  t.equal(classifyBody({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: { [VERSION_META_KEY]: MODERN_VERSION } }, {}).era, 'legacy', 'the key outside _meta does not count');
});

t.test('a tools/call is extracted with its name and arguments', async (t) => {
  const c = classifyBody({ jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'echo', arguments: { text: 'hi' } } }, {});
  t.equal(c.toolCalls.length, 1);
  t.equal(c.toolCalls[0]?.name, 'echo');
  t.same(c.toolCalls[0]?.args, { text: 'hi' });
});

t.test('a tools/call without arguments has empty args', async (t) => {
  const c = classifyBody({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo' } }, {});
  t.same(c.toolCalls[0]?.args, {});
});

t.test('tools/list anywhere in a batch marks the reply for rewriting', async (t) => {
  const c = classifyBody([{ jsonrpc: '2.0', method: 'notifications/initialized' }, { jsonrpc: '2.0', id: 2, method: 'tools/list' }], {});
  t.match(c, { batch: true, method: 'batch', listsTools: true, era: 'legacy' });
});

t.test('a client response (to a server request) is a valid message', async (t) => {
  t.equal(classifyBody({ jsonrpc: '2.0', id: 7, result: {} }, {}).method, 'response');
  t.equal(classifyBody({ jsonrpc: '2.0', id: 7, error: { code: -1, message: 'no' } }, {}).method, 'response');
});

t.test('{} and the empty batch [] are -32600', async (t) => {
  refusal(t, {}, {}, 'TB_ERR_INVALID_REQUEST', -32600);
  refusal(t, [], {}, 'TB_ERR_INVALID_REQUEST', -32600);
});

t.test('non-request JSON values are -32600', async (t) => {
  for (const body of [null, 0, 'x', true, [1], [{}], { jsonrpc: '1.0', id: 1, method: 'm' }, { jsonrpc: '2.0', id: 1 }, { jsonrpc: '2.0', id: {}, method: 'm' }, { jsonrpc: '2.0', method: 5 }]) {
    refusal(t, body, {}, 'TB_ERR_INVALID_REQUEST', -32600);
  }
});

t.test('a batch with one bad entry is refused whole', async (t) => {
  refusal(t, [{ jsonrpc: '2.0', id: 1, method: 'ping' }, {}], {}, 'TB_ERR_INVALID_REQUEST', -32600);
});

t.test('a tools/call notification (no id) is -32600', async (t) => {
  refusal(t, { jsonrpc: '2.0', method: 'tools/call', params: { name: 'echo', arguments: {} } }, {}, 'TB_ERR_INVALID_REQUEST', -32600);
  refusal(t, [{ jsonrpc: '2.0', method: 'tools/call', params: { name: 'echo' } }], {}, 'TB_ERR_INVALID_REQUEST', -32600);
});

t.test('a tools/call with id null is a request, not a notification', async (t) => {
  t.equal(classifyBody({ jsonrpc: '2.0', id: null, method: 'tools/call', params: { name: 'echo' } }, {}).toolCalls.length, 1);
});

t.test('a tools/call whose name is not a string is -32602', async (t) => {
  for (const params of [undefined, null, [], {}, { name: 5 }, { name: null }, { name: ['echo'] }]) {
    refusal(t, { jsonrpc: '2.0', id: 1, method: 'tools/call', params }, {}, 'TB_ERR_INVALID_PARAMS', -32602);
  }
});

t.test('a tools/call whose arguments is not an object is -32602', async (t) => {
  for (const args of [null, [], 'x', 3, true]) {
    refusal(t, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: args } }, {}, 'TB_ERR_INVALID_PARAMS', -32602);
  }
});

t.test('a modern tools/call with a bad name is -32602 even when the headers repeat it', async (t) => {
  const body = modern('tools/call', { name: 5, arguments: {} });
  refusal(t, body, { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/call', 'mcp-name': '5' }, 'TB_ERR_INVALID_PARAMS', -32602);
});

t.test('a modern request with matching headers is accepted', async (t) => {
  const c = classifyBody(modern('tools/call', { name: 'echo', arguments: {} }), { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/call', 'mcp-name': 'echo' });
  t.match(c, { era: 'modern', method: 'tools/call' });
  t.equal(c.toolCalls[0]?.name, 'echo');
});

t.test('modern: each missing header is -32020', async (t) => {
  const body = modern('tools/call', { name: 'echo' });
  const full = { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/call', 'mcp-name': 'echo' };
  for (const name of Object.keys(full)) {
    const headers: Headers = { ...full, [name]: undefined };
    refusal(t, body, headers, 'TB_ERR_HEADER_MISMATCH', -32020);
  }
});

t.test('modern: each mismatched header is -32020', async (t) => {
  const body = modern('tools/call', { name: 'echo' });
  const full = { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/call', 'mcp-name': 'echo' };
  for (const [name, wrong] of [['mcp-protocol-version', '2025-11-25'], ['mcp-method', 'tools/list'], ['mcp-name', 'costly'], ['mcp-name', 'Echo']] as const) {
    refusal(t, body, { ...full, [name]: wrong }, 'TB_ERR_HEADER_MISMATCH', -32020);
  }
});

t.test('modern: a repeated header (array value) is -32020', async (t) => {
  const body = modern('tools/list');
  refusal(t, body, { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': ['tools/list', 'tools/list'] }, 'TB_ERR_HEADER_MISMATCH', -32020);
});

t.test('modern: a non-string protocol version in _meta is -32020', async (t) => {
  const body = { jsonrpc: '2.0', id: 1, method: 'ping', params: { _meta: { [VERSION_META_KEY]: 20260728 } } };
  refusal(t, body, { 'mcp-protocol-version': '20260728', 'mcp-method': 'ping' }, 'TB_ERR_HEADER_MISMATCH', -32020);
});

t.test('modern: =?base64?…?= header values are decoded before comparing', async (t) => {
  const name = 'météo_☀️_天気';
  const c = classifyBody(modern('tools/call', { name }), { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': b64('tools/call'), 'mcp-name': b64(name) });
  t.equal(c.toolCalls[0]?.name, name, 'pricing uses the body name');
});

t.test('modern: a base64 header that decodes to another name is -32020', async (t) => {
  refusal(t, modern('tools/call', { name: 'echo' }), { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/call', 'mcp-name': b64('costly') }, 'TB_ERR_HEADER_MISMATCH', -32020);
});

t.test('modern: the raw base64 wrapper is not the name itself', async (t) => {
  const wrapped = b64('echo');
  refusal(t, modern('tools/call', { name: wrapped }), { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/call', 'mcp-name': wrapped }, 'TB_ERR_HEADER_MISMATCH', -32020);
});

t.test('modern: Mcp-Name for resources/read repeats params.uri', async (t) => {
  const uri = 'file:///notes/ünïcode.txt';
  const base = { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'resources/read' };
  t.equal(classifyBody(modern('resources/read', { uri }), { ...base, 'mcp-name': b64(uri) }).era, 'modern');
  t.equal(classifyBody(modern('resources/read', { uri: 'file:///a' }), { ...base, 'mcp-name': 'file:///a' }).era, 'modern');
  refusal(t, modern('resources/read', { uri: 'file:///a', name: 'a' }), { ...base, 'mcp-name': 'a' }, 'TB_ERR_HEADER_MISMATCH', -32020);
  refusal(t, modern('resources/read', { uri: 'file:///a' }), base, 'TB_ERR_HEADER_MISMATCH', -32020);
});

t.test('modern: Mcp-Name for prompts/get repeats params.name', async (t) => {
  const base = { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'prompts/get' };
  t.equal(classifyBody(modern('prompts/get', { name: 'greet' }), { ...base, 'mcp-name': 'greet' }).method, 'prompts/get');
  refusal(t, modern('prompts/get', { name: 'greet' }), base, 'TB_ERR_HEADER_MISMATCH', -32020);
});

t.test('modern: methods without a name need no Mcp-Name', async (t) => {
  t.equal(classifyBody(modern('tools/list'), { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/list' }).listsTools, true);
});

t.test('modern: a method named like an Object.prototype key needs no Mcp-Name', async (t) => {
  t.equal(classifyBody(modern('toString'), { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'toString' }).method, 'toString');
});

t.test('modern: a tools/call notification is -32600', async (t) => {
  const body = modern('tools/call', { name: 'echo' }, { notification: true });
  refusal(t, body, { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/call', 'mcp-name': 'echo' }, 'TB_ERR_INVALID_REQUEST', -32600);
});

t.test('legacy requests are not header-checked', async (t) => {
  t.equal(classifyBody({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo' } }, { 'mcp-method': 'tools/list', 'mcp-name': 'other' }).era, 'legacy');
});

t.test('decodeHeaderValue leaves plain values and near-misses alone', async (t) => {
  t.equal(decodeHeaderValue('echo'), 'echo');
  t.equal(decodeHeaderValue('=?base64?ZWNobw==?='), 'echo');
  t.equal(decodeHeaderValue('=?base64?ZWNobw==?= '), '=?base64?ZWNobw==?= ');
  t.equal(decodeHeaderValue('x=?base64?ZWNobw==?='), 'x=?base64?ZWNobw==?=');
});

t.test('__proto__ keys in the body neither crash nor pollute', async (t) => {
  const body = JSON.parse('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"__proto__":{"polluted":true}}}}') as unknown;
  const c = classifyBody(body, {});
  t.equal(c.toolCalls[0]?.name, 'echo');
  t.equal(({} as Record<string, unknown>).polluted, undefined);
});
