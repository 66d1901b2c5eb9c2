import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createTlsServer } from 'node:tls';
import t from 'tap';
import { readableText, tablesFromHtml } from '../../src/research/html.js';
import { extractTables, fetchReadable, inspectDomain, type DnsRecordResolver, type ResearchDeps } from '../../src/research/tools.js';
import { PUBLIC_V4, html, localDeps, startOrigin, tableResolver } from './helpers.js';

const fixture = (name: string): string => readFileSync(new URL(`../fixtures/research/${name}`, import.meta.url), 'utf8');
const ARTICLE = fixture('article.html');
const TABLES = fixture('tables.html');

// ---------------------------------------------------------------------------------------------
// HTML → text and tables (pure)

t.test('readable text keeps the article and drops scripts, styles and navigation', async (t) => {
  const { title, text } = readableText(ARTICLE);
  t.equal(title, 'Harbour Tolls in the Age of Sail');
  t.match(text, /^Ports have charged ships for the right to enter since antiquity\./);
  t.match(text, 'Who collected the money');
  t.match(text, /kept whatever they raised above the price they had paid to the town council\.$/);
  for (const marker of ['SECRET_SCRIPT_MARKER', 'INLINE_SCRIPT_MARKER', 'secret-style-marker', 'font-family', 'NAV_MARKER', 'ROLE_NAV_MARKER', 'NOSCRIPT_MARKER', 'injected']) {
    t.notMatch(text, marker, `no ${marker}`);
  }
});

t.test('readable text puts paragraphs on their own lines with single spaces inside', async (t) => {
  const { text } = readableText(ARTICLE);
  const paragraphs = text.split('\n\n');
  t.equal(paragraphs.length, 4);
  t.equal(paragraphs[0], 'Ports have charged ships for the right to enter since antiquity. The toll paid for the upkeep of quays, lighthouses and the pilots who guided vessels past sandbanks.');
});

t.test('a fragment with no <html> is still read', async (t) => {
  t.same(readableText('<p>Just a fragment</p><nav>menu</nav><script>x()</script>'), { title: '', text: 'Just a fragment' });
});

t.test('every table becomes headers and rows', async (t) => {
  t.same(tablesFromHtml(TABLES), [
    {
      caption: 'Tolls by vessel class',
      headers: ['Class', 'Tonnage', 'Toll (USD)'],
      rows: [
        ['Sloop', '< 50', '4.00'],
        ['Brig', '50 – 200', '12.50'],
        ['Ship of the line', '> 1000', '80.00'],
      ],
    },
    { headers: ['Port', 'Opened'], rows: [['Lisbon', '1147'], ['Antwerp', '1245']] },
    {
      headers: ['Day', 'Hours', 'Hours'],
      rows: [
        ['Weekday', '08:00', '18:00'],
        ['Weekday', '19:00', '22:00'],
      ],
    },
    { headers: [], rows: [['a', 'b'], ['c', 'd inner']] },
    { headers: [], rows: [['inner']] },
  ]);
});

t.test('a page without tables gives an empty list', async (t) => {
  t.same(tablesFromHtml(ARTICLE), []);
});

// ---------------------------------------------------------------------------------------------
// fetch_readable and extract_tables through the guard, against a local origin

const origin = await startOrigin({
  '/article': html(ARTICLE),
  '/tables': html(TABLES),
  '/plain': (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
    res.end('plain words');
  },
  '/latin1': (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=iso-8859-1' });
    res.end(Buffer.from('<html><body><p>caf\xe9 cr\xe8me</p></body></html>', 'latin1'));
  },
  '/pdf': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/pdf' });
    res.end('%PDF-1.7');
  },
  '/gone': html('<p>gone</p>', 410),
});
t.teardown(() => origin.close());

t.test('fetch_readable returns the title and readable text of a page', async (t) => {
  const result = await fetchReadable({ url: 'http://public.test/article' }, localDeps(origin.port));
  t.match(result, { url: 'http://public.test/article', title: 'Harbour Tolls in the Age of Sail', truncated: false });
  t.match(result.text, /^Ports have charged ships/);
  t.notMatch(result.text, 'SCRIPT_MARKER');
});

t.test('fetch_readable cuts the text at max_chars and says so', async (t) => {
  const result = await fetchReadable({ url: 'http://public.test/article', max_chars: 100 }, localDeps(origin.port));
  t.equal(result.text.length, 100);
  t.equal(result.truncated, true);
});

