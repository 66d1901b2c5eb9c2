// Failover chaos with real gateway processes (SPEC §21 "After any failover"). Per payment provider a
// tenant: two `tollbooth start` processes sharing one key prefix on the Redis under test (Sentinel
// or Cluster), the dev checkout or the Moove fake behind them. Clients make paid calls as agents do —
// no token: challenged; pay the link (dev checkout page, or the Moove fake plus its signed webhook);
// retry with the handle; spend the pack; pay again when it runs out — while the topology fails over
// again and again. Afterwards the payers retry once, the reconcilers run, and the count is made from
// outside: the provider's paid links against grant entries, the results clients received against
// spend entries and the gateways' tollbooth_store_unreplicated_writes_total, duplicates, orphans,
// and `tollbooth ledger verify` as an operator runs it.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Test } from 'tap';
import { Agent } from 'undici';
import { hashHandle } from '../../src/paywall/handles.js';
import { MOOVE_WEBHOOK_PATH } from '../../src/payments/webhook.js';
import type { RedisStore } from '../../src/store/redis.js';
import {
  callTool,
  childEnv,
  CLI,
  connectStore,
  HASH_SECRET,
  payDevCheckout,
  redisGatewayConfig,
  ROOT,
  scrape,
  startGatewayProcess,
  sumCounter,
  type CallOutcome,
  type GatewayProcess,
  type RedisTarget,
} from './gateway-process.js';
import { sendWebhook, startMooveFake, type MooveFake } from './moove-fake.js';
import { startPaidUpstream, type PaidUpstream } from './paid-upstream.js';
import { cli, type RedisCluster, type SentinelSet } from './redis-server.js';
import { waitFor } from './clock.js';

export type FailoverMode = 'kill' | 'pause';
export type Provider = 'dev' | 'moove';

export interface ChaosTopology {
  label: string;
  target: RedisTarget;
  /**
   * One failover: SIGKILL or SIGSTOP the primary (a master), wait for the promotion, bring the old one
   * back as a replica in sync. Resolves with the ms from the signal to the promoted replica answering as primary.
   */
  failOver(mode: FailoverMode): Promise<number>;
  /** Each data node's port, role and key count under `prefix`, for the report. */
  describe(prefix: string): string;
}

export interface ChaosOptions {
  durability: 'none' | 'replicated';
  /** store.redis.waitReplicas (default 1). */
  waitReplicas?: number;
  providers: Provider[];
  failovers: number;
  /** Failover i uses modes[i % modes.length]. */
  modes: FailoverMode[];
  /** Concurrent clients per tenant. */
  clients: number;
  /** Credits per payment (the pack). */
  pack: number;
  /** Quiet time before each failover (load only), ms. */
  gapMs: number;
}

export interface TenantCount {
  provider: Provider;
  /** Results with a receipt the clients received, and results without one (a paid tool's result never comes without). */
  delivered: number;
  withoutReceipt: number;
  /** Links the clients paid (dev: with the pay actions that failed but the provider recorded); of those, what the provider reports paid at the end (dev: the link in the store; Moove: the fake). */
  paidByClients: number;
  reportedPaid: number;
  /** Reported payments granted exactly once / not at all / a grant ref seen more than once; grants beyond the reported payments. */
  grantedOnce: number;
  notGranted: number;
  /** Per payment reported paid and never granted: the payer's last retry and its handle's charges in the store at the end. */
  notGrantedDetail: string[];
  grantedTwice: number;
  extraGrants: number;
  spends: number;
  /** Spend entries beyond the calls that reached the upstream with the handle (a commit applied twice). */
  spentTwice: number;
  /** Received results without a spend entry (per handle: delivered − spends, when positive). */
  uncovered: number;
  /** tollbooth_store_unreplicated_writes_total by op, summed over the tenant's gateways. */
  unreplicated: Record<string, number>;
  orphans: number;
  /** Dev links a client paid (303) that the store no longer holds as paid (the dev provider lives in the store). */
  devPaymentsErased: number;
  /** The gateways' log lines by `evt` (warn and above: the config logs at warn). */
  logEvents: Record<string, number>;
  verifyExit: number | null;
  verifyOutput: string;
}

