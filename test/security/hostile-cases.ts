// The hostile-input corpus (issue 7, SPEC §11): one case per line of attack, each with the exact answer
// the gateway must give. hostile.test.ts runs every case against a real gateway in front of a real
// upstream (test/helpers/paid-upstream.ts) or, for `upstream:` cases, in front of a misbehaving one
// (test/helpers/hostile-upstream.ts), and checks the invariants that hold for all of them: the gateway
// stays up, never answers 500, never shows a stack trace, and the upstream never receives a priced
// call without a credit reserved for it.
//
// `$HANDLE` in a body stands for a funded handle (the test pays for one before the corpus runs);
// `$HANDLE_UPPER`, `$HANDLE_FULLWIDTH` and `$HANDLE_LOOKALIKE` (Cyrillic ѕ in the prefix) for near misses.
// The gateway under test prices fetch_readable (cost 1) and costly (cost 2); echo is free. Its
// bodyLimit is 64 KiB, maxResponseBytes 64 KiB, callDeadline 1.5 s, allowedHosts [127.0.0.1].
import type { HostileBehaviour } from '../helpers/hostile-upstream.js';

export const HANDLE = '$HANDLE';

export type Expectation =
  /** the gateway's own JSON-RPC error object with this code */
  | { rpcError: number }
  /** a challenge result (isError, _meta["xyz.tollbooth/challenge"].reason) */
  | { challenge: 'payment_required' | 'unknown_handle' }
  /** a refusal result (_meta["xyz.tollbooth/refusal"].reason) */
  | { refusal: 'bound_to_other_principal' | 'rate_limited' | 'payments_unavailable' | 'deadline_exceeded' | 'upstream_unavailable' }
  /** a result with the gateway's receipt: the call was paid and ran */
  | { receipt: true }
  /** the upstream's own reply relayed: a JSON-RPC error with this code, or a result (`'result'`) */
  | { upstream: number | 'result' }
  /** a batch: one expectation per reply, in order */
  | { batch: Expectation[] };

export interface HostileCase {
  name: string;
  request: {
    /** raw text or bytes are sent as they are; anything else is JSON.stringify'd */
    body: unknown;
    headers?: Record<string, string>;
  };
  /** run against the misbehaving upstream, answering tools/call this way */
  upstream?: HostileBehaviour;
  status: number;
  expect: Expectation;
  /** credits this case must spend (default 0) */
  spends?: number;
  /** priced tools/call requests the upstream must receive (default 0) */
  upstreamPricedCalls?: number;
}

const rpc = (method: unknown, params?: unknown, id: unknown = 1): Record<string, unknown> =>
  params === undefined ? { jsonrpc: '2.0', id, method } : { jsonrpc: '2.0', id, method, params };
const call = (name: unknown, args?: unknown, id: unknown = 1): Record<string, unknown> =>
  rpc('tools/call', args === undefined ? { name } : { name, arguments: args }, id);
const paid = (args: Record<string, unknown> = {}, id: unknown = 1) => call('fetch_readable', { url: 'https://example.com/', ...args }, id);

const MODERN = '2026-07-28';
const modern = (name: string, headers: Record<string, string> = {}, args: Record<string, unknown> = { url: 'https://example.com/' }) => ({
  body: { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name, arguments: args, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN } } },
  headers: { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': name, ...headers },
});

const nested = (depth: number, leaf: string): string => '{"a":'.repeat(depth) + leaf + '}'.repeat(depth);
const TRUNCATED = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_readable","arguments":{"url":"https://ex';

