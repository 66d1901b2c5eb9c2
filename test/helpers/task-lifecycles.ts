// Randomised task lifecycles (SPEC §24 + §6.5) for test/e2e/task-lifecycles*.test.ts: many priced tasks,
// each with an end drawn from a seeded generator, run concurrently against one gateway on a real
// task-capable upstream (SDK v1 experimental tasks over HTTP): completed and read (once, twice at the same
// time, after polling, while it still runs), failed, cancelled, read while a cancel races it, left unread
// by a client that went away, read after upstream.taskDeadline, read by a stranger, read after the gateway
// was rebuilt on the same store. Once the reconciler has run, each lifecycle's own handle says exactly: a
// task whose result reached a client was charged once (one spend, one credit gone); a task whose result
// reached nobody cost nothing (no spend, the credit back).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import type { ConfigInput } from '../../src/config/schema.js';
import { hashHandle, mintHandle } from '../../src/paywall/handles.js';
import type { Store } from '../../src/store/store.js';
import { testConfig } from './gateway.js';
import { openSession } from './legacy-session.js';
import type { TaskUpstream } from './task-upstream.js';

type Json = Record<string, any>;

const KINDS = ['result', 'waiting', 'polled', 'double', 'raced_cancel', 'failed', 'cancelled', 'gone', 'expired', 'stranger', 'rebuilt'] as const;
type Kind = (typeof KINDS)[number];
/** What each kind must end as; null: a race, where only the invariant (delivered ⇔ charged once) is asserted. */
const DELIVERS: Record<Kind, boolean | null> = {
  result: true,
  waiting: true,
  polled: true,
  double: true,
  raced_cancel: null,
  failed: false,
  cancelled: false,
  gone: false,
  expired: false,
  stranger: true,
  rebuilt: true,
};
export const TASK_DEADLINE_MS = 10 * 60_000;
const BATCH = 100;
export const CONCURRENCY = 24;
const RECEIPT = 'xyz.tollbooth/receipt';
const REFUSAL = 'xyz.tollbooth/refusal';

/** mulberry32: a small deterministic generator, so a failing run can be replayed with its seed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4_294_967_296;
  };
}

async function pool<T>(items: T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) await work(items[next++] as T);
  }));
}

interface Lifecycle {
  index: number;
  kind: Kind;
  handle: string;
  handleHash: string;
  session: string;
  taskId: string;
  /** Answers that carried the task's result text. */
  delivered: number;
  receipts: Json[];
  answers: Json[];
  /** An answer was lost with its connection and asked again (a result paid for then comes back without a receipt). */
  retried: boolean;
}

let nextId = 1;
/**
 * One request, as an agent sends it: a connection the gateway closed before answering (a gateway shutting
 * down under it) is retried on the gateway serving now, and the answer is marked `retried`.
 */
async function rpc(url: () => string, session: string, method: string, params: Json, attempt = 0): Promise<Json> {
  let response: Response;
  try {
    response = await fetch(url(), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': session },
      body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }),
    });
  } catch (error) {
    if (attempt >= 5) throw error;
    await new Promise((resolve) => setTimeout(resolve, 50));
    return { ...(await rpc(url, session, method, params, attempt + 1)), retried: true };
  }
  const text = await response.text();
  if (response.headers.get('content-type')?.includes('text/event-stream')) {
    const data = text.split('\n').filter((line) => line.startsWith('data: {')).map((line) => JSON.parse(line.slice(6)) as Json);
    return data.find((message) => 'result' in message || 'error' in message) ?? { status: response.status, text };
  }
  return text ? (JSON.parse(text) as Json) : { status: response.status };
}

export interface Rig {
  /** Upstream sessions opened through the gateway; each lifecycle runs in one, a stranger asks from another. */
  sessions: string[];
  /** The URL of the gateway serving now (a rebuild may replace it). */
  url: () => string;
  store: Store;
  hashSecret: string;
  advance(ms: number): void;
  /** Rebuilds the gateway on the same store while tasks are held (a reload, or a fresh gateway on the same Redis). */
  rebuild(): Promise<void>;
  /** Runs the reconciler (on whichever gateway holds its lease) until no stale reservation is left. */
  reconcile(): Promise<void>;
}

