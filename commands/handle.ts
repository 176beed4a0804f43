// The one way commands change state: load the stream, fold it, decide, and
// append with the revision that was read. A concurrent writer makes the append
// fail; then the command is decided again on the fresh stream.
import { randomUUID } from 'node:crypto';
import { v5 as uuidv5 } from 'uuid';
import { DomainError, fold, type Decider, type DomainEvent } from '../domain/decider.ts';
import { ConcurrencyError, type EventMetadata, type EventStore, type NewEvent } from '../adapters/event-store/port.ts';

/** Namespace of event ids derived from their cause (UUIDv5). */
const CAUSED_EVENT_NAMESPACE = '6f1d6a4e-2c1b-4f7e-9a51-3c8e2b0d7a10';

/**
 * Who did it, in each event's metadata: a person of the merchant through the
 * dashboard, the operator, or an API key. Absent where the service itself
 * acted (a process manager, a scheduler) or the caller is not named yet.
 */
export type Actor =
  { type: 'user'; userId: string; email: string } | { type: 'operator' } | { type: 'api_key'; keyId: string };

export interface HandleOptions {
  /**
   * The event that caused this command, when a process manager issues it: the
   * new events' ids are derived from it, so running the reaction twice appends
   * nothing twice.
   */
  causationId?: string;
  correlationId?: string;
  /** Who asked for the command (a dashboard user, the operator), recorded with its events. */
  actor?: Actor;
  maxAttempts?: number;
  /**
   * The stream is named by an id made just now (a random UUID), so it has no
   * events: the first attempt decides on the initial state without reading
   * it, and its append (no_stream) would fail, and the next one read, if it did.
   */
  newStream?: boolean;
}

export interface Handled<State, Event> {
  state: State;
  events: Event[];
  /**
   * The ids `events` were appended with, in order: a process manager that
   * repeats a step run inline (with one of them as its causationId) then
   * derives the same ids as the inline run did.
   */
  eventIds: string[];
  /** Global position of the stream's last event after the command; undefined for an untouched, empty stream. */
  position: string | undefined;
}

/**
 * Runs what a process manager does for one event. A refusal is deterministic:
 * retrying would refuse again and hold up everything after it, so it is
 * handed to `onRefused` (the event stays recorded on its own stream); any
 * other error is thrown, and the event is handled again.
 */
export async function unlessRefused(run: () => Promise<unknown>, onRefused?: (error: DomainError) => void) {
  try {
    await run();
  } catch (error) {
    if (!(error instanceof DomainError)) throw error;
    onRefused?.(error);
  }
}

export function handleCommand<Command, State, Event extends DomainEvent>(
  store: EventStore,
  decider: Decider<Command, State, Event>,
  streamId: string,
  command: Command,
  options: HandleOptions = {},
): Promise<Handled<State, Event>> {
  return handleCommands(store, decider, streamId, [command], options);
}

/** What a command wrote, for an answer: the state after it, and where it landed in the log. */
export interface Written<T> {
  value: T;
  /** Where the change landed in the log; read models that reached it show it. */
  position: string | undefined;
}

/** `command` handled on its stream, whose state after it (there is one: the command made or changed it) is the answer. */
export async function handleWritten<Command, State, Event extends DomainEvent>(
  store: EventStore,
  decider: Decider<Command, State, Event>,
  streamId: string,
  command: Command,
  options: HandleOptions = {},
): Promise<Written<NonNullable<State>>> {
  const { state, position } = await handleCommands(store, decider, streamId, [command], options);
  return { value: state!, position };
}

/**
 * Several commands decided in turn, each on the state the previous one left,
 * and all their events appended at once: one read and one append for what
 * would otherwise be one of each per command (a payment is an invoice and its
 * address), and all of it or nothing.
 */
export async function handleCommands<Command, State, Event extends DomainEvent>(
  store: EventStore,
  decider: Decider<Command, State, Event>,
  streamId: string,
  commands: readonly Command[],
  options: HandleOptions = {},
): Promise<Handled<State, Event>> {
  const attempts = options.maxAttempts ?? 5;
  for (let attempt = 1; ; attempt++) {
    const recorded = attempt === 1 && options.newStream ? [] : await store.readStream(streamId);
    const initial = fold(
      decider,
      recorded.map((r) => ({ type: r.type, data: r.data }) as Event),
    );
    let state = initial;
    const events: Event[] = [];
    for (const command of commands) {
      const decided = decider.decide(command, state);
      state = decided.reduce(decider.evolve, state);
      events.push(...decided);
    }
    const lastPosition = recorded.at(-1)?.position;
    if (events.length === 0) return { state, events, eventIds: [], position: lastPosition };
    const metadata: EventMetadata = {};
    if (options.causationId) metadata.causationId = options.causationId;
    if (options.correlationId) metadata.correlationId = options.correlationId;
    if (options.actor) metadata.actor = options.actor;
    const toAppend: NewEvent[] = events.map((event, i) => ({
      id: options.causationId
        ? uuidv5(`${options.causationId}/${streamId}/${event.type}/${i}`, CAUSED_EVENT_NAMESPACE)
        : randomUUID(),
      type: event.type,
      data: event.data,
      metadata,
    }));
    try {
      const result = await store.append(streamId, toAppend, recorded.length === 0 ? 'no_stream' : recorded.length - 1);
      return { state, events, eventIds: toAppend.map((e) => e.id), position: result.position };
    } catch (error) {
      if (!(error instanceof ConcurrencyError) || attempt >= attempts) throw error;
    }
  }
}

/** The current state of a stream, folded from its events. */
export async function loadState<Command, State, Event extends DomainEvent>(
  store: EventStore,
  decider: Decider<Command, State, Event>,
  streamId: string,
): Promise<State> {
  const recorded = await store.readStream(streamId);
  return fold(
    decider,
    recorded.map((r) => ({ type: r.type, data: r.data }) as Event),
  );
}
