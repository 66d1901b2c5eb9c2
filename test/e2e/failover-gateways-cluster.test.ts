// Money through Redis Cluster failovers with real gateway processes (SPEC §21 "After any failover"):
// three masters with one replica each; per payment provider (dev checkout, Moove fake) two `tollbooth
// start` processes; each master in turn SIGKILLed or SIGSTOPped while clients pay and spend, its
// replica promoted by the cluster; then the count from outside (helpers/gateway-chaos.ts). Runs only
// with TB_CHAOS=1 (`npm run chaos`): a Cluster of six nodes and four gateways is too long for `npm test`.
import t from 'tap';
import { assertNoMoneyLost, clusterTopology, runGatewayChaos } from '../helpers/gateway-chaos.js';
import { startRedisCluster } from '../helpers/redis-server.js';

const CHAOS = process.env.TB_CHAOS === '1';
const FAILOVERS = Number(process.env.TB_CHAOS_FAILOVERS ?? 6);
const CLIENTS = Number(process.env.TB_CHAOS_CLIENTS ?? 24);

t.test(`durability replicated: ${FAILOVERS} Cluster master failovers under paid load through gateway processes lose no money`, { skip: CHAOS ? false : 'TB_CHAOS=1 runs it (npm run chaos)' }, async (t) => {
  const cluster = await startRedisCluster({ persist: true, replicasPerMaster: 1 });
  t.teardown(() => cluster.stop());
  const count = await runGatewayChaos(t, clusterTopology(cluster), { durability: 'replicated', providers: ['dev', 'moove'], failovers: FAILOVERS, modes: ['kill', 'pause'], clients: CLIENTS, pack: 50, gapMs: 2_000 });
  t.comment(JSON.stringify(count));
  assertNoMoneyLost(t, count);
});
