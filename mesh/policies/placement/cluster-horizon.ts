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
 *   fit. Periods that only enter the window later are reserved by
 *   `advanceTo`; where they collide with another job (periods that were not
 *   commensurate over a longer span than the horizon) the colliding slots
 *   are counted in `overcommittedSlots` and left to the runtime scheduler.
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

  /** Atomically reserves a job's footprint on its nodes. Throws (changing nothing) when it does not fit or the id is taken. */
  reserve (job: ResidentJob): void {
    if (this.jobs.has(job.jobId)) throw new RangeError(`job ${job.jobId} already has a reservation`)
    if (new Set(job.nodes).size !== job.nodes.length) throw new RangeError(`job ${job.jobId}: duplicate nodes`)
    for (const n of job.nodes) {
      if (!this.fitsOnNode(n, job.footprint)) throw new RangeError(`job ${job.jobId} does not fit on node ${n}`)
    }
    for (const n of job.nodes) {
      const set = this.node(n)
      forEachBusyInstance(job.footprint, this.start, this.windowEnd, (a, b) => { set.reserve(a, b) })
      this.jobsByNode[n]!.add(job.jobId)
    }
    forEachBusyInstance(job.footprint, this.start, this.windowEnd, (a, b) => { this.profile.add(a, b, -job.nodes.length) })
    this.jobs.set(job.jobId, job)
  }

  /** Releases what remains of a job's reservation (its future inside the window). Returns false for an unknown job. */
  release (jobId: string): boolean {
    const job = this.jobs.get(jobId)
    if (job === undefined) return false
    for (const n of job.nodes) {
      const set = this.node(n)
      forEachBusyInstance(job.footprint, this.start, this.windowEnd, (a, b) => {
        // Releases the busy slots of the footprint. Where an extension period was clipped by a
        // collision (see overcommittedSlots) the colliding job's slots are freed too: a known
        // approximation, rare because placement prefers commensurate periods.
        for (const [x, y] of set.busyWithin(a, b)) { set.release(x, y); this.profile.add(x, y, 1) }
      })
      this.jobsByNode[n]!.delete(jobId)
    }
    this.jobs.delete(jobId)
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
      if (footprintEnd(job.footprint) <= slot) {
        for (const n of job.nodes) this.jobsByNode[n]!.delete(job.jobId)
        this.jobs.delete(job.jobId)
        continue
      }
      for (const n of job.nodes) {
        const set = this.free[n]!
        forEachBusyInstance(job.footprint, exposedFrom, newEnd, (a, b) => {
          let held = 0
          for (const [x, y] of freePiecesWithin(set, a, b)) { set.reserve(x, y); this.profile.add(x, y, -1); held += y - x }
          this.overcommittedSlots += (b - a) - held
        })
      }
    }
  }
}

/** The free sub-ranges of [a, b) in a set. */
function freePiecesWithin (set: FreeIntervalSet, a: number, b: number): Array<[number, number]> {
  const out: Array<[number, number]> = []
  let cursor = a
  for (const [x, y] of set.busyWithin(a, b)) {
    if (x > cursor) out.push([cursor, x])
    cursor = y
  }
  if (cursor < b) out.push([cursor, b])
  return out
}
