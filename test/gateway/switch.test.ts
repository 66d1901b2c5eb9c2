// gateway/switch.ts: one listening server, a replaceable gateway (SPEC §18). Real fastify apps behind a
// real socket: a request finishes on the gateway it arrived at, requests after a swap reach the new one,
// the old one closes once its requests are done, and close() drains everything.
import { setTimeout as sleep } from 'node:timers/promises';
import Fastify from 'fastify';
import t from 'tap';
import { GatewaySwitch } from '../../src/gateway/switch.js';
import type { Gateway } from '../../src/server.js';
import { waitFor } from '../helpers/clock.js';

function gatewayNamed(name: string, events: string[]): Gateway {
  const app = Fastify();
  app.get('/who', async () => ({ name }));
  app.get('/slow', async () => {
    events.push(`${name} slow started`);
    await sleep(300);
    events.push(`${name} slow finished`);
    return { name };
  });
  app.addHook('onClose', async () => void events.push(`${name} closed`));
  return { app, settler: null as never, endStreams: () => void events.push(`${name} streams ended`) };
}

async function listen(front: GatewaySwitch): Promise<string> {
  await new Promise<void>((resolve) => front.server.listen(0, '127.0.0.1', resolve));
  const address = front.server.address();
  return `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
}

t.test('a swap sends new requests to the new gateway; one in flight finishes on the old, which then closes', async (t) => {
  const events: string[] = [];
  const first = gatewayNamed('first', events);
  const second = gatewayNamed('second', events);
  await first.app.ready();
  await second.app.ready();
  const front = new GatewaySwitch(first);
  const origin = await listen(front);
  t.teardown(() => front.close(1_000));

  t.same(await (await fetch(`${origin}/who`)).json(), { name: 'first' });
  const inFlight = fetch(`${origin}/slow`).then((response) => response.json());
  await waitFor(() => events.includes('first slow started'), 'first slow started');
  const swapped = front.swap(second, 5_000);
  t.equal(front.current, second, 'the new gateway is current at once');
  t.same(await (await fetch(`${origin}/who`)).json(), { name: 'second' }, 'a request after the swap reaches the new gateway');
  t.same(front.live.length, 2, 'the old one is still live while its request runs');
  t.notOk(events.includes('first closed'), 'not closed while a request runs');
  t.same(await inFlight, { name: 'first' }, 'the request in flight finished on the gateway it arrived at');
  await swapped;
  t.same(events, ['first slow started', 'first streams ended', 'first slow finished', 'first closed'], 'drained, then closed');
  t.same(front.live, [second]);
});

t.test('a swap with nothing in flight closes the old gateway at once; a stuck request is cut at the drain limit', async (t) => {
  const events: string[] = [];
  const [a, b, c] = ['a', 'b', 'c'].map((name) => gatewayNamed(name, events)) as [Gateway, Gateway, Gateway];
  for (const gateway of [a, b, c]) await gateway.app.ready();
  const front = new GatewaySwitch(a);
  const origin = await listen(front);
  await front.swap(b, 5_000);
  t.same(events, ['a streams ended', 'a closed']);
  void fetch(`${origin}/slow`).catch(() => undefined);
  await waitFor(() => events.includes('b slow started'), 'b slow started');
  await front.swap(c, 100);
  // Ordering, not a wall-clock bound (a loaded machine stretches both): the 100 ms drain limit ended the
  // swap while the 300 ms request was still running.
  t.notOk(events.includes('b slow finished'), 'did not wait for the request past the drain limit');
  t.ok(events.includes('b closed'));
  await front.close(1_000);
  t.ok(events.includes('c closed'), 'close() closes the current gateway');
  t.equal(front.server.listening, false, 'and stops listening');
});

t.test('while closing, no new connection is accepted and the call in flight finishes', async (t) => {
  const events: string[] = [];
  const gateway = gatewayNamed('only', events);
  await gateway.app.ready();
  const front = new GatewaySwitch(gateway);
  const origin = await listen(front);
  const { Agent, request } = await import('undici');
  const agent = new Agent({ connections: 1, pipelining: 1 });
  t.teardown(() => agent.close());
  const slow = request(`${origin}/slow`, { dispatcher: agent }).then(async (response) => ({ status: response.statusCode, body: await response.body.json() }));
  await waitFor(() => events.includes('only slow started'), 'only slow started'); // a connection that has not sent its request yet is not a call
  const closing = front.close(2_000);
  const late = await request(`${origin}/who`, { dispatcher: new Agent() }).then(
    (response) => response.statusCode,
    () => 'refused',
  );
  t.equal(late, 'refused', 'no new connection is accepted');
  t.same(await slow, { status: 200, body: { name: 'only' } }, 'the call in flight finished');
  await closing;
  t.ok(events.includes('only closed'));
});