export const cases: HostileCase[] = [
  // --- malformed and truncated JSON: 400 -32700, nothing reaches the upstream ---
  { name: 'empty body', request: { body: '' }, status: 400, expect: { rpcError: -32700 } },
  { name: 'whitespace-only body', request: { body: ' \n\t ' }, status: 400, expect: { rpcError: -32700 } },
  { name: 'truncated object', request: { body: TRUNCATED }, status: 400, expect: { rpcError: -32700 } },
  { name: 'truncated mid-escape', request: { body: '{"jsonrpc":"2.0","id":1,"method":"tools/call\\u00' }, status: 400, expect: { rpcError: -32700 } },
  { name: 'trailing comma', request: { body: '{"jsonrpc":"2.0","id":1,"method":"ping",}' }, status: 400, expect: { rpcError: -32700 } },
  { name: 'single-quoted JSON', request: { body: "{'jsonrpc':'2.0','id':1,'method':'ping'}" }, status: 400, expect: { rpcError: -32700 } },
  { name: 'NaN literal', request: { body: '{"jsonrpc":"2.0","id":NaN,"method":"ping"}' }, status: 400, expect: { rpcError: -32700 } },
  { name: 'trailing garbage after a valid object', request: { body: '{"jsonrpc":"2.0","id":1,"method":"ping"} {"x":1}' }, status: 400, expect: { rpcError: -32700 } },
  { name: 'binary bytes that are not UTF-8', request: { body: Buffer.from([0xff, 0xfe, 0x00, 0x7b, 0xc3, 0x28, 0x80]) }, status: 400, expect: { rpcError: -32700 } },
  { name: 'NUL bytes around JSON', request: { body: '\u0000{"jsonrpc":"2.0","id":1,"method":"ping"}\u0000' }, status: 400, expect: { rpcError: -32700 } },
  { name: 'JSON with comments', request: { body: '{"jsonrpc":"2.0", /* hi */ "id":1,"method":"ping"}' }, status: 400, expect: { rpcError: -32700 } },

  // --- not a JSON-RPC request: 400 -32600 ---
  { name: 'empty object', request: { body: {} }, status: 400, expect: { rpcError: -32600 } },
  { name: 'empty batch', request: { body: [] }, status: 400, expect: { rpcError: -32600 } },
  { name: 'null', request: { body: 'null' }, status: 400, expect: { rpcError: -32600 } },
  { name: 'a bare number', request: { body: '42' }, status: 400, expect: { rpcError: -32600 } },
  { name: 'a bare string', request: { body: '"tools/call"' }, status: 400, expect: { rpcError: -32600 } },
  { name: 'jsonrpc 1.0', request: { body: { ...paid(), jsonrpc: '1.0' } }, status: 400, expect: { rpcError: -32600 } },
  { name: 'jsonrpc missing', request: { body: { id: 1, method: 'tools/call', params: { name: 'fetch_readable' } } }, status: 400, expect: { rpcError: -32600 } },
  { name: 'method as a number', request: { body: rpc(42) }, status: 400, expect: { rpcError: -32600 } },
  { name: 'method as an array', request: { body: rpc(['tools/call']) }, status: 400, expect: { rpcError: -32600 } },
  { name: 'method as an object', request: { body: rpc({ toString: 'tools/call' }) }, status: 400, expect: { rpcError: -32600 } },
  { name: 'method null', request: { body: rpc(null) }, status: 400, expect: { rpcError: -32600 } },
  { name: 'id as an object', request: { body: { ...paid(), id: { $gt: 0 } } }, status: 400, expect: { rpcError: -32600 } },
  { name: 'id as an array', request: { body: { ...paid(), id: [1] } }, status: 400, expect: { rpcError: -32600 } },
  { name: 'priced tools/call as a notification (no id)', request: { body: { jsonrpc: '2.0', method: 'tools/call', params: { name: 'fetch_readable', arguments: {} } } }, status: 400, expect: { rpcError: -32600 } },
  { name: 'batch holding a number', request: { body: [paid(), 1] }, status: 400, expect: { rpcError: -32600 } },
  { name: 'batch of nested batches', request: { body: [[paid()]] }, status: 400, expect: { rpcError: -32600 } },

  // --- wrong types for params, name, arguments: -32602, nothing reaches the upstream ---
  { name: 'params as a number', request: { body: rpc('tools/call', 5) }, status: 200, expect: { rpcError: -32602 } },
  { name: 'params as an array', request: { body: rpc('tools/call', ['fetch_readable', {}]) }, status: 200, expect: { rpcError: -32602 } },
  { name: 'params as a string', request: { body: rpc('tools/call', 'fetch_readable') }, status: 200, expect: { rpcError: -32602 } },
  { name: 'params null', request: { body: rpc('tools/call', null) }, status: 200, expect: { rpcError: -32602 } },
  { name: 'name as a number', request: { body: call(7, {}) }, status: 200, expect: { rpcError: -32602 } },
  { name: 'name as an array', request: { body: call(['fetch_readable'], {}) }, status: 200, expect: { rpcError: -32602 } },
  { name: 'name as an object', request: { body: call({ name: 'fetch_readable' }, {}) }, status: 200, expect: { rpcError: -32602 } },
  { name: 'name null', request: { body: call(null, {}) }, status: 200, expect: { rpcError: -32602 } },
  { name: 'name missing', request: { body: rpc('tools/call', { arguments: { url: 'x' } }) }, status: 200, expect: { rpcError: -32602 } },
  { name: 'arguments as a string', request: { body: call('fetch_readable', '{"url":"x"}') }, status: 200, expect: { rpcError: -32602 } },
  { name: 'arguments as an array', request: { body: call('fetch_readable', [HANDLE]) }, status: 200, expect: { rpcError: -32602 } },
  { name: 'arguments as a number', request: { body: call('fetch_readable', 1) }, status: 200, expect: { rpcError: -32602 } },
  { name: 'arguments null', request: { body: call('fetch_readable', null) }, status: 200, expect: { rpcError: -32602 } },

  // --- tollboothToken of the wrong type or shape: a challenge, never a spend, never forwarded ---
  { name: 'token as a number', request: { body: paid({ tollboothToken: 123456 }) }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'token as an array holding the real handle', request: { body: paid({ tollboothToken: [HANDLE] }) }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'token as an object holding the real handle', request: { body: paid({ tollboothToken: { value: HANDLE } }) }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'token null', request: { body: paid({ tollboothToken: null }) }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'token true', request: { body: paid({ tollboothToken: true }) }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'token a 60 KB string', request: { body: paid({ tollboothToken: 'tb_s_' + 'A'.repeat(60_000) }) }, status: 200, expect: { challenge: 'unknown_handle' } },
  { name: 'token with control and NUL characters', request: { body: paid({ tollboothToken: 'tb_s_\u0000\u0001\u001b[31m\r\n' }) }, status: 200, expect: { challenge: 'unknown_handle' } },
  { name: 'token: the real handle with a Cyrillic look-alike prefix', request: { body: paid({ tollboothToken: '$HANDLE_LOOKALIKE' }) }, status: 200, expect: { challenge: 'unknown_handle' } },
  { name: 'token: the real handle in upper case', request: { body: paid({ tollboothToken: '$HANDLE_UPPER' }) }, status: 200, expect: { challenge: 'unknown_handle' } },
  { name: 'token: the real handle with a trailing newline', request: { body: paid({ tollboothToken: `${HANDLE}\n` }) }, status: 200, expect: { challenge: 'unknown_handle' } },
  { name: 'token: the real handle with a zero-width space', request: { body: paid({ tollboothToken: `${HANDLE}\u200b` }) }, status: 200, expect: { challenge: 'unknown_handle' } },
  { name: 'token: the real handle in fullwidth letters', request: { body: paid({ tollboothToken: '$HANDLE_FULLWIDTH' }) }, status: 200, expect: { challenge: 'unknown_handle' } },
  { name: 'token nested below the top level of arguments', request: { body: paid({ inner: { tollboothToken: HANDLE } }) }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'token beside arguments in params', request: { body: rpc('tools/call', { name: 'fetch_readable', arguments: { url: 'x' }, tollboothToken: HANDLE }) }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'token in _meta', request: { body: rpc('tools/call', { name: 'fetch_readable', arguments: {}, _meta: { tollboothToken: HANDLE } }) }, status: 200, expect: { challenge: 'payment_required' } },

  // --- duplicate keys: the gateway prices what it parsed, the upstream gets the re-serialisation ---
  { name: 'duplicate name: free first, priced last', request: { body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"fetch_readable","arguments":{}}}' }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'duplicate name: priced first, free last', request: { body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_readable","name":"echo","arguments":{"text":"hi"}}}' }, status: 200, expect: { upstream: 'result' } },
  { name: 'duplicate method: tools/list then tools/call', request: { body: '{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"fetch_readable","arguments":{}}}' }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'duplicate tollboothToken: real then junk', request: { body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_readable","arguments":{"tollboothToken":"${HANDLE}","tollboothToken":"junk"}}}` }, status: 200, expect: { challenge: 'unknown_handle' } },
  { name: 'duplicate tollboothToken: junk then real (spends once, token stripped)', request: { body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_readable","arguments":{"tollboothToken":"junk","url":"https://example.com/","tollboothToken":"${HANDLE}"}}}` }, status: 200, expect: { receipt: true }, spends: 1, upstreamPricedCalls: 1 },
  { name: 'duplicate params: priced last', request: { body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"params":{"name":"costly","arguments":{"q":"x"}}}' }, status: 200, expect: { challenge: 'payment_required' } },

  // --- __proto__ and constructor ---
  { name: '__proto__ in params carrying the name', request: { body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"__proto__":{"name":"fetch_readable"},"arguments":{}}}' }, status: 200, expect: { rpcError: -32602 } },
  { name: '__proto__ in arguments carrying the token', request: { body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_readable","arguments":{"__proto__":{"tollboothToken":"${HANDLE}"}}}}` }, status: 200, expect: { challenge: 'payment_required' } },
  { name: '__proto__ as the top-level message prototype', request: { body: '{"__proto__":{"jsonrpc":"2.0","method":"tools/call"},"id":1}' }, status: 400, expect: { rpcError: -32600 } },
  { name: 'tool named constructor', request: { body: call('constructor', {}) }, status: 200, expect: { upstream: 'result' } },
  { name: 'tool named __proto__', request: { body: call('__proto__', {}) }, status: 200, expect: { upstream: 'result' } },
  { name: 'tool named hasOwnProperty', request: { body: call('hasOwnProperty', {}) }, status: 200, expect: { upstream: 'result' } },
  { name: 'method named constructor', request: { body: rpc('constructor', {}) }, status: 200, expect: { upstream: -32601 } },
  { name: 'method named __proto__', request: { body: rpc('__proto__') }, status: 200, expect: { upstream: -32601 } },
  { name: 'constructor key in free-tool arguments', request: { body: call('echo', { constructor: { prototype: { polluted: true } }, text: 'x' }) }, status: 200, expect: { upstream: 'result' } },

  // --- deep nesting ---
  { name: 'arguments nested 5,000 levels deep (free tool)', request: { body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":${nested(5_000, '1')}}}` }, status: 400, expect: { rpcError: -32600 } },
  { name: 'arguments nested 5,000 levels deep (priced tool, funded handle)', request: { body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_readable","arguments":{"tollboothToken":"${HANDLE}","deep":${nested(5_000, '1')}}}}` }, status: 400, expect: { rpcError: -32600 } },
  { name: 'a body of 20,000 nested arrays', request: { body: '['.repeat(20_000) + ']'.repeat(20_000) }, status: 400, expect: { rpcError: -32600 } },
  { name: 'params nested 60 levels (legitimately deep, passes)', request: { body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x","deep":${nested(60, '1')}}}}` }, status: 200, expect: { upstream: 'result' } },

  // --- oversized bodies: 413 with a JSON-RPC error ---
  { name: 'body just over bodyLimit', request: { body: JSON.stringify(call('echo', { text: 'x'.repeat(64 * 1024) })) }, status: 413, expect: { rpcError: -32600 } },
  { name: 'a 1 MiB body of one priced call', request: { body: JSON.stringify(paid({ tollboothToken: HANDLE, pad: 'y'.repeat(1024 * 1024) })) }, status: 413, expect: { rpcError: -32600 } },

  // --- batches mixing free and priced calls (legacy) ---
  { name: 'batch: free echo + priced call without token', request: { body: [call('echo', { text: 'a' }, 1), paid({}, 2)] }, status: 200, expect: { batch: [{ upstream: 'result' }, { challenge: 'payment_required' }] } },
  { name: 'batch: priced with handle + priced without', request: { body: [paid({ tollboothToken: HANDLE }, 'a'), paid({}, 'b')] }, status: 200, expect: { batch: [{ receipt: true }, { challenge: 'payment_required' }] }, spends: 1, upstreamPricedCalls: 1 },
  { name: 'batch: the same priced request id twice', request: { body: [paid({ tollboothToken: HANDLE }, 5), paid({ tollboothToken: HANDLE }, 5)] }, status: 400, expect: { rpcError: -32600 } },
  { name: 'batch: priced call as a notification inside', request: { body: [call('echo', {}, 1), { jsonrpc: '2.0', method: 'tools/call', params: { name: 'fetch_readable', arguments: { tollboothToken: HANDLE } } }] }, status: 400, expect: { rpcError: -32600 } },
  { name: 'batch: priced call with a wrong-typed token + free call', request: { body: [paid({ tollboothToken: 42 }, 1), call('echo', { text: 'b' }, 2)] }, status: 200, expect: { batch: [{ challenge: 'payment_required' }, { upstream: 'result' }] } },
  { name: 'batch: modern-looking priced entry is still priced', request: { body: [{ ...paid({}, 3), params: { name: 'fetch_readable', arguments: {}, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN } } }] }, status: 200, expect: { batch: [{ challenge: 'payment_required' }] } },
  { name: 'batch: cost-2 tool with handle, then a free call', request: { body: [call('costly', { q: 'x', tollboothToken: HANDLE }, 1), call('echo', { text: 'c' }, 2)] }, status: 200, expect: { batch: [{ receipt: true }, { upstream: 'result' }] }, spends: 2, upstreamPricedCalls: 1 },

  // --- method and tool name tricks: not the priced method, so the upstream refuses it ---
  { name: 'method Tools/Call (case trick)', request: { body: { ...paid({ tollboothToken: 'x' }), method: 'Tools/Call' } }, status: 200, expect: { upstream: -32601 } },
  { name: 'method "tools/call " (trailing space)', request: { body: { ...paid(), method: 'tools/call ' } }, status: 200, expect: { upstream: -32601 } },
  { name: 'method tools/call with a NUL', request: { body: { ...paid(), method: 'tools/call\u0000' } }, status: 200, expect: { upstream: -32601 } },
  { name: 'tool FETCH_READABLE (case trick)', request: { body: call('FETCH_READABLE', { url: 'x' }) }, status: 200, expect: { upstream: 'result' } },
  { name: 'tool fetch_readabl\u0435 (Cyrillic e)', request: { body: call('fetch_readabl\u0435', { url: 'x' }) }, status: 200, expect: { upstream: 'result' } },
  { name: 'tool fetch_readable with a zero-width joiner', request: { body: call('fetch_\u200dreadable', { url: 'x' }) }, status: 200, expect: { upstream: 'result' } },
  { name: 'tool "fetch_readable " (trailing space)', request: { body: call('fetch_readable ', { url: 'x' }) }, status: 200, expect: { upstream: 'result' } },
  { name: 'tool name escaped in JSON (\\u0066etch_readable) is the priced tool', request: { body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\u0066etch_readable","arguments":{}}}' }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'method escaped in JSON (tools\\/call) is tools/call', request: { body: '{"jsonrpc":"2.0","id":1,"method":"tools\\/call","params":{"name":"fetch_readable","arguments":{}}}' }, status: 200, expect: { challenge: 'payment_required' } },

  // --- modern requests: Mcp-Name and friends must repeat the body ---
  { name: 'modern: Mcp-Name says echo, body says fetch_readable', request: modern('fetch_readable', { 'mcp-name': 'echo' }), status: 400, expect: { rpcError: -32020 } },
  { name: 'modern: Mcp-Name says fetch_readable, body says echo', request: modern('echo', { 'mcp-name': 'fetch_readable' }), status: 400, expect: { rpcError: -32020 } },
  { name: 'modern: Mcp-Name in base64 matching the body', request: modern('fetch_readable', { 'mcp-name': '=?base64?ZmV0Y2hfcmVhZGFibGU=?=' }), status: 200, expect: { challenge: 'payment_required' } },
  { name: 'modern: Mcp-Name in base64 naming another tool', request: modern('fetch_readable', { 'mcp-name': `=?base64?${Buffer.from('echo').toString('base64')}?=` }), status: 400, expect: { rpcError: -32020 } },
  { name: 'modern: Mcp-Name in upper case', request: modern('fetch_readable', { 'mcp-name': 'FETCH_READABLE' }), status: 400, expect: { rpcError: -32020 } },
  { name: 'modern: Mcp-Method says tools/list', request: modern('fetch_readable', { 'mcp-method': 'tools/list' }), status: 400, expect: { rpcError: -32020 } },
  { name: 'modern: MCP-Protocol-Version mismatched', request: modern('fetch_readable', { 'mcp-protocol-version': '2025-06-18' }), status: 400, expect: { rpcError: -32020 } },
  { name: 'modern: Mcp-Name missing', request: { ...modern('fetch_readable'), headers: { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call' } }, status: 400, expect: { rpcError: -32020 } },

  // --- content-type and encoding lies: only JSON is parsed, and it is priced whatever else it claims ---
  { name: 'priced call labelled text/plain', request: { body: paid(), headers: { 'content-type': 'text/plain' } }, status: 415, expect: { rpcError: -32600 } },
  { name: 'JSON labelled application/x-www-form-urlencoded', request: { body: paid({ tollboothToken: HANDLE }), headers: { 'content-type': 'application/x-www-form-urlencoded' } }, status: 415, expect: { rpcError: -32600 } },
  { name: 'JSON labelled multipart/form-data', request: { body: paid({ tollboothToken: HANDLE }), headers: { 'content-type': 'multipart/form-data; boundary=x' } }, status: 415, expect: { rpcError: -32600 } },
  { name: 'form-encoded body labelled application/json', request: { body: 'method=tools%2Fcall&name=fetch_readable', headers: { 'content-type': 'application/json' } }, status: 400, expect: { rpcError: -32700 } },
  { name: 'priced call labelled APPLICATION/JSON; charset=UTF-8', request: { body: paid(), headers: { 'content-type': 'APPLICATION/JSON; charset=UTF-8' } }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'priced call labelled application/vnd.x+json', request: { body: paid(), headers: { 'content-type': 'application/vnd.x+json' } }, status: 200, expect: { challenge: 'payment_required' } },
  { name: 'plain JSON labelled gzip-encoded', request: { body: paid({ tollboothToken: HANDLE }), headers: { 'content-encoding': 'gzip' } }, status: 415, expect: { rpcError: -32600 } },
  { name: 'free call labelled gzip-encoded', request: { body: call('echo', { text: 'x' }), headers: { 'content-encoding': 'gzip' } }, status: 415, expect: { rpcError: -32600 } },

  // --- foreign browser origins and unexpected Host headers (DNS rebinding): 403 (-32003, like every 403) before anything runs ---
  { name: 'a foreign Origin', request: { body: paid({ tollboothToken: HANDLE }), headers: { origin: 'http://evil.example' } }, status: 403, expect: { rpcError: -32003 } },
  { name: 'Origin "null" (sandboxed page)', request: { body: paid({ tollboothToken: HANDLE }), headers: { origin: 'null' } }, status: 403, expect: { rpcError: -32003 } },
  { name: 'a Host outside allowedHosts (DNS rebinding)', request: { body: paid({ tollboothToken: HANDLE }), headers: { host: 'attacker.example' } }, status: 403, expect: { rpcError: -32003 } },

  // --- a misbehaving upstream on a paid call: refused, the credit refunded ---
  { name: 'upstream: a correct JSON result (control)', upstream: 'ok-json', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { receipt: true }, spends: 1, upstreamPricedCalls: 1 },
  { name: 'upstream: a correct SSE result (control)', upstream: 'ok-sse', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { receipt: true }, spends: 1, upstreamPricedCalls: 1 },
  // A reply the gateway cannot match exactly to the priced request fails closed (SPEC §6.5): never passed on, credit released.
  { name: 'upstream: the result inside a JSON array', upstream: 'ok-json-array', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: the result under the id "1" for the request id 1 (JSON)', upstream: 'json-string-id', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: the result under the id "1" for the request id 1 (SSE)', upstream: 'sse-string-id', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: the result wrapped in an array inside an SSE event', upstream: 'sse-array-wrapped', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: two results for the call in one SSE write', upstream: 'sse-two-results', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: a result for another id before the right one (SSE)', upstream: 'sse-other-id-first', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: a batch reply answering the priced entry twice', upstream: 'batch-duplicate', request: { body: [paid({ tollboothToken: HANDLE }, 1), call('echo', { text: 'x' }, 2)] }, status: 200, expect: { batch: [{ refusal: 'upstream_unavailable' }, { upstream: 'result' }] }, upstreamPricedCalls: 1 },
  { name: 'upstream: a batch reply with string ids for number ids', upstream: 'batch-string-ids', request: { body: [paid({ tollboothToken: HANDLE }, 1), call('echo', { text: 'x' }, 2)] }, status: 200, expect: { batch: [{ refusal: 'upstream_unavailable' }, { rpcError: -32603 }] }, upstreamPricedCalls: 1 },
  { name: 'upstream: a batch reply that never comes (the deadline)', upstream: 'json-hangs', request: { body: [paid({ tollboothToken: HANDLE }, 1), call('echo', { text: 'x' }, 2)] }, status: 200, expect: { batch: [{ refusal: 'deadline_exceeded' }, { rpcError: -32603 }] }, upstreamPricedCalls: 1 },
  { name: 'upstream: a batch reply without the priced entry', upstream: 'batch-missing', request: { body: [paid({ tollboothToken: HANDLE }, 1), call('echo', { text: 'x' }, 2)] }, status: 200, expect: { batch: [{ refusal: 'upstream_unavailable' }, { upstream: 'result' }] }, upstreamPricedCalls: 1 },
  { name: 'upstream: malformed SSE that ends', upstream: 'sse-malformed', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: SSE event whose data is not JSON', upstream: 'sse-garbage-data', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: SSE that never ends', upstream: 'sse-never-ends', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'deadline_exceeded' }, upstreamPricedCalls: 1 },
  { name: 'upstream: JSON headers, then silence', upstream: 'json-hangs', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'deadline_exceeded' }, upstreamPricedCalls: 1 },
  { name: 'upstream: JSON body over maxResponseBytes', upstream: 'json-huge', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: one SSE event over maxResponseBytes', upstream: 'sse-huge-event', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: HTML labelled application/json', upstream: 'json-garbage', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: text/html content type', upstream: 'wrong-content-type', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: 200 with an empty body', upstream: 'empty', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: 500 with a stack trace', upstream: 'status-500', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: connection reset mid-body', upstream: 'reset', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: a result for another id', upstream: 'wrong-id', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { refusal: 'upstream_unavailable' }, upstreamPricedCalls: 1 },
  { name: 'upstream: isError result is relayed, credit refunded', upstream: 'tool-error', request: { body: paid({ tollboothToken: HANDLE }) }, status: 200, expect: { upstream: 'result' }, upstreamPricedCalls: 1 },
  { name: 'upstream: garbage reply to a batch with a paid entry', upstream: 'json-garbage', request: { body: [paid({ tollboothToken: HANDLE }, 1), call('echo', { text: 'x' }, 2)] }, status: 200, expect: { batch: [{ refusal: 'upstream_unavailable' }, { rpcError: -32603 }] }, upstreamPricedCalls: 1 },
  { name: 'upstream: over-size reply to a batch with a paid entry', upstream: 'json-huge', request: { body: [paid({ tollboothToken: HANDLE }, 1), call('echo', { text: 'x' }, 2)] }, status: 200, expect: { batch: [{ refusal: 'upstream_unavailable' }, { rpcError: -32603 }] }, upstreamPricedCalls: 1 },
  { name: 'upstream: over-size reply to a free call is relayed as it is', upstream: 'json-huge', request: { body: call('echo', { text: 'x' }) }, status: 200, expect: { upstream: 'result' } },
];
