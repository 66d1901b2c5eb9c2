// The one description of tollbooth.yaml (SPEC §3). The TypeScript type, validation, defaults and the
// generated JSON Schema (config/tollbooth.schema.json, scripts/write-schema.mjs) all derive from it.
// Durations and sizes are normalised here: every duration is milliseconds, every size is bytes.
// Messages are noun phrases saying what was expected: the loader (load.ts) prints them as
// "<file>:<line>:<col> <path>: expected <message>, found <what the YAML holds>". A refinement that
// cannot be judged from the one node at its path passes `params.found` to say what was found.
import { z } from 'zod';
import { compareDecimal, isDecimalString } from '../money/decimal.js';
import { knownAsset } from '../money/assets.js';

// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ) — printable ASCII without space, `"` or `\`.
export const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/;

const DURATION_UNITS_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const SIZE_UNITS: Record<string, number> = { b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 };

const DURATION_EXPECTED = 'a duration such as "500ms", "20s", "60m", "1h" or "30d", or an integer number of milliseconds';
/** `500ms`, `20s`, `60m`, `1h`, `30d`, or an integer number of milliseconds. */
export const duration = z
  .union([z.int(DURATION_EXPECTED).nonnegative(DURATION_EXPECTED), z.string().regex(/^\d+(ms|s|m|h|d)$/, DURATION_EXPECTED)], DURATION_EXPECTED)
  .transform((value) => {
    if (typeof value === 'number') return value;
    const [, digits, unit] = /^(\d+)(ms|s|m|h|d)$/.exec(value) as RegExpExecArray;
    return Number(digits) * (DURATION_UNITS_MS[unit as string] as number);
  })
  .meta({ description: 'a duration: "500ms", "20s", "60m", "1h", "30d", or an integer in milliseconds' });

const SIZE_EXPECTED = 'a size such as "64kb" or "4mb" (binary units), or a positive integer number of bytes';
/** `4mb`, `64kb` (binary units: kb = 1024 bytes), or an integer number of bytes. */
export const byteSize = z
  .union([z.int(SIZE_EXPECTED).positive(SIZE_EXPECTED), z.string().regex(/^\d+([bB]|[kKmMgG][bB])$/, SIZE_EXPECTED)], SIZE_EXPECTED)
  .transform((value) => {
    if (typeof value === 'number') return value;
    const [, digits, unit] = /^(\d+)(b|kb|mb|gb)$/i.exec(value) as RegExpExecArray;
    return Number(digits) * (SIZE_UNITS[(unit as string).toLowerCase()] as number);
  })
  .meta({ description: 'a size in binary units: "64kb", "4mb", or an integer in bytes' });

/** A positive decimal string with at most 6 decimals ("5.00"); a YAML number is refused on purpose. */
export const decimalAmount = z
  .string('a decimal amount written as a string, e.g. "5.00" (quote it in YAML)')
  .regex(/^\d+(\.\d{1,6})?$/, 'a positive decimal string with at most 6 decimals, e.g. "5.00"')
  .refine((value) => /[1-9]/.test(value), 'an amount greater than zero');

