// `budgets` and `allowances` (SPEC §23): what an operator writes, what the gateway reads, and every
// mistake refused with the YAML line it concerns and what to write instead (as `tollbooth check` prints).
import t from 'tap';
import { parseConfigText } from '../../src/config/load.js';
import { refusalOf } from '../helpers/config-refusal.js';

const FILE = 'config/test.yaml';
const yaml = (...lines: string[]): string => `${lines.join('\n')}\n`;
const parse = (text: string) => parseConfigText(text, FILE, {});
const BASE = [
  'upstream: { url: "http://127.0.0.1:3001/mcp" }',
  'skus:',
  '  research: { label: R, amount: "5.00", currency: USDC, credits: 10 }',
  'tools: { fetch_readable: { sku: research, cost: 1 }, extract_tables: { sku: research, cost: 2 } }',
  'servers:',
  '  files: { path: /files, upstream: { url: "http://127.0.0.1:3002/mcp" }, tools: { write_file: { sku: research, cost: 3 } } }',
];
const OAUTH = ['server: { publicUrl: "https://gw.example.com/mcp" }', 'auth: { mode: oauth, issuer: "https://id.example.com/", jwksUrl: "https://id.example.com/jwks" }'];

const refusal = (text: string): string => refusalOf(parse, text);

t.test('budgets and allowances are read with their windows in milliseconds; none by default', async (t) => {
  const config = parse(
    yaml(
      ...BASE,
      ...OAUTH,
      'budgets:',
      '  - { name: research-daily, per: principal, tools: [fetch_readable], window: 1d, maxCalls: 100, maxCredits: 300 }',
      '  - { name: files-hourly, per: handle, server: files, window: 1h, maxCredits: 30 }',
      'allowances:',
      '  - { name: trial, per: client, sku: research, window: 1d, freeCalls: 5 }',
    ),
  );
  t.strictSame(config.budgets, [
    { name: 'research-daily', per: 'principal', tools: ['fetch_readable'], window: 86_400_000, maxCalls: 100, maxCredits: 300 },
    { name: 'files-hourly', per: 'handle', server: 'files', window: 3_600_000, maxCredits: 30 },
  ]);
  t.strictSame(config.allowances, [{ name: 'trial', per: 'client', sku: 'research', window: 86_400_000, freeCalls: 5 }]);
  const bare = parse(yaml(...BASE));
  t.strictSame(bare.budgets, []);
  t.strictSame(bare.allowances, []);
});

t.test('a budget without maxCalls or maxCredits is refused at its line', async (t) => {
  const message = refusal(yaml(...BASE, 'budgets:', '  - { name: b, per: handle, window: 1d }'));
  t.match(message, /config\/test\.yaml:8:\d+ budgets\[0\](\.maxCalls)?: expected a cap: maxCalls or maxCredits \(a positive integer\), or both, found neither maxCalls nor maxCredits/);
});

t.test('unknown tools, SKUs and servers are refused, naming what exists', async (t) => {
  t.match(refusal(yaml(...BASE, 'budgets:', '  - { name: b, per: handle, tools: [fetch_readable, nope], window: 1d, maxCalls: 1 }')), /budgets\[0\]\.tools\[1\]: expected the name of a priced tool \(priced: fetch_readable, extract_tables, write_file\), found the string "nope"/);
  t.match(refusal(yaml(...BASE, 'allowances:', '  - { name: a, per: client, sku: gold, window: 1d, freeCalls: 1 }')), /allowances\[0\]\.sku: expected the name of an SKU under skus \(known: research\), found the string "gold"/);
  t.match(refusal(yaml(...BASE, 'budgets:', '  - { name: b, per: handle, server: web, window: 1d, maxCalls: 1 }')), /budgets\[0\]\.server: expected an endpoint name \(known: default, files\), found the string "web"/);
  t.ok(parse(yaml(...BASE, 'budgets:', '  - { name: b, per: handle, tools: [write_file], window: 1d, maxCalls: 1 }')), "a tool priced only at another endpoint is known");
});

