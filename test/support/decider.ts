// Given-events / when-command / then-events for any Decider.
import assert from 'node:assert/strict';
import { type Decider, type DomainErrorKind, type DomainEvent, DomainError, fold } from '../../domain/decider.ts';

export interface Scenario<Command, State, Event extends DomainEvent> {
  /** The state folded from the given events. */
  state: State;
  when(command: Command): {
    /** The decided events must equal `expected` exactly and survive a JSON round trip unchanged. */
    then(expected: Event[]): void;
    /** decide must throw a DomainError of this kind with exactly this message. */
    thenError(kind: DomainErrorKind, message: string): void;
  };
}

export function given<Command, State, Event extends DomainEvent>(
  decider: Decider<Command, State, Event>,
  events: readonly Event[],
): Scenario<Command, State, Event> {
  const state = fold(decider, events);
  return {
    state,
    when(command) {
      return {
        then(expected) {
          const actual = decider.decide(command, state);
          assert.deepEqual(actual, expected);
          // Events are stored as JSON: no bigint, no Date, no undefined may hide in them.
          assert.deepEqual(JSON.parse(JSON.stringify(actual)), actual);
        },
        thenError(kind, message) {
          assert.throws(
            () => decider.decide(command, state),
            (error: unknown) => {
              assert.ok(error instanceof DomainError, `expected a DomainError, got ${String(error)}`);
              assert.equal(error.kind, kind);
              assert.equal(error.message, message);
              return true;
            },
          );
        },
      };
    },
  };
}

/** The state after the given events plus whatever `command` decides. */
export function stateAfter<Command, State, Event extends DomainEvent>(
  decider: Decider<Command, State, Event>,
  events: readonly Event[],
  ...commands: Command[]
): State {
  let history = [...events];
  for (const command of commands) history = [...history, ...decider.decide(command, fold(decider, history))];
  return fold(decider, history);
}
