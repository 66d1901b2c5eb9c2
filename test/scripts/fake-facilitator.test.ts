// scripts/fake-facilitator.mjs as an operator uses it: started on its own, its printed URL put in a
// gateway's payments.x402.facilitatorUrl, an agent pays a call through it (the official x402 client
// libraries), and Ctrl-C stops it with a count of what it verified and settled.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import { childEnv, ROOT } from '../helpers/gateway-process.js';
import { freePort, startTestGateway, testConfig } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { paymentMeta, paymentRequiredOf, withX402 } from '../helpers/x402-gateway.js';
import { newPayer } from '../helpers/x402-payer.js';

type Json = Record<string, any>;

function script(args: string[]): { child: ChildProcess; stdout: () => string; stderr: () => string } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/fake-facilitator.mjs', ...args], { cwd: ROOT, env: childEnv() });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return { child, stdout: () => stdout, stderr: () => stderr };
}

async function listening(run: ReturnType<typeof script>): Promise<string> {
  while (!/listening on (\S+)\n/.test(run.stdout())) {
    if (run.child.exitCode !== null) throw new Error(`the script exited ${run.child.exitCode}: ${run.stderr()}`);
    await once(run.child.stdout!, 'data');
  }
  return /listening on (\S+)\n/.exec(run.stdout())![1] as string;
}

t.test('--help prints the usage, exit 0', async (t) => {
  const run = script(['--help']);
  const [code] = (await once(run.child, 'exit')) as [number];
  t.equal(code, 0, run.stderr());
  t.match(run.stdout(), /^usage: node --import tsx scripts\/fake-facilitator\.mjs \[--port N\]/);
});

t.test('a bad --port is a usage error, exit 2', async (t) => {
  const run = script(['--port', 'eighty']);
  const [code] = (await once(run.child, 'exit')) as [number];
  t.equal(code, 2);
  t.match(run.stderr(), /--port must be a port number from 0 to 65535, got "eighty"/);
});

t.test('a gateway pointed at the URL it prints takes an x402 payment through it; SIGTERM stops it with the counts', async (t) => {
  const port = await freePort();
  const run = script(['--port', String(port)]);
  t.teardown(() => void run.child.kill('SIGKILL'));
  const url = await listening(run);
  t.equal(url, `http://127.0.0.1:${port}`, 'on the port asked for');
  t.match(run.stdout(), `facilitatorUrl: ${url}`, 'the config line to paste');

  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, withX402(testConfig(upstream.url), url));
  const client = new Client({ name: 'facilitator-script', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  const args = { url: 'https://example.com/script' };
  const challenge = (await client.callTool({ name: 'fetch_readable', arguments: args })) as Json;
  const payload = await newPayer().pay(paymentRequiredOf(challenge));
  const paid = (await client.callTool({ name: 'fetch_readable', arguments: args, _meta: paymentMeta(payload) })) as Json;
  t.notOk(paid.isError, 'the paid call is served');
  t.match(paid._meta?.['x402/payment-response'], { success: true, transaction: /^0x[0-9a-f]{64}$/ }, 'settled by the script');
  t.equal(upstream.callsOf('fetch_readable').length, 1, 'the tool ran once');

  run.child.kill('SIGTERM');
  const [code] = (await once(run.child, 'exit')) as [number];
  t.equal(code, 0);
  t.match(run.stdout(), 'verified 1, settled 1 payment(s); stopping');
});