export interface ChaosCount {
  topology: string;
  durability: string;
  failovers: number;
  /** Per failover, ms from the signal to the promoted replica answering as primary, and to the old primary back as a replica in sync. */
  promotedMs: number[];
  failoverMs: number[];
  /** Gateways up (s), under load (s), counting after the load (s). */
  setupSeconds: number;
  seconds: number;
  countSeconds: number;
  /** Paid results per second over the load (both tenants). */
  paidPerSecond: number;
  /** Paid results per second while no failover was under way (the gaps between rounds, after the first). */
  paidPerSecondBetweenFailovers: number;
  outcomes: Record<string, number>;
  tenants: TenantCount[];
  /** Where the data is at the end (topology.describe). */
  nodes: string;
}

interface Tenant {
  provider: Provider;
  keyPrefix: string;
  gateways: GatewayProcess[];
  store: RedisStore;
  delivered: Map<string, number>;
  withoutReceipt: number;
  /** checkout URL → handle, for every link a client paid. */
  paidLinks: Map<string, string>;
  /**
   * Dev links whose pay action did not answer 303 (a failover mid-request): the payment may still have
   * been recorded before the error, and then granted. Counted as paid when the dev provider says so.
   */
  uncertainLinks: Map<string, string>;
}

const WEBHOOK_SECRET = 'chaos-webhook-secret';
/** The argument the upstream receives names the handle's hash, so upstream calls are counted per handle. */
const callUrl = (handle: string | undefined): string => `https://example.com/${handle ? hashHandle(handle, HASH_SECRET) : 'new'}`;
const linkId = (checkoutUrl: string): string => new URL(checkoutUrl).pathname.split('/').pop() as string;

export async function runGatewayChaos(t: Test, topology: ChaosTopology, options: ChaosOptions): Promise<ChaosCount> {
  const begun = performance.now();
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const moove = await startMooveFake();
  t.teardown(() => moove.close());
  const tenants = await Promise.all(options.providers.map((provider) => startTenant(t, topology.target, provider, upstream.url, moove, options)));
  const agent = new Agent({ connections: options.clients * tenants.length, pipelining: 1 });
  t.teardown(() => agent.close());

  const outcomes: Record<string, number> = {};
  const note = (outcome: CallOutcome): void => {
    const key = outcome.kind === 'refused' || outcome.kind === 'challenged' ? `${outcome.kind}:${outcome.reason}` : outcome.kind;
    outcomes[key] = (outcomes[key] ?? 0) + 1;
  };
  let running = true;
  const paidAt: number[] = [];
  const client = async (tenant: Tenant, index: number): Promise<void> => {
    let handle: string | undefined;
    for (let n = index; running; n++) {
      const gateway = tenant.gateways[n % tenant.gateways.length] as GatewayProcess;
      const outcome = await callTool(gateway.url, 'fetch_readable', { url: callUrl(handle), ...(handle ? { tollboothToken: handle } : {}) }, agent);
      note(outcome);
      if (outcome.kind === 'paid') paidAt.push(performance.now());
      if (outcome.kind === 'paid' && handle) tenant.delivered.set(handle, (tenant.delivered.get(handle) ?? 0) + 1);
      else if (outcome.kind === 'ok') tenant.withoutReceipt++;
      else if (outcome.kind === 'challenged') {
        handle = outcome.handle;
        if (!tenant.paidLinks.has(outcome.checkoutUrl)) {
          tenant.paidLinks.set(outcome.checkoutUrl, handle);
          if (!(await pay(tenant, outcome.checkoutUrl, gateway, moove))) {
            tenant.paidLinks.delete(outcome.checkoutUrl);
            tenant.uncertainLinks.set(outcome.checkoutUrl, handle);
          }
        }
        await sleep(20);
      } else if (outcome.kind !== 'paid') await sleep(50); // refused or failed: back off while the store fails over
    }
  };

  const failoverMs: number[] = [];
  const promotedMs: number[] = [];
  /** The quiet stretches between failovers (the first is the clients' warm-up: left out of the steady rate). */
  const gaps: [number, number][] = [];
  const timed = async (wait: Promise<unknown>): Promise<[number, number]> => {
    const from = performance.now();
    await wait;
    return [from, performance.now()];
  };
  const started = performance.now();
  const load = tenants.flatMap((tenant) => Array.from({ length: options.clients }, (_, i) => client(tenant, i)));
  try {
    for (let i = 0; i < options.failovers; i++) {
      gaps.push(await timed(sleep(options.gapMs)));
      const at = performance.now();
      promotedMs.push(await topology.failOver(options.modes[i % options.modes.length] as FailoverMode));
      failoverMs.push(Math.round(performance.now() - at));
    }
    gaps.push(await timed(sleep(options.gapMs)));
  } finally {
    running = false;
    await Promise.all(load);
  }
  const seconds = (performance.now() - started) / 1000;
  const delivered = tenants.reduce((sum, tenant) => sum + [...tenant.delivered.values()].reduce((a, b) => a + b, 0), 0);
  const paidPerSecond = Math.round(delivered / seconds);
  const steady = gaps.slice(1);
  const steadySeconds = steady.reduce((sum, [from, to]) => sum + (to - from), 0) / 1000;
  const paidBetweenFailovers = paidAt.filter((at) => steady.some(([from, to]) => at >= from && at < to)).length;
  const paidPerSecondBetweenFailovers = steadySeconds > 0 ? Math.round(paidBetweenFailovers / steadySeconds) : 0;

  const counted = performance.now();
  const nodes = tenants.map((tenant) => `${tenant.provider}: ${topology.describe(tenant.keyPrefix)}`).join('; ');
  const tenantCounts = await Promise.all(tenants.map((tenant) => countTenant(tenant, moove, upstream, agent, note)));
  return {
    topology: topology.label,
    durability: options.durability,
    failovers: options.failovers,
    promotedMs,
    failoverMs,
    setupSeconds: Math.round((started - begun) / 1000),
    seconds: Math.round(seconds),
    countSeconds: Math.round((performance.now() - counted) / 1000),
    paidPerSecond,
    paidPerSecondBetweenFailovers,
    outcomes,
    tenants: tenantCounts,
    nodes,
  };
}

