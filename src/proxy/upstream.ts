// What the gateway needs from an upstream MCP server, whatever carries it: an HTTP server reached with
// undici (upstream-http.ts) or a stdio child the gateway spawned and serves itself (upstream-stdio.ts).
// Both answer like a Streamable HTTP endpoint would: status, headers, and a body stream (JSON or SSE).
import type { Readable } from 'node:stream';

export interface UpstreamRequest {
  method: 'GET' | 'POST' | 'DELETE';
  /** Path and query of the client's request, e.g. "/mcp?x=1" (the HTTP upstream maps it onto its own URL). */
  path: string;
  /** Lower-case header names; hop-by-hop, Authorization and Cookie already removed (proxy/headers.ts). */
  headers: Record<string, string>;
  /** The re-serialised parsed body (POST only). */
  body?: string;
  /** Aborted when the client goes away or a deadline passes. */
  signal: AbortSignal;
}

export interface UpstreamResponse {
  status: number;
  /** Lower-case header names. */
  headers: Record<string, string | string[]>;
  body: Readable;
}

export interface Upstream {
  readonly kind: 'http' | 'stdio';
  /** Rejects with GatewayError TB_ERR_UPSTREAM_UNAVAILABLE (cause attached) when nothing answered. */
  send(request: UpstreamRequest): Promise<UpstreamResponse>;
  /** §4 readyz: an HTTP answer of any status within 1 s, or a live initialised stdio child. */
  probe(): Promise<{ ok: boolean; detail: string }>;
  close(): Promise<void>;
}
