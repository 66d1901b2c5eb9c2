/** How a handle appears anywhere outside the store: first 9 characters, "..", last 4 (SPEC §10). */
export function fingerprint(handle: string): string {
  if (handle.length <= 13) return `${handle.slice(0, Math.min(handle.length, 5))}..`;
  return `${handle.slice(0, 9)}..${handle.slice(-4)}`;
}
