import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { MAX_ADVANCE_SECONDS, SandboxClock, sandboxClockStreamName } from '../adapters/sandbox-clock.ts';
import { DomainError } from '../domain/decider.ts';

const WALL = Date.parse('2025-03-01T12:00:00.000Z');
const fixedWall = () => WALL;

describe('SandboxClock', () => {
  it('runs on wall time until advanced', async () => {
    let wall = WALL;
    const clock = await SandboxClock.open(new MemoryEventStore(), () => wall);
    assert.equal(clock.now().getTime(), WALL);
    wall += 1500;
    assert.equal(clock.now().getTime(), WALL + 1500);
  });

  it('moves now() forward by exactly the seconds advanced', async () => {
    const clock = await SandboxClock.open(new MemoryEventStore(), fixedWall);
    const now = await clock.advance(61);
    assert.equal(now.toISOString(), '2025-03-01T12:01:01.000Z');
    assert.equal(clock.now().getTime(), WALL + 61_000);
    await clock.advance(3600);
    assert.equal(clock.now().getTime(), WALL + 3661_000);
    assert.equal(clock.offset, 3661);
  });

  it('keeps its offset across a restart', async () => {
    const store = new MemoryEventStore();
    const clock = await SandboxClock.open(store, fixedWall);
    await clock.advance(86_400);
    await clock.advance(1);
    const reopened = await SandboxClock.open(store, fixedWall);
    assert.equal(reopened.now().getTime(), WALL + 86_401_000);
    assert.deepEqual(
      (await store.readStream(sandboxClockStreamName)).map((e) => [e.type, e.data]),
      [
        ['ClockAdvanced', { seconds: 86_400 }],
        ['ClockAdvanced', { seconds: 1 }],
      ],
    );
  });

  it('counts every advance when two instances advance at once', async () => {
    const store = new MemoryEventStore();
    const [a, b] = await Promise.all([SandboxClock.open(store, fixedWall), SandboxClock.open(store, fixedWall)]);
    await Promise.all([a.advance(10), b.advance(20), a.advance(30)]);
    assert.equal((await SandboxClock.open(store, fixedWall)).offset, 60);
    // Each sees the others' advances when it next writes.
    await a.advance(1);
    assert.equal(a.offset, 61);
  });

  it('refuses anything but a whole number of seconds from 1 to ten years', async () => {
    const store = new MemoryEventStore();
    const clock = await SandboxClock.open(store, fixedWall);
    for (const seconds of [0, -5, 1.5, Number.NaN, Number.POSITIVE_INFINITY, MAX_ADVANCE_SECONDS + 1]) {
      await assert.rejects(
        clock.advance(seconds),
        (error: unknown) =>
          error instanceof DomainError &&
          error.kind === 'bad_request' &&
          error.message === 'seconds must be a whole number from 1 to 315360000 (10 years)',
        `seconds ${seconds}`,
      );
    }
    assert.equal(clock.now().getTime(), WALL);
    assert.deepEqual(await store.readStream(sandboxClockStreamName), []);
    await clock.advance(MAX_ADVANCE_SECONDS);
    assert.equal(clock.offset, MAX_ADVANCE_SECONDS);
  });
});