t.test('at most one of tools, sku and server', async (t) => {
  t.match(refusal(yaml(...BASE, 'budgets:', '  - { name: b, per: handle, tools: [write_file], server: files, window: 1d, maxCalls: 1 }')), /budgets\[0\]\.server: expected at most one of tools, sku or server .*found tools and server together/);
  t.match(refusal(yaml(...BASE, 'allowances:', '  - { name: a, per: client, sku: research, tools: [fetch_readable], window: 1d, freeCalls: 1 }')), /allowances\[0\]\.sku: expected at most one of tools, sku or server/);
});

t.test('per: principal needs auth.mode oauth, and says what to write instead', async (t) => {
  t.match(refusal(yaml(...BASE, 'budgets:', '  - { name: b, per: principal, window: 1d, maxCalls: 1 }')), /config\/test\.yaml:8:\d+ budgets\[0\]\.per: expected per: handle, because auth\.mode is not oauth .*found the string "principal"/);
  t.match(refusal(yaml(...BASE, 'allowances:', '  - { name: a, per: principal, window: 1d, freeCalls: 1 }')), /allowances\[0\]\.per: expected per: client, because auth\.mode is not oauth/);
  t.ok(parse(yaml(...BASE, ...OAUTH, 'budgets:', '  - { name: b, per: principal, window: 1d, maxCalls: 1 }')));
  t.match(refusal(yaml(...BASE, 'allowances:', '  - { name: a, per: handle, window: 1d, freeCalls: 1 }')), /allowances\[0\]\.per: expected principal \(needs auth\.mode oauth\) or client/);
});

t.test('duplicate names are refused per kind; a budget and an allowance may share one', async (t) => {
  const message = refusal(yaml(...BASE, 'budgets:', '  - { name: b, per: handle, window: 1d, maxCalls: 1 }', '  - { name: b, per: handle, window: 1h, maxCalls: 2 }'));
  t.match(message, /config\/test\.yaml:9:\d+ budgets\[1\]\.name: expected a name no other entry of budgets uses \(budgets\[0\] is already "b"\)/);
  t.ok(parse(yaml(...BASE, 'budgets:', '  - { name: x, per: handle, window: 1d, maxCalls: 1 }', 'allowances:', '  - { name: x, per: client, window: 1d, freeCalls: 1 }')));
});

t.test('windows run from 1m to 31d', async (t) => {
  for (const window of ['30s', '59999', '32d']) {
    t.match(refusal(yaml(...BASE, 'budgets:', `  - { name: b, per: handle, window: ${window}, maxCalls: 1 }`)), /budgets\[0\]\.window: expected a window from 1m to 31d/, window);
  }
  t.match(refusal(yaml(...BASE, 'budgets:', '  - { name: b, per: handle, window: daily, maxCalls: 1 }')), /budgets\[0\]\.window: expected a duration/);
  for (const window of ['1m', '31d', '60000']) t.ok(parse(yaml(...BASE, 'budgets:', `  - { name: b, per: handle, window: ${window}, maxCalls: 1 }`)), window);
});

t.test('caps and free calls are positive integers; names are labels; unknown keys are refused', async (t) => {
  t.match(refusal(yaml(...BASE, 'budgets:', '  - { name: b, per: handle, window: 1d, maxCalls: 0 }')), /budgets\[0\]\.maxCalls: expected a positive integer/);
  t.match(refusal(yaml(...BASE, 'allowances:', '  - { name: a, per: client, window: 1d, freeCalls: 1.5 }')), /allowances\[0\]\.freeCalls: expected a positive integer/);
  t.match(refusal(yaml(...BASE, 'allowances:', '  - { name: "a b", per: client, window: 1d, freeCalls: 1 }')), /allowances\[0\]\.name: expected a name of letters/);
  t.match(refusal(yaml(...BASE, 'budgets:', '  - { name: b, per: handle, window: 1d, maxcalls: 1 }')), /unknown key "maxcalls"/);
});
