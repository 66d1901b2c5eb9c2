// The MCP endpoints one config describes (SPEC §18): the top-level one (`server.mcpPath` + `upstream` +
// `tools` + `auth.toolScopes`, named `default`) and one per `servers` entry. Pure: each endpoint's
// public URL (its OAuth audience and PRM `resource`), upstream, priced tools and scopes.
import type { GatewayConfig, ToolPrice, UpstreamConfig } from '../config/schema.js';

export const DEFAULT_ENDPOINT = 'default';

export interface EndpointConfig {
  /** `default`, or the `servers` key: the `server` metric label and log field. */
  name: string;
  path: string;
  /** The endpoint's canonical URI: `server.publicUrl` for the default one, else publicUrl's origin + path. */
  publicUrl: string;
  /** The `aud` its access tokens must carry (auth.audience applies to the default endpoint only). */
  audience: string;
  upstream: UpstreamConfig;
  tools: Record<string, ToolPrice>;
  toolScopes: Record<string, string[]>;
}

export function endpointsOf(config: GatewayConfig): EndpointConfig[] {
  const origin = new URL(config.server.publicUrl).origin;
  const endpoints: EndpointConfig[] = [
    {
      name: DEFAULT_ENDPOINT,
      path: config.server.mcpPath,
      publicUrl: config.server.publicUrl,
      audience: config.auth.audience ?? config.server.publicUrl,
      upstream: config.upstream,
      tools: config.tools,
      toolScopes: config.auth.toolScopes,
    },
  ];
  for (const [name, entry] of Object.entries(config.servers)) {
    const publicUrl = origin + entry.path;
    endpoints.push({ name, path: entry.path, publicUrl, audience: publicUrl, upstream: entry.upstream, tools: entry.tools, toolScopes: entry.toolScopes });
  }
  return endpoints;
}

/**
 * What identifies an upstream's running parts (an HTTP agent, or a stdio bridge and its children): two
 * configs with the same key can share them, so a reload keeps an unchanged upstream alive (SPEC §18).
 * Per endpoint: a stdio child belongs to one endpoint's sessions.
 */
export function upstreamKey(name: string, upstream: UpstreamConfig, bodyLimit: number): string {
  const running = upstream.command ? { command: upstream.command, stdio: upstream.stdio, inheritEnv: upstream.inheritEnv, env: upstream.env, maxResponseBytes: upstream.maxResponseBytes, bodyLimit } : { url: upstream.url };
  return JSON.stringify({ name, ...running });
}
