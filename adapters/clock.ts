// The business clock: every time rule (expiry, monitoring windows, billing
// periods) reads it. In the sandbox it can be moved forward; webhook
// signature timestamps use wall time instead.
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };
