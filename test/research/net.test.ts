import t from 'tap';
import { classifyAddress } from '../../src/research/addresses.js';
import { assertFetchableUrl, safeFetch, type ResolvedAddress } from '../../src/research/net.js';
import { PUBLIC_V4, html, localDeps, redirect, startOrigin, tableResolver, type Origin } from './helpers.js';

// ---------------------------------------------------------------------------------------------
// Address classes

const REFUSED_V4: Array<[string, RegExp]> = [
  ['0.0.0.0', /this network/],
  ['0.255.255.255', /this network/],
  ['10.0.0.1', /private/],
  ['10.255.255.255', /private/],
  ['100.64.0.1', /carrier-grade NAT/],
  ['100.127.255.254', /carrier-grade NAT/],
  ['127.0.0.1', /loopback/],
  ['127.255.255.254', /loopback/],
  ['169.254.169.254', /link-local/],
  ['172.16.0.1', /private/],
  ['172.31.255.255', /private/],
  ['192.0.0.8', /IETF protocol/],
  ['192.168.1.1', /private/],
  ['198.18.0.1', /benchmarking/],
  ['198.19.255.255', /benchmarking/],
  ['224.0.0.1', /multicast/],
  ['239.255.255.250', /multicast/],
  ['240.0.0.1', /reserved/],
  ['255.255.255.255', /reserved/],
  ['192.0.2.1', /documentation/], // TEST-NET-1
  ['198.51.100.7', /documentation/], // TEST-NET-2
  ['203.0.113.9', /documentation/], // TEST-NET-3
  ['192.88.99.1', /6to4 relay/],
];

const PUBLIC_EDGES_V4 = ['1.1.1.1', '8.8.8.8', PUBLIC_V4, '100.63.255.255', '100.128.0.0', '172.15.255.255', '172.32.0.0', '192.0.1.1', '198.17.255.255', '198.20.0.0', '223.255.255.255', '11.0.0.1', '192.0.3.0', '198.51.99.255', '198.51.101.0', '203.0.112.255', '203.0.114.0', '192.88.98.255', '192.88.100.0'];

const REFUSED_V6: Array<[string, RegExp]> = [
  ['::', /unspecified/],
  ['::1', /loopback/],
  ['fc00::1', /unique-local/],
  ['fdff:ffff::1', /unique-local/],
  ['fe80::1', /link-local/],
  ['febf:ffff::1', /link-local/],
  ['fe80::1%eth0', /link-local/],
  ['ff02::1', /multicast/],
  ['::ffff:127.0.0.1', /IPv4-mapped/],
  ['::ffff:7f00:1', /IPv4-mapped/],
  ['::ffff:8.8.8.8', /IPv4-mapped/], // refused outright, even when the IPv4 inside is public
  ['::ffff:a9fe:a9fe', /IPv4-mapped/],
  ['::127.0.0.1', /reserved/], // IPv4-compatible
  // Forms that embed an IPv4 address are judged by the address they embed (SPEC §13).
  ['2002:a00:1::1', /^a 6to4 address embedding 10\.0\.0\.1, a private address$/],
  ['2002:7f00:1::', /6to4 address embedding 127\.0\.0\.1, a loopback address/],
  ['2002:a9fe:a9fe::1', /6to4 address embedding 169\.254\.169\.254, a link-local address/],
  ['2002:c000:201::1', /6to4 address embedding 192\.0\.2\.1, a documentation address/],
  ['2002::1', /6to4 address embedding 0\.0\.0\.0/],
  ['64:ff9b::a00:1', /^a NAT64 address embedding 10\.0\.0\.1, a private address$/],
  ['64:ff9b::127.0.0.1', /NAT64 address embedding 127\.0\.0\.1, a loopback address/],
  ['64:ff9b::a9fe:a9fe', /NAT64 address embedding 169\.254\.169\.254/],
  // Refused whole: where the IPv4 address sits, or what it means, cannot be read from the address.
  ['64:ff9b:1::a00:1', /local-use NAT64/],
  ['64:ff9b:1:ffff::808:808', /local-use NAT64/],
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', /Teredo/],
  ['2001::1', /Teredo/],
  ['2001:2::1', /IETF protocol assignment/], // benchmarking, inside 2001::/23
  ['2001:10::1', /IETF protocol assignment/], // ORCHID
  ['2001:1ff:ffff::1', /IETF protocol assignment/],
  ['2001:db8::1', /documentation/],
  ['2001:db8:ffff:ffff::1', /documentation/],
  ['3fff::1', /documentation/],
  ['3fff:fff:ffff::1', /documentation/],
];

