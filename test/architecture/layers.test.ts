// Import directions (issue 18; docs/architecture.md, "Layers"). Every import in src/ — static, `export
// … from`, `import type`, dynamic `import()` and `typeof import()` — is read with the TypeScript parser
// and must point down the LAYERS table or stay in its own layer; and no two files, nor two layers,
// may import each other in a ring. The checker is a plain function, run on src/ and on made-up trees
// that break each rule, so this test is seen to fail.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import ts from 'typescript';

/**
 * A layer is a top-level folder or file of src/ (`errors` is src/errors.ts). Lower ranks are lower:
 * a layer imports only from layers of a lower rank, or from peers of its own rank (no ring).
 * `island`: a program of its own: it imports only the leaves (rank 0) and nothing imports it.
 */
export const LAYERS: Readonly<Record<string, number | 'island'>> = {
  // 0: leaves: the error table, exact money arithmetic and the asset table, small I/O utilities, the clock
  errors: 0,
  money: 0,
  io: 0,
  clock: 0, // src/clock.ts: the one source of time (issue 18)
  // 1: the configuration's type, validation and masking
  config: 1,
  // 2: logs, metrics, traces, fingerprints
  observability: 2,
  // 3: the MCP wire (JSON-RPC, classification, SSE, tool lists, the gateway's own results); the store
  mcp: 3,
  store: 3,
  // 4: domain services on the store: OAuth, the ledger's operator side, payment providers and the
  //    x402 rail, the stdio bridge
  auth: 4,
  ledger: 4,
  payments: 4,
  bridge: 4,
  // 5: the decision about a priced call
  paywall: 5,
  // 6: the request path behind the route: exchanges, reply readers, upstream targets
  proxy: 6,
  // 7: fastify routes and hooks
  http: 7,
  // 8: assembling a gateway (server.ts; src/gateway/ as it grows) and the operator's admin verbs
  server: 8,
  gateway: 8,
  admin: 8,
  'admin-channel': 8, // src/admin-channel.ts: the admin verbs over a memory-store gateway's Unix socket
  'admin-budgets': 8, // src/admin-budgets.ts: `budget show`, an admin verb (SPEC §23)
  // 9: running one: store, upstream, provider, listen, signals
  start: 9,
  // 10: the command line
  cli: 10,
  // the reference upstream (SPEC §13): its own program (it spells JSON-RPC numbers from errors.ts)
  research: 'island',
};

/**
 * Folders that are one layer with another: server.ts grows into src/gateway/, so the two may import
 * each other (their files still may not form a ring).
 */
export const SAME_LAYER: Readonly<Record<string, string>> = {
  gateway: 'server',
};

export interface Problem {
  kind: 'unranked' | 'upward' | 'island' | 'unresolved' | 'computed' | 'file-cycle' | 'layer-cycle';
  text: string;
}

interface Edge {
  from: string;
  to: string;
}

/** The module specifiers one file imports, each with the line it is on. */
export function importsOf(fileName: string, source: string): { specifier: string | null; line: number }[] {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found: { specifier: string | null; line: number }[] = [];
  const add = (node: ts.Node, expression: ts.Node | undefined): void => {
    const line = file.getLineAndCharacterOfPosition(node.getStart(file)).line + 1;
    found.push({ specifier: expression !== undefined && ts.isStringLiteralLike(expression) ? expression.text : null, line });
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) || (ts.isExportDeclaration(node) && node.moduleSpecifier !== undefined)) add(node, node.moduleSpecifier);
    else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) add(node, node.moduleReference.expression);
    else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) add(node, node.arguments[0]);
    else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) add(node, node.argument.literal);
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

/** src-relative path → its layer: the first segment, without `.ts` for a top-level file. */
export function layerOf(relative: string): string {
  const [first = '', ...rest] = relative.split('/');
  return rest.length === 0 ? first.replace(/\.ts$/, '') : first;
}

/** The layer a folder counts as for rings (SAME_LAYER). */
const ringLayerOf = (relative: string): string => {
  const layer = layerOf(relative);
  return SAME_LAYER[layer] ?? layer;
};

