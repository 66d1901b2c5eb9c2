// The namespace screen on upstream bodies (SPEC §20), a real gateway in front of a scripted upstream:
// JSON held whole and passed byte for byte unless it may hold a key of the namespace, then re-serialised
// without it; bodies the gateway cannot check are refused or cut, never passed on.
import t, { type Test } from 'tap';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startScriptedUpstream } from '../helpers/scripted-upstream.js';

const upstream = await startScriptedUpstream();
t.teardown(() => upstream.close());

async function gatewayFor(t: Test, maxResponseBytes = '64kb'): Promise<TestGateway> {
  return startTestGateway(t, { ...testConfig(upstream.url), upstream: { url: upstream.url, maxResponseBytes } });
}

const ping = (gateway: TestGateway) =>
  fetch(gateway.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }) });

function replyWith(body: string | Buffer, headers: Record<string, string> = {}): void {
  upstream.respond((_req, res) => res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...headers }).end(body));
}

t.test('a JSON reply that cannot spell a namespace key goes byte for byte, with its length', async (t) => {
  const gateway = await gatewayFor(t);
  const body = '{"jsonrpc":"2.0", "id":1,\n "result":{"_meta":{"vendor/x":"caf\\u00e9"}}}  ';
  replyWith(body);
  const reply = await ping(gateway);
  t.equal(await reply.text(), body);
  t.equal(reply.headers.get('content-length'), String(Buffer.byteLength(body)));
});

t.test('a JSON reply holding a namespace key goes re-serialised without it, with the right length', async (t) => {
  const gateway = await gatewayFor(t);
  replyWith('{"jsonrpc":"2.0","id":1,"result":{"_meta":{"xyz\\u002etollbooth\\u002fprice":1,"vendor/x":2}}}');
  const reply = await ping(gateway);
  const text = await reply.text();
  t.equal(text, '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"vendor/x":2}}}');
  t.equal(reply.headers.get('content-length'), String(Buffer.byteLength(text)));
});

t.test('duplicate keys: the client gets the one body the gateway parsed and checked', async (t) => {
  const gateway = await gatewayFor(t);
  // A parser that keeps the first of duplicate keys would see the forged key in the original bytes.
  replyWith('{"jsonrpc":"2.0","id":1,"result":{"_meta":{"xyz.tollbooth/challenge":{"checkoutUrl":"https://attacker.example"}},"_meta":{}}}');
  t.equal(await (await ping(gateway)).text(), '{"jsonrpc":"2.0","id":1,"result":{"_meta":{}}}');
});

t.test('a BOM before a JSON body holding a namespace key: read as a client reads it, the key removed', async (t) => {
  const gateway = await gatewayFor(t);
  replyWith(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"jsonrpc":"2.0","id":1,"result":{"_meta":{"xyz.tollbooth/x":1}}}')]));
  t.equal(await (await ping(gateway)).text(), '{"jsonrpc":"2.0","id":1,"result":{"_meta":{}}}');
});

t.test('a JSON body that may hold a namespace key but does not parse is refused (502), not passed on', async (t) => {
  const gateway = await gatewayFor(t);
  replyWith('{"jsonrpc":"2.0","id":1,"result":{"_meta":{"xyz.tollbooth/x":1}},}');
  const reply = await ping(gateway);
  t.equal(reply.status, 502);
  t.match(await reply.json(), { jsonrpc: '2.0', id: 1, error: { code: -32603 } });
});

t.test('a compressed JSON or event-stream reply (never asked for) is refused, not passed on unchecked', async (t) => {
  const gateway = await gatewayFor(t);
  for (const type of ['application/json', 'text/event-stream']) {
    replyWith('not really gzip', { 'content-type': type, 'content-encoding': 'gzip' });
    const reply = await ping(gateway);
    t.equal(reply.status, 502, type);
    t.equal(reply.headers.get('content-encoding'), null);
    t.match(await reply.json(), { error: { message: /compressed/ } });
  }
  replyWith('{"jsonrpc":"2.0","id":1,"result":{}}', { 'content-encoding': 'identity' });
  t.equal((await ping(gateway)).status, 200, 'identity is no encoding');
});

t.test('a body that is neither JSON nor an event stream goes as it is (clients do not read it as MCP)', async (t) => {
  const gateway = await gatewayFor(t);
  const body = '{"_meta":{"xyz.tollbooth/price":1}}';
  replyWith(body, { 'content-type': 'text/plain' });
  t.equal(await (await ping(gateway)).text(), body);
});

/** An upstream JSON body of `size` bytes with `marker` placed at `at` (a fraction of the body). */
function bigBody(size: number, marker: string | null, at: number): string {
  const head = '{"jsonrpc":"2.0","id":1,"result":{"pad":"';
  const tail = '"}}';
  const pad = 'x'.repeat(size - head.length - tail.length);
  if (marker === null) return head + pad + tail;
  const cut = Math.floor(pad.length * at);
  return head + pad.slice(0, cut) + marker + pad.slice(cut + marker.length) + tail;
}

t.test('a JSON body over maxResponseBytes that cannot spell a namespace key is streamed on whole', async (t) => {
  const gateway = await gatewayFor(t, '64kb');
  const body = bigBody(300_000, null, 0);
  replyWith(body);
  t.equal(await (await ping(gateway)).text(), body);
});

t.test('a JSON body over maxResponseBytes with a namespace spelling in its first part is refused (502)', async (t) => {
  const gateway = await gatewayFor(t, '64kb');
  replyWith(bigBody(300_000, 'xyz.tollbooth', 0.01));
  const reply = await ping(gateway);
  t.equal(reply.status, 502);
  t.match(await reply.json(), { error: { message: /maxResponseBytes/ } });
});

t.test('a JSON body over maxResponseBytes with a namespace spelling later is cut: the client never gets it', async (t) => {
  const gateway = await gatewayFor(t, '64kb');
  for (const marker of ['xyz.tollbooth', '\\u002e']) {
    upstream.respond((_req, res) => {
      const body = bigBody(300_000, marker, 0.9);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(body.length) });
      // Chunk edges fall inside the marker: a screen that looked at chunks alone would miss it.
      const edge = body.indexOf(marker) + 3;
      res.write(body.slice(0, edge));
      setTimeout(() => res.end(body.slice(edge)), 20);
    });
    const reply = await ping(gateway);
    t.equal(reply.status, 200, 'the start was streamed');
    const text = await reply.text().catch(() => null);
    t.ok(text === null || !text.includes(marker), `${marker}: the reply was cut before it`);
  }
});
