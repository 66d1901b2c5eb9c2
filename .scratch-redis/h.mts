import { startRedis, startRedisCluster, cli } from '../test/helpers/redis-server.ts';
import { Redis, Cluster } from 'ioredis';
const t0 = Date.now();
const r = await startRedis({ persist: true });
console.log('standalone', r.url, Date.now() - t0);
const c = await startRedisCluster();
console.log('cluster', c.seeds, Date.now() - t0);
const cl = new Cluster(c.seeds.map(s => { const u = new URL(s); return { host: u.hostname, port: Number(u.port) }; }), { enableOfflineQueue: false, lazyConnect: true, redisOptions: { commandTimeout: 500, maxRetriesPerRequest: 1 } });
await cl.connect();
await cl.set('a{x}', 1); console.log(await cl.get('a{x}'));
cl.disconnect();
// connect to a dead port
const dead = new Redis('redis://127.0.0.1:1', { lazyConnect: true, enableOfflineQueue: false, connectTimeout: 1000, maxRetriesPerRequest: 1, retryStrategy: (n) => Math.min(n * 100, 1000) });
dead.on('error', (e) => console.log('evt', e.message));
const t1 = Date.now();
try { await dead.connect(); } catch (e) { console.log('connect rejected', (e as Error).message, Date.now() - t1); }
dead.disconnect();
await r.stop(); await c.stop();
console.log('done', Date.now() - t0);
