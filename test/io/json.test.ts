// io/json.ts: peers' JSON parsed without throwing; what counts as a plain object.
import t from 'tap';
import { isRecord, parseJsonOrUndefined } from '../../src/io/json.js';

t.test('parseJsonOrUndefined never throws', async (t) => {
  t.same(parseJsonOrUndefined('{"a":1}'), { a: 1 });
  t.equal(parseJsonOrUndefined('{'), undefined);
  t.equal(parseJsonOrUndefined(''), undefined);
  t.equal(parseJsonOrUndefined('null'), null, 'JSON null is a value, not "not JSON"');
});

t.test('isRecord: objects, not null, arrays or primitives', async (t) => {
  t.ok(isRecord({}));
  t.ok(isRecord({ a: 1 }));
  t.ok(isRecord(Object.create(null)));
  for (const value of [null, undefined, [], [1], 'x', 1, true]) t.notOk(isRecord(value), JSON.stringify(value) ?? String(value));
});
