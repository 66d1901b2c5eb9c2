// Errors of the research server (the reference upstream, SPEC §13). It is a separate program from
// the gateway, so its codes live here rather than in src/errors.ts. Every code ends up as a tool
// result with `isError: true` and the message as its only text: messages are one sentence a model
// (or its user) can act on.

export const RESEARCH_ERROR_CODES = [
  'RS_ERR_INVALID_URL', // not a URL, or a URL with no host
  'RS_ERR_SCHEME', // anything but http/https
  'RS_ERR_PORT', // a port outside the allowed set
  'RS_ERR_LOCAL_NAME', // localhost, *.localhost, *.local, *.internal (refused without DNS)
  'RS_ERR_ADDRESS', // the host is, or resolves to, an address that is not public unicast
  'RS_ERR_DNS', // the name could not be resolved
  'RS_ERR_TOO_MANY_REDIRECTS',
  'RS_ERR_BODY_TOO_LARGE', // declared or streamed body over the cap
  'RS_ERR_TIMEOUT',
  'RS_ERR_FETCH_FAILED', // connection refused/reset, TLS failure, …
  'RS_ERR_HTTP_STATUS', // the page answered 4xx/5xx
  'RS_ERR_CONTENT_TYPE', // not something the tool can read
  'RS_ERR_INVALID_INPUT',
] as const;

export type ResearchErrorCode = (typeof RESEARCH_ERROR_CODES)[number];

export class ResearchError extends Error {
  readonly code: ResearchErrorCode;

  constructor(code: ResearchErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ResearchError';
    this.code = code;
  }
}

export const isResearchError = (value: unknown): value is ResearchError => value instanceof ResearchError;
