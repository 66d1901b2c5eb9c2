// docs/reference/ stays in step with the code it describes. Each page's tables are checked against the
// one source of truth: the error table (src/errors.ts), the metrics registry (observability/metrics.ts),
// the config schema (config/schema.ts) and what a reload refuses (gateway/reload.ts), the `evt` names
// logged anywhere in src/, and the CLI's usage texts. A code, metric, key, event, command or flag added
// without its row fails here, and so does a row for something that no longer exists.
import { readdirSync, readFileSync } from 'node:fs';
import t from 'tap';
import { z } from 'zod';
import { BRIDGE_USAGE } from '../../src/bridge/cli.js';
import { configSchema } from '../../src/config/schema.js';
import { ERROR_CODES, ERROR_TABLE } from '../../src/errors.js';
import { RESTART_ONLY } from '../../src/gateway/reload.js';
import { createMetrics } from '../../src/observability/metrics.js';

const root = new URL('../../', import.meta.url);
const read = (path: string): string => readFileSync(new URL(path, root), 'utf8');

/** The cells of every table row whose first cell is one code span: `| \`x\` | … |` → ['x', …]. Escaped pipes stay in their cell. */
function rows(markdown: string): string[][] {
  return markdown
    .split('\n')
    .filter((line) => /^\| `[^`]+` \|/.test(line))
    .map((line) => line.split(/(?<!\\)\|/).slice(1, -1).map((cell) => cell.trim()))
    .map(([first = '', ...rest]) => [first.slice(1, -1), ...rest]);
}

t.test('errors.md: one row per TB_ERR_* code, with the table\'s HTTP status and JSON-RPC code', async (t) => {
  const documented = new Map(rows(read('docs/reference/errors.md')).filter(([code]) => code?.startsWith('TB_ERR_')).map(([code = '', status, rpc]) => [code, `${status} ${rpc}`]));
  for (const code of ERROR_CODES) {
    t.equal(documented.get(code), `${ERROR_TABLE[code].status} ${ERROR_TABLE[code].rpc}`, `${code}: | \`${code}\` | ${ERROR_TABLE[code].status} | ${ERROR_TABLE[code].rpc} |`);
  }
  t.same([...documented.keys()].filter((code) => !(code in ERROR_TABLE)), [], 'no row for a code the table does not have');
});

t.test('metrics.md: one row per tollbooth_ metric, with its type and labels', async (t) => {
  const metrics = createMetrics(async () => 0);
  const exported = new Map<string, string>();
  for (const { name, type } of await metrics.registry.getMetricsAsJSON()) {
    if (!name.startsWith('tollbooth_')) continue;
    // prom-client types `type` as a numeric enum; at run time it is the exposition's word (counter, gauge, histogram).
    const labelNames = (metrics.registry.getSingleMetric(name) as unknown as { labelNames?: string[] }).labelNames ?? [];
    exported.set(name, `${String(type)} | ${labelNames.map((label) => `\`${label}\``).join(', ') || '—'}`);
  }
  t.ok(exported.size >= 16, `${exported.size} tollbooth_ metrics`);
  const documented = new Map(rows(read('docs/reference/metrics.md')).filter(([name]) => name?.startsWith('tollbooth_')).map(([name = '', type, labels]) => [name, `${type} | ${labels}`]));
  for (const [name, shape] of exported) t.equal(documented.get(name), shape, `${name}: | \`${name}\` | ${shape} |`);
  t.same([...documented.keys()].filter((name) => !exported.has(name)), [], 'no row for a metric the gateway does not export');
});

/** Every key an operator can write, from the schema's JSON Schema: `skus.<name>.amount`; `servers.<name>.upstream` stands for its keys (they are `upstream`'s). */
function configKeys(): string[] {
  const keys: string[] = [];
  const objectOf = (node: Record<string, any>): Record<string, any> | undefined => {
    if (node.properties) return node;
    for (const alternative of node.anyOf ?? []) if (alternative.properties) return alternative;
    return undefined;
  };
  const walk = (node: Record<string, any>, path: string): void => {
    const object = objectOf(node);
    const record = node.type === 'object' && !object && typeof node.additionalProperties === 'object' ? objectOf(node.additionalProperties) : undefined;
    if (path !== '' && (/^servers\.<name>\.(upstream|tools)$/.test(path) || (!object && !record))) {
      keys.push(path);
      return;
    }
    if (object) for (const [key, child] of Object.entries<Record<string, any>>(object.properties)) walk(child, path === '' ? key : `${path}.${key}`);
    if (record) walk(record, `${path}.<name>`);
  };
  walk(z.toJSONSchema(configSchema, { io: 'input', unrepresentable: 'any' }) as Record<string, any>, '');
  return keys;
}

