/**
 * Moves stored keys between the host pool and the NVMe tier (PlexRL §4.5):
 * spilling pool keys to NVMe (victims by the scheduler's hints, then LRU:
 * spill-order.ts), promoting NVMe-only keys back into the pool, and writing
 * keys to NVMe for durability.
 *
 * Contracts:
 * - Units: bytes; watermarks are fractions of the pool's size.
 * - Ownership: reads the index, never adds or removes an entry; changes only
 *   an entry's `host` (a pool extent it allocates or frees), `onNvme` and
 *   `checksum`, and the `spilled` / `promoted` counters. An adopted
 *   shared-memory copy is never spilled (that frees no pool) but is written
 *   to NVMe by `persist` like a pool copy.
 * - Ordering: a key's pool copy is freed only after its NVMe copy is
 *   committed and nothing pins it, and only if the key is still the index's
 *   entry; a promoted copy is checksum-verified before the key uses it.
 * - Background spilling runs at most once at a time, tracked by `track`.
 * All bookkeeping on the event loop; the bytes move on native threads.
 */
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { checksum, type HostPool } from '../../native/index.ts'
import type { NvmeTier } from './nvme-tier.ts'
import type { HostSpace } from './host-space.ts'
import { nextUseOf, spillOrder, type UseHint } from './spill-order.ts'
import { hasHostCopy, hostBytesOf, keyRange, pinEntry, whenUnpinned, type StoredEntry } from './stored-entry.ts'

export interface TierMover {
  /**
   * Moves pool keys not pinned and not in `keep` to NVMe until `wantBytes`
   * are freed, or, when `wantBytes` is 0, until the pool is under the low
   * watermark. Stops early when NVMe is full. Returns the bytes freed.
   */
  spill(wantBytes: number, keep?: ReadonlySet<string>): Promise<number>
  /** Starts a background spill when the pool is above the high watermark and none is running. */
  spillIfAboveWatermark(): void
  /**
   * Reads an NVMe-only key into a new pool extent, verifying its checksum
   * (ERR_DATA_CORRUPT), and keeps it resident; a no-op for a key with a host
   * copy. Allocation spills other keys, never those in `keep`.
   */
  promote(entry: StoredEntry, keep: ReadonlySet<string>): Promise<void>
  /** Writes a key's host copy to NVMe (fsynced) unless it is there already. */
  persist(entry: StoredEntry): Promise<void>
  /** The key's crc32c, computed from its host copy on first use (the caller keeps it pinned or host-resident). */
  checksumOf(entry: StoredEntry): Promise<number>
}

export interface TierMoverOptions {
  /** Fraction of the pool above which background spilling starts (0..1). */
  spillHighWatermark: number
  /** Fraction of the pool background spilling brings usage down to (0..1). */
  spillLowWatermark: number
}

export interface TierMoverComponents {
  logger: Logger
  pool: HostPool
  nvme: NvmeTier
  space: HostSpace
  /** The StateManager's index, key text → entry. */
  index: ReadonlyMap<string, StoredEntry>
  counters: { spilled: number, promoted: number }
  /** The scheduler's current hints (replaced, not mutated, by setHints). */
  hints(): readonly UseHint[]
  /** Keeps a background operation alive until stop() and logs its failure. */
  track(work: Promise<unknown>): void
}

export function createTierMover (options: TierMoverOptions, components: TierMoverComponents): TierMover {
  const { logger, pool, nvme, space, index, counters } = components
  let spilling: Promise<void> | undefined
  const pin = (entry: StoredEntry): () => void => pinEntry(entry, space.released)

  async function checksumOf (entry: StoredEntry): Promise<number> {
    if (entry.checksum === undefined) {
      if (!hasHostCopy(entry)) throw new AgentError('ERR_INTERNAL', `${entry.key.text} has no checksum and no host copy`)
      const unpin = pin(entry)
      try {
        entry.checksum = await checksum(hostBytesOf(pool, entry))
      } finally {
        unpin()
      }
    }
    return entry.checksum
  }

  async function spill (wantBytes: number, keep: ReadonlySet<string> = new Set()): Promise<number> {
    const hints = components.hints()
    const candidates = [...index.values()]
      .filter(e => e.host !== undefined && e.pins === 0 && !keep.has(e.key.text))
      .map(e => ({ entry: e, key: e.key.text, lastUseMs: e.lastUseMs, nextUseMs: nextUseOf(e.key.text, hints) }))
    const target = wantBytes > 0 ? wantBytes : space.usedBytes() - options.spillLowWatermark * pool.sizeBytes
    let freed = 0
    for (const { entry } of spillOrder(candidates)) {
      if (freed >= target) break
      if (entry.host === undefined || entry.pins > 0 || index.get(entry.key.text) !== entry) continue
      const unpin = pin(entry)
      try {
        if (!entry.onNvme) {
          await nvme.put(entry.key.text, keyRange(pool, entry.host, entry.key), await checksumOf(entry), entry.owner)
          entry.onNvme = true
        }
      } catch (err) {
        if ((err as AgentError).code === 'ERR_TIER_FULL') break
        throw err
      } finally {
        unpin()
      }
      await whenUnpinned(entry)
      if (entry.host !== undefined && index.get(entry.key.text) === entry) {
        pool.free(entry.host)
        entry.host = undefined
        freed += entry.key.bytes
        counters.spilled++
      }
    }
    if (freed > 0) logger.debug({ freedBytes: freed }, 'spilled to NVMe')
    return freed
  }

  const promoting = new Map<StoredEntry, Promise<void>>()

  async function promoteOnce (entry: StoredEntry, keep: ReadonlySet<string>): Promise<void> {
    const extent = await space.allocate(entry.key.bytes, keep)
    const range = keyRange(pool, extent, entry.key)
    const filled = space.filling(entry.key.bytes)
    try {
      await nvme.read(entry.key.text, range)
      const sum = await checksum(range)
      if (sum !== entry.checksum) {
        throw new AgentError('ERR_DATA_CORRUPT', `${entry.key.text} read back from NVMe with crc32c ${sum.toString(16)}, expected ${entry.checksum?.toString(16)}`)
      }
    } catch (err) {
      pool.free(extent)
      throw err
    } finally {
      filled()
    }
    if (hasHostCopy(entry) || index.get(entry.key.text) !== entry) {
      pool.free(extent) // promoted concurrently, or dropped meanwhile
      return
    }
    entry.host = extent
    counters.promoted++
  }

  return {
    spill,
    spillIfAboveWatermark () {
      if (spilling !== undefined) return
      if (space.usedBytes() <= options.spillHighWatermark * pool.sizeBytes) return
      spilling = spill(0).then(() => {}, err => logger.error({ err }, 'background spill failed')).finally(() => { spilling = undefined })
      components.track(spilling)
    },
    promote (entry, keep) {
      if (hasHostCopy(entry)) return Promise.resolve()
      // A prefetch and an onload of the same key read it once.
      let reading = promoting.get(entry)
      if (reading === undefined) {
        reading = promoteOnce(entry, keep).finally(() => promoting.delete(entry))
        promoting.set(entry, reading)
      }
      return reading
    },
    async persist (entry) {
      if (entry.onNvme) return
      if (!hasHostCopy(entry)) throw new AgentError('ERR_INTERNAL', `${entry.key.text} is in neither tier`)
      const unpin = pin(entry)
      try {
        await nvme.put(entry.key.text, hostBytesOf(pool, entry), await checksumOf(entry), entry.owner)
        entry.onNvme = true
      } finally {
        unpin()
      }
    },
    checksumOf,
  }
}
