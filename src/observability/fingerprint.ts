/** How a handle appears anywhere outside the store: first 9 characters, "..", last 4 (SPEC §10). */
export function fingerprint(handle: string): string {
  if (handle.length <= 13) return `${handle.slice(0, Math.min(handle.length, 5))}..`;
  return `${handle.slice(0, 9)}..${handle.slice(-4)}`;
}

// A run that starts like a handle (any case, any length, with an optional "..suffix"), and the one
// shape of such a run that is safe to show as it is: a fingerprint.
const HANDLE_LIKE = /tb_s_[A-Za-z0-9_-]+(?:\.\.[A-Za-z0-9_-]*)?/gi;
const FINGERPRINT_SHAPE = /^tb_s_[A-Za-z0-9_-]{4}\.\.[A-Za-z0-9_-]{4}$/i;

/**
 * Text that may hold a handle someone typed (a CLI argument echoed in a usage or error message, an
 * operator's --reason) with every handle-like run replaced by its fingerprint (SPEC §20). Fingerprints
 * are kept: they are what operators copy from the logs.
 */
export function redactHandles(text: string): string {
  return text.replace(HANDLE_LIKE, (run) => (FINGERPRINT_SHAPE.test(run) ? run : fingerprint(run)));
}