const PUBLIC_V6 = [
  '2606:4700:4700::1111', '2001:4860:4860::8888', '2a00:1450:4001::1',
  '2002:808:808::1', // 6to4 of 8.8.8.8
  '64:ff9b::808:808', // NAT64 of 8.8.8.8 (what DNS64 answers on an IPv6-only network)
  '2001:200::1', '2001:db7:ffff::1', '2001:db9::1', '3fff:1000::1', '3ffe:ffff::1',
];

t.test('every refused IPv4 class is refused, and its neighbours outside the class are public', async (t) => {
  for (const [address, why] of REFUSED_V4) {
    const verdict = classifyAddress(address);
    t.equal(verdict.public, false, `${address} refused`);
    if (!verdict.public) t.match(verdict.why, why, `${address} reason`);
  }
  for (const address of PUBLIC_EDGES_V4) t.same(classifyAddress(address), { public: true }, `${address} public`);
});

t.test('every refused IPv6 class is refused, and global unicast is public', async (t) => {
  for (const [address, why] of REFUSED_V6) {
    const verdict = classifyAddress(address);
    t.equal(verdict.public, false, `${address} refused`);
    if (!verdict.public) t.match(verdict.why, why, `${address} reason`);
  }
  for (const address of PUBLIC_V6) t.same(classifyAddress(address), { public: true }, `${address} public`);
});

t.test('something that is not an IP address is never public', async (t) => {
  t.equal(classifyAddress('not-an-ip').public, false);
  t.equal(classifyAddress('').public, false);
});

// ---------------------------------------------------------------------------------------------
// assertFetchableUrl

t.test('IP literals in URLs are refused by class, whatever notation the URL uses', async (t) => {
  const resolver = tableResolver();
  const cases: Array<[string, RegExp]> = [
    ['http://10.0.0.1/', /^Refused: 10\.0\.0\.1 is a private address; only public hosts can be fetched\.$/],
    ['http://169.254.169.254/latest/meta-data/', /169\.254\.169\.254 is a link-local address/],
    ['http://0x7f.0.0.1/', /127\.0\.0\.1 is a loopback address/],
    ['http://2130706433/', /127\.0\.0\.1 is a loopback address/],
    ['http://0177.0.0.1/', /127\.0\.0\.1 is a loopback address/],
    ['http://127.1/', /127\.0\.0\.1 is a loopback address/],
    ['http://[::1]/', /^Refused: ::1 is a loopback address/],
    ['http://[::]/', /unspecified/],
    ['http://[fe80::1]/', /link-local/],
    ['http://[fd00::1]:8080/', /unique-local/],
    ['http://[ff02::1]/', /multicast/],
    ['http://[::ffff:127.0.0.1]/', /IPv4-mapped/],
    ['http://[::ffff:169.254.169.254]/', /IPv4-mapped/],
    ['http://[::ffff:8.8.8.8]/', /IPv4-mapped/],
  ];
  for (const [url, message] of cases) {
    await t.rejects(assertFetchableUrl(url, { resolve: resolver.resolve }), { code: 'RS_ERR_ADDRESS', message }, url);
  }
  t.same(resolver.calls, [], 'literals never reach the resolver');
});

