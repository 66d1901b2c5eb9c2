// proxy/upstream-head.ts: the first of head, error and deadline wins; what comes after is dropped.
import { Readable } from 'node:stream';
import t from 'tap';
import { HeadRace } from '../../src/proxy/upstream-head.js';
import { UpstreamAbort } from '../../src/proxy/upstream-failure.js';

const head = (): { statusCode: number; headers: Record<string, string>; stream: Readable } => ({ statusCode: 200, headers: {}, stream: new Readable({ read() {} }) });

t.test('a head first: the race resolves with it, a later error changes nothing', async (t) => {
  const race = new HeadRace();
  const first = head();
  race.onHead(first);
  race.onError(new Error('late'));
  const won = await race.head;
  t.equal(won.kind, 'head');
  t.equal(won.kind === 'head' && won.head, first);
  t.notOk(first.stream.destroyed, 'the winning body is left to be read');
});

t.test('an error first: classified, and a head arriving later has its body dropped', async (t) => {
  const race = new HeadRace();
  race.onError(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }));
  const late = head();
  race.onHead(late);
  const won = await race.head;
  t.equal(won.kind, 'failed');
  t.not(won.kind === 'failed' && won.failure.outcome, 'headers_timeout', 'not a deadline');
  t.ok(late.stream.destroyed, 'the late body is discarded');
});

t.test('past the deadline an error is the deadline\'s headers timeout', async (t) => {
  const race = new HeadRace();
  race.expired = true;
  race.onError(new UpstreamAbort('deadline'));
  const won = await race.head;
  t.equal(won.kind === 'failed' && won.failure.outcome, 'headers_timeout');
  t.match(won.kind === 'failed' && won.failure.error.message, /upstream\.callDeadline/);
});