const httpUrl = z.url({ protocol: /^https?$/, error: 'an absolute http(s) URL' });
const isHttpUrl = (value: string): boolean => httpUrl.safeParse(value).success;
/** An optional URL that may also be written as "" (an unset `${VAR}`), which means "not set". */
const optionalHttpUrl = z.union([httpUrl, z.literal('')], 'an absolute http(s) URL, or "" for none').optional();
const fraction = z.number('a fraction in [0, 1)').min(0, 'a fraction in [0, 1)').lt(1, 'a fraction in [0, 1)');
const positiveInt = z.int('a positive integer').positive('a positive integer');
const redisUrl = z.string().regex(/^rediss?:\/\//, 'a redis:// or rediss:// URL');
const SCOPE_EXPECTED = 'an RFC 6749 scope-token (printable ASCII without spaces, " or \\)';
/** Scope strings end up inside a quoted WWW-Authenticate parameter: only RFC 6749 scope-tokens (SPEC §20). */
const scopeList = z.array(z.string(SCOPE_EXPECTED).regex(SCOPE_TOKEN, SCOPE_EXPECTED));

const serverSchema = z.strictObject({
  host: z.string().default('127.0.0.1'),
  port: z.int().min(0).max(65535).default(8080),
  mcpPath: z.string().regex(/^\/\S*$/, 'a path starting with "/"').default('/mcp'),
  publicUrl: optionalHttpUrl,
  allowedOrigins: z.array(z.string()).default([]),
  allowedHosts: z.array(z.string()).default([]),
  bodyLimit: byteSize.default(4 * 1024 ** 2),
  trustProxy: z.boolean().default(false),
  // SIGTERM/SIGINT: how long calls in flight may finish before the children are stopped and the process exits.
  drainTimeout: duration.default(15_000),
});

/** How a stdio upstream's children are run (SPEC §5.5, src/bridge/README.md); only with upstream.command. */
const stdioSchema = z.strictObject({
  sessions: z.enum(['perClient', 'shared']).default('perClient'),
  maxChildren: positiveInt.default(32),
  idleTimeout: duration.refine((ms) => ms >= 1_000, 'a duration of at least 1s').default(600_000),
  // A child whose client has not completed initialize (notifications/initialized) this long after its spawn is stopped.
  initTimeout: duration.refine((ms) => ms >= 100, 'a duration of at least 100ms').default(10_000),
  // Stopping a child: SIGTERM to its process group, SIGKILL to the group this long after.
  killTimeout: duration.refine((ms) => ms >= 100, 'a duration of at least 100ms').default(5_000),
});

/** An environment variable's name, as a shell writes it. */
const ENV_NAME_EXPECTED = 'an environment variable name (letters, digits and _, not starting with a digit)';
const envName = z.string(ENV_NAME_EXPECTED).regex(/^[A-Za-z_][A-Za-z0-9_]*$/, ENV_NAME_EXPECTED);

const upstreamSchema = z
  .strictObject({
    url: httpUrl.optional(),
    command: z.array(z.string()).min(1, 'a command with at least the program name').optional(),
    stdio: stdioSchema.optional(),
    // A stdio child's environment is given, never inherited (PATH, HOME, LANG, LC_*, TZ, TMPDIR + these).
    inheritEnv: z.array(envName).default([]),
    env: z
      .record(z.string(), z.string())
      .superRefine((env, ctx) => {
        const bad = Object.keys(env).find((name) => !envName.safeParse(name).success);
        if (bad !== undefined) ctx.addIssue({ code: 'custom', message: `environment variable names as keys (${ENV_NAME_EXPECTED})`, input: env, params: { found: `the key ${JSON.stringify(bad)}` } });
      })
      .default({}),
    headers: z.record(z.string(), z.string()).default({}),
    callDeadline: duration.default(20_000),
    /** A priced call answered with a task holds its credit at most this long (then released). */
    taskDeadline: duration.default(3_600_000),
    maxResponseBytes: byteSize.default(16 * 1024 ** 2),
  })
  .superRefine((value, ctx) => {
    const count = Number(value.url !== undefined) + Number(value.command !== undefined);
    if (count !== 1) {
      ctx.addIssue({ code: 'custom', message: 'exactly one of upstream.url or upstream.command', input: value, params: { found: count === 0 ? 'neither' : 'both' } });
    }
    if (value.stdio !== undefined && value.command === undefined) {
      ctx.addIssue({ code: 'custom', path: ['stdio'], message: 'no upstream.stdio unless upstream.command is set (it says how stdio children run)', input: value.stdio, params: { found: 'upstream.stdio beside upstream.url' } });
    }
    if (value.command === undefined && value.inheritEnv.length > 0) {
      ctx.addIssue({ code: 'custom', path: ['inheritEnv'], message: 'no upstream.inheritEnv unless upstream.command is set (it is a stdio child\'s environment)', input: value.inheritEnv, params: { found: 'upstream.inheritEnv beside upstream.url' } });
    }
    if (value.command === undefined && Object.keys(value.env).length > 0) {
      ctx.addIssue({ code: 'custom', path: ['env'], message: 'no upstream.env unless upstream.command is set (it is a stdio child\'s environment)', input: value.env, params: { found: 'upstream.env beside upstream.url' } });
    }
  })
  // A stdio upstream always has its settings, defaults applied.
  .transform((value) => (value.command !== undefined && value.stdio === undefined ? { ...value, stdio: stdioSchema.parse({}) } : value));

const storeSchema = z
  .strictObject({
    type: z.enum(['memory', 'redis']).default('memory'),
    redis: z
      .strictObject({
        url: z
          .union([redisUrl, z.literal('')], 'a redis:// or rediss:// URL, or "" for none')
          .optional()
          .transform((url) => url || undefined),
        cluster: z.array(redisUrl).min(1).optional(),
        keyPrefix: z.string().default('tollbooth:'),
        // SPEC §21: with `replicated`, every money write waits (Redis WAIT) for waitReplicas replicas,
        // at most waitTimeout, before the gateway acts on it (src/store/README.md, "Durability").
        durability: z.enum(['none', 'replicated']).default('none'),
        waitReplicas: positiveInt.default(1),
        waitTimeout: duration.refine((ms) => ms >= 1 && ms <= 400, 'a duration from 1ms to 400ms (inside the store command timeout)').default(100),
      })
      .optional(),
    // SPEC §21: where records whose money already moved (x402 settlements) wait while the store is down.
    // Absent or "" = the OS state dir ($XDG_STATE_HOME or ~/.local/state)/tollbooth/outbox (store/outbox-file.ts).
    outboxDir: z.string().optional(),
  })
  .superRefine((value, ctx) => {
    if (value.type !== 'redis') return;
    const count = Number(Boolean(value.redis?.url)) + Number(value.redis?.cluster !== undefined);
    if (count !== 1) {
      ctx.addIssue({ code: 'custom', path: ['redis'], message: 'exactly one of store.redis.url or store.redis.cluster when store.type is redis', input: value.redis, params: { found: count === 0 ? 'neither' : 'both' } });
    }
  });

// ── payments.x402 (SPEC §19): the per-call rail for agents with a wallet ──────────────────────────
// Off while facilitatorUrl is empty. Formats are checked either way; what only matters for a live
// rail (a payee, a token the library can describe) is checked when it is on.
const evmAddress = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'a 0x-prefixed 20-byte hex address');
const x402Schema = z
  .strictObject({
    facilitatorUrl: z.union([httpUrl, z.literal('')], 'an absolute http(s) URL of an x402 facilitator, or "" for off').default(''),
    network: z.string().regex(/^eip155:[1-9]\d{0,17}$/, 'a CAIP-2 EVM network id such as "eip155:8453"').default('eip155:8453'),
    asset: evmAddress.default('0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913'),
    assetDecimals: z.int('an integer number of decimals from 0 to 36').min(0, 'an integer number of decimals from 0 to 36').max(36, 'an integer number of decimals from 0 to 36').default(6),
    currency: z.string().min(1, 'a non-empty currency code, e.g. USDC').default('USDC'),
    payTo: z.union([evmAddress, z.literal('')], 'a 0x-prefixed 20-byte hex address').default(''),
    maxTimeoutSeconds: positiveInt.max(3600, 'a positive integer of at most 3600 (seconds)').default(120),
    extra: z.strictObject({ name: z.string().min(1, 'a non-empty EIP-712 domain name'), version: z.string().min(1, 'a non-empty EIP-712 domain version') }).optional(),
  })
  .superRefine((value, ctx) => {
    if (!isHttpUrl(value.facilitatorUrl)) return; // off, or already refused
    if (value.payTo === '' || /^0x0{40}$/.test(value.payTo)) {
      ctx.addIssue({ code: 'custom', path: ['payTo'], message: 'a non-zero payTo address because payments.x402.facilitatorUrl is set (where the payments go)', input: value.payTo });
    }
    const known = knownAsset(value.network, value.asset);
    if (known && known.transferMethod !== 'eip3009') {
      ctx.addIssue({ code: 'custom', path: ['asset'], message: `an EIP-3009 token (@x402/evm transfers this one with ${known.transferMethod}, which the x402 rail does not support)`, input: value.asset });
    }
    if (known && known.decimals !== value.assetDecimals) {
      ctx.addIssue({ code: 'custom', path: ['assetDecimals'], message: `${known.decimals}, the decimals of this asset on ${value.network}`, input: value.assetDecimals });
    }
    if (!known && value.extra === undefined) {
      ctx.addIssue({ code: 'custom', path: ['extra'], message: `the token's EIP-712 domain { name, version }: @x402/evm does not know asset ${value.asset} on ${value.network}`, input: value.extra, params: { found: 'nothing (no "extra" key)' } });
    }
  })
  .transform((value) => {
    // The effective config must parse again (tollbooth check prints it): resolve extra, derive nothing else.
    if (value.facilitatorUrl === '' || value.extra !== undefined) return value;
    const known = knownAsset(value.network, value.asset);
    return known ? { ...value, extra: { name: known.name, version: known.version } } : value;
  });

