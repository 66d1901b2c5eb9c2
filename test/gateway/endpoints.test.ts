// gateway/endpoints.ts: the endpoints one config describes (SPEC §18) and the keys its upstreams run under.
import t from 'tap';
import { configSchema } from '../../src/config/schema.js';
import { endpointsOf, upstreamKey } from '../../src/gateway/endpoints.js';

const config = configSchema.parse({
  server: { publicUrl: 'https://gw.example.com/mcp?tenant=a' },
  upstream: { url: 'http://127.0.0.1:3001/mcp', callDeadline: '5s' },
  skus: { research: { label: 'R', amount: '5.00', currency: 'USDC', credits: 10 } },
  tools: { fetch_readable: { sku: 'research', cost: 1 } },
  auth: { toolScopes: { fetch_readable: ['research:pay'] }, audience: 'api://tollbooth' },
  servers: {
    files: { path: '/mcp/files', upstream: { command: ['node', 'files.js'] }, tools: { write_file: { sku: 'research', cost: 2 } }, toolScopes: { write_file: ['files:write'] } },
  },
});

t.test('the default endpoint is the top level; each servers entry adds one at publicUrl origin + path', async (t) => {
  const [main, files, ...rest] = endpointsOf(config);
  t.equal(rest.length, 0);
  t.match(main, { name: 'default', path: '/mcp', publicUrl: 'https://gw.example.com/mcp?tenant=a', audience: 'api://tollbooth', tools: { fetch_readable: { cost: 1 } }, toolScopes: { fetch_readable: ['research:pay'] } });
  t.equal(main?.upstream.callDeadline, 5_000);
  t.match(files, { name: 'files', path: '/mcp/files', publicUrl: 'https://gw.example.com/mcp/files', audience: 'https://gw.example.com/mcp/files', tools: { write_file: { cost: 2 } }, toolScopes: { write_file: ['files:write'] } });
  t.same(files?.upstream.command, ['node', 'files.js']);
});

t.test('upstream keys: what runs decides, per endpoint; prices and deadlines do not', async (t) => {
  const [main, files] = endpointsOf(config);
  const key = upstreamKey('files', files!.upstream, 1024);
  t.equal(upstreamKey('files', { ...files!.upstream, callDeadline: 1 }, 1024), key, 'a deadline change keeps the running upstream');
  t.not(upstreamKey('files', { ...files!.upstream, command: ['node', 'other.js'] }, 1024), key, 'another command is another upstream');
  t.not(upstreamKey('files', { ...files!.upstream, stdio: { sessions: 'shared', maxChildren: 1, idleTimeout: 1000, initTimeout: 10_000, killTimeout: 5_000 } }, 1024), key, 'other stdio settings are another bridge');
  t.not(upstreamKey('files', { ...files!.upstream, env: { TOKEN: 'x' } }, 1024), key, 'another child environment is another bridge');
  t.not(upstreamKey('other', files!.upstream, 1024), key, 'the same command at another endpoint runs its own children');
  t.equal(upstreamKey('default', main!.upstream, 1), upstreamKey('default', { ...main!.upstream, headers: { a: 'b' } }, 2), 'an HTTP upstream is its URL');
});
