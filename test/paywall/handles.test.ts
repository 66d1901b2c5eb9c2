// Handles (SPEC §6.1): `tb_s_` + base64url of 16 CSPRNG bytes, looked up by a keyed hash, and charge
// nonces minted the same way but never equal to (or containing) a handle or a link id.
import { createHash, createHmac } from 'node:crypto';
import t from 'tap';
import { DevProvider } from '../../src/payments/dev.js';
import { createHandleHasher, hashHandle, HANDLE_PREFIX, isWellFormedHandle, mintHandle, mintNonce } from '../../src/paywall/handles.js';
import { MemoryStore } from '../../src/store/memory.js';

t.test('a handle is tb_s_ + base64url of exactly 16 bytes', async (t) => {
  for (let i = 0; i < 50; i++) {
    const handle = mintHandle();
    t.ok(handle.startsWith(HANDLE_PREFIX));
    t.match(handle, /^tb_s_[A-Za-z0-9_-]{22}$/);
    t.equal(Buffer.from(handle.slice(HANDLE_PREFIX.length), 'base64url').length, 16);
  }
});

t.test('handles are random: 1000 mints, no repeats, every byte value spread', async (t) => {
  const seen = new Set<string>();
  const firstBytes = new Set<number>();
  for (let i = 0; i < 1000; i++) {
    const handle = mintHandle();
    seen.add(handle);
    firstBytes.add(Buffer.from(handle.slice(5), 'base64url')[0]!);
  }
  t.equal(seen.size, 1000);
  t.ok(firstBytes.size > 200, `first byte took ${firstBytes.size} distinct values (random, not a counter or a time)`);
});

t.test('only well-formed handles are recognised', async (t) => {
  t.ok(isWellFormedHandle(mintHandle()));
  for (const bad of ['', 'tb_s_', 'tb_s_short', `tb_s_${'A'.repeat(23)}`, `tb_x_${'A'.repeat(22)}`, `tb_s_${'A'.repeat(21)}=`, `tb_s_${'A'.repeat(21)}+`, ` ${mintHandle()}`, `${mintHandle()}\n`]) {
    t.notOk(isWellFormedHandle(bad), JSON.stringify(bad));
  }
});

t.test('with a secret the hash is HMAC-SHA-256, without one plain SHA-256', async (t) => {
  const handle = mintHandle();
  t.equal(hashHandle(handle, 'k1'), createHmac('sha256', 'k1').update(handle).digest('hex'));
  t.equal(hashHandle(handle, ''), createHash('sha256').update(handle).digest('hex'));
  t.not(hashHandle(handle, 'k1'), hashHandle(handle, 'k2'), 'the key matters');
  t.not(hashHandle(handle, 'k1'), hashHandle(handle, ''));
  t.notMatch(hashHandle(handle, 'k1'), handle.slice(5), 'the hash does not contain the handle');
});

t.test('the call path hasher answers exactly what hashHandle does, and remembers at most its size', async (t) => {
  const handles = Array.from({ length: 10 }, () => mintHandle());
  for (const secret of ['s3cret', '']) {
    const hasher = createHandleHasher(secret, 4);
    // Twice round more handles than the memo holds: evicted ones are hashed again, never answered stale.
    for (const handle of [...handles, ...handles]) t.equal(hasher(handle), hashHandle(handle, secret));
  }
  const a = createHandleHasher('one');
  const b = createHandleHasher('two');
  const handle = mintHandle();
  t.not(a(handle), b(handle), 'one memo per secret: a hasher never answers another secret\'s hash');
  t.equal(a(handle), hashHandle(handle, 'one'));
});

t.test('a nonce is 16 CSPRNG bytes without prefix', async (t) => {
  const nonce = mintNonce();
  t.match(nonce, /^[A-Za-z0-9_-]{22}$/);
  t.equal(Buffer.from(nonce, 'base64url').length, 16);
  t.notOk(nonce.startsWith('tb_'));
});

t.test('nonces drawn across several pool refills are all distinct and well formed', async (t) => {
  const seen = new Set<string>();
  for (let i = 0; i < 1_000; i++) seen.add(mintNonce());
  t.equal(seen.size, 1_000, 'no nonce repeats (the pool holds 256)');
  t.ok([...seen].every((nonce) => /^[A-Za-z0-9_-]{22}$/.test(nonce) && Buffer.from(nonce, 'base64url').length === 16));
});

t.test('nonce, handle and dev link id are independent values', async (t) => {
  const store = new MemoryStore();
  t.teardown(() => store.close());
  const provider = new DevProvider({ store, publicUrl: 'http://127.0.0.1:9/mcp' });
  for (let i = 0; i < 20; i++) {
    const handle = mintHandle();
    const nonce = mintNonce();
    const link = await provider.openCharge({ nonce, sku: 's', amount: '5.00', currency: 'USDC', label: 'L', credits: 3, tool: 'x', expiresAt: Date.now() + 60_000 });
    const body = handle.slice(HANDLE_PREFIX.length);
    t.not(nonce, body);
    t.notOk(nonce.includes(body) || body.includes(nonce));
    t.notOk(nonce.includes(link.providerRef) || link.providerRef.includes(nonce));
    t.notOk(link.checkoutUrl.includes(nonce), 'the link does not disclose the nonce');
    t.notOk(link.checkoutUrl.includes(body), 'the link does not disclose the handle');
  }
});
