/**
 * The runtime slowdown guard (PlexRL §4.3, the duty-ratio bound kept after
 * admission): admission predicts each colocated job's slowdown from its
 * profile; when a job's *measured* slowdown crosses its `maxSlowdown` anyway
 * (a stale or optimistic profile, a neighbour running long), a colocation on
 * its nodes is undone: a neighbour measured running longer than its plan
 * (the largest overrun, beyond 5 %) goes back to the queue, where it is
 * placed again from its measured profile; when none overruns, the latest
 * colocation goes: of the job and the jobs sharing a node with it, the one
 * placed most recently. That may be the slowed job itself when it was the
 * last to arrive: it then waits in the queue (queue time, not slowdown)
 * rather than keep slowing its neighbours and itself.
 *
 * Pure: the simulator (mesh/sim/placement-sim.ts) and the leader
 * (mesh/control/jobs/) call it with their own measurements and carry out the
 * eviction themselves. A job alone on its nodes is never evicted: sharing is
 * not what slows it.
 */

export interface GuardedJob {
  id: string
  /** Its nodes (any identifiers comparable with ===). */
  nodes: readonly (string | number)[]
  /** Order of its latest placement: a larger number was placed later. */
  placedSeq: number
  /** Its measured GPU-busy time over the busy time its placement planned (undefined: not measured). */
  overrun?: number
}

/** Overrun beyond which a neighbour counts as breaking its plan. */
export const overrunTolerance = 1.05

export interface GuardEviction {
  /** The job that goes back to the queue. */
  evict: string
  /** Why, for the job's events and the log. */
  reason: string
}

/**
 * What the guard does for `slowed`, measured at `slowdown` over its bound
 * `maxSlowdown`, given every other placed job: the eviction, or undefined
 * when it is within its bound or shares no node (nothing to undo).
 */
export function guardEviction (slowed: GuardedJob & { slowdown: number, maxSlowdown: number }, others: readonly GuardedJob[]): GuardEviction | undefined {
  if (!(slowed.slowdown > slowed.maxSlowdown + 1e-9)) return undefined
  const mine = new Set(slowed.nodes)
  const sharing = others.filter(o => o.id !== slowed.id && o.nodes.some(n => mine.has(n)))
  if (sharing.length === 0) return undefined
  const measured = `measured slowdown ${slowed.slowdown.toFixed(3)} over its bound ${slowed.maxSlowdown}`
  const overrunning = sharing.filter(o => (o.overrun ?? 1) > overrunTolerance)
  if (overrunning.length > 0) {
    const worst = overrunning.reduce((a, b) => (b.overrun! > a.overrun! ? b : a))
    return { evict: worst.id, reason: `job ${slowed.id}: ${measured}; ${worst.id}, running ${worst.overrun!.toFixed(2)}x the busy time it was placed with, back to the queue` }
  }
  const latest = sharing.reduce((a, b) => (b.placedSeq > a.placedSeq ? b : a))
  if (slowed.placedSeq > latest.placedSeq) {
    return { evict: slowed.id, reason: `job ${slowed.id}: ${measured}; it was the latest colocation on its nodes (beside ${sharing.map(o => o.id).join(', ')}), back to the queue` }
  }
  return { evict: latest.id, reason: `job ${slowed.id}: ${measured}; the latest colocation on its nodes, ${latest.id}, back to the queue` }
}
