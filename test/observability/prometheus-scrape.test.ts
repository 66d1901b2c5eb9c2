// A real Prometheus server (Debian `prometheus`) scrapes a running gateway on loopback and answers
// a query for tollbooth_paid_calls_total: the exposition is not only lint-clean, it is ingestible.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { freePort, startTestGateway, testConfig } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { skipUnlessInstalled } from '../helpers/required-tool.js';

const installed = spawnSync('prometheus', ['--version']).status === 0;
const skip = skipUnlessInstalled(t, installed ? false : 'prometheus is not installed (apt-get install prometheus)');

interface QueryResult {
  status: string;
  data: { resultType: string; result: { metric: Record<string, string>; value: [number, string] }[] };
}

t.test('Prometheus scrapes the gateway and `tollbooth_paid_calls_total` returns data', { skip }, async (t) => {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  // One priced call without a token: a challenge, so the counter has a series to scrape.
  const client = new Client({ name: 'prometheus-scrape-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  const challenge = await client.callTool({ name: 'fetch_readable', arguments: { url: 'https://example.com/' } });
  t.equal(challenge.isError, true, 'the call was challenged');

  const dir = mkdtempSync(join(tmpdir(), 'tollbooth-prometheus-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const target = new URL(gateway.origin).host;
  writeFileSync(
    join(dir, 'prometheus.yml'),
    [
      'global:',
      '  scrape_interval: 1s',
      '  scrape_timeout: 1s',
      'scrape_configs:',
      '  - job_name: tollbooth',
      `    metrics_path: ${gateway.config.metrics.path}`,
      '    static_configs:',
      `      - targets: ['${target}']`,
      '',
    ].join('\n'),
  );
  const port = await freePort();
  const prometheus = spawn(
    'prometheus',
    [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, NODE_OPTIONS: '' } },
  );
  let stderr = '';
  prometheus.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((resolve) => prometheus.once('exit', () => resolve()));
  t.teardown(async () => {
    prometheus.kill('SIGTERM');
    const stopped = await Promise.race([exited.then(() => true), sleep(5_000).then(() => false)]);
    if (!stopped) prometheus.kill('SIGKILL');
  });

  const query = `http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent('tollbooth_paid_calls_total')}`;
  let answer: QueryResult | null = null;
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline && prometheus.exitCode === null) {
    try {
      const response = await fetch(query);
      if (response.ok) {
        const body = (await response.json()) as QueryResult;
        if (body.data.result.length > 0) {
          answer = body;
          break;
        }
      }
    } catch {
      // not listening yet
    }
    await sleep(250);
  }
  t.ok(answer, `the query returned data (prometheus stderr: ${stderr.slice(-500)})`);
  const series = answer?.data.result ?? [];
  const challenged = series.find((s) => s.metric.outcome === 'challenged');
  t.ok(challenged, 'a series for the challenged call');
  t.match(challenged?.metric, { __name__: 'tollbooth_paid_calls_total', job: 'tollbooth', instance: target, tool: 'fetch_readable', sku: 'research' });
  t.equal(challenged?.value[1], '1', 'its value is the one challenge');
});
