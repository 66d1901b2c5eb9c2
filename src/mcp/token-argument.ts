// The token argument is the gateway's (SPEC §5.4, §20): it is removed from the top-level `arguments` of
// every tools/call before the call is forwarded — from a priced call once the paywall has read it
// (paywall/decide.ts), and from a call to any other tool here, so a handle never reaches the upstream
// whatever tool the model sends it to.
import type { ToolCall } from './classify.js';
import type { JsonObject, JsonRpcMessage } from './jsonrpc.js';

/** True when the call carries the token argument at the top level of its arguments. */
export function carriesTokenArgument(call: ToolCall, argumentName: string): boolean {
  return Object.hasOwn(call.args, argumentName);
}

/** The call's request without the token argument (the same object when it carries none). */
export function withoutTokenArgument(call: ToolCall, argumentName: string): JsonRpcMessage {
  if (!carriesTokenArgument(call, argumentName)) return call.request;
  const { [argumentName]: _token, ...args } = call.args;
  return { ...call.request, params: { ...(call.request.params as JsonObject), arguments: args } };
}