/** §21's promises, per tenant (provider). */
export function assertNoMoneyLost(t: Test, count: ChaosCount): void {
  for (const tenant of count.tenants) {
    const name = `${tenant.provider}:`;
    t.ok(tenant.delivered > 0 && tenant.paidByClients > 0, `${name} paid calls were delivered (${tenant.delivered}) and payments landed (${tenant.paidByClients} paid, ${tenant.reportedPaid} reported paid at the end)`);
    t.equal(tenant.withoutReceipt, 0, `${name} no paid tool's result came without a receipt`);
    t.equal(tenant.notGranted, 0, `${name} every payment the provider reports is granted${tenant.notGranted > 0 ? ` (not granted: ${tenant.notGrantedDetail.join(' | ')})` : ''}`);
    t.equal(tenant.grantedOnce, tenant.reportedPaid, `${name} … exactly once`);
    t.equal(tenant.grantedTwice + tenant.extraGrants, 0, `${name} nothing granted twice or without a payment`);
    t.equal(tenant.spentTwice, 0, `${name} no reservation spent twice (spends ≤ calls that reached the upstream)`);
    const unreplicatedCommits = tenant.unreplicated.commit ?? 0;
    t.ok(tenant.uncovered <= unreplicatedCommits, `${name} every received result has a spend entry except the ${unreplicatedCommits} counted unreplicated commits (uncovered: ${tenant.uncovered})`);
    t.equal(tenant.orphans, 0, `${name} no payment left an orphan (every shown link's charge survived)`);
    // devPaymentsErased is reported, not asserted: the dev provider keeps its links in the store under
    // test (no WAIT on the checkout page's write), so its own record of a payment can go with a failover.
    t.equal(tenant.verifyExit, 0, `${name} tollbooth ledger verify passes: ${tenant.verifyOutput.slice(0, 300)}`);
  }
}

