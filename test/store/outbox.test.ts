// The durable outbox (SPEC §21): a record whose money already moved is stored at once when the store is
// up, else kept in a local file and retried until the store has it — exactly once, across a restart of
// the process (a new Outbox on the same directory), with its depth reported as it changes. A real
// MemoryStore behind a switch that makes it refuse, real files in a temporary directory, a test clock.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { GatewayError } from '../../src/errors.js';
import { createLogger } from '../../src/observability/logger.js';
import { Outbox } from '../../src/store/outbox.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { X402SettlementRecord } from '../../src/store/store.js';
import { TestClock, waitFor } from '../helpers/clock.js';

const logger = createLogger('silent');

function tempDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'tb-outbox-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'store-id');
}

/** A memory store whose recordX402Settlement fails while `down` (as a Redis store does during a blip). */
function flakyStore(clock: TestClock): { store: MemoryStore; setDown: (down: boolean) => void; writes: () => number } {
  const store = new MemoryStore({ now: clock.now });
  const real = store.recordX402Settlement.bind(store);
  let down = false;
  let writes = 0;
  store.recordX402Settlement = (record) => {
    writes++;
    return down ? Promise.reject(new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'the store is down')) : real(record);
  };
  return { store, setDown: (value) => (down = value), writes: () => writes };
}

const settlement = (clock: TestClock, nonce = `0x${'11'.repeat(32)}`): X402SettlementRecord => ({
  network: 'eip155:84532',
  asset: '0x036cbd53842c5426634e7929541ec2318f3dcf7e',
  payer: '0x857b06519e91e3a54538791bdbb0e22373e36b66',
  nonce,
  sku: 'research',
  tool: 'fetch_readable',
  amount: '20000',
  transaction: `0x${'ab'.repeat(32)}`,
  at: clock.now(),
});

const rows = async (store: MemoryStore, payer: string) => (await store.readLedger({ kind: 'payer', payer }, { limit: 100 })).filter((entry) => entry.kind === 'x402_settle');
const files = (dir: string): string[] => {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
};

t.test('the store is up: stored at once, no file', async (t) => {
  const clock = new TestClock();
  const { store } = flakyStore(clock);
  const dir = tempDir(t);
  const outbox = new Outbox({ store, dir, logger, clock });
  await outbox.start();
  const record = settlement(clock);
  t.equal(await outbox.submit({ kind: 'x402_settle', record }), 'stored');
  t.equal((await rows(store, record.payer)).length, 1);
  t.same(files(dir), [], 'nothing written locally');
});

t.test('the store is down: queued in the file, retried until stored, exactly once', async (t) => {
  const clock = new TestClock();
  const { store, setDown, writes } = flakyStore(clock);
  const dir = tempDir(t);
  const depths: number[] = [];
  const outbox = new Outbox({ store, dir, logger, clock, onDepth: (n) => depths.push(n) });
  await outbox.start();
  setDown(true);
  const record = settlement(clock);
  t.equal(await outbox.submit({ kind: 'x402_settle', record }), 'queued');
  t.equal(await outbox.submit({ kind: 'x402_settle', record }), 'queued', 'the same record again');
  t.equal(outbox.pending, 1, 'one record: named by its reference');
  const [name] = files(dir);
  t.match(JSON.parse(readFileSync(join(dir, name as string), 'utf8')), { v: 1, kind: 'x402_settle', ref: `${record.network}:${record.asset}:${record.payer}:${record.nonce}`, record }, 'the documented format');

  await clock.advance(1_000);
  await waitFor(() => writes() >= 3, 'a retry while the store is still down');
  t.equal(outbox.pending, 1, 'still waiting');
  setDown(false);
  await clock.advance(2_000); // the next retry (backed off to 2 s)
  await waitFor(() => outbox.pending === 0, 'the record stored');
  t.equal((await rows(store, record.payer)).length, 1, 'one x402_settle entry');
  t.same(files(dir), [], 'the file is gone');
  t.equal(depths.at(-1), 0, 'the depth went back to 0');
  t.ok(depths.includes(1), 'and was 1 while it waited');
});

t.test('a restart while the store is down loses nothing: the next process reads the file and stores it once', async (t) => {
  const clock = new TestClock();
  const { store, setDown } = flakyStore(clock);
  const dir = tempDir(t);
  const first = new Outbox({ store, dir, logger, clock });
  await first.start();
  setDown(true);
  const record = settlement(clock);
  t.equal(await first.submit({ kind: 'x402_settle', record }), 'queued');
  first.close(); // the process ends

  const second = new Outbox({ store, dir, logger, clock });
  await second.start(); // started while the store is still down
  t.equal(second.pending, 1, 'the record is found again');
  await clock.advance(0);
  t.equal(second.pending, 1, 'still waiting while the store is down');
  setDown(false);
  await clock.advance(30_000);
  await waitFor(() => second.pending === 0, 'stored once the store is back');
  t.equal((await rows(store, record.payer)).length, 1, 'exactly one entry');

  const third = new Outbox({ store, dir, logger, clock });
  await third.start();
  t.equal(third.pending, 0, 'nothing left for a later start');
});

t.test('a record whose write reached the store but whose reply was lost is stored once when drained', async (t) => {
  const clock = new TestClock();
  const store = new MemoryStore({ now: clock.now });
  const real = store.recordX402Settlement.bind(store);
  let loseReply = true;
  store.recordX402Settlement = async (record) => {
    const written = await real(record);
    if (loseReply) {
      loseReply = false;
      throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'connection reset after the script ran');
    }
    return written;
  };
  const dir = tempDir(t);
  const outbox = new Outbox({ store, dir, logger, clock });
  await outbox.start();
  const record = settlement(clock);
  t.equal(await outbox.submit({ kind: 'x402_settle', record }), 'queued');
  await clock.advance(1_000);
  await waitFor(() => outbox.pending === 0, 'drained');
  t.equal((await rows(store, record.payer)).length, 1, 'one entry, not two');
});

t.test('start-up: a write cut short by a crash is removed; an unreadable file is left for the operator', async (t) => {
  const clock = new TestClock();
  const { store } = flakyStore(clock);
  const dir = tempDir(t);
  const seed = new Outbox({ store, dir, logger, clock });
  await seed.start();
  store.recordX402Settlement = () => Promise.reject(new Error('down'));
  await seed.submit({ kind: 'x402_settle', record: settlement(clock) });
  seed.close();
  writeFileSync(join(dir, 'abc.json.tmp-1-deadbeef'), '{"v":1,"kind":"x402');
  writeFileSync(join(dir, 'garbled.json'), 'not json');
  const outbox = new Outbox({ store, dir, logger, clock });
  await outbox.start();
  t.equal(outbox.pending, 1, 'the whole record only');
  t.notOk(files(dir).some((name) => name.includes('.tmp-')), 'the cut-short write is gone');
  t.ok(files(dir).includes('garbled.json'), 'the unreadable file stays');
  outbox.close();
});

t.test('no directory (memory store): a failed write is the caller\'s to report', async (t) => {
  const clock = new TestClock();
  const { store, setDown } = flakyStore(clock);
  const outbox = new Outbox({ store, dir: null, logger, clock });
  await outbox.start();
  setDown(true);
  await t.rejects(outbox.submit({ kind: 'x402_settle', record: settlement(clock) }), { code: 'TB_ERR_STORE_UNAVAILABLE' });
});
