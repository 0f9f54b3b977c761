/**
 * Moves stored keys between the host pool and the NVMe tier (PlexRL §4.5):
 * spilling pool keys to NVMe (victims by the scheduler's hints, then LRU:
 * spill-order.ts, kept in order by spill-queue.ts), promoting NVMe-only keys
 * back into the pool, and writing keys to NVMe for durability.
 *
 * Contracts:
 * - Units: bytes; watermarks are fractions of the pool's size.
 * - Ownership: reads the index, never adds or removes an entry; changes only
 *   an entry's `host` (a pool extent it allocates or frees), `onNvme` and
 *   `checksum`, and the `spilled` / `promoted` counters. It updates the
 *   spill queue for every entry whose `host` it changes and for every pin it
 *   takes (on unpin). An adopted shared-memory copy is never spilled (that
 *   frees no pool) but is written to NVMe by `persist` like a pool copy.
 * - Batching: victims are taken from the queue in groups (up to
 *   `spillGroupBytes`); a group's NVMe writes are issued together, so the
 *   tier commits them as one group (one segment, one data sync, one journal
 *   sync: nvme-tier.ts), and its pool copies are freed together.
 * - Ordering: a key's pool copy is freed only after its NVMe copy and
 *   journal record are durable (its put resolved), only when nothing pins it
 *   and only if the key is still the index's entry (a victim a reader pinned
 *   meanwhile keeps its copy, now also on NVMe, and is freed by a later
 *   spill without another write). A promoted copy is checksum-verified
 *   before the key uses it.
 * - Pacing: `spillIfAboveWatermark` (called after every pool allocation but a promotion's)
 *   starts a background spill above the high watermark, at most one at a
 *   time, tracked by `track`, down to the low watermark; it starts again if
 *   allocation took the pool back above the high watermark meanwhile. An
 *   allocation that finds the pool full while it runs (`makeRoom`) waits for
 *   its next group instead of writing a victim of its own, and its kept keys
 *   are not taken meanwhile.
 * All bookkeeping on the event loop; the bytes move on native threads.
 */
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { checksum, viewHostRange, type HostPool, type HostRange } from '../../native/index.ts'
import { crc32c, inlineChecksumMaxBytes } from './crc32c.ts'
import type { NvmeTier } from './nvme-tier.ts'
import type { HostSpace } from './host-space.ts'
import type { SpillQueue } from './spill-queue.ts'
import { mapConcurrently } from './map-concurrently.ts'
import { hasHostCopy, hostBytesOf, keyRange, pinEntry, type StoredEntry } from './stored-entry.ts'

export interface TierMover {
  /**
   * Moves pool keys not pinned and not in `keep` to NVMe until `wantBytes`
   * are freed, or, when `wantBytes` is 0, until the pool is under the low
   * watermark. Stops early when NVMe is full. Returns the bytes freed.
   */
  spill(wantBytes: number, keep?: ReadonlySet<string>): Promise<number>
  /**
   * What an allocation that found the pool full calls (HostSpace's `spill`):
   * with a background spill running (or started now, above the high
   * watermark), waits for its next group and returns the bytes it freed;
   * otherwise, or when that freed nothing, spills `bytes` itself as `spill`
   * does. Keys in `keep` are not spilled either way.
   */
  makeRoom(bytes: number, keep: ReadonlySet<string>): Promise<number>
  /** Starts a background spill when the pool is above the high watermark and none is running; returns whether one is running. */
  spillIfAboveWatermark(): boolean
  /**
   * Reads an NVMe-only key into a new pool extent, verifying its checksum
   * (ERR_DATA_CORRUPT), and keeps it resident; a no-op for a key with a host
   * copy. Allocation spills other keys, never those in `keep`.
   */
  promote(entry: StoredEntry, keep: ReadonlySet<string>): Promise<void>
  /** Makes a key durable: writes its host copy to NVMe (fsynced), or re-records a spilled copy as durable. */
  persist(entry: StoredEntry): Promise<void>
  /**
   * persist for many keys at once: their writes are issued together (group
   * commits), spilled copies re-recorded in one journal write. Every key not
   * on NVMe needs a host copy (ERR_INTERNAL). Throws the first failure after
   * every write settled; keys made durable meanwhile stay durable.
   */
  persistAll(entries: readonly StoredEntry[]): Promise<void>
  /** The key's crc32c, computed from its host copy on first use (the caller keeps it pinned or host-resident). */
  checksumOf(entry: StoredEntry): Promise<number>
  /**
   * Stops spilling at the next group boundary: spills running take no
   * further group (those in flight commit, so every key stays in one tier or
   * both), none starts again, and allocations waiting for a group are told
   * it freed nothing. Resolves once no spill runs.
   */
  stop(): Promise<void>
}

export interface TierMoverOptions {
  /** Fraction of the pool above which background spilling starts (0..1). */
  spillHighWatermark: number
  /** Fraction of the pool background spilling brings usage down to (0..1). */
  spillLowWatermark: number
  /**
   * Bytes of victims written to NVMe as one group (one segment, one journal
   * commit). Default: a sixteenth of the pool, at least 1 MiB and at most
   * 16 MiB (at least one key).
   */
  spillGroupBytes?: number
}

