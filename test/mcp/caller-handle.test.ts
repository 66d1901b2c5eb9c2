// mcp/caller-handle.ts (SPEC §23): the handle a tools/list names in params._meta is read and removed
// from whatever is forwarded; nothing else in the message changes.
import t from 'tap';
import { CALLER_HANDLE_META_KEY, callerHandleOf, withoutCallerHandle } from '../../src/mcp/caller-handle.js';

const list = (meta?: Record<string, unknown>) => ({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: meta ? { cursor: 'c', _meta: meta } : {} });

t.test('reads a string handle only', async (t) => {
  t.equal(callerHandleOf(list({ [CALLER_HANDLE_META_KEY]: 'tb_s_abc' })), 'tb_s_abc');
  t.equal(callerHandleOf(list({ [CALLER_HANDLE_META_KEY]: 42 })), null);
  t.equal(callerHandleOf(list()), null);
  t.equal(callerHandleOf('nonsense'), null);
});

t.test('removes the key and keeps the rest, in a message or a batch; untouched values are the same objects', async (t) => {
  const message = list({ [CALLER_HANDLE_META_KEY]: 'tb_s_abc', progressToken: 7 });
  t.same(withoutCallerHandle(message), { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { cursor: 'c', _meta: { progressToken: 7 } } });
  t.equal(message.params._meta?.[CALLER_HANDLE_META_KEY], 'tb_s_abc', 'the original is not mutated');
  const plain = list({ progressToken: 1 });
  t.equal(withoutCallerHandle(plain), plain);
  const batch = [plain, message];
  const out = withoutCallerHandle(batch) as unknown[];
  t.equal(out[0], plain);
  t.notOk(JSON.stringify(out).includes('tb_s_abc'));
  const unchanged = [plain];
  t.equal(withoutCallerHandle(unchanged), unchanged, 'a batch without the key is the same array');
});
