/**
 * The StateManager (PlexRL §4.5, §5.3): tensors offloaded by clients live in
 * the pinned host pool or on NVMe, indexed by canonical keys so replicas are
 * stored once.
 *
 * Contracts:
 * - offload/onload resolve only when every copy is complete (synchronous
 *   client semantics); `durability: "nvme"` also waits for NVMe + fsync.
 * - A batch either completes or changes nothing: everything is validated and
 *   host space reserved before the first copy, and a failure rolls back what
 *   the batch created.
 * - The first writer of a key stores it; a writer arriving while that copy is
 *   in flight waits for it and is counted as a replica (no second copy).
 * - The host pool spills to NVMe in the background above the high watermark
 *   (victims by scheduler hints, then LRU); an offload that finds the pool
 *   full waits for just enough spilling. ERR_TIER_FULL only when host and
 *   NVMe are both full.
 * - NVMe keys survive a restart (journal); host-only keys do not, and
 *   `residency()` says which is which (`durable`).
 * - A key's host copy is either a pool extent or a range of an adopted
 *   shared-memory mapping (`adoptShm`, zero copy), never both.
 * All bookkeeping runs on the event loop; bytes move on native threads.
 */
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { constants as bufferConstants } from 'node:buffer'
import { checksum, createHostPool, openSharedMemory, type Extent, type HostMemory, type HostPool, type HostRange, type SharedMemoryObject } from '../../native/index.ts'
import { parseKey, type StateKey } from './keys.ts'
import { createClientMemoryScope, type ClientMemory, type ClientMemoryScope, type MemorySpec } from './client-memory.ts'
import { createNvmeTier, type NvmeRecovery, type NvmeTier } from './nvme-tier.ts'
import { createShmMappingCache } from './shm-mapping-cache.ts'
import { mapConcurrently } from './map-concurrently.ts'

/** Tensors of one batch copied at once (each copy already uses every native thread). */
const copyConcurrency = 2
/** Tensors of one batch moving to or from NVMe at once: overlaps I/O and lets the journal group-commit. */
const ioConcurrency = 4
import { nextUseOf, spillOrder, type UseHint } from './spill-order.ts'

export type { MemorySpec } from './client-memory.ts'

export interface StateManagerOptions {
  /** Bytes of the pinned host pool. */
  hostPoolBytes: number
  /** mlock the pool (needs RLIMIT_MEMLOCK; systemd LimitMEMLOCK=infinity). */
  lockHostPool: boolean
  /** Directory of the NVMe tier. */
  nvmeDir: string
  /** Bytes the NVMe tier may hold. */
  nvmeCapacityBytes: number
  /** Use O_DIRECT on the NVMe tier where the filesystem supports it. */
  directIo: boolean
  /** Fraction of the pool above which background spilling starts (0..1). */
  spillHighWatermark: number
  /** Fraction of the pool background spilling brings usage down to (0..1). */
  spillLowWatermark: number
  /** Byte quota per namespace (exact namespace match); absent = unlimited. */
  namespaceQuotaBytes: Record<string, number>
  /** Hinted keys needed within this many ms are prefetched to host. */
  prefetchHorizonMs: number
}

export interface StateManagerComponents {
  logger: Logger
  /** Clock, ms since the epoch (tests pass their own). Default Date.now. */
  now?: () => number
}

export type StoredTier = 'host' | 'nvme'

export interface OffloadItem { key: string, source: MemorySpec, verify?: boolean }
export interface OffloadResult {
  key: string
  tier: StoredTier
  deduplicated: boolean
  /** On NVMe (survives a restart). */
  durable: boolean
  /** With `verify`: whether this replica's bytes matched the stored copy. */
  verified?: boolean
}
export interface OnloadItem { key: string, target: MemorySpec }
export interface OnloadResult { key: string, fromTier: StoredTier }
export interface KeySelector { keys?: string[], prefix?: string }

export interface ResidencyKey {
  key: string
  bytes: number
  tier: StoredTier
  replicas: number
  lastUseMs: number
  durable: boolean
  /** The adopted shared-memory object holding the host copy (outside the pool); absent for pool or NVMe-only keys. */
  region?: string
}

export interface Residency {
  tiers: Record<'device' | 'host' | 'nvme', { capacityBytes: number, usedBytes: number }>
  logicalBytes: number
  storedBytes: number
  namespaces: Array<{ namespace: string, keys: number, logicalBytes: number, storedBytes: number, quotaBytes: number | null }>
  hostPool: { freeBytes: number, largestFreeBytes: number, fragmentation: number }
  /** Adopted shared-memory mappings (adoptShm): host-tier bytes outside the pool. */
  shm: { regions: number, bytes: number }
  counters: StateCounters
  keys: ResidencyKey[]
}

export interface StateAvailability {
  hostPool: { totalBytes: number, freeBytes: number }
  nvme: { totalBytes: number, freeBytes: number }
  /** Namespaces with at least one stored key, sorted. */
  namespaces: string[]
}

