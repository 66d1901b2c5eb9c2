// notifications/cancelled to the upstream (SPEC §6.5): a priced call stopped at its deadline is also
// cancelled in the protocol, where the era has it — a legacy request in a session. A sessionless
// request has no session to name the request in: aborting its HTTP request is its cancellation (and
// the only one 2026-07-28 has). The gateway's own message, not forwarded traffic.
import { request } from 'undici';
import type { JsonRpcId } from '../mcp/jsonrpc.js';
import type { Logger } from '../observability/logger.js';
import { discard } from '../io/body.js';
import type { UpstreamTarget } from './upstream-target.js';

const CANCEL_TIMEOUT_MS = 2_000;

export interface CancelTarget {
  target: UpstreamTarget;
  upstreamHeaders: Readonly<Record<string, string>>;
  logger: Logger;
}

export function sendCancelled(to: CancelTarget, session: { sessionId: string; protocolVersion: string | undefined }, requestId: JsonRpcId, reason: string): void {
  const headers: Record<string, string> = { ...to.upstreamHeaders, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': session.sessionId };
  if (session.protocolVersion) headers['mcp-protocol-version'] = session.protocolVersion;
  request(to.target.url, {
    method: 'POST',
    dispatcher: to.target.dispatcher,
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId, reason } }),
    signal: AbortSignal.timeout(CANCEL_TIMEOUT_MS),
  }).then(
    (response) => discard(response.body),
    (error: unknown) => to.logger.debug({ evt: 'cancel_failed', err: (error as Error).message }, 'notifications/cancelled did not reach the upstream'),
  );
}