t.test('fetch_readable returns text/plain as it is and decodes the declared charset', async (t) => {
  t.equal((await fetchReadable({ url: 'http://public.test/plain' }, localDeps(origin.port))).text, 'plain words');
  t.equal((await fetchReadable({ url: 'http://public.test/latin1' }, localDeps(origin.port))).text, 'café crème');
});

t.test('fetch_readable refuses content it cannot read and error statuses', async (t) => {
  await t.rejects(fetchReadable({ url: 'http://public.test/pdf' }, localDeps(origin.port)), {
    code: 'RS_ERR_CONTENT_TYPE',
    message: 'The page at http://public.test/pdf is application/pdf; only HTML and text pages can be read.',
  });
  await t.rejects(fetchReadable({ url: 'http://public.test/gone' }, localDeps(origin.port)), {
    code: 'RS_ERR_HTTP_STATUS',
    message: 'The page at http://public.test/gone answered HTTP 410.',
  });
});

t.test('fetch_readable and extract_tables refuse private hosts before connecting', async (t) => {
  const deps = localDeps(origin.port);
  await t.rejects(fetchReadable({ url: 'http://10.0.0.1/' }, deps), { code: 'RS_ERR_ADDRESS', message: /10\.0\.0\.1 is a private address/ });
  await t.rejects(extractTables({ url: 'http://rebind.test/' }, deps), { code: 'RS_ERR_ADDRESS' });
  t.same(deps.dialled, [], 'nothing was dialled');
});

t.test('extract_tables returns every table of the page', async (t) => {
  const result = await extractTables({ url: 'http://public.test/tables' }, localDeps(origin.port));
  t.equal(result.url, 'http://public.test/tables');
  t.equal(result.tables.length, 5);
  t.same(result.tables[1], { headers: ['Port', 'Opened'], rows: [['Lisbon', '1147'], ['Antwerp', '1245']] });
});

// ---------------------------------------------------------------------------------------------
// inspect_domain: injected DNS records and a local TLS server with a certificate made now

const certDir = mkdtempSync(join(tmpdir(), 'research-cert-'));
t.teardown(() => rmSync(certDir, { recursive: true, force: true }));
execFileSync('openssl', [
  'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
  '-keyout', join(certDir, 'key.pem'), '-out', join(certDir, 'cert.pem'), '-days', '30',
  '-subj', '/O=Tollbooth Test/CN=public.test', '-addext', 'subjectAltName=DNS:public.test',
], { stdio: 'ignore' });
const certPem = readFileSync(join(certDir, 'cert.pem'));
const certificate = new X509Certificate(certPem);

let tlsConnections = 0;
const serverNames: Array<string | false> = [];
const tlsServer = createTlsServer(
  {
    key: readFileSync(join(certDir, 'key.pem')),
    cert: certPem,
    // Runs during the ClientHello, so it has run by the time the client sees the certificate.
    SNICallback: (name, done) => {
      serverNames.push(name);
      done(null, undefined);
    },
  },
  (socket) => socket.end(),
);
tlsServer.on('connection', () => (tlsConnections += 1));
await new Promise<void>((resolve) => tlsServer.listen(0, '127.0.0.1', resolve));
const tlsPort = (tlsServer.address() as AddressInfo).port;
t.teardown(() => new Promise<void>((resolve) => tlsServer.close(() => resolve())));

const dnsError = (code: string): Error => Object.assign(new Error(`query failed ${code}`), { code });

function fakeDns(calls: string[] = []): DnsRecordResolver {
  const answer =
    <T>(type: string, value: T | Error) =>
    async (name: string): Promise<T> => {
      calls.push(`${type} ${name}`);
      if (value instanceof Error) throw value;
      return value;
    };
  return {
    resolve4: answer('A', [PUBLIC_V4]),
    resolve6: answer('AAAA', dnsError('ENODATA')),
    resolveMx: answer('MX', [
      { exchange: 'mx2.public.test', priority: 20 },
      { exchange: 'mx1.public.test', priority: 10 },
    ]),
    resolveNs: answer('NS', ['ns1.public.test', 'ns2.public.test']),
    resolveTxt: answer('TXT', [['v=spf1 ', '-all'], ['hello']]),
    resolveCname: answer('CNAME', dnsError('ETIMEOUT')),
  } as unknown as DnsRecordResolver;
}

