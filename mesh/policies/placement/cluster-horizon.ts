/**
 * The scheduler's spatio-temporal view of the cluster (PlexRL §4.3.1,
 * §5.2.1): per node a FreeIntervalSet over the planning window, the global
 * FreeNodeProfile over the ring, and the footprint of every resident job.
 *
 * Contracts:
 * - The window is [windowStart, windowStart + slots). `advanceTo` moves it
 *   forward: slots that fell behind are handed back to the ring and the
 *   newly exposed future is filled with the residents' next periods.
 * - `reserve` is atomic: it checks the whole footprint on every node of the
 *   group inside the window first and changes nothing when any part does not
 *   fit. With `allowConflicts` (a placement admitted with bounded predicted
 *   interference) it reserves the free parts and records the colliding parts
 *   as not held. Periods that only enter the window later are reserved by
 *   `advanceTo` the same way. Colliding slots are counted in
 *   `overcommittedSlots` and left to the runtime scheduler; `release` frees
 *   exactly what the job holds.
 * - Reads (`fitsOnNode`, profile queries, residents) never mutate, so a
 *   placement policy can be a pure function of this view.
 */
import { createFreeNodeProfile, type FreeNodeProfile } from './free-node-profile.ts'
import { FreeIntervalSet } from './free-interval-set.ts'
import { footprintEnd, forEachBusyInstance, type Footprint } from './footprint.ts'
import { defaultHorizonSlots, defaultSlotS } from './ring-horizon.ts'

export interface ResidentJob {
  readonly jobId: string
  readonly nodes: readonly number[]
  readonly footprint: Footprint
  /** Unstretched period, slots (to offer commensurate periods to newcomers). */
  readonly basePeriodSlots: number
  /** Whether the job has its nodes to itself (cold start or isolated policy). */
  readonly dedicated: boolean
  /** The job's admission bound on slowdown (PlexRL §7.2), >= 1. */
  readonly maxSlowdown: number
  /** Slowdown of the job's plan alone (stretched over unstretched period, P'/P). Missing = 1. */
  readonly planSlowdown?: number
}

/** Predicted slowdown one resident's conflicts add to another (PlexRL §4.4), recorded by a placement. */
export interface ConflictCost {
  /** The job that waits. */
  readonly jobId: string
  /** The job whose overlapping blocks it waits for. */
  readonly fromJobId: string
  /** Added slowdown (conflict-cost.ts). */
  readonly slowdown: number
}

export interface ClusterHorizonOptions {
  nodes: number
  /** Ring length, slots. Default 28,800. */
  slots?: number
  /** Seconds per slot. Default 1. */
  slotS?: number
  /** Absolute slot where the window starts. Default 0. */
  startSlot?: number
}

/** The read-only view a placement policy consumes. */
export interface ClusterHorizonView {
  readonly nodeCount: number
  readonly slots: number
  readonly slotS: number
  readonly windowStart: number
  readonly windowEnd: number
  readonly profile: Pick<FreeNodeProfile, 'minFree' | 'freeAt' | 'firstBelow'>
  node(index: number): Pick<FreeIntervalSet, 'fits' | 'earliestFit' | 'containing' | 'freeSlots' | 'intervalCount'>
  /** Job ids resident on a node. */
  jobsOn(node: number): ReadonlySet<string>
  resident(jobId: string): ResidentJob | undefined
  residents(): Iterable<ResidentJob>
  /** Does the footprint fit entirely in the node's free time (clipped to the window)? */
  fitsOnNode(node: number, footprint: Footprint): boolean
  /** A resident's predicted slowdown: its planSlowdown plus the conflict costs of the residents still present. 1 for an unknown job. */
  predictedSlowdown(jobId: string): number
}

