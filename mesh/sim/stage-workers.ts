/**
 * The workers of one pool's stage in the reward simulator (reward-sim.ts),
 * with or without the life cycle of the live supervisor's worker processes
 * (agent/reward/worker-supervisor.ts):
 *
 * - Ideal (`idealWorkers`, the DistRS model): a worker exists the moment a
 *   decision wants it and is gone the moment one does not (a busy one still
 *   finishes its request and counts until then).
 * - Live (`WorkerLifecycle` with startS, keepWarmS, startConcurrency,
 *   dispatchS): a wanted worker starts `startS` after a start slot frees (at most
 *   `startConcurrency` start at once across the node: StartPacer); one no
 *   longer wanted turns warm: it still serves its stage's queue and counts as
 *   held until `keepWarmS` after, and a later decision that wants it again
 *   gets it at once. What is given up goes in the supervisor's order: starts
 *   not begun first, then starts under way (warm once up), then running
 *   workers (warm).
 *
 * Contract: `capacity` is how many requests may run at once (up and warm
 * workers), `held` how many workers count as allocated (up, warm, starting,
 * and busy ones beyond those: a stopped worker finishes its request).
 * Every change of `held`, by a call or by a timed event, is reported to
 * `hooks.held(delta)` at the simulated instant it happens (the caller accrues
 * worker-seconds up to then with the old total); `hooks.ready()` runs when a
 * worker comes up, i.e. capacity rose without a call.
 */
import type { EventQueue, SimEvent } from '../../core/event-queue.ts'

export interface WorkerLifecycle {
  /** Seconds from a worker's start to its first request (process start, imports, first fetch). */
  startS: number
  /** Seconds a worker no longer wanted stays warm (serving, held) before it stops; 0 stops it at once. */
  keepWarmS: number
  /** Workers starting at once on the node; Infinity for no limit. */
  startConcurrency: number
  /**
   * Seconds the live service adds to each stage a request runs: the worker's
   * fetch answer, its completion report and the hand-off to the next stage,
   * during which the worker is busy; the planner's history of a batch holds
   * it too (live measures a stage from lease to report). Default 0 (DistRS's
   * model).
   */
  dispatchS?: number
}

export const idealWorkers: WorkerLifecycle = { startS: 0, keepWarmS: 0, startConcurrency: Infinity }

/** Checks a life cycle given to the replay (simulateRewardService); RangeError naming the bad figure. */
export function checkWorkerLifecycle (lifecycle: WorkerLifecycle): WorkerLifecycle {
  const { startS, keepWarmS, startConcurrency } = lifecycle
  if (!(Number.isFinite(startS) && startS >= 0)) throw new RangeError(`worker start-up time must be a finite number of seconds >= 0, got ${startS}`)
  if (!(Number.isFinite(keepWarmS) && keepWarmS >= 0)) throw new RangeError(`keep-warm time must be a finite number of seconds >= 0, got ${keepWarmS}`)
  if (!(startConcurrency === Infinity || (Number.isInteger(startConcurrency) && startConcurrency >= 1))) {
    throw new RangeError(`start concurrency must be a whole number >= 1, got ${startConcurrency}`)
  }
  const dispatchS = lifecycle.dispatchS ?? 0
  if (!(Number.isFinite(dispatchS) && dispatchS >= 0)) throw new RangeError(`dispatch overhead must be a finite number of seconds >= 0, got ${dispatchS}`)
  return lifecycle
}

/** Start slots shared by every stage of the node: queued starts begin first come, first served. */
export interface StartPacer {
  /** Queues one start of `workers`; it begins when a slot is free. */
  enqueue(workers: StageWorkers): void
  /** Takes back up to `count` starts of `workers` not begun yet (the latest queued first). Returns how many. */
  withdraw(workers: StageWorkers, count: number): number
}

export interface StageWorkers {
  /** Planned workers (the latest decision's). */
  readonly target: number
  readonly busy: number
  readonly capacity: number
  readonly held: number
  setTarget(target: number): void
  /** A request starts running (the caller checked busy < capacity). */
  take(): void
  /** A running request finished. */
  release(): void
}

