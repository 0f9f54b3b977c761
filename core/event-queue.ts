import { createPriorityHeap } from './priority-heap.ts'

/**
 * The discrete-event engine shared by every simulator (mesh/sim/, and the
 * membership simulator mesh/membership/membership-sim.ts): a clock in
 * seconds and a binary min-heap of events ordered by (time, insertion order),
 * so events at the same instant run in the order they were scheduled and a
 * run is deterministic. Events may schedule further events; nothing here
 * reads a wall clock or a random source.
 */

export interface SimEvent {
  /** Simulated time, seconds. */
  readonly atS: number
  /** Insertion counter: ties on `atS` run first-scheduled first. */
  readonly seq: number
  readonly run: () => void
  cancelled: boolean
}

export interface EventQueue {
  /** Current simulated time, seconds (the time of the event being run). */
  readonly nowS: number
  /** Number of pending (not cancelled) events. */
  readonly pending: number
  /** Schedules `run` at absolute time `atS` (>= nowS). Returns a handle for cancel(). */
  at(atS: number, run: () => void): SimEvent
  /** Schedules `run` after `delayS` (>= 0) seconds. */
  after(delayS: number, run: () => void): SimEvent
  cancel(event: SimEvent): void
  /** Runs events in order until none is left or the next is later than `untilS`. Returns the events run. */
  runUntil(untilS?: number): number
}

/** The simulators' own queue: it can also say when its next event is due (to step a run that awaits promises between events). */
export interface SimulationQueue extends EventQueue {
  /** Time of the next event to run (cancelled ones skipped), or undefined when none is pending. */
  readonly nextAtS: number | undefined
}

export function createEventQueue (startS = 0): SimulationQueue {
  const heap = createPriorityHeap<SimEvent>((a, b) => a.atS < b.atS || (a.atS === b.atS && a.seq < b.seq))
  let nowS = startS
  let seq = 0
  let live = 0

  return {
    get nowS () { return nowS },
    get pending () { return live },
    get nextAtS () {
      let next = heap.peek()
      while (next?.cancelled === true) { heap.pop(); next = heap.peek() }
      return next?.atS
    },
    at (atS, run) {
      if (!Number.isFinite(atS) || atS < nowS) throw new RangeError(`cannot schedule at ${atS}s: now is ${nowS}s`)
      const event: SimEvent = { atS, seq: seq++, run, cancelled: false }
      heap.push(event)
      live++
      return event
    },
    after (delayS, run) {
      if (!(delayS >= 0)) throw new RangeError(`delay must be >= 0, got ${delayS}`)
      return this.at(nowS + delayS, run)
    },
    cancel (event) {
      if (!event.cancelled) { event.cancelled = true; live-- }
    },
    runUntil (untilS = Infinity) {
      let ran = 0
      for (let next = heap.peek(); next !== undefined && next.atS <= untilS; next = heap.peek()) {
        heap.pop()
        if (next.cancelled) continue
        live--
        nowS = next.atS
        next.run()
        ran++
      }
      if (Number.isFinite(untilS) && untilS > nowS) nowS = untilS
      return ran
    },
  }
}
