// A local x402 facilitator (SPEC §19 tests): real HTTP, the x402 v2 facilitator API (POST /verify,
// POST /settle, GET /supported) with the request and answer shapes of @x402/core. It checks what a
// real "exact" EVM facilitator checks before touching a chain: scheme, network, the EIP-712 domain,
// payee, amount, validity window, nonce reuse, and the EIP-3009 TransferWithAuthorization signature
// itself (viem verifyTypedData). Settling marks the nonce used and returns a made-up transaction hash.
// Tests can make verify or settle fail in the ways a real one does, and count every call.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { authorizationTypes } from '@x402/evm';
import { getAddress, verifyTypedData, type Hex } from 'viem';

export type VerifyFailure =
  | { mode: 'invalid'; reason: string } // 200 {isValid: false, invalidReason}
  | { mode: 'http'; status: number; body?: string } // that status with that (non-x402) body
  | { mode: 'reset' } // the connection is destroyed without an answer
  | { mode: 'hang' }; // never answers

export type SettleFailure =
  | { mode: 'refuse'; reason: string } // 200 {success: false, errorReason}
  | { mode: 'http'; status: number; body?: string }
  | { mode: 'reset' } // destroyed after the request was read: the settlement outcome is unknown to the caller
  | { mode: 'hang' };

export interface FakeFacilitatorOptions {
  /** Unix seconds; defaults to the real clock (the x402 client signs validBefore from Date.now). */
  nowSeconds?: () => number;
  /** Milliseconds to wait before answering settle (an on-chain transfer takes time). */
  settleDelayMs?: number;
  /** The loopback port to listen on (default 0: any free port). */
  port?: number;
}

export interface FakeFacilitator {
  url: string;
  calls: { verify: number; settle: number; supported: number };
  /** Every verify/settle request body as received (tests scan logs for what is in them). */
  bodies: string[];
  /** Nonces settled, as "asset:payer:nonce" in lower case. */
  settled: Set<string>;
  failVerify(failure: VerifyFailure | null, times?: number): void;
  failSettle(failure: SettleFailure | null, times?: number): void;
  close(): Promise<void>;
}

interface Authorization {
  from: string;
  to: string;
  value: string;
  validAfter: string;
  validBefore: string;
  nonce: string;
}

type Verdict = { isValid: true; payer: string } | { isValid: false; invalidReason: string; payer?: string };

