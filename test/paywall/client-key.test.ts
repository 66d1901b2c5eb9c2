// The challenge throttle key (SPEC §6.2 step 2): principal, IPv4 address, or IPv6 /64.
import t from 'tap';
import { challengeThrottleKey, ipv6Groups } from '../../src/paywall/client-key.js';

t.test('a principal is its own key', async (t) => {
  t.equal(challengeThrottleKey('p:sub:alice'), 'p:sub:alice');
});

t.test('an IPv4 address is its own key', async (t) => {
  t.equal(challengeThrottleKey('ip:203.0.113.7'), 'ip:203.0.113.7');
});

t.test('IPv6 addresses are keyed by their /64, however they are written', async (t) => {
  const key = 'ip6:2001:db8:1:2::/64';
  for (const address of ['2001:db8:1:2::1', '2001:db8:1:2:ffff:ffff:ffff:fffe', '2001:0DB8:0001:0002:0000:0000:0000:0009', '2001:db8:1:2::1.2.3.4', '2001:db8:1:2::1%eth0']) {
    t.equal(challengeThrottleKey(`ip:${address}`), key, address);
  }
  t.equal(challengeThrottleKey('ip:2001:db8:1:3::1'), 'ip6:2001:db8:1:3::/64');
  t.equal(challengeThrottleKey('ip:::1'), 'ip6:0:0:0:0::/64');
  t.equal(challengeThrottleKey('ip:fe80::1%eth0'), 'ip6:fe80:0:0:0::/64');
});

t.test('an IPv4-mapped IPv6 address is its IPv4 address', async (t) => {
  t.equal(challengeThrottleKey('ip:::ffff:203.0.113.7'), 'ip:203.0.113.7');
  t.equal(challengeThrottleKey('ip:::ffff:cb00:7107'), 'ip:203.0.113.7');
});

t.test('anything else is kept as it is', async (t) => {
  t.equal(challengeThrottleKey('ip:not-an-address'), 'ip:not-an-address');
  t.equal(challengeThrottleKey('ip:'), 'ip:');
});

t.test('ipv6Groups expands every spelling to eight groups', async (t) => {
  t.same(ipv6Groups('::'), [0, 0, 0, 0, 0, 0, 0, 0]);
  t.same(ipv6Groups('1::'), [1, 0, 0, 0, 0, 0, 0, 0]);
  t.same(ipv6Groups('::1.2.3.4'), [0, 0, 0, 0, 0, 0, 0x102, 0x304]);
  t.same(ipv6Groups('1:2:3:4:5:6:7:8'), [1, 2, 3, 4, 5, 6, 7, 8]);
  t.equal(ipv6Groups('1.2.3.4'), null);
  t.equal(ipv6Groups('1:::2'), null);
});
