/**
 * The Global Capacity Profile of PlexRL §4.3.1 / §5.2.1: how many nodes are
 * free in each slot of the cyclic horizon, kept in a segment tree over the
 * ring with lazy range-add and range-minimum. `minFree(a, b) >= N` is the
 * necessary condition for an N-node gang to run throughout [a, b): it prunes
 * infeasible windows before any per-node interval set is consulted.
 *
 * Leaf i holds ring position i (absolute slot t at t mod slots). Queries and
 * updates take absolute slot ranges no longer than the ring and split them
 * where they wrap. O(log slots) per operation.
 */
import { toRingRanges } from './ring-horizon.ts'

export interface FreeNodeProfile {
  readonly slots: number
  /** Adds `delta` to the free-node count of every slot in the absolute range [a, b). */
  add(a: number, b: number, delta: number): void
  /** Minimum free-node count over the absolute range [a, b); Infinity for an empty range. */
  minFree(a: number, b: number): number
  /** Free-node count of one absolute slot. */
  freeAt(slot: number): number
  /** The earliest absolute slot in [a, b) with fewer than `n` free nodes, or -1 when there is none. */
  firstBelow(a: number, b: number, n: number): number
}

export function createFreeNodeProfile (slots: number, initialFree: number): FreeNodeProfile {
  if (!Number.isInteger(slots) || slots < 1) throw new RangeError(`slots must be a positive integer, got ${slots}`)
  let size = 1
  while (size < slots) size <<= 1
  // min[k]: minimum over node k's range, excluding lazy adds pending at ancestors.
  const min = new Float64Array(2 * size).fill(Infinity)
  const lazy = new Float64Array(2 * size)
  for (let i = 0; i < slots; i++) min[size + i] = initialFree
  for (let k = size - 1; k >= 1; k--) min[k] = Math.min(min[2 * k]!, min[2 * k + 1]!)

  function update (k: number, lo: number, hi: number, a: number, b: number, delta: number): void {
    if (b <= lo || hi <= a) return
    if (a <= lo && hi <= b) {
      min[k] = min[k]! + delta
      lazy[k] = lazy[k]! + delta
      return
    }
    const mid = (lo + hi) >> 1
    update(2 * k, lo, mid, a, b, delta)
    update(2 * k + 1, mid, hi, a, b, delta)
    min[k] = Math.min(min[2 * k]!, min[2 * k + 1]!) + lazy[k]!
  }

  function query (k: number, lo: number, hi: number, a: number, b: number): number {
    if (b <= lo || hi <= a) return Infinity
    if (a <= lo && hi <= b) return min[k]!
    const mid = (lo + hi) >> 1
    return Math.min(query(2 * k, lo, mid, a, b), query(2 * k + 1, mid, hi, a, b)) + lazy[k]!
  }

  // Leftmost ring position in [a, b) whose value (with `carry` = lazy adds above k) is < n, or -1.
  function descend (k: number, lo: number, hi: number, a: number, b: number, n: number, carry: number): number {
    if (b <= lo || hi <= a || min[k]! + carry >= n) return -1
    if (hi - lo === 1) return lo
    const mid = (lo + hi) >> 1
    const below = carry + lazy[k]!
    const left = descend(2 * k, lo, mid, a, b, n, below)
    return left >= 0 ? left : descend(2 * k + 1, mid, hi, a, b, n, below)
  }

  return {
    slots,
    add (a, b, delta) {
      for (const r of toRingRanges(a, b, slots)) update(1, 0, size, r.from, r.to, delta)
    },
    minFree (a, b) {
      let m = Infinity
      for (const r of toRingRanges(a, b, slots)) m = Math.min(m, query(1, 0, size, r.from, r.to))
      return m
    },
    firstBelow (a, b, n) {
      let offset = a
      for (const r of toRingRanges(a, b, slots)) {
        const pos = descend(1, 0, size, r.from, r.to, n, 0)
        if (pos >= 0) return offset + (pos - r.from)
        offset += r.to - r.from
      }
      return -1
    },
    freeAt (slot) {
      return this.minFree(slot, slot + 1)
    },
  }
}
