// Which OAuth scopes a request needs (SPEC §9, §20): the resource server asks
// `scopeRequirements(auth).needed(tools)` for every request, single or batch. What a scope may be
// (`SCOPE_TOKEN`) is the config schema's, which validates every scope string against it.
import type { GatewayConfig } from '../config/schema.js';

export interface ScopeRequirements {
  /**
   * requiredScopes ∪ toolScopes[tool] for every tool the request calls, each scope once, in config
   * order. A 403 names this whole set: a client that re-requests only what one tool lacked would be
   * refused again for the next tool of the same batch, for ever.
   */
  needed(tools: readonly string[]): string[];
}

export function scopeRequirements(auth: Pick<GatewayConfig['auth'], 'requiredScopes' | 'toolScopes'>): ScopeRequirements {
  const base = [...new Set(auth.requiredScopes)];
  // A Map, not the config object: a tool named "constructor" or "__proto__" must find nothing.
  const perTool = new Map<string, readonly string[]>(Object.entries(auth.toolScopes));
  return {
    needed(tools) {
      if (!tools.some((tool) => perTool.has(tool))) return base;
      const scopes = new Set(base);
      for (const tool of tools) for (const scope of perTool.get(tool) ?? []) scopes.add(scope);
      return [...scopes];
    },
  };
}
