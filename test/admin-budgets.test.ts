// `tollbooth budget show <principal|handle>` (SPEC §23): the budgets and allowances counting a
// principal's or a handle's calls and their use in the current window — as a function over the real
// memory store, and as an operator runs it against a running memory-store gateway (admin socket).
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { showBudgets } from '../src/admin-budgets.js';
import { configSchema } from '../src/config/schema.js';
import { hashHandle, mintHandle } from '../src/paywall/handles.js';
import { fingerprint } from '../src/observability/fingerprint.js';
import { MemoryStore } from '../src/store/memory.js';
import { callTool, childEnv, CLI, payDevCheckout, ROOT, startGatewayProcess } from './helpers/gateway-process.js';
import { testConfig } from './helpers/gateway.js';
import { startPaidUpstream } from './helpers/paid-upstream.js';

const NOW = Date.UTC(2026, 0, 1, 10, 30);
const HOUR = 3_600_000;

function context(store: MemoryStore, input: Record<string, unknown>) {
  const config = configSchema.parse(input);
  const lines: string[] = [];
  return { lines, context: { store, config, out: (line: string) => lines.push(line), logger: { info: () => undefined }, now: () => NOW } };
}

const OAUTH = {
  upstream: { url: 'http://127.0.0.1:1/mcp' },
  server: { publicUrl: 'https://gw.example.com/mcp' },
  auth: { mode: 'oauth', issuer: 'https://id.example.com/', jwksUrl: 'https://id.example.com/jwks' },
  skus: { research: { label: 'R', amount: '5.00', currency: 'USDC', credits: 3 } },
  tools: { fetch_readable: { sku: 'research', cost: 1 } },
  budgets: [
    { name: 'daily', per: 'principal', window: '1d', maxCalls: 100, maxCredits: 300 },
    { name: 'hourly', per: 'handle', window: '1h', maxCalls: 5 },
  ],
  allowances: [{ name: 'trial', per: 'client', window: '1d', freeCalls: 5 }],
};

t.test("a principal's budgets and allowances with what each used this window", async (t) => {
  const store = new MemoryStore({ now: () => NOW });
  const day = Date.UTC(2026, 0, 1);
  await store.reserveQuotas({
    holdId: 'h1',
    deadline: NOW + 60_000,
    draws: [
      { name: 'budget:daily', subject: 'p:sub:alice', windowMs: 86_400_000, windowStart: day, calls: 1, credits: 2, maxCalls: 100, maxCredits: 300 },
      { name: 'allowance:trial', subject: 'c:p:sub:alice', windowMs: 86_400_000, windowStart: day, calls: 1, credits: 0, maxCalls: 5, maxCredits: null },
    ],
  });
  const { lines, context: ctx } = context(store, OAUTH);
  await showBudgets(ctx, 'sub:alice');
  t.equal(lines[0], 'principal sub:alice');
  t.match(lines[1], /^KIND\s+NAME\s+WINDOW\s+RESETS\s+CALLS\s+CREDITS\s+LEFT$/);
  t.match(lines[2], /^budget\s+daily\s+1d\s+2026-01-02T00:00:00\.000Z\s+1\/100\s+2\/300\s+99 calls, 298 credits$/);
  t.match(lines[3], /^allowance\s+trial\s+1d\s+2026-01-02T00:00:00\.000Z\s+1\/5\s+-\s+4 free calls left$/);
  t.equal(lines.length, 4, 'the per-handle budget is not a principal\'s');
});

t.test("a handle's budgets, by the handle or its fingerprint; never the handle printed", async (t) => {
  const store = new MemoryStore({ now: () => NOW });
  const handle = mintHandle();
  const handleHash = hashHandle(handle, '');
  await store.createHandle({ handleHash, fingerprint: fingerprint(handle), principal: null, ttlMs: 48 * HOUR });
  const { lines, context: ctx } = context(store, OAUTH);
  await showBudgets(ctx, handle);
  t.equal(lines[0], `handle ${fingerprint(handle)}`);
  t.match(lines[2], /^budget\s+hourly\s+1h\s+2026-01-01T11:00:00\.000Z\s+0\/5\s+0\s+5 calls$/);
  t.notOk(lines.join('\n').includes(handle));
  const again = context(store, OAUTH);
  await showBudgets(again.context, fingerprint(handle));
  t.same(again.lines, lines, 'the fingerprint finds it too');
  const none = context(store, { ...OAUTH, budgets: [], allowances: [] });
  await showBudgets(none.context, 'sub:bob');
  t.same(none.lines, ['principal sub:bob', 'no budget or allowance counts these calls']);
});

t.test('through the admin socket of a running memory-store gateway', async (t) => {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const dir = mkdtempSync(join(tmpdir(), 'tb-bud-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const gateway = await startGatewayProcess(t, {
    ...testConfig(upstream.url),
    admin: { socket: join(dir, 'admin.sock') },
    budgets: [{ name: 'hourly', per: 'handle', window: '1h', maxCalls: 5 }],
  });
  const challenge = await callTool(gateway.url, 'fetch_readable', { url: 'a' });
  if (challenge.kind !== 'challenged') throw new Error('expected a challenge');
  await payDevCheckout(challenge.checkoutUrl, gateway.origin);
  t.match(await callTool(gateway.url, 'fetch_readable', { url: 'b', tollboothToken: challenge.handle }), { kind: 'paid' });
  const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, [CLI, 'budget', 'show', challenge.handle, '--config', gateway.configPath], { cwd: ROOT, env: childEnv() }, (error, stdout, stderr) => {
      resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
  t.equal(run.code, 0, run.stderr);
  t.match(run.stderr, /running gateway pid/);
  t.match(run.stdout, /budget\s+hourly\s+1h\s+\S+\s+1\/5\s+1\s+4 calls/, 'the paid call counted');
  t.notOk((run.stdout + run.stderr).includes(challenge.handle), 'the handle itself is never printed');
});