/** Checks a tree given as src-relative paths (with `/`) → source text. */
export function checkLayers(files: ReadonlyMap<string, string>, layers: Readonly<Record<string, number | 'island'>> = LAYERS): Problem[] {
  const problems: Problem[] = [];
  const edges: Edge[] = [];
  for (const layer of new Set([...files.keys()].map(layerOf))) {
    if (!Object.hasOwn(layers, layer)) problems.push({ kind: 'unranked', text: `src/${layer} has no rank in LAYERS (test/architecture/layers.test.ts) nor docs/architecture.md` });
  }
  for (const [from, source] of files) {
    for (const { specifier, line } of importsOf(from, source)) {
      const where = `src/${from}:${line}`;
      if (specifier === null) {
        problems.push({ kind: 'computed', text: `${where} imports a computed module name: name it, so its direction can be checked` });
        continue;
      }
      if (!specifier.startsWith('.')) continue; // a package or node: builtin
      const joined = path.posix.normalize(path.posix.join(path.posix.dirname(from), specifier));
      if (joined.startsWith('../')) continue; // outside src/ (package.json)
      const base = joined.replace(/\.js$/, '');
      const to = [`${base}.ts`, `${base}/index.ts`].find((candidate) => files.has(candidate));
      if (to === undefined) {
        problems.push({ kind: 'unresolved', text: `${where} imports ${specifier}, which is no file of src/` });
        continue;
      }
      edges.push({ from, to });
      const [a, b] = [layerOf(from), layerOf(to)];
      if (a === b || !Object.hasOwn(layers, a) || !Object.hasOwn(layers, b)) continue;
      const [rankA, rankB] = [layers[a], layers[b]];
      if (rankB === 'island' || (rankA === 'island' && rankB !== 0)) problems.push({ kind: 'island', text: `${where}: ${a} → ${b}, but ${rankB === 'island' ? b : a} is a program of its own (it may import only rank 0)` });
      else if (typeof rankA === 'number' && typeof rankB === 'number' && rankB > rankA) problems.push({ kind: 'upward', text: `${where}: ${a} (rank ${rankA}) imports ${to} of ${b} (rank ${rankB}): imports go down` });
    }
  }
  for (const ring of rings(edges.map(({ from, to }) => [from, to]))) problems.push({ kind: 'file-cycle', text: `files import each other: ${ring.join(' → ')}` });
  const layerEdges = edges.map(({ from, to }) => [ringLayerOf(from), ringLayerOf(to)] as [string, string]).filter(([a, b]) => a !== b);
  for (const ring of rings(layerEdges)) problems.push({ kind: 'layer-cycle', text: `layers import each other: ${ring.join(' ↔ ')}` });
  return problems;
}

/** The strongly connected parts of more than one node (Tarjan), each sorted, in a stable order. */
function rings(edges: readonly (readonly [string, string])[]): string[][] {
  const next = new Map<string, Set<string>>();
  for (const [a, b] of edges) {
    if (!next.has(a)) next.set(a, new Set());
    if (!next.has(b)) next.set(b, new Set());
    (next.get(a) as Set<string>).add(b);
  }
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let counter = 0;
  const connect = (node: string): void => {
    index.set(node, counter);
    low.set(node, counter);
    counter += 1;
    stack.push(node);
    onStack.add(node);
    for (const peer of next.get(node) ?? []) {
      if (!index.has(peer)) {
        connect(peer);
        low.set(node, Math.min(low.get(node) as number, low.get(peer) as number));
      } else if (onStack.has(peer)) low.set(node, Math.min(low.get(node) as number, index.get(peer) as number));
    }
    if (low.get(node) !== index.get(node)) return;
    const part: string[] = [];
    let member: string;
    do {
      member = stack.pop() as string;
      onStack.delete(member);
      part.push(member);
    } while (member !== node);
    if (part.length > 1 || next.get(node)?.has(node)) found.push(part.sort());
  };
  for (const node of [...next.keys()].sort()) if (!index.has(node)) connect(node);
  return found.sort((x, y) => (x[0] as string).localeCompare(y[0] as string));
}