export async function runLifecycles(t: Test, rig: Rig, upstream: TaskUpstream, count: number, seed: number): Promise<void> {
  const rand = random(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)] as T;
  const observe = (life: Lifecycle, answer: Json): Json => {
    life.answers.push(answer);
    if (answer.retried) life.retried = true;
    if (JSON.stringify(answer).includes(`done:${life.taskId}`)) {
      life.delivered++;
      if (answer.result?._meta?.[RECEIPT]) life.receipts.push(answer.result._meta[RECEIPT] as Json);
    }
    return answer;
  };
  const lifecycles: Lifecycle[] = [];
  for (let start = 0; start < count; start += BATCH) {
    const size = Math.min(BATCH, count - start);
    const batch: Lifecycle[] = [];
    for (let i = 0; i < size; i++) {
      const handle = mintHandle();
      batch.push({ index: start + i, kind: pick(KINDS), handle, handleHash: hashHandle(handle, rig.hashSecret), session: rig.sessions[(start + i) % rig.sessions.length] as string, taskId: '', delivered: 0, receipts: [], answers: [], retried: false });
    }
    // Each lifecycle pays from its own handle (3 credits), so what it was charged is read off that handle alone.
    await pool(batch, CONCURRENCY, async (life) => {
      await rig.store.createHandle({ handleHash: life.handleHash, fingerprint: 'tb_s_life..cycl', principal: null, ttlMs: 30 * 24 * 3_600_000 });
      await rig.store.grantCredits(life.handleHash, 'research', 3);
    });
    await pool(batch, CONCURRENCY, async (life) => {
      const created = await rpc(rig.url, life.session, 'tools/call', { name: 'job', arguments: { name: `l${life.index}`, tollboothToken: life.handle }, task: { ttl: 600_000 } });
      const taskId = created.result?.task?.taskId;
      if (typeof taskId !== 'string') throw new Error(`lifecycle ${life.index}: no task created: ${JSON.stringify(created)}`);
      life.taskId = taskId;
    });
    // As the refusal tells an agent: a result that could not be confirmed as paid (the store timed out) is asked for again.
    const result = async (life: Lifecycle): Promise<Json> => {
      for (let attempt = 0; ; attempt++) {
        const answer = observe(life, await rpc(rig.url, life.session, 'tasks/result', { taskId: life.taskId }));
        if (answer.result?._meta?.[REFUSAL]?.reason !== 'payments_unavailable' || attempt >= 5) return answer;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    };
    const finish = (life: Lifecycle, status: 'completed' | 'failed' = 'completed') => upstream.finish(life.taskId, status);

    // The rebuild happens while about half of this batch's lifecycles are still running.
    const live = batch.filter((life) => life.kind !== 'expired' && life.kind !== 'rebuilt');
    const rebuiltOnes = batch.filter((life) => life.kind === 'rebuilt');
    let done = 0;
    let rebuilt: Promise<void> | null = null;
    const maybeRebuild = (): void => {
      if (rebuilt === null && ++done >= live.length / 2) rebuilt = rig.rebuild();
    };
    await pool(live, CONCURRENCY, async (life) => {
      switch (life.kind) {
        case 'result':
          await finish(life);
          await result(life);
          break;
        case 'waiting': {
          // Asked while the task still runs: the upstream holds tasks/result until the task ends.
          const asked = result(life);
          await new Promise((resolve) => setTimeout(resolve, 5 + Math.floor(rand() * 20)));
          await finish(life);
          await asked;
          break;
        }
        case 'polled':
          observe(life, await rpc(rig.url, life.session, 'tasks/get', { taskId: life.taskId }));
          await finish(life);
          observe(life, await rpc(rig.url, life.session, 'tasks/get', { taskId: life.taskId }));
          await result(life);
          break;
        case 'double':
          await finish(life);
          await Promise.all([result(life), result(life)]);
          break;
        case 'raced_cancel': {
          const asked = result(life);
          const cancelled = rpc(rig.url, life.session, 'tasks/cancel', { taskId: life.taskId }).then((answer) => observe(life, answer));
          if (rand() < 0.5) await finish(life).catch(() => undefined); // a task already cancelled cannot be completed
          await cancelled;
          // A task cancelled first never ends otherwise: its pending tasks/result is answered once cancelled.
          await asked;
          break;
        }
        case 'failed':
          await finish(life, 'failed');
          await result(life);
          break;
        case 'cancelled':
          observe(life, await rpc(rig.url, life.session, 'tasks/cancel', { taskId: life.taskId }));
          break;
        case 'gone':
          if (rand() < 0.5) await finish(life); // finished or not, nobody asks for it again
          break;
        case 'stranger': {
          await finish(life);
          const stranger = await rpc(rig.url, rig.sessions[(life.index + 1) % rig.sessions.length] as string, 'tasks/result', { taskId: life.taskId });
          observe(life, stranger);
          if (stranger.error?.code !== -32602) throw new Error(`lifecycle ${life.index}: a stranger was answered ${JSON.stringify(stranger)}`);
          await result(life);
          break;
        }
        case 'expired':
        case 'rebuilt':
          throw new Error(`${life.kind} lifecycles run after this phase`);
      }
      maybeRebuild();
    });
    await (rebuilt ?? rig.rebuild());
    // Held across the rebuild: the new gateway finds each task's reservation in the store.
    await pool(rebuiltOnes, CONCURRENCY, async (life) => {
      await finish(life);
      await result(life);
    });

    // Past upstream.taskDeadline: the reconciler releases what is still held; a late result is withheld.
    rig.advance(TASK_DEADLINE_MS + 60_000);
    await rig.reconcile();
    await pool(batch.filter((life) => life.kind === 'expired'), CONCURRENCY, async (life) => {
      await finish(life);
      await result(life);
    });
    lifecycles.push(...batch);
  }

  // The ledger of every handle, read once all lifecycles ended.
  const kinds = new Map<Kind, number>();
  const failures: string[] = [];
  await pool(lifecycles, CONCURRENCY, async (life) => {
    kinds.set(life.kind, (kinds.get(life.kind) ?? 0) + 1);
    const spends = (await rig.store.ledgerTail(life.handleHash, 100)).filter((entry) => entry.kind === 'spend');
    const balance = (await rig.store.getHandle(life.handleHash))?.balances.research ?? -1;
    const delivered = life.delivered > 0;
    const expected = DELIVERS[life.kind];
    const problems: string[] = [];
    if (expected !== null && delivered !== expected) problems.push(`delivered=${delivered}, expected ${expected}`);
    if (delivered && (spends.length !== 1 || balance !== 2)) problems.push(`delivered with ${spends.length} spend(s), balance ${balance} (free or double charged)`);
    if (!delivered && (spends.length !== 0 || balance !== 3)) problems.push(`not delivered, yet ${spends.length} spend(s), balance ${balance}`);
    if (delivered && life.receipts.length === 0 && !life.retried) problems.push('delivered, never with a receipt');
    if (life.receipts.some((receipt) => receipt.cost !== 1 || receipt.remaining !== 2)) problems.push(`receipts ${JSON.stringify(life.receipts)}`);
    // A read refused payments_unavailable says "ask again" (the store timed out under load); any other refusal of a paid result is false.
    const refused = life.answers.map((answer) => answer.result?._meta?.[REFUSAL]?.reason as string | undefined).filter((reason) => reason !== undefined && reason !== 'payments_unavailable');
    if (delivered && refused.length > 0) problems.push(`paid for, yet also refused (${refused.join(', ')})`);
    if (problems.length > 0) failures.push(`#${life.index} ${life.kind} ${life.taskId}: ${problems.join('; ')}; answers ${JSON.stringify(life.answers).slice(0, 600)}`);
  });
  t.same(failures, [], `${lifecycles.length} lifecycles: delivered ⇔ charged exactly once; nothing delivered ⇔ nothing spent`);
  t.equal(lifecycles.length, count);
  for (const kind of KINDS) t.ok((kinds.get(kind) ?? 0) > 0, `the mix has ${kind} lifecycles (${kinds.get(kind) ?? 0})`);
}