/** With x402 on: a SKU that asks for an x402 price must be in its currency, and some SKU must be (else the rail is dead). */
function checkX402Currencies(config: { payments: { x402: { facilitatorUrl: string; currency: string } }; skus: Record<string, { currency: string; x402Price?: string | undefined }> }, ctx: z.RefinementCtx): void {
  const { facilitatorUrl, currency } = config.payments.x402;
  if (!facilitatorUrl) return;
  let offered = 0;
  for (const [name, sku] of Object.entries(config.skus)) {
    if (sku.currency === currency) {
      offered += 1;
    } else if (sku.x402Price !== undefined || sku.currency.toUpperCase() === currency.toUpperCase()) {
      const why = sku.x402Price !== undefined ? 'this SKU sets x402Price' : 'it differs only in letter case';
      ctx.addIssue({ code: 'custom', path: ['skus', name, 'currency'], message: `the x402 currency "${currency}" (payments.x402.currency) because ${why}`, input: sku.currency });
    }
  }
  if (offered === 0) {
    ctx.addIssue({ code: 'custom', path: ['payments', 'x402', 'currency'], message: `the currency of at least one SKU, because x402 is on (SKU currencies: ${[...new Set(Object.values(config.skus).map((sku) => sku.currency))].join(', ') || 'none'})`, input: currency });
  }
}

