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

/**
 * Overlapping instances of two footprints within [from, until). Both are
 * sampled over the same range, so h / K is each job's share of delayed
 * instances.
 */
export function pairConflicts (a: Footprint, b: Footprint, from: number, until: number): PairConflicts {
  return sampledPairConflicts(a, b, from, until, 1, until - from)
}

/**
 * Overlap counts (as pairConflicts) over `windows` windows of `windowSlots`
 * each, spread evenly over [from, until) (the first at `from`, the last
 * ending at `until`), counts summed; one window over the whole range when
 * it is no longer than their total. Two footprints with incommensurate periods drift against
 * each other: a sample of their first periods only misses the conflicts of
 * their later phases, a spread sample of the same size sees them. On the
 * tolerant placement path (once per candidate and resident), so it walks the
 * instances into reused flat buffers instead of allocating.
 */
export function sampledPairConflicts (a: Footprint, b: Footprint, from: number, until: number, windows: number, windowSlots: number): PairConflicts {
  const sum: PairConflicts = { aInstances: 0, aHits: 0, bInstances: 0, bHits: 0 }
  if (until <= from) return sum
  const whole = until - from <= windows * windowSlots || windows <= 1
  const count = whole ? 1 : windows
  const step = whole ? 0 : (until - from - windowSlots) / (windows - 1)
  for (let i = 0; i < count; i++) {
    const x = whole ? from : from + Math.round(i * step)
    const y = whole ? until : x + windowSlots
    const na = fillInstances(a, x, y, scratchA)
    const nb = fillInstances(b, x, y, scratchB)
    let j = 0
    let lastHitY = -1
    for (let k = 0; k < na; k++) {
      const x0 = scratchA[2 * k]!
      const x1 = scratchA[2 * k + 1]!
      while (j < nb && scratchB[2 * j + 1]! <= x0) j++
      let hit = false
      for (let m = j; m < nb && scratchB[2 * m]! < x1; m++) {
        hit = true
        if (m > lastHitY) { sum.bHits++; lastHitY = m }
      }
      if (hit) sum.aHits++
    }
    sum.aInstances += na
    sum.bInstances += nb
  }
  return sum
}

const scratchA: number[] = []
const scratchB: number[] = []

/** Writes the footprint's instances in [from, until) as flat start/end pairs into `out`, in time order; returns their count. */
function fillInstances (f: Footprint, from: number, until: number, out: number[]): number {
  let n = 0
  forEachBusyInstance(f, from, until, (x, y) => { out[2 * n] = x; out[2 * n + 1] = y; n++ })
  return n
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
