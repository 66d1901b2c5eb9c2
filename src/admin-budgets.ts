// `tollbooth budget show <principal|handle>` (SPEC §23): the budgets and free allowances counting a
// principal's or a handle's calls, and what each has used in its current window. Like the other admin
// verbs (admin.ts) it runs against the store, or inside a memory-store gateway through the admin socket,
// and prints no handle and no full handle hash.
import type { AdminContext } from './admin.js';
import { formatTable, resolveHandles } from './admin.js';
import { isWellFormedHandle } from './paywall/handles.js';
import { quotasOf, type QuotaOfSubject } from './paywall/quotas.js';

/** A principal as the gateway records it (`sub:…` or `client:…`), else a handle or its fingerprint. */
export async function showBudgets(context: AdminContext, reference: string): Promise<void> {
  const now = (context.now ?? Date.now)();
  const rules = { budgets: context.config.budgets, allowances: context.config.allowances };
  if (isWellFormedHandle(reference) || reference.includes('..')) {
    const handles = await resolveHandles(context, reference);
    for (const [index, handle] of handles.entries()) {
      if (index > 0) context.out('');
      context.out(`handle ${handle.fingerprint}`);
      await describe(context, quotasOf(rules, { handleHash: handle.handleHash }, now));
    }
    return;
  }
  context.out(`principal ${reference}`);
  await describe(context, quotasOf(rules, { principal: reference }, now));
}

async function describe(context: AdminContext, quotas: QuotaOfSubject[]): Promise<void> {
  if (quotas.length === 0) {
    context.out('no budget or allowance counts these calls');
    return;
  }
  const usage = await context.store.quotaUsage(quotas.map((quota) => quota.counter));
  const rows = quotas.map((quota, index) => {
    const used = usage[index];
    const calls = used?.calls ?? 0;
    const credits = used?.credits ?? 0;
    const windowEnd = quota.counter.windowStart + quota.windowMs;
    return [
      quota.kind,
      quota.name,
      formatWindow(quota.windowMs),
      new Date(windowEnd).toISOString(),
      quota.maxCalls === null ? String(calls) : `${calls}/${quota.maxCalls}`,
      quota.kind === 'allowance' ? '-' : quota.maxCredits === null ? String(credits) : `${credits}/${quota.maxCredits}`,
      quota.kind === 'allowance' ? `${Math.max(0, (quota.maxCalls ?? 0) - calls)} free calls left` : remaining(quota, calls, credits),
    ];
  });
  for (const line of formatTable(['KIND', 'NAME', 'WINDOW', 'RESETS', 'CALLS', 'CREDITS', 'LEFT'], rows)) context.out(line);
}

function remaining(quota: QuotaOfSubject, calls: number, credits: number): string {
  const parts: string[] = [];
  if (quota.maxCalls !== null) parts.push(`${Math.max(0, quota.maxCalls - calls)} calls`);
  if (quota.maxCredits !== null) parts.push(`${Math.max(0, quota.maxCredits - credits)} credits`);
  return parts.join(', ');
}

function formatWindow(ms: number): string {
  for (const [unit, size] of [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000]] as const) if (ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}
