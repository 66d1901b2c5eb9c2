// JSON-RPC envelopes: what counts as a request, a response, an id (src/mcp/jsonrpc.ts).
import t from 'tap';
import { errorResponse, hasId, idOf, isObject, isRequestLike, isResponseLike, isValidMessage, resultResponse } from '../../src/mcp/jsonrpc.js';

t.test('isObject is true only for plain non-array objects', async (t) => {
  t.equal(isObject({}), true);
  for (const value of [null, [], 'x', 1, undefined, true]) t.equal(isObject(value), false, JSON.stringify(value));
});

t.test('a request needs jsonrpc "2.0" and a string method', async (t) => {
  t.equal(isRequestLike({ jsonrpc: '2.0', id: 1, method: 'ping' }), true);
  t.equal(isRequestLike({ jsonrpc: '2.0', method: 'notifications/initialized' }), true, 'a notification');
  t.equal(isRequestLike({ jsonrpc: '2.0', id: 1 }), false);
  t.equal(isRequestLike({ id: 1, method: 'ping' }), false, 'no jsonrpc');
  t.equal(isRequestLike({ jsonrpc: 2, id: 1, method: 'ping' }), false, 'numeric version');
  t.equal(isRequestLike({ jsonrpc: '2.0', id: 1, method: ['ping'] }), false);
});

t.test('ids are strings, finite numbers or null', async (t) => {
  for (const id of ['a', '', 0, -1, 1.5, null]) t.equal(isRequestLike({ jsonrpc: '2.0', id, method: 'm' }), true, JSON.stringify(id));
  for (const id of [{}, [], true, Number.NaN, Number.POSITIVE_INFINITY]) t.equal(isRequestLike({ jsonrpc: '2.0', id, method: 'm' }), false, `${typeof id} ${JSON.stringify(id)}`);
});

t.test('a response has an id and a result or an error, and no method', async (t) => {
  t.equal(isResponseLike({ jsonrpc: '2.0', id: 1, result: {} }), true);
  t.equal(isResponseLike({ jsonrpc: '2.0', id: null, error: { code: 1, message: 'x' } }), true);
  t.equal(isResponseLike({ jsonrpc: '2.0', id: 1 }), false, 'neither result nor error');
  t.equal(isResponseLike({ jsonrpc: '2.0', result: {} }), false, 'no id');
  t.equal(isResponseLike({ jsonrpc: '2.0', id: 1, method: 'm', result: {} }), false, 'a method makes it a request');
});

t.test('isValidMessage accepts requests and responses only', async (t) => {
  t.equal(isValidMessage({ jsonrpc: '2.0', id: 1, method: 'm' }), true);
  t.equal(isValidMessage({ jsonrpc: '2.0', id: 1, result: 1 }), true);
  t.equal(isValidMessage({}), false);
  t.equal(isValidMessage([]), false);
});

t.test('hasId tells a request from a notification (id null is an id)', async (t) => {
  t.equal(hasId({ jsonrpc: '2.0', method: 'm' }), false);
  t.equal(hasId({ jsonrpc: '2.0', method: 'm', id: null }), true);
  t.equal(hasId({ jsonrpc: '2.0', method: 'm', id: 0 }), true);
});

t.test('error responses carry data only when given', async (t) => {
  t.same(errorResponse(3, -32600, 'bad'), { jsonrpc: '2.0', id: 3, error: { code: -32600, message: 'bad' } });
  t.notOk('data' in (errorResponse(3, -32600, 'bad').error as object));
  t.same(errorResponse(null, -1, 'x', { why: 1 }).error, { code: -1, message: 'x', data: { why: 1 } });
});

t.test('result responses wrap the result with the id', async (t) => {
  t.same(resultResponse('a', { ok: true }), { jsonrpc: '2.0', id: 'a', result: { ok: true } });
});

t.test('idOf returns a usable id or null', async (t) => {
  t.equal(idOf({ id: 4 }), 4);
  t.equal(idOf({ id: 'x' }), 'x');
  t.equal(idOf({ id: {} }), null);
  t.equal(idOf([{ id: 1 }]), null);
  t.equal(idOf('x'), null);
  t.equal(idOf({}), null);
});
