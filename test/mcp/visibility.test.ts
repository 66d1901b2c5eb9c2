// Tool visibility (SPEC §18): hidden tools, and in oauth mode the tools a caller's scopes do not cover.
import t from 'tap';
import { configSchema, type ConfigInput } from '../../src/config/schema.js';
import { pricingFromConfig, rewriteToolsListMessages, rewriteToolsListResult } from '../../src/mcp/tools-list.js';
import { unknownToolMessage, visibilityFromConfig } from '../../src/mcp/visibility.js';

const OAUTH = { mode: 'oauth' as const, issuer: 'https://id.example/', jwksUrl: 'https://id.example/jwks', requiredScopes: ['mcp:use'] };
const SKUS = { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 3 } };

function configOf(input: Partial<ConfigInput>) {
  return configSchema.parse({ upstream: { url: 'http://127.0.0.1:9/mcp' }, server: { publicUrl: 'http://127.0.0.1:8080/mcp' }, skus: SKUS, ...input });
}

const scopes = (...list: string[]): ReadonlySet<string> => new Set(list);
const tool = (name: string) => ({ name, description: `${name} does things.`, inputSchema: { type: 'object', properties: {} } });
const names = (result: unknown): string[] => ((result as { tools: { name: string }[] }).tools ?? []).map((entry) => entry.name);

t.test('nothing configured: every caller sees every tool (no view at all)', async (t) => {
  const visibility = visibilityFromConfig(configOf({}));
  t.equal(visibility.viewFor(null), null);
  t.equal(visibility.isHidden('echo'), false);
  const oauth = visibilityFromConfig(configOf({ auth: { ...OAUTH } }));
  t.equal(oauth.viewFor(scopes('mcp:use')), null);
});

t.test('a hidden tool is hidden from every caller and is not callable; others are untouched', async (t) => {
  const visibility = visibilityFromConfig(configOf({ tools: { admin_reset: { hidden: true } } }));
  t.equal(visibility.isHidden('admin_reset'), true);
  t.equal(visibility.isHidden('echo'), false);
  t.equal(visibility.isHidden('__proto__'), false);
  const view = visibility.viewFor(null);
  t.ok(view);
  t.equal(view?.('admin_reset'), false);
  t.equal(view?.('echo'), true);
});

t.test('oauth with hideUnauthorisedTools: a tool whose toolScopes the token lacks is out of the view', async (t) => {
  const visibility = visibilityFromConfig(configOf({ auth: { ...OAUTH, toolScopes: { delete_file: ['files:write'], costly: ['research:pay', 'research:big'] } } }));
  const reader = visibility.viewFor(scopes('mcp:use'));
  t.same([reader?.('delete_file'), reader?.('costly'), reader?.('echo')], [false, false, true]);
  const writer = visibility.viewFor(scopes('mcp:use', 'files:write', 'research:pay'));
  t.same([writer?.('delete_file'), writer?.('costly'), writer?.('echo')], [true, false, true], 'every scope of a tool is needed');
  t.equal(visibility.viewFor(scopes('mcp:use', 'files:write', 'research:pay', 'research:big')), null, 'a caller holding every scope sees everything');
});

t.test('the view of one scope set is built once (the resource server caches scope sets per token)', async (t) => {
  const visibility = visibilityFromConfig(configOf({ auth: { ...OAUTH, toolScopes: { delete_file: ['files:write'] } } }));
  const set = scopes('mcp:use');
  t.equal(visibility.viewFor(set), visibility.viewFor(set));
});

t.test('hideUnauthorisedTools: false, or auth.mode none, lists tools whatever the scopes', async (t) => {
  const off = visibilityFromConfig(configOf({ auth: { ...OAUTH, toolScopes: { delete_file: ['files:write'] }, hideUnauthorisedTools: false } }));
  t.equal(off.viewFor(scopes('mcp:use')), null);
  const none = visibilityFromConfig(configOf({ auth: { toolScopes: { delete_file: ['files:write'] } } }));
  t.equal(none.viewFor(null), null);
});

t.test('hidden and scope rules combine: hidden stays hidden even from a caller with every scope', async (t) => {
  const visibility = visibilityFromConfig(configOf({ tools: { secret: { hidden: true } }, auth: { ...OAUTH, toolScopes: { secret: ['root'], delete_file: ['files:write'] } } }));
  const all = visibility.viewFor(scopes('mcp:use', 'root', 'files:write'));
  t.equal(all?.('secret'), false);
  t.equal(all?.('delete_file'), true);
  const some = visibility.viewFor(scopes('mcp:use'));
  t.same([some?.('secret'), some?.('delete_file'), some?.('echo')], [false, false, true]);
});

t.test('a hidden priced tool is not priced on the request path (nobody can call it)', async (t) => {
  const config = configOf({ tools: { parked: { sku: 'research', cost: 2, hidden: true }, costly: { sku: 'research', cost: 1 } } });
  const pricing = pricingFromConfig(config);
  t.equal(pricing.priceOf('parked'), undefined);
  t.ok(pricing.priceOf('costly'));
  t.equal(visibilityFromConfig(config).isHidden('parked'), true);
});

t.test('tools/list: tools outside the view are removed, nextCursor and other fields kept, priced tools still priced', async (t) => {
  const config = configOf({ tools: { secret: { hidden: true }, costly: { sku: 'research', cost: 1 } }, auth: { ...OAUTH, toolScopes: { delete_file: ['files:write'] } } });
  const pricing = pricingFromConfig(config);
  const view = visibilityFromConfig(config).viewFor(scopes('mcp:use'));
  const result = rewriteToolsListResult({ tools: [tool('echo'), tool('secret'), tool('costly'), tool('delete_file')], nextCursor: 'page-2', _meta: { x: 1 } } as never, pricing, view);
  t.same(names(result), ['echo', 'costly']);
  t.equal(result?.nextCursor, 'page-2');
  t.same(result?._meta, { x: 1 });
  t.match((result?.tools as { description: string }[])[1]?.description, /Paid tool/);
});

t.test('tools/list: a page left with no visible tool is an empty page, not an error', async (t) => {
  const config = configOf({ tools: { secret: { hidden: true } } });
  const result = rewriteToolsListResult({ tools: [tool('secret')], nextCursor: 'c' } as never, pricingFromConfig(config), visibilityFromConfig(config).viewFor(null));
  t.same(result, { tools: [], nextCursor: 'c' });
});

t.test('tools/list: nothing hidden from the caller and nothing priced → null (the body goes as it came)', async (t) => {
  const config = configOf({ tools: { secret: { hidden: true } } });
  t.equal(rewriteToolsListResult({ tools: [tool('echo')] }, pricingFromConfig(config), visibilityFromConfig(config).viewFor(null)), null);
});

t.test('tools/list inside a batch reply: each tools/list result filtered, other responses untouched', async (t) => {
  const config = configOf({ tools: { secret: { hidden: true } } });
  const ping = { jsonrpc: '2.0', id: 2, result: {} };
  const out = rewriteToolsListMessages([{ jsonrpc: '2.0', id: 1, result: { tools: [tool('echo'), tool('secret')] } }, ping], pricingFromConfig(config), visibilityFromConfig(config).viewFor(null)) as unknown[];
  t.same(names((out[0] as { result: unknown }).result), ['echo']);
  t.equal(out[1], ping);
});

t.test('the unknown-tool message is the MCP spec\'s own wording', async (t) => {
  t.equal(unknownToolMessage('admin_reset'), 'Unknown tool: admin_reset');
});