t.test('a public IP literal passes with brackets stripped', async (t) => {
  const v4 = await assertFetchableUrl('http://8.8.8.8/');
  t.match(v4, { address: '8.8.8.8', family: 4, port: 80, hostname: '8.8.8.8' });
  const v6 = await assertFetchableUrl('https://[2606:4700:4700::1111]/');
  t.match(v6, { address: '2606:4700:4700::1111', family: 6, port: 443, hostname: '2606:4700:4700::1111' });
});

t.test('localhost, *.localhost, *.local and *.internal are refused without a DNS lookup', async (t) => {
  const resolver = tableResolver();
  for (const host of ['localhost', 'LOCALHOST', 'localhost.', 'app.localhost', 'printer.local', 'metadata.google.internal']) {
    await t.rejects(
      assertFetchableUrl(`http://${host}/`, { resolve: resolver.resolve }),
      { code: 'RS_ERR_LOCAL_NAME', message: /^Refused: .* is a local name; only public hosts can be fetched\.$/ },
      host,
    );
  }
  t.same(resolver.calls, []);
});

t.test('a public-looking name that resolves to loopback is refused (DNS rebinding)', async (t) => {
  const { resolve } = tableResolver();
  await t.rejects(assertFetchableUrl('http://rebind.test/', { resolve }), {
    code: 'RS_ERR_ADDRESS',
    message: 'Refused: rebind.test resolves to 127.0.0.1, a loopback address; only public hosts can be fetched.',
  });
  await t.rejects(assertFetchableUrl('http://rebind6.test/', { resolve }), { code: 'RS_ERR_ADDRESS', message: /resolves to ::1/ });
  await t.rejects(assertFetchableUrl('http://metadata.test/', { resolve }), { code: 'RS_ERR_ADDRESS', message: /169\.254\.169\.254, a link-local/ });
  await t.rejects(assertFetchableUrl('http://mapped.test/', { resolve }), { code: 'RS_ERR_ADDRESS', message: /IPv4-mapped/ });
});

t.test('a name resolving to a 6to4, NAT64, Teredo or documentation address is refused by what it embeds or names', async (t) => {
  const { resolve } = tableResolver({
    'sixtofour.test': [{ address: '2002:a00:1::1', family: 6 }],
    'nat64.test': [{ address: '64:ff9b::7f00:1', family: 6 }],
    'localnat64.test': [{ address: '64:ff9b:1::808:808', family: 6 }],
    'teredo.test': [{ address: '2001:0:4136:e378:8000:63bf:3fff:fdd2', family: 6 }],
    'doc6.test': [{ address: '2001:db8::1', family: 6 }],
    'doc4.test': [{ address: '203.0.113.5', family: 4 }],
    'public-nat64.test': [{ address: '64:ff9b::808:808', family: 6 }],
  });
  await t.rejects(assertFetchableUrl('http://sixtofour.test/', { resolve }), {
    code: 'RS_ERR_ADDRESS',
    message: 'Refused: sixtofour.test resolves to 2002:a00:1::1, a 6to4 address embedding 10.0.0.1, a private address; only public hosts can be fetched.',
  });
  await t.rejects(assertFetchableUrl('http://nat64.test/', { resolve }), { code: 'RS_ERR_ADDRESS', message: /NAT64 address embedding 127\.0\.0\.1, a loopback address/ });
  await t.rejects(assertFetchableUrl('http://localnat64.test/', { resolve }), { code: 'RS_ERR_ADDRESS', message: /local-use NAT64/ });
  await t.rejects(assertFetchableUrl('http://teredo.test/', { resolve }), { code: 'RS_ERR_ADDRESS', message: /Teredo/ });
  await t.rejects(assertFetchableUrl('http://doc6.test/', { resolve }), { code: 'RS_ERR_ADDRESS', message: /2001:db8::1, a documentation address/ });
  await t.rejects(assertFetchableUrl('http://doc4.test/', { resolve }), { code: 'RS_ERR_ADDRESS', message: /203\.0\.113\.5, a documentation address/ });
  t.match(await assertFetchableUrl('http://public-nat64.test/', { resolve }), { address: '64:ff9b::808:808', family: 6 }, 'NAT64 of a public address passes');
  for (const literal of ['http://[2002:a00:1::1]/', 'http://[64:ff9b::a00:1]/', 'http://[2001::1]/', 'http://[3fff::1]/', 'http://192.0.2.1/']) {
    await t.rejects(assertFetchableUrl(literal, { resolve }), { code: 'RS_ERR_ADDRESS' }, literal);
  }
});