const MOOVE_BASE_URL = 'https://api.moove.xyz';

const paymentsSchema = z
  .strictObject({
    provider: z.enum(['dev', 'moove']).default('dev'),
    chargeTtl: duration.refine((ms) => ms >= 15 * 60_000, 'a duration of at least 15m').default(60 * 60_000),
    // No defaults inside: whether the operator wrote a value decides the provider check below; the
    // transform at the end fills the defaults in.
    moove: z
      .strictObject({
        apiKey: z.string().optional().meta({ default: '' }),
        baseUrl: httpUrl.optional().meta({ default: MOOVE_BASE_URL }),
        webhookSecret: z.string().optional().meta({ default: '' }),
      })
      .optional()
      .meta({ default: {} }),
    settlement: z
      .strictObject({ tolerance: fraction.default(0.005), minimumFraction: fraction.default(0.1) })
      .refine((s) => s.minimumFraction <= 1 - s.tolerance, { message: 'a minimumFraction ≤ 1 − tolerance', path: ['minimumFraction'] })
      .prefault({}),
    reconcile: z.strictObject({ interval: duration.default(60_000) }).prefault({}),
    x402: x402Schema.prefault({}),
  })
  .superRefine((value, ctx) => {
    if (value.provider === 'moove' && !value.moove?.apiKey) {
      ctx.addIssue({ code: 'custom', path: ['moove', 'apiKey'], message: 'a non-empty apiKey because payments.provider is moove (set MOOVE_API_KEY)', input: value.moove?.apiKey ?? '' });
    }
    // SPEC §20: an operator who fills in Moove but forgets the provider must not get a free dev checkout.
    const filledIn = Object.entries(value.moove ?? {}).filter(([, setting]) => setting !== undefined && setting !== '').map(([key]) => key);
    if (value.provider !== 'moove' && filledIn.length > 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['provider'],
        message: `moove, because payments.moove sets ${filledIn.join(', ')} (without provider: moove the gateway would run on the free dev checkout and nobody would pay; remove the payments.moove block to use dev)`,
        input: value.provider,
      });
    }
  })
  .transform(({ moove, ...payments }) => ({
    ...payments,
    moove: { apiKey: moove?.apiKey ?? '', baseUrl: moove?.baseUrl ?? MOOVE_BASE_URL, webhookSecret: moove?.webhookSecret ?? '' },
  }));

const skuSchema = z
  .strictObject({
    label: z.string().min(1, 'a non-empty label'),
    amount: decimalAmount,
    currency: z.string().min(1, 'a non-empty currency code, e.g. USDC'),
    credits: positiveInt,
    allowBelowMinimum: z.boolean().default(false),
    x402Price: z.string('a decimal price per credit written as a string, e.g. "0.02"').regex(/^\d+(\.\d{1,18})?$/, 'a positive decimal string per credit, e.g. "0.02"').refine((value) => /[1-9]/.test(value), 'a price greater than zero').optional(),
  })
  .superRefine((sku, ctx) => {
    if (!sku.allowBelowMinimum && isDecimalString(sku.amount) && compareDecimal(sku.amount, '5') < 0) {
      ctx.addIssue({ code: 'custom', path: ['amount'], message: 'an amount of at least 5.00 (credit packs under 5.00 are refused unless the SKU sets allowBelowMinimum: true)', input: sku.amount });
    }
  });

