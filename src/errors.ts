// The one error table. Every error the gateway raises carries a stable TB_ERR_* code, the HTTP status
// it maps to on the gateway's own endpoints, and (on the MCP endpoint) the JSON-RPC error code.
// Wire errors (JSON-RPC numbers) stay here, apart from the internal string codes callers switch on.

export const ERROR_TABLE = {
  TB_ERR_CONFIG_INVALID: { http: 500, rpc: -32603 },
  TB_ERR_CONFIG_UNREADABLE: { http: 500, rpc: -32603 },
  TB_ERR_PARSE: { http: 400, rpc: -32700 },
  TB_ERR_INVALID_REQUEST: { http: 400, rpc: -32600 },
  TB_ERR_INVALID_PARAMS: { http: 400, rpc: -32602 },
  TB_ERR_HEADER_MISMATCH: { http: 400, rpc: -32020 },
  TB_ERR_BODY_TOO_LARGE: { http: 413, rpc: -32600 },
  TB_ERR_UNSUPPORTED_MEDIA_TYPE: { http: 415, rpc: -32600 },
  TB_ERR_ORIGIN_FORBIDDEN: { http: 403, rpc: -32600 },
  TB_ERR_HOST_FORBIDDEN: { http: 403, rpc: -32600 },
  TB_ERR_METHOD_NOT_ALLOWED: { http: 405, rpc: -32600 },
  TB_ERR_UNAUTHENTICATED: { http: 401, rpc: -32001 },
  TB_ERR_INSUFFICIENT_SCOPE: { http: 403, rpc: -32001 },
  TB_ERR_UPSTREAM_UNAVAILABLE: { http: 502, rpc: -32603 },
  TB_ERR_UPSTREAM_REFUSED: { http: 503, rpc: -32603 },
  TB_ERR_UPSTREAM_TIMEOUT: { http: 504, rpc: -32603 },
  TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE: { http: 502, rpc: -32603 },
  TB_ERR_UPSTREAM_BAD_RESPONSE: { http: 502, rpc: -32603 },
  TB_ERR_STORE_UNAVAILABLE: { http: 503, rpc: -32603 },
  TB_ERR_STORE_TTL_FLOOR: { http: 500, rpc: -32603 },
  TB_ERR_PROVIDER: { http: 502, rpc: -32603 },
  TB_ERR_FACILITATOR: { http: 502, rpc: -32603 },
  TB_ERR_NOT_FOUND: { http: 404, rpc: -32601 },
  /** SPEC §20: a legacy session that is not the caller's (or not known to be anyone's) is, to that caller, not there. */
  TB_ERR_SESSION_NOT_FOUND: { http: 404, rpc: -32001 },
  TB_ERR_WEBHOOK_SIGNATURE: { http: 401, rpc: -32600 },
  TB_ERR_WEBHOOKS_OFF: { http: 503, rpc: -32600 },
  TB_ERR_INTERNAL: { http: 500, rpc: -32603 },
} as const satisfies Record<string, { http: number; rpc: number }>;

export type ErrorCode = keyof typeof ERROR_TABLE;

export class GatewayError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly rpcCode: number;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'GatewayError';
    this.code = code;
    this.status = ERROR_TABLE[code].http;
    this.rpcCode = ERROR_TABLE[code].rpc;
  }

  /** What may be shown to a client: the code and message, never the cause. */
  toJSON(): { code: ErrorCode; message: string } {
    return { code: this.code, message: this.message };
  }
}

export const isGatewayError = (value: unknown): value is GatewayError => value instanceof GatewayError;
