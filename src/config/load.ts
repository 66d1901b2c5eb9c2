// Reads tollbooth.yaml: YAML (keeping node ranges) → `${VAR}` expansion in string values → the one
// schema (schema.ts) → a deep-frozen GatewayConfig. Every problem is reported against the YAML node
// it concerns, one per line: "<file>:<line>:<col> <path>: expected <what>, found <what>", so an
// operator can jump straight to it. A bad config never starts the gateway (SPEC §2).
import { readFileSync } from 'node:fs';
import { isAlias, isMap, isScalar, isSeq, LineCounter, parseDocument, type Document, type Scalar } from 'yaml';
import type { z } from 'zod';
import { GatewayError } from '../errors.js';
import { configSchema, type GatewayConfig } from './schema.js';

type PathSegment = string | number;
type Env = Record<string, string | undefined>;
type RawIssue = z.core.$ZodRawIssue;
type Issue = z.core.$ZodIssue;

export function loadConfig(file: string, env: Env = process.env): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (error as Error).message;
    throw new GatewayError('TB_ERR_CONFIG_UNREADABLE', `${file}: cannot read the config file (${reason}); pass --config FILE or set TOLLBOOTH_CONFIG`, { cause: error });
  }
  return parseConfigText(text, file, env);
}

export function parseConfigText(text: string, file: string, env: Env = process.env): GatewayConfig {
  const lineCounter = new LineCounter();
  const at = (offset: number): string => {
    const { line, col } = lineCounter.linePos(offset);
    return `${file}:${line}:${col}`;
  };

  // uniqueKeys: a key written twice is an error, never "the last one wins".
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw invalid(doc.errors.map((error) => `${at(error.pos[0])} YAML syntax error: ${error.message}`));
  }

  const expansions = new Map<Scalar, string>();
  const expansionProblems = expandEnvironment(doc, env, expansions).map(
    ({ node, path, reference }) =>
      `${at(node.range?.[0] ?? 0)} ${formatPath(path)}: expected \${NAME} or \${NAME:-default} (write $\${ for a literal \${), found ${JSON.stringify(reference)}`,
  );
  if (expansionProblems.length > 0) throw invalid(expansionProblems);

  const data: unknown = doc.toJS({ maxAliasCount: 100 });
  const result = configSchema.safeParse(data, { error: expectedFor, reportInput: true });
  if (!result.success) {
    const source: SourceView = { doc, text, expansions };
    const located = result.error.issues.flatMap((issue) => describeIssue(issue, source));
    located.sort((a, b) => a.offset - b.offset);
    throw invalid(located.map(({ offset, line }) => `${at(offset)} ${line}`));
  }
  return deepFreeze(result.data);
}

function invalid(lines: string[]): GatewayError {
  return new GatewayError('TB_ERR_CONFIG_INVALID', lines.join('\n'));
}

// ---------------------------------------------------------------------------------------------
// ${VAR} expansion: values only (never keys), on the parsed document so node ranges survive.

// `$${` is a literal `${`; `${NAME}` and `${NAME:-default}` are references; any other `${` is a typo.
const REFERENCE = /\$(\$\{)|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{[^}]*\}?/g;

interface BadReference {
  node: Scalar;
  path: PathSegment[];
  reference: string;
}

function expandEnvironment(doc: Document, env: Env, expansions: Map<Scalar, string>): BadReference[] {
  const problems: BadReference[] = [];
  walkValues(doc.contents, [], (node, path) => {
    if (typeof node.value !== 'string' || !node.value.includes('${')) return;
    const original = node.value;
    node.value = original.replace(REFERENCE, (match, literal?: string, name?: string, fallback?: string) => {
      if (literal !== undefined) return literal;
      if (name === undefined) {
        problems.push({ node, path, reference: match });
        return match;
      }
      const value = env[name];
      // `:-` as in the shell: the default applies when the variable is unset or empty.
      return value !== undefined && value !== '' ? value : (fallback ?? '');
    });
    expansions.set(node, original);
  });
  return problems;
}

function walkValues(node: unknown, path: PathSegment[], visit: (scalar: Scalar, path: PathSegment[]) => void): void {
  if (isScalar(node)) visit(node, path);
  else if (isMap(node)) for (const pair of node.items) walkValues(pair.value, [...path, keyText(pair.key)], visit);
  else if (isSeq(node)) node.items.forEach((item, index) => walkValues(item, [...path, index], visit));
  // Aliases are skipped: the anchored node they point to is expanded where it is defined.
}

function keyText(key: unknown): string {
  return isScalar(key) ? String(key.value) : String(key);
}

// ---------------------------------------------------------------------------------------------
// Issue → "<path>: expected …, found …" at the offset of the YAML node it concerns.

