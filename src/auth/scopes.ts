// Which OAuth scopes a request needs (SPEC §9, §20), and what a scope may be. One place for both:
// the config schema validates scope strings against `SCOPE_TOKEN`, the resource server asks
// `scopeRequirements(auth).needed(tools)` for every request, single or batch.
import type { GatewayConfig } from '../config/schema.js';

// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ) — printable ASCII without space, `"` or `\`.
export const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/;

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
