// `servers` (SPEC §18): more MCP endpoints, each with its own upstream, tools and scopes. Validation:
// names, SKUs of their tools, and paths distinct from each other, from server.mcpPath and from the
// gateway's own routes; every problem named at its YAML line.
import t from 'tap';
import { parseConfigText } from '../../src/config/load.js';
import { maskSecrets } from '../../src/config/mask.js';
import { refusalOf } from '../helpers/config-refusal.js';

const FILE = 'config/test.yaml';
const yaml = (...lines: string[]): string => `${lines.join('\n')}\n`;
const parse = (text: string) => parseConfigText(text, FILE, {});
const BASE = ['upstream: { url: "http://127.0.0.1:3001/mcp" }', 'skus:', '  research: { label: R, amount: "5.00", currency: USDC, credits: 10 }'];

const refusal = (text: string): string => refusalOf(parse, text);

t.test('a servers entry gets the upstream defaults of the top level, stdio settings included', async (t) => {
  const config = parse(
    yaml(
      ...BASE,
      'servers:',
      '  files:',
      '    path: /mcp/files',
      '    upstream: { command: ["node", "server.js"] }',
      '    tools: { write_file: { sku: research, cost: 2 } }',
      '    toolScopes: { write_file: [files:write] }',
      '  web:',
      '    path: /web',
      '    upstream: { url: "http://127.0.0.1:3002/mcp", headers: { authorization: "Bearer upstream-secret" } }',
    ),
  );
  t.strictSame(config.servers.files?.upstream.stdio, { sessions: 'perClient', maxChildren: 32, idleTimeout: 600_000, initTimeout: 10_000, killTimeout: 5_000 });
  t.equal(config.servers.files?.upstream.callDeadline, 20_000);
  t.strictSame(config.servers.files?.tools, { write_file: { sku: 'research', cost: 2, charge: 'success', hidden: false } });
  t.strictSame(config.servers.files?.toolScopes, { write_file: ['files:write'] });
  t.strictSame(config.servers.web?.tools, {});
  t.equal(maskSecrets(config).servers.web?.upstream.headers.authorization, '***', "a server's upstream headers are masked like the top level's");
  t.strictSame(parse(yaml(...BASE)).servers, {}, 'none by default');
});

t.test('paths must differ from each other, from server.mcpPath and from the gateway routes', async (t) => {
  t.match(refusal(yaml(...BASE, 'servers:', '  a: { path: /mcp, upstream: { url: "http://x/mcp" } }')), /config\/test\.yaml:5:\d+ servers\.a\.path: expected a path no other endpoint or gateway route uses, found "\/mcp", which is already server\.mcpPath/);
  t.match(refusal(yaml(...BASE, 'servers:', '  a: { path: /x, upstream: { url: "http://x/mcp" } }', '  b: { path: /x, upstream: { url: "http://y/mcp" } }')), /servers\.b\.path: .*already servers\.a\.path/);
  t.match(refusal(yaml(...BASE, 'servers:', '  a: { path: /metrics, upstream: { url: "http://x/mcp" } }')), /servers\.a\.path: .*already metrics\.path/);
  for (const path of ['/healthz', '/readyz', '/tollbooth/checkout', '/.well-known/oauth-protected-resource/x', '/tollbooth']) {
    t.match(refusal(yaml(...BASE, 'servers:', `  a: { path: ${path}, upstream: { url: "http://x/mcp" } }`)), /servers\.a\.path: .*the gateway's own/, `${path} is the gateway's`);
  }
  t.match(refusal(yaml(...BASE, 'servers:', '  a: { path: no-slash, upstream: { url: "http://x/mcp" } }')), /servers\.a\.path: expected a path starting with "\/"/);
  t.ok(parse(yaml(...BASE, 'servers:', '  a: { path: /healthzz, upstream: { url: "http://x/mcp" } }')), 'a path that merely starts with the same letters is fine');
});

t.test('names, SKUs and upstreams are validated per entry', async (t) => {
  t.match(refusal(yaml(...BASE, 'servers:', '  default: { path: /d, upstream: { url: "http://x/mcp" } }')), /servers\.default: expected a server name .* other than "default"/);
  t.match(refusal(yaml(...BASE, 'servers:', '  "a b": { path: /d, upstream: { url: "http://x/mcp" } }')), /expected a server name/);
  t.match(refusal(yaml(...BASE, 'servers:', '  a:', '    path: /a', '    upstream: { url: "http://x/mcp" }', '    tools: { t: { sku: nope, cost: 1 } }')), /config\/test\.yaml:8:\d+ servers\.a\.tools\.t\.sku: expected the name of an SKU under skus \(known: research\)/);
  t.match(refusal(yaml(...BASE, 'servers:', '  a: { path: /a, upstream: { url: "http://x/mcp", command: [x] } }')), /servers\.a\.upstream: expected exactly one of upstream\.url or upstream\.command/);
  t.match(refusal(yaml(...BASE, 'servers:', '  a: { path: /a, upstream: { url: "http://x/mcp" }, tool: {} }')), /servers\.a\.tool: .*unknown key "tool" \(did you mean "tools"\?\)/);
  t.match(refusal(yaml(...BASE, 'servers:', '  a: { path: /a, upstream: { url: "http://x/mcp" }, toolScopes: { t: ["bad scope"] } }')), /servers\.a\.toolScopes\.t\[0\]: expected an RFC 6749 scope-token/);
});
