// Reading HTTP bodies we did not ask for in full: the upstream's replies, a payment provider's and
// the x402 facilitator's answers. One reader with a byte cap, one way to drop a body unread.
import type { Readable } from 'node:stream';

/**
 * The whole body as UTF-8, or `tooLarge(limit)` thrown as soon as more than `limit` bytes arrived
 * (the body is then dropped: nothing more is read from the peer).
 */
export async function readCapped(body: Readable, limit: number, tooLarge: (limit: number) => Error): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
    size += buffer.length;
    if (size > limit) {
      discard(body);
      throw tooLarge(limit);
    }
    chunks.push(buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Drops a body we will not read. The listener keeps a late abort error from crashing the process. */
export function discard(body: Readable): void {
  body.on('error', () => undefined);
  body.destroy();
}
