// store.redis.durability: replicated in Redis Cluster (SPEC §21). Opening a charge writes keys in
// several slots: the charge under the handle's tag, and the provider-ref key a webhook finds it by
// (and the reconciler's indexes) under tags of their own, often on other masters. A link may be shown
// only when every one of those writes is on a replica: a failover that erased the provider-ref key
// alone would turn the payment on that link into an orphan nobody is granted (seen in `npm run chaos`).
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { KeySpace } from '../../src/store/keys.js';
import { RedisStore } from '../../src/store/redis.js';
import { cli, clusterNodes, startRedisCluster } from '../helpers/redis-server.js';

const cluster = await startRedisCluster({ replicasPerMaster: 1 });
t.teardown(() => cluster.stop());

const HOUR = 3_600_000;
const SKU = 'research';
const SNAPSHOT = { label: 'pack', amount: '5.00', currency: 'USD', credits: 10, tool: 'fetch_readable' };
const seed = cluster.ports[0] as number;

/** Port of the master serving `key`'s slot, and the port of that master's replica. */
function placement(key: string): { master: number; replica: number } {
  const slot = Number(cli(seed, 'cluster', 'keyslot', key));
  const nodes = clusterNodes(seed);
  const master = nodes.find((node) => node.roles.includes('master') && node.slots.some(([from, to]) => slot >= from && slot <= to));
  if (!master) throw new Error(`no master serves slot ${slot}`);
  const replica = nodes.find((node) => node.roles.includes('slave') && node.masterId === master.id);
  if (!replica) throw new Error(`the master of slot ${slot} has no replica`);
  return { master: master.port, replica: replica.port };
}

const nodeOf = (port: number) => cluster.nodes.find((node) => node.port === port) as (typeof cluster.nodes)[number];

async function open(): Promise<{ store: RedisStore; keys: KeySpace }> {
  const keyPrefix = `tbdurc${randomBytes(3).toString('hex')}:`;
  const store = await RedisStore.connect({ type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix, durability: 'replicated', waitReplicas: 1, waitTimeout: 400 } }, { logger: createLogger('error') });
  t.teardown(() => store.close());
  return { store, keys: new KeySpace(keyPrefix) };
}

async function openCharge(store: RedisStore): Promise<{ handleHash: string; nonce: string }> {
  const handleHash = `h${randomBytes(6).toString('hex')}`;
  await store.createHandle({ handleHash, fingerprint: 'tb_s_durc..lu5t', principal: null, ttlMs: HOUR });
  const nonce = `n${randomBytes(6).toString('hex')}`;
  await store.beginCharge({ handleHash, sku: SKU, nonce, snapshot: SNAPSHOT, now: Date.now(), ttlMs: 30 * 60_000, firstPollDelayMs: 3_000 });
  return { handleHash, nonce };
}

/** A provider ref whose key lives on another master than the handle's (so its WAIT is a separate one). */
function refElsewhere(keys: KeySpace, handleHash: string): string {
  const handleMaster = placement(keys.handle(handleHash).handle).master;
  for (;;) {
    const ref = `ref-${randomBytes(6).toString('hex')}`;
    if (placement(keys.providerRef(ref)).master !== handleMaster) return ref;
  }
}

t.test('a link is shown only when its provider-ref key, on another master, is on a replica too', async (t) => {
  const { store, keys } = await open();
  const { handleHash, nonce } = await openCharge(store);
  const providerRef = refElsewhere(keys, handleHash);
  const refReplica = nodeOf(placement(keys.providerRef(providerRef)).replica);
  t.not(placement(keys.handle(handleHash).handle).replica, refReplica.port, 'the handle\'s replica keeps answering');
  refReplica.kill('SIGSTOP');
  try {
    await t.rejects(store.attachLink(handleHash, nonce, { providerRef, checkoutUrl: 'https://pay.test/c1' }), { code: 'TB_ERR_STORE_UNAVAILABLE', message: /so its link is not shown/ });
  } finally {
    refReplica.kill('SIGCONT');
  }
  t.match(await store.getCharge(handleHash, nonce), { status: 'abandoned' }, 'abandoned: never shown, still polled, so a payment on it is still granted');
  t.same(store.unreplicatedWrites(), { charge: 1 });
});

t.test('with every replica answering the same charge opens, and a webhook finds it by its ref', async (t) => {
  const { store, keys } = await open();
  const { handleHash, nonce } = await openCharge(store);
  const providerRef = refElsewhere(keys, handleHash);
  t.match(await store.attachLink(handleHash, nonce, { providerRef, checkoutUrl: 'https://pay.test/c2' }), { status: 'pending', providerRef });
  t.match(await store.findChargeByRef(providerRef), { nonce, handleHash });
  t.same(store.unreplicatedWrites(), {});
});

t.test('a charge whose provider-ref key could not be written never becomes pending (its link cannot be shown later)', async (t) => {
  const { store, keys } = await open();
  const { handleHash, nonce } = await openCharge(store);
  const providerRef = refElsewhere(keys, handleHash);
  const refMaster = nodeOf(placement(keys.providerRef(providerRef)).master);
  // Hung for about the store's 1 s call budget: well inside the 2 s node timeout, so no failover starts.
  refMaster.kill('SIGSTOP');
  try {
    await t.rejects(store.attachLink(handleHash, nonce, { providerRef, checkoutUrl: 'https://pay.test/c3' }), { code: 'TB_ERR_STORE_UNAVAILABLE' });
    const charge = await store.getCharge(handleHash, nonce);
    t.not(charge?.status, 'pending', 'not pending: no later call finds this link to show');
    t.notOk(charge?.checkoutUrl, 'no link on the record');
  } finally {
    refMaster.kill('SIGCONT');
  }
  await cluster.waitHealthy();
});