// A tool entry prices a tool (sku + cost), hides it (hidden: true; SPEC §18), or both. A hidden tool
// is out of every tools/list and not callable (the gateway answers as for an unknown tool); a hidden
// priced tool keeps its price for the day it is shown again, and until then nobody can pay for it.
const toolPriceSchema = z
  .strictObject({
    sku: z.string().optional(),
    cost: positiveInt.optional(),
    charge: z.enum(['success', 'attempt']).default('success'),
    hidden: z.boolean().default(false),
  })
  .superRefine((tool, ctx) => {
    if (tool.sku !== undefined && tool.cost === undefined) ctx.addIssue({ code: 'custom', path: ['cost'], message: 'a cost (a positive integer) because the tool names an sku', input: tool.cost });
    if (tool.cost !== undefined && tool.sku === undefined) ctx.addIssue({ code: 'custom', path: ['sku'], message: 'the name of an SKU under skus because the tool has a cost', input: tool.sku });
    if (tool.sku === undefined && tool.cost === undefined && !tool.hidden) {
      ctx.addIssue({ code: 'custom', path: ['sku'], message: 'an sku and a cost (a priced tool), or hidden: true (a free tool removed from tools/list)', input: tool.sku });
    }
  });

/** SPEC §18: one more MCP endpoint in front of its own upstream; SKUs and handles are the top level's. */
const serverEntrySchema = z.strictObject({
  path: z.string().regex(/^\/\S*$/, 'a path starting with "/"'),
  upstream: upstreamSchema,
  tools: z.record(z.string(), toolPriceSchema).default({}),
  toolScopes: z.record(z.string(), scopeList).default({}),
});
/** A `servers` key names the endpoint in metrics and logs: a short label, never `default` (the top-level endpoint's). */
const SERVER_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,62}$/;
/** Paths the gateway serves itself (SPEC §4): no MCP endpoint may take them. */
const OPS_PREFIXES = ['/healthz', '/readyz', '/tollbooth/', '/.well-known/'];

// ── budgets and allowances (SPEC §23): caps on spending and free calls before payment ───────────────
// A name labels refusals, receipts and metrics, and keys the store's counters (with the subject and the
// window): a hot reload that keeps a name keeps its counts, whatever else it changes.
const QUOTA_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,62}$/;
const QUOTA_NAME_EXPECTED = 'a name of letters, digits, "-" and "_" starting with a letter (it labels refusals and metrics)';
const MIN_QUOTA_WINDOW_MS = 60_000;
const MAX_QUOTA_WINDOW_MS = 31 * 86_400_000;
const quotaWindow = duration.refine((ms) => ms >= MIN_QUOTA_WINDOW_MS && ms <= MAX_QUOTA_WINDOW_MS, 'a window from 1m to 31d (fixed windows aligned to the UTC epoch), e.g. "1h" or "1d"');
/** Which priced calls a budget or an allowance counts: one of tools / sku / server, or every priced tool when none is given. */
const quotaScope = {
  tools: z.array(z.string().min(1, 'a tool name')).min(1, 'a non-empty list of priced tool names').optional(),
  sku: z.string().min(1, 'the name of an SKU under skus').optional(),
  server: z.string().min(1, 'an endpoint name ("default" or a servers key)').optional(),
};
function checkOneScope(entry: { tools?: unknown; sku?: unknown; server?: unknown }, ctx: z.RefinementCtx): void {
  const given = (['tools', 'sku', 'server'] as const).filter((key) => entry[key] !== undefined);
  if (given.length > 1) {
    ctx.addIssue({ code: 'custom', path: [given[1] as string], message: 'at most one of tools, sku or server (omit all three to count every priced tool)', input: entry[given[1] as 'tools'], params: { found: `${given.join(' and ')} together` } });
  }
}

