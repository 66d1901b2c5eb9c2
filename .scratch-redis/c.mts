import { RedisStore } from '../src/store/redis.ts';
import { createLogger } from '../src/observability/logger.ts';
const logger = createLogger('info');
for (const cfg of [{ cluster: ['redis://127.0.0.1:1', 'redis://127.0.0.1:2'] }, { url: 'redis://10.255.255.1:6379' }]) {
  const t0 = Date.now();
  try { await RedisStore.connect({ type: 'redis', redis: { ...cfg, keyPrefix: 'x:' } } as any, { logger }); console.log('connected?!'); }
  catch (e) { console.log(Date.now() - t0, (e as any).code, (e as Error).message); }
}
