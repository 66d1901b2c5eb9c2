// What `tollbooth check` (and anything else that shows the effective config) may print: a copy with
// every secret replaced by "***". An empty secret stays empty, so the operator can still see that
// it is unset (e.g. webhooks off).
import type { GatewayConfig } from './schema.js';

export const MASK = '***';

export function maskSecrets(config: GatewayConfig): GatewayConfig {
  const copy = structuredClone(config) as GatewayConfig;
  const { moove } = copy.payments;
  moove.apiKey = maskValue(moove.apiKey);
  moove.webhookSecret = maskValue(moove.webhookSecret);
  copy.handles.hashSecret = maskValue(copy.handles.hashSecret);
  for (const name of Object.keys(copy.upstream.headers)) {
    copy.upstream.headers[name] = maskValue(copy.upstream.headers[name] ?? '');
  }
  copy.payments.x402.facilitatorUrl = maskUrlPassword(copy.payments.x402.facilitatorUrl);
  const { redis } = copy.store;
  if (redis) {
    if (redis.url !== undefined) redis.url = maskUrlPassword(redis.url);
    if (redis.cluster) redis.cluster = redis.cluster.map(maskUrlPassword);
  }
  return copy;
}

function maskValue(value: string): string {
  return value === '' ? '' : MASK;
}

/** `redis://user:secret@host:6379/0` → `redis://user:***@host:6379/0`; a URL without a password is unchanged. */
export function maskUrlPassword(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url.includes('@') ? MASK : url; // unparseable but may hold credentials: show nothing of it
  }
  if (parsed.password === '') return url;
  parsed.password = MASK;
  return parsed.href;
}
