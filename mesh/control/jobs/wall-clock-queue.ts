/**
 * The simulators' EventQueue interface (core/event-queue.ts) on the wall
 * clock: `nowS` is seconds since the epoch (Date.now), events run from
 * timers. The leader runs the simulators' task executor on it, so the live
 * runtime schedule and `agentctl sim placement` share the same HRRS code.
 *
 * Contract: an event due in the past runs on the next timer turn; events due
 * at the same time run in scheduling order; `close()` cancels every pending
 * event (idempotent). `runUntil` is a simulation-only operation and throws.
 */
import type { EventQueue, SimEvent } from '../../../core/event-queue.ts'

export interface WallClockQueue extends EventQueue {
  close(): void
}

export function createWallClockQueue (clockMs: () => number = Date.now): WallClockQueue {
  const timers = new Map<SimEvent, NodeJS.Timeout>()
  let seq = 0
  let closed = false
  const queue: WallClockQueue = {
    get nowS () { return clockMs() / 1000 },
    get pending () { return timers.size },
    at (atS, run) {
      if (!Number.isFinite(atS)) throw new RangeError(`cannot schedule at ${atS}s`)
      const event: SimEvent = { atS, seq: seq++, run, cancelled: closed }
      if (closed) return event
      const timer = setTimeout(() => {
        timers.delete(event)
        if (!event.cancelled) run()
      }, Math.max(0, atS * 1000 - clockMs()))
      timer.unref()
      timers.set(event, timer)
      return event
    },
    after (delayS, run) {
      if (!(delayS >= 0)) throw new RangeError(`delay must be >= 0, got ${delayS}`)
      return queue.at(queue.nowS + delayS, run)
    },
    cancel (event) {
      event.cancelled = true
      const timer = timers.get(event)
      if (timer !== undefined) { clearTimeout(timer); timers.delete(event) }
    },
    runUntil () {
      throw new Error('a wall-clock queue runs on its own timers')
    },
    close () {
      closed = true
      for (const [event, timer] of timers) { event.cancelled = true; clearTimeout(timer) }
      timers.clear()
    },
  }
  return queue
}
