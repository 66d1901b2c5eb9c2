// payments.x402 (SPEC §19) and skus.*.x402Price: the validation matrix. Off by default; when on, a
// payee, a token @x402/evm can describe (or an explicit EIP-712 domain), and SKU currencies that fit.
import t from 'tap';
import { parseConfigText } from '../../src/config/load.js';
import { maskSecrets, printableConfig } from '../../src/config/mask.js';
import { createLogger } from '../../src/observability/logger.js';
import { X402Rail } from '../../src/payments/x402/rail.js';
import { MemoryStore } from '../../src/store/memory.js';
import { refusalOf } from '../helpers/config-refusal.js';

const FILE = 'config/x402.yaml';
const PAYEE = '0x209693Bc6afc0C5328bA36FaF03C514EF312287C';
const yaml = (...lines: string[]): string => `${['upstream:', '  url: http://127.0.0.1:3001/mcp', ...lines].join('\n')}\n`;
const SKUS = ['skus:', '  research: { label: Research, amount: "5.00", currency: USDC, credits: 250 }'];
const on = (...x402: string[]) => ['payments:', '  x402:', '    facilitatorUrl: http://127.0.0.1:4020', `    payTo: "${PAYEE}"`, ...x402.map((line) => `    ${line}`)];

const parse = (text: string) => parseConfigText(text, FILE, {});
const refusal = (text: string): string => refusalOf(parse, text);

