// A child the bridge initialises itself (the shared child, a 2026-07-28 child, the readiness probe): spawn,
// send initialize with the capabilities given, wait for the answer, send notifications/initialized. A
// per-client child never goes through here: it receives its client's own initialize.
import { isResponseLike, type JsonObject } from '../mcp/jsonrpc.js';
import { StdioChild, describeExit, type ChildExit, type ChildOptions } from './child.js';
import { BRIDGE_CLIENT_INFO, CHILD_PROTOCOL_VERSION, parseInitializeResult, type ChildIdentity } from './protocol.js';

export interface HandshakeParams {
  capabilities: JsonObject;
  clientInfo?: JsonObject;
  timeoutMs: number;
}

export interface InitialisedChild {
  child: StdioChild;
  identity: ChildIdentity;
}

export interface InitialisedChildHandlers {
  /** A message after the handshake began that is not the answer to it. */
  onMessage(message: unknown, bytes: number): void;
  /** The child is gone (also called when it dies during the handshake, after the promise rejected). */
  onExit(exit: ChildExit): void;
}

let launches = 0;

/** Spawns and initialises a child; rejects (after killing it) when it cannot be spawned or does not initialise in time. */
export async function startInitialisedChild(options: ChildOptions, params: HandshakeParams, handlers: InitialisedChildHandlers): Promise<InitialisedChild> {
  // A string id: every request the bridge forwards later has a number id (or the client's own), so they never meet.
  const id = `tollbooth-bridge-init-${++launches}`;
  let settle!: (outcome: { result: unknown } | { error: string }) => void;
  const answered = new Promise<{ result: unknown } | { error: string }>((resolve) => (settle = resolve));
  let waiting = true;
  const child = StdioChild.spawn(options, {
    onMessage: (message, bytes) => {
      if (waiting && isResponseLike(message) && message.id === id) {
        waiting = false;
        settle(message.error ? { error: `the stdio server refused initialize: ${message.error.message}` } : { result: message.result });
      } else handlers.onMessage(message, bytes);
    },
    onExit: (exit) => {
      if (waiting) {
        waiting = false;
        settle({ error: `${describeExit(exit, options.maxLineBytes)} during initialize` });
      }
      handlers.onExit(exit);
    },
  });
  const timer = setTimeout(() => {
    if (!waiting) return;
    waiting = false;
    settle({ error: `the stdio server did not answer initialize within ${params.timeoutMs} ms` });
  }, params.timeoutMs);
  child.write({
    jsonrpc: '2.0',
    id,
    method: 'initialize',
    params: { protocolVersion: CHILD_PROTOCOL_VERSION, capabilities: params.capabilities, clientInfo: params.clientInfo ?? BRIDGE_CLIENT_INFO },
  });
  const outcome = await answered;
  clearTimeout(timer);
  const identity = 'result' in outcome ? parseInitializeResult(outcome.result) : undefined;
  if (identity === undefined) {
    void child.kill();
    throw new Error('error' in outcome ? outcome.error : 'the stdio server answered initialize with something else than an initialize result');
  }
  child.write({ jsonrpc: '2.0', method: 'notifications/initialized' });
  return { child, identity };
}
