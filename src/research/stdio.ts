// stdio entrypoint of the research server: `node dist/research/stdio.js`, as the gateway's default
// config spawns it. stdout carries JSON-RPC only; anything human goes to stderr.

import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { isEntrypoint } from './main-module.js';
import { offlineOriginDeps } from './offline-origin.js';
import { createResearchServer } from './server.js';
import type { ResearchDeps } from './tools.js';

export async function startResearchStdio(deps: ResearchDeps = {}): Promise<void> {
  const server = createResearchServer(deps);
  const transport = new StdioServerTransport();
  // The parent closing our stdin is the signal to go.
  process.stdin.once('end', () => {
    void server.close().finally(() => process.exit(0));
  });
  await server.connect(transport);
}

if (isEntrypoint(import.meta.url)) {
  const offline = process.env.RESEARCH_OFFLINE_ORIGIN;
  Promise.resolve()
    .then(() => {
      const deps = offlineOriginDeps(offline);
      if (offline) process.stderr.write(`research server: RESEARCH_OFFLINE_ORIGIN is set: every fetch goes to ${offline} (offline demos and tests only)\n`);
      return startResearchStdio(deps);
    })
    .catch((err: unknown) => {
      process.stderr.write(`research server (stdio) failed to start: ${(err as Error).message}\n`);
      process.exit(1);
    });
}
