// The one reader of upstream replies (SPEC §5.4, §5.6, §6.5): JSON or SSE within maxResponseBytes,
// multi-line data joined, and exact matching of a response to its request id.
import t from 'tap';
import { Readable } from 'node:stream';
import { GatewayError } from '../../src/errors.js';
import { answers, collectResponses, holdsResponse, idKey, readCapped, readReply, readReplyChunks, responseTo, sameId } from '../../src/proxy/reply-reader.js';

const body = (...chunks: string[]): Readable => Readable.from(chunks.map((chunk) => Buffer.from(chunk)));
const SSE = 'text/event-stream';

t.test('readCapped returns the whole body as UTF-8 text', async (t) => {
  const bytes = Buffer.from('{"a":"☀️"}', 'utf8');
  t.equal(await readCapped(Readable.from([bytes.subarray(0, 8), bytes.subarray(8)]), 100), '{"a":"☀️"}');
});

t.test('a body of exactly maxBytes is accepted', async (t) => {
  t.equal((await readCapped(Readable.from([Buffer.alloc(10, 0x61)]), 10)).length, 10);
});

t.test('a body over maxBytes is refused with TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE and the source destroyed', async (t) => {
  let produced = 0;
  const source = new Readable({
    read() {
      produced++;
      this.push(Buffer.alloc(1024));
    },
  });
  const error = await readCapped(source, 4096).catch((e: unknown) => e);
  t.ok(error instanceof GatewayError);
  t.equal((error as GatewayError).code, 'TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE');
  t.ok(source.destroyed, 'the upstream body is dropped');
  t.ok(produced < 20, `stopped reading after ${produced} chunks`);
});

t.test('a JSON reply yields once; an SSE reply yields every event, data lines joined with newlines', async (t) => {
  const json = [];
  for await (const value of readReply(body('{"jsonrpc":"2.0","id":1,"result":{}}'), 'application/json', 1024)) json.push(value);
  t.same(json, [{ event: null, value: { jsonrpc: '2.0', id: 1, result: {} } }]);

  const sse = [];
  for await (const { value, event } of readReply(body('id: 1\ndata: \n\n', 'data: {"jsonrpc":"2.0",\ndata:  "id":2,\ndata: "result":{}}\n\n'), SSE, 1024)) sse.push({ value, id: event?.lines[0] });
  t.same(sse, [
    { value: undefined, id: 'id: 1' },
    { value: { jsonrpc: '2.0', id: 2, result: {} }, id: 'data: {"jsonrpc":"2.0",' },
  ]);
});

t.test('events that arrive together come together (the priced path checks what follows its result)', async (t) => {
  const chunks = [];
  for await (const values of readReplyChunks(body('data: 1\n\ndata: 2\n\n', 'data: 3\n\n'), SSE, 1024)) chunks.push(values.map((v) => v.value));
  t.same(chunks, [[1, 2], [3]]);
});

t.test('a reply that is neither JSON nor an event stream is a bad response', async (t) => {
  await t.rejects(collectResponses(body('<html>'), 'text/html', 1024), { code: 'TB_ERR_UPSTREAM_BAD_RESPONSE' });
});

t.test('collectResponses flattens arrays and skips requests and notifications', async (t) => {
  const responses = await collectResponses(body('data: [{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","method":"n"}]\n\n', 'data: {"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m"}}\n\n'), SSE, 1024);
  t.same(responses.map((r) => r.id), [1, 2]);
});

t.test('ids match by type and value: 5 is not "5"; a response inside an array does not answer a single request', async (t) => {
  t.equal(sameId(5, 5), true);
  t.equal(sameId('5', 5), false);
  t.equal(sameId(null, null), true);
  t.equal(answers({ jsonrpc: '2.0', id: 5, result: {} }, 5), true);
  t.equal(answers({ jsonrpc: '2.0', id: '5', result: {} }, 5), false);
  t.equal(answers([{ jsonrpc: '2.0', id: 5, result: {} }], 5), false);
  t.equal(answers({ jsonrpc: '2.0', id: 5, method: 'x' }, 5), false, 'a request with that id is not a response');
  t.equal(idKey(5) === idKey('5'), false);
  t.equal(holdsResponse([{ jsonrpc: '2.0', method: 'n' }]), false);
  t.equal(holdsResponse([{ jsonrpc: '2.0', id: 1, result: {} }]), true);
});

t.test('responseTo: the one response to an id, null when none, ambiguous when several', async (t) => {
  const a = { jsonrpc: '2.0' as const, id: 1, result: {} };
  const b = { jsonrpc: '2.0' as const, id: '1', result: {} };
  t.equal(responseTo([a, b], 1), a);
  t.equal(responseTo([b], 1), null);
  t.equal(responseTo([a, a], 1), 'ambiguous');
});
