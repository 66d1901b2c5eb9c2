// Reading upstream bodies the gateway must parse, never past maxResponseBytes.
import t from 'tap';
import { createServer, request } from 'node:http';
import { PassThrough, Readable } from 'node:stream';
import { discard, parseJsonOrUndefined, readCapped, relayBody } from '../../src/proxy/body.js';
import { GatewayError } from '../../src/errors.js';

t.test('readCapped returns the whole body as UTF-8 text', async (t) => {
  const bytes = Buffer.from('{"a":"☀️"}', 'utf8');
  t.equal(await readCapped(Readable.from([bytes.subarray(0, 8), bytes.subarray(8)]), 100), '{"a":"☀️"}');
});

t.test('a body of exactly maxBytes is accepted', async (t) => {
  t.equal((await readCapped(Readable.from([Buffer.alloc(10, 0x61)]), 10)).length, 10);
});

t.test('a body over maxBytes is refused with TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE and the source destroyed', async (t) => {
  let produced = 0;
  const body = new Readable({
    read() {
      produced++;
      this.push(Buffer.alloc(1024));
    },
  });
  const error = await readCapped(body, 4096).catch((e: unknown) => e);
  t.ok(error instanceof GatewayError);
  t.equal((error as GatewayError).code, 'TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE');
  t.equal((error as GatewayError).status, 502);
  t.ok(body.destroyed, 'the upstream body is dropped');
  t.ok(produced < 20, `stopped reading after ${produced} chunks`);
});

t.test('discard swallows a late error instead of crashing the process', async (t) => {
  const body = new Readable({ read() {} });
  discard(body);
  body.emit('error', new Error('late abort'));
  t.ok(body.destroyed);
});

t.test('parseJsonOrUndefined never throws', async (t) => {
  t.same(parseJsonOrUndefined('{"a":1}'), { a: 1 });
  t.equal(parseJsonOrUndefined('{'), undefined);
  t.equal(parseJsonOrUndefined(''), undefined);
  t.equal(parseJsonOrUndefined('null'), null);
});

t.test('relayBody: a client that leaves mid-reply destroys the upstream body and the relay resolves', async (t) => {
  const upstreamBody = new PassThrough();
  let relayed: Promise<void> | undefined;
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    relayed = relayBody(upstreamBody, res);
    upstreamBody.write('first chunk');
  });
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  t.teardown(() => server.close());
  const { port } = server.address() as { port: number };
  await new Promise<void>((gotData) => {
    const req = request({ port, host: '127.0.0.1' }, (res) => res.once('data', () => {
      req.destroy();
      gotData();
    }));
    req.end();
  });
  await relayed;
  t.ok(upstreamBody.destroyed, 'the upstream body was dropped');
});

t.test('relayBody: an upstream body that breaks off cuts the client reply', async (t) => {
  const upstreamBody = new PassThrough();
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    void relayBody(upstreamBody, res);
    upstreamBody.write('partial');
    setTimeout(() => upstreamBody.destroy(new Error('upstream reset')), 20);
  });
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  t.teardown(() => server.close());
  const { port } = server.address() as { port: number };
  const outcome = await new Promise<string>((done) => {
    const req = request({ port, host: '127.0.0.1' }, (res) => {
      res.on('data', () => undefined);
      res.on('end', () => done('ended cleanly'));
      res.on('error', () => done('cut'));
      res.on('aborted', () => done('cut'));
    });
    req.on('error', () => done('cut'));
    req.end();
  });
  t.equal(outcome, 'cut', 'the client sees a broken reply, not a complete one');
});

t.test('relayBody relays a whole body and resolves when the reply is done', async (t) => {
  let relayed: Promise<void> | undefined;
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    relayed = relayBody(Readable.from([Buffer.from('{"a":'), Buffer.from('1}')]), res);
  });
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  t.teardown(() => server.close());
  const { port } = server.address() as { port: number };
  const text = await new Promise<string>((done) => {
    const req = request({ port, host: '127.0.0.1' }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => done(Buffer.concat(chunks).toString()));
    });
    req.end();
  });
  await relayed;
  t.equal(text, '{"a":1}');
});
