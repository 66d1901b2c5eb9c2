// What an x402 client is asked to pay for one call (SPEC §19): the `PaymentRequirements` of the
// "exact" EVM scheme for this call's price, wrapped in an x402 v2 `PaymentRequired`. Pure functions
// of the config terms and the call, so every replica builds byte-identical requirements and a
// payload signed against one replica's challenge verifies on another.
import type { PaymentRequired, PaymentRequirements } from '@x402/core/types';
import type { PriceTag } from '../../mcp/tools-list.js';
import type { ResultShape } from '../../mcp/challenge.js';
import { atomicPrice, formatAtomic } from './price.js';

/** The rail's fixed terms, from `payments.x402` (extra already resolved from the library's asset table). */
export interface X402Terms {
  network: string;
  asset: string;
  assetDecimals: number;
  currency: string;
  payTo: string;
  maxTimeoutSeconds: number;
  extra: { name: string; version: string };
}

/** One priced tools/call, as the request path knows it. */
export interface X402Call {
  /** The tool name from the request body (SPEC §5.2: pricing uses the body's name). */
  tool: string;
  /** The tool as the ledger records it: `<server>/<tool>` at an endpoint of `servers`, as credit spends there (default: `tool`). */
  ledgerTool?: string;
  price: PriceTag;
  /** skus.<sku>.x402Price, when the SKU sets one. */
  x402Price?: string | undefined;
  /** The public URL of the MCP endpoint that serves the tool (server.publicUrl, or the §18 endpoint's). */
  endpointUrl: string;
  /** How the gateway's own results for this call are shaped (era, structuredContent allowed). */
  shape: ResultShape;
}

export const X402_VERSION = 2;
export const X402_SCHEME = 'exact';

/** Atomic units of the asset this call costs. */
export const callAmount = (call: X402Call, terms: X402Terms): string =>
  atomicPrice({ cost: call.price.cost, amount: call.price.amount, credits: call.price.credits, x402Price: call.x402Price }, terms.assetDecimals);

/** The one `accepts` entry for this call. Field order follows the x402 v2 spec. */
export function requirementsFor(call: X402Call, terms: X402Terms): PaymentRequirements {
  return {
    scheme: X402_SCHEME,
    network: terms.network as PaymentRequirements['network'],
    amount: callAmount(call, terms),
    asset: terms.asset,
    payTo: terms.payTo,
    maxTimeoutSeconds: terms.maxTimeoutSeconds,
    extra: { name: terms.extra.name, version: terms.extra.version },
  };
}

/**
 * `resource.url` names the endpoint and the tool: the endpoint's public URL with the tool in the
 * fragment (a fragment never reaches a server, so the URL stays the MCP endpoint itself).
 */
export const resourceUrl = (call: X402Call): string => `${call.endpointUrl.split('#')[0]}#tool=${encodeURIComponent(call.tool)}`;

export function paymentRequiredFor(call: X402Call, terms: X402Terms, error: string): PaymentRequired {
  const requirements = requirementsFor(call, terms);
  const perCall = formatAtomic(requirements.amount, terms.assetDecimals);
  return {
    x402Version: X402_VERSION,
    error,
    resource: {
      url: resourceUrl(call),
      description: `${call.tool}: ${perCall} ${terms.currency} per call (${call.price.label})`,
      mimeType: 'application/json',
    },
    accepts: [requirements],
  };
}
