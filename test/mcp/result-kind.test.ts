// Which tools/call results are finished (charged by the usual rules) and which are not: input_required
// (2026-07-28) and tasks (2025-11-25 CreateTaskResult, the 2026-07-28 tasks extension).
import t from 'tap';
import { resultKind } from '../../src/mcp/result-kind.js';

const response = (result: unknown) => ({ jsonrpc: '2.0' as const, id: 1, result }) as never;

t.test('an ordinary result, an error result and an error response are complete', async (t) => {
  t.same(resultKind(response({ content: [] })), { kind: 'complete' });
  t.same(resultKind(response({ content: [], isError: true })), { kind: 'complete' });
  t.same(resultKind(response({ content: [], resultType: 'complete' })), { kind: 'complete' });
  t.same(resultKind({ jsonrpc: '2.0', id: 1, error: { code: -32603, message: 'x' } } as never), { kind: 'complete' });
});

t.test('resultType input_required is input_required', async (t) => {
  t.same(resultKind(response({ resultType: 'input_required', requestState: 's' })), { kind: 'input_required' });
});

t.test('a 2025-11-25 CreateTaskResult is a task with its id', async (t) => {
  t.same(resultKind(response({ task: { taskId: 'abc', status: 'working', createdAt: 'x', ttl: null } })), { kind: 'task', taskId: 'abc' });
});

t.test('a 2026-07-28 resultType task is a task with its id (flat fields)', async (t) => {
  t.same(resultKind(response({ resultType: 'task', taskId: 'xyz', status: 'working' })), { kind: 'task', taskId: 'xyz' });
});

t.test('a task without a usable id, or a tool result that merely has a task field beside resultType complete, is complete', async (t) => {
  t.same(resultKind(response({ task: { taskId: '' } })), { kind: 'complete' });
  t.same(resultKind(response({ task: { taskId: 7 } })), { kind: 'complete' });
  t.same(resultKind(response({ resultType: 'complete', task: { taskId: 'abc' } })), { kind: 'complete' });
});
