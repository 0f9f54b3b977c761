/**
 * A job's footprint on the cyclic horizon: the busy ranges of one (stretched)
 * period, repeated `periods` times from `startSlot`. All values are integer
 * slots. This is what a placement reserves on each node of its group
 * (PlexRL §4.3.1 "Atomic Reservation": every future period at once).
 */

export interface Footprint {
  /** Absolute slot where period 0 starts. */
  startSlot: number
  /** Length of one period, slots (the job's period stretched by its micro-shifts). */
  periodSlots: number
  /** Number of periods (the job's remaining iterations). */
  periods: number
  /** Busy ranges [from, to) relative to a period's start, sorted, disjoint; `to` may exceed periodSlots by the tail padding. */
  busy: ReadonlyArray<readonly [number, number]>
}

/** Slot just after the footprint's last busy slot. */
export function footprintEnd (f: Footprint): number {
  const last = f.busy[f.busy.length - 1]
  return f.startSlot + (f.periods - 1) * f.periodSlots + (last === undefined ? 0 : last[1])
}

/** Sorts and merges overlapping or touching ranges. */
export function mergeRanges (ranges: ReadonlyArray<readonly [number, number]>): Array<[number, number]> {
  const sorted = ranges.filter(r => r[1] > r[0]).map(r => [r[0], r[1]] as [number, number]).sort((x, y) => x[0] - y[0])
  const out: Array<[number, number]> = []
  for (const r of sorted) {
    const last = out[out.length - 1]
    if (last !== undefined && r[0] <= last[1]) last[1] = Math.max(last[1], r[1])
    else out.push(r)
  }
  return out
}

/**
 * Calls `visit(a, b)` for every busy instance of the footprint clipped to the
 * absolute range [from, to), in time order. Returns early (false) when
 * `visit` returns false.
 */
// biome-ignore lint/suspicious/noConfusingVoidType: a visitor with no return statement is typed void, which `undefined` would not accept
export function forEachBusyInstance (f: Footprint, from: number, to: number, visit: (a: number, b: number) => boolean | void): boolean {
  if (f.busy.length === 0 || to <= from) return true
  const maxTo = f.busy[f.busy.length - 1]![1]
  let k = Math.max(0, Math.floor((from - f.startSlot - maxTo) / f.periodSlots))
  for (; k < f.periods; k++) {
    const base = f.startSlot + k * f.periodSlots
    if (base >= to) break
    for (const [s, e] of f.busy) {
      const a = Math.max(from, base + s)
      const b = Math.min(to, base + e)
      if (b > a && visit(a, b) === false) return false
    }
  }
  return true
}
