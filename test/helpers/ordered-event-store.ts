// An event store for the test upstreams' resumable streams (SDK v1 `EventStore`), replaying in the
// order events were stored. The SDK's example InMemoryEventStore names an event
// `<stream>_<Date.now()>_<random>` and replays by sorting those strings, so two events stored in the same
// millisecond (a priming event and the reply right behind it) replay in random order: about half the time
// the reply sorts before the event a client resumes from and is never replayed (a flake in
// test/e2e/visibility.test.ts, seen only when the machine was loaded).
import type { EventStore } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';

interface StoredEvent {
  id: string;
  streamId: string;
  message: JSONRPCMessage;
}

export class OrderedEventStore implements EventStore {
  readonly #events: StoredEvent[] = [];

  storeEvent(streamId: string, message: JSONRPCMessage): Promise<string> {
    const id = `${streamId}_${this.#events.length + 1}`;
    this.#events.push({ id, streamId, message });
    return Promise.resolve(id);
  }

  /** Every later event of the resumed event's stream, in storage order; '' for an unknown id (the SDK answers it). */
  async replayEventsAfter(lastEventId: string, { send }: { send: (eventId: string, message: JSONRPCMessage) => Promise<void> }): Promise<string> {
    const at = this.#events.findIndex((event) => event.id === lastEventId);
    if (at < 0) return '';
    const { streamId } = this.#events[at] as StoredEvent;
    for (const event of this.#events.slice(at + 1)) {
      if (event.streamId === streamId) await send(event.id, event.message);
    }
    return streamId;
  }
}
