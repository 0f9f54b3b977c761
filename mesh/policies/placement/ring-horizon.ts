/**
 * The cyclic time horizon of PlexRL §4.3.1 / §5.2.1: a planning window of
 * `slots` slots of `slotS` seconds (default 28,800 × 1 s = 8 h) kept as a
 * ring. Absolute slot numbers grow without bound; slot t lives at ring
 * position t mod slots, so advancing the window never shifts an array.
 *
 * Contract: the window is [startSlot, startSlot + slots). Any absolute range
 * inside it maps to at most two ring ranges (two when it wraps past the end
 * of the array).
 */

export interface HorizonOptions {
  /** Number of slots in the ring. Default 28,800. */
  slots?: number
  /** Seconds per slot. Default 1. */
  slotS?: number
}

export const defaultHorizonSlots = 28_800
export const defaultSlotS = 1

/** A half-open range of ring positions [from, to), 0 <= from < to <= slots. */
export interface RingRange {
  from: number
  to: number
}

export function ringPosition (slot: number, slots: number): number {
  const r = slot % slots
  return r < 0 ? r + slots : r
}

/**
 * The ring ranges covering the absolute range [a, b) (b - a <= slots).
 * Returns zero ranges for an empty range, one when it does not wrap, two when it does.
 */
export function toRingRanges (a: number, b: number, slots: number): RingRange[] {
  if (b <= a) return []
  if (b - a > slots) throw new RangeError(`range [${a}, ${b}) is longer than the ${slots}-slot horizon`)
  const from = ringPosition(a, slots)
  const to = from + (b - a)
  if (to <= slots) return [{ from, to }]
  return [{ from, to: slots }, { from: 0, to: to - slots }]
}

/** Seconds to a slot count, rounding durations up (a 0.2 s segment still occupies a slot). */
export function durationSlots (seconds: number, slotS: number): number {
  return Math.max(0, Math.ceil(seconds / slotS - 1e-9))
}

/** A point in time (seconds) to the slot containing it. */
export function slotAt (seconds: number, slotS: number): number {
  return Math.floor(seconds / slotS + 1e-9)
}
