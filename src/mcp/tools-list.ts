// tools/list rewriting (SPEC §5.3, §18, §20): a priced tool gets an optional token argument, the price in
// _meta and one sentence in the description; the token argument is the gateway's alone, so a tool it
// does not price loses any property of that name (and its place in `required`) an upstream gave it.
// A tool the caller may not see (visibility.ts: hidden, or scopes it lacks) is left out of the list;
// `nextCursor` and every other field of the result stay, so pagination works page by page.
// Every other free tool is returned as the very same object.
import type { GatewayConfig } from '../config/schema.js';
import { isObject, type JsonObject } from './jsonrpc.js';
import type { ToolView } from './visibility.js';

export const PRICE_META_KEY = 'xyz.tollbooth/price';

export interface ToolPricing {
  argumentName: string;
  /** tool name → what it costs and the SKU's terms. */
  priceOf(tool: string): PriceTag | undefined;
}

/** SPEC §23: what a known caller's own list adds to each priced tool's price (tool name → fields), e.g. its balance. */
export type OwnPrices = ReadonlyMap<string, Readonly<Record<string, number | boolean | null>>>;

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
    // A hidden tool is never called (visibility.ts), so it is not priced on the request path.
    if (price.hidden || price.sku === undefined || price.cost === undefined) continue;
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

/**
 * Returns the rewritten result, or null when nothing in it changes (no priced tool, no stray token
 * argument, nothing the caller may not see). `view` null: the caller sees every tool.
 */
export function rewriteToolsListResult(result: { tools: unknown[] }, pricing: ToolPricing, view: ToolView | null = null, own: OwnPrices | null = null): JsonObject | null {
  let changed = false;
  const tools: unknown[] = [];
  for (const tool of result.tools) {
    if (!isObject(tool)) {
      tools.push(tool);
      continue;
    }
    const name = typeof tool.name === 'string' ? tool.name : undefined;
    if (view !== null && name !== undefined && !view(name)) {
      changed = true;
      continue;
    }
    const price = name !== undefined ? pricing.priceOf(name) : undefined;
    const next = price ? priceTool(tool, price, pricing.argumentName, own?.get(name as string)) : withoutTokenArgument(tool, pricing.argumentName);
    if (next !== tool) changed = true;
    tools.push(next);
  }
  return changed ? { ...result, tools } : null;
}

/** Rewrites the tools/list results inside one message or a batch; undefined when nothing changed. */
export function rewriteToolsListMessages(parsed: unknown, pricing: ToolPricing, view: ToolView | null = null, own: OwnPrices | null = null): unknown {
  if (Array.isArray(parsed)) {
    let changed = false;
    const out = (parsed as unknown[]).map((message) => {
      const one = rewriteOne(message, pricing, view, own);
      if (one === undefined) return message;
      changed = true;
      return one;
    });
    return changed ? out : undefined;
  }
  return rewriteOne(parsed, pricing, view, own);
}

function rewriteOne(message: unknown, pricing: ToolPricing, view: ToolView | null, own: OwnPrices | null): unknown {
  if (!looksLikeToolsListResponse(message)) return undefined;
  const result = rewriteToolsListResult(message.result, pricing, view, own);
  return result === null ? undefined : { ...(message as object), result };
}

function priceTool(tool: JsonObject, price: PriceTag, argumentName: string, own: Readonly<Record<string, number | boolean | null>> | undefined): JsonObject {
  const schema = isObject(tool.inputSchema) ? schemaWithoutToken(tool.inputSchema, argumentName) : { type: 'object' };
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
    _meta: { ...meta, [PRICE_META_KEY]: { sku: price.sku, cost: price.cost, amount: price.amount, currency: price.currency, credits: price.credits, label: price.label, ...own } },
  };
}

/** A tool the gateway does not price, without the token argument in its inputSchema (the same object when it has none). */
function withoutTokenArgument(tool: JsonObject, argumentName: string): JsonObject {
  if (!isObject(tool.inputSchema)) return tool;
  const schema = schemaWithoutToken(tool.inputSchema, argumentName);
  return schema === tool.inputSchema ? tool : { ...tool, inputSchema: schema };
}

/** The schema without `argumentName` in its root properties and `required` (the same object when neither holds it). */
function schemaWithoutToken(schema: JsonObject, argumentName: string): JsonObject {
  const { properties, required } = schema;
  const inProperties = isObject(properties) && Object.hasOwn(properties, argumentName);
  const inRequired = Array.isArray(required) && required.includes(argumentName);
  if (!inProperties && !inRequired) return schema;
  const next: JsonObject = { ...schema };
  if (inProperties) {
    const { [argumentName]: _token, ...rest } = properties;
    next.properties = rest;
  }
  if (inRequired) next.required = required.filter((name) => name !== argumentName);
  return next;
}
