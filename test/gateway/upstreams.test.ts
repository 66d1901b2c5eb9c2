// gateway/upstreams.ts: every endpoint's upstream, kept across reloads while a config still uses it (SPEC §18).
import t from 'tap';
import { configSchema, type ConfigInput } from '../../src/config/schema.js';
import { UpstreamPool } from '../../src/gateway/upstreams.js';
import { createLogger } from '../../src/observability/logger.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

const one = await startPaidUpstream('stateless-json');
const two = await startPaidUpstream('stateless-json');
t.teardown(() => Promise.all([one.close(), two.close()]));

const config = (servers: ConfigInput['servers'] = {}, callDeadline = '20s') => configSchema.parse({ upstream: { url: one.url, callDeadline }, servers });
const reachable = async (target: { probe(): Promise<{ ok: boolean }> }) => (await target.probe()).ok;

t.test('an unchanged upstream is the same running target; one no config keeps is closed', async (t) => {
  const pool = new UpstreamPool({ logger: createLogger('silent') });
  t.teardown(() => pool.closeAll());
  const first = await pool.acquire(config({ web: { path: '/web', upstream: { url: two.url } } }));
  t.equal(first.upstream.url, one.url);
  t.equal(first.servers.web?.url, two.url);
  t.equal(first.keys.size, 2);

  const second = await pool.acquire(config({}, '5s'));
  t.equal(second.upstream, first.upstream, 'a deadline change keeps the running default upstream');
  t.same(Object.keys(second.servers), []);
  t.ok(await reachable(first.servers.web!), 'the removed server still answers until released');
  await pool.retainOnly(second.keys);
  t.notOk(await reachable(first.servers.web!), "the removed server's target is closed once released");
  t.ok(await reachable(second.upstream), 'the kept one still answers');

  const third = await pool.acquire(config({ web: { path: '/web', upstream: { url: two.url } } }));
  t.not(third.servers.web, first.servers.web, 'added again: a fresh target');
  t.ok(await reachable(third.servers.web!));
});
