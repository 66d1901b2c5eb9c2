// skipUnlessInstalled: a skip on a developer's machine, a failure under CI=true.
import t from 'tap';
import { skipUnlessInstalled } from './required-tool.js';

const recorder = (): { fail: (message?: string) => boolean; failures: string[] } => {
  const failures: string[] = [];
  return { failures, fail: (message = '') => failures.push(message) > 0 };
};

t.test('a missing tool is a skip reason outside CI, and nothing fails', async (t) => {
  const r = recorder();
  t.equal(skipUnlessInstalled(r, 'promtool is not installed', {}), 'promtool is not installed');
  t.same(r.failures, []);
});

t.test('under CI=true a missing tool also records a failure naming it', async (t) => {
  const r = recorder();
  skipUnlessInstalled(r, 'promtool is not installed', { CI: 'true' });
  t.same(r.failures, ['required in CI (CI=true): promtool is not installed']);
});

t.test('a tool that is there is neither skipped nor failed, in CI or not', async (t) => {
  const r = recorder();
  t.equal(skipUnlessInstalled(r, false, { CI: 'true' }), false);
  t.same(r.failures, []);
});
