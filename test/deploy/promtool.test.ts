// deploy/prometheus is checked by Prometheus' own tool: the rule file and the config parse, and
// each alert fires on the series it is meant for and stays quiet on a healthy look-alike.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { parse, stringify } from 'yaml';
import { skipUnlessInstalled } from '../helpers/required-tool.js';

const run = promisify(execFile);
const repo = resolve(import.meta.dirname, '../..');
const alertsPath = join(repo, 'deploy/prometheus/alerts.yml');
const configPath = join(repo, 'deploy/prometheus/prometheus.yml');

async function promtoolVersion(): Promise<string | null> {
  try {
    const { stdout, stderr } = await run('promtool', ['--version']);
    return (stdout || stderr).split('\n')[0] ?? 'promtool';
  } catch {
    return null;
  }
}

async function promtool(args: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run('promtool', args, { cwd: repo });
    return { code: 0, output: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : 1, output: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

const version = await promtoolVersion();
const skip = skipUnlessInstalled(t, version === null ? 'promtool is not installed (apt-get install prometheus, or put promtool on PATH)' : false);

t.test('promtool check rules accepts deploy/prometheus/alerts.yml', { skip }, async (t) => {
  const { code, output } = await promtool(['check', 'rules', alertsPath]);
  t.equal(code, 0, output);
  t.match(output, /SUCCESS: 7 rules found/);
});

t.test('promtool check config accepts prometheus.yml and the rule file it references', { skip }, async (t) => {
  const { code, output } = await promtool(['check', 'config', configPath]);
  t.equal(code, 0, output);
  t.match(output, /SUCCESS: 1 rule files found/, 'alerts.yml resolved relative to prometheus.yml');
});

// promtool compares rendered annotations exactly; the firing logic is what these cases pin down, so
// they run against a copy of the rules without annotations (their templates are checked above).
function rulesWithoutAnnotations(): string {
  const doc = parse(readFileSync(alertsPath, 'utf8')) as { groups: Array<{ rules: Array<Record<string, unknown>> }> };
  for (const group of doc.groups) for (const rule of group.rules) delete rule.annotations;
  return stringify(doc);
}

const G1 = { job: 'tollbooth', instance: 'gateway-1:8080' };
const G2 = { job: 'tollbooth', instance: 'gateway-2:8080' };
const series = (name: string, labels: Record<string, string>, values: string) =>
  ({ series: `${name}{${Object.entries(labels).map(([k, v]) => `${k}="${v}"`).join(',')}}`, values });
const paid = (outcome: string, values: string) => series('tollbooth_paid_calls_total', { ...G1, tool: 'fetch_readable', sku: 'research', outcome }, values);
const buckets = (method: string, le: Record<string, string>) =>
  Object.entries(le).map(([bound, values]) => series('tollbooth_mcp_request_duration_seconds_bucket', { ...G1, method, le: bound }, values));

const unitTests = [
  {
    name: 'a scrape target down for 2m fires TollboothGatewayDown for that instance only',
    interval: '1m',
    input_series: [series('up', G1, '0x10'), series('up', G2, '1x10')],
    alert_rule_test: [
      { eval_time: '1m', alertname: 'TollboothGatewayDown', exp_alerts: [] },
      { eval_time: '5m', alertname: 'TollboothGatewayDown', exp_alerts: [{ exp_labels: { ...G1, severity: 'critical' } }] },
    ],
  },
  {
    name: 'payments_unavailable refusals for 5m fire; none do not',
    interval: '1m',
    input_series: [paid('refused_unavailable', '0+6x20'), paid('authorised', '0+60x20')],
    alert_rule_test: [
      { eval_time: '3m', alertname: 'TollboothPaymentsUnavailable', exp_alerts: [] },
      { eval_time: '12m', alertname: 'TollboothPaymentsUnavailable', exp_alerts: [{ exp_labels: { severity: 'critical' } }] },
    ],
  },
  {
    name: 'no payments_unavailable refusals, no TollboothPaymentsUnavailable',
    interval: '1m',
    input_series: [paid('refused_unavailable', '0x20'), paid('authorised', '0+60x20')],
    alert_rule_test: [{ eval_time: '12m', alertname: 'TollboothPaymentsUnavailable', exp_alerts: [] }],
  },
  {
    name: 'store_up 0 fires TollboothRedisDown for that instance; store_up 1 does not',
    interval: '1m',
    input_series: [series('tollbooth_store_up', G1, '1 1 0x10'), series('tollbooth_store_up', G2, '1x12')],
    alert_rule_test: [
      { eval_time: '2m', alertname: 'TollboothRedisDown', exp_alerts: [] },
      { eval_time: '6m', alertname: 'TollboothRedisDown', exp_alerts: [{ exp_labels: { ...G1, severity: 'critical' } }] },
    ],
  },
  {
    name: 'a steady stream of store errors fires TollboothRedisDown even while store_up says 1',
    interval: '1m',
    input_series: [series('tollbooth_store_up', G1, '1x12'), series('tollbooth_store_errors_total', { ...G1, op: 'reserve' }, '0+30x12')],
    alert_rule_test: [{ eval_time: '10m', alertname: 'TollboothRedisDown', exp_alerts: [{ exp_labels: { ...G1, severity: 'critical' } }] }],
  },
  {
    name: 'the reconciler stopping on the lease holder fires TollboothReconcilerStalled',
    interval: '1m',
    // gateway-1 held the lease and ran every minute until t=5m; gateway-2 never ran it.
    input_series: [
      series('tollbooth_reconciler_last_run_timestamp_seconds', G1, '0+60x5 300x20'),
      series('tollbooth_reconciler_last_run_timestamp_seconds', G2, '0x25'),
    ],
    alert_rule_test: [
      { eval_time: '9m', alertname: 'TollboothReconcilerStalled', exp_alerts: [] },
      { eval_time: '15m', alertname: 'TollboothReconcilerStalled', exp_alerts: [{ exp_labels: { severity: 'warning' } }] },
    ],
  },
  {
    name: 'one replica running the reconciler is enough: a replica that never runs it raises nothing',
    interval: '1m',
    input_series: [
      series('tollbooth_reconciler_last_run_timestamp_seconds', G1, '0+60x25'),
      series('tollbooth_reconciler_last_run_timestamp_seconds', G2, '0x25'),
    ],
    alert_rule_test: [{ eval_time: '20m', alertname: 'TollboothReconcilerStalled', exp_alerts: [] }],
  },
  {
    name: 'an underpaid settlement fires TollboothUnderpaidCharges for its SKU; granted ones do not',
    interval: '1m',
    input_series: [
      series('tollbooth_settlements_total', { ...G1, sku: 'research', result: 'underpaid' }, '0 0 0 1x10'),
      series('tollbooth_settlements_total', { ...G1, sku: 'research', result: 'granted' }, '0+5x12'),
      series('tollbooth_settlements_total', { ...G1, sku: 'pro', result: 'underpaid' }, '0x12'),
    ],
    alert_rule_test: [
      { eval_time: '2m', alertname: 'TollboothUnderpaidCharges', exp_alerts: [] },
      { eval_time: '6m', alertname: 'TollboothUnderpaidCharges', exp_alerts: [{ exp_labels: { sku: 'research', severity: 'warning' } }] },
    ],
  },
  {
    name: '9% of paid calls failing upstream fires TollboothUpstreamErrors',
    interval: '1m',
    input_series: [paid('authorised', '0+60x30'), paid('upstream_error', '0+6x30')],
    alert_rule_test: [{ eval_time: '20m', alertname: 'TollboothUpstreamErrors', exp_alerts: [{ exp_labels: { severity: 'warning' } }] }],
  },
  {
    name: '1% of paid calls failing upstream stays under the threshold',
    interval: '1m',
    input_series: [paid('authorised', '0+600x30'), paid('upstream_error', '0+6x30')],
    alert_rule_test: [{ eval_time: '20m', alertname: 'TollboothUpstreamErrors', exp_alerts: [] }],
  },
  {
    name: 'a p99 between 1 s and 2.5 s fires TollboothHighLatencyP99 for that method only',
    interval: '1m',
    input_series: [
      ...buckets('tools/call', { '0.5': '0x30', '1': '0+30x30', '2.5': '0+60x30', '+Inf': '0+60x30' }),
      series('tollbooth_mcp_request_duration_seconds_count', { ...G1, method: 'tools/call' }, '0+60x30'),
      ...buckets('tools/list', { '0.5': '0+60x30', '1': '0+60x30', '2.5': '0+60x30', '+Inf': '0+60x30' }),
      series('tollbooth_mcp_request_duration_seconds_count', { ...G1, method: 'tools/list' }, '0+60x30'),
    ],
    alert_rule_test: [
      { eval_time: '5m', alertname: 'TollboothHighLatencyP99', exp_alerts: [] },
      { eval_time: '20m', alertname: 'TollboothHighLatencyP99', exp_alerts: [{ exp_labels: { method: 'tools/call', severity: 'warning' } }] },
    ],
  },
  {
    name: 'a slow p99 on a method with almost no traffic does not page',
    interval: '1m',
    input_series: [
      ...buckets('ping', { '1': '0x30', '2.5': '0+1x30', '+Inf': '0+1x30' }),
      series('tollbooth_mcp_request_duration_seconds_count', { ...G1, method: 'ping' }, '0+1x30'),
    ],
    alert_rule_test: [{ eval_time: '20m', alertname: 'TollboothHighLatencyP99', exp_alerts: [] }],
  },
];

t.test('promtool test rules: each alert fires on its signal and not on a healthy look-alike', { skip }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollbooth-promtool-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'rules.yml'), rulesWithoutAnnotations());
  writeFileSync(join(dir, 'tests.yml'), stringify({ rule_files: ['rules.yml'], evaluation_interval: '1m', tests: unitTests }));
  const { code, output } = await promtool(['test', 'rules', join(dir, 'tests.yml')]);
  t.equal(code, 0, output);
  t.match(output, /SUCCESS/);
});