async function startTenant(t: Test, target: RedisTarget, provider: Provider, upstreamUrl: string, moove: MooveFake, options: ChaosOptions): Promise<Tenant> {
  const keyPrefix = `tbchaos${provider}${randomBytes(3).toString('hex')}:`;
  const payments =
    provider === 'dev'
      ? { provider: 'dev' as const, reconcile: { interval: '1s' } }
      : { provider: 'moove' as const, moove: { apiKey: 'test-key', baseUrl: moove.url, webhookSecret: WEBHOOK_SECRET }, reconcile: { interval: '1s' } };
  const config = redisGatewayConfig(upstreamUrl, target, keyPrefix, {
    store: { type: 'redis', redis: { ...target, keyPrefix, durability: options.durability, waitReplicas: options.waitReplicas ?? 1, waitTimeout: '100ms' } },
    upstream: { url: upstreamUrl, callDeadline: '5s' },
    payments,
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: options.pack } },
  });
  // One after the other, and again when a start misses the store's 5 s connect budget (a loaded machine).
  const start = async (): Promise<GatewayProcess> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await startGatewayProcess(t, config);
      } catch (error) {
        if (attempt >= 3 || !String((error as Error).message).includes('cannot use the Redis store')) throw error;
      }
    }
  };
  const gateways = [await start(), await start()];
  return { provider, keyPrefix, gateways, store: await connectStore(t, target, keyPrefix), delivered: new Map(), withoutReceipt: 0, paidLinks: new Map(), uncertainLinks: new Map() };
}

/** The payer pays the link: the dev checkout page (any replica), or Moove (the fake completes the link and signs a webhook to one replica). */
async function pay(tenant: Tenant, checkoutUrl: string, via: GatewayProcess, moove: MooveFake): Promise<boolean> {
  if (tenant.provider === 'dev') return (await payDevCheckout(checkoutUrl, via.origin).catch(() => 0)) === 303;
  const id = linkId(checkoutUrl);
  await moove.pay(id, '5.00');
  // Moove retries a webhook it could not deliver; a lost one is the reconciler's to find. Not awaited by the payer.
  void sendWebhook(`${via.origin}${MOOVE_WEBHOOK_PATH}`, WEBHOOK_SECRET, {
    id: `evt_${randomBytes(6).toString('hex')}`,
    type: 'payment_link.completed',
    createdAt: new Date().toISOString(),
    data: { id, paymentLinkId: id, status: 'completed', receivedAmount: '5' },
  }).catch(() => undefined);
  return true;
}

