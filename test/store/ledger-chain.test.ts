// The ledger's hash chain computed in Redis Lua must be byte-identical to ledger-chain.ts: SHA-256
// against node:crypto (random inputs, every padding boundary), the canonical JSON of a stream entry
// against canonicalEntry of the entry ledger-stream.ts parses from it (tricky strings), and the chain
// kept exact when two stores (two gateways) append to one ledger at once.
import { createHash, randomBytes, randomInt } from 'node:crypto';
import { Redis } from 'ioredis';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { canonicalEntry, canonicalFields, canonicalJson, entryHash, GENESIS_HASH } from '../../src/store/ledger-chain.js';
import { parseStreamEntry, type StreamItem } from '../../src/store/ledger-stream.js';
import { LEDGER_PRELUDE } from '../../src/store/lua/ledger.js';
import { PRELUDE } from '../../src/store/lua/prelude.js';
import { RedisStore } from '../../src/store/redis.js';
import type { LedgerEntry } from '../../src/store/store.js';
import { startRedis } from '../helpers/redis-server.js';
import { allEntries, verified } from './ledger-conformance.js';

const server = await startRedis();
t.teardown(() => server.stop());
const redis = new Redis(server.url);
t.teardown(() => redis.disconnect());

const HELPERS = PRELUDE + LEDGER_PRELUDE;
/** Runs `body` after the ledger helpers; ARGV as given. */
const lua = (body: string, ...args: (string | Buffer)[]): Promise<unknown> => redis.eval(HELPERS + body, 0, ...args);

