// RESEARCH_OFFLINE_ORIGIN=host:port — for demos and tests on a machine without internet access only.
// Every name then resolves to one public documentation-looking address (93.184.215.14, example.com's),
// so the SSRF guard runs unchanged and approves it, and every approved connection is dialled to
// host:port instead. A paid call can then succeed offline against a local page the operator serves.
// Never set it in production: it sends every fetch of the research server to that one origin.
import type { ResearchDeps } from './tools.js';

const STAND_IN_ADDRESS = '93.184.215.14';

/** The deps RESEARCH_OFFLINE_ORIGIN asks for, or {} when it is unset; throws on a malformed value. */
export function offlineOriginDeps(value: string | undefined): ResearchDeps {
  if (value === undefined || value === '') return {};
  const match = /^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):(\d{1,5})$/.exec(value);
  const port = match ? Number(match[2]) : NaN;
  if (!match || port < 1 || port > 65_535) throw new Error(`RESEARCH_OFFLINE_ORIGIN must be host:port (e.g. 127.0.0.1:8000), not ${JSON.stringify(value)}.`);
  const host = match[1]!.replace(/^\[|\]$/g, '');
  return {
    resolve: async () => [{ address: STAND_IN_ADDRESS, family: 4 }],
    connectOverride: () => ({ host, port }),
  };
}