export class ClusterHorizon implements ClusterHorizonView {
  readonly nodeCount: number
  readonly slots: number
  readonly slotS: number
  readonly profile: FreeNodeProfile
  private start: number
  private readonly free: FreeIntervalSet[]
  private readonly jobsByNode: Array<Set<string>>
  private readonly jobs = new Map<string, ResidentJob>()
  /** Per job, per node (in job.nodes order): sorted ranges of its footprint that another job holds. */
  private readonly unheld = new Map<string, Array<Array<[number, number]>>>()
  /** Conflict costs by the waiting job: source job -> added slowdown. Both ends are residents. */
  private readonly conflictCosts = new Map<string, Map<string, number>>()
  /** Slots of extension periods that collided with another reservation (see contract). */
  overcommittedSlots = 0

  constructor (options: ClusterHorizonOptions) {
    const { nodes } = options
    if (!Number.isInteger(nodes) || nodes < 1) throw new RangeError(`nodes must be a positive integer, got ${nodes}`)
    this.nodeCount = nodes
    this.slots = options.slots ?? defaultHorizonSlots
    this.slotS = options.slotS ?? defaultSlotS
    this.start = options.startSlot ?? 0
    this.profile = createFreeNodeProfile(this.slots, nodes)
    this.free = Array.from({ length: nodes }, () => FreeIntervalSet.free(this.start, this.start + this.slots))
    this.jobsByNode = Array.from({ length: nodes }, () => new Set<string>())
  }

  get windowStart (): number { return this.start }
  get windowEnd (): number { return this.start + this.slots }

  node (index: number): FreeIntervalSet {
    const set = this.free[index]
    if (set === undefined) throw new RangeError(`no node ${index}`)
    return set
  }

  jobsOn (node: number): ReadonlySet<string> { return this.jobsByNode[node]! }
  resident (jobId: string): ResidentJob | undefined { return this.jobs.get(jobId) }
  residents (): Iterable<ResidentJob> { return this.jobs.values() }

  fitsOnNode (node: number, footprint: Footprint): boolean {
    const set = this.node(node)
    return forEachBusyInstance(footprint, this.start, this.windowEnd, (a, b) => set.fits(a, b))
  }

  /**
   * Reserves a job's footprint on its nodes. Without `allowConflicts` it is
   * atomic: it throws, changing nothing, when any part does not fit. Throws
   * when the id already has a reservation.
   */
  reserve (job: ResidentJob, options: { allowConflicts?: boolean } = {}): void {
    if (this.jobs.has(job.jobId)) throw new RangeError(`job ${job.jobId} already has a reservation`)
    if (new Set(job.nodes).size !== job.nodes.length) throw new RangeError(`job ${job.jobId}: duplicate nodes`)
    if (options.allowConflicts !== true) {
      for (const n of job.nodes) {
        if (!this.fitsOnNode(n, job.footprint)) throw new RangeError(`job ${job.jobId} does not fit on node ${n}`)
      }
      for (const n of job.nodes) {
        const set = this.node(n)
        forEachBusyInstance(job.footprint, this.start, this.windowEnd, (a, b) => { set.reserve(a, b) })
        this.jobsByNode[n]!.add(job.jobId)
      }
      forEachBusyInstance(job.footprint, this.start, this.windowEnd, (a, b) => { this.profile.add(a, b, -job.nodes.length) })
      this.unheld.set(job.jobId, job.nodes.map(() => []))
    } else {
      const unheld = job.nodes.map(() => [] as Array<[number, number]>)
      this.unheld.set(job.jobId, unheld)
      job.nodes.forEach((n, i) => {
        this.holdFreeParts(n, job.footprint, this.start, this.windowEnd, unheld[i]!)
        this.jobsByNode[n]!.add(job.jobId)
      })
    }
    this.jobs.set(job.jobId, job)
  }

  /** Reserves the free parts of the footprint's instances in [from, to) on one node; records the rest in `unheld`. */
  private holdFreeParts (node: number, footprint: Footprint, from: number, to: number, unheld: Array<[number, number]>): void {
    const set = this.node(node)
    forEachBusyInstance(footprint, from, to, (a, b) => {
      let cursor = a
      const hold = (x: number, y: number): void => { set.reserve(x, y); this.profile.add(x, y, -1) }
      for (const [x, y] of set.busyWithin(a, b)) {
        if (x > cursor) hold(cursor, x)
        unheld.push([x, y])
        this.overcommittedSlots += y - x
        cursor = y
      }
      if (cursor < b) hold(cursor, b)
    })
  }