export interface TierMoverComponents {
  logger: Logger
  pool: HostPool
  nvme: NvmeTier
  space: HostSpace
  /** The StateManager's index, key text → entry. */
  index: ReadonlyMap<string, StoredEntry>
  /** The spillable pool keys in spill order (the owner updates it as entries change; hints go to it too). */
  queue: SpillQueue
  counters: { spilled: number, promoted: number }
  /** Keeps a background operation alive until stop() and logs its failure. */
  track(work: Promise<unknown>): void
}

/** crc32c of a range: inline when small (crc32c.ts), else on native threads. */
const checksumRange = async (range: HostRange): Promise<number> =>
  range.length <= inlineChecksumMaxBytes ? crc32c(viewHostRange(range)) : await checksum(range)

/** Checksums computed at once for a group (each is a native job). */
const checksumConcurrency = 8
/** Groups of one spill in flight: the next is chosen and checksummed while the previous one commits. */
const groupsInFlight = 2

export function createTierMover (options: TierMoverOptions, components: TierMoverComponents): TierMover {
  const { logger, pool, nvme, space, index, queue, counters } = components
  const groupBytes = options.spillGroupBytes ?? Math.min(16 * 2 ** 20, Math.max(2 ** 20, Math.floor(pool.sizeBytes / 16)))
  let spilling: Promise<void> | undefined
  /** Set by stop(): no spill takes another group. */
  let stopped = false
  /** Keys kept by allocations waiting in makeRoom (a count per key): no spill takes them. */
  const protectedKeys = new Map<string, number>()
  /** Resolved with the bytes each spill group frees, and with 0 when the background spill ends without starting again. */
  const groupWaiters: Array<(freed: number) => void> = []
  const groupDone = (freed: number): void => { for (const wake of groupWaiters.splice(0)) wake(freed) }

  /** Pins the entry; its unpin re-queues it for spilling and wakes waiting allocations. */
  const pin = (entry: StoredEntry): () => void => pinEntry(entry, () => { queue.update(entry); space.released() })

  async function checksumOf (entry: StoredEntry): Promise<number> {
    if (entry.checksum === undefined) {
      if (!hasHostCopy(entry)) throw new AgentError('ERR_INTERNAL', `${entry.key.text} has no checksum and no host copy`)
      const range = hostBytesOf(pool, entry)
      if (range.length <= inlineChecksumMaxBytes) {
        entry.checksum = crc32c(viewHostRange(range))
      } else {
        const unpin = pin(entry)
        try {
          entry.checksum = await checksum(range)
        } finally {
          unpin()
        }
      }
    }
    return entry.checksum
  }

  /** Takes victims from the queue, in spill order, until they hold `bytes` (at least one, unless none is left). */
  function takeVictims (bytes: number, keep: ReadonlySet<string>): StoredEntry[] {
    const skip = (e: StoredEntry): boolean => keep.has(e.key.text) || protectedKeys.has(e.key.text)
    const group: StoredEntry[] = []
    for (let taken = 0; taken < bytes;) {
      const e = queue.shift(skip)
      if (e === undefined) break
      group.push(e)
      taken += e.key.bytes
    }
    return group
  }

  /**
   * Writes a group's keys to NVMe together, then frees the pool copies that
   * may go. Returns the bytes freed and whether NVMe ran out of room.
   */
  async function spillGroup (group: StoredEntry[]): Promise<{ freed: number, full: boolean }> {
    // Pinned while written: a drop waits for the write, a reader cannot lose the bytes.
    const unpins = group.map(e => pinEntry(e, () => queue.update(e)))
    let full = false
    let failure: unknown
    try {
      const toWrite = group.filter(e => !e.onNvme)
      await mapConcurrently(toWrite, checksumConcurrency, checksumOf)
      // Issued together: the tier commits them as one group.
      // Recorded durable only for keys promised to survive a restart (durability "memory" ones are discarded by it).
      const puts = await nvme.putAll(toWrite.map(e => ({ key: e.key.text, src: keyRange(pool, e.host!, e.key), checksum: e.checksum!, owner: e.owner, durable: e.durable })))
      puts.forEach((put, i) => {
        if (!(put instanceof Error)) toWrite[i]!.onNvme = true
        else if ((put as AgentError).code === 'ERR_TIER_FULL') full = true
        else failure ??= put
      })
    } catch (err) {
      failure ??= err
    } finally {
      for (const unpin of unpins) unpin()
    }
    let freed = 0
    for (const e of group) {
      if (!e.onNvme || e.host === undefined || e.pins > 0 || index.get(e.key.text) !== e) continue
      pool.free(e.host)
      e.host = undefined
      queue.update(e)
      freed += e.key.bytes
      counters.spilled++
    }
    space.released() // freed space, and the group's pins are gone
    groupDone(freed)
    if (failure !== undefined) throw failure
    return { freed, full }
  }

  async function spill (wantBytes: number, keep: ReadonlySet<string> = new Set()): Promise<number> {
    const target = wantBytes > 0 ? wantBytes : space.usedBytes() - options.spillLowWatermark * pool.sizeBytes
    let freed = 0
    /** Bytes of victims in groups in flight. */
    let taking = 0
    let full = false
    let failure: { err: unknown } | undefined
    const inFlight = new Set<Promise<void>>()
    for (;;) {
      // The next group is chosen and its checksums computed while the previous one commits.
      while (!stopped && !full && failure === undefined && inFlight.size < groupsInFlight && freed + taking < target) {
        const group = takeVictims(Math.min(target - freed - taking, groupBytes), keep)
        if (group.length === 0) break
        const bytes = group.reduce((sum, e) => sum + e.key.bytes, 0)
        taking += bytes
        const work: Promise<void> = spillGroup(group).then(done => {
          freed += done.freed
          full ||= done.full
        }, err => { failure ??= { err } }).finally(() => {
          taking -= bytes
          inFlight.delete(work)
        })
        inFlight.add(work)
      }
      if (inFlight.size === 0) break
      await Promise.race(inFlight)
    }
    if (failure !== undefined) throw failure.err
    if (freed > 0) logger.debug({ freedBytes: freed }, 'spilled to NVMe')
    return freed
  }

  function spillIfAboveWatermark (): boolean {
    if (spilling !== undefined) return true
    if (stopped) return false
    if (space.usedBytes() <= options.spillHighWatermark * pool.sizeBytes) return false
    let freed = 0
    spilling = spill(0).then(n => { freed = n }, err => logger.error({ err }, 'background spill failed')).finally(() => {
      spilling = undefined
      // Allocation may have refilled the pool meanwhile: a run that freed something starts again, and
      // allocations waiting for a group wait for its groups; one that freed nothing does not retry at once.
      if (freed > 0 && spillIfAboveWatermark()) return
      groupDone(0)
    })
    components.track(spilling)
    return true
  }

  async function persistAll (list: readonly StoredEntry[]): Promise<void> {
    const unique = [...new Set(list)].filter(e => !e.durable)
    // Spilled copies: re-recorded as durable, no copy.
    const spilled = unique.filter(e => e.onNvme)
    const todo = unique.filter(e => !e.onNvme)
    const missing = todo.find(e => !hasHostCopy(e))
    if (missing !== undefined) throw new AgentError('ERR_INTERNAL', `${missing.key.text} is in neither tier`)
    const recordSpilled = async (): Promise<void> => {
      if (spilled.length === 0) return
      await nvme.makeDurable(spilled.map(e => e.key.text))
      for (const e of spilled) e.durable = true
    }
    const writeNew = async (): Promise<void> => {
      const unpins = todo.map(pin)
      try {
        await mapConcurrently(todo, checksumConcurrency, checksumOf)
        // Issued together: the tier commits them in as few groups as their sizes allow.
        const puts = await nvme.putAll(todo.map(e => ({ key: e.key.text, src: hostBytesOf(pool, e), checksum: e.checksum!, owner: e.owner })))
        puts.forEach((put, i) => { if (!(put instanceof Error)) Object.assign(todo[i]!, { onNvme: true, durable: true }) })
        const failure = puts.find(put => put instanceof Error)
        if (failure !== undefined) throw failure
      } finally {
        for (const unpin of unpins) unpin()
      }
    }
    const failed = (await Promise.allSettled([recordSpilled(), writeNew()])).find(r => r.status === 'rejected')
    if (failed !== undefined) throw failed.reason
  }

  const promoting = new Map<StoredEntry, Promise<void>>()

  async function promoteOnce (entry: StoredEntry, keep: ReadonlySet<string>): Promise<void> {
    const extent = await space.allocate(entry.key.bytes, keep, false)
    const range = keyRange(pool, extent, entry.key)
    const filled = space.filling(entry.key.bytes)
    try {
      await nvme.read(entry.key.text, range)
      const sum = await checksumRange(range)
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
    queue.update(entry)
    counters.promoted++
  }

  return {
    spill,
    async makeRoom (bytes, keep) {
      if (spillIfAboveWatermark()) {
        for (const k of keep) protectedKeys.set(k, (protectedKeys.get(k) ?? 0) + 1)
        try {
          const freed = await new Promise<number>(resolve => groupWaiters.push(resolve))
          if (freed > 0) return freed
        } finally {
          for (const k of keep) {
            const n = protectedKeys.get(k)! - 1
            if (n === 0) protectedKeys.delete(k)
            else protectedKeys.set(k, n)
          }
        }
      }
      return await spill(bytes, keep)
    },
    spillIfAboveWatermark,
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
    persist: entry => persistAll([entry]),
    persistAll,
    checksumOf,
    async stop () {
      stopped = true
      await spilling
      groupDone(0)
    },
  }
}