const budgetSchema = z
  .strictObject({
    name: z.string(QUOTA_NAME_EXPECTED).regex(QUOTA_NAME, QUOTA_NAME_EXPECTED),
    per: z.enum(['principal', 'handle'], 'principal (needs auth.mode oauth) or handle'),
    ...quotaScope,
    window: quotaWindow,
    maxCalls: positiveInt.optional(),
    maxCredits: positiveInt.optional(),
  })
  .superRefine((budget, ctx) => {
    checkOneScope(budget, ctx);
    if (budget.maxCalls === undefined && budget.maxCredits === undefined) {
      ctx.addIssue({ code: 'custom', path: ['maxCalls'], message: 'a cap: maxCalls or maxCredits (a positive integer), or both', input: budget.maxCalls, params: { found: 'neither maxCalls nor maxCredits' } });
    }
  });

const allowanceSchema = z
  .strictObject({
    name: z.string(QUOTA_NAME_EXPECTED).regex(QUOTA_NAME, QUOTA_NAME_EXPECTED),
    per: z.enum(['principal', 'client'], 'principal (needs auth.mode oauth) or client (the principal, else the IPv4 address or IPv6 /64)'),
    ...quotaScope,
    window: quotaWindow,
    freeCalls: positiveInt,
  })
  .superRefine(checkOneScope);

const rateSchema = z.strictObject({ ratePerSecond: z.number().positive(), burst: positiveInt });

// ── tracing (SPEC §17): OpenTelemetry spans over OTLP/HTTP, off while otlpEndpoint is empty ─────────
// otlpEndpoint is a base URL as OTEL_EXPORTER_OTLP_ENDPOINT: spans go to {base}/v1/traces.
// exporter console: one JSON span per line on stderr, for seeing spans without a collector (otlpEndpoint unused).
const tracingSchema = z.strictObject({
  exporter: z.enum(['otlp', 'console'], 'otlp (spans to otlpEndpoint; off while it is "") or console (one JSON span per line on stderr)').default('otlp'),
  otlpEndpoint: z
    .string('an absolute http(s) base URL of an OTLP/HTTP collector, or "" for off')
    .refine((value) => value === '' || isHttpUrl(value), 'an absolute http(s) base URL of an OTLP/HTTP collector (spans go to {base}/v1/traces), or "" for off')
    .default(''),
  serviceName: z.string().min(1, 'a non-empty service name').default('tollbooth'),
  sampleRatio: z.number('a fraction from 0 to 1').min(0, 'a fraction from 0 to 1').max(1, 'a fraction from 0 to 1').default(1),
});

const authSchema = z
  .strictObject({
    mode: z.enum(['none', 'oauth']).default('none'),
    issuer: z.string().default(''),
    jwksUrl: z.string().default(''),
    audience: z.string().nullable().default(null),
    algorithms: z.array(z.enum(['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'])).min(1).default(['RS256', 'ES256', 'EdDSA']),
    authorizationServers: z.array(z.string()).default([]),
    requiredScopes: scopeList.default([]),
    toolScopes: z.record(z.string(), scopeList).default({}),
    // SPEC §18 (oauth mode): tools/list shows a caller only the tools whose toolScopes its token holds.
    hideUnauthorisedTools: z.boolean().default(true),
  })
  .superRefine((value, ctx) => {
    if (value.mode !== 'oauth') return;
    if (!value.issuer) ctx.addIssue({ code: 'custom', path: ['issuer'], message: 'a non-empty issuer because auth.mode is oauth', input: value.issuer });
    if (!isHttpUrl(value.jwksUrl)) ctx.addIssue({ code: 'custom', path: ['jwksUrl'], message: 'an absolute http(s) jwksUrl because auth.mode is oauth', input: value.jwksUrl });
  });