export async function startFakeFacilitator(options: FakeFacilitatorOptions = {}): Promise<FakeFacilitator> {
  const nowSeconds = options.nowSeconds ?? (() => Math.floor(Date.now() / 1000));
  const calls = { verify: 0, settle: 0, supported: 0 };
  const bodies: string[] = [];
  const settled = new Set<string>();
  let verifyFailure: { failure: VerifyFailure; times: number } | null = null;
  let settleFailure: { failure: SettleFailure; times: number } | null = null;
  const sockets = new Set<Socket>();

  const takeFailure = <T>(slot: { failure: T; times: number } | null): T | null => {
    if (!slot || slot.times <= 0) return null;
    slot.times -= 1;
    return slot.failure;
  };

  async function check(body: unknown): Promise<Verdict> {
    const request = body as { x402Version?: number; paymentPayload?: any; paymentRequirements?: any };
    const payload = request.paymentPayload;
    const requirements = request.paymentRequirements;
    if (request.x402Version !== 2 || payload?.x402Version !== 2 || !requirements) return { isValid: false, invalidReason: 'invalid_x402_version' };
    if (payload.accepted?.scheme !== 'exact' || requirements.scheme !== 'exact') return { isValid: false, invalidReason: 'invalid_exact_evm_scheme' };
    if (payload.accepted?.network !== requirements.network || !/^eip155:\d+$/.test(requirements.network)) return { isValid: false, invalidReason: 'invalid_exact_evm_network_mismatch' };
    if (typeof requirements.extra?.name !== 'string' || typeof requirements.extra?.version !== 'string') return { isValid: false, invalidReason: 'invalid_exact_evm_missing_eip712_domain' };
    const auth = payload.payload?.authorization as Authorization | undefined;
    const signature = payload.payload?.signature as string | undefined;
    if (!auth || typeof signature !== 'string') return { isValid: false, invalidReason: 'invalid_exact_evm_payload' };
    let from: string;
    try {
      from = getAddress(auth.from);
      if (getAddress(auth.to) !== getAddress(requirements.payTo)) return { isValid: false, invalidReason: 'invalid_exact_evm_recipient_mismatch', payer: from };
    } catch {
      return { isValid: false, invalidReason: 'invalid_exact_evm_payload' };
    }
    if (BigInt(auth.value) !== BigInt(requirements.amount)) return { isValid: false, invalidReason: 'invalid_exact_evm_payload_authorization_value_mismatch', payer: from };
    const now = nowSeconds();
    if (BigInt(auth.validBefore) < BigInt(now + 6)) return { isValid: false, invalidReason: 'invalid_exact_evm_payload_authorization_valid_before', payer: from };
    if (BigInt(auth.validAfter) > BigInt(now)) return { isValid: false, invalidReason: 'invalid_exact_evm_payload_authorization_valid_after', payer: from };
    let good: boolean;
    try {
      good = await verifyTypedData({
        address: from as Hex,
        domain: { name: requirements.extra.name, version: requirements.extra.version, chainId: Number(requirements.network.split(':')[1]), verifyingContract: getAddress(requirements.asset) },
        types: authorizationTypes,
        primaryType: 'TransferWithAuthorization',
        message: { from: from as Hex, to: getAddress(auth.to), value: BigInt(auth.value), validAfter: BigInt(auth.validAfter), validBefore: BigInt(auth.validBefore), nonce: auth.nonce as Hex },
        signature: signature as Hex,
      });
    } catch {
      good = false;
    }
    if (!good) return { isValid: false, invalidReason: 'invalid_exact_evm_signature', payer: from };
    if (settled.has(nonceId(requirements.asset, from, auth.nonce))) return { isValid: false, invalidReason: 'invalid_exact_evm_nonce_already_used', payer: from };
    return { isValid: true, payer: from };
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const text = await readBody(req);
    const path = req.url ?? '/';
    if (req.method === 'GET' && path === '/supported') {
      calls.supported += 1;
      return json(res, 200, { kinds: [{ x402Version: 2, scheme: 'exact', network: 'eip155:84532' }, { x402Version: 2, scheme: 'exact', network: 'eip155:8453' }], extensions: [], signers: {} });
    }
    if (req.method !== 'POST' || (path !== '/verify' && path !== '/settle')) return json(res, 404, { error: 'not found' });
    bodies.push(text);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return json(res, 400, { error: 'invalid JSON' });
    }
    if (path === '/verify') {
      calls.verify += 1;
      const failure = takeFailure(verifyFailure);
      if (failure?.mode === 'hang') return;
      if (failure?.mode === 'reset') return void req.socket.destroy();
      if (failure?.mode === 'http') return raw(res, failure.status, failure.body ?? 'facilitator trouble');
      if (failure?.mode === 'invalid') return json(res, 200, { isValid: false, invalidReason: failure.reason });
      return json(res, 200, await check(body));
    }
    calls.settle += 1;
    const failure = takeFailure(settleFailure);
    const requirements = (body as { paymentRequirements?: { network?: string } }).paymentRequirements;
    if (failure?.mode === 'hang') return;
    if (failure?.mode === 'reset') return void req.socket.destroy();
    if (failure?.mode === 'http') return raw(res, failure.status, failure.body ?? 'facilitator trouble');
    if (failure?.mode === 'refuse') return json(res, 200, { success: false, errorReason: failure.reason, transaction: '', network: requirements?.network ?? '' });
    const verdict = await check(body);
    if (!verdict.isValid) return json(res, 200, { success: false, errorReason: verdict.invalidReason, transaction: '', network: requirements?.network ?? '', ...(verdict.payer ? { payer: verdict.payer } : {}) });
    const auth = (body as any).paymentPayload.payload.authorization as Authorization;
    const id = nonceId((body as any).paymentRequirements.asset, verdict.payer, auth.nonce);
    if (settled.has(id)) return json(res, 200, { success: false, errorReason: 'invalid_exact_evm_nonce_already_used', transaction: '', network: requirements?.network ?? '' });
    settled.add(id); // the chain's authorizationState flips before the answer leaves
    if (options.settleDelayMs) await new Promise((resolve) => setTimeout(resolve, options.settleDelayMs));
    return json(res, 200, { success: true, transaction: `0x${randomBytes(32).toString('hex')}`, network: requirements?.network, payer: verdict.payer });
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) raw(res, 500, 'fake facilitator error');
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    bodies,
    settled,
    failVerify(failure, times = Number.POSITIVE_INFINITY) {
      verifyFailure = failure ? { failure, times } : null;
    },
    failSettle(failure, times = Number.POSITIVE_INFINITY) {
      settleFailure = failure ? { failure, times } : null;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const nonceId = (asset: string, payer: string, nonce: string): string => `${asset}:${payer}:${nonce}`.toLowerCase();

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function json(res: ServerResponse, status: number, body: unknown): void {
  raw(res, status, JSON.stringify(body), 'application/json');
}

function raw(res: ServerResponse, status: number, body: string, type = 'text/plain'): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