t.test('a name is refused if any one of its answers is private', async (t) => {
  const { resolve } = tableResolver();
  await t.rejects(assertFetchableUrl('http://mixed.test/', { resolve }), { code: 'RS_ERR_ADDRESS', message: /10\.1\.2\.3, a private address/ });
});

t.test('a name that does not resolve is a DNS error, not a pass', async (t) => {
  const { resolve } = tableResolver();
  await t.rejects(assertFetchableUrl('http://nowhere.test/', { resolve }), { code: 'RS_ERR_DNS', message: 'Could not resolve nowhere.test (ENOTFOUND).' });
  await t.rejects(assertFetchableUrl('http://empty.test/', { resolve }), { code: 'RS_ERR_DNS' });
});

t.test('only ports 80, 443, 8080 and 8443 are allowed', async (t) => {
  const { resolve } = tableResolver();
  for (const port of [22, 25, 3000, 6379, 9200]) {
    await t.rejects(
      assertFetchableUrl(`http://public.test:${port}/`, { resolve }),
      { code: 'RS_ERR_PORT', message: `Refused: port ${port} is not allowed; only ports 80, 443, 8080 and 8443 can be fetched.` },
      `port ${port}`,
    );
  }
  for (const [url, port] of [['http://public.test/', 80], ['https://public.test/', 443], ['http://public.test:8080/', 8080], ['https://public.test:8443/', 8443], ['https://public.test:80/', 80]] as const) {
    t.match(await assertFetchableUrl(url, { resolve }), { port, address: PUBLIC_V4 }, url);
  }
});

t.test('only http and https URLs are allowed', async (t) => {
  const { resolve } = tableResolver();
  for (const url of ['file:///etc/passwd', 'ftp://public.test/', 'gopher://public.test/', 'data:text/html,hi', 'javascript:alert(1)', 'ws://public.test/']) {
    await t.rejects(assertFetchableUrl(url, { resolve }), { code: 'RS_ERR_SCHEME', message: /^Refused: only http and https URLs can be fetched, not [a-z]+:\.$/ }, url);
  }
  await t.rejects(assertFetchableUrl('not a url', { resolve }), { code: 'RS_ERR_INVALID_URL', message: 'Refused: "not a url" is not a valid URL.' });
});

t.test('the checked address is returned for the caller to connect to', async (t) => {
  const { resolve } = tableResolver();
  t.match(await assertFetchableUrl('https://PUBLIC.test./path?q=1', { resolve }), { hostname: 'public.test', address: PUBLIC_V4, family: 4, port: 443 });
});

// ---------------------------------------------------------------------------------------------
// safeFetch against a local origin (reached only through the test-only connectOverride)

const TWO_MB = 2 * 1024 * 1024;
const LYING_TOTAL = 8 * 1024 * 1024;
let lyingStream = { written: 0, closedEarly: false };

