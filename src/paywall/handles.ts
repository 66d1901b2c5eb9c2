// Handles (SPEC §6.1): `tb_s_` + base64url of 16 CSPRNG bytes. The store only ever sees a keyed hash,
// so a lookup never compares secrets byte by byte and a store dump leaks no bearer credential.
import { createHmac, hash, randomBytes } from 'node:crypto';

export const HANDLE_PREFIX = 'tb_s_';
const HANDLE_PATTERN = /^tb_s_[A-Za-z0-9_-]{22}$/;

export function mintHandle(): string {
  return HANDLE_PREFIX + randomBytes(16).toString('base64url');
}

const NONCE_BYTES = 16;
const NONCE_POOL_BYTES = NONCE_BYTES * 256;
let noncePool = Buffer.alloc(0);
let noncePoolOffset = NONCE_POOL_BYTES;

/**
 * Charge and reservation nonces: 16 CSPRNG bytes, no prefix, never derived from a handle or a link
 * id. Every priced call mints one, so the bytes come from a pool refilled 256 nonces at a time (as
 * crypto.randomUUID does): one randomBytes call per call was a visible share of the paid path's CPU.
 * No byte is handed out twice. Handles themselves are not pooled.
 */
export function mintNonce(): string {
  if (noncePoolOffset === NONCE_POOL_BYTES) {
    noncePool = randomBytes(NONCE_POOL_BYTES);
    noncePoolOffset = 0;
  }
  const nonce = noncePool.toString('base64url', noncePoolOffset, noncePoolOffset + NONCE_BYTES);
  noncePoolOffset += NONCE_BYTES;
  return nonce;
}

/** Only well-formed handles are ever looked up; anything else is "unknown" without a store round trip. */
export const isWellFormedHandle = (value: string): boolean => HANDLE_PATTERN.test(value);

/** HMAC-SHA-256 with the per-deployment secret, or SHA-256 when none is configured. Hex. */
export function hashHandle(handle: string, secret: string): string {
  return secret ? createHmac('sha256', secret).update(handle).digest('hex') : hash('sha256', handle, 'hex');
}

/** How many handles `createHandleHasher` remembers: the hot handles of a busy gateway, a few hundred KiB. */
export const HANDLE_HASH_MEMO_SIZE = 4096;

/**
 * `hashHandle` for the call path, remembering the hashes of the handles it saw last. A hot handle
 * pays an HMAC once instead of on every call (in situ the HMAC was ~15 µs of a paid call: object
 * creation and three native calls, bench/RESULTS.md). The memo holds handles the process has just
 * read from request bodies anyway and never leaves the process; the store still sees only hashes.
 * First in, first out: a hit costs one Map look-up and nothing else.
 */
export function createHandleHasher(secret: string, size = HANDLE_HASH_MEMO_SIZE): (handle: string) => string {
  const memo = new Map<string, string>();
  return (handle) => {
    const known = memo.get(handle);
    if (known !== undefined) return known;
    const hashed = hashHandle(handle, secret);
    if (memo.size >= size) memo.delete(memo.keys().next().value as string);
    memo.set(handle, hashed);
    return hashed;
  };
}
