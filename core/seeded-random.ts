/**
 * A seeded pseudo-random source for policies, trace generators and
 * simulators: mulberry32 (32-bit state, period 2^32), seeded through one
 * splitmix32 step so that nearby seeds give unrelated streams. The same seed
 * always yields the same sequence on every platform (only 32-bit integer
 * arithmetic), which is what makes a simulation run reproducible.
 */

export interface SeededRandom {
  /** The seed this source was created with (an unsigned 32-bit integer). */
  readonly seed: number
  /** Uniform in [0, 1). */
  next(): number
  /** Uniform integer in [min, max] (both inclusive, integers, min <= max). */
  int(min: number, max: number): number
  /** Uniform real in [min, max). */
  uniform(min: number, max: number): number
  /** One element of a non-empty array, uniformly. */
  pick<T>(items: readonly T[]): T
  /** An index drawn with probability proportional to `weights` (non-negative, not all zero). */
  weightedIndex(weights: readonly number[]): number
  /** Exponentially distributed with the given mean (> 0). */
  exponential(mean: number): number
  /** Fisher–Yates shuffle of a copy of `items`. */
  shuffled<T>(items: readonly T[]): T[]
}

function splitmix32 (x: number): number {
  x = (x + 0x9e3779b9) | 0
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b)
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35)
  return (x ^ (x >>> 16)) >>> 0
}

/** `seed` must be an integer; it is reduced to 32 bits. */
export function createSeededRandom (seed: number): SeededRandom {
  if (!Number.isInteger(seed)) throw new RangeError(`seed must be an integer, got ${seed}`)
  const seed32 = seed >>> 0
  let state = splitmix32(seed32)

  function next (): number {
    state = (state + 0x6d2b79f5) | 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }

  return {
    seed: seed32,
    next,
    int (min, max) {
      if (!Number.isInteger(min) || !Number.isInteger(max) || min > max) throw new RangeError(`int(${min}, ${max}): need integers with min <= max`)
      return min + Math.floor(next() * (max - min + 1))
    },
    uniform (min, max) {
      return min + next() * (max - min)
    },
    pick (items) {
      if (items.length === 0) throw new RangeError('pick from an empty array')
      return items[Math.floor(next() * items.length)]!
    },
    weightedIndex (weights) {
      let total = 0
      for (const w of weights) {
        if (!(w >= 0)) throw new RangeError(`weights must be non-negative, got ${w}`)
        total += w
      }
      if (!(total > 0)) throw new RangeError('weights must not all be zero')
      let r = next() * total
      for (let i = 0; i < weights.length; i++) {
        r -= weights[i]!
        if (r < 0) return i
      }
      return weights.length - 1
    },
    exponential (mean) {
      if (!(mean > 0)) throw new RangeError(`mean must be > 0, got ${mean}`)
      return -mean * Math.log(1 - next())
    },
    shuffled (items) {
      const out = [...items]
      for (let i = out.length - 1; i > 0; i--) {
        const j = Math.floor(next() * (i + 1))
        const x = out[i]!
        out[i] = out[j]!
        out[j] = x
      }
      return out
    },
  }
}