t.test('off by default, with the defaults of §19', async (t) => {
  const x402 = parse(yaml(...SKUS)).payments.x402;
  t.same(x402, { facilitatorUrl: '', network: 'eip155:8453', asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913', assetDecimals: 6, currency: 'USDC', payTo: '', maxTimeoutSeconds: 120 });
  t.notOk('extra' in x402);
});

t.test('an unset ${VAR} facilitatorUrl keeps it off, so nothing else is required', async (t) => {
  const config = parseConfigText(yaml(...SKUS, 'payments:', '  x402:', '    facilitatorUrl: ${X402_FACILITATOR:-}', '    network: "eip155:999999"'), FILE, {});
  t.equal(config.payments.x402.facilitatorUrl, '');
  t.equal(X402Rail.fromConfig(config, { store: new MemoryStore(), logger: createLogger('silent') }), null);
});

t.test('on with a known asset: extra comes from @x402/evm', async (t) => {
  const x402 = parse(yaml(...SKUS, ...on())).payments.x402;
    t.same(x402.extra, { name: 'USD Coin', version: '2' });
  const sepolia = parse(yaml(...SKUS, ...on('network: "eip155:84532"', 'asset: "0x036cbd53842c5426634e7929541ec2318f3dcf7e"'))).payments.x402;
  t.same(sepolia.extra, { name: 'USDC', version: '2' }, 'asset addresses match in any letter case');
});

t.test('an explicit extra wins over the table', async (t) => {
  t.same(parse(yaml(...SKUS, ...on('extra: { name: "My Coin", version: "7" }'))).payments.x402.extra, { name: 'My Coin', version: '7' });
});

t.test('an unknown asset needs extra', async (t) => {
  const unknown = on('asset: "0x0000000000000000000000000000000000000abc"');
  t.match(refusal(yaml(...SKUS, ...unknown)), /payments\.x402\.extra: expected the token's EIP-712 domain \{ name, version \}: @x402\/evm does not know asset 0x0+abc on eip155:8453/);
  t.equal(parse(yaml(...SKUS, ...on('asset: "0x0000000000000000000000000000000000000abc"', 'extra: { name: Token, version: "1" }'))).payments.x402.extra?.name, 'Token');
  t.match(refusal(yaml(...SKUS, ...on('network: "eip155:424242"'))), /payments\.x402\.extra/, 'an unknown network too');
});

t.test('on without a payee, or with the zero address, is refused', async (t) => {
  t.match(refusal(yaml(...SKUS, 'payments:', '  x402: { facilitatorUrl: "http://127.0.0.1:4020" }')), /payments\.x402\.payTo: expected a non-zero payTo address because payments\.x402\.facilitatorUrl is set/);
  t.match(refusal(yaml(...SKUS, 'payments:', '  x402: { facilitatorUrl: "http://127.0.0.1:4020", payTo: "0x0000000000000000000000000000000000000000" }')), /payments\.x402\.payTo/);
});

t.test('formats are checked whether on or off', async (t) => {
  const cases: [string, RegExp][] = [
    ['facilitatorUrl: "ftp://x"', /payments\.x402\.facilitatorUrl: expected an absolute http\(s\) URL/],
    ['network: "base"', /payments\.x402\.network: expected a CAIP-2 EVM network id/],
    ['network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"', /payments\.x402\.network/],
    ['asset: "0x1234"', /payments\.x402\.asset: expected a 0x-prefixed 20-byte hex address/],
    ['payTo: "me"', /payments\.x402\.payTo/],
    ['assetDecimals: 37', /payments\.x402\.assetDecimals/],
    ['maxTimeoutSeconds: 0', /payments\.x402\.maxTimeoutSeconds/],
    ['maxTimeoutSeconds: 3601', /payments\.x402\.maxTimeoutSeconds: expected a positive integer of at most 3600/],
    ['extra: { name: "" , version: "1" }', /payments\.x402\.extra\.name/],
    ['colour: blue', /payments\.x402\.colour/],
  ];
  for (const [line, message] of cases) t.match(refusal(yaml(...SKUS, 'payments:', '  x402:', `    ${line}`)), message, line);
});

t.test('a known asset with the wrong decimals, or one moved with permit2, is refused', async (t) => {
  t.match(refusal(yaml(...SKUS, ...on('assetDecimals: 18'))), /payments\.x402\.assetDecimals: expected 6, the decimals of this asset on eip155:8453/);
  const permit2 = on('network: "eip155:4326"', 'asset: "0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7"', 'assetDecimals: 18', 'currency: MegaUSD');
  t.match(refusal(yaml('skus:', '  research: { label: R, amount: "5.00", currency: MegaUSD, credits: 250 }', ...permit2)), /payments\.x402\.asset: expected an EIP-3009 token \(@x402\/evm transfers this one with permit2/);
});

t.test('x402Price: a positive decimal string per credit, up to 18 decimals', async (t) => {
  const sku = (price: string) => ['skus:', `  research: { label: Research, amount: "5.00", currency: USDC, credits: 250, x402Price: ${price} }`];
  t.equal(parse(yaml(...sku('"0.03"'), ...on())).skus.research?.x402Price, '0.03');
  t.equal(parse(yaml(...sku('"0.000000000000000001"'))).skus.research?.x402Price, '0.000000000000000001');
  t.match(refusal(yaml(...sku('0.03'))), /skus\.research\.x402Price: expected a decimal price per credit written as a string/);
  t.match(refusal(yaml(...sku('"0"'))), /skus\.research\.x402Price: expected a price greater than zero/);
  t.match(refusal(yaml(...sku('"-1"'))), /skus\.research\.x402Price/);
});

t.test('with x402 on, SKU currencies must fit the x402 currency', async (t) => {
  const mixed = ['skus:', '  research: { label: Research, amount: "5.00", currency: USDC, credits: 250 }', '  archive: { label: Archive, amount: "5.00", currency: EUR, credits: 100 }'];
  t.same(Object.keys(parse(yaml(...mixed, ...on())).skus), ['research', 'archive'], 'a SKU in another currency is fine: it only offers the checkout link');
  const euroWithX402Price = ['skus:', '  research: { label: Research, amount: "5.00", currency: USDC, credits: 250 }', '  archive: { label: Archive, amount: "5.00", currency: EUR, credits: 100, x402Price: "0.05" }'];
  t.match(refusal(yaml(...euroWithX402Price, ...on())), /skus\.archive\.currency: expected the x402 currency "USDC" \(payments\.x402\.currency\) because this SKU sets x402Price, found the string "EUR"/);
  t.match(refusal(yaml('skus:', '  research: { label: R, amount: "5.00", currency: usdc, credits: 250 }', '  other: { label: O, amount: "5.00", currency: USDC, credits: 2 }', ...on())), /skus\.research\.currency: expected the x402 currency "USDC" \(payments\.x402\.currency\) because it differs only in letter case/);
  t.match(refusal(yaml('skus:', '  research: { label: R, amount: "5.00", currency: USD, credits: 250 }', ...on())), /payments\.x402\.currency: expected the currency of at least one SKU, because x402 is on \(SKU currencies: USD\)/);
  t.equal(parse(yaml(...euroWithX402Price)).skus.archive?.x402Price, '0.05', 'with x402 off, nothing is checked');
});

t.test('tollbooth check shows the x402 block; a password in the facilitator URL is masked', async (t) => {
  const config = parse(yaml(...SKUS, 'payments:', '  x402:', '    facilitatorUrl: "https://user:s3cret@facilitator.example/x402"', `    payTo: "${PAYEE}"`));
  const shown = maskSecrets(config).payments.x402;
  t.equal(shown.facilitatorUrl, 'https://user:***@facilitator.example/x402');
  t.equal(shown.payTo, PAYEE, 'the payee is not a secret');
});

t.test('X402Rail.fromConfig: null when off, a rail with the resolved terms when on', async (t) => {
  const deps = { store: new MemoryStore(), logger: createLogger('silent') };
  t.equal(X402Rail.fromConfig(parse(yaml(...SKUS)), deps), null);
  const rail = X402Rail.fromConfig(parse(yaml(...SKUS, ...on())), deps);
  t.teardown(() => rail?.close());
  t.same(rail?.terms, { network: 'eip155:8453', asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913', assetDecimals: 6, currency: 'USDC', payTo: PAYEE, maxTimeoutSeconds: 120, extra: { name: 'USD Coin', version: '2' } });
});

t.test('the effective config with x402 on parses again unchanged (tollbooth check prints it)', async (t) => {
  const { stringify } = await import('yaml');
  const config = parse(yaml(...SKUS, ...on()));
  const again = parseConfigText(stringify(printableConfig(config)), FILE, {});
  t.same(again.payments.x402, config.payments.x402);
  t.same(again.skus, config.skus);
});