interface SourceView {
  doc: Document;
  text: string;
  expansions: Map<Scalar, string>;
}

interface LocatedLine {
  offset: number;
  line: string;
}

function describeIssue(issue: Issue, source: SourceView): LocatedLine[] {
  if (issue.code === 'unrecognized_keys') {
    const allowed = allowedKeys(issue.path);
    return issue.keys.map((key) => {
      const path = [...issue.path.map(toSegment), key];
      const place = locate(source.doc, path);
      const guess = closest(key, allowed);
      const expected = allowed.length > 0 ? `one of the keys ${allowed.join(', ')}` : 'no other keys';
      return {
        offset: place.keyOffset ?? place.offset,
        line: `${formatPath(path)}: expected ${expected}, found the unknown key ${JSON.stringify(key)}${guess ? ` (did you mean ${JSON.stringify(guess)}?)` : ''}`,
      };
    });
  }
  const path = issue.path.map(toSegment);
  const place = locate(source.doc, path);
  const params = issue.code === 'custom' ? issue.params : undefined;
  const found = typeof params?.found === 'string' ? params.found : describeFound(place, path, issue.input, source);
  return [{ offset: place.offset, line: `${formatPath(path)}: expected ${issue.message}, found ${found}` }];
}

interface Place {
  node: unknown; // the YAML node at the path, or null when the path does not exist in the file
  offset: number; // where to point: the node, else the key of its deepest existing ancestor
  keyOffset: number | null; // the key of the last path segment, when it exists
}

function locate(doc: Document, path: PathSegment[]): Place {
  let current: unknown = doc.contents;
  let offset = rangeStart(current) ?? 0;
  let keyOffset: number | null = null;
  for (const segment of path) {
    if (isAlias(current)) current = current.resolve(doc);
    let next: unknown;
    if (isMap(current)) {
      const pair = current.items.find((item) => keyText(item.key) === String(segment));
      if (pair === undefined) return { node: null, offset: keyOffset ?? offset, keyOffset: null };
      keyOffset = rangeStart(pair.key);
      next = pair.value;
      offset = rangeStart(next) ?? keyOffset ?? offset;
    } else if (isSeq(current) && typeof segment === 'number' && segment < current.items.length) {
      next = current.items[segment];
      keyOffset = null;
      offset = rangeStart(next) ?? offset;
    } else {
      return { node: null, offset: keyOffset ?? offset, keyOffset: null };
    }
    current = next;
  }
  return { node: isAlias(current) ? current.resolve(doc) ?? null : (current ?? null), offset, keyOffset };
}

function rangeStart(node: unknown): number | null {
  const range = (node as { range?: [number, number, number] | null } | null)?.range;
  return range ? range[0] : null;
}

/** What the YAML holds at the path, in words. Secrets (and values that came from the environment at secret paths) are never echoed. */
function describeFound(place: Place, path: PathSegment[], input: unknown, source: SourceView): string {
  const { node } = place;
  if (node === null) {
    if (path.length === 0) return 'an empty document';
    const defaulted = typeof input === 'number' || typeof input === 'boolean' || (typeof input === 'string' && input !== '');
    return defaulted && !isSecretPath(path) ? `the default ${JSON.stringify(input)}` : `nothing (no ${JSON.stringify(String(path.at(-1)))} key)`;
  }
  if (isMap(node)) return 'a mapping';
  if (isSeq(node)) return 'a list';
  if (!isScalar(node)) return 'an unsupported YAML node';
  const { value } = node;
  const reference = source.expansions.get(node);
  if (reference !== undefined && typeof value === 'string') {
    if (value === '') return `an empty string (from ${JSON.stringify(reference)}: unset or empty)`;
    return isSecretPath(path) ? `a value of ${value.length} characters (from ${JSON.stringify(reference)})` : `the string ${quote(value)} (from ${JSON.stringify(reference)})`;
  }
  if (value === null) return 'an empty value';
  if (typeof value === 'boolean') return `the boolean ${value}`;
  if (typeof value === 'number' || typeof value === 'bigint') {
    const [start, end] = node.range ?? [0, 0];
    return `the number ${source.text.slice(start, end).trim() || String(value)}`;
  }
  if (typeof value === 'string') {
    if (value === '') return 'an empty string';
    return isSecretPath(path) ? `a value of ${value.length} characters` : `the string ${quote(value)}`;
  }
  return `the value ${JSON.stringify(value) ?? typeof value}`;
}

function quote(value: string): string {
  return JSON.stringify(value.length > 80 ? `${value.slice(0, 77)}...` : value);
}

function isSecretPath(path: PathSegment[]): boolean {
  const last = String(path.at(-1));
  if (['apiKey', 'webhookSecret', 'hashSecret', 'signingKey'].includes(last)) return true;
  if (path[0] === 'upstream' && path[1] === 'headers') return true;
  return path[0] === 'store' && path[1] === 'redis'; // redis URLs may carry a password
}

