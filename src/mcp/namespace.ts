// The gateway's namespace (SPEC §20): `_meta` keys under `xyz.tollbooth/` are the gateway's alone. What
// "under _meta" covers: every key of every object that is the value of a `_meta` key, at any depth of a
// message (params._meta of requests and notifications, result._meta, a tool's _meta in a listing, a
// content item's _meta, error.data._meta, a _meta inside another _meta…). Keys elsewhere are the
// upstream's content and stay.
//
// Removing them must not cost the free path a JSON parse per reply, so a text screen comes first: a
// message whose text can spell no such key is never parsed. A key is written either with the letters
// of `xyz.tollbooth` as they are (JSON's `\/` can only replace the slash that follows them), or with at
// least one of those characters as a `\u00XX` escape, which the client decodes to the real key.
import { isObject } from './jsonrpc.js';

export const GATEWAY_META_PREFIX = 'xyz.tollbooth/';

const LITERAL = 'xyz.tollbooth';
const ESCAPE = '\\u00';
const LITERAL_BYTES = Buffer.from(LITERAL);
const ESCAPE_BYTES = Buffer.from(ESCAPE);

/**
 * False only when the JSON text cannot hold a key under the gateway's namespace: it contains neither
 * `xyz.tollbooth` nor a `\u00XX` escape of one of the characters of `xyz.tollbooth/`.
 */
export function mayHoldGatewayMeta(text: string): boolean {
  if (text.includes(LITERAL)) return true;
  for (let at = text.indexOf(ESCAPE); at !== -1; at = text.indexOf(ESCAPE, at + 4)) {
    if (escapesNamespaceChar(text.charCodeAt(at + 4), text.charCodeAt(at + 5))) return true;
  }
  return false;
}

/** mayHoldGatewayMeta on raw UTF-8 bytes (a held JSON body), without decoding them. */
export function mayHoldGatewayMetaBytes(body: Buffer): boolean {
  if (body.includes(LITERAL_BYTES)) return true;
  for (let at = body.indexOf(ESCAPE_BYTES); at !== -1; at = body.indexOf(ESCAPE_BYTES, at + 4)) {
    if (escapesNamespaceChar(body[at + 4] ?? 0, body[at + 5] ?? 0)) return true;
  }
  return false;
}

/**
 * The characters of `xyz.tollbooth/` by the two hex digits after `\u00`, either case: x 78, y 79, z 7a,
 * . 2e, t 74, o 6f, l 6c, b 62, h 68, / 2f.
 */
function escapesNamespaceChar(high: number, low: number): boolean {
  const l = low | 0x20; // lower-cases a hex letter, leaves digits as they are
  if (high === 0x37) return l === 0x34 || l === 0x38 || l === 0x39 || l === 0x61; // 74 78 79 7a
  if (high === 0x32) return l === 0x65 || l === 0x66; // 2e 2f
  if (high === 0x36) return l === 0x32 || l === 0x38 || l === 0x63 || l === 0x66; // 62 68 6c 6f
  return false;
}

/**
 * Removes, in place, every key under the gateway's namespace from every `_meta` object of a parsed
 * message (or batch), at any depth. Returns true when something was removed. Iterative: a reply nested
 * thousands of levels deep cannot overflow the stack here.
 */
export function stripGatewayMeta(root: unknown): boolean {
  let removed = false;
  const pending: unknown[] = [root];
  while (pending.length > 0) {
    const value = pending.pop();
    if (typeof value !== 'object' || value === null) continue;
    if (Array.isArray(value)) {
      for (const item of value) if (typeof item === 'object' && item !== null) pending.push(item);
      continue;
    }
    const object = value as Record<string, unknown>;
    for (const key of Object.keys(object)) {
      const child = object[key];
      if (typeof child !== 'object' || child === null) continue;
      if (key === '_meta' && isObject(child) && dropNamespacedKeys(child)) removed = true;
      pending.push(child);
    }
  }
  return removed;
}

function dropNamespacedKeys(meta: Record<string, unknown>): boolean {
  let removed = false;
  for (const key of Object.keys(meta)) {
    if (!key.startsWith(GATEWAY_META_PREFIX)) continue;
    delete meta[key];
    removed = true;
  }
  return removed;
}