/** Totals since start. */
export interface StateCounters {
  /** Client → pool copies actually performed (first writers). */
  offloadCopies: number
  /** Offloads answered by an existing or in-flight copy. */
  deduplicated: number
  /** Keys moved host → NVMe by spilling. */
  spilled: number
  /** Keys read NVMe → host (onload, prefetch). */
  promoted: number
  /** Pool → client copies (onload). */
  onloadCopies: number
  /** Keys stored in place in an adopted shared-memory object (adoptShm: no copy). */
  shmAdopted: number
}

export interface StateManager {
  start(): Promise<void>
  stop(): Promise<void>
  offload(items: OffloadItem[], durability?: 'memory' | 'nvme'): Promise<OffloadResult[]>
  onload(items: OnloadItem[]): Promise<OnloadResult[]>
  /** Promotes NVMe-only keys to host in the background; returns how many were scheduled. */
  prefetch(selector: KeySelector): number
  /** Removes keys from every tier; returns how many. */
  drop(selector: KeySelector): Promise<number>
  /** Scheduler hints: keys under each prefix are needed in `inMs`. Replaces earlier hints. */
  setHints(hints: Array<{ prefix: string, inMs: number }>): void
  residency(prefix?: string): Residency
  /** Capacity and free bytes per tier and the resident namespaces, for the mesh record (O(keys), no copies). */
  availability(): StateAvailability
  /** What NVMe recovery found at start. */
  recovery(): NvmeRecovery | undefined
  /** Parsed keys currently stored (for in-process exporters: materialize, weights). */
  storedKeys(prefix?: string): StateKey[]
  /**
   * Pins `key` in the host pool (promoting it from NVMe if needed) and hands
   * its bytes to the caller until `release()`. Spill and drop wait for the release.
   */
  readHost(key: string): Promise<PinnedBytes>
  /** A scratch range of `bytes` in the host pool (spilling if needed) with a Buffer view for JS writes, freed by `release()`. */
  scratch(bytes: number): Promise<ScratchBytes>
  /**
   * Stores a filled scratch range as `key` without copying (its length must be
   * the key's byte size); the scratch is consumed either way. Returns false
   * when the key was already stored (deduplicated: the scratch is freed).
   */
  adopt(key: string, scratch: ScratchBytes): boolean
  /**
   * Writes stored keys to NVMe (fsynced) so they survive a restart, as
   * offload with durability "nvme" does; ERR_KEY_NOT_FOUND for a key not stored.
   * For in-process producers (adopted scratch ranges, published weights).
   */
  persist(keys: string[]): Promise<void>
  /**
   * Stores keys whose bytes stay where a producer wrote them, in the
   * shared-memory object /dev/shm/<name> (zero copy). The object is mapped
   * once; each key's host copy is the range [offset, offset + key bytes) of
   * that mapping. Contract:
   * - All or nothing, synchronous: every key parses, every range lies inside
   *   the object and namespace quotas hold, or nothing is stored and nothing
   *   stays mapped. A key already stored or being written is not adopted
   *   (counted as a replica, as `adopt` does); `adopted` lists the keys this
   *   call stored, for the caller to drop if its own work fails.
   * - The mapping is the keys' host tier but not pool space: it does not take
   *   pool capacity, is never spilled for pool pressure (that would free no
   *   pool), counts toward namespace quotas and `residency().shm`. `persist`
   *   and durable offloads write it to NVMe like a pool key; readHost and
   *   onload read it in place.
   * - Ownership: the mapping is unmapped when the last key in it is dropped
   *   (or at stop); the bytes it names must not change while the keys are
   *   stored. The agent cannot enforce that against a process that kept its
   *   own writable mapping: readHost marks such bytes (`sharedRegion`) so
   *   consumers that vouch for them verify known checksums first.
   *   Unlinking the object's name is the caller's business (the mapping
   *   outlives the name).
   * - `source` is the object's name (mapped here) or a mapping the caller
   *   made (e.g. when it handed the object out, so its pages are already
   *   faulted in): that mapping becomes the StateManager's when the call
   *   returns (closed at once if no key was adopted) and stays the caller's
   *   when it throws.
   */
  adoptShm(source: string | SharedMemoryObject, items: Array<{ key: string, offset: number }>): { adopted: string[], deduplicated: string[] }
  /**
   * The namespace-quota check that offload, adopt and adoptShm apply, without
   * storing anything: ERR_QUOTA_EXCEEDED when storing `keys` (those not
   * already stored), plus `pendingBytes` more in each of their namespaces
   * (bytes promised elsewhere, e.g. regions handed out but not published),
   * would exceed a quota; ERR_KEY_INVALID for a key that does not parse.
   * For producers that want to refuse before the bytes are written.
   */
  checkQuota(keys: string[], pendingBytes?: number): void
}

export interface ScratchBytes extends PinnedBytes {
  view: Buffer
}