export function createStartPacer (queue: EventQueue, lifecycle: WorkerLifecycle): StartPacer {
  const waiting: StageWorkersInternal[] = []
  let inFlight = 0
  const pump = (): void => {
    while (inFlight < lifecycle.startConcurrency && waiting.length > 0) {
      const workers = waiting.shift()!
      inFlight++
      workers.startBegun()
      queue.after(lifecycle.startS, () => {
        inFlight--
        workers.startDone()
        pump()
      })
    }
  }
  return {
    enqueue (workers) {
      waiting.push(workers as StageWorkersInternal)
      pump()
    },
    withdraw (workers, count) {
      let taken = 0
      for (let i = waiting.length - 1; i >= 0 && taken < count; i--) {
        if (waiting[i] === workers) { waiting.splice(i, 1); taken++ }
      }
      return taken
    },
  }
}

interface StageWorkersInternal extends StageWorkers {
  startBegun(): void
  startDone(): void
}

export interface StageWorkerHooks {
  held(delta: number): void
  ready(): void
}

export function createStageWorkers (queue: EventQueue, lifecycle: WorkerLifecycle, pacer: StartPacer, hooks: StageWorkerHooks): StageWorkers {
  const immediate = lifecycle.startS === 0 && lifecycle.startConcurrency === Infinity
  let target = 0
  let busy = 0
  /** Up and wanted. */
  let up = 0
  /** Up, not wanted, serving until their expiry event. */
  const warm: SimEvent[] = []
  /** Wanted, waiting for a start slot. */
  let queued = 0
  /** Start under way: wanted, or not wanted any more (warm once up). */
  let starting = 0
  let startingUnwanted = 0

  const held = (): number => up + warm.length + starting + startingUnwanted + Math.max(0, busy - up - warm.length)
  let nested = false
  /** Runs `change` and reports what it did to `held` (a start it begins through the pacer included, once). */
  const reporting = (change: () => void): void => {
    if (nested) { change(); return }
    const before = held()
    nested = true
    try { change() } finally { nested = false }
    const delta = held() - before
    if (delta !== 0) hooks.held(delta)
  }

  const turnWarm = (count: number): void => {
    if (lifecycle.keepWarmS === 0) return
    for (let i = 0; i < count; i++) {
      const expiry = queue.after(lifecycle.keepWarmS, () => reporting(() => { warm.splice(warm.indexOf(expiry), 1) }))
      warm.push(expiry)
    }
  }

  const self: StageWorkersInternal = {
    get target () { return target },
    get busy () { return busy },
    get capacity () { return up + warm.length },
    get held () { return held() },

    setTarget (next) { reporting(() => retarget(next)) },
    take () { reporting(() => { busy++ }) },
    release () { reporting(() => { busy-- }) },
    startBegun () { reporting(() => { queued--; starting++ }) },
    startDone () {
      reporting(() => {
        if (starting > 0) { starting--; up++ } else { startingUnwanted--; turnWarm(1) }
      })
      hooks.ready()
    },
  }

  function retarget (next: number): void {
    const wanted = up + starting + queued
    target = next
    if (next > wanted) {
      let need = next - wanted
      if (immediate) { up += need; return }
      // A warm worker serves again at once (the latest to expire first), then starts under way are wanted again.
      while (need > 0 && warm.length > 0) { queue.cancel(warm.pop()!); up++; need-- }
      const back = Math.min(need, startingUnwanted)
      startingUnwanted -= back; starting += back; need -= back
      for (; need > 0; need--) { queued++; pacer.enqueue(self) }
    } else if (next < wanted) {
      let excess = wanted - next
      if (immediate) { up -= excess; return }
      const withdrawn = pacer.withdraw(self, Math.min(excess, queued))
      queued -= withdrawn; excess -= withdrawn
      const unwanted = Math.min(excess, starting)
      starting -= unwanted; startingUnwanted += unwanted; excess -= unwanted
      up -= excess
      turnWarm(excess)
    }
  }
  return self
}
