// Reading upstream bodies the gateway must parse, never past maxResponseBytes.
import t from 'tap';
import { Readable } from 'node:stream';
import { discard, parseJsonOrUndefined, readCapped } from '../../src/proxy/body.js';
import { GatewayError } from '../../src/errors.js';

t.test('readCapped returns the whole body as UTF-8 text', async (t) => {
  const bytes = Buffer.from('{"a":"☀️"}', 'utf8');
  t.equal(await readCapped(Readable.from([bytes.subarray(0, 8), bytes.subarray(8)]), 100), '{"a":"☀️"}');
});

t.test('a body of exactly maxBytes is accepted', async (t) => {
  t.equal((await readCapped(Readable.from([Buffer.alloc(10, 0x61)]), 10)).length, 10);
});

t.test('a body over maxBytes is refused with TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE and the source destroyed', async (t) => {
  let produced = 0;
  const body = new Readable({
    read() {
      produced++;
      this.push(Buffer.alloc(1024));
    },
  });
  const error = await readCapped(body, 4096).catch((e: unknown) => e);
  t.ok(error instanceof GatewayError);
  t.equal((error as GatewayError).code, 'TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE');
  t.equal((error as GatewayError).status, 502);
  t.ok(body.destroyed, 'the upstream body is dropped');
  t.ok(produced < 20, `stopped reading after ${produced} chunks`);
});

t.test('discard swallows a late error instead of crashing the process', async (t) => {
  const body = new Readable({ read() {} });
  discard(body);
  body.emit('error', new Error('late abort'));
  t.ok(body.destroyed);
});

t.test('parseJsonOrUndefined never throws', async (t) => {
  t.same(parseJsonOrUndefined('{"a":1}'), { a: 1 });
  t.equal(parseJsonOrUndefined('{'), undefined);
  t.equal(parseJsonOrUndefined(''), undefined);
  t.equal(parseJsonOrUndefined('null'), null);
});