export interface PinnedBytes {
  range: HostRange
  release(): void
  /**
   * Set when the bytes are in an adopted shared-memory object (adoptShm): a
   * process that kept a writable mapping of it can still change them, so a
   * consumer that vouches for them (a checksum it computes and sends) must
   * verify them against checksums taken when they were committed.
   */
  sharedRegion?: string
}

/** A shared-memory object adopted as the host storage of some keys. */
interface AdoptedShm {
  name: string
  object: SharedMemoryObject
  /**
   * The mapping as HostMemory whose views are subarrays of one Buffer over it:
   * a fresh external Buffer per weight reply costs full garbage collections
   * (see native/host-memory.ts). Dropped when the mapping is closed.
   */
  memory: HostMemory
  /** Keys whose host copy is in this mapping, and their bytes; unmapped at 0 keys. */
  keys: number
  bytes: number
}

function adoptedMemory (object: SharedMemoryObject): HostMemory {
  let whole: Buffer | undefined
  return {
    region: object.region,
    sizeBytes: object.sizeBytes,
    label: object.label,
    viewBytes (offset, length) {
      if (object.sizeBytes > bufferConstants.MAX_LENGTH) return object.viewBytes(offset, length)
      whole ??= object.viewBytes(0, object.sizeBytes)
      return whole.subarray(offset, offset + length)
    },
  }
}

interface Entry {
  key: StateKey
  host: Extent | undefined
  onNvme: boolean
  replicas: number
  lastUseMs: number
  /** crc32c of the bytes; computed lazily (first spill, persist or verify), off the offload path. */
  checksum: number | undefined
  /** The host copy when it lives in an adopted shared-memory mapping instead of a pool extent (`host` is then undefined). */
  shm: { region: AdoptedShm, offset: number } | undefined
  /** Operations reading the entry's host copy; spill/drop wait for 0. */
  pins: number
  unpinned: Array<() => void>
}

