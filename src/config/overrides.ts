// Command-line overrides of the config file (`tollbooth start --port N`): trying the gateway on another
// port without copying the config. Applied to the file's config at start and to every reload of it, so a
// SIGHUP does not see the flag's port as a change of server.port.
import type { GatewayConfig } from './schema.js';

export interface StartOverrides {
  port?: number;
}

/** The config with the overrides applied; a public URL (and audience) derived from the old port follows the new one. */
export function applyOverrides(config: GatewayConfig, overrides: StartOverrides): GatewayConfig {
  if (overrides.port === undefined || overrides.port === config.server.port) return config;
  const { host, port, mcpPath } = config.server;
  const derived = `http://${host}:${port}${mcpPath}`;
  const publicUrl = config.server.publicUrl === derived ? `http://${host}:${overrides.port}${mcpPath}` : config.server.publicUrl;
  const audience = config.auth.audience === config.server.publicUrl ? publicUrl : config.auth.audience;
  return { ...config, server: { ...config.server, port: overrides.port, publicUrl }, auth: { ...config.auth, audience } };
}

/** A TCP port from a flag: an integer 0–65535 (0 = any free port), else null. */
export function parsePort(text: string): number | null {
  if (!/^\d{1,5}$/.test(text)) return null;
  const port = Number(text);
  return port <= 65_535 ? port : null;
}
