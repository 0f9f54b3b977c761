/**
 * One node's free time inside the planning window (PlexRL §5.2.1 "Interval
 * Set Fitting"): sorted, disjoint, non-adjacent half-open ranges [start, end)
 * of absolute slots. Fitting a segment is a binary search over interval
 * starts (`fits`, `earliestFit`: O(log n)); reserving carves a range out,
 * releasing puts it back and merges neighbours.
 *
 * Coordinates are absolute slots (the ring's unrolled view of the window
 * [windowStart, windowStart + slots)), so a range never needs splitting here;
 * the global profile (free-node-profile.ts) is the ring proper.
 */

export class FreeIntervalSet {
  /** starts[i] < ends[i] <= starts[i + 1] - 1 (disjoint, not adjacent). */
  private starts: number[] = []
  private ends: number[] = []
  private total = 0

  /** A set that is free on [a, b). */
  static free (a: number, b: number): FreeIntervalSet {
    const set = new FreeIntervalSet()
    if (b > a) { set.starts.push(a); set.ends.push(b); set.total = b - a }
    return set
  }

  get intervalCount (): number { return this.starts.length }
  /** Free slots in total. */
  get freeSlots (): number { return this.total }

  /** A copy of the free ranges, in order. */
  intervals (): Array<[number, number]> {
    return this.starts.map((s, i) => [s, this.ends[i]!])
  }

  /** Index of the last interval with start <= slot, or -1. */
  private floorIndex (slot: number): number {
    let lo = 0
    let hi = this.starts.length - 1
    let found = -1
    while (lo <= hi) {
      const mid = (lo + hi) >> 1
      if (this.starts[mid]! <= slot) { found = mid; lo = mid + 1 } else hi = mid - 1
    }
    return found
  }

  /** simulateInsert: does [a, b) lie entirely inside one free interval? An empty range always fits. */
  fits (a: number, b: number): boolean {
    if (b <= a) return true
    const i = this.floorIndex(a)
    return i >= 0 && this.ends[i]! >= b
  }

  /** The free interval containing `slot`, or undefined. */
  containing (slot: number): [number, number] | undefined {
    const i = this.floorIndex(slot)
    return i >= 0 && this.ends[i]! > slot ? [this.starts[i]!, this.ends[i]!] : undefined
  }

  /**
   * The earliest start s >= a with [s, s + length) free, or -1 when none
   * starts at or before `latestStart`.
   */
  earliestFit (a: number, length: number, latestStart = Infinity): number {
    let i = this.floorIndex(a)
    if (i < 0) i = 0
    for (; i < this.starts.length; i++) {
      const s = Math.max(a, this.starts[i]!)
      if (s > latestStart) return -1
      if (this.ends[i]! - s >= length) return s
    }
    return -1
  }

  /**
   * Carves [a, b) out of the free set. Throws when any part of it is not free
   * (a reservation never over-commits: callers check `fits` first).
   */
  reserve (a: number, b: number): void {
    if (b <= a) return
    const i = this.floorIndex(a)
    if (i < 0 || this.ends[i]! < b) throw new RangeError(`[${a}, ${b}) is not free`)
    const s = this.starts[i]!
    const e = this.ends[i]!
    const pieces: number[] = []
    if (s < a) pieces.push(s, a)
    if (b < e) pieces.push(b, e)
    this.starts.splice(i, 1, ...pieces.filter((_, k) => k % 2 === 0))
    this.ends.splice(i, 1, ...pieces.filter((_, k) => k % 2 === 1))
    this.total -= b - a
  }

  /**
   * Returns [a, b) to the free set. Throws when any part of it is already free
   * (double release is a bookkeeping bug).
   */
  release (a: number, b: number): void {
    if (b <= a) return
    const i = this.floorIndex(a)
    if (i >= 0 && this.ends[i]! > a) throw new RangeError(`[${a}, ${b}) is already partly free`)
    const next = i + 1
    if (next < this.starts.length && this.starts[next]! < b) throw new RangeError(`[${a}, ${b}) is already partly free`)
    const joinLeft = i >= 0 && this.ends[i] === a
    const joinRight = next < this.starts.length && this.starts[next] === b
    if (joinLeft && joinRight) {
      this.ends[i] = this.ends[next]!
      this.starts.splice(next, 1)
      this.ends.splice(next, 1)
    } else if (joinLeft) {
      this.ends[i] = b
    } else if (joinRight) {
      this.starts[next] = a
    } else {
      this.starts.splice(next, 0, a)
      this.ends.splice(next, 0, b)
    }
    this.total += b - a
  }

  /**
   * The busy (not free) sub-ranges of [a, b), in order. Used to hand a range
   * back to the global profile when the window advances past it.
   */
  busyWithin (a: number, b: number): Array<[number, number]> {
    const out: Array<[number, number]> = []
    let cursor = a
    let i = Math.max(0, this.floorIndex(a))
    for (; i < this.starts.length && cursor < b; i++) {
      const s = this.starts[i]!
      const e = this.ends[i]!
      if (e <= cursor) continue
      if (s >= b) break
      if (s > cursor) out.push([cursor, s])
      cursor = Math.max(cursor, e)
    }
    if (cursor < b) out.push([cursor, b])
    return out
  }

  /** Drops everything before `slot` (the window moved past it). */
  trimBefore (slot: number): void {
    let drop = 0
    while (drop < this.starts.length && this.ends[drop]! <= slot) { this.total -= this.ends[drop]! - this.starts[drop]!; drop++ }
    this.starts.splice(0, drop)
    this.ends.splice(0, drop)
    if (this.starts.length > 0 && this.starts[0]! < slot) {
      this.total -= slot - this.starts[0]!
      this.starts[0] = slot
    }
  }
}
