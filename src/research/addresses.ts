// Which IP addresses the research server may connect to: public unicast only (SPEC §13).
// The tables are compiled into net.BlockLists once, at module load; checks are cheap lookups.

import { BlockList, isIP } from 'node:net';

/** Why an address is refused, phrased to follow "10.0.0.1 is …". */
export type AddressClass =
  | 'a "this network" address'
  | 'a private address'
  | 'a carrier-grade NAT address'
  | 'a loopback address'
  | 'a link-local address'
  | 'an IETF protocol assignment address'
  | 'a benchmarking address'
  | 'a documentation address'
  | 'a 6to4 relay anycast address'
  | 'a Teredo address'
  | 'a local-use NAT64 address'
  | 'a multicast address'
  | 'a reserved address'
  | 'the unspecified address'
  | 'an IPv4-mapped IPv6 address'
  | 'a unique-local (private) address'
  | 'not an IP address';

type Rule = readonly [network: string, prefix: number, label: AddressClass];

const IPV4_RULES: readonly Rule[] = [
  ['0.0.0.0', 8, 'a "this network" address'],
  ['10.0.0.0', 8, 'a private address'],
  ['100.64.0.0', 10, 'a carrier-grade NAT address'],
  ['127.0.0.0', 8, 'a loopback address'],
  ['169.254.0.0', 16, 'a link-local address'],
  ['172.16.0.0', 12, 'a private address'],
  ['192.0.0.0', 24, 'an IETF protocol assignment address'],
  ['192.168.0.0', 16, 'a private address'],
  ['198.18.0.0', 15, 'a benchmarking address'],
  ['192.0.2.0', 24, 'a documentation address'], // TEST-NET-1
  ['198.51.100.0', 24, 'a documentation address'], // TEST-NET-2
  ['203.0.113.0', 24, 'a documentation address'], // TEST-NET-3
  ['192.88.99.0', 24, 'a 6to4 relay anycast address'], // deprecated (RFC 7526)
  ['224.0.0.0', 4, 'a multicast address'],
  ['240.0.0.0', 4, 'a reserved address'], // includes 255.255.255.255
];

// Checked in order. IPv4-mapped comes first and is refused outright whatever IPv4 address it
// carries: Node prints ::ffff:127.0.0.1 as ::ffff:7f00:1, so no string check on the dotted form
// can be trusted. Forms that embed an IPv4 address at a fixed place (6to4, well-known NAT64) are
// judged by that address (EMBEDDING_RULES, before these). Anything not caught by either must still
// fall inside 2000::/3 (global unicast), which also refuses IPv4-compatible (::/96) forms.
const IPV6_RULES: readonly Rule[] = [
  ['::ffff:0:0', 96, 'an IPv4-mapped IPv6 address'],
  ['::', 128, 'the unspecified address'],
  ['::1', 128, 'a loopback address'],
  ['fc00::', 7, 'a unique-local (private) address'],
  ['fe80::', 10, 'a link-local address'],
  ['ff00::', 8, 'a multicast address'],
  // RFC 8215: the operator picks where the IPv4 address sits (/48 … /96), so it cannot be read back.
  ['64:ff9b:1::', 48, 'a local-use NAT64 address'],
  // The client address inside is obfuscated and the packet goes through a relay: refused whole.
  ['2001::', 32, 'a Teredo address'],
  ['2001:db8::', 32, 'a documentation address'],
  ['3fff::', 20, 'a documentation address'], // RFC 9637
  // IANA special-purpose block (benchmarking 2001:2::/48, ORCHID…); real allocations start at 2001:200::.
  ['2001::', 23, 'an IETF protocol assignment address'],
];

type EmbeddingForm = '6to4' | 'NAT64';
/** Where an IPv4 address sits inside an IPv6 one: the 16-bit group it starts at. */
type EmbeddingRule = readonly [network: string, prefix: number, form: EmbeddingForm, firstGroup: number];

const EMBEDDING_RULES: readonly EmbeddingRule[] = [
  ['2002::', 16, '6to4', 1], // 2002:AABB:CCDD::/48 → A.B.C.D (RFC 3056)
  ['64:ff9b::', 96, 'NAT64', 6], // 64:ff9b::A.B.C.D, the well-known prefix (RFC 6052)
];

interface CompiledRule {
  readonly list: BlockList;
  readonly label: AddressClass;
}

const compile = (rules: readonly Rule[], type: 'ipv4' | 'ipv6'): readonly CompiledRule[] =>
  rules.map(([network, prefix, label]) => {
    const list = new BlockList();
    list.addSubnet(network, prefix, type);
    return { list, label };
  });

const IPV4 = compile(IPV4_RULES, 'ipv4');
const IPV6 = compile(IPV6_RULES, 'ipv6');
const EMBEDDINGS = EMBEDDING_RULES.map(([network, prefix, form, firstGroup]) => {
  const list = new BlockList();
  list.addSubnet(network, prefix, 'ipv6');
  return { list, form, firstGroup };
});
const IPV6_GLOBAL_UNICAST = new BlockList();
IPV6_GLOBAL_UNICAST.addSubnet('2000::', 3, 'ipv6');

/** Why an address is refused: its own class, or the class of the IPv4 address it embeds. */
export type AddressReason = AddressClass | `a ${EmbeddingForm} address embedding ${string}, ${AddressClass}`;

export type AddressVerdict = { readonly public: true } | { readonly public: false; readonly why: AddressReason };

/** Strips URL brackets ("[::1]") and an IPv6 zone ("fe80::1%eth0"). */
export function bareAddress(address: string): string {
  const unbracketed = address.startsWith('[') && address.endsWith(']') ? address.slice(1, -1) : address;
  const zone = unbracketed.indexOf('%');
  return zone === -1 ? unbracketed : unbracketed.slice(0, zone);
}

export function classifyAddress(address: string): AddressVerdict {
  const bare = bareAddress(address);
  const family = isIP(bare);
  if (family === 4) return classifyIpv4(bare);
  if (family === 6) {
    const embedding = EMBEDDINGS.find((rule) => rule.list.check(bare, 'ipv6'));
    if (embedding) {
      const embedded = ipv4At(ipv6Groups(bare), embedding.firstGroup);
      const verdict = classifyIpv4(embedded);
      return verdict.public ? verdict : { public: false, why: `a ${embedding.form} address embedding ${embedded}, ${verdict.why}` };
    }
    const hit = IPV6.find((rule) => rule.list.check(bare, 'ipv6'));
    if (hit) return { public: false, why: hit.label };
    return IPV6_GLOBAL_UNICAST.check(bare, 'ipv6') ? { public: true } : { public: false, why: 'a reserved address' };
  }
  return { public: false, why: 'not an IP address' };
}

function classifyIpv4(address: string): { readonly public: true } | { readonly public: false; readonly why: AddressClass } {
  const hit = IPV4.find((rule) => rule.list.check(address, 'ipv4'));
  return hit ? { public: false, why: hit.label } : { public: true };
}

/** The eight 16-bit groups of a valid IPv6 address (`::` expanded, a trailing dotted quad folded in). */
function ipv6Groups(address: string): number[] {
  let text = address.toLowerCase();
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const parse = (part: string): number[] => (part === '' ? [] : part.split(':').map((group) => parseInt(group, 16)));
  const left = parse(head);
  const right = tail === undefined ? [] : parse(tail);
  return [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
}

function ipv4At(groups: number[], first: number): string {
  const high = groups[first] ?? 0;
  const low = groups[first + 1] ?? 0;
  return [high >> 8, high & 0xff, low >> 8, low & 0xff].join('.');
}