const origin: Origin = await startOrigin({
  '/page': html('<p>hello</p>'),
  '/missing': html('<p>gone</p>', 404),
  '/to-metadata': redirect('http://169.254.169.254/latest/meta-data/'),
  '/to-loopback': redirect('http://127.0.0.1:8080/admin'),
  '/to-port-22': redirect('http://public.test:22/'),
  '/to-file': redirect('file:///etc/passwd'),
  '/to-rebind': redirect('http://rebind.test/'),
  '/to-garbage': redirect('http://[::1'),
  '/hop3': redirect('/hop2', 301),
  '/hop2': redirect('/hop1', 307),
  '/hop1': redirect('http://public.test/page', 308),
  '/loop': redirect('/loop'),
  '/declared-too-big': (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html', 'content-length': String(TWO_MB + 1) });
    res.write('<p>');
  },
  '/lying-stream': (_req, res) => {
    // No Content-Length; keeps sending up to 8 MB unless the client hangs up.
    lyingStream = { written: 0, closedEarly: false };
    res.writeHead(200, { 'content-type': 'text/html' });
    const chunk = Buffer.alloc(64 * 1024, 'a');
    res.on('close', () => {
      if (!res.writableFinished) lyingStream.closedEarly = true;
    });
    const pump = (): void => {
      while (lyingStream.written < LYING_TOTAL && !res.destroyed) {
        lyingStream.written += chunk.length;
        if (!res.write(chunk)) return void res.once('drain', pump);
      }
      if (!res.destroyed) res.end();
    };
    pump();
  },
  '/hang': () => undefined,
});
t.teardown(() => origin.close());

t.test('a public name is fetched from the address that was checked, with its own Host header', async (t) => {
  const resolver = tableResolver();
  const deps = localDeps(origin.port, resolver);
  const page = await safeFetch('http://public.test/page', {}, deps);
  t.match(page, { status: 200, contentType: 'text/html', charset: 'utf-8', url: 'http://public.test/page' });
  t.equal(page.body.toString(), '<p>hello</p>');
  t.equal(deps.dialled[0]?.address, PUBLIC_V4, 'dialled target is the checked address');
  t.equal(origin.requests.at(-1)?.host, 'public.test', 'Host header names the URL host');
  t.same(resolver.calls, ['public.test']);
});

t.test('the name is resolved once per hop: a second, rebinding answer is never asked for', async (t) => {
  let calls = 0;
  const rebinding = async (): Promise<ResolvedAddress[]> => {
    calls += 1;
    return calls === 1 ? [{ address: PUBLIC_V4, family: 4 }] : [{ address: '127.0.0.1', family: 4 }];
  };
  const deps = localDeps(origin.port, { resolve: rebinding, calls: [] });
  const page = await safeFetch('http://public.test/page', {}, deps);
  t.equal(page.status, 200);
  t.equal(calls, 1, 'one lookup');
  t.same(deps.dialled.map((target) => target.address), [PUBLIC_V4]);
});

t.test('non-2xx statuses are returned, not thrown', async (t) => {
  const page = await safeFetch('http://public.test/missing', {}, localDeps(origin.port));
  t.equal(page.status, 404);
});

t.test('a redirect into 169.254.169.254 is refused', async (t) => {
  const before = origin.requests.length;
  await t.rejects(safeFetch('http://public.test/to-metadata', {}, localDeps(origin.port)), {
    code: 'RS_ERR_ADDRESS',
    message: 'Refused: the page redirected to http://169.254.169.254/latest/meta-data/, but 169.254.169.254 is a link-local address; only public hosts can be fetched.',
  });
  t.equal(origin.requests.length - before, 1, 'only the first hop was requested');
});

t.test('a redirect into 127.0.0.1 is refused', async (t) => {
  await t.rejects(safeFetch('http://public.test/to-loopback', {}, localDeps(origin.port)), { code: 'RS_ERR_ADDRESS', message: /redirected to http:\/\/127\.0\.0\.1:8080\/admin, but 127\.0\.0\.1 is a loopback address/ });
});

t.test('a redirect to port 22 is refused', async (t) => {
  await t.rejects(safeFetch('http://public.test/to-port-22', {}, localDeps(origin.port)), { code: 'RS_ERR_PORT', message: /redirected to http:\/\/public\.test:22\/, but port 22 is not allowed/ });
});

