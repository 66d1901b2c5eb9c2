// Who a challenge is counted against (SPEC §6.2 step 2): the principal, else the client's IPv4
// address, else its IPv6 /64. A /64 is what one subscriber gets (RFC 6177, RFC 7421 SLAAC): its 2^64
// addresses rotate freely (privacy addresses), so counting per address would let one client mint
// handles without limit. An IPv4-mapped IPv6 address (::ffff:a.b.c.d, what a dual-stack socket
// reports) is its IPv4 address.
import { isIPv4, isIPv6 } from 'node:net';

/**
 * The throttle key for a priced call's client key (`p:<principal>` or `ip:<address>`, see
 * PricedCall.clientKey): principals unchanged, `ip:<IPv4>`, or `ip6:<first 64 bits>::/64`.
 */
export function challengeThrottleKey(clientKey: string): string {
  if (!clientKey.startsWith('ip:')) return clientKey;
  const address = clientKey.slice(3);
  if (isIPv4(address)) return clientKey;
  const groups = ipv6Groups(address);
  if (!groups) return clientKey;
  if (groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff) {
    const [high = 0, low = 0] = groups.slice(6);
    return `ip:${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;
  }
  return `ip6:${groups
    .slice(0, 4)
    .map((group) => group.toString(16))
    .join(':')}::/64`;
}

/** The eight 16-bit groups of an IPv6 address (zone id dropped, embedded IPv4 tail allowed), or null. */
export function ipv6Groups(text: string): number[] | null {
  let address = text.replace(/%.*$/, '');
  if (!isIPv6(address)) return null;
  const lastColon = address.lastIndexOf(':');
  const tail = address.slice(lastColon + 1);
  if (isIPv4(tail)) {
    // a.b.c.d → two hex groups, so the rest is plain hex groups.
    const [a = 0, b = 0, c = 0, d = 0] = tail.split('.').map(Number);
    address = `${address.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [left = '', right] = address.split('::');
  const parse = (part: string): number[] => (part === '' ? [] : part.split(':').map((group) => Number.parseInt(group, 16)));
  const leftGroups = parse(left);
  const rightGroups = right === undefined ? [] : parse(right);
  const zeros = right === undefined ? 0 : 8 - leftGroups.length - rightGroups.length;
  const groups = [...leftGroups, ...Array<number>(Math.max(0, zeros)).fill(0), ...rightGroups];
  return groups.length === 8 ? groups : null;
}
