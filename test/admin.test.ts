// Operator verbs (SPEC §2) against the memory store: what they print, what they refuse, and that
// they never print a handle, a full handle hash, a checkout URL or a provider link id.
import t from 'tap';
import { grantCredits, listCharges, showHandle, type AdminContext } from '../src/admin.js';
import { parseConfigText } from '../src/config/load.js';
import { fingerprint } from '../src/observability/fingerprint.js';
import { createLogger } from '../src/observability/logger.js';
import { hashHandle, mintHandle, mintNonce } from '../src/paywall/handles.js';
import { MemoryStore } from '../src/store/memory.js';

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
const HOUR = 3_600_000;
const CONFIG_TEXT = `
upstream: { url: "http://127.0.0.1:3001/mcp" }
handles: { hashSecret: deployment-secret }
skus:
  research: { label: Research tools, amount: "5.00", currency: USDC, credits: 250 }
  bulk: { label: Bulk, amount: "20.00", currency: USDC, credits: 2000 }
`;

interface Harness {
  context: AdminContext;
  store: MemoryStore;
  output: string[];
  logs: Record<string, unknown>[];
  handle: string;
  handleHash: string;
}

async function harness(): Promise<Harness> {
  const config = parseConfigText(CONFIG_TEXT, 'test.yaml', {});
  const store = new MemoryStore({ now: () => NOW });
  const output: string[] = [];
  const logs: Record<string, unknown>[] = [];
  const logger = createLogger('info', { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) });
  const handle = mintHandle();
  const handleHash = hashHandle(handle, config.handles.hashSecret);
  await store.createHandle({ handleHash, fingerprint: fingerprint(handle), principal: null, ttlMs: 30 * 24 * HOUR });
  return { context: { store, config, out: (line) => output.push(line), logger, now: () => NOW }, store, output, logs, handle, handleHash };
}

async function openCharge(h: Harness, sku: string, link: { providerRef: string; checkoutUrl: string }): Promise<string> {
  const nonce = mintNonce();
  await h.store.beginCharge({
    handleHash: h.handleHash,
    sku,
    nonce,
    snapshot: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 250, tool: 'fetch_readable' },
    now: NOW,
    ttlMs: HOUR,
    firstPollDelayMs: 3000,
  });
  await h.store.attachLink(h.handleHash, nonce, link);
  return nonce;
}

t.test('handle show by full handle prints fingerprint, principal, balances per SKU and expiry', async (t) => {
  const h = await harness();
  await h.store.grantCredits(h.handleHash, 'research', 7);
  await showHandle(h.context, h.handle);
  const text = h.output.join('\n');
  t.match(text, new RegExp(`fingerprint\\s+${fingerprint(h.handle).replace(/[.]/g, '\\.')}`));
  t.match(text, /principal\s+unbound/);
  t.match(text, /balance research\s+7 \(never funded\)/);
  t.match(text, /balance bulk\s+0 \(never funded\)/);
  t.match(text, /expires\s+2026-01-31T12:00:00\.000Z \(in 30d 0h\)/);
});

t.test('handle show by fingerprint finds the handle through the store', async (t) => {
  const h = await harness();
  await showHandle(h.context, fingerprint(h.handle));
  t.match(h.output.join('\n'), /principal\s+unbound/);
});

t.test('handle show never prints the handle or its full hash', async (t) => {
  const h = await harness();
  await showHandle(h.context, h.handle);
  const text = h.output.join('\n');
  t.notMatch(text, h.handle);
  t.notMatch(text, h.handleHash);
  t.notMatch(text, h.handleHash.slice(0, 16));
});

t.test('handle show of an unknown handle or fingerprint is TB_ERR_NOT_FOUND', async (t) => {
  const h = await harness();
  await t.rejects(showHandle(h.context, mintHandle()), { code: 'TB_ERR_NOT_FOUND' });
  await t.rejects(showHandle(h.context, 'tb_s_XXXX..YYYY'), { code: 'TB_ERR_NOT_FOUND' });
  await t.rejects(showHandle(h.context, 'not-a-handle'), { code: 'TB_ERR_INVALID_PARAMS' });
});

t.test('credits grant adds credits, prints the new balance and logs one admin_grant line', async (t) => {
  const h = await harness();
  const balance = await grantCredits(h.context, h.handle, { sku: 'research', credits: '25', reason: 'ticket 42: paid twice' });
  t.equal(balance, 25);
  t.equal((await h.store.getHandle(h.handleHash))?.balances.research, 25);
  t.same(h.output, [`granted 25 research credits to ${fingerprint(h.handle)}; balance now 25`]);
  t.equal(h.logs.length, 1);
  t.match(h.logs[0], { evt: 'admin_grant', fingerprint: fingerprint(h.handle), sku: 'research', credits: 25, reason: 'ticket 42: paid twice', balance: 25 });
  t.notMatch(JSON.stringify(h.logs), h.handle);
  t.notMatch(JSON.stringify(h.logs), h.handleHash);
});

t.test('a handle pasted into --reason reaches the audit log as its fingerprint (SPEC §10, §20)', async (t) => {
  const h = await harness();
  const other = mintHandle();
  await grantCredits(h.context, h.handle, { sku: 'research', credits: '1', reason: `moved from ${other} and ${h.handle}` });
  t.match(h.logs[0], { evt: 'admin_grant', reason: `moved from ${fingerprint(other)} and ${fingerprint(h.handle)}` });
  t.notMatch(JSON.stringify(h.logs), other);
  t.notMatch(JSON.stringify(h.logs), h.handle);
});

t.test('credits grant accepts the fingerprint when it names exactly one live handle', async (t) => {
  const h = await harness();
  t.equal(await grantCredits(h.context, fingerprint(h.handle), { sku: 'bulk', credits: '3', reason: 'goodwill' }), 3);
});