/** The gateway config of a lifecycle run: one priced task tool, a 10-minute task deadline, limits that never refuse. */
export function lifecycleConfig(upstreamUrl: string, overrides: Partial<ConfigInput> = {}): ConfigInput {
  const base = testConfig(upstreamUrl);
  return {
    ...base,
    upstream: { url: upstreamUrl, taskDeadline: `${TASK_DEADLINE_MS}ms` },
    tools: { job: { sku: 'research', cost: 1 } },
    handles: { hashSecret: 'task-lifecycles-secret-0123456789abcdef' },
    limits: { perHandle: { ratePerSecond: 10_000, burst: 10_000 }, challengesPerClient: { ratePerSecond: 10_000, burst: 10_000 }, newChargesPerSecond: 10_000 },
    logging: { level: 'warn' },
    ...overrides,
  };
}

/** One upstream session per concurrent worker (the upstream keeps one SDK server per session, as a real one would). */
export async function openSessions(url: string): Promise<string[]> {
  return Promise.all(Array.from({ length: CONCURRENCY }, async () => (await openSession(url)).sessionId));
}

/** Writes the config to a file of its own, so the gateway can be reloaded from it (SIGHUP's path). */
export function configFile(t: Test, input: ConfigInput): string {
  const dir = mkdtempSync(join(tmpdir(), 'tb-task-lifecycles-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'tollbooth.json');
  writeFileSync(path, JSON.stringify(input));
  return path;
}

/** Names for a stateless upstream's callers: the gateway binds a task to the session header it was created with. */
export function sessionNames(prefix: string): string[] {
  return Array.from({ length: CONCURRENCY }, (_, i) => `${prefix}-${i}`);
}