async function countTenant(tenant: Tenant, moove: MooveFake, upstream: PaidUpstream, agent: Agent, note: (outcome: CallOutcome) => void): Promise<TenantCount> {
  const { store } = tenant;
  // What the provider reports paid, per handle.
  const reported = new Map<string, number>();
  let devPaymentsErased = 0;
  for (const [checkoutUrl, handle] of tenant.paidLinks) {
    const id = linkId(checkoutUrl);
    const paid = tenant.provider === 'moove' ? moove.links.get(id)?.status === 'completed' : (await store.getDevLink(id))?.status === 'completed';
    if (paid) reported.set(handle, (reported.get(handle) ?? 0) + 1);
    else if (tenant.provider === 'dev') devPaymentsErased++;
  }
  let uncertainPaid = 0;
  for (const [checkoutUrl, handle] of tenant.uncertainLinks) {
    if (tenant.paidLinks.has(checkoutUrl) || (await store.getDevLink(linkId(checkoutUrl)))?.status !== 'completed') continue;
    reported.set(handle, (reported.get(handle) ?? 0) + 1);
    uncertainPaid++;
  }
  const handles = [...new Set([...tenant.paidLinks.values(), ...tenant.uncertainLinks.values(), ...tenant.delivered.keys()])];
  const ledgers = async (): Promise<Map<string, Awaited<ReturnType<RedisStore['readLedger']>>>> =>
    new Map(await Promise.all(handles.map(async (handle) => [handle, await store.readLedger({ kind: 'handle', handleHash: hashHandle(handle, HASH_SECRET) }, { limit: 10_000_000 })] as const)));
  const grantsOf = (entries: Awaited<ReturnType<RedisStore['readLedger']>>): number => entries.filter((entry) => entry.kind === 'grant' && entry.credits > 0).length;

  // Each payer retries once (what an agent does after paying); then the reconcilers have until the
  // deadline to grant whatever a failover made them lose.
  const lastRetry = new Map<string, string>();
  await Promise.all(
    handles.map(async (handle, i) => {
      const outcome = await callTool(tenant.gateways[i % tenant.gateways.length]!.url, 'fetch_readable', { url: callUrl(handle), tollboothToken: handle }, agent);
      note(outcome);
      lastRetry.set(handle, outcome.kind === 'refused' || outcome.kind === 'challenged' ? `${outcome.kind}:${outcome.reason}` : outcome.kind);
      if (outcome.kind === 'paid') tenant.delivered.set(handle, (tenant.delivered.get(handle) ?? 0) + 1);
      if (outcome.kind === 'ok') tenant.withoutReceipt++;
    }),
  );
  let entries = await ledgers();
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await sleep(500)) {
    if (handles.every((handle) => grantsOf(entries.get(handle) ?? []) >= (reported.get(handle) ?? 0))) break;
    entries = await ledgers();
  }

  const upstreamCalls = new Map<string, number>();
  for (const call of upstream.callsOf('fetch_readable')) {
    const key = String(call.arguments.url).split('/').pop() as string;
    upstreamCalls.set(key, (upstreamCalls.get(key) ?? 0) + 1);
  }
  let grantedOnce = 0;
  let notGranted = 0;
  let grantedTwice = 0;
  let extraGrants = 0;
  let spends = 0;
  let spentTwice = 0;
  let uncovered = 0;
  const notGrantedHandles: string[] = [];
  for (const handle of handles) {
    const ledger = entries.get(handle) ?? [];
    const grantRefs = ledger.filter((entry) => entry.kind === 'grant' && entry.credits > 0).map((entry) => entry.ref);
    const spent = ledger.filter((entry) => entry.kind === 'spend').length;
    grantedTwice += grantRefs.length - new Set(grantRefs).size;
    // A spend entry carries no reservation id: a commit applied twice shows as more spends than calls that reached the upstream.
    spentTwice += Math.max(0, spent - (upstreamCalls.get(hashHandle(handle, HASH_SECRET)) ?? 0));
    const paid = reported.get(handle) ?? 0;
    const granted = new Set(grantRefs).size;
    grantedOnce += Math.min(paid, granted);
    notGranted += Math.max(0, paid - granted);
    if (paid > granted) notGrantedHandles.push(handle);
    extraGrants += Math.max(0, granted - paid);
    spends += spent;
    uncovered += Math.max(0, (tenant.delivered.get(handle) ?? 0) - spent);
  }

  // What a payment nobody granted left behind: its charges as the store holds them now, and the payer's last retry.
  const charges = notGrantedHandles.length > 0 ? await store.listCharges() : [];
  const notGrantedDetail = notGrantedHandles.map((handle) => {
    const handleHash = hashHandle(handle, HASH_SECRET);
    const own = charges.filter((charge) => charge.handleHash === handleHash);
    const described = own.map((charge) => `${charge.status} polls=${charge.pollCount} next=${Math.round((charge.nextPollAt - Date.now()) / 1000)}s`).join(', ');
    const paidRefs = [...tenant.paidLinks].filter(([, payer]) => payer === handle).map(([checkoutUrl]) => linkId(checkoutUrl));
    const unknown = paidRefs.filter((ref) => !own.some((charge) => charge.providerRef === ref)).length;
    return `last retry ${lastRetry.get(handle) ?? '-'}; ${paidRefs.length} paid, ${unknown} of them with no charge in the store; charges: ${described || 'none'}`;
  });

  const expositions = await Promise.all(tenant.gateways.map((gateway) => scrape(gateway.origin)));
  const unreplicated: Record<string, number> = {};
  for (const text of expositions) {
    for (const match of text.matchAll(/^tollbooth_store_unreplicated_writes_total\{op="([^"]+)"\} (\d+)/gm)) unreplicated[match[1] as string] = (unreplicated[match[1] as string] ?? 0) + Number(match[2]);
  }
  const verify = await ledgerVerify(tenant.gateways[0]!.configPath);
  const logEvents: Record<string, number> = {};
  for (const gateway of tenant.gateways) for (const line of await gateway.settledLogs()) logEvents[String(line.evt)] = (logEvents[String(line.evt)] ?? 0) + 1;
  return {
    provider: tenant.provider,
    delivered: [...tenant.delivered.values()].reduce((a, b) => a + b, 0),
    withoutReceipt: tenant.withoutReceipt,
    paidByClients: tenant.paidLinks.size + uncertainPaid,
    reportedPaid: [...reported.values()].reduce((a, b) => a + b, 0),
    grantedOnce,
    notGranted,
    notGrantedDetail,
    grantedTwice,
    extraGrants,
    spends,
    spentTwice,
    uncovered,
    unreplicated,
    orphans: expositions.reduce((sum, text) => sum + sumCounter(text, 'tollbooth_orphan_payments_total'), 0),
    devPaymentsErased,
    logEvents,
    verifyExit: verify.code,
    verifyOutput: verify.output.slice(0, 2_000),
  };
}

