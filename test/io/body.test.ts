// io/body.ts: the capped body reader every peer's answer goes through, and dropping a body unread.
import { Readable } from 'node:stream';
import t from 'tap';
import { discard, readCapped } from '../../src/io/body.js';

class TooLarge extends Error {
  constructor(readonly limit: number) {
    super(`over ${limit}`);
  }
}
const tooLarge = (limit: number): Error => new TooLarge(limit);

t.test('readCapped joins chunks as UTF-8, a character split across chunks included', async (t) => {
  const bytes = Buffer.from('{"a":"☀️"}', 'utf8');
  t.equal(await readCapped(Readable.from([bytes.subarray(0, 8), bytes.subarray(8)]), 100, tooLarge), '{"a":"☀️"}');
  t.equal(await readCapped(Readable.from(['text ', 'chunks']), 100, tooLarge), 'text chunks', 'string chunks too');
  t.equal(await readCapped(Readable.from([]), 0, tooLarge), '', 'an empty body');
});

t.test('exactly the limit is read; one byte more throws the caller\'s error and stops reading', async (t) => {
  t.equal((await readCapped(Readable.from([Buffer.alloc(10, 0x61)]), 10, tooLarge)).length, 10);
  let produced = 0;
  const source = new Readable({
    read() {
      produced++;
      this.push(Buffer.alloc(1024));
    },
  });
  const error = await readCapped(source, 4096, tooLarge).catch((e: unknown) => e);
  t.ok(error instanceof TooLarge, 'the error the caller made');
  t.equal((error as TooLarge).limit, 4096, 'given the limit');
  t.ok(source.destroyed, 'the body is dropped');
  t.ok(produced < 20, `stopped reading after ${produced} chunks`);
  t.equal(source.listenerCount('error') > 0, true, 'a late error on the dropped body has a listener');
});

t.test('discard swallows a late error instead of crashing the process', async (t) => {
  const source = new Readable({ read() {} });
  discard(source);
  source.emit('error', new Error('late abort'));
  t.ok(source.destroyed);
});
