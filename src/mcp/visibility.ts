// Tool visibility (SPEC §18): which tools a caller sees in tools/list, and which tools nobody may call.
// - `tools.<name>.hidden: true` removes a tool from every tools/list and makes it uncallable: the gateway
//   answers a call as an MCP server answers an unknown tool (-32602 "Unknown tool: <name>") and forwards
//   nothing. A hidden priced tool is the same (its price is kept for when it is shown again).
// - auth.mode oauth with `auth.hideUnauthorisedTools` (default true): a tool whose `toolScopes` the
//   caller's token lacks is left out of that caller's tools/list. Hiding is not the refusal: a call to
//   such a tool still gets the 403 insufficient_scope of SPEC §9 (naming the scopes to ask for), so a
//   client can step up its token; only `hidden` tools pretend not to exist.
// Pure: no I/O. One `ToolVisibility` per endpoint config, one `ToolView` per request (null when the
// caller sees every tool, which is the whole cost of the feature when it is not configured).
import type { GatewayConfig } from '../config/schema.js';

/** True when the caller may see the tool in tools/list. */
export type ToolView = (tool: string) => boolean;

export interface ToolVisibility {
  /** The tool is hidden from everyone: calls get "Unknown tool", never the upstream. */
  isHidden(tool: string): boolean;
  /**
   * What one caller sees. `scopes` are its token's scopes (auth.mode oauth), or null without auth.
   * null when the caller sees every tool (nothing hidden and nothing it lacks scopes for).
   */
  viewFor(scopes: ReadonlySet<string> | null): ToolView | null;
}

export type VisibilitySettings = Pick<GatewayConfig, 'tools'> & { auth: Pick<GatewayConfig['auth'], 'mode' | 'toolScopes' | 'hideUnauthorisedTools'> };

export function visibilityFromConfig(config: VisibilitySettings): ToolVisibility {
  // Maps and Sets, not the config objects: a tool named "constructor" or "__proto__" must find nothing.
  const hidden = new Set(Object.entries(config.tools).filter(([, tool]) => tool.hidden).map(([name]) => name));
  const scoped = config.auth.mode === 'oauth' && config.auth.hideUnauthorisedTools ? new Map<string, readonly string[]>(Object.entries(config.auth.toolScopes).filter(([, scopes]) => scopes.length > 0)) : new Map<string, readonly string[]>();
  const hideAll: ToolView | null = hidden.size === 0 ? null : (tool) => !hidden.has(tool);
  // The resource server hands out one scope set per cached token: its view is built once.
  const views = new WeakMap<ReadonlySet<string>, ToolView | null>();
  const build = (scopes: ReadonlySet<string>): ToolView | null => {
    const lacking = new Set<string>();
    for (const [tool, needed] of scoped) if (!needed.every((scope) => scopes.has(scope))) lacking.add(tool);
    if (lacking.size === 0) return hideAll;
    return (tool) => !hidden.has(tool) && !lacking.has(tool);
  };
  return {
    isHidden: (tool) => hidden.has(tool),
    viewFor(scopes) {
      if (scopes === null || scoped.size === 0) return hideAll;
      let view = views.get(scopes);
      if (view === undefined) {
        view = build(scopes);
        views.set(scopes, view);
      }
      return view;
    },
  };
}

/** The JSON-RPC error an MCP server gives for a tool it does not have (the MCP spec's own example). */
export function unknownToolMessage(tool: string): string {
  return `Unknown tool: ${tool}`;
}