/** `tollbooth ledger verify --config …` as an operator runs it (a real process). */
function ledgerVerify(configPath: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, 'ledger', 'verify', '--config', configPath], { cwd: ROOT, env: childEnv(), maxBuffer: 64 * 1024 * 1024, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, output: `${stdout}${stderr}` });
    });
  });
}

/**
 * Sentinel: SIGKILL the primary (a crash; restarted with its AOF) or SIGSTOP it (a hang: its clients'
 * commands wait in its socket, and run when it resumes — on a primary Sentinel has replaced, until
 * Sentinel turns it into a replica). Either way the round ends once the old primary is a replica in sync.
 */
export function sentinelTopology(set: SentinelSet): ChaosTopology {
  return {
    label: 'sentinel (1 primary, 2 replicas, 3 sentinels)',
    target: { url: set.url },
    async failOver(mode) {
      const old = set.primaryPort();
      const node = set.nodes.find((candidate) => candidate.port === old);
      if (!node) throw new Error(`no node on the primary's port ${old}`);
      const at = performance.now();
      node.kill(mode === 'kill' ? 'SIGKILL' : 'SIGSTOP');
      const promoted = await set.awaitPromotion(old);
      const promotedMs = Math.round(performance.now() - at);
      if (mode === 'kill') {
        await node.restart();
        // Restarted, it is nobody's primary (every client follows the sentinels to the new one); pointing
        // it at the new primary now, as Sentinel would some seconds later, keeps the rounds short.
        cli(node.port, 'replicaof', '127.0.0.1', String(promoted));
      } else {
        // Resumed, it still takes the commands its clients queued and any new ones, as a primary, until
        // Sentinel turns it into a replica: the window `durability: replicated` exists for.
        node.kill('SIGCONT');
      }
      await waitFor(async () => {
        const replication = cli(node.port, 'info', 'replication');
        return replication.includes('role:slave') && replication.includes('master_link_status:up');
      }, 'the old primary to rejoin as a replica', { timeoutMs: 60_000, everyMs: 200 });
      return promotedMs;
    },
    describe: (prefix) => set.nodes.map((node) => describeNode(node.port, prefix)).join(', '),
  };
}

/**
 * Cluster: SIGKILL or SIGSTOP one master (each in turn); its replica is promoted once the others mark
 * it failed (cluster-node-timeout); the old master, restarted or resumed, learns the newer epoch and
 * rejoins as the replica of the one that replaced it.
 */
export function clusterTopology(cluster: RedisCluster): ChaosTopology {
  let turn = 0;
  return {
    label: `cluster (3 masters, ${cluster.nodes.length / 3 - 1} replica each)`,
    target: { cluster: cluster.seeds },
    async failOver(mode) {
      const masters = cluster.masters();
      const old = masters[turn++ % masters.length];
      const node = cluster.nodes.find((candidate) => candidate.port === old);
      if (!node || old === undefined) throw new Error(`no master to fail over (masters: ${masters.join(',')})`);
      const at = performance.now();
      node.kill(mode === 'kill' ? 'SIGKILL' : 'SIGSTOP');
      await waitFor(async () => {
        const now = cluster.masters(old);
        return now.length === 3 && !now.includes(old);
      }, `a replica of ${old} promoted`, { timeoutMs: 30_000, everyMs: 200 });
      const promotedMs = Math.round(performance.now() - at);
      if (mode === 'kill') await node.restart();
      else node.kill('SIGCONT');
      await waitFor(async () => {
        const replication = cli(old, 'info', 'replication');
        return replication.includes('role:slave') && replication.includes('master_link_status:up');
      }, `${old} to rejoin as a replica`, { timeoutMs: 60_000, everyMs: 200 });
      await cluster.waitHealthy(30_000);
      return promotedMs;
    },
    describe: (prefix) => cluster.nodes.map((node) => describeNode(node.port, prefix)).join(', '),
  };
}

function describeNode(port: number, prefix: string): string {
  const role = /role:(\w+)/.exec(cli(port, 'info', 'replication'))?.[1] ?? '?';
  const keys = cli(port, '--scan', '--pattern', `${prefix}*`).split('\n').filter(Boolean).length;
  return `${port} ${role} ${keys} keys`;
}
