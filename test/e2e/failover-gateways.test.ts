// Money through failovers with real gateway processes (SPEC §21 "After any failover"): per payment
// provider (the dev checkout, the Moove fake) two `tollbooth start` processes on one Sentinel set-up
// (1 primary, 2 replicas, 3 sentinels), clients paying and spending over HTTP while the primary is
// SIGKILLed or SIGSTOPped and Sentinel promotes a replica; then the count from outside
// (helpers/gateway-chaos.ts). `npm test` runs 2 failovers; TB_CHAOS=1 (`npm run chaos`) runs more, at
// more load, and the negative control with durability none. docs/reliability.md records the runs.
import t, { type Test } from 'tap';
import { runGatewayChaos, sentinelTopology, type ChaosCount, type ChaosOptions } from '../helpers/gateway-chaos.js';
import { startSentinelSet } from '../helpers/redis-server.js';

const CHAOS = process.env.TB_CHAOS === '1';
const FAILOVERS = Number(process.env.TB_CHAOS_FAILOVERS ?? (CHAOS ? 6 : 2));
const CLIENTS = Number(process.env.TB_CHAOS_CLIENTS ?? (CHAOS ? 24 : 8));

async function sentinelRun(t: Test, options: Partial<ChaosOptions> & Pick<ChaosOptions, 'durability' | 'modes'>): Promise<ChaosCount> {
  const set = await startSentinelSet();
  t.teardown(() => set.stop());
  const count = await runGatewayChaos(t, sentinelTopology(set), { providers: ['dev', 'moove'], failovers: FAILOVERS, clients: CLIENTS, pack: 50, gapMs: CHAOS ? 2_000 : 1_000, ...options });
  t.comment(JSON.stringify(count));
  return count;
}

/** §21's promises, per tenant. */
function assertNoMoneyLost(t: Test, count: ChaosCount): void {
  for (const tenant of count.tenants) {
    const name = `${tenant.provider}:`;
    t.ok(tenant.delivered > 0 && tenant.reportedPaid > 0, `${name} paid calls were delivered (${tenant.delivered}) and payments landed (${tenant.reportedPaid})`);
    t.equal(tenant.withoutReceipt, 0, `${name} no paid tool's result came without a receipt`);
    t.equal(tenant.notGranted, 0, `${name} every payment the provider reports is granted`);
    t.equal(tenant.grantedOnce, tenant.reportedPaid, `${name} … exactly once`);
    t.equal(tenant.grantedTwice + tenant.extraGrants, 0, `${name} nothing granted twice or without a payment`);
    t.equal(tenant.spentTwice, 0, `${name} no reservation spent twice`);
    const unreplicatedCommits = tenant.unreplicated.commit ?? 0;
    t.ok(tenant.uncovered <= unreplicatedCommits, `${name} every received result has a spend entry except the ${unreplicatedCommits} counted unreplicated commits (uncovered: ${tenant.uncovered})`);
    t.equal(tenant.orphans, 0, `${name} no payment left an orphan (every shown link's charge survived)`);
    t.equal(tenant.verifyExit, 0, `${name} tollbooth ledger verify passes: ${tenant.verifyOutput.slice(0, 300)}`);
  }
}

t.test(`durability replicated: ${FAILOVERS} Sentinel failovers (SIGKILL, SIGSTOP) under paid load through gateway processes lose no money`, async (t) => {
  const count = await sentinelRun(t, { durability: 'replicated', modes: ['kill', 'pause'] });
  assertNoMoneyLost(t, count);
});
