// One forwarded priced call (SPEC §5.4, §6.2 step 7): the upstream's reply is watched for the result
// of this call's id. Events before the result stream to the client as they arrive; the result itself
// is held until the paywall has committed or released the reservation, then sent with the receipt.
import type { ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { GatewayError } from '../errors.js';
import { idOf, isObject, type JsonRpcId, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import { rewriteSse } from '../mcp/sse.js';
import { discard, parseJsonOrUndefined, readCapped } from './body.js';
import { clientResponseHeaders, isEventStream, isJson } from './headers.js';
import type { Upstream, UpstreamRequest, UpstreamResponse } from './upstream.js';

export type ExchangeOutcome =
  /** The upstream answered this call with a JSON-RPC result or error. */
  | { kind: 'answered'; message: JsonRpcResponse }
  /** The upstream refused at the HTTP level with a 4xx: relayed to the client unchanged. */
  | { kind: 'http_refusal'; status: number }
  /** Unreachable, 5xx, reset, unparseable, too large, or a stream that ended without the result. */
  | { kind: 'failed'; accepted: boolean; error: GatewayError }
  /** The deadline passed (or the client left) while waiting. */
  | { kind: 'aborted'; accepted: boolean; reason: 'deadline' | 'client_gone' };

export interface ExchangeLimits {
  maxResponseBytes: number;
}

/** Messages the paywall sends as the final answer to the call. */
export type FinalMessage = JsonRpcResponse;

export class PricedExchange {
  readonly #res: ServerResponse;
  readonly #id: JsonRpcId;
  readonly #limits: ExchangeLimits;
  #streaming = false; // SSE headers already sent to the client
  #finalData: ((data: string) => void) | null = null;
  #streamDone: Promise<void> = Promise.resolve();

  constructor(res: ServerResponse, id: JsonRpcId, limits: ExchangeLimits) {
    this.#res = res;
    this.#id = id;
    this.#limits = limits;
  }

  /** Sends the request and resolves once this call's outcome is known (the result itself is not yet sent). */
  async run(upstream: Upstream, request: UpstreamRequest, abortReason: () => 'deadline' | 'client_gone'): Promise<ExchangeOutcome> {
    let response: UpstreamResponse;
    try {
      response = await upstream.send(request);
    } catch (error) {
      if (request.signal.aborted) return { kind: 'aborted', accepted: false, reason: abortReason() };
      return { kind: 'failed', accepted: false, error: asGatewayError(error) };
    }
    if (response.status >= 400 && response.status < 500) {
      this.#relayRefusal(response);
      return { kind: 'http_refusal', status: response.status };
    }
    if (response.status >= 500 || response.status < 200 || response.status >= 300) {
      discard(response.body);
      return { kind: 'failed', accepted: true, error: new GatewayError('TB_ERR_UPSTREAM_UNAVAILABLE', `the upstream answered HTTP ${response.status}`) };
    }
    try {
      if (isEventStream(response.headers['content-type'])) return await this.#watchStream(response, request.signal, abortReason);
      if (isJson(response.headers['content-type'])) return this.#fromJson(await readCapped(response.body, this.#limits.maxResponseBytes));
      discard(response.body);
      return { kind: 'failed', accepted: true, error: new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'the upstream reply was neither JSON nor an event stream') };
    } catch (error) {
      if (request.signal.aborted) return { kind: 'aborted', accepted: true, reason: abortReason() };
      return { kind: 'failed', accepted: true, error: asGatewayError(error) };
    }
  }

  /** Writes the final answer (a receipt-bearing result, the upstream's error, or a refusal) and ends the reply. */
  async finish(message: FinalMessage): Promise<void> {
    const data = JSON.stringify(message);
    if (this.#finalData) {
      this.#finalData(data);
      await this.#streamDone;
      return;
    }
    if (this.#res.destroyed || this.#res.writableEnded) return;
    if (this.#streaming) {
      // The stream ended (or broke) without our result: the final answer goes as one more event.
      this.#res.end(`event: message\ndata: ${data}\n\n`);
      return;
    }
    this.#res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) });
    this.#res.end(data);
  }

  get answeredSomething(): boolean {
    return this.#res.headersSent;
  }

  #fromJson(text: string): ExchangeOutcome {
    const parsed = parseJsonOrUndefined(text);
    const message = Array.isArray(parsed) ? parsed.find((m) => idOf(m) === this.#id) : parsed;
    if (!isResponseFor(message, this.#id)) {
      return { kind: 'failed', accepted: true, error: new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'the upstream reply did not carry the result of this call') };
    }
    return { kind: 'answered', message };
  }

  async #watchStream(response: UpstreamResponse, signal: AbortSignal, abortReason: () => 'deadline' | 'client_gone'): Promise<ExchangeOutcome> {
    this.#res.writeHead(response.status, clientResponseHeaders(response.headers, true));
    this.#res.flushHeaders();
    this.#streaming = true;
    return new Promise<ExchangeOutcome>((resolve) => {
      let resolved = false;
      const settle = (outcome: ExchangeOutcome): void => {
        if (!resolved) {
          resolved = true;
          resolve(outcome);
        }
      };
      const events = rewriteSse(
        response.body,
        (event) => {
          if (resolved || event.data === null || !event.data.includes('"id"')) return undefined;
          const message = parseJsonOrUndefined(event.data);
          if (!isResponseFor(message, this.#id)) return undefined;
          // Hold this event until the paywall decided: its data becomes the final message.
          return new Promise<string>((provide) => {
            this.#finalData = provide;
            settle({ kind: 'answered', message });
          });
        },
        { maxEventBytes: this.#limits.maxResponseBytes },
      );
      this.#streamDone = (async () => {
        try {
          for await (const text of events) {
            if (this.#res.destroyed) break;
            if (!this.#res.write(text)) await waitForDrain(this.#res);
          }
          if (!resolved) {
            settle({ kind: 'failed', accepted: true, error: new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'the upstream event stream ended without the result of this call') });
            return; // finish() writes the final event and ends the reply
          }
          this.#res.end();
        } catch (error) {
          discard(response.body);
          if (!resolved) {
            if (signal.aborted) settle({ kind: 'aborted', accepted: true, reason: abortReason() });
            else settle({ kind: 'failed', accepted: true, error: asGatewayError(error) });
            return;
          }
          this.#res.end();
        }
      })();
    });
  }

  #relayRefusal(response: UpstreamResponse): void {
    this.#res.writeHead(response.status, clientResponseHeaders(response.headers, false));
    // pipeline, not pipe: a body that breaks off must cut the client's reply, not leave it hanging.
    void pipeline(response.body, this.#res).catch(() => discard(response.body));
  }
}

function isResponseFor(message: unknown, id: JsonRpcId): message is JsonRpcResponse {
  return isObject(message) && message.jsonrpc === '2.0' && idOf(message) === id && ('result' in message || 'error' in message) && !('method' in message);
}

function asGatewayError(error: unknown): GatewayError {
  if (error instanceof GatewayError) return error;
  return new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'the upstream reply could not be read', { cause: error });
}

function waitForDrain(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
