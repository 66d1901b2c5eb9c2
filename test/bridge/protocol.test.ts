// The pure rules of the bridge: era shaping, result stamps, the bound on client state, capability-set keys,
// and whom a server→client request is for on a shared child.
import t from 'tap';
import {
  canonicalJson, chooseRelayTarget, discoverResult, idKey, isModernRequest, legacyInitializeResult, modernClientCapabilities, oversizedClientState,
  stampModernResult, withoutEnvelope,
  type ChildIdentity,
} from '../../src/bridge/protocol.js';

const child: ChildIdentity = { protocolVersion: '2025-06-18', capabilities: { tools: { listChanged: true } }, serverInfo: { name: 'kid', version: '1' } };

t.test('a request is modern iff _meta carries the protocol version', async (t) => {
  t.equal(isModernRequest({ _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } }), true);
  t.equal(isModernRequest({ _meta: { 'io.modelcontextprotocol/clientInfo': {} } }), false);
  t.equal(isModernRequest(undefined), false);
});

t.test('the envelope is lifted before the child sees a modern request; other _meta stays', async (t) => {
  const params = {
    name: 'echo',
    _meta: {
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
      'io.modelcontextprotocol/clientCapabilities': {},
      'io.modelcontextprotocol/clientInfo': { name: 'c', version: '1' },
      'io.modelcontextprotocol/logLevel': 'info',
      'io.modelcontextprotocol/related-task': { taskId: 't' },
      progressToken: 3,
    },
  };
  t.same(withoutEnvelope(params), { name: 'echo', _meta: { 'io.modelcontextprotocol/related-task': { taskId: 't' }, progressToken: 3 } });
  t.same(withoutEnvelope({ name: 'echo', _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } }), { name: 'echo' }, 'an emptied _meta is dropped');
  t.equal(params._meta['io.modelcontextprotocol/protocolVersion'], '2026-07-28', 'the input is not mutated');
});

t.test('modern results gain resultType, cache fields on cacheable methods, and the server identity', async (t) => {
  t.same(stampModernResult('tools/call', { content: [] }, child.serverInfo), { content: [], resultType: 'complete', _meta: { 'io.modelcontextprotocol/serverInfo': child.serverInfo } });
  t.match(stampModernResult('tools/list', { tools: [], ttlMs: 500 }, child.serverInfo), { ttlMs: 500, cacheScope: 'private', resultType: 'complete' });
  t.match(stampModernResult('tools/call', { resultType: 'input_required', _meta: { a: 1 } }, child.serverInfo), { resultType: 'input_required', _meta: { a: 1 } });
});

t.test('legacy initialize echoes a legacy revision the client asked for, else the latest', async (t) => {
  t.equal(legacyInitializeResult('2025-03-26', child).protocolVersion, '2025-03-26');
  t.equal(legacyInitializeResult('2024-11-05', child).protocolVersion, '2025-11-25');
  t.equal(legacyInitializeResult('2026-07-28', child).protocolVersion, '2025-11-25');
  t.same(legacyInitializeResult('2025-06-18', child).capabilities, child.capabilities);
});

t.test('server/discover lists only the modern revision', async (t) => {
  t.match(discoverResult(child), { supportedVersions: ['2026-07-28'], capabilities: child.capabilities, serverInfo: child.serverInfo, resultType: 'complete', ttlMs: 0 });
});

t.test('a server→client request goes to the one session with running calls, else nowhere', async (t) => {
  t.equal(chooseRelayTarget([]), 'none');
  t.match(chooseRelayTarget([{ sessionId: 'a', seq: 1 }, { sessionId: 'a', seq: 4 }, { sessionId: 'a', seq: 2 }]), { seq: 4 });
  t.equal(chooseRelayTarget([{ sessionId: 'a', seq: 1 }, { sessionId: 'b', seq: 2 }]), 'ambiguous');
});

t.test('ids 1 and "1" are different keys', async (t) => {
  t.not(idKey(1), idKey('1'));
});


t.test('client state over 64 KiB is named; under it passes', async (t) => {
  t.equal(oversizedClientState({ capabilities: { experimental: { a: { x: 'y'.repeat(60_000) } } }, clientInfo: { name: 'n', version: '1' } }), undefined);
  t.match(oversizedClientState({ capabilities: {}, clientInfo: { name: 'n'.repeat(70_000), version: '1' } }), { field: 'clientInfo' });
  // 40,000 characters, 80,000 bytes in UTF-8: over the bound although the string length is not.
  t.match(oversizedClientState({ capabilities: { experimental: { a: { x: 'é'.repeat(40_000) } } } }), { field: 'capabilities', bytes: 80_031 }, 'bytes, not characters');
});

t.test('capability sets are keyed by content, not key order', async (t) => {
  t.equal(canonicalJson({ b: { y: 1, x: [2, { d: 1, c: 2 }] }, a: {} }), canonicalJson({ a: {}, b: { x: [2, { c: 2, d: 1 }], y: 1 } }));
  t.not(canonicalJson({ roots: {} }), canonicalJson({ roots: { listChanged: true } }));
  t.strictSame(modernClientCapabilities({ _meta: { 'io.modelcontextprotocol/clientCapabilities': { sampling: {} } } }), { sampling: {} });
  t.strictSame(modernClientCapabilities({}), {}, 'none declared is the empty set');
});