export function createStateManager (options: StateManagerOptions, components: StateManagerComponents): StateManager {
  const { logger } = components
  const now = components.now ?? Date.now
  const entries = new Map<string, Entry>()
  /** Keys whose first copy is in flight; resolves true when stored, false when it failed. */
  const inflight = new Map<string, Promise<boolean>>()
  let pool: HostPool | undefined
  let nvme: NvmeTier | undefined
  let recovered: NvmeRecovery | undefined
  let hints: UseHint[] = []
  let spilling: Promise<void> | undefined
  const background = new Set<Promise<unknown>>()
  const mappings = createShmMappingCache()
  /** Live scratch ranges handed out by scratch(), so adopt() can take their extents. */
  const scratchExtents = new Map<ScratchBytes, Extent>()
  const counters: StateCounters = { offloadCopies: 0, deduplicated: 0, spilled: 0, promoted: 0, onloadCopies: 0, shmAdopted: 0 }
  const adoptedRegions = new Set<AdoptedShm>()

  const hostPool = (): HostPool => {
    if (pool === undefined) throw new AgentError('ERR_UNAVAILABLE', 'the StateManager is not started')
    return pool
  }
  /** The key's bytes in its host extent (extents are rounded up to the pool alignment). */
  const keyRange = (extent: Extent, k: StateKey): HostRange => hostPool().range(extent, 0, k.bytes)
  /** Whether the key has a host copy (pool extent or adopted mapping). */
  const inHost = (e: Entry): boolean => e.host !== undefined || e.shm !== undefined
  /** The key's host bytes, wherever they are; the caller checked inHost. */
  const hostRangeOf = (e: Entry): HostRange => e.shm !== undefined
    ? { memory: e.shm.region.memory, offset: e.shm.offset, length: e.key.bytes }
    : keyRange(e.host!, e.key)
  /** Gives up the entry's share of its adopted mapping, unmapping it with the last key. */
  const releaseShm = (e: Entry): void => {
    const region = e.shm?.region
    if (region === undefined) return
    e.shm = undefined
    region.keys--
    region.bytes -= e.key.bytes
    if (region.keys === 0) {
      adoptedRegions.delete(region)
      region.object.close()
      logger.debug({ region: region.name }, 'adopted shared-memory region unmapped')
    }
  }
  const hostUsed = (): number => hostPool().sizeBytes - hostPool().fragmentation().freeBytes
  const track = <T>(p: Promise<T>): void => {
    const tracked = p.then(() => {}, err => logger.error({ err }, 'background state operation failed'))
    background.add(tracked)
    void tracked.finally(() => background.delete(tracked))
  }

  /** A stored key with one replica: in host memory (`host`) and/or on NVMe (`nvmeChecksum` given). */
  function newEntry (key: StateKey, host: Extent | undefined, nvmeChecksum?: number): Entry {
    return { key, host, shm: undefined, onNvme: nvmeChecksum !== undefined, replicas: 1, lastUseMs: now(), checksum: nvmeChecksum, pins: 0, unpinned: [] }
  }

  function pin (entry: Entry): () => void {
    entry.pins++
    return () => {
      if (--entry.pins === 0) {
        for (const wake of entry.unpinned.splice(0)) wake()
        wakeAllocators()
      }
    }
  }
  /** Allocations waiting for pool space held by copies in flight. */
  const hostReleased: Array<() => void> = []
  const wakeAllocators = (): void => { for (const wake of hostReleased.splice(0)) wake() }
  /** Bytes of pool space that in-flight work holds and will release or make spillable. */
  let fillingBytes = 0
  const busyHostBytes = (): number => {
    let pinned = 0
    for (const e of entries.values()) if (e.pins > 0 && e.host !== undefined) pinned += e.key.bytes
    return pinned + fillingBytes
  }
  const whenUnpinned = (entry: Entry): Promise<void> =>
    entry.pins === 0 ? Promise.resolve() : new Promise(resolve => entry.unpinned.push(resolve))

  /** Allocates host space, spilling victims if needed; ERR_TIER_FULL when nothing can be spilled. */
  async function allocateHost (bytes: number, keep: ReadonlySet<string>): Promise<Extent> {
    for (;;) {
      try {
        return hostPool().allocate(bytes)
      } catch (err) {
        if ((err as AgentError).code !== 'ERR_POOL_FULL') throw err
      }
      const freed = await spill(bytes, keep)
      if (freed === 0 && busyHostBytes() > 0) {
        // Pool space is held by copies in flight (pinned keys, extents being filled):
        // it becomes spillable or free when one of them finishes.
        await new Promise<void>(resolve => hostReleased.push(resolve))
        continue
      }
      if (freed === 0) {
        throw new AgentError('ERR_TIER_FULL', `no room for ${bytes} bytes: the host pool is full and nothing more can spill to NVMe ` +
          `(NVMe ${nvme!.usedBytes()} of ${nvme!.capacityBytes} bytes used)`)
      }
    }
  }

  /**
   * Moves host-resident keys to NVMe until `wantBytes` are freed (or the pool
   * is under the low watermark when wantBytes is 0). Returns bytes freed.
   */
  async function spill (wantBytes: number, keep: ReadonlySet<string> = new Set()): Promise<number> {
    const candidates = [...entries.values()]
      .filter(e => e.host !== undefined && e.pins === 0 && !keep.has(e.key.text))
      .map(e => ({ entry: e, key: e.key.text, lastUseMs: e.lastUseMs, nextUseMs: nextUseOf(e.key.text, hints) }))
    const target = wantBytes > 0 ? wantBytes : hostUsed() - options.spillLowWatermark * hostPool().sizeBytes
    let freed = 0
    for (const { entry } of spillOrder(candidates)) {
      if (freed >= target) break
      if (entry.host === undefined || entry.pins > 0 || entries.get(entry.key.text) !== entry) continue
      const unpin = pin(entry)
      try {
        if (!entry.onNvme) {
          await nvme!.put(entry.key.text, keyRange(entry.host, entry.key), await checksumOf(entry))
          entry.onNvme = true
        }
      } catch (err) {
        if ((err as AgentError).code === 'ERR_TIER_FULL') break
        throw err
      } finally {
        unpin()
      }
      await whenUnpinned(entry)
      if (entry.host !== undefined && entries.get(entry.key.text) === entry) {
        hostPool().free(entry.host)
        entry.host = undefined
        freed += entry.key.bytes
        counters.spilled++
      }
    }
    if (freed > 0) logger.debug({ freedBytes: freed }, 'spilled to NVMe')
    return freed
  }

  /** Starts background spilling when the pool is above the high watermark. */
  function maybeSpill (): void {
    if (spilling !== undefined || pool === undefined) return
    if (hostUsed() <= options.spillHighWatermark * hostPool().sizeBytes) return
    spilling = spill(0).then(() => {}, err => logger.error({ err }, 'background spill failed')).finally(() => { spilling = undefined })
    track(spilling)
  }

  /** Reads an NVMe-only key into a new host extent (verifying its checksum) and keeps it resident. */
  async function promote (entry: Entry, keep: ReadonlySet<string>): Promise<void> {
    if (inHost(entry)) return
    const extent = await allocateHost(entry.key.bytes, keep)
    const range = keyRange(extent, entry.key)
    fillingBytes += entry.key.bytes
    try {
      await nvme!.read(entry.key.text, range)
      const sum = await checksum(range)
      if (sum !== entry.checksum) {
        throw new AgentError('ERR_DATA_CORRUPT', `${entry.key.text} read back from NVMe with crc32c ${sum.toString(16)}, expected ${entry.checksum?.toString(16)}`)
      }
    } catch (err) {
      hostPool().free(extent)
      throw err
    } finally {
      fillingBytes -= entry.key.bytes
      wakeAllocators()
    }
    if (inHost(entry) || entries.get(entry.key.text) !== entry) {
      hostPool().free(extent) // promoted concurrently, or dropped meanwhile
      return
    }
    entry.host = extent
    counters.promoted++
  }

  function parseItems<T extends { key: string }> (items: T[], what: string): StateKey[] {
    if (!Array.isArray(items) || items.length === 0) throw new AgentError('ERR_BAD_REQUEST', `${what}: tensors must be a non-empty array`)
    return items.map((item, i) => {
      try {
        return parseKey(item.key)
      } catch (err) {
        throw new AgentError('ERR_KEY_INVALID', `tensors[${i}].key: ${(err as Error).message}`, { cause: err })
      }
    })
  }

  function checkQuotas (newKeys: StateKey[], pendingBytes = 0): void {
    const adding = new Map<string, number>()
    for (const k of newKeys) adding.set(k.namespace, (adding.get(k.namespace) ?? pendingBytes) + k.bytes)
    for (const [namespace, bytes] of adding) {
      const quota = options.namespaceQuotaBytes[namespace]
      if (quota === undefined) continue
      let stored = 0
      for (const e of entries.values()) if (e.key.namespace === namespace) stored += e.key.bytes
      if (stored + bytes > quota) {
        throw new AgentError('ERR_QUOTA_EXCEEDED', `namespace ${namespace} would hold ${stored + bytes} bytes, over its quota of ${quota}`)
      }
    }
  }

  /**
   * Fails fast (ERR_TIER_FULL, before any copy) when `bytes` more cannot fit:
   * free host space + host copies that are already on NVMe (dropped for free) +
   * free NVMe space (what spilling can move there).
   */
  function checkCapacity (bytes: number): void {
    let alsoOnNvme = 0
    for (const e of entries.values()) if (e.host !== undefined && e.onNvme) alsoOnNvme += e.key.bytes
    const hostFree = hostPool().fragmentation().freeBytes
    const nvmeFree = nvme!.capacityBytes - nvme!.usedBytes()
    if (bytes > hostFree + alsoOnNvme + nvmeFree) {
      throw new AgentError('ERR_TIER_FULL', `no room for ${bytes} bytes: host pool ${hostFree} bytes free, NVMe ${nvmeFree} bytes free`)
    }
  }

  async function offload (items: OffloadItem[], durability: 'memory' | 'nvme' = 'memory'): Promise<OffloadResult[]> {
    const keys = parseItems(items, 'offload')
    if (durability !== 'memory' && durability !== 'nvme') throw new AgentError('ERR_BAD_REQUEST', `durability must be "memory" or "nvme", got ${JSON.stringify(durability)}`)
    const scope = createClientMemoryScope(mappings)
    // Everything below until the first await runs in one tick: the plan cannot race another batch.
    const writers = new Map<string, PromiseWithResolvers<boolean>>()
    const created: Entry[] = []
    const counted: Entry[] = []
    try {
      const sources = keys.map((k, i) => scope.open(items[i]!.source, k.bytes, `tensors[${i}].source`))
      // Keys this batch writes first: first occurrence in the batch, not stored, not being written.
      const toWrite: StateKey[] = []
      const seen = new Set<string>()
      for (const k of keys) {
        if (seen.has(k.text)) continue
        seen.add(k.text)
        if (!entries.has(k.text) && !inflight.has(k.text)) toWrite.push(k)
      }
      checkQuotas(toWrite)
      for (const k of toWrite) {
        const done = Promise.withResolvers<boolean>()
        writers.set(k.text, done)
        inflight.set(k.text, done.promise)
      }
      checkCapacity(toWrite.reduce((a, k) => a + k.bytes, 0))
      const keep = new Set<string>()
      const firstOf = new Set(toWrite.map(k => k.text))

      const results = await mapConcurrently(keys, copyConcurrency, async (k, i): Promise<OffloadResult> => {
        if (firstOf.delete(k.text)) {
          const entry = await copyIn(k, sources[i]!, keep)
          created.push(entry)
          writers.get(k.text)!.resolve(true)
          inflight.delete(k.text)
          return { key: k.text, tier: 'host', deduplicated: false, durable: false }
        }
        const { entry, copied } = await awaitStored(k, sources[i]!, keep)
        entry.lastUseMs = now()
        if (copied) {
          created.push(entry)
        } else {
          entry.replicas++
          counted.push(entry)
          counters.deduplicated++
        }
        const result: OffloadResult = { key: k.text, tier: inHost(entry) ? 'host' : 'nvme', deduplicated: !copied, durable: entry.onNvme }
        if (items[i]!.verify === true) result.verified = await verifyReplica(entry, sources[i]!)
        return result
      })
      if (durability === 'nvme') {
        await mapConcurrently(results, ioConcurrency, async r => {
          await persist(entries.get(r.key)!)
          r.durable = true
        })
      }
      return results
    } catch (err) {
      for (const [key, done] of writers) { if (inflight.get(key) === done.promise) inflight.delete(key); done.resolve(false) }
      for (const entry of counted) entry.replicas--
      for (const entry of created) if (--entry.replicas === 0) await remove(entry)
      throw err
    } finally {
      scope.close()
      maybeSpill()
    }
  }

  /**
   * Copies `source` into a new host extent and stores it as `k` with one
   * replica. Space is taken just before the copy (so a batch larger than the
   * pool spills its own earlier keys) and counts as in-flight pool use while
   * it fills; a failed copy frees it.
   */
  async function copyIn (k: StateKey, source: ClientMemory, keep: ReadonlySet<string>): Promise<Entry> {
    const extent = await allocateHost(k.bytes, keep)
    fillingBytes += k.bytes
    try {
      await source.readInto(keyRange(extent, k))
    } catch (err) {
      hostPool().free(extent)
      throw err
    } finally {
      fillingBytes -= k.bytes
      wakeAllocators()
    }
    counters.offloadCopies++
    const entry = newEntry(k, extent)
    entries.set(k.text, entry)
    return entry
  }

  /**
   * Waits for a key another batch is writing. If that write failed, stores it
   * from `source` itself (`copied: true`, the entry already counts this replica).
   */
  async function awaitStored (k: StateKey, source: ClientMemory, keep: ReadonlySet<string>): Promise<{ entry: Entry, copied: boolean }> {
    for (;;) {
      const existing = entries.get(k.text)
      if (existing !== undefined) return { entry: existing, copied: false }
      const pending = inflight.get(k.text)
      if (pending !== undefined) { await pending; continue }
      const done = Promise.withResolvers<boolean>()
      inflight.set(k.text, done.promise)
      try {
        const entry = await copyIn(k, source, keep)
        done.resolve(true)
        return { entry, copied: true }
      } catch (err) {
        done.resolve(false)
        throw err
      } finally {
        inflight.delete(k.text)
      }
    }
  }

  async function verifyReplica (entry: Entry, source: ClientMemory): Promise<boolean> {
    const sum = await source.checksum(async () => {
      const extent = await allocateHost(entry.key.bytes, new Set([entry.key.text]))
      return { range: keyRange(extent, entry.key), release: () => hostPool().free(extent) }
    })
    const stored = await checksumOf(entry)
    if (sum !== stored) logger.warn({ key: entry.key.text }, 'replica bytes differ from the stored copy')
    return sum === stored
  }

  /** The entry's crc32c, computed from its host copy on first use (the caller keeps the entry pinned or host-resident). */
  async function checksumOf (entry: Entry): Promise<number> {
    if (entry.checksum === undefined) {
      if (!inHost(entry)) throw new AgentError('ERR_INTERNAL', `${entry.key.text} has no checksum and no host copy`)
      const unpin = pin(entry)
      try {
        entry.checksum = await checksum(hostRangeOf(entry))
      } finally {
        unpin()
      }
    }
    return entry.checksum
  }

  async function persist (entry: Entry): Promise<void> {
    if (entry.onNvme) return
    if (!inHost(entry)) throw new AgentError('ERR_INTERNAL', `${entry.key.text} is in neither tier`)
    const unpin = pin(entry)
    try {
      await nvme!.put(entry.key.text, hostRangeOf(entry), await checksumOf(entry))
      entry.onNvme = true
    } finally {
      unpin()
    }
  }

  async function remove (entry: Entry): Promise<void> {
    if (entries.get(entry.key.text) === entry) entries.delete(entry.key.text)
    await whenUnpinned(entry)
    if (entry.host !== undefined) { hostPool().free(entry.host); entry.host = undefined; wakeAllocators() }
    releaseShm(entry)
    if (entry.onNvme) { await nvme!.remove(entry.key.text); entry.onNvme = false }
  }

  async function onload (items: OnloadItem[]): Promise<OnloadResult[]> {
    const keys = parseItems(items, 'onload')
    for (const k of keys) {
      const pending = inflight.get(k.text)
      if (pending !== undefined) await pending
    }
    const missing = keys.findIndex(k => !entries.has(k.text))
    if (missing >= 0) throw new AgentError('ERR_KEY_NOT_FOUND', `tensors[${missing}].key: ${keys[missing]!.text} is not stored on this node`)
    const scope = createClientMemoryScope(mappings)
    try {
      const targets = keys.map((k, i) => scope.open(items[i]!.target, k.bytes, `tensors[${i}].target`))
      // Each key is pinned only while it is copied, so the pool can cycle a
      // batch larger than itself through (promote one, copy it, let it spill).
      const results = await mapConcurrently(keys, ioConcurrency, async (k, i): Promise<OnloadResult> => {
        const entry = entries.get(k.text)
        if (entry === undefined) throw new AgentError('ERR_KEY_NOT_FOUND', `tensors[${i}].key: ${k.text} was dropped during the onload`)
        const unpin = pin(entry)
        try {
          const fromTier: StoredTier = inHost(entry) ? 'host' : 'nvme'
          if (!inHost(entry)) await promote(entry, new Set())
          await targets[i]!.writeFrom(hostRangeOf(entry))
          counters.onloadCopies++
          entry.lastUseMs = now()
          return { key: entry.key.text, fromTier }
        } finally {
          unpin()
        }
      })
      return results
    } finally {
      scope.close()
      maybeSpill()
    }
  }

  function select (selector: KeySelector): Entry[] {
    if (selector.keys !== undefined) {
      return selector.keys.map(k => parseKey(k).text).map(k => entries.get(k)).filter((e): e is Entry => e !== undefined)
    }
    if (typeof selector.prefix === 'string') return [...entries.values()].filter(e => e.key.text.startsWith(selector.prefix!))
    throw new AgentError('ERR_BAD_REQUEST', 'give "keys" (a list of keys) or "prefix"')
  }

  function prefetch (selector: KeySelector): number {
    const cold = select(selector).filter(e => !inHost(e))
    for (const entry of cold) {
      const unpin = pin(entry)
      track(promote(entry, new Set()).finally(unpin))
    }
    return cold.length
  }

  function availability (): StateAvailability {
    const p = hostPool()
    const namespaces = new Set<string>()
    for (const e of entries.values()) namespaces.add(e.key.namespace)
    return {
      hostPool: { totalBytes: p.sizeBytes, freeBytes: p.fragmentation().freeBytes },
      nvme: { totalBytes: nvme!.capacityBytes, freeBytes: Math.max(0, nvme!.capacityBytes - nvme!.usedBytes()) },
      namespaces: [...namespaces].sort(),
    }
  }

  function residency (prefix = ''): Residency {
    const p = hostPool()
    const frag = p.fragmentation()
    const keys: ResidencyKey[] = []
    const namespaces = new Map<string, { keys: number, logicalBytes: number, storedBytes: number }>()
    let logicalBytes = 0
    let storedBytes = 0
    for (const e of entries.values()) {
      if (!e.key.text.startsWith(prefix)) continue
      const ns = namespaces.get(e.key.namespace) ?? { keys: 0, logicalBytes: 0, storedBytes: 0 }
      ns.keys++
      ns.logicalBytes += e.key.bytes * Math.max(1, e.replicas)
      ns.storedBytes += e.key.bytes
      namespaces.set(e.key.namespace, ns)
      logicalBytes += e.key.bytes * Math.max(1, e.replicas)
      storedBytes += e.key.bytes
      const key: ResidencyKey = { key: e.key.text, bytes: e.key.bytes, tier: inHost(e) ? 'host' : 'nvme', replicas: e.replicas, lastUseMs: e.lastUseMs, durable: e.onNvme }
      if (e.shm !== undefined) key.region = e.shm.region.name
      keys.push(key)
    }
    keys.sort((a, b) => a.key < b.key ? -1 : 1)
    return {
      tiers: {
        device: { capacityBytes: 0, usedBytes: 0 },
        host: { capacityBytes: p.sizeBytes, usedBytes: p.sizeBytes - frag.freeBytes },
        nvme: { capacityBytes: nvme!.capacityBytes, usedBytes: nvme!.usedBytes() },
      },
      logicalBytes,
      storedBytes,
      namespaces: [...namespaces].sort(([a], [b]) => a < b ? -1 : 1).map(([namespace, n]) => ({ namespace, ...n, quotaBytes: options.namespaceQuotaBytes[namespace] ?? null })),
      hostPool: { freeBytes: frag.freeBytes, largestFreeBytes: frag.largestFreeBytes, fragmentation: frag.fragmentation },
      shm: { regions: adoptedRegions.size, bytes: [...adoptedRegions].reduce((a, r) => a + r.bytes, 0) },
      counters: { ...counters },
      keys,
    }
  }

  return {
    async start () {
      pool = await createHostPool({ sizeBytes: options.hostPoolBytes, lock: options.lockHostPool })
      nvme = createNvmeTier({ dir: options.nvmeDir, capacityBytes: options.nvmeCapacityBytes, directIo: options.directIo })
      recovered = await nvme.open()
      for (const obj of nvme.objects()) {
        entries.set(obj.key, newEntry(parseKey(obj.key), undefined, obj.checksum))
      }
      logger.info({ hostPoolBytes: options.hostPoolBytes, nvmeDir: options.nvmeDir, ...recovered }, 'state manager ready')
    },
    async stop () {
      await Promise.allSettled([...background])
      await nvme?.close()
      for (const entry of entries.values()) releaseShm(entry)
      mappings.close()
      pool?.close()
    },
    offload,
    onload,
    prefetch,
    async drop (selector) {
      const victims = select(selector)
      for (const entry of victims) await remove(entry)
      return victims.length
    },
    setHints (list) {
      const at = now()
      hints = list.map(h => ({ prefix: h.prefix, atMs: at + h.inMs }))
      for (const h of list) if (h.inMs <= options.prefetchHorizonMs) prefetch({ prefix: h.prefix })
    },
    residency,
    availability,
    recovery: () => recovered,
    storedKeys: (prefix = '') => [...entries.values()].filter(e => e.key.text.startsWith(prefix)).map(e => e.key),
    async readHost (text) {
      const entry = entries.get(parseKey(text).text)
      if (entry === undefined) throw new AgentError('ERR_KEY_NOT_FOUND', `${text} is not stored on this node`)
      const unpin = pin(entry)
      try {
        await promote(entry, new Set([text]))
      } catch (err) {
        unpin()
        throw err
      }
      entry.lastUseMs = now()
      const pinned: PinnedBytes = { range: hostRangeOf(entry), release: unpin }
      if (entry.shm !== undefined) pinned.sharedRegion = entry.shm.region.name
      return pinned
    },
    async scratch (bytes) {
      const extent = await allocateHost(bytes, new Set())
      let released = false
      const handle: ScratchBytes = {
        range: hostPool().range(extent, 0, bytes),
        view: hostPool().view(extent).subarray(0, bytes),
        release: () => { if (!released) { released = true; scratchExtents.delete(handle); hostPool().free(extent) } },
      }
      scratchExtents.set(handle, extent)
      return handle
    },
    adopt (text, handle) {
      const k = parseKey(text)
      const extent = scratchExtents.get(handle)
      if (extent === undefined) throw new AgentError('ERR_BAD_REQUEST', 'adopt needs a live scratch range from this StateManager')
      if (handle.range.length !== k.bytes) throw new AgentError('ERR_SIZE_MISMATCH', `${text} has ${k.bytes} bytes, the scratch range ${handle.range.length}`)
      const existing = entries.get(k.text)
      if (existing !== undefined || inflight.has(k.text)) {
        handle.release()
        if (existing !== undefined) { existing.replicas++; counters.deduplicated++ }
        return false
      }
      scratchExtents.delete(handle)
      entries.set(k.text, newEntry(k, extent))
      maybeSpill()
      return true
    },
    async persist (texts) {
      for (const text of texts) {
        const entry = entries.get(parseKey(text).text)
        if (entry === undefined) throw new AgentError('ERR_KEY_NOT_FOUND', `${text} is not stored on this node`)
        const unpin = pin(entry)
        try {
          if (!inHost(entry) && !entry.onNvme) throw new AgentError('ERR_INTERNAL', `${text} is in neither tier`)
          await persist(entry)
        } finally {
          unpin()
        }
      }
    },
    checkQuota (keys, pendingBytes = 0) {
      const parsed = parseItems(keys.map(key => ({ key })), 'checkQuota')
      checkQuotas(parsed.filter(k => !entries.has(k.text)), pendingBytes)
    },
    adoptShm (source, items) {
      const name = typeof source === 'string' ? source : source.name
      const keys = parseItems(items, 'adoptShm')
      const fresh: Array<{ k: StateKey, offset: number }> = []
      const existing: Entry[] = []
      const seen = new Set<string>()
      keys.forEach((k, i) => {
        const offset = items[i]!.offset
        if (!Number.isSafeInteger(offset) || offset < 0) throw new AgentError('ERR_BAD_REQUEST', `tensors[${i}].offset must be a non-negative integer`)
        if (seen.has(k.text)) throw new AgentError('ERR_BAD_REQUEST', `tensors[${i}].key: ${k.text} appears twice`)
        seen.add(k.text)
        const entry = entries.get(k.text)
        if (entry !== undefined) existing.push(entry)
        else if (!inflight.has(k.text)) fresh.push({ k, offset })
        else throw new AgentError('ERR_BAD_REQUEST', `tensors[${i}].key: ${k.text} is being written by another request`)
      })
      checkQuotas(fresh.map(f => f.k))
      if (fresh.length === 0) {
        for (const e of existing) { e.replicas++; counters.deduplicated++ }
        if (typeof source !== 'string') source.close()
        return { adopted: [], deduplicated: existing.map(e => e.key.text) }
      }
      let object: SharedMemoryObject
      try {
        object = typeof source === 'string' ? openSharedMemory(name) : source
      } catch (err) {
        throw new AgentError('ERR_SOURCE_NOT_FOUND', `shared-memory object "${name}": ${(err as Error).message}`, { cause: err })
      }
      const tooFar = fresh.find(f => f.offset + f.k.bytes > object.sizeBytes)
      if (tooFar !== undefined) {
        if (typeof source === 'string') object.close()
        throw new AgentError('ERR_SIZE_MISMATCH', `${tooFar.k.text}: ${tooFar.k.bytes} bytes at offset ${tooFar.offset} exceed shared-memory object "${name}" of ${object.sizeBytes} bytes`)
      }
      // Nothing below throws: the keys appear together, in this tick.
      const region: AdoptedShm = { name: object.name, object, memory: adoptedMemory(object), keys: fresh.length, bytes: 0 }
      adoptedRegions.add(region)
      for (const { k, offset } of fresh) {
        const entry = newEntry(k, undefined)
        entry.shm = { region, offset }
        region.bytes += k.bytes
        entries.set(k.text, entry)
      }
      for (const e of existing) { e.replicas++; counters.deduplicated++ }
      counters.shmAdopted += fresh.length
      logger.debug({ region: region.name, keys: fresh.length, bytes: region.bytes }, 'shared-memory region adopted')
      return { adopted: fresh.map(f => f.k.text), deduplicated: existing.map(e => e.key.text) }
    },
  }
}
