// io/sleep.ts: a wait between attempts that the caller's signal cuts short with the caller's error.
import t from 'tap';
import { sleep } from '../../src/io/sleep.js';

const cancelled = (): Error => new Error('cancelled by the caller');

t.test('resolves after the wait', async (t) => {
  const started = performance.now();
  await sleep(20, undefined, cancelled);
  t.ok(performance.now() - started >= 15, 'waited'); // a lower bound only
});

t.test('an aborted signal rejects at once with the caller\'s error', async (t) => {
  const controller = new AbortController();
  controller.abort();
  await t.rejects(sleep(60_000, controller.signal, cancelled), { message: 'cancelled by the caller' });
});

t.test('an abort during the wait rejects it', async (t) => {
  const controller = new AbortController();
  const waiting = sleep(60_000, controller.signal, cancelled);
  controller.abort();
  await t.rejects(waiting, { message: 'cancelled by the caller' });
});

t.test('an abort after the wait ended changes nothing', async (t) => {
  const controller = new AbortController();
  await sleep(1, controller.signal, cancelled);
  controller.abort();
  t.pass('no unhandled rejection');
});