t.test('a redirect to file: is refused', async (t) => {
  await t.rejects(safeFetch('http://public.test/to-file', {}, localDeps(origin.port)), { code: 'RS_ERR_SCHEME', message: /redirected to file:\/\/\/etc\/passwd, but only http and https/ });
});

t.test('a redirect to a name that resolves to loopback is refused', async (t) => {
  await t.rejects(safeFetch('http://public.test/to-rebind', {}, localDeps(origin.port)), { code: 'RS_ERR_ADDRESS', message: /rebind\.test resolves to 127\.0\.0\.1/ });
});

t.test('a redirect to something that is not a URL is refused', async (t) => {
  await t.rejects(safeFetch('http://public.test/to-garbage', {}, localDeps(origin.port)), {
    code: 'RS_ERR_INVALID_URL',
    message: 'Refused: the page redirected to "http://[::1", which is not a valid URL.',
  });
});

t.test('up to 3 redirects are followed, relative ones included, each hop checked', async (t) => {
  const resolver = tableResolver();
  const page = await safeFetch('http://public.test/hop3', {}, localDeps(origin.port, resolver));
  t.equal(page.status, 200);
  t.equal(page.body.toString(), '<p>hello</p>');
  t.same(page.hops, ['http://public.test/hop3', 'http://public.test/hop2', 'http://public.test/hop1', 'http://public.test/page']);
  t.equal(resolver.calls.length, 4, 'one resolution per hop');
});

t.test('a redirect loop stops after 3 redirects', async (t) => {
  const before = origin.requests.length;
  await t.rejects(safeFetch('http://public.test/loop', {}, localDeps(origin.port)), {
    code: 'RS_ERR_TOO_MANY_REDIRECTS',
    message: 'Refused: the page redirected more than 3 times (last to http://public.test/loop).',
  });
  t.equal(origin.requests.length - before, 4, 'the first request and 3 redirects');
});

t.test('a declared Content-Length over 2 MB is refused before reading the body', async (t) => {
  await t.rejects(safeFetch('http://public.test/declared-too-big', {}, localDeps(origin.port)), {
    code: 'RS_ERR_BODY_TOO_LARGE',
    message: `Refused: the page declares ${TWO_MB + 1} bytes, over the 2 MB limit.`,
  });
});

t.test('a stream with no length is cut off at 2 MB while it streams', async (t) => {
  await t.rejects(safeFetch('http://public.test/lying-stream', {}, localDeps(origin.port)), {
    code: 'RS_ERR_BODY_TOO_LARGE',
    message: 'Refused: the page sent more than 2 MB; the download was stopped.',
  });
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.ok(lyingStream.closedEarly, 'the connection was closed before the origin finished');
  t.ok(lyingStream.written < LYING_TOTAL, `origin wrote ${lyingStream.written} bytes, not the full 8 MB`);
});

t.test('a page that never answers times out', async (t) => {
  const started = Date.now();
  await t.rejects(safeFetch('http://public.test/hang', { timeoutMs: 300 }, localDeps(origin.port)), {
    code: 'RS_ERR_TIMEOUT',
    message: 'Timed out: the page did not load within 0.3 s.',
  });
  t.ok(Date.now() - started < 2000, 'within the deadline');
});

t.test('a DNS lookup that never answers times out', async (t) => {
  const deps = { resolve: () => new Promise<ResolvedAddress[]>(() => undefined) };
  await t.rejects(safeFetch('http://slow-dns.test/', { timeoutMs: 200 }, deps), { code: 'RS_ERR_TIMEOUT' });
});

t.test('a refused connection is a fetch failure naming the URL', async (t) => {
  const closed = await startOrigin({});
  const port = closed.port;
  await closed.close();
  await t.rejects(safeFetch('http://public.test/', {}, localDeps(port)), { code: 'RS_ERR_FETCH_FAILED', message: /^Fetching http:\/\/public\.test\/ failed \(ECONNREFUSED\)/ });
});