t.test('sha256hex in Lua equals node:crypto on every padding boundary and on random inputs', async (t) => {
  const inputs: Buffer[] = [];
  for (let length = 0; length <= 192; length++) inputs.push(randomBytes(length));
  for (let i = 0; i < 200; i++) inputs.push(randomBytes(randomInt(0, 2_000)));
  inputs.push(Buffer.from('abc'), Buffer.from('😀 é \u2028 /'.repeat(40)));
  const hashes = (await lua('local out = {} for i = 1, #ARGV do out[i] = sha256hex(ARGV[i]) end return out', ...inputs)) as string[];
  const wrong = inputs.filter((input, i) => createHash('sha256').update(input).digest('hex') !== hashes[i]).map((input) => input.length);
  t.same(wrong, [], 'no input hashes differently');
  t.equal(hashes[193 + 200], 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', 'the FIPS 180-2 "abc" vector');
});

/** Strings where JSON writers differ: escapes, "/", DEL, line separators, non-BMP, long text. */
const TRICKY = ['', '/', 'a/b', '\u007f', '\u2028\u2029', '😀', 'é', '"', '\\', '\\"', '\u0000', '\u0001\u001f', '\b\f\n\r\t', '</script>', 'ü'.repeat(300), '\u00ad\ufeff'];
const randomText = (): string => {
  let text = '';
  for (let i = randomInt(0, 12); i > 0; i--) {
    const pick = randomInt(0, 4);
    text += pick === 0 ? (TRICKY[randomInt(0, TRICKY.length)] as string) : pick === 1 ? String.fromCodePoint(randomInt(0, 0x80)) : pick === 2 ? String.fromCodePoint(randomInt(0x80, 0xd800)) : String.fromCodePoint(randomInt(0x10000, 0x10ffff));
  }
  return text;
};

t.test('the canonical JSON of a stream entry is the same in Lua and in TypeScript', async (t) => {
  const items: StreamItem[] = [];
  for (let i = 0; i < 300; i++) {
    const flat = ['k', ['grant', 'adjust', 'spend', 'expire', 'x402_settle'][i % 5] as string, 's', randomText(), 'c', String(randomInt(-1e9, 1e9)), 'b', String(randomInt(0, 2 ** 47)), 'fp', randomText()];
    for (const field of ['r', 't', 'a', 'cu', 'why', 'n', 'as', 'p', 'tx', 'pv']) {
      const roll = randomInt(0, 3);
      if (roll > 0) flat.push(field, roll === 1 ? '' : randomText());
    }
    items.push([`${randomInt(0, 2 ** 44)}-${randomInt(1, 1e7)}`, flat]);
  }
  for (const [i, text] of TRICKY.entries()) items.push([`1767225600000-${i + 1}`, ['k', 'adjust', 's', text, 'c', '-0', 'b', '0', 'fp', text, 'why', text, 'r', text]]);
  const script = 'local out = {} for i = 1, #ARGV, 2 do out[#out + 1] = ledger_canonical(ARGV[i], cjson.decode(ARGV[i + 1])) end return out';
  const texts = (await lua(script, ...items.flatMap(([id, flat]) => [id, JSON.stringify(flat)]))) as string[];
  let differing = 0;
  for (const [i, item] of items.entries()) {
    const expected = canonicalEntry(parseStreamEntry(item));
    if (texts[i] !== expected) {
      differing++;
      if (differing <= 3) t.equal(texts[i], expected, `item ${i}`);
    }
  }
  t.equal(differing, 0, 'no entry differs');
});

t.test('canonicalEntry, written in its sorted key order, equals the generic canonical JSON of the entry\'s fields', async (t) => {
  const optionalText = (): string | undefined => [undefined, '', randomText()][randomInt(0, 3)];
  let differing = 0;
  for (let i = 0; i < 500; i++) {
    const entry: LedgerEntry = {
      seq: randomInt(1, 2 ** 47),
      at: randomInt(0, 2 ** 47),
      kind: (['grant', 'adjust', 'spend', 'expire', 'x402_settle'] as const)[i % 5] as LedgerEntry['kind'],
      sku: randomText(),
      credits: randomInt(-1e9, 1e9),
      balanceAfter: randomInt(0, 2 ** 47),
      ref: [null, '', randomText()][randomInt(0, 3)] as string | null,
      fingerprint: randomText(),
    };
    for (const key of ['amount', 'asset', 'currency', 'network', 'payer', 'prev', 'reason', 'tool', 'transaction'] as const) {
      const value = optionalText();
      if (value !== undefined) entry[key] = value;
    }
    const expected = canonicalJson(canonicalFields(entry));
    if (canonicalEntry(entry) !== expected) {
      differing++;
      if (differing <= 3) t.equal(canonicalEntry(entry), expected, `entry ${i}`);
    }
  }
  t.equal(differing, 0, 'no entry differs');
});

t.test('canonical JSON: sorted keys, no whitespace, JSON.stringify escapes, integers as written', async (t) => {
  const entry: LedgerEntry = { seq: 2, at: 1767225600000, kind: 'spend', sku: 'research', credits: -3, balanceAfter: 7, ref: null, fingerprint: 'tb_s_abcd..wxyz', tool: 'b/fetch_readable', reason: '', prev: GENESIS_HASH };
  t.equal(canonicalEntry(entry), `{"at":1767225600000,"balanceAfter":7,"credits":-3,"fingerprint":"tb_s_abcd..wxyz","kind":"spend","prev":"${GENESIS_HASH}","ref":null,"seq":2,"sku":"research","tool":"b/fetch_readable"}`);
  t.equal(entryHash(entry), createHash('sha256').update(canonicalEntry(entry)).digest('hex'));
  t.equal(canonicalJson({ b: '\u007f/\u2028', a: [1, { d: null, c: '\u0001' }] }), '{"a":[1,{"c":"\\u0001","d":null}],"b":"\u007f/\u2028"}');
});

t.test('two stores appending to one ledger at once keep one exact chain', async (t) => {
  const prefix = `tbch${randomBytes(4).toString('hex')}:`;
  const open = (): Promise<RedisStore> => RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix: prefix } }, { logger: createLogger('silent') });
  const [a, b] = await Promise.all([open(), open()]);
  t.teardown(() => Promise.all([a.close(), b.close()]));
  await a.createHandle({ handleHash: 'shared', fingerprint: 'tb_s_conc..urr1', principal: null, ttlMs: 3_600_000 });
  await a.grantCredits('shared', 'research', 100, 'float');
  const spend = async (store: RedisStore, i: number): Promise<void> => {
    const reservationId = `r${i}`;
    await store.reserve({ handleHash: 'shared', principal: null, sku: 'research', cost: 1, reservationId, reservationDeadline: Date.now() + 60_000, ttlMs: 3_600_000, bucket: null });
    await store.commit('shared', reservationId, `tool${i % 7}`);
  };
  // Eight calls in flight per store at a time: interleaved appends without queueing past the command timeout.
  const worker = async (store: RedisStore, first: number): Promise<void> => {
    for (let i = first; i < 80; i += 16) await spend(store, i);
  };
  await Promise.all(Array.from({ length: 16 }, (_, first) => worker(first % 2 === 0 ? a : b, first)));
  const entries = await allEntries(a, { kind: 'handle', handleHash: 'shared' }, 500);
  t.equal(entries.length, 81);
  const broken = entries.filter((entry, i) => entry.prev !== (i === 0 ? GENESIS_HASH : entryHash(entries[i - 1] as LedgerEntry))).map((entry) => entry.seq);
  t.same(broken, [], 'every prev is the hash of the entry before it');
  t.same((await verified(a)).mismatches, []);
});
