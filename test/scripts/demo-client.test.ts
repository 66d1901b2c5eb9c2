// scripts/demo-client.mjs as a newcomer meets it: --help documents --url, and a gateway that is not
// running gets a sentence saying what to check instead of a raw `fetch failed` stack.
import { execFile } from 'node:child_process';
import t from 'tap';
import { ROOT } from '../helpers/gateway-process.js';
import { freePort } from '../helpers/gateway.js';

function demo(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['scripts/demo-client.mjs', ...args], { cwd: ROOT, env: { ...process.env, NODE_OPTIONS: '' } }, (error, stdout, stderr) => {
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

t.test('--help prints the usage with --url, exit 0', async (t) => {
  const run = await demo(['--help']);
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, /^usage: node scripts\/demo-client\.mjs \[--url URL\]/);
  t.match(run.stdout, /--url URL\s+the gateway's MCP endpoint \(default http:\/\/127\.0\.0\.1:8080\/mcp/);
});

t.test('no gateway on --url: "is the gateway running on <url>?", exit 1, no stack', async (t) => {
  const url = `http://127.0.0.1:${await freePort()}/mcp`;
  const run = await demo(['--url', url]);
  t.equal(run.code, 1);
  t.match(run.stderr, `is the gateway running on ${url}?`);
  t.notMatch(run.stderr, /fetch failed|\n\s+at /, 'no raw error or stack trace');
});

t.test('an unknown flag: the usage on stderr, exit 2', async (t) => {
  const run = await demo(['--bogus']);
  t.equal(run.code, 2);
  t.match(run.stderr, /Unknown option '--bogus'[\s\S]*usage: node scripts\/demo-client\.mjs/);
});
