// The events of one legacy session, kept so a client can resume a stream with `Last-Event-ID` (SPEC §5.5),
// bounded by count and bytes: the oldest go first, the newest is always kept (so a large result can still
// be replayed once). Event ids are `<stream id>.<sequence>`: the stream of an id is known even after its
// event was dropped, and a resume then replays what is left.
import type { EventId, EventStore, StreamId } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';

export interface EventBufferLimits {
  maxEvents: number;
  maxBytes: number;
}

export const DEFAULT_EVENT_BUFFER: EventBufferLimits = { maxEvents: 1_000, maxBytes: 4 * 1024 * 1024 };

interface StoredEvent {
  seq: number;
  streamId: StreamId;
  message: JSONRPCMessage;
  bytes: number;
}

/** Sizes of messages the bridge already knows (the child line they came from), so storing costs no second serialisation. */
export const knownSizes = new WeakMap<object, number>();

const sizeOf = (message: object): number => knownSizes.get(message) ?? Buffer.byteLength(JSON.stringify(message));

/** The SDK stores `{}` before a stream's first message (the priming event): nothing to replay. */
const isPriming = (message: object): boolean => Object.keys(message).length === 0;

export class BoundedEventStore implements EventStore {
  readonly #limits: EventBufferLimits;
  readonly #onDropped: ((count: number) => void) | undefined;
  #events: StoredEvent[] = [];
  #bytes = 0;
  #nextSeq = 1;
  #firstSeq = 1;

  constructor(limits: EventBufferLimits, onDropped?: (count: number) => void) {
    this.#limits = limits;
    this.#onDropped = onDropped;
  }

  get size(): { events: number; bytes: number } {
    return { events: this.#events.length, bytes: this.#bytes };
  }

  async storeEvent(streamId: StreamId, message: JSONRPCMessage): Promise<EventId> {
    const seq = this.#nextSeq++;
    const bytes = sizeOf(message);
    this.#events.push({ seq, streamId, message, bytes });
    this.#bytes += bytes;
    let dropped = 0;
    while (this.#events.length > 1 && (this.#events.length > this.#limits.maxEvents || this.#bytes > this.#limits.maxBytes)) {
      const oldest = this.#events.shift() as StoredEvent;
      this.#bytes -= oldest.bytes;
      this.#firstSeq = oldest.seq + 1;
      dropped += 1;
    }
    if (dropped > 0) this.#onDropped?.(dropped);
    return `${streamId}.${seq}`;
  }

  async getStreamIdForEventId(eventId: EventId): Promise<StreamId | undefined> {
    return parseEventId(eventId)?.streamId;
  }

  async replayEventsAfter(lastEventId: EventId, { send }: { send: (eventId: EventId, message: JSONRPCMessage) => Promise<void> }): Promise<StreamId> {
    const parsed = parseEventId(lastEventId);
    if (parsed === undefined) throw new Error('not an event id of this session');
    // Copied first: sending awaits, and events stored meanwhile go to the live stream, not into this replay.
    const due = this.#events.filter((event) => event.streamId === parsed.streamId && event.seq > parsed.seq);
    for (const event of due) if (!isPriming(event.message)) await send(`${event.streamId}.${event.seq}`, event.message);
    return parsed.streamId;
  }

  /** Whether events after `eventId` may have been dropped by the bound. */
  lostAfter(eventId: EventId): boolean {
    const parsed = parseEventId(eventId);
    return parsed !== undefined && parsed.seq + 1 < this.#firstSeq;
  }
}

function parseEventId(eventId: EventId): { streamId: StreamId; seq: number } | undefined {
  const dot = eventId.lastIndexOf('.');
  if (dot <= 0) return undefined;
  const seq = Number(eventId.slice(dot + 1));
  if (!Number.isSafeInteger(seq) || seq < 1) return undefined;
  return { streamId: eventId.slice(0, dot), seq };
}
