// The caller's own price list (SPEC §23): a tools/list request may name its handle in
// `params._meta["xyz.tollbooth/handle"]` so the list shows its balance. The key is the gateway's: it is
// read here and removed from every request before it is forwarded, so a handle never reaches the upstream.
import { isObject, type JsonObject } from './jsonrpc.js';

export const CALLER_HANDLE_META_KEY = 'xyz.tollbooth/handle';

/** The handle a request names in params._meta (a string), else null. */
export function callerHandleOf(message: unknown): string | null {
  if (!isObject(message) || !isObject(message.params) || !isObject(message.params._meta)) return null;
  const handle = message.params._meta[CALLER_HANDLE_META_KEY];
  return typeof handle === 'string' ? handle : null;
}

/** The message, or every message of a batch, without the handle key in params._meta (the same value when none carries it). */
export function withoutCallerHandle(body: unknown): unknown {
  if (Array.isArray(body)) {
    const out = body.map(withoutKey);
    return out.some((message, index) => message !== body[index]) ? out : body;
  }
  return withoutKey(body);
}

function withoutKey(message: unknown): unknown {
  if (!isObject(message) || !isObject(message.params) || !isObject(message.params._meta) || !Object.hasOwn(message.params._meta, CALLER_HANDLE_META_KEY)) return message;
  const { [CALLER_HANDLE_META_KEY]: _handle, ...meta } = message.params._meta;
  const params: JsonObject = { ...message.params, _meta: meta };
  return { ...message, params };
}
