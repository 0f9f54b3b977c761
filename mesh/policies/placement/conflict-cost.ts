/**
 * Predicted slowdown of overlapping footprints (PlexRL §4.4 "allowable
 * interference", §7.1 chained delay, §7.2 duty-ratio admission). Pure
 * functions over footprints; all times in slots.
 *
 * When a busy instance of job A overlaps one of job B on a shared node, the
 * runtime scheduler (HRRS) serialises the two: whichever becomes ready second
 * waits for the other's block. Which of the two waits depends on jitter, so
 * a conflict is charged to both jobs:
 *   ΔS_A = κ · (h_A / K_A) · B_B / P_A
 * with h_A of A's K_A sampled instances overlapping B, B_B the mean padded
 * busy block of B (the wait), P_A A's unstretched period and κ the blocks of
 * waiting one conflict costs (the wait plus the delay it chains into A's
 * next operations, §7.1; calibrated on the simulator, see
 * test/bench/placement-policies.bench.ts).
 */
import { forEachBusyInstance, type Footprint } from './footprint.ts'

export interface PairConflicts {
  /** Instances of `a` in the sample, and how many of them overlap an instance of `b`. */
  aInstances: number
  aHits: number
  /** Instances of `b` in the sample, and how many of them overlap an instance of `a`. */
  bInstances: number
  bHits: number
}

/** Instances of the footprint in [from, until), as [start, end) pairs in time order. */
function instancesOf (f: Footprint, from: number, until: number): Array<[number, number]> {
  const out: Array<[number, number]> = []
  forEachBusyInstance(f, from, until, (x, y) => { out.push([x, y]) })
  return out
}

/**
 * Overlapping instances of two footprints within [from, until). Both are
 * sampled over the same range, so h / K is each job's share of delayed
 * instances.
 */
export function pairConflicts (a: Footprint, b: Footprint, from: number, until: number): PairConflicts {
  const xs = instancesOf(a, from, until)
  const ys = instancesOf(b, from, until)
  const aHit = new Uint8Array(xs.length)
  const bHit = new Uint8Array(ys.length)
  let j = 0
  for (let i = 0; i < xs.length; i++) {
    const [x0, x1] = xs[i]!
    while (j < ys.length && ys[j]![1] <= x0) j++
    for (let k = j; k < ys.length && ys[k]![0] < x1; k++) { aHit[i] = 1; bHit[k] = 1 }
  }
  return { aInstances: xs.length, aHits: aHit.reduce((s, v) => s + v, 0), bInstances: ys.length, bHits: bHit.reduce((s, v) => s + v, 0) }
}

/**
 * pairConflicts over `windows` short windows of `windowSlots` each, spread
 * evenly over [from, until) (the first at `from`, the last ending at
 * `until`), counts summed; one window over the whole range when it is no
 * longer than their total. Two footprints with incommensurate periods drift
 * against each other: a sample of their first periods only misses the
 * conflicts of their later phases, a spread sample of the same size sees them.
 */
export function sampledPairConflicts (a: Footprint, b: Footprint, from: number, until: number, windows: number, windowSlots: number): PairConflicts {
  if (until - from <= windows * windowSlots || windows <= 1) return pairConflicts(a, b, from, until)
  const sum: PairConflicts = { aInstances: 0, aHits: 0, bInstances: 0, bHits: 0 }
  const step = (until - from - windowSlots) / (windows - 1)
  for (let i = 0; i < windows; i++) {
    const x = from + Math.round(i * step)
    const c = pairConflicts(a, b, x, x + windowSlots)
    sum.aInstances += c.aInstances
    sum.aHits += c.aHits
    sum.bInstances += c.bInstances
    sum.bHits += c.bHits
  }
  return sum
}

/** Mean length of a footprint's busy blocks (its padded busy time per block), slots. */
export function meanBlockSlots (f: Footprint): number {
  if (f.busy.length === 0) return 0
  return f.busy.reduce((s, [a, b]) => s + b - a, 0) / f.busy.length
}

/** ΔS = κ · (hits / instances) · waitSlots / basePeriodSlots (0 without instances). */
export function conflictSlowdown (hits: number, instances: number, waitSlots: number, basePeriodSlots: number, costBlocks: number): number {
  if (instances === 0 || hits === 0) return 0
  return costBlocks * (hits / instances) * waitSlots / basePeriodSlots
}
