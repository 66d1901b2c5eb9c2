// test/setup/children.ts: a child spawned with NODE_OPTIONS '' (or without it) runs without tap's hooks;
// a child that inherits the test's environment keeps them.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import t from 'tap';

const run = promisify(execFile);
const script = 'process.stdout.write(JSON.stringify({ options: process.env.NODE_OPTIONS ?? null, tap: Object.keys(process.env).filter((k) => k.startsWith("_TAPJS_PROCESSINFO_")).length }))';
const child = async (env: NodeJS.ProcessEnv): Promise<{ options: string | null; tap: number }> =>
  JSON.parse((await run(process.execPath, ['-e', script], { env })).stdout) as { options: string | null; tap: number };

t.test('NODE_OPTIONS cleared by the caller stays cleared, and no processinfo variables follow', async (t) => {
  t.same(await child({ ...process.env, NODE_OPTIONS: '' }), { options: '', tap: 0 });
  const { NODE_OPTIONS: _dropped, ...without } = process.env;
  t.same(await child(without), { options: null, tap: 0 }, 'removed stays removed');
});

t.test('a child that inherits the test\'s environment keeps tap\'s hooks', { skip: process.env.NODE_OPTIONS?.includes('@tapjs/processinfo') ? false : 'not run by tap' }, async (t) => {
  const seen = await child({ ...process.env });
  t.match(seen.options, /@tapjs\/processinfo/);
  t.ok(seen.tap > 0);
});
