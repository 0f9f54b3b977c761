/**
 * Pool space for the StateManager's copies: allocation that makes room by
 * spilling, and waits when the room it needs is held by copies in flight.
 *
 * Contracts:
 * - Units: bytes.
 * - `allocate` tries the pool; when it is full it first asks `reclaim` (pool
 *   memory held by caches, e.g. the weight server's read window, which can go
 *   at once without a copy), then `spill` for the bytes (never spilling keys
 *   in `keep`), and tries again. When spilling frees
 *   nothing but pool space is busy (pinned keys, extents being filled) it
 *   waits for `released()` and tries again; when nothing is busy either it
 *   fails with ERR_TIER_FULL. It returns an extent the caller owns and frees.
 *   After each successful allocation it calls `allocated` (the StateManager
 *   starts background spilling there above the high watermark, so spilling
 *   runs ahead of allocation instead of behind it).
 * - Busy bytes: what `pinnedPoolBytes()` reports plus the bytes between
 *   `filling(bytes)` and the call of the function it returns. A caller that
 *   fails to fill an extent frees it before ending the fill, so the waiters
 *   woken by the end find the space free.
 * - `released()` must be called whenever pool space is freed or a pool key
 *   becomes unpinned; it wakes every waiting allocation, each tries again.
 * All on the event loop.
 */
import { AgentError } from '../../core/errors.ts'
import type { Extent, HostPool } from '../../native/index.ts'
import type { NvmeTier } from './nvme-tier.ts'

export interface HostSpace {
  /**
   * `paced` false: the allocation does not start a background spill above the
   * high watermark (a promotion: spilling what was just read back would undo
   * the prefetch; the next store's allocation spills).
   */
  allocate(bytes: number, keep: ReadonlySet<string>, paced?: boolean): Promise<Extent>
  /** Counts `bytes` of a fresh extent as busy until the returned function is called. */
  filling(bytes: number): () => void
  released(): void
  /** Pool bytes allocated (keys, scratch, copies in flight). */
  usedBytes(): number
}

export interface HostSpaceComponents {
  pool: HostPool
  /** For the ERR_TIER_FULL message only. */
  nvme: Pick<NvmeTier, 'usedBytes' | 'capacityBytes'>
  /** Moves pool keys not in `keep` to NVMe until `wantBytes` are freed; returns the bytes freed. */
  spill(wantBytes: number, keep: ReadonlySet<string>): Promise<number>
  /** Bytes of pool keys pinned by readers right now. */
  pinnedPoolBytes(): number
  /** Called after every successful allocation (e.g. TierMover.spillIfAboveWatermark). Default: nothing. */
  allocated?: () => void
  /** Frees pool memory held by caches, at least `wantBytes` if it can, at once; returns the bytes freed. Default: none. */
  reclaim?: (wantBytes: number) => number
}

export function createHostSpace (components: HostSpaceComponents): HostSpace {
  const { pool, nvme, spill, pinnedPoolBytes } = components
  const allocated = components.allocated ?? (() => {})
  const reclaim = components.reclaim ?? (() => 0)
  /** Allocations waiting for pool space held by copies in flight. */
  const waiting: Array<() => void> = []
  let fillingBytes = 0
  const released = (): void => { for (const wake of waiting.splice(0)) wake() }
  /** A pool extent, or undefined when the pool has no room. */
  const tryAllocate = (bytes: number): Extent | undefined => {
    try {
      return pool.allocate(bytes)
    } catch (err) {
      if ((err as AgentError).code !== 'ERR_POOL_FULL') throw err
      return undefined
    }
  }

  return {
    async allocate (bytes, keep, paced = true) {
      if (bytes > pool.sizeBytes) {
        throw new AgentError('ERR_TIER_FULL', `no room for ${bytes} bytes: more than the whole host pool (${pool.sizeBytes} bytes); ` +
          'a key must fit the pool (state.hostPoolBytes), whatever NVMe holds')
      }
      for (;;) {
        const extent = tryAllocate(bytes)
        if (extent !== undefined) {
          if (paced) allocated()
          return extent
        }
        if (reclaim(bytes) > 0) continue
        const freed = await spill(bytes, keep)
        if (freed === 0 && pinnedPoolBytes() + fillingBytes > 0) {
          // Pool space is held by copies in flight (pinned keys, extents being filled):
          // it becomes spillable or free when one of them finishes.
          await new Promise<void>(resolve => waiting.push(resolve))
          continue
        }
        if (freed === 0) {
          throw new AgentError('ERR_TIER_FULL', `no room for ${bytes} bytes: the host pool is full and nothing more can spill to NVMe ` +
            `(NVMe ${nvme.usedBytes()} of ${nvme.capacityBytes} bytes used)`)
        }
      }
    },
    filling (bytes) {
      fillingBytes += bytes
      let ended = false
      return () => {
        if (ended) return
        ended = true
        fillingBytes -= bytes
        released()
      }
    },
    released,
    usedBytes: () => pool.sizeBytes - pool.fragmentation().freeBytes,
  }
}
