// The gateway's namespace (SPEC §20): the text screen that decides whether a message is parsed, and the
// removal of `xyz.tollbooth/*` keys from every `_meta` object at any depth.
import t from 'tap';
import { GATEWAY_META_PREFIX, mayHoldGatewayMeta, mayHoldGatewayMetaBytes, stripGatewayMeta } from '../../src/mcp/namespace.js';

/** The key spelled with JSON escapes, as an upstream may write it. */
const spellings = [
  '"xyz.tollbooth/price"',
  '"xyz.tollbooth\\/price"',
  '"xyz\\u002etollbooth\\u002fprice"',
  '"\\u0078yz.tollbooth/price"',
  '"xyz.tollboot\\u0068/price"',
  '"xyz.to\\u006Clbooth/price"',
  '"\\u0078\\u0079\\u007A\\u002E\\u0074\\u006F\\u006C\\u006C\\u0062\\u006F\\u006F\\u0074\\u0068\\u002F"',
];

t.test('every spelling of a namespace key is caught by the screen, on text and on bytes, and decodes to the real key', async (t) => {
  for (const key of spellings) {
    const text = `{"result":{"_meta":{${key}:{"cost":0}}}}`;
    t.ok(mayHoldGatewayMeta(text), `text: ${key}`);
    t.ok(mayHoldGatewayMetaBytes(Buffer.from(text)), `bytes: ${key}`);
    const decoded = Object.keys((JSON.parse(text) as { result: { _meta: object } }).result._meta)[0];
    t.ok(decoded?.startsWith(GATEWAY_META_PREFIX), `${key} is the client's ${decoded}`);
  }
});

t.test('text that cannot spell a namespace key passes the screen unparsed', async (t) => {
  for (const text of [
    '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}],"_meta":{"vendor/x":1}}}',
    '{"text":"caf\\u00e9 \\u00fc \\u2603 \\n \\"quoted\\""}', // escapes of characters that are not in xyz.tollbooth/
    '{"_meta":{"xyz.tollboo":1,"tollbooth/price":2}}',
    '',
  ]) {
    t.notOk(mayHoldGatewayMeta(text), text);
    t.notOk(mayHoldGatewayMetaBytes(Buffer.from(text)), `bytes: ${text}`);
  }
  t.ok(mayHoldGatewayMeta('{"text":"about xyz.tollbooth in prose"}'), 'the literal anywhere is parsed (then nothing is removed)');
});

t.test('a marker at the very end of the text is seen (no read past the end)', async (t) => {
  t.ok(mayHoldGatewayMeta('xyz.tollbooth'));
  t.notOk(mayHoldGatewayMeta('"\\u00'));
  t.notOk(mayHoldGatewayMetaBytes(Buffer.from('"\\u007')));
  t.ok(mayHoldGatewayMetaBytes(Buffer.from('"\\u007a')));
});

t.test('stripGatewayMeta removes namespace keys from every _meta at any depth and keeps everything else', async (t) => {
  const message = {
    jsonrpc: '2.0',
    id: 1,
    result: {
      _meta: { 'xyz.tollbooth/challenge': { checkoutUrl: 'https://attacker.example/pay' }, 'vendor/keep': 1, 'xyz.tollbooth': 'no slash: not the namespace' },
      content: [{ type: 'text', text: 'xyz.tollbooth/receipt stays in text', _meta: { 'xyz.tollbooth/receipt': { remaining: 999 } } }],
      structuredContent: { 'xyz.tollbooth/price': 'outside _meta: the upstream content' },
      nested: [[{ deeper: { _meta: { 'xyz.tollbooth/refusal': {}, other: true, inner: { _meta: { 'xyz.tollbooth/x': 1 } } } } }]],
    },
  };
  t.equal(stripGatewayMeta(message), true);
  t.same(message, {
    jsonrpc: '2.0',
    id: 1,
    result: {
      _meta: { 'vendor/keep': 1, 'xyz.tollbooth': 'no slash: not the namespace' },
      content: [{ type: 'text', text: 'xyz.tollbooth/receipt stays in text', _meta: {} }],
      structuredContent: { 'xyz.tollbooth/price': 'outside _meta: the upstream content' },
      nested: [[{ deeper: { _meta: { other: true, inner: { _meta: {} } } } }]],
    },
  });
  t.equal(stripGatewayMeta(message), false, 'nothing left to remove');
});

t.test('batches, notifications, requests and errors are all covered', async (t) => {
  const batch = JSON.parse(
    '[{"jsonrpc":"2.0","method":"notifications/message","params":{"_meta":{"xyz.tollbooth/price":1},"data":{"_meta":{"xyz\\u002etollbooth\\u002fchallenge":2}}}},' +
      '{"jsonrpc":"2.0","id":"s1","method":"roots/list","params":{"_meta":{"xyz.tollbooth/refusal":3}}},' +
      '{"jsonrpc":"2.0","id":2,"error":{"code":-1,"message":"m","data":{"_meta":{"xyz.tollbooth/receipt":4}}}}]',
  ) as unknown;
  t.equal(stripGatewayMeta(batch), true);
  t.notMatch(JSON.stringify(batch), /xyz\.tollbooth\//);
});

t.test('own keys named __proto__ are data like any other; nothing reaches a prototype', async (t) => {
  const parsed = JSON.parse('{"__proto__":{"_meta":{"xyz.tollbooth/price":1,"keep":2}},"_meta":{"__proto__":{"x":1},"xyz.tollbooth/y":1}}') as Record<string, unknown>;
  t.equal(stripGatewayMeta(parsed), true);
  t.equal(JSON.stringify(parsed), '{"__proto__":{"_meta":{"keep":2}},"_meta":{"__proto__":{"x":1}}}');
  t.equal(({} as Record<string, unknown>).keep, undefined, 'Object.prototype untouched');
});

t.test('a message nested far deeper than the stack allows is walked without overflowing', async (t) => {
  const depth = 200_000;
  const text = `${'{"a":'.repeat(depth)}{"_meta":{"xyz.tollbooth/price":1}}${'}'.repeat(depth)}`;
  const parsed = JSON.parse(text) as unknown;
  t.equal(stripGatewayMeta(parsed), true);
});

t.test('non-object _meta values and primitives are left alone', async (t) => {
  t.equal(stripGatewayMeta(null), false);
  t.equal(stripGatewayMeta('xyz.tollbooth/price'), false);
  const value = { _meta: ['xyz.tollbooth/price'], other: { _meta: 'xyz.tollbooth/x' } };
  t.equal(stripGatewayMeta(value), false);
  t.same(value, { _meta: ['xyz.tollbooth/price'], other: { _meta: 'xyz.tollbooth/x' } });
});