t.test('credits grant refuses an SKU that is not in the config', async (t) => {
  const h = await harness();
  await t.rejects(grantCredits(h.context, h.handle, { sku: 'reserch', credits: '5', reason: 'x' }), {
    code: 'TB_ERR_INVALID_PARAMS',
    message: /--sku must name an SKU under skus in the config \(known: research, bulk\), got "reserch"/,
  });
  t.same(h.logs, []);
});

t.test('credits grant refuses a credit count that is not a positive integer', async (t) => {
  const h = await harness();
  for (const credits of ['0', '-5', '1.5', 'ten', '', undefined, '99999999999999999999']) {
    await t.rejects(grantCredits(h.context, h.handle, { sku: 'research', credits, reason: 'x' }), { code: 'TB_ERR_INVALID_PARAMS', message: /--credits must be a positive integer/ }, String(credits));
  }
  t.equal((await h.store.getHandle(h.handleHash))?.balances.research ?? 0, 0);
});

t.test('credits grant requires a reason', async (t) => {
  const h = await harness();
  await t.rejects(grantCredits(h.context, h.handle, { sku: 'research', credits: '5', reason: '  ' }), { code: 'TB_ERR_INVALID_PARAMS', message: /--reason is required/ });
});

t.test('credits grant to an unknown handle is TB_ERR_NOT_FOUND and grants nothing', async (t) => {
  const h = await harness();
  await t.rejects(grantCredits(h.context, mintHandle(), { sku: 'research', credits: '5', reason: 'x' }), { code: 'TB_ERR_NOT_FOUND' });
  t.same(h.logs, []);
});

t.test('charges list prints one row per charge without checkout URLs or link ids', async (t) => {
  const h = await harness();
  const settled = await openCharge(h, 'research', { providerRef: 'link_SECRET_REF_1', checkoutUrl: 'https://pay.example.test/c/SECRET_URL_1' });
  await h.store.claimSettlement({ handleHash: h.handleHash, nonce: settled, outcome: 'settled', credits: 250, receivedAmount: '5.00' });
  await openCharge(h, 'bulk', { providerRef: 'link_SECRET_REF_2', checkoutUrl: 'https://pay.example.test/c/SECRET_URL_2' });
  await listCharges(h.context);
  t.equal(h.output.length, 3);
  const print = fingerprint(h.handle).replace(/\./g, '\\.');
  t.match(h.output[0], /^OPENED\s+STATUS\s+SKU\s+AMOUNT\s+RECEIVED\s+CURRENCY\s+CREDITS\s+GRANTED\s+HANDLE$/);
  t.match(h.output[1], new RegExp(`^2026-01-01T12:00:00\\.000Z\\s+settled\\s+research\\s+5\\.00\\s+5\\.00\\s+USDC\\s+250\\s+250\\s+${print}$`), 'the amount received; the handle by its fingerprint');
  t.match(h.output[2], new RegExp(`^2026-01-01T12:00:00\\.000Z\\s+pending\\s+bulk\\s+5\\.00\\s+-\\s+USDC\\s+250\\s+0\\s+${print}$`), 'nothing received yet');
  const text = h.output.join('\n');
  t.notMatch(text, /SECRET|https?:/);
  t.notMatch(text, h.handleHash);
  t.notMatch(text, h.handle);
});

t.test('charges list --status shows only charges in that status', async (t) => {
  const h = await harness();
  await openCharge(h, 'research', { providerRef: 'ref-1', checkoutUrl: 'https://pay.example.test/1' });
  await listCharges(h.context, 'settled');
  t.same(h.output, ['no settled charges']);
  h.output.length = 0;
  await listCharges(h.context, 'pending');
  t.equal(h.output.length, 2);
  t.match(h.output[1], /\spending\s/);
});

t.test('charges list refuses an unknown status', async (t) => {
  const h = await harness();
  await t.rejects(listCharges(h.context, 'paid'), { code: 'TB_ERR_INVALID_PARAMS', message: /--status must be one of pending, underpaid, settled, abandoned, expired/ });
});

t.test('charges list --status expired shows the charges the provider never let us read (§7.6)', async (t) => {
  const h = await harness();
  const nonce = await openCharge(h, 'research', { providerRef: 'ref-x', checkoutUrl: 'https://pay.example.test/x' });
  await openCharge(h, 'bulk', { providerRef: 'ref-y', checkoutUrl: 'https://pay.example.test/y' });
  await h.store.expireCharge(h.handleHash, nonce, NOW);
  await listCharges(h.context, 'expired');
  t.equal(h.output.length, 2);
  t.match(h.output[1], /^2026-01-01T12:00:00\.000Z\s+expired\s+research\s+5\.00\s+-\s+USDC\s+250\s+0\s+tb_s_/);
});

t.test("charges list: an underpaid charge shows what was received, and its HANDLE column is what handle show takes", async (t) => {
  const h = await harness();
  const nonce = await openCharge(h, 'research', { providerRef: 'ref-u', checkoutUrl: 'https://pay.example.test/u' });
  await h.store.claimSettlement({ handleHash: h.handleHash, nonce, outcome: 'underpaid', credits: 0, receivedAmount: '0.40' });
  await listCharges(h.context, 'underpaid');
  const cells = (h.output[1] ?? '').split(/\s+/);
  t.equal(cells[4], '0.40', 'RECEIVED');
  const column = cells.at(-1) as string;
  t.equal(column, fingerprint(h.handle));
  h.output.length = 0;
  await showHandle(h.context, column);
  t.match(h.output[0], new RegExp(`^fingerprint\\s+${column.replace(/\./g, '\\.')}$`), 'handle show finds the handle from the listing');
});
