// What a scope may be (RFC 6749 scope-token) and which scopes a request needs (SPEC §9, §20).
import t from 'tap';
import { scopeRequirements } from '../../src/auth/scopes.js';
import { SCOPE_TOKEN } from '../../src/config/schema.js';

t.test('a scope-token is printable ASCII without space, double quote or backslash', async (t) => {
  for (const scope of ['mcp:use', 'https://api.example.test/read', "!#$%&'()*+,-./:;<=>?@[]^_`{|}~", 'a']) t.match(scope, SCOPE_TOKEN, scope);
  for (const scope of ['', 'a b', 'a"b', 'a\\b', 'a\tb', 'a\r\nb', 'caf\u00e9', '\u007f']) t.notMatch(scope, SCOPE_TOKEN, JSON.stringify(scope));
});

t.test('needed: requiredScopes for any request, plus the scopes of every tool called, each once, in config order', async (t) => {
  const scopes = scopeRequirements({ requiredScopes: ['mcp:use', 'mcp:use'], toolScopes: { b: ['s:b', 'mcp:use'], a: ['s:a'], c: [] } });
  t.same(scopes.needed([]), ['mcp:use'], 'not a tools/call');
  t.same(scopes.needed(['free']), ['mcp:use'], 'a tool without toolScopes');
  t.same(scopes.needed(['a']), ['mcp:use', 's:a']);
  t.same(scopes.needed(['b', 'a', 'b', 'c', 'free']), ['mcp:use', 's:b', 's:a'], 'a batch: the union');
});

t.test('needed: tool names that are Object.prototype members find nothing', async (t) => {
  const scopes = scopeRequirements({ requiredScopes: [], toolScopes: { real: ['s'] } });
  t.same(scopes.needed(['constructor', '__proto__', 'toString', 'hasOwnProperty']), []);
});
