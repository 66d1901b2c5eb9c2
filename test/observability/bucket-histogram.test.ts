// BucketHistogram against prom-client's own Histogram: the same observations must give the same
// exposition, so swapping one for the other changes nothing a scraper, promtool or a dashboard sees.
import client from 'prom-client';
import t from 'tap';
import { BucketHistogram } from '../../src/observability/bucket-histogram.js';

const BUCKETS = [0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const LABELS = ['server', 'method', 'outcome'] as const;

function pair(): { ours: BucketHistogram<(typeof LABELS)[number]>; theirs: client.Histogram<(typeof LABELS)[number]>; oursRegistry: client.Registry; theirsRegistry: client.Registry } {
  const oursRegistry = new client.Registry();
  const theirsRegistry = new client.Registry();
  const config = { name: 'tb_test_seconds', help: 'A test histogram.', labelNames: [...LABELS], buckets: BUCKETS };
  return { ours: new BucketHistogram({ ...config, registers: [oursRegistry] }), theirs: new client.Histogram({ ...config, registers: [theirsRegistry] }), oursRegistry, theirsRegistry };
}

t.test('the same observations give the same exposition as prom-client, byte for byte', async (t) => {
  const { ours, theirs, oursRegistry, theirsRegistry } = pair();
  const sets: [string, string, string][] = [
    ['default', 'tools/call', 'answered'],
    ['files', 'tools/list', 'answered'],
    ['default', 'tools/call', 'timeout'],
  ];
  // Every bound exactly (a bound is inclusive: le), just above and below each, zero, and beyond the last bound.
  const values = [0, 31, 1e6, ...BUCKETS, ...BUCKETS.map((b) => b * 1.0001), ...BUCKETS.map((b) => b * 0.9999)];
  let seed = 7;
  for (let i = 0; i < 2_000; i++) {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    values.push((seed / 2_147_483_648) ** 4 * 40);
  }
  values.forEach((value, i) => {
    const labels = sets[i % sets.length] as [string, string, string];
    ours.labels(...labels).observe(value);
    theirs.labels(...labels).observe(value);
  });
  const expected = await theirsRegistry.metrics();
  t.ok(expected.includes('tb_test_seconds_bucket{le="+Inf",server="files",method="tools/list",outcome="answered"}'), 'prom-client wrote what we compare with');
  t.equal(await oursRegistry.metrics(), expected);
  const series = (values: { labels: object; value: number; metricName?: string }[]) => values.map(({ labels, value, metricName }) => ({ labels, value, metricName }));
  const [mine, prom] = [await ours.get(), await theirs.get()];
  t.same({ ...mine, values: series(mine.values) }, { ...prom, values: series(prom.values) }, 'and get() returns the same series (tests read it); prom-client adds only exemplar: null');
});

t.test('reset() zeroes every series; children handed out before keep counting', async (t) => {
  const { ours } = pair();
  const child = ours.labels('default', 'ping', 'answered');
  child.observe(0.002);
  ours.reset();
  child.observe(0.02);
  const values = (await ours.get()).values;
  t.equal(values.find((v) => v.metricName === 'tb_test_seconds_count')?.value, 1);
  t.equal(values.find((v) => v.metricName === 'tb_test_seconds_sum')?.value, 0.02);
  t.equal(values.find((v) => v.labels.le === 0.005)?.value, 0, 'the 2 ms observation before the reset is gone');
});

t.test('a wrong number of label values is refused; a non-finite value is not counted', async (t) => {
  const { ours } = pair();
  t.throws(() => ours.labels('default', 'ping'), /3 label values expected, got 2/);
  const child = ours.labels('default', 'ping', 'answered');
  child.observe(Number.NaN);
  child.observe(Number.POSITIVE_INFINITY);
  child.observe(0.001);
  const values = (await ours.get()).values;
  t.equal(values.find((v) => v.metricName === 'tb_test_seconds_count')?.value, 1);
  t.equal(values.find((v) => v.metricName === 'tb_test_seconds_sum')?.value, 0.001);
});

t.test('the same child for the same label values', async (t) => {
  const { ours } = pair();
  t.equal(ours.labels('a', 'b', 'c'), ours.labels('a', 'b', 'c'));
  t.not(ours.labels('a', 'b', 'c'), ours.labels('a', 'bc', ''));
});
