// Responses on streams that are not their request's own (SPEC §6.5): looked up in the registry, passed
// when unknown, passed with a receipt when committed, dropped when released or when the look-up fails;
// a request's own responses are never looked up.
import { Writable } from 'node:stream';
import t from 'tap';
import { GatewayError } from '../../src/errors.js';
import { DROP_DATA } from '../../src/mcp/sse.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { DevProvider } from '../../src/payments/dev.js';
import { Settler } from '../../src/payments/settle.js';
import { Paywall } from '../../src/paywall/decide.js';
import { PricedRequests } from '../../src/proxy/priced-requests.js';
import { ResponseScreen } from '../../src/proxy/response-screen.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { PricedRequestRecord, Store } from '../../src/store/store.js';
import { systemClock } from '../../src/clock.js';

function rig(wrapStore: (store: Store) => Store = (store) => store) {
  const store = new MemoryStore();
  const used = wrapStore(store);
  const logs: string[] = [];
  const logger = createLogger('info', new Writable({ write: (chunk: Buffer, _e, done) => (logs.push(chunk.toString()), done()) }));
  const metrics = createMetrics(async () => 0);
  const provider = new DevProvider({ store, publicUrl: 'http://127.0.0.1:9/mcp' });
  const settler = new Settler({ store: used, provider, policy: { tolerance: 0.005, minimumFraction: 0.1 }, metrics, logger, clock: systemClock });
  const paywall = new Paywall({
    settings: { argumentName: 'tollboothToken', hashSecret: 's', handleTtlMs: 3_600_000, chargeTtlMs: 3_600_000, callDeadlineMs: 20_000, perHandle: { ratePerSecond: 100, burst: 100 }, challengesPerClient: { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 10_000 },
    store: used,
    provider,
    settler,
    metrics,
    logger,
    now: Date.now,
  });
  const registry = new PricedRequests({ store: used, now: Date.now });
  return { store, registry, screen: new ResponseScreen({ registry, paywall, logger }), logs };
}

const record = (state: PricedRequestRecord['state'], remaining: number | null = null): PricedRequestRecord => ({ state, handleHash: 'h', reservationId: 'r', tool: 'fetch_readable', sku: 'research', cost: 1, charge: 'success', deadline: Date.now() + 20_000, remaining, fingerprint: null, startedAt: Date.now() });
const response = (id: unknown) => ({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'paid value' }] } });

t.test("a request's own response is not foreign; a response to another id, or the same id as another type, is", async (t) => {
  const { screen } = rig();
  t.equal(screen.holdsForeignResponse(response(1), [1]), false);
  t.equal(screen.holdsForeignResponse(response('1'), [1]), true);
  t.equal(screen.holdsForeignResponse([response(1), response(2)], [1]), true);
  t.equal(screen.holdsForeignResponse({ jsonrpc: '2.0', method: 'notifications/progress' }, []), false);
});

t.test('unknown → passed as it came; committed → with its receipt; released → its data dropped', async (t) => {
  const { registry, screen } = rig();
  t.equal(await screen.screen('s', response(1), [], false), undefined, 'not a paid call: unchanged');
  await registry.register('s', 2, record('committed', 4));
  const committed = await screen.screen('s', response(2), [], false);
  t.same(JSON.parse(committed as string).result._meta['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 4 });
  await registry.register('s', 3, record('released'));
  t.equal(await screen.screen('s', response(3), [], false), DROP_DATA);
});

t.test('in an array, only the released entry goes; an array left empty is dropped whole', async (t) => {
  const { registry, screen } = rig();
  await registry.register('s', 3, record('released'));
  t.same(JSON.parse((await screen.screen('s', [response(1), response(3)], [], false)) as string), [response(1)]);
  t.equal(await screen.screen('s', [response(3)], [], false), DROP_DATA);
});

t.test('a look-up that fails drops the response (fail closed) and says so in the log', async (t) => {
  const { screen, logs } = rig((store) => new Proxy(store, { get: (target, key) => (key === 'getPricedRequest' ? async () => { throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'down'); } : (Reflect.get(target, key) as (...a: unknown[]) => unknown).bind(target)) }));
  t.equal(await screen.screen('s', response(9), [], false), DROP_DATA);
  t.ok(logs.some((line) => line.includes('"evt":"priced_response_dropped"') && line.includes('lookup_failed')));
  t.notOk(logs.some((line) => line.includes('paid value')), 'the dropped result is not logged');
});