const validTo = new Date(certificate.validTo);
const tenAndAHalfDaysBefore = new Date(validTo.getTime() - 10.5 * 86_400_000);

function domainDeps(overrides: Partial<ResearchDeps> = {}): ResearchDeps {
  return { ...localDeps(tlsPort), dns: fakeDns(), now: () => tenAndAHalfDaysBefore, ...overrides };
}

t.test('inspect_domain reports DNS records and the live certificate', async (t) => {
  const report = await inspectDomain({ domain: 'public.test' }, domainDeps());
  t.same(report.records, {
    A: [PUBLIC_V4],
    AAAA: [],
    MX: [
      { exchange: 'mx1.public.test', priority: 10 },
      { exchange: 'mx2.public.test', priority: 20 },
    ],
    NS: ['ns1.public.test', 'ns2.public.test'],
    TXT: ['v=spf1 -all', 'hello'],
    CNAME: [],
  });
  t.same(report.dns_errors, ['CNAME: ETIMEOUT'], 'a failed lookup is reported; "no data" is not');
  t.match(report, { domain: 'public.test', address: PUBLIC_V4, tls_error: '' });
  t.same(report.certificate, {
    subject_cn: 'public.test',
    subject_o: 'Tollbooth Test',
    issuer_cn: 'public.test',
    issuer_o: 'Tollbooth Test',
    valid_from: new Date(certificate.validFrom).toISOString(),
    valid_to: validTo.toISOString(),
    days_left: 10,
    subject_alt_names: ['DNS:public.test'],
    authorized: false,
    authorization_error: 'DEPTH_ZERO_SELF_SIGNED_CERT',
  });
});

t.test('inspect_domain sends the domain as SNI to the checked address', async (t) => {
  serverNames.length = 0;
  const deps = domainDeps();
  await inspectDomain({ domain: 'public.test' }, deps);
  t.same(serverNames, ['public.test']);
  t.same((deps as ReturnType<typeof localDeps>).dialled.map((target) => target.address), [PUBLIC_V4]);
});

t.test('https fetches verify the certificate against the URL name (a self-signed one fails)', async (t) => {
  await t.rejects(fetchReadable({ url: 'https://public.test/' }, localDeps(tlsPort)), {
    code: 'RS_ERR_FETCH_FAILED',
    message: /^Fetching https:\/\/public\.test\/ failed \(DEPTH_ZERO_SELF_SIGNED_CERT\)/,
  });
});

t.test('inspect_domain accepts a URL or a trailing dot and inspects the bare name', async (t) => {
  const report = await inspectDomain({ domain: 'https://Public.Test./some/path' }, domainDeps());
  t.equal(report.domain, 'public.test');
});

t.test('inspect_domain refuses a private name before any DNS query or TLS connection', async (t) => {
  const before = tlsConnections;
  const calls: string[] = [];
  for (const domain of ['rebind.test', 'localhost', 'metadata.google.internal', 'mapped.test']) {
    await t.rejects(inspectDomain({ domain }, domainDeps({ dns: fakeDns(calls) })), { message: /^Refused: / }, domain);
  }
  t.same(calls, [], 'no record lookups');
  t.equal(tlsConnections, before, 'no TLS connection');
});

t.test('inspect_domain takes a name, not an IP address', async (t) => {
  await t.rejects(inspectDomain({ domain: '8.8.8.8' }, domainDeps()), {
    code: 'RS_ERR_INVALID_INPUT',
    message: 'inspect_domain takes a domain name such as example.com, not an IP address (8.8.8.8).',
  });
});

t.test('inspect_domain still reports records when nothing listens for TLS', async (t) => {
  const closed = await startOrigin({});
  const port = closed.port;
  await closed.close();
  const report = await inspectDomain({ domain: 'public.test' }, { ...localDeps(port), dns: fakeDns() });
  t.equal(report.certificate, null);
  t.match(report.tls_error, /ECONNREFUSED/);
  t.same(report.records.A, [PUBLIC_V4]);
});

t.test('the resolver used for the guard is the injected one', async (t) => {
  const resolver = tableResolver();
  await inspectDomain({ domain: 'public.test' }, { ...localDeps(tlsPort, resolver), dns: fakeDns() });
  t.same(resolver.calls, ['public.test']);
});
