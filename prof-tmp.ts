import { readFileSync } from 'node:fs';
import { groupOf, type CpuProfile } from './bench/profile-cost.js';
const p = JSON.parse(readFileSync(process.argv[2] as string, 'utf8')) as CpuProfile;
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const groups = new Map<string, number>(); const fns = new Map<string, number>();
let total = 0;
p.samples.forEach((id, i) => {
  const n = byId.get(id)!; const dt = p.timeDeltas[i] ?? 0;
  if (n.callFrame.functionName === '(idle)') return;
  total += dt;
  const g = groupOf(n.callFrame); groups.set(g, (groups.get(g) ?? 0) + dt);
  const f = `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.replace(/^.*\/(node_modules|dist)\//, '$1/')}:${n.callFrame.lineNumber}`;
  fns.set(f, (fns.get(f) ?? 0) + dt);
});
const top = (m: Map<string, number>, k: number) => [...m].sort((a, b) => b[1] - a[1]).slice(0, k).map(([n, v]) => `${(100 * v / total).toFixed(1).padStart(5)}%  ${n}`).join('\n');
console.log(`busy ${(total / 1e6).toFixed(1)} s\n${top(groups, 25)}\n---\n${top(fns, 45)}`);
