// The one error table (SPEC §4, §5.2, §9). Every refusal the gateway answers carries a stable TB_ERR_*
// code; the table says exactly what goes on the wire for it: the HTTP status (on every route) and the
// JSON-RPC error code (on the MCP endpoint). Written by io/error-reply.ts, nowhere else. Every code
// in the table is raised somewhere (test/errors.test.ts walks it).

/** JSON-RPC error numbers, the only place they are spelled (the gateway, the bridge, the proxy). */
export const RPC = {
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  /** The MCP SDK server transports' generic "Bad Request"/server error. */
  SERVER_ERROR: -32000,
  /** No credentials, or credentials that do not verify (401); also the SDK's "Session not found" (404). */
  UNAUTHENTICATED: -32001,
  SESSION_NOT_FOUND: -32001,
  /** Authenticated but not allowed: a missing scope, a foreign Origin or Host (403). */
  FORBIDDEN: -32003,
  /** A modern request whose MCP-* headers do not repeat its body (SPEC §5.2). */
  HEADER_MISMATCH: -32020,
  UNSUPPORTED_PROTOCOL_VERSION: -32022,
  /** JSON-RPC "request cancelled" (the bridge's answer to a cancelled call). */
  REQUEST_CANCELLED: -32800,
} as const;

export interface ErrorWire {
  /** The HTTP status the gateway answers with. */
  readonly status: number;
  /** The JSON-RPC error code in the body on the MCP endpoint. */
  readonly rpc: number;
}

export const ERROR_TABLE = {
  // Configuration and the CLI (process exit, never a reply; the status is what a route would say).
  TB_ERR_CONFIG_INVALID: { status: 500, rpc: RPC.INTERNAL_ERROR },
  TB_ERR_CONFIG_UNREADABLE: { status: 500, rpc: RPC.INTERNAL_ERROR },
  // The request (SPEC §5.2).
  TB_ERR_PARSE: { status: 400, rpc: RPC.PARSE_ERROR },
  TB_ERR_INVALID_REQUEST: { status: 400, rpc: RPC.INVALID_REQUEST },
  /** -32602 goes with 200, an ordinary JSON-RPC error reply (docs/decisions.md). */
  TB_ERR_INVALID_PARAMS: { status: 200, rpc: RPC.INVALID_PARAMS },
  TB_ERR_HEADER_MISMATCH: { status: 400, rpc: RPC.HEADER_MISMATCH },
  /** SPEC §24: an Idempotency-Key header, `_meta` key or x402 payment-identifier that is not 1–255 printable ASCII characters. */
  TB_ERR_IDEMPOTENCY_KEY_INVALID: { status: 400, rpc: RPC.INVALID_PARAMS },
  /** The stdio bridge: a modern request for a protocol version it does not serve. */
  TB_ERR_UNSUPPORTED_PROTOCOL_VERSION: { status: 400, rpc: RPC.UNSUPPORTED_PROTOCOL_VERSION },
  TB_ERR_BODY_TOO_LARGE: { status: 413, rpc: RPC.INVALID_REQUEST },
  TB_ERR_UNSUPPORTED_MEDIA_TYPE: { status: 415, rpc: RPC.INVALID_REQUEST },
  TB_ERR_METHOD_NOT_ALLOWED: { status: 405, rpc: RPC.INVALID_REQUEST },
  TB_ERR_NOT_FOUND: { status: 404, rpc: RPC.METHOD_NOT_FOUND },
  /** The stdio bridge: a new session whose client does not accept both JSON and event streams. */
  TB_ERR_NOT_ACCEPTABLE: { status: 406, rpc: RPC.INVALID_REQUEST },
  // Who may ask (SPEC §5.2 guards, §9 OAuth, §20 sessions, dev checkout).
  TB_ERR_ORIGIN_FORBIDDEN: { status: 403, rpc: RPC.FORBIDDEN },
  TB_ERR_HOST_FORBIDDEN: { status: 403, rpc: RPC.FORBIDDEN },
  TB_ERR_UNAUTHENTICATED: { status: 401, rpc: RPC.UNAUTHENTICATED },
  TB_ERR_INSUFFICIENT_SCOPE: { status: 403, rpc: RPC.FORBIDDEN },
  /** SPEC §20: a legacy session that is not the caller's (or not known to be anyone's) is, to that caller, not there. */
  TB_ERR_SESSION_NOT_FOUND: { status: 404, rpc: RPC.SESSION_NOT_FOUND },
  // The upstream (SPEC §5.2, §16): 502/503/504, never 500.
  TB_ERR_UPSTREAM_UNAVAILABLE: { status: 502, rpc: RPC.INTERNAL_ERROR },
  TB_ERR_UPSTREAM_REFUSED: { status: 503, rpc: RPC.INTERNAL_ERROR },
  TB_ERR_UPSTREAM_TIMEOUT: { status: 504, rpc: RPC.INTERNAL_ERROR },
  TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE: { status: 502, rpc: RPC.INTERNAL_ERROR },
  TB_ERR_UPSTREAM_BAD_RESPONSE: { status: 502, rpc: RPC.INTERNAL_ERROR },
  // The gateway's own parts.
  TB_ERR_STORE_UNAVAILABLE: { status: 503, rpc: RPC.INTERNAL_ERROR },
  TB_ERR_STORE_TTL_FLOOR: { status: 500, rpc: RPC.INTERNAL_ERROR },
  TB_ERR_PROVIDER: { status: 502, rpc: RPC.INTERNAL_ERROR },
  TB_ERR_FACILITATOR: { status: 502, rpc: RPC.INTERNAL_ERROR },
  /** The stdio bridge cannot take the request now: it is shutting down, or its child is not reading its input. */
  TB_ERR_BRIDGE_UNAVAILABLE: { status: 503, rpc: RPC.SERVER_ERROR },
  // Payment routes (SPEC §4, §20).
  TB_ERR_WEBHOOK_SIGNATURE: { status: 401, rpc: RPC.INVALID_REQUEST },
  TB_ERR_WEBHOOKS_OFF: { status: 503, rpc: RPC.INVALID_REQUEST },
  TB_ERR_CHECKOUT_CLOSED: { status: 409, rpc: RPC.INVALID_REQUEST },
  /** The gateway itself never answers 500 (SPEC §5.2): an unexpected failure is 503. */
  TB_ERR_INTERNAL: { status: 503, rpc: RPC.INTERNAL_ERROR },
} as const satisfies Record<string, ErrorWire>;

export type ErrorCode = keyof typeof ERROR_TABLE;

export const ERROR_CODES = Object.keys(ERROR_TABLE) as ErrorCode[];

export interface GatewayErrorOptions {
  cause?: unknown;
  /** Headers the reply carries with this error (WWW-Authenticate, Allow). */
  headers?: Record<string, string>;
}

export class GatewayError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly rpcCode: number;
  readonly headers: Readonly<Record<string, string>>;

  constructor(code: ErrorCode, message: string, options: GatewayErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'GatewayError';
    this.code = code;
    this.status = ERROR_TABLE[code].status;
    this.rpcCode = ERROR_TABLE[code].rpc;
    this.headers = options.headers ?? {};
  }

  /** What may be shown to a client: the code and message, never the cause. */
  toJSON(): { code: ErrorCode; message: string } {
    return { code: this.code, message: this.message };
  }
}

export const isGatewayError = (value: unknown): value is GatewayError => value instanceof GatewayError;
