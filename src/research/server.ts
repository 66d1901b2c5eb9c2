// The research MCP server: the three tools registered on an SDK v1 McpServer. Transport-free; the
// entrypoints (http.ts, stdio.ts) connect it. Tool failures are results with `isError: true` and
// one sentence of text, never JSON-RPC errors, so a model can read and act on them.

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { isResearchError } from './errors.js';
import { extractTables, fetchReadable, inspectDomain, type ResearchDeps } from './tools.js';

export const RESEARCH_SERVER_INFO = { name: 'tollbooth-research', version: '0.1.0' } as const;

const url = z.string().min(1).max(2048).describe('An http or https URL on a public host (ports 80, 443, 8080 or 8443).');

const tableShape = z.object({
  caption: z.string().optional(),
  headers: z.array(z.string()).describe('Header cells; empty when the table has no header row.'),
  rows: z.array(z.array(z.string())),
});

const certificateShape = z.object({
  subject_cn: z.string(),
  subject_o: z.string(),
  issuer_cn: z.string(),
  issuer_o: z.string(),
  valid_from: z.string().describe('ISO 8601'),
  valid_to: z.string().describe('ISO 8601'),
  days_left: z.number().int(),
  subject_alt_names: z.array(z.string()),
  authorized: z.boolean(),
  authorization_error: z.string(),
});

const tablesOutput = { url: z.string(), tables: z.array(tableShape) };

const domainOutput = {
  domain: z.string(),
  address: z.string(),
  records: z.object({
    A: z.array(z.string()),
    AAAA: z.array(z.string()),
    MX: z.array(z.object({ exchange: z.string(), priority: z.number() })),
    NS: z.array(z.string()),
    TXT: z.array(z.string()),
    CNAME: z.array(z.string()),
  }),
  dns_errors: z.array(z.string()),
  certificate: certificateShape.nullable(),
  tls_error: z.string(),
};

const READ_ONLY = { readOnlyHint: true, openWorldHint: true } as const;

function toolError(err: unknown): CallToolResult {
  const text = isResearchError(err) ? err.message : `The tool failed unexpectedly: ${(err as Error).message ?? String(err)}`;
  return { content: [{ type: 'text', text }], isError: true };
}

/** Runs a tool body; any thrown error becomes a tool error result. */
async function run(work: () => Promise<CallToolResult>): Promise<CallToolResult> {
  try {
    return await work();
  } catch (err) {
    return toolError(err);
  }
}

function structured<T extends object>(value: T): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(value, null, 2) }], structuredContent: value as Record<string, unknown> };
}

export function createResearchServer(deps: ResearchDeps = {}): McpServer {
  const server = new McpServer(RESEARCH_SERVER_INFO);

  server.registerTool(
    'fetch_readable',
    {
      title: 'Fetch readable text',
      description: 'Fetches a public web page and returns its readable text (scripts, styles and navigation removed).',
      inputSchema: {
        url,
        max_chars: z.number().int().min(100).max(100_000).optional().describe('Cut the text at this many characters (default 20000).'),
      },
      annotations: READ_ONLY,
    },
    (args) =>
      run(async () => {
        const page = await fetchReadable(args, deps);
        const heading = page.title === '' ? '' : `# ${page.title}\n\n`;
        const tail = page.truncated ? '\n\n[truncated]' : '';
        return { content: [{ type: 'text', text: `${heading}${page.text}${tail}\n\nSource: ${page.url}` }] };
      }),
  );

  server.registerTool(
    'extract_tables',
    {
      title: 'Extract tables',
      description: 'Fetches a public web page and returns every HTML table on it (up to 50) as headers and rows.',
      inputSchema: { url },
      outputSchema: tablesOutput,
      annotations: READ_ONLY,
    },
    (args) => run(async () => structured(await extractTables(args, deps))),
  );

  server.registerTool(
    'inspect_domain',
    {
      title: 'Inspect domain',
      description: "Returns a public domain's A, AAAA, MX, NS, TXT and CNAME records and its TLS certificate (subject, issuer, expiry).",
      inputSchema: { domain: z.string().min(1).max(253).describe('A domain name such as example.com.') },
      outputSchema: domainOutput,
      annotations: READ_ONLY,
    },
    (args) => run(async () => structured(await inspectDomain(args, deps))),
  );

  return server;
}
