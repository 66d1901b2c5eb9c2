// The README's x402 demo (scripts/x402-demo.mjs) runs as documented and shows what the README says it
// shows: both rails offered in one challenge, an x402 payment settled once, its replay refused, the
// checkout link paying the same tool with a receipt, and the rail on each call log line.
import { spawnSync } from 'node:child_process';
import t from 'tap';
import { childEnv, ROOT } from '../helpers/gateway-process.js';

t.test('node --import tsx scripts/x402-demo.mjs', async (t) => {
  const run = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/x402-demo.mjs'], { cwd: ROOT, env: childEnv(), encoding: 'utf8', timeout: 120_000 });
  t.equal(run.status, 0, run.stderr);
  const out = run.stdout;
  t.match(out, /content\[0\], for people and LLM hosts \(the checkout link\):\n {3}\| PAYMENT_REQUIRED\n/, 'the human text first');
  t.match(out, /"accepts": \[ \{ "scheme": "exact", "network": "eip155:84532", "amount": "20000"/, 'PaymentRequired for 0.02 USDC');
  t.match(out, /_meta\["x402\/payment-response"\]: \{"success":true,"transaction":"0x[0-9a-f]{64}"/, 'paid by x402 and settled');
  t.match(out, /"reason":"payment_invalid","invalidReason":"invalid_exact_evm_nonce_already_used"/, 'the replay refused');
  t.match(out, /receipt: \{"sku":"research","cost":1,"remaining":249\}/, 'the checkout rail');
  t.match(out, /The tool ran 2 times; the facilitator verified 2 and settled 1 payment\(s\)\./);
  t.match(out, /"rail":"x402","outcome":"authorised","cost":0,"payer":"0x[0-9a-f]{4}\.\.[0-9a-f]{4}","amount":"20000","settled":true/);
});