function toSegment(segment: PropertyKey): PathSegment {
  return typeof segment === 'number' ? segment : String(segment);
}

/** `skus.research.amount`, `upstream.command[0]`, `tools["a.b"].sku`; the whole file is "(top level)". */
export function formatPath(path: readonly PathSegment[]): string {
  if (path.length === 0) return '(top level)';
  return path
    .map((segment, index) => {
      if (typeof segment === 'number') return `[${segment}]`;
      if (/^[A-Za-z0-9_$-]+$/.test(segment)) return index === 0 ? segment : `.${segment}`;
      return `[${JSON.stringify(segment)}]`;
    })
    .join('');
}

// ---------------------------------------------------------------------------------------------
// "expected …" for issues whose schema gives no message of its own (schema messages win).

const TYPE_NAMES: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  int: 'an integer',
  boolean: 'true or false',
  object: 'a mapping',
  record: 'a mapping',
  array: 'a list',
};

function expectedFor(issue: RawIssue): string | undefined {
  switch (issue.code) {
    case 'invalid_type': {
      const format = (issue.inst as { _zod?: { def?: { format?: string } } } | undefined)?._zod?.def?.format;
      const expected = format?.includes('int') ? 'int' : issue.expected;
      const name = TYPE_NAMES[expected] ?? `a value of type ${expected}`;
      return issue.input === undefined ? `${name} (this key is required)` : name;
    }
    case 'too_small':
      if (issue.origin === 'array' || issue.origin === 'set') return `a list with at least ${issue.minimum} item${issue.minimum === 1 ? '' : 's'}`;
      if (issue.origin === 'string') return issue.minimum === 1 ? 'a non-empty string' : `a string of at least ${issue.minimum} characters`;
      if (issue.minimum === 0 && !issue.inclusive) return 'a positive number';
      return `a number ${issue.inclusive ? '≥' : '>'} ${issue.minimum}`;
    case 'too_big':
      if (issue.origin === 'array' || issue.origin === 'set') return `a list with at most ${issue.maximum} items`;
      if (issue.origin === 'string') return `a string of at most ${issue.maximum} characters`;
      return `a number ${issue.inclusive ? '≤' : '<'} ${issue.maximum}`;
    case 'invalid_value':
      return `one of ${issue.values.map((value) => JSON.stringify(value)).join(', ')}`;
    case 'invalid_format':
      return issue.format === 'regex' ? `a string matching ${issue.pattern}` : `a valid ${issue.format}`;
    case 'not_multiple_of':
      return `a multiple of ${issue.divisor}`;
    case 'invalid_union':
      return 'a value of one of the allowed forms';
    default:
      return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// Unknown keys: which keys the schema allows at a path, and the nearest one to a typo.

interface SchemaDef {
  type: string;
  in?: { _zod: { def: SchemaDef } };
  innerType?: { _zod: { def: SchemaDef } };
  shape?: Record<string, { _zod: { def: SchemaDef } }>;
  valueType?: { _zod: { def: SchemaDef } };
  element?: { _zod: { def: SchemaDef } };
}

const WRAPPERS = new Set(['default', 'prefault', 'optional', 'nullable', 'readonly', 'catch', 'nonoptional']);

function unwrap(def: SchemaDef | undefined): SchemaDef | undefined {
  let current = def;
  while (current) {
    if (current.type === 'pipe') current = current.in?._zod.def;
    else if (WRAPPERS.has(current.type)) current = current.innerType?._zod.def;
    else return current;
  }
  return undefined;
}

function allowedKeys(objectPath: readonly PropertyKey[]): string[] {
  let def = unwrap((configSchema as unknown as { _zod: { def: SchemaDef } })._zod.def);
  for (const segment of objectPath) {
    if (def?.type === 'object') def = unwrap(def.shape?.[String(segment)]?._zod.def);
    else if (def?.type === 'record') def = unwrap(def.valueType?._zod.def);
    else if (def?.type === 'array') def = unwrap(def.element?._zod.def);
    else return [];
  }
  return def?.type === 'object' ? Object.keys(def.shape ?? {}) : [];
}

function closest(word: string, candidates: string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = 3; // suggest only near misses
  for (const candidate of candidates) {
    const distance = editDistance(word.toLowerCase(), candidate.toLowerCase());
    if (distance < bestDistance) [best, bestDistance] = [candidate, distance];
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i += 1) {
    const current = [i];
    for (let j = 1; j <= b.length; j += 1) {
      const substitution = (previous[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min((previous[j] as number) + 1, (current[j - 1] as number) + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length] as number;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