export const configSchema = z
  .strictObject({
    server: serverSchema.prefault({}),
    upstream: upstreamSchema,
    store: storeSchema.prefault({}),
    payments: paymentsSchema.prefault({}),
    skus: z.record(z.string(), skuSchema).default({}),
    tools: z.record(z.string(), toolPriceSchema).default({}),
    servers: z.record(z.string(), serverEntrySchema).default({}),
    budgets: z.array(budgetSchema).default([]),
    allowances: z.array(allowanceSchema).default([]),
    handles: z
      .strictObject({
        argumentName: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an identifier').default('tollboothToken'),
        ttl: duration.refine((ms) => ms >= 3_600_000, 'a duration of at least 1h').default(30 * 86_400_000),
        // Per-deployment secret for the keyed handle hash (HMAC-SHA-256); empty = plain SHA-256.
        hashSecret: z.string().default(''),
      })
      .prefault({}),
    limits: z
      .strictObject({
        perHandle: rateSchema.default({ ratePerSecond: 2, burst: 10 }),
        challengesPerClient: rateSchema.default({ ratePerSecond: 0.2, burst: 5 }),
        // Every replica together: new checkout links opened per second (a burst of as many), §6.2 step 2.
        newChargesPerSecond: z.number('a positive number of new charges per second').positive('a positive number of new charges per second').default(20),
      })
      .prefault({}),
    auth: authSchema.prefault({}),
    tracing: tracingSchema.prefault({}),
    metrics: z.strictObject({ enabled: z.boolean().default(true), path: z.string().regex(/^\//, 'a path starting with "/"').default('/metrics') }).prefault({}),
    logging: z.strictObject({ level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info') }).prefault({}),
    // The admin channel of a memory-store gateway (src/admin-channel.ts): "" = admin-<port>.sock in the state dir.
    admin: z.strictObject({ socket: z.string('a Unix socket path, or "" for admin-<port>.sock in $XDG_STATE_HOME/tollbooth (else ~/.local/state/tollbooth)').default('') }).prefault({}),
    // SPEC §24: results of priced calls with an idempotency key, kept for their retries.
    idempotency: z
      .strictObject({
        ttl: duration.refine((ms) => ms >= 60_000 && ms <= 30 * 86_400_000, 'a duration from 1m to 30d').default(24 * 3_600_000),
        // A larger result is not kept (counted, logged): its retry runs, and is charged, again.
        maxResultBytes: byteSize.refine((bytes) => bytes <= 64 * 1024 ** 2, 'a size of at most 64mb (each kept result is one store value)').default(1024 ** 2),
      })
      .prefault({}),
    // SPEC §17: how long ledger entries outlive their handle.
    ledger: z
      .strictObject({
        retention: duration.refine((ms) => ms >= 86_400_000, 'a duration of at least 1d').default(400 * 86_400_000),
        // The HMAC-SHA-256 key of `ledger export`'s trailer; empty = the trailer's mac is null.
        signingKey: z.string().default(''),
      })
      .prefault({}),
  })
  .superRefine((config, ctx) => {
    for (const [tool, price] of Object.entries(config.tools)) {
      if (price.sku !== undefined && !Object.hasOwn(config.skus, price.sku)) {
        ctx.addIssue({ code: 'custom', path: ['tools', tool, 'sku'], message: `the name of an SKU under skus (known: ${Object.keys(config.skus).join(', ') || 'none'})`, input: price.sku });
      }
    }
    // §3: a charge opened just before the handle's last call could be paid after the handle expired.
    // (A ttl under the 1 h floor is already reported at its own path.)
    if (config.handles.ttl >= 3_600_000 && config.handles.ttl <= config.payments.chargeTtl) {
      ctx.addIssue({
        code: 'custom',
        path: ['handles', 'ttl'],
        message: `a handles.ttl longer than payments.chargeTtl (${config.payments.chargeTtl} ms) so a payment never lands on an expired handle`,
        input: config.handles.ttl,
      });
    }
    checkX402Currencies(config, ctx);
    checkServers(config, ctx);
    checkQuotas(config, ctx);
    if (config.auth.mode === 'oauth' && !config.server.publicUrl) {
      ctx.addIssue({ code: 'custom', path: ['server', 'publicUrl'], message: 'an absolute http(s) server.publicUrl because auth.mode is oauth', input: config.server.publicUrl });
    }
  })
  .transform((config) => {
    const publicUrl = config.server.publicUrl || `http://${config.server.host}:${config.server.port}${config.server.mcpPath}`;
    return {
      ...config,
      server: { ...config.server, publicUrl },
      auth: { ...config.auth, audience: config.auth.audience ?? publicUrl },
    };
  });

/** SPEC §18: server names, SKUs of their tools, and endpoint paths distinct from each other and from the gateway's own routes. */
function checkServers(
  config: { server: { mcpPath: string }; metrics: { path: string }; skus: Record<string, unknown>; servers: Record<string, { path: string; tools: Record<string, { sku?: string | undefined }> }> },
  ctx: z.RefinementCtx,
): void {
  const taken = new Map<string, string>([[config.server.mcpPath, 'server.mcpPath'], [config.metrics.path, 'metrics.path']]);
  for (const [name, entry] of Object.entries(config.servers)) {
    if (!SERVER_NAME.test(name) || name === 'default') {
      ctx.addIssue({ code: 'custom', path: ['servers', name], message: 'a server name of letters, digits, "-" and "_" starting with a letter, other than "default" (it labels metrics and logs)', input: name, params: { found: JSON.stringify(name) } });
    }
    for (const [tool, price] of Object.entries(entry.tools)) {
      if (price.sku !== undefined && !Object.hasOwn(config.skus, price.sku)) {
        ctx.addIssue({ code: 'custom', path: ['servers', name, 'tools', tool, 'sku'], message: `the name of an SKU under skus (known: ${Object.keys(config.skus).join(', ') || 'none'})`, input: price.sku });
      }
    }
    const path = entry.path;
    const clash = taken.get(path) ?? OPS_PREFIXES.find((prefix) => path === prefix || path.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`) || `${path}/` === prefix);
    if (clash !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['servers', name, 'path'], message: 'a path no other endpoint or gateway route uses', input: path, params: { found: `${JSON.stringify(path)}, which ${clash.startsWith('/') ? `is the gateway's own ${clash} route` : `is already ${clash}`}` } });
    } else {
      taken.set(path, `servers.${name}.path`);
    }
  }
}

/** SPEC §23: names unique per kind; tools, SKUs and servers that exist; per: principal only where there are principals. */
function checkQuotas(
  config: {
    auth: { mode: string };
    skus: Record<string, unknown>;
    tools: Record<string, { sku?: string | undefined }>;
    servers: Record<string, { tools: Record<string, { sku?: string | undefined }> }>;
    budgets: { name: string; per: string; tools?: string[] | undefined; sku?: string | undefined; server?: string | undefined }[];
    allowances: { name: string; per: string; tools?: string[] | undefined; sku?: string | undefined; server?: string | undefined }[];
  },
  ctx: z.RefinementCtx,
): void {
  const priced = new Set<string>();
  for (const tools of [config.tools, ...Object.values(config.servers).map((entry) => entry.tools)]) {
    for (const [tool, price] of Object.entries(tools)) if (price.sku !== undefined) priced.add(tool);
  }
  const servers = ['default', ...Object.keys(config.servers)];
  for (const kind of ['budgets', 'allowances'] as const) {
    const seen = new Map<string, number>();
    config[kind].forEach((entry, index) => {
      const first = seen.get(entry.name);
      if (first !== undefined) {
        ctx.addIssue({ code: 'custom', path: [kind, index, 'name'], message: `a name no other entry of ${kind} uses (${kind}[${first}] is already ${JSON.stringify(entry.name)})`, input: entry.name });
      } else {
        seen.set(entry.name, index);
      }
      if (entry.per === 'principal' && config.auth.mode !== 'oauth') {
        const other = kind === 'budgets' ? 'handle' : 'client';
        ctx.addIssue({ code: 'custom', path: [kind, index, 'per'], message: `per: ${other}, because auth.mode is not oauth (principals come from OAuth tokens; set auth.mode: oauth to count per principal)`, input: entry.per });
      }
      (entry.tools ?? []).forEach((tool, at) => {
        if (!priced.has(tool)) {
          ctx.addIssue({ code: 'custom', path: [kind, index, 'tools', at], message: `the name of a priced tool (priced: ${[...priced].join(', ') || 'none'})`, input: tool });
        }
      });
      if (entry.sku !== undefined && !Object.hasOwn(config.skus, entry.sku)) {
        ctx.addIssue({ code: 'custom', path: [kind, index, 'sku'], message: `the name of an SKU under skus (known: ${Object.keys(config.skus).join(', ') || 'none'})`, input: entry.sku });
      }
      if (entry.server !== undefined && !servers.includes(entry.server)) {
        ctx.addIssue({ code: 'custom', path: [kind, index, 'server'], message: `an endpoint name (known: ${servers.join(', ')})`, input: entry.server });
      }
    });
  }
}

export type ConfigInput = z.input<typeof configSchema>;
export type GatewayConfig = z.output<typeof configSchema>;
export type SkuConfig = GatewayConfig['skus'][string];
export type ToolPrice = GatewayConfig['tools'][string];
export type X402Config = GatewayConfig['payments']['x402'];
export type TracingConfig = GatewayConfig['tracing'];
export type UpstreamConfig = GatewayConfig['upstream'];
export type ServerEntryConfig = GatewayConfig['servers'][string];
export type BudgetConfig = GatewayConfig['budgets'][number];
export type AllowanceConfig = GatewayConfig['allowances'][number];
