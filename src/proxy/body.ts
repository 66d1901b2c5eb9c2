// Reads an upstream body the gateway has to parse, never past upstream.maxResponseBytes.
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { GatewayError } from '../errors.js';

export async function readCapped(body: Readable, maxBytes: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
    size += buffer.length;
    if (size > maxBytes) {
      discard(body);
      throw new GatewayError('TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE', `the upstream reply exceeded upstream.maxResponseBytes (${maxBytes} bytes)`);
    }
    chunks.push(buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export function parseJsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** Drops an upstream body we will not read. The listener keeps a late abort error from crashing the process. */
export function discard(body: Readable): void {
  body.on('error', () => undefined);
  body.destroy();
}

/**
 * Relays an upstream body to the client with stream.pipeline()'s guarantees (a body that breaks off
 * cuts the client's reply; a client that leaves destroys the upstream body) but without the
 * AbortController, and the DOMException its abort() builds, that pipeline() creates for every call:
 * about a tenth of the free path's CPU (bench/RESULTS.md, optimisation log). Resolves once the
 * reply is closed; never rejects.
 */
export function relayBody(body: Readable, res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    if (res.destroyed) {
      discard(body);
      return resolve();
    }
    const onError = (): void => {
      res.off('close', onClose);
      discard(body);
      res.destroy();
      resolve();
    };
    const onClose = (): void => {
      body.off('error', onError);
      res.off('error', onClose);
      if (!body.readableEnded) discard(body);
      resolve();
    };
    body.once('error', onError);
    res.once('close', onClose);
    // Without a listener, pipe() would rethrow an error the reply emits; 'close' follows it anyway.
    res.once('error', onClose);
    body.pipe(res);
  });
}