  /**
   * Records predicted conflict costs between residents (a conflict-tolerant
   * placement's, PlacementDecision.conflictCosts). A cost lasts while both
   * jobs are resident; costs naming an unknown job are ignored.
   */
  addConflictCosts (costs: readonly ConflictCost[]): void {
    for (const c of costs) {
      if (!this.jobs.has(c.jobId) || !this.jobs.has(c.fromJobId) || c.jobId === c.fromJobId) continue
      let into = this.conflictCosts.get(c.jobId)
      if (into === undefined) this.conflictCosts.set(c.jobId, into = new Map())
      into.set(c.fromJobId, (into.get(c.fromJobId) ?? 0) + c.slowdown)
    }
  }

  predictedSlowdown (jobId: string): number {
    const job = this.jobs.get(jobId)
    if (job === undefined) return 1
    let s = job.planSlowdown ?? 1
    for (const v of this.conflictCosts.get(jobId)?.values() ?? []) s += v
    return s
  }

  /** Drops a departed job from the records: its costs and the costs it caused. */
  private forget (jobId: string): void {
    this.jobs.delete(jobId)
    this.unheld.delete(jobId)
    this.conflictCosts.delete(jobId)
    for (const into of this.conflictCosts.values()) into.delete(jobId)
  }

  /** Releases what remains of a job's reservation (its future inside the window). Returns false for an unknown job. */
  release (jobId: string): boolean {
    const job = this.jobs.get(jobId)
    if (job === undefined) return false
    const unheld = this.unheld.get(jobId)!
    job.nodes.forEach((n, i) => {
      const set = this.node(n)
      const skip = unheld[i]!
      let k = 0
      forEachBusyInstance(job.footprint, this.start, this.windowEnd, (a, b) => {
        let cursor = a
        while (k < skip.length && skip[k]![1] <= a) k++
        for (let j = k; j < skip.length && skip[j]![0] < b; j++) {
          const x = Math.max(a, skip[j]![0])
          if (x > cursor) { set.release(cursor, x); this.profile.add(cursor, x, 1) }
          cursor = Math.max(cursor, Math.min(b, skip[j]![1]))
        }
        if (cursor < b) { set.release(cursor, b); this.profile.add(cursor, b, 1) }
      })
      this.jobsByNode[n]!.delete(jobId)
    })
    this.forget(jobId)
    return true
  }

  /** Moves the window to start at `slot` (no-op when not later than the current start). */
  advanceTo (slot: number): void {
    if (slot <= this.start) return
    const oldEnd = this.windowEnd
    const clearedEnd = Math.min(slot, oldEnd)
    for (let n = 0; n < this.nodeCount; n++) {
      const set = this.free[n]!
      for (const [a, b] of set.busyWithin(this.start, clearedEnd)) this.profile.add(a, b, 1)
      set.trimBefore(slot)
    }
    const exposedFrom = Math.max(oldEnd, slot)
    const newEnd = slot + this.slots
    // A jump past the whole window resets the free sets wholesale; otherwise append the exposed tail.
    for (let n = 0; n < this.nodeCount; n++) {
      const set = this.free[n]!
      if (exposedFrom > oldEnd) this.free[n] = FreeIntervalSet.free(slot, newEnd)
      else set.release(oldEnd, newEnd)
    }
    this.start = slot
    for (const job of [...this.jobs.values()]) {
      const unheld = this.unheld.get(job.jobId)!
      if (footprintEnd(job.footprint) <= slot) {
        for (const n of job.nodes) this.jobsByNode[n]!.delete(job.jobId)
        this.forget(job.jobId)
        continue
      }
      job.nodes.forEach((n, i) => {
        const list = unheld[i]!
        let drop = 0
        while (drop < list.length && list[drop]![1] <= slot) drop++
        if (drop > 0) list.splice(0, drop)
        this.holdFreeParts(n, job.footprint, exposedFrom, newEnd, list)
      })
    }
  }
}
