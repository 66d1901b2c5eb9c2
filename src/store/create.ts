// Builds the configured store. An unknown type or an unreachable Redis at start is an error the
// operator sees; the gateway never silently falls back to memory (SPEC §8).
import type { GatewayConfig } from '../config/schema.js';
import type { Logger } from '../observability/logger.js';
import type { Store } from './store.js';
import { MemoryStore } from './memory.js';

export async function createStore(config: GatewayConfig, deps: { logger: Logger }): Promise<Store> {
  const ledgerRetentionMs = config.ledger.retention;
  if (config.store.type === 'memory') return new MemoryStore({ ledgerRetentionMs });
  const { RedisStore } = await import('./redis.js');
  return RedisStore.connect(config.store, { ...deps, ledgerRetentionMs });
}
