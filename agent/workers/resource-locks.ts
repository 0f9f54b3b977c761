/**
 * FIFO locks over named resources (a node's GPUs), taken several at once.
 *
 * Contract: `withLocks(names, fn)` runs `fn` once it holds every named lock
 * and releases them when `fn` settles. Waiters on a lock are served in
 * arrival order. Locks are taken in sorted name order, so two callers
 * wanting overlapping sets never deadlock.
 */
export interface ResourceLocks {
  withLocks<T>(names: readonly string[], fn: () => Promise<T>): Promise<T>
  /** Names currently held or waited for. */
  busy(): string[]
}

export function createResourceLocks (): ResourceLocks {
  const tails = new Map<string, Promise<void>>()
  return {
    async withLocks (names, fn) {
      const releases: Array<() => void> = []
      try {
        for (const name of [...new Set(names)].sort()) {
          const previous = tails.get(name) ?? Promise.resolve()
          let release!: () => void
          const mine = new Promise<void>(resolve => { release = resolve })
          const tail = previous.then(() => mine)
          tails.set(name, tail)
          releases.push(() => { release(); if (tails.get(name) === tail) tails.delete(name) })
          await previous
        }
        return await fn()
      } finally {
        for (const release of releases) release()
      }
    },
    busy: () => [...tails.keys()].sort(),
  }
}
