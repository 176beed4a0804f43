import type { EventStore } from './port.ts';

/** The same store, calling `onAppend` after every append that wrote events (for metrics). */
export function withAppendCounter(store: EventStore, onAppend: () => void): EventStore {
  return {
    name: store.name,
    async append(streamId, events, expected, options) {
      const result = await store.append(streamId, events, expected, options);
      if (result.written) onAppend();
      return result;
    },
    readStream: (streamId, fromRevision) => store.readStream(streamId, fromRevision),
    lastRevision: (streamId) => store.lastRevision(streamId),
    readAll: (after, limit) => store.readAll(after, limit),
    headPosition: () => store.headPosition(),
    countAfter: (after, cap) => store.countAfter(after, cap),
    comparePositions: (a, b) => store.comparePositions(a, b),
    onAppended: (listener) => store.onAppended(listener),
    subscribe: (options) => store.subscribe(options),
    close: () => store.close(),
  };
}