t.test('config.md: one row per config key, and its reload column says what a reload refuses', async (t) => {
  const keys = configKeys();
  t.ok(keys.length >= 70, `${keys.length} keys`);
  const documented = new Map(rows(read('docs/reference/config.md')).filter((cells) => cells.length === 5).map(([key = '', , , reload]) => [key, reload]));
  for (const key of keys) {
    const path = key.split('.');
    const restart = RESTART_ONLY.some((prefix) => prefix.every((segment, index) => path[index] === segment));
    t.equal(documented.get(key), restart ? 'restart' : 'yes', `${key}: a row with reload "${restart ? 'restart' : 'yes'}"`);
  }
  t.same([...documented.keys()].filter((key) => !keys.includes(key)), [], 'no row for a key the schema does not have');
});

t.test('logs.md: every evt the source logs is listed, and every listed evt is logged', async (t) => {
  const src = new URL('src/', root);
  const logged = new Set<string>();
  for (const file of readdirSync(src, { recursive: true }) as string[]) {
    if (!file.endsWith('.ts')) continue;
    for (const match of readFileSync(new URL(file, src), 'utf8').matchAll(/evt: ?'([a-z0-9_]+)'/g)) logged.add(match[1] as string);
  }
  t.ok(logged.has('call') && logged.size >= 40, `${logged.size} events`);
  const doc = read('docs/reference/logs.md');
  for (const evt of logged) t.ok(doc.includes(`\`${evt}\``) || doc.includes(`evt:"${evt}"`), `${evt} is in logs.md`);
  const listed = rows(doc).map(([evt = '']) => evt).filter((evt) => /^[a-z0-9_]+$/.test(evt) && !['level', 'time', 'name', 'evt', 'msg', 'reqId'].includes(evt));
  const fieldsOfCall = new Set(['server', 'tool', 'sku', 'rail', 'tokenPresented', 'tokenFingerprint', 'tokenRecognised', 'outcome', 'cost', 'durationMs', 'resumed', 'ref']);
  t.same(listed.filter((evt) => !logged.has(evt) && !fieldsOfCall.has(evt)), [], 'no row for an event nothing logs');
});

t.test('cli.md: every command and flag of the usage texts is documented', async (t) => {
  const usage = /const USAGE = `([\s\S]*?)`;/.exec(read('src/cli.ts'))?.[1];
  t.ok(usage, 'the usage text of src/cli.ts');
  const doc = read('docs/reference/cli.md');
  const commands = (usage ?? '')
    .split('\n')
    .filter((line) => /^ {2}[a-z]/.test(line))
    // "  credits grant <handle|fingerprint> --sku …   description": the words before the first argument or flag.
    .map((line) => /^[a-z]+(?: [a-z]+)?/.exec((line.trim().split(/\s{2,}/)[0] ?? '').split(/ [<[-]/)[0] ?? '')?.[0] ?? '');
  t.ok(commands.length >= 8, `${commands.length} commands: ${commands.join(', ')}`);
  for (const command of commands) t.ok(doc.includes(`\`tollbooth ${command}`), `tollbooth ${command} is in cli.md`);
  const flags = new Set([...`${usage ?? ''}\n${BRIDGE_USAGE}`.matchAll(/--[a-z][a-z-]*/g)].map((match) => match[0]));
  t.ok(flags.size >= 12, `${flags.size} flags`);
  for (const flag of flags) t.ok(doc.includes(`${flag}`), `${flag} is in cli.md`);
});

t.test('README.md and docs/ stand alone: no citation of an unshipped contract', async (t) => {
  const docs = new URL('docs/', root);
  const files = ['README.md', ...(readdirSync(docs, { recursive: true }) as string[]).filter((file) => file.endsWith('.md')).map((file) => `docs/${file}`)];
  for (const file of files) {
    const offending = read(file)
      .split('\n')
      .map((line, index) => ({ line, number: index + 1 }))
      .filter(({ line }) => /\bSPEC\b|shared\//.test(line));
    t.same(offending.map(({ number, line }) => `${file}:${number}: ${line.trim()}`), [], `${file} cites neither SPEC nor ../shared/`);
  }
});
