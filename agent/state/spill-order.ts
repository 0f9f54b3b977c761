/**
 * Which host-resident keys spill to NVMe first (PlexRL §4.5: the scheduler's
 * hints pick victims, LRU is the fallback). Belady-style: a key the scheduler
 * says nothing about is assumed needed latest, so it goes first (oldest use
 * first among those); then hinted keys, the one needed furthest in the future
 * first. Pure: the caller passes the clock.
 */

export interface SpillCandidate {
  key: string
  /** When the key was last offloaded or onloaded, ms since the epoch. */
  lastUseMs: number
  /** When the scheduler expects the key to be needed, ms since the epoch; undefined = no hint. */
  nextUseMs: number | undefined
}

/** Negative when `a` spills before `b`, positive after, 0 when the order does not tell them apart. */
export function compareSpill (a: Omit<SpillCandidate, 'key'>, b: Omit<SpillCandidate, 'key'>): number {
  if (a.nextUseMs === undefined && b.nextUseMs === undefined) return a.lastUseMs - b.lastUseMs
  if (a.nextUseMs === undefined) return -1
  if (b.nextUseMs === undefined) return 1
  return b.nextUseMs - a.nextUseMs || a.lastUseMs - b.lastUseMs
}

/** The candidates in spill order (a stable sort: ties keep their order). spill-queue.ts keeps the same order incrementally. */
export function spillOrder<T extends SpillCandidate> (candidates: readonly T[]): T[] {
  return [...candidates].sort(compareSpill)
}

/** A scheduler hint: keys under `prefix` are needed `inMs` from when the hint arrived. */
export interface UseHint {
  prefix: string
  atMs: number
}

/** The earliest hinted use of `key`, or undefined. */
export function nextUseOf (key: string, hints: readonly UseHint[]): number | undefined {
  let next: number | undefined
  for (const h of hints) {
    if (key.startsWith(h.prefix) && (next === undefined || h.atMs < next)) next = h.atMs
  }
  return next
}
