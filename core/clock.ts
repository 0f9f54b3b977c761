/**
 * Time and timers as a component: protocol code that takes a Clock (the
 * mesh's membership table and failure detector) runs unchanged on the system
 * clock in the agent and on a simulated one in mesh/membership/membership-sim.ts.
 *
 * Contract: `setTimeout` timers never keep the process alive (the system
 * clock unrefs them); `clearTimeout` accepts undefined and a timer that
 * already fired.
 */
export interface Clock {
  /** Wall-clock milliseconds since the epoch (Date.now). */
  now(): number
  /** Monotonic milliseconds (performance.now): for durations. */
  monotonic(): number
  setTimeout(fn: () => void, ms: number): ClockTimer
  clearTimeout(timer: ClockTimer | undefined): void
}

/** A pending timer; opaque to its holder. */
export type ClockTimer = object

export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  setTimeout (fn, ms) {
    const timer = setTimeout(fn, ms)
    timer.unref()
    return timer
  },
  clearTimeout (timer) {
    if (timer !== undefined) clearTimeout(timer as NodeJS.Timeout)
  },
}
