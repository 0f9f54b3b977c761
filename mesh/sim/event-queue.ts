/**
 * The discrete-event engine shared by every simulator in mesh/sim/: a clock in
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

export function createEventQueue (startS = 0): EventQueue {
  const heap: SimEvent[] = []
  let nowS = startS
  let seq = 0
  let live = 0

  const before = (a: SimEvent, b: SimEvent): boolean => a.atS < b.atS || (a.atS === b.atS && a.seq < b.seq)
  const swap = (i: number, j: number): void => { const x = heap[i]!; heap[i] = heap[j]!; heap[j] = x }

  function push (event: SimEvent): void {
    heap.push(event)
    let i = heap.length - 1
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (!before(heap[i]!, heap[parent]!)) break
      swap(i, parent)
      i = parent
    }
  }

  function pop (): SimEvent | undefined {
    const top = heap[0]
    const last = heap.pop()
    if (heap.length > 0 && last !== undefined) {
      heap[0] = last
      let i = 0
      for (;;) {
        const l = 2 * i + 1
        const r = l + 1
        let m = i
        if (l < heap.length && before(heap[l]!, heap[m]!)) m = l
        if (r < heap.length && before(heap[r]!, heap[m]!)) m = r
        if (m === i) break
        swap(i, m)
        i = m
      }
    }
    return top
  }

  return {
    get nowS () { return nowS },
    get pending () { return live },
    at (atS, run) {
      if (!Number.isFinite(atS) || atS < nowS) throw new RangeError(`cannot schedule at ${atS}s: now is ${nowS}s`)
      const event: SimEvent = { atS, seq: seq++, run, cancelled: false }
      push(event)
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
      while (heap.length > 0 && heap[0]!.atS <= untilS) {
        const event = pop()!
        if (event.cancelled) continue
        live--
        nowS = event.atS
        event.run()
        ran++
      }
      if (Number.isFinite(untilS) && untilS > nowS) nowS = untilS
      return ran
    },
  }
}