function readTree(root: string): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const full = path.join(dir, name);
      if (statSync(full).isDirectory()) walk(full);
      else if (/\.(ts|mts|cts)$/.test(name) && !name.endsWith('.d.ts')) files.set(path.relative(root, full).split(path.sep).join('/'), readFileSync(full, 'utf8'));
    }
  };
  walk(root);
  return files;
}

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));

t.test('src/: every import points down the layers, and nothing imports in a ring', async (t) => {
  const files = readTree(SRC);
  t.ok(files.size > 100, `read ${files.size} files`);
  const problems = checkLayers(files);
  t.same(
    problems.map((problem) => problem.text),
    [],
    'no upward import, no ring, every layer ranked',
  );
  // The table and the tree agree: a rank for every layer there is (gateway may come later).
  const present = new Set([...files.keys()].map(layerOf));
  for (const layer of present) t.ok(Object.hasOwn(LAYERS, layer), `${layer} is ranked`);
});

t.test('the parser sees every form of import', async (t) => {
  const source = [
    "import a from './a.js';",
    "import type { B } from '../b.js';",
    "export { c } from './c.js';",
    "export * from './d.js';",
    "import './e.js';",
    "const f = await import('./f.js');",
    "type G = typeof import('./g.js');",
    "import h = require('./h.js');",
    'const i = await import(name);',
    "import fs from 'node:fs';",
  ].join('\n');
  t.same(
    importsOf('x/y.ts', source).map((found) => found.specifier),
    ['./a.js', '../b.js', './c.js', './d.js', './e.js', './f.js', './g.js', './h.js', null, 'node:fs'],
  );
});

t.test('the checker fails an upward import, a ring, an unranked layer and a computed import', async (t) => {
  const tree = new Map([
    ['store/store.ts', "import type { X } from '../proxy/x.js';\n"], // store (3) → proxy (6): upward
    ['proxy/x.ts', "import { y } from './y.js';\nexport type X = 1;\n"],
    ['proxy/y.ts', "import type { X } from './x.js';\nexport const y = 1;\n"], // x ↔ y: a file ring
    ['mcp/a.ts', "import { b } from '../store/b.js';\n"], // mcp ↔ store, peers of rank 3: a layer ring
    ['store/b.ts', "export const b = 1;\nconst m = await import('../mcp/a.js');\n"],
    ['newthing/z.ts', "const n = 'x';\nawait import(n);\n"], // unranked, computed
    ['research/r.ts', "import { b } from '../store/b.js';\n"], // an island importing the gateway
    ['errors.ts', "import { GatewayConfig } from './config/schema.js';\n"], // errors (0) → config (1), unresolved
  ]);
  const kinds = checkLayers(tree).map((problem) => problem.kind).sort();
  t.same(kinds, ['computed', 'file-cycle', 'file-cycle', 'island', 'layer-cycle', 'unranked', 'unresolved', 'upward'].sort(), 'each rule is caught');
  const texts = checkLayers(tree).map((problem) => problem.text);
  t.ok(texts.some((text) => text.startsWith('src/store/store.ts:1: store (rank 3) imports proxy/x.ts of proxy (rank 6)')), 'the upward import is named with its line');
  t.ok(texts.includes('files import each other: proxy/x.ts → proxy/y.ts'), 'the file ring is named');
  t.ok(texts.includes('layers import each other: mcp ↔ store'), 'the layer ring is named');
  t.same(checkLayers(new Map([['store/b.ts', "import { e } from '../errors.js';\n"], ['errors.ts', 'export const e = 1;\n']])), [], 'a downward import passes');
  t.same(checkLayers(new Map([['research/r.ts', "import { e } from '../errors.js';\n"], ['errors.ts', 'export const e = 1;\n']])), [], 'an island may import a leaf');
  const grown = new Map([
    ['server.ts', "import { a } from './gateway/a.js';\nexport const s = 1;\n"],
    ['gateway/a.ts', 'export const a = 1;\n'],
    ['gateway/b.ts', "import { s } from '../server.js';\n"],
  ]);
  t.same(checkLayers(grown), [], 'server.ts and src/gateway/ are one layer');
  t.same(checkLayers(new Map([...grown, ['gateway/a.ts', "import { s } from '../server.js';\nexport const a = 1;\n"]])).map((problem) => problem.kind), ['file-cycle'], 'but their files still may not form a ring');
});