t.test('promtool test rules fails when an expectation is wrong (negative control)', { skip }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollbooth-promtool-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'rules.yml'), rulesWithoutAnnotations());
  const wrong = [{ ...unitTests[0], alert_rule_test: [{ eval_time: '5m', alertname: 'TollboothGatewayDown', exp_alerts: [] }] }];
  writeFileSync(join(dir, 'tests.yml'), stringify({ rule_files: ['rules.yml'], evaluation_interval: '1m', tests: wrong }));
  const { code } = await promtool(['test', 'rules', join(dir, 'tests.yml')]);
  t.not(code, 0, 'a missing expected alert makes promtool fail');
});

t.test('every dashboard query is valid PromQL once Grafana variables are substituted', { skip }, async (t) => {
  const dashboard = JSON.parse(readFileSync(join(repo, 'deploy/grafana/dashboard.json'), 'utf8')) as { panels: Array<{ id: number; targets?: Array<{ refId: string; expr: string }> }> };
  const grafanaVariables: Record<string, string> = { $__rate_interval: '1m', $__range: '6h', $__interval: '15s', $job: 'tollbooth' };
  const rules = dashboard.panels.flatMap((panel) =>
    (panel.targets ?? []).map((target) => ({ // row headers have no queries
      record: `dashboard:panel_${panel.id}_${target.refId}`,
      expr: target.expr.replace(/\$__rate_interval|\$__range|\$__interval|\$job/g, (name) => grafanaVariables[name] as string),
    })));
  t.ok(rules.length >= 20, `${rules.length} queries`);
  const dir = mkdtempSync(join(tmpdir(), 'tollbooth-promtool-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'dashboard-queries.yml'), stringify({ groups: [{ name: 'dashboard', rules }] }));
  const { code, output } = await promtool(['check', 'rules', join(dir, 'dashboard-queries.yml')]);
  t.equal(code, 0, output);
  t.notMatch(output, /\$/, 'no Grafana variable left unsubstituted');
});
