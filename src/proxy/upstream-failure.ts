// Upstream failures, told apart (SPEC §16): every way a forwarded request can fail becomes one bounded
// outcome (the `outcome` label of tollbooth_upstream_duration_seconds and the log's `outcome`) and one
// typed GatewayError (the JSON-RPC error a free call gets, with 502/503/504; never 500). The original
// error stays attached as `cause`; nothing of it reaches a client.
import { GatewayError, type ErrorCode } from '../errors.js';
import { SseEventTooLargeError } from '../mcp/sse.js';

export type FailureOutcome =
  | 'name_resolution'
  | 'connect_refused'
  | 'connect_timeout'
  | 'reset'
  | 'headers_timeout'
  | 'body_too_large'
  | 'bad_response'
  /** a priced call's callDeadline passed */
  | 'deadline'
  /** a free call's client went away first */
  | 'client_gone';

/** Every value of the metric's outcome label: an HTTP answer, or one of the failures. */
export type UpstreamOutcome = 'answered' | 'http_4xx' | 'http_5xx' | FailureOutcome;

export interface UpstreamFailure {
  outcome: FailureOutcome;
  error: GatewayError;
}

const FAILURES: Record<FailureOutcome, { code: ErrorCode; message: string }> = {
  name_resolution: { code: 'TB_ERR_UPSTREAM_UNAVAILABLE', message: "the upstream MCP server's host name could not be resolved" },
  connect_refused: { code: 'TB_ERR_UPSTREAM_REFUSED', message: 'the upstream MCP server refused the connection' },
  connect_timeout: { code: 'TB_ERR_UPSTREAM_TIMEOUT', message: 'the upstream MCP server did not accept the connection in time' },
  reset: { code: 'TB_ERR_UPSTREAM_UNAVAILABLE', message: 'the upstream MCP server closed the connection' },
  headers_timeout: { code: 'TB_ERR_UPSTREAM_TIMEOUT', message: 'the upstream MCP server did not answer in time' },
  body_too_large: { code: 'TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE', message: 'the upstream reply exceeded upstream.maxResponseBytes' },
  bad_response: { code: 'TB_ERR_UPSTREAM_BAD_RESPONSE', message: 'the upstream reply could not be read as MCP' },
  deadline: { code: 'TB_ERR_UPSTREAM_TIMEOUT', message: 'the call did not finish within upstream.callDeadline' },
  client_gone: { code: 'TB_ERR_UPSTREAM_UNAVAILABLE', message: 'the client went away' },
};

export function upstreamFailure(outcome: FailureOutcome, cause?: unknown, message?: string): UpstreamFailure {
  const entry = FAILURES[outcome];
  return { outcome, error: new GatewayError(entry.code, message ?? entry.message, cause === undefined ? undefined : { cause }) };
}

/** Reasons the gateway itself aborts an upstream request with (see call-state.ts). */
export class UpstreamAbort extends Error {
  constructor(readonly outcome: 'deadline' | 'client_gone' | 'bad_response') {
    super(`the gateway aborted the upstream request (${outcome})`);
    this.name = 'UpstreamAbort';
  }
}

/** What went wrong, from an error undici, node or the reply reader raised (reply-from's wrapper unwrapped). */
export function classifyUpstreamError(error: unknown): UpstreamFailure {
  const original = unwrap(error);
  if (original instanceof UpstreamAbort) return upstreamFailure(original.outcome, original);
  if (original instanceof GatewayError) {
    const outcome: FailureOutcome = original.code === 'TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE' ? 'body_too_large' : original.code === 'TB_ERR_UPSTREAM_TIMEOUT' ? 'headers_timeout' : 'bad_response';
    return { outcome, error: original };
  }
  if (original instanceof SseEventTooLargeError) return upstreamFailure('body_too_large', original);
  return upstreamFailure(outcomeOfCode(codeOf(original)), original);
}

function outcomeOfCode(code: string | undefined): FailureOutcome {
  switch (code) {
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_NONAME':
    case 'EAI_FAIL':
    case 'EAI_NODATA':
      return 'name_resolution';
    case 'ECONNREFUSED':
      return 'connect_refused';
    case 'UND_ERR_CONNECT_TIMEOUT':
    case 'ETIMEDOUT':
      return 'connect_timeout';
    case 'UND_ERR_HEADERS_TIMEOUT':
      return 'headers_timeout';
    case 'UND_ERR_RESPONSE_EXCEEDED_MAX_SIZE':
      return 'body_too_large';
    case 'UND_ERR_INVALID_ARG':
    case 'HPE_INVALID_CONSTANT':
    case 'HPE_INVALID_HEADER_TOKEN':
    case 'HPE_INVALID_STATUS':
    case 'HPE_INVALID_CHUNK_SIZE':
      return 'bad_response';
    default:
      // ECONNRESET, EPIPE, UND_ERR_SOCKET ("other side closed"), UND_ERR_CLOSED, a body cut short
      // (UND_ERR_RES_CONTENT_LENGTH_MISMATCH), and anything else at the transport: the connection failed.
      return 'reset';
  }
}

/** reply-from wraps undici's error (original as `cause`); a connect to several addresses fails as an AggregateError. */
function unwrap(error: unknown): unknown {
  let current = error;
  for (let depth = 0; depth < 4; depth++) {
    if (current instanceof UpstreamAbort || current instanceof GatewayError || current instanceof SseEventTooLargeError) return current;
    const cause = (current as { cause?: unknown } | null)?.cause;
    if (cause === undefined || cause === null) break;
    if (codeOf(current) !== undefined && !String(codeOf(current)).startsWith('FST_')) break;
    current = cause;
  }
  return current;
}

function codeOf(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') return code;
  const first = (error as { errors?: unknown[] }).errors?.[0];
  return typeof (first as { code?: unknown } | undefined)?.code === 'string' ? ((first as { code: string }).code) : undefined;
}
