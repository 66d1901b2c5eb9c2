#!/usr/bin/env node
// A fake x402 facilitator for trying the x402 rail with your own gateway, on this machine alone.
//   node --import tsx scripts/fake-facilitator.mjs [--port N]
// It is the facilitator the tests use (test/helpers/x402-facilitator.ts): real HTTP (/verify, /settle,
// /supported), real EIP-712 signature and nonce checks for the `exact` scheme, and a made-up
// transaction hash instead of a chain. No money moves. Point `payments.x402.facilitatorUrl` of your
// config at the URL it prints, start the gateway, and pay with any x402 client (scripts/x402-demo.mjs
// shows one). Stop it with Ctrl-C.
import { parseArgs } from 'node:util';
import { startFakeFacilitator } from '../test/helpers/x402-facilitator.ts';

const USAGE = `usage: node --import tsx scripts/fake-facilitator.mjs [--port N]

Starts a fake x402 facilitator on 127.0.0.1 (default: a free port) and prints its URL and the
config lines that point a gateway at it. No chain, no money: signatures and nonces are checked,
settlements get a made-up transaction hash. Ctrl-C stops it.
`;

let values;
try {
  ({ values } = parseArgs({ options: { port: { type: 'string' }, help: { type: 'boolean', short: 'h' } } }));
} catch (error) {
  process.stderr.write(`${error.message}\n\n${USAGE}`);
  process.exit(2);
}
if (values.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const port = values.port === undefined ? 0 : Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write(`--port must be a port number from 0 to 65535, got ${JSON.stringify(values.port)}\n`);
  process.exit(2);
}

let facilitator;
try {
  facilitator = await startFakeFacilitator({ port });
} catch (error) {
  process.stderr.write(`cannot start the fake facilitator on 127.0.0.1:${port}: ${error.code ?? error.message}\n`);
  process.exit(1);
}
process.stdout.write(`fake x402 facilitator listening on ${facilitator.url}

In your gateway config (Base Sepolia USDC, as scripts/x402-demo.mjs uses):
payments:
  x402:
    facilitatorUrl: ${facilitator.url}
    network: eip155:84532
    asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
    assetDecimals: 6
    currency: USDC
    payTo: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
`);

const stop = () => {
  process.stdout.write(`verified ${facilitator.calls.verify}, settled ${facilitator.calls.settle} payment(s); stopping\n`);
  void facilitator.close().then(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
