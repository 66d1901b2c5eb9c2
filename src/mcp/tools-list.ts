// tools/list rewriting for priced tools (SPEC §5.3): an optional token argument, the price in _meta
// and one sentence in the description. Free tools are returned as the very same objects.
import type { GatewayConfig } from '../config/schema.js';
import { isObject, type JsonObject } from './jsonrpc.js';

export const PRICE_META_KEY = 'xyz.tollbooth/price';

export interface ToolPricing {
  argumentName: string;
  /** tool name → what it costs and the SKU's terms. */
  priceOf(tool: string): PriceTag | undefined;
}

export interface PriceTag {
  sku: string;
  cost: number;
  amount: string;
  currency: string;
  credits: number;
  label: string;
  charge: 'success' | 'attempt';
}

export function pricingFromConfig(config: GatewayConfig): ToolPricing {
  const tags = new Map<string, PriceTag>();
  for (const [tool, price] of Object.entries(config.tools)) {
    const sku = config.skus[price.sku];
    if (!sku) continue; // validated at load time
    tags.set(tool, { sku: price.sku, cost: price.cost, amount: sku.amount, currency: sku.currency, credits: sku.credits, label: sku.label, charge: price.charge });
  }
  return { argumentName: config.handles.argumentName, priceOf: (tool) => tags.get(tool) };
}

/** True when a JSON-RPC response carries a tools/list result (used on streams where the request is unknown). */
export function looksLikeToolsListResponse(message: unknown): message is { result: { tools: unknown[] } } {
  return isObject(message) && 'id' in message && isObject(message.result) && Array.isArray(message.result.tools);
}

/** Returns the rewritten result, or null when no tool in it is priced (nothing to change). */
export function rewriteToolsListResult(result: { tools: unknown[] }, pricing: ToolPricing): JsonObject | null {
  let changed = false;
  const tools = result.tools.map((tool) => {
    if (!isObject(tool) || typeof tool.name !== 'string') return tool;
    const price = pricing.priceOf(tool.name);
    if (!price) return tool;
    changed = true;
    return priceTool(tool, price, pricing.argumentName);
  });
  return changed ? { ...result, tools } : null;
}

/** Rewrites the tools/list results inside one message or a batch; undefined when nothing changed. */
export function rewriteToolsListMessages(parsed: unknown, pricing: ToolPricing): unknown {
  if (Array.isArray(parsed)) {
    let changed = false;
    const out = parsed.map((message) => {
      const one = rewriteOne(message, pricing);
      if (one === undefined) return message;
      changed = true;
      return one;
    });
    return changed ? out : undefined;
  }
  return rewriteOne(parsed, pricing);
}

function rewriteOne(message: unknown, pricing: ToolPricing): unknown {
  if (!looksLikeToolsListResponse(message)) return undefined;
  const result = rewriteToolsListResult(message.result, pricing);
  return result === null ? undefined : { ...(message as object), result };
}

function priceTool(tool: JsonObject, price: PriceTag, argumentName: string): JsonObject {
  const schema = isObject(tool.inputSchema) ? tool.inputSchema : { type: 'object' };
  const properties = isObject(schema.properties) ? schema.properties : {};
  const meta = isObject(tool._meta) ? tool._meta : {};
  const sentence = `Paid tool: ${price.cost} credit${price.cost === 1 ? '' : 's'} per call from the ${price.label} pack (${price.amount} ${price.currency} for ${price.credits} credits).`;
  const description = typeof tool.description === 'string' && tool.description.length > 0 ? `${tool.description} ${sentence}` : sentence;
  return {
    ...tool,
    description,
    inputSchema: {
      ...schema,
      properties: {
        ...properties,
        [argumentName]: {
          type: 'string',
          description:
            'Opaque payment handle. Omit it on the first call. If a result says PAYMENT_REQUIRED, copy the handle it gives you here exactly, byte for byte, when you retry.',
        },
      },
    },
    _meta: { ...meta, [PRICE_META_KEY]: { sku: price.sku, cost: price.cost, amount: price.amount, currency: price.currency, credits: price.credits, label: price.label } },
  };
}
