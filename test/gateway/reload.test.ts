// gateway/reload.ts: what a SIGHUP decides before anything is built (SPEC §18): invalid, refused or the new config.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../src/config/load.js';
import { configSha, maxCallDeadline, prepareReload, RESTART_ONLY } from '../../src/gateway/reload.js';

const dir = mkdtempSync(join(tmpdir(), 'tb-reload-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const file = join(dir, 'tollbooth.yaml');
const BASE = ['upstream: { url: "http://127.0.0.1:3001/mcp" }', 'skus:', '  research: { label: R, amount: "5.00", currency: USDC, credits: 10 }', 'tools:', '  fetch_readable: { sku: research, cost: 1 }'];
const write = (...lines: string[]): void => writeFileSync(file, `${lines.join('\n')}\n`);

write(...BASE);
const running = loadConfig(file, {});

t.test('a valid change is the new config', async (t) => {
  write(...BASE.slice(0, 4), '  fetch_readable: { sku: research, cost: 3 }', 'servers:', '  files: { path: /files, upstream: { command: [node, x.js] } }');
  const outcome = prepareReload(running, file, {});
  t.equal(outcome.result, 'success');
  if (outcome.result === 'success') {
    t.equal(outcome.config.tools.fetch_readable?.cost, 3);
    t.ok(outcome.config.servers.files);
    t.not(configSha(outcome.config), configSha(running));
  }
});

t.test('an invalid file is named with its path and line', async (t) => {
  write(...BASE.slice(0, 4), '  fetch_readable: { sku: nope, cost: 1 }');
  const outcome = prepareReload(running, file, {});
  t.match(outcome, { result: 'invalid', path: 'tools.fetch_readable.sku', line: 5 });
  if (outcome.result !== 'success') t.match(outcome.message, `${file}:5:`);
  write('skus: [');
  t.match(prepareReload(running, file, {}), { result: 'invalid', line: Number }, 'a YAML syntax error has its line too');
  rmSync(file);
  t.match(prepareReload(running, file, {}), { result: 'invalid', message: /cannot read the config file/ });
});

t.test('what a running process cannot change is refused, at its line', async (t) => {
  const cases: [string[], string, number][] = [
    [['server: { port: 9999 }'], 'server.port', 6],
    [['server: { host: 0.0.0.0 }'], 'server.host', 6],
    [['store: { type: redis, redis: { url: "redis://127.0.0.1:6379/0" } }'], 'store', 6],
    [['handles: { hashSecret: other }'], 'handles.hashSecret', 6],
    [['tracing: { serviceName: other }'], 'tracing', 6],
    [['ledger: { retention: 2d }'], 'ledger', 6],
    [['payments: { reconcile: { interval: 5s } }'], 'payments.reconcile', 6],
  ];
  for (const [extra, path, line] of cases) {
    write(...BASE, ...extra);
    t.match(prepareReload(running, file, {}), { result: 'refused', path, line }, path);
  }
  t.ok(RESTART_ONLY.some((path) => path.join('.') === 'payments.provider'));
  write(...BASE, 'server: { port: 8080, mcpPath: /other, bodyLimit: 1mb }');
  t.equal(prepareReload(running, file, {}).result, 'success', 'the same port written out, and what may change, is a success');
});

t.test('configSha is stable over key order; maxCallDeadline covers every endpoint', async (t) => {
  t.equal(configSha(running), configSha(JSON.parse(JSON.stringify(running)) as typeof running));
  t.match(configSha(running), /^[0-9a-f]{12}$/);
  write(...BASE, 'servers:', '  slow: { path: /slow, upstream: { url: "http://x/mcp", callDeadline: 90s } }');
  t.equal(maxCallDeadline(loadConfig(file, {})), 90_000);
  t.equal(maxCallDeadline(running), 20_000);
});
