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
  ['224.0.0.0', 4, 'a multicast address'],
  ['240.0.0.0', 4, 'a reserved address'], // includes 255.255.255.255
];

// Checked in order. IPv4-mapped comes first and is refused outright whatever IPv4 address it
// carries: Node prints ::ffff:127.0.0.1 as ::ffff:7f00:1, so no string check on the dotted form
// can be trusted. Anything not caught here must still fall inside 2000::/3 (global unicast),
// which also refuses NAT64 (64:ff9b::/96) and IPv4-compatible (::/96) forms of private addresses.
const IPV6_RULES: readonly Rule[] = [
  ['::ffff:0:0', 96, 'an IPv4-mapped IPv6 address'],
  ['::', 128, 'the unspecified address'],
  ['::1', 128, 'a loopback address'],
  ['fc00::', 7, 'a unique-local (private) address'],
  ['fe80::', 10, 'a link-local address'],
  ['ff00::', 8, 'a multicast address'],
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
const IPV6_GLOBAL_UNICAST = new BlockList();
IPV6_GLOBAL_UNICAST.addSubnet('2000::', 3, 'ipv6');

export type AddressVerdict = { readonly public: true } | { readonly public: false; readonly why: AddressClass };

/** Strips URL brackets ("[::1]") and an IPv6 zone ("fe80::1%eth0"). */
export function bareAddress(address: string): string {
  const unbracketed = address.startsWith('[') && address.endsWith(']') ? address.slice(1, -1) : address;
  const zone = unbracketed.indexOf('%');
  return zone === -1 ? unbracketed : unbracketed.slice(0, zone);
}

export function classifyAddress(address: string): AddressVerdict {
  const bare = bareAddress(address);
  const family = isIP(bare);
  if (family === 4) {
    const hit = IPV4.find((rule) => rule.list.check(bare, 'ipv4'));
    return hit ? { public: false, why: hit.label } : { public: true };
  }
  if (family === 6) {
    const hit = IPV6.find((rule) => rule.list.check(bare, 'ipv6'));
    if (hit) return { public: false, why: hit.label };
    return IPV6_GLOBAL_UNICAST.check(bare, 'ipv6') ? { public: true } : { public: false, why: 'a reserved address' };
  }
  return { public: false, why: 'not an IP address' };
}
