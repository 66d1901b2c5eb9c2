// RESEARCH_OFFLINE_ORIGIN: a fetch for any public-looking URL is dialled to the local origin, with the
// SSRF guard still in the way of every private or loopback URL; a malformed value is refused.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { offlineOriginDeps } from '../../src/research/offline-origin.js';
import { fetchReadable } from '../../src/research/tools.js';

t.test('unset or empty: no deps (the real resolver and direct connections)', async (t) => {
  t.same(offlineOriginDeps(undefined), {});
  t.same(offlineOriginDeps(''), {});
});

t.test('a malformed value is refused with what to write', async (t) => {
  for (const value of ['127.0.0.1', 'localhost:0', 'host:70000', 'http://127.0.0.1:80', ':80']) {
    t.throws(() => offlineOriginDeps(value), /RESEARCH_OFFLINE_ORIGIN must be host:port/, value);
  }
});

t.test('a page on the local origin is read for a public URL; loopback and private URLs are still refused', async (t) => {
  const origin = createServer((request, response) => {
    response.writeHead(200, { 'content-type': 'text/html' });
    response.end(`<html><head><title>Offline page</title></head><body><p>Served locally for ${request.headers.host}</p></body></html>`);
  });
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
  t.teardown(() => origin.close());
  const deps = offlineOriginDeps(`127.0.0.1:${(origin.address() as AddressInfo).port}`);
  const page = await fetchReadable({ url: 'http://example.com/' }, deps);
  t.equal(page.title, 'Offline page');
  t.match(page.text, /Served locally for example\.com/, 'the request keeps its Host');
  await t.rejects(fetchReadable({ url: 'http://127.0.0.1/' }, deps), { code: 'RS_ERR_ADDRESS' }, 'a loopback URL is refused before any connection');
  await t.rejects(fetchReadable({ url: 'http://10.0.0.1/' }, deps), { code: 'RS_ERR_ADDRESS' }, 'a private URL too');
});
