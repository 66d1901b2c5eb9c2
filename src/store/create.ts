// Builds the configured store. An unknown type or an unreachable Redis at start is an error the
// operator sees; the gateway never silently falls back to memory (SPEC §8).
import type { Clock } from '../clock.js';
import type { GatewayConfig } from '../config/schema.js';
import type { Logger } from '../observability/logger.js';
import type { Store } from './store.js';
import { MemoryStore } from './memory.js';

/** `clock`: the gateway's; the store's handle and charge times follow its wall time (Redis TIME stays inside the scripts that read it). */
export async function createStore(config: GatewayConfig, deps: { logger: Logger; clock?: Clock }): Promise<Store> {
  const ledgerRetentionMs = config.ledger.retention;
  const now = deps.clock?.now;
  if (config.store.type === 'memory') return new MemoryStore({ ledgerRetentionMs, now });
  const { RedisStore } = await import('./redis.js');
  return RedisStore.connect(config.store, { logger: deps.logger, now, ledgerRetentionMs, monotonic: deps.clock?.monotonic });
}
