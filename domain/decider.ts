// The shape every aggregate of the domain follows: a pure decision function
// and a pure fold. No I/O, no clock: time arrives inside commands.

/** An event as the domain sees it: a type tag and JSON-serialisable data (no bigint, no Date). */
export interface DomainEvent<Type extends string = string, Data = unknown> {
  type: Type;
  data: Data;
}

export interface Decider<Command, State, Event extends DomainEvent> {
  initialState: State;
  /** Returns the events a command causes, or throws a DomainError. [] means "nothing to do" (idempotent repeat). */
  decide(command: Command, state: State): Event[];
  evolve(state: State, event: Event): State;
}

export type DomainErrorKind = 'bad_request' | 'not_found' | 'conflict' | 'forbidden';

/** A rule of the domain was broken; the API maps `kind` to a status code and shows `message` as is. */
export class DomainError extends Error {
  constructor(
    readonly kind: DomainErrorKind,
    message: string,
  ) {
    super(message);
    this.name = 'DomainError';
  }
}

export function fold<Command, State, Event extends DomainEvent>(
  decider: Decider<Command, State, Event>,
  events: readonly Event[],
): State {
  return events.reduce(decider.evolve, decider.initialState);
}
