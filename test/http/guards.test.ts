// Guards on the matched route (SPEC §5.2, issue 12): every spelling of the MCP path is either the MCP
// endpoint with every guard applied (Origin, Host) or not the endpoint at all (404) — the guards decide
// on the route the router matched, never on the raw URL. Raw HTTP, so no client normalises the paths.
import { request } from 'node:http';
import t from 'tap';
import { startTestGateway, testConfig } from '../helpers/gateway.js';
import { startScriptedUpstream } from '../helpers/scripted-upstream.js';

const upstream = await startScriptedUpstream();
t.teardown(() => upstream.close());
upstream.respond((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"result":{}}'));

const gateway = await startTestGateway(t, { ...testConfig(upstream.url), server: { host: '127.0.0.1', port: 0, allowedHosts: ['127.0.0.1'] } });
const port = Number(new URL(gateway.url).port);

function send(path: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end('{"jsonrpc":"2.0","id":1,"method":"ping"}');
  });
}

const FOREIGN = { origin: 'https://evil.example' };
const GOOD = { origin: gateway.origin };
const BAD_HOST = { host: 'rebind.example' };

/** Each spelling: is it the endpoint (guards apply, good requests reach the upstream) or not (404)? */
const SPELLINGS: [string, 'endpoint' | 'not the endpoint'][] = [
  ['/mcp', 'endpoint'],
  ['/%6Dcp', 'endpoint'],
  ['/%6d%63%70', 'endpoint'],
  ['/mcp?x', 'endpoint'],
  ['/mcp?x=1&y', 'endpoint'],
  ['/mcp/', 'not the endpoint'],
  ['//mcp', 'not the endpoint'],
  ['/MCP', 'not the endpoint'],
  ['/mcp;x', 'not the endpoint'],
  ['/mcp%2F', 'not the endpoint'],
  ['/./mcp', 'not the endpoint'],
];

for (const [path, kind] of SPELLINGS) {
  t.test(`${path} is ${kind}${kind === 'endpoint' ? ', with every guard applied' : ': 404 whatever the headers'}`, async (t) => {
    const before = upstream.seen.length;
    const foreign = await send(path, FOREIGN);
    const badHost = await send(path, { ...GOOD, ...BAD_HOST });
    t.equal(upstream.seen.length, before, 'a foreign Origin or Host never reaches the upstream');
    const good = await send(path, GOOD);
    if (kind === 'endpoint') {
      t.equal(foreign, 403, 'foreign Origin: 403');
      t.equal(badHost, 403, 'unexpected Host: 403');
      t.equal(good, 200, 'a good request is served');
      t.equal(upstream.seen.length, before + 1, 'and reaches the upstream');
    } else {
      t.same([foreign, badHost, good], [404, 404, 404]);
      t.equal(upstream.seen.length, before, 'nothing reaches the upstream');
    }
  });
}
