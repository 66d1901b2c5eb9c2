// bench/profile-cost.ts: a profile's samples inside one window, grouped by where the code lives, per request.
import t from 'tap';
import { costPerRequest, groupOf, renderCostTable, type CpuProfile } from '../../bench/profile-cost.js';

const frame = (functionName: string, url: string) => ({ functionName, url, lineNumber: 0 });

t.test('frames are grouped by where their code lives', async (t) => {
  t.equal(groupOf(frame('authorise', 'file:///srv/tollbooth/dist/paywall/decide.js')), 'gateway: paywall');
  t.equal(groupOf(frame('run', 'file:///srv/tollbooth/dist/cli.js')), 'gateway: (top level)');
  t.equal(groupOf(frame('send', 'file:///srv/tollbooth/node_modules/fastify/lib/reply.js')), 'fastify');
  t.equal(groupOf(frame('from', 'file:///srv/tollbooth/node_modules/@fastify/reply-from/index.js')), '@fastify/reply-from');
  t.equal(groupOf(frame('x', 'file:///srv/tollbooth/node_modules/@fastify/http-proxy/node_modules/undici/lib/core.js')), 'undici', 'the innermost package');
  t.equal(groupOf(frame('handler', 'file:///srv/tollbooth/bench/bare-proxy.ts')), 'bench');
  t.equal(groupOf(frame('clearBuffer', 'node:internal/streams/writable')), 'node: streams');
  t.equal(groupOf(frame('emit', 'node:events')), 'node: events');
  t.equal(groupOf(frame('writev', '')), 'syscalls: socket and file writes');
  t.equal(groupOf(frame('writeUtf8String', '')), 'syscalls: socket and file writes');
  t.equal(groupOf(frame('(garbage collector)', '')), '(garbage collector)');
  t.equal(groupOf(frame('parse', '')), 'V8 builtins');
});

t.test('only the samples inside the window count, idle never, divided by its requests', async (t) => {
  const profile: CpuProfile = {
    startTime: 1_000,
    nodes: [
      { id: 1, callFrame: frame('(root)', '') },
      { id: 2, callFrame: frame('(idle)', '') },
      { id: 3, callFrame: frame('authorise', 'file:///x/dist/paywall/decide.js') },
      { id: 4, callFrame: frame('writev', '') },
    ],
    // sample i is at startTime + sum(deltas[0..i]): 1100, 1200, 1300, 1400, 1500, 1600
    samples: [3, 3, 4, 2, 3, 4],
    timeDeltas: [100, 100, 100, 100, 100, 100],
  };
  const cost = costPerRequest(profile, { fromUs: 1_200, toUs: 1_600, requests: 4 });
  // In [1200, 1600): 1200 (paywall, 100), 1300 (writev, 100), 1400 (idle), 1500 (paywall, 100).
  t.equal(cost.get('gateway: paywall'), 50);
  t.equal(cost.get('syscalls: socket and file writes'), 25);
  t.equal(cost.get('total'), 75);
  t.notOk(cost.has('(idle)'));
  t.same([...cost.keys()], ['gateway: paywall', 'syscalls: socket and file writes', 'total'], 'largest first, total last');
});

t.test('the table orders groups by what the gateways pay above the reference', async (t) => {
  const lines = renderCostTable([
    { name: 'bare-proxy', cost: new Map([['undici', 30], ['fastify', 10], ['total', 40]]) },
    { name: 'gateway-paid', cost: new Map([['undici', 31], ['fastify', 12], ['gateway: paywall', 20], ['pino', 1], ['total', 64]]) },
  ]);
  t.same(lines, [
    '| µs/req (self time) | bare-proxy | gateway-paid |',
    '| --- | ---: | ---: |',
    '| gateway: paywall | – | 20.0 |',
    '| fastify | 10.0 | 12.0 |',
    '| undici | 30.0 | 31.0 |',
    '| **total (busy)** | **40.0** | **64.0** |',
  ]);
});
