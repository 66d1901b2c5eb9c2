// Where a server's CPU goes per request, from a V8 .cpuprofile (`node --cpu-prof`): the self time of
// the samples inside one scenario's measured window, grouped by where the code lives, divided by the
// requests of that window. Set side by side with the bare proxy's, the rows say what the gateway pays
// above forwarding, and where (issue 14: "the profile that shows what stands in the way").

export interface CpuProfile {
  startTime: number;
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

type CallFrame = CpuProfile['nodes'][number]['callFrame'];

/** A measured run: [from, to) in CLOCK_MONOTONIC µs (V8's sample clock and process.hrtime), and its requests. */
export interface ProfileWindow {
  fromUs: number;
  toUs: number;
  requests: number;
}

/**
 * The group a frame's self time counts under:
 * - `gateway: <folder>` for the gateway's own modules (dist/<folder>/…, or a top-level dist/ file);
 * - `bench` for the bench's own code (the bare proxy);
 * - the npm package (`fastify`, `undici`, `@fastify/reply-from`, `pino`, `ioredis`, …);
 * - `syscalls: socket and file writes` for the native write calls (the kernel's loopback work shows here);
 * - `node: <module>` for Node's own JavaScript (node:internal/streams/… → `node: streams`);
 * - `(garbage collector)`, `(program)` as V8 names them; any other native frame is `V8 builtins`.
 */
export function groupOf(callFrame: CallFrame): string {
  const { url, functionName } = callFrame;
  // The innermost package: a dependency's own node_modules copy counts as that dependency.
  const packages = [...url.matchAll(/node_modules\/((?:@[^/]+\/)?[^/]+)\//g)];
  if (packages.length > 0) return packages.at(-1)?.[1] as string;
  const dist = /\/dist\/(?:([^/]+)\/)?[^/]+$/.exec(url);
  if (dist) return `gateway: ${dist[1] ?? '(top level)'}`;
  if (/\/bench\//.test(url)) return 'bench';
  if (url.startsWith('node:')) {
    const name = url.replace(/^node:(internal\/)?/, '').split('/')[0] as string;
    return `node: ${name}`;
  }
  if (url === '') {
    if (/^(writev|writeString|writeUtf8String|writeLatin1String|writeBuffer|writeAsciiString|writeUcs2String)$/.test(functionName)) return 'syscalls: socket and file writes';
    if (functionName.startsWith('(')) return functionName;
    return 'V8 builtins';
  }
  return 'other';
}

/**
 * Self time (µs) of the samples in [fromUs, toUs), summed by `keyOf` of their frame; the idle loop is
 * not counted. The one walk over a profile's samples: the per-request groups below and the bench's
 * per-frame summary (`*.top.txt`) both read a profile through it.
 */
export function selfTime(profile: CpuProfile, range: { fromUs: number; toUs: number }, keyOf: (frame: CallFrame) => string): { byKey: Map<string, number>; total: number } {
  const keyById = new Map<number, string | null>();
  for (const node of profile.nodes) keyById.set(node.id, node.callFrame.functionName === '(idle)' ? null : keyOf(node.callFrame));
  const byKey = new Map<string, number>();
  let at = profile.startTime;
  let total = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const delta = profile.timeDeltas[i] ?? 0;
    at += delta;
    if (at < range.fromUs || at >= range.toUs) continue;
    const key = keyById.get(profile.samples[i] as number);
    if (key === null) continue;
    const name = key ?? 'other';
    byKey.set(name, (byKey.get(name) ?? 0) + delta);
    total += delta;
  }
  return { byKey, total };
}

/** Self µs per request of each group within the window, largest first, and the total (idle time excluded). */
export function costPerRequest(profile: CpuProfile, window: ProfileWindow): Map<string, number> {
  const { byKey, total } = selfTime(profile, window, groupOf);
  const requests = Math.max(1, window.requests);
  const out = new Map<string, number>([...byKey].sort((a, b) => b[1] - a[1]).map(([group, us]) => [group, us / requests]));
  out.set('total', total / requests);
  return out;
}

/**
 * A markdown table: one column per scenario (µs/req by group), the groups that cost at least `minUs`
 * in some column, ordered by how much more the most expensive column pays than the first (the reference).
 */
export function renderCostTable(columns: { name: string; cost: Map<string, number> }[], minUs = 2): string[] {
  if (columns.length === 0) return [];
  const reference = columns[0] as { name: string; cost: Map<string, number> };
  const groups = new Set<string>();
  for (const { cost } of columns) for (const [group, us] of cost) if (group !== 'total' && us >= minUs) groups.add(group);
  const extra = (group: string): number => Math.max(...columns.map((c) => c.cost.get(group) ?? 0)) - (reference.cost.get(group) ?? 0);
  const ordered = [...groups].sort((a, b) => extra(b) - extra(a));
  const fmt = (us: number | undefined): string => (us === undefined || us < 0.05 ? '–' : us.toFixed(1));
  const lines = [`| µs/req (self time) | ${columns.map((c) => c.name).join(' | ')} |`, `| --- | ${columns.map(() => '---:').join(' | ')} |`];
  for (const group of ordered) lines.push(`| ${group} | ${columns.map((c) => fmt(c.cost.get(group))).join(' | ')} |`);
  lines.push(`| **total (busy)** | ${columns.map((c) => `**${fmt(c.cost.get('total'))}**`).join(' | ')} |`);
  return lines;
}
