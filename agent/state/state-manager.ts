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
 *   (checked on every allocation; victims by scheduler hints, then LRU, kept
 *   in order as keys change, in groups that share one NVMe commit); an
 *   offload that finds the pool full waits for that spilling, or for just
 *   enough spilling of its own. ERR_TIER_FULL only when host and NVMe are
 *   both full.
 * - Keys offloaded with durability "nvme" or persisted survive a restart
 *   (journal); keys stored with durability "memory" do not, even when the
 *   pool spilled them to NVMe (their records say so and a restart discards
 *   them), and `residency()` says which is which (`durable`).
 * - A key's host copy is either a pool extent or a range of an adopted
 *   shared-memory mapping (`adoptShm`, zero copy), never both.
 * - Namespace ownership (namespace-owners.ts): every namespace holding keys
 *   has an owner, the uid a caller claimed it for before its first key was
 *   stored (`claimNamespaces`, the local API does it for the calling
 *   process) or else the agent itself; it lasts while the namespace holds a
 *   key or a store into it is under way, and is written with every durable
 *   key, so a restart finds it. The StateManager records it and reports it
 *   (`namespaceOwner`, `ownedNamespaces`); who may use a namespace is the API's call.
 * All bookkeeping runs on the event loop; bytes move on native threads.
 *
 * This module holds the key index, the batch protocol (first writer copies,
 * replicas wait, rollback) and the public interface; the pieces it composes
 * state their own contracts: stored-entry.ts (the index entry and its pins),
 * spill-queue.ts (the spillable keys in spill order: this module updates it
 * whenever a key is stored, used or dropped, and on every unpin),
 * host-space.ts (pool allocation that spills or waits), tier-mover.ts
 * (spill, promote, durable writes), capacity-accounting.ts (quota and room
 * checks), adopted-shm-regions.ts (adoptShm), residency-index.ts (the key
 * index itself, which keeps residency totals and key order as it changes).
 */
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { createHostPool, type Extent, type HostPool, type HostRange, type SharedMemoryObject } from '../../native/index.ts'
import { parseKey, type StateKey } from './keys.ts'
import { createClientMemoryScope, type ClientMemory, type MemorySpec } from './client-memory.ts'
import { createNvmeTier, type NvmeRecovery, type NvmeTier } from './nvme-tier.ts'
import { createShmMappingCache } from './shm-mapping-cache.ts'
import { mapConcurrently } from './map-concurrently.ts'
import { createSlicer } from './event-loop-slices.ts'
import { createAdoptedShmRegions, mapForAdoption, planShmAdoption } from './adopted-shm-regions.ts'
import { checkNamespaceQuotas, checkRoomFor, type NamespaceUsage } from './capacity-accounting.ts'
import { createHostSpace, type HostSpace } from './host-space.ts'
import { createNamespaceOwners, type NamespaceOwner } from './namespace-owners.ts'
import { createTierMover, type TierMover } from './tier-mover.ts'
import { createSpillQueue } from './spill-queue.ts'
import { checkResidencyFilter, createResidencyIndex, decodeCursor, encodeCursor, pageLimit, tierOf, type ResidencyFilter, type StoredTier } from './residency-index.ts'
import { hasHostCopy, hostBytesOf, keyRange as extentKeyRange, newStoredEntry, pinEntry, whenUnpinned, type StoredEntry } from './stored-entry.ts'

/** Tensors of one batch copied at once (each copy already uses every native thread). */
const copyConcurrency = 2
/** Tensors of one onload moving from NVMe at once: overlaps the reads. */
const ioConcurrency = 4

export type { MemorySpec } from './client-memory.ts'
export type { NamespaceOwner } from './namespace-owners.ts'
export type { ResidencyFilter, StoredTier } from './residency-index.ts'

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

/** Totals of the keys a ResidencyFilter selects (every key without one), and the tiers' usage. */
export interface ResidencySummary {
  tiers: Record<'device' | 'host' | 'nvme', { capacityBytes: number, usedBytes: number }>
  logicalBytes: number
  storedBytes: number
  /** logicalBytes / storedBytes; null when no key is selected. */
  dedupRatio: number | null
  /** Selected keys by the tier a page would report them in. */
  keyCounts: Record<StoredTier, number>
  namespaces: NamespaceUsage[]
  /**
   * `fragmentation`: what allocation pays for fragmentation, the share of
   * free pool bytes in holes too small for the largest recent request
   * (ExtentAllocator's allocationFragmentation); 0 when every hole fits it.
   */
  hostPool: { freeBytes: number, largestFreeBytes: number, fragmentation: number }
  /** Adopted shared-memory mappings (adoptShm): host-tier bytes outside the pool. */
  shm: { regions: number, bytes: number }
  counters: StateCounters
}

/** A summary with every selected key. */
export interface Residency extends ResidencySummary {
  keys: ResidencyKey[]
}

/** Selected keys in key order, from a cursor. */
export interface ResidencyPage {
  keys: ResidencyKey[]
  /** Pass it back to get the keys after these; null when no key follows. */
  nextCursor: string | null
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
  /** Bytes read from NVMe by readRange (parts of keys that stayed on NVMe). */
  rangeReadBytes: number
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
  /** The summary with every key under `prefix`, sorted: O(keys), for in-process readers and tests; the API pages (residencyPage). */
  residency(prefix?: string): Residency
  /**
   * The namespaces holding keys under `prefix` (those residency(prefix)
   * lists), sorted, each with its owner (namespace-owners.ts): the uid that
   * stored its first key, or 'agent'. Costs what residencySummary does.
   */
  ownedNamespaces(prefix?: string): Array<{ namespace: string, owner: NamespaceOwner }>
  /**
   * Totals of the keys `filter` selects (every key without one) and the
   * tiers' usage: O(namespaces), plus the keys under a prefix that ends
   * inside a namespace's key names (residency-index.ts).
   * ERR_BAD_REQUEST for a filter residency-index.ts checkResidencyFilter refuses.
   */
  residencySummary(filter?: ResidencyFilter): ResidencySummary
  /**
   * Up to `limit` (default 1000, at most 2000) selected keys in key order,
   * after `cursor` (a previous page's nextCursor; from the first key
   * without one). O(log keys + keys examined): the keys of the filter's
   * tier under its prefix, namespace or job are walked in order, and only a
   * namespace filter skips some (those of nested namespaces), at most 20,000
   * a page, then a short page with a cursor. A key stored
   * from the first page to the last is listed exactly once.
   * ERR_BAD_REQUEST for a bad filter, limit or cursor.
   */
  residencyPage(filter: ResidencyFilter, page?: { cursor?: string, limit?: number }): ResidencyPage
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
  /**
   * Bytes [offset, offset + length) of a stored key without bringing the
   * whole key into the pool (a server reading a key larger than the pool):
   * the host copy's range in place when the key has one (`copied` false,
   * nothing moves), else that range read from NVMe (O_DIRECT) into a pool
   * scratch range (`copied` true; the key stays on NVMe only, counted in
   * `rangeReadBytes`). A host copy stays pinned until `release()` (drop and
   * spill wait); a copy pins the key only while it is read, and is the
   * caller's until `release()` (the key may be dropped meanwhile).
   * ERR_KEY_NOT_FOUND, ERR_OUT_OF_RANGE for a range past the key's bytes.
   */
  readRange(key: string, offset: number, length: number): Promise<PinnedBytes & { copied: boolean }>
  /** A scratch range of `bytes` in the host pool (spilling if needed) with a Buffer view for JS writes, freed by `release()`. */
  scratch(bytes: number): Promise<ScratchBytes>
  /**
   * Registers a cache holding scratch ranges it could free at once (the
   * weight server's read window): when an allocation finds the pool full,
   * `reclaim(wantBytes)` is asked first, before keys are spilled, and must
   * release what it can synchronously and return the bytes it freed. The
   * returned function unregisters it.
   */
  poolReclaimer(reclaim: (wantBytes: number) => number): () => void
  /**
   * Stores a filled scratch range as `key` without copying (its length must be
   * the key's byte size); the scratch is consumed either way. Resolves true
   * when this call stored the key, false when it was stored already
   * (deduplicated: one more replica, the scratch freed). A key another writer
   * has in flight is waited for: deduplicated when that write succeeds, stored
   * from the scratch when it fails.
   */
  adopt(key: string, scratch: ScratchBytes): Promise<boolean>
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
  /**
   * Who owns `namespace`: a uid, 'agent' (the agent's own keys), or undefined
   * when it holds no key and no store into it is under way (nobody owns it).
   */
  namespaceOwner(namespace: string): NamespaceOwner | undefined
  /** The namespaces above and below `namespace` ("a" and "a/b/c" for "a/b") that have an owner, with it. */
  nestedNamespaceOwners(namespace: string): Array<{ namespace: string, owner: NamespaceOwner }>
  /**
   * Claims namespaces for a store about to begin: each one nobody owns is
   * owned from now on by `owner` (a uid; undefined = the agent), an owned one
   * keeps its owner. Call it in the same tick as the store starts (offload,
   * or an in-process producer such as a worker registration) and the
   * returned release once the store settled: a claimed namespace that then
   * holds no key has no owner again.
   */
  claimNamespaces(namespaces: Iterable<string>, owner: number | undefined): () => void
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

/**
 * What a started StateManager owns: the two tiers and the services built
 * over them. The NVMe tier is not optional: the pool spills into it and
 * durable offloads wait for it, so both open in start() or the start fails,
 * and code that needs NVMe gets it from here instead of asserting it.
 */
interface StartedStorage {
  pool: HostPool
  nvme: NvmeTier
  /** What the NVMe journal replay found. */
  recovered: NvmeRecovery
  /** Pool allocation for copies (spills to make room). */
  space: HostSpace
  /** Spilling, promotion and durable writes between the pool and NVMe. */
  mover: TierMover
}

export function createStateManager (options: StateManagerOptions, components: StateManagerComponents): StateManager {
  const { logger } = components
  const now = components.now ?? Date.now
  const entries = createResidencyIndex()
  /** Keys whose first copy is in flight; resolves true when stored, false when it failed. */
  const inflight = new Map<string, Promise<boolean>>()
  /** Set by a successful start() (closed, not cleared, by stop()); undefined before. */
  let storage: StartedStorage | undefined
  /** The spillable pool keys in spill order; updated on every change below that can move a key in it. */
  const spillQueue = createSpillQueue({ index: entries })
  const background = new Set<Promise<unknown>>()
  const mappings = createShmMappingCache()
  /** Live scratch ranges handed out by scratch(), so adopt() can take their extents. */
  const scratchExtents = new Map<ScratchBytes, Extent>()
  const counters: StateCounters = { offloadCopies: 0, deduplicated: 0, spilled: 0, promoted: 0, onloadCopies: 0, shmAdopted: 0, rangeReadBytes: 0 }
  const adoptedRegions = createAdoptedShmRegions({ logger })
  const owners = createNamespaceOwners()

  const started = (): StartedStorage => {
    if (storage === undefined) throw new AgentError('ERR_UNAVAILABLE', 'the StateManager is not started')
    return storage
  }
  const hostPool = (): HostPool => started().pool
  const keyRange = (extent: Extent, k: StateKey): HostRange => extentKeyRange(hostPool(), extent, k)
  const hostRangeOf = (e: StoredEntry): HostRange => hostBytesOf(hostPool(), e)
  /** Gives up the entry's share of its adopted mapping, unmapping it with the last key. */
  const releaseShm = (e: StoredEntry): void => {
    const region = e.shm?.region
    if (region === undefined) return
    e.shm = undefined
    adoptedRegions.release(region, e.key.bytes)
  }
  const track = <T>(p: Promise<T>): void => {
    const tracked = p.then(() => {}, err => logger.error({ err }, 'background state operation failed'))
    background.add(tracked)
    void tracked.finally(() => background.delete(tracked))
  }

  /** Stores a new entry for `key` in the index, under its namespace's owner, and queues it for spilling. */
  const addEntry = (key: StateKey, host: Extent | undefined): StoredEntry => {
    const entry = newStoredEntry(key, host, now(), undefined, owners.stored(key.namespace))
    entries.set(key.text, entry)
    spillQueue.update(entry)
    return entry
  }
  /** Pins the entry; its unpin re-queues it for spilling and wakes waiting allocations. */
  const pin = (entry: StoredEntry): () => void => {
    const { space } = started()
    return pinEntry(entry, () => { spillQueue.update(entry); space.released() })
  }
  /** The entry was just used: LRU moves it back. */
  const touch = (entry: StoredEntry): void => {
    entry.lastUseMs = now()
    spillQueue.update(entry)
  }
  /** Bytes of pool keys pinned by readers (busy: they become spillable when unpinned). */
  const pinnedPoolBytes = (): number => {
    let pinned = 0
    for (const e of entries.values()) if (e.pins > 0 && e.host !== undefined) pinned += e.key.bytes
    return pinned
  }
  const allocateHost = (bytes: number, keep: ReadonlySet<string>): Promise<Extent> => started().space.allocate(bytes, keep)
  const promote = (entry: StoredEntry, keep: ReadonlySet<string>): Promise<void> => started().mover.promote(entry, keep)
  const maybeSpill = (): void => { storage?.mover.spillIfAboveWatermark() }
  /** Caches in the pool that give their memory back under pressure (poolReclaimer). */
  const reclaimers = new Set<(wantBytes: number) => number>()
  const reclaimPool = (wantBytes: number): number => {
    let freed = 0
    for (const reclaim of reclaimers) {
      if (freed >= wantBytes) break
      freed += reclaim(wantBytes - freed)
    }
    return freed
  }

  async function readHost (text: string): Promise<PinnedBytes> {
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
  }

  async function scratch (bytes: number): Promise<ScratchBytes> {
    const extent = await allocateHost(bytes, new Set())
    let released = false
    const handle: ScratchBytes = {
      range: hostPool().range(extent, 0, bytes),
      view: hostPool().view(extent).subarray(0, bytes),
      release: () => { if (!released) { released = true; scratchExtents.delete(handle); hostPool().free(extent) } },
    }
    scratchExtents.set(handle, extent)
    return handle
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

  const checkQuotas = (newKeys: StateKey[], pendingBytes = 0): void =>
    checkNamespaceQuotas(entries.values(), newKeys, options.namespaceQuotaBytes, pendingBytes)

  /** Fails fast (ERR_TIER_FULL, before any copy) when `bytes` more fit in neither tier, spilling included. */
  const checkCapacity = (bytes: number): void => {
    const { pool, nvme } = started()
    checkRoomFor(bytes, entries.values(), { hostFreeBytes: pool.fragmentation().freeBytes, nvmeCapacityBytes: nvme.capacityBytes, nvmeUsedBytes: nvme.usedBytes() })
  }

  async function offload (items: OffloadItem[], durability: 'memory' | 'nvme' = 'memory'): Promise<OffloadResult[]> {
    const keys = parseItems(items, 'offload')
    if (durability !== 'memory' && durability !== 'nvme') throw new AgentError('ERR_BAD_REQUEST', `durability must be "memory" or "nvme", got ${JSON.stringify(durability)}`)
    const scope = createClientMemoryScope(mappings)
    // The batch's namespaces stay owned while it runs (the agent's unless a caller claimed them first).
    const releaseClaims = owners.claim(keys.map(k => k.namespace), undefined)
    // Everything below until the first await runs in one tick: the plan cannot race another batch.
    const writers = new Map<string, PromiseWithResolvers<boolean>>()
    const created: StoredEntry[] = []
    const counted: StoredEntry[] = []
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
        touch(entry)
        if (copied) {
          created.push(entry)
        } else {
          entry.replicas++
          counted.push(entry)
          counters.deduplicated++
        }
        const result: OffloadResult = { key: k.text, tier: hasHostCopy(entry) ? 'host' : 'nvme', deduplicated: !copied, durable: entry.durable }
        if (items[i]!.verify === true) result.verified = await verifyReplica(entry, sources[i]!)
        return result
      })
      if (durability === 'nvme') {
        await started().mover.persistAll(results.map(r => entries.get(r.key)!))
        for (const r of results) r.durable = true
      }
      return results
    } catch (err) {
      for (const [key, done] of writers) { if (inflight.get(key) === done.promise) inflight.delete(key); done.resolve(false) }
      for (const entry of counted) entry.replicas--
      await removeAll(created.filter(entry => --entry.replicas === 0))
      throw err
    } finally {
      scope.close()
      releaseClaims()
      maybeSpill()
    }
  }

  /**
   * Copies `source` into a new host extent and stores it as `k` with one
   * replica. Space is taken just before the copy (so a batch larger than the
   * pool spills its own earlier keys) and counts as in-flight pool use while
   * it fills; a failed copy frees it.
   */
  async function copyIn (k: StateKey, source: ClientMemory, keep: ReadonlySet<string>): Promise<StoredEntry> {
    const extent = await allocateHost(k.bytes, keep)
    const filled = started().space.filling(k.bytes)
    try {
      await source.readInto(keyRange(extent, k))
    } catch (err) {
      hostPool().free(extent)
      throw err
    } finally {
      filled()
    }
    counters.offloadCopies++
    return addEntry(k, extent)
  }

  /**
   * Waits for a key another batch is writing. If that write failed, stores it
   * from `source` itself (`copied: true`, the entry already counts this replica).
   */
  async function awaitStored (k: StateKey, source: ClientMemory, keep: ReadonlySet<string>): Promise<{ entry: StoredEntry, copied: boolean }> {
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

  async function verifyReplica (entry: StoredEntry, source: ClientMemory): Promise<boolean> {
    const sum = await source.checksum(async () => {
      const extent = await allocateHost(entry.key.bytes, new Set([entry.key.text]))
      return { range: keyRange(extent, entry.key), release: () => hostPool().free(extent) }
    })
    const stored = await started().mover.checksumOf(entry)
    if (sum !== stored) logger.warn({ key: entry.key.text }, 'replica bytes differ from the stored copy')
    return sum === stored
  }

  /**
   * Removes entries from every tier: out of the index at once, their host
   * copies freed as their readers unpin them, then their NVMe copies removed
   * together (one journal write for the batch: nvme-tier.ts removeAll).
   */
  async function removeAll (list: readonly StoredEntry[]): Promise<void> {
    const victims = [...new Set(list)]
    for (const entry of victims) {
      if (entries.get(entry.key.text) === entry) {
        entries.delete(entry.key.text)
        owners.removed(entry.key.namespace)
      }
      spillQueue.update(entry)
    }
    await Promise.all(victims.map(async entry => {
      await whenUnpinned(entry)
      if (entry.host !== undefined) { hostPool().free(entry.host); entry.host = undefined; started().space.released() }
      releaseShm(entry)
    }))
    // Read after the pins are gone: a spill that was writing a victim has put it on NVMe by then.
    const onNvme = victims.filter(e => e.onNvme)
    if (onNvme.length === 0) return
    await started().nvme.removeAll(onNvme.map(e => e.key.text))
    for (const entry of onNvme) Object.assign(entry, { onNvme: false, durable: false })
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
          const fromTier: StoredTier = hasHostCopy(entry) ? 'host' : 'nvme'
          if (!hasHostCopy(entry)) await promote(entry, new Set())
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

  function select (selector: KeySelector): StoredEntry[] {
    if (selector.keys !== undefined) {
      return selector.keys.map(k => parseKey(k).text).map(k => entries.get(k)).filter((e): e is StoredEntry => e !== undefined)
    }
    if (typeof selector.prefix === 'string') return [...entries.values()].filter(e => e.key.text.startsWith(selector.prefix!))
    throw new AgentError('ERR_BAD_REQUEST', 'give "keys" (a list of keys) or "prefix"')
  }

  function prefetch (selector: KeySelector): number {
    const cold = select(selector).filter(e => !hasHostCopy(e))
    for (const entry of cold) {
      const unpin = pin(entry)
      // Fetched for a use soon: the most recently used, so LRU spills it last.
      track(promote(entry, new Set()).then(() => { entry.lastUseMs = now() }).finally(unpin))
    }
    return cold.length
  }

  function availability (): StateAvailability {
    const { pool, nvme } = started()
    return {
      hostPool: { totalBytes: pool.sizeBytes, freeBytes: pool.fragmentation().freeBytes },
      nvme: { totalBytes: nvme.capacityBytes, freeBytes: Math.max(0, nvme.capacityBytes - nvme.usedBytes()) },
      namespaces: entries.namespaces(),
    }
  }

  function residencyKeyOf (e: StoredEntry): ResidencyKey {
    const key: ResidencyKey = { key: e.key.text, bytes: e.key.bytes, tier: tierOf(e), replicas: e.replicas, lastUseMs: e.lastUseMs, durable: e.durable }
    if (e.shm !== undefined) key.region = e.shm.region.name
    return key
  }

  function residency (prefix = ''): Residency {
    return { ...residencySummary({ prefix }), keys: entries.select({ prefix }).map(residencyKeyOf) }
  }

  function ownedNamespaces (prefix = ''): Array<{ namespace: string, owner: NamespaceOwner }> {
    checkResidencyFilter({ prefix })
    // Every namespace holding a key has an owner record (stored() creates it); 'agent' is only a fallback.
    return entries.summary({ prefix }, options.namespaceQuotaBytes).namespaces.map(({ namespace }) => ({ namespace, owner: owners.ownerOf(namespace) ?? 'agent' }))
  }

  function residencySummary (filter: ResidencyFilter = {}): ResidencySummary {
    checkResidencyFilter(filter)
    const { pool, nvme } = started()
    const frag = pool.fragmentation()
    return {
      tiers: {
        device: { capacityBytes: 0, usedBytes: 0 },
        host: { capacityBytes: pool.sizeBytes, usedBytes: pool.sizeBytes - frag.freeBytes },
        nvme: { capacityBytes: nvme.capacityBytes, usedBytes: nvme.usedBytes() },
      },
      ...entries.summary(filter, options.namespaceQuotaBytes),
      hostPool: { freeBytes: frag.freeBytes, largestFreeBytes: frag.largestFreeBytes, fragmentation: frag.allocationFragmentation },
      shm: adoptedRegions.totals(),
      counters: { ...counters },
    }
  }

  function residencyPage (filter: ResidencyFilter, page: { cursor?: string, limit?: number } = {}): ResidencyPage {
    checkResidencyFilter(filter)
    const limit = pageLimit(page.limit)
    const after = page.cursor !== undefined ? decodeCursor(page.cursor) : undefined
    const found = entries.page(filter, after, limit)
    return { keys: found.entries.map(residencyKeyOf), nextCursor: found.after !== undefined ? encodeCursor(found.after) : null }
  }

  return {
    async start () {
      const pool = await createHostPool({ sizeBytes: options.hostPoolBytes, lock: options.lockHostPool })
      const nvme = createNvmeTier({ dir: options.nvmeDir, capacityBytes: options.nvmeCapacityBytes, directIo: options.directIo })
      let recovered: NvmeRecovery
      try {
        recovered = await nvme.open()
      } catch (err) {
        pool.close()
        throw err
      }
      const space = createHostSpace({ pool, nvme, spill: (bytes, keep) => mover.makeRoom(bytes, keep), pinnedPoolBytes, allocated: () => mover.spillIfAboveWatermark(), reclaim: reclaimPool })
      const mover = createTierMover(options, { logger, pool, nvme, space, index: entries, queue: spillQueue, counters, track })
      storage = { pool, nvme, recovered, space, mover }
      const slice = createSlicer()
      for (const obj of [...nvme.objects()]) {
        await slice() // the API answers between slices of a large recovery
        const key = parseKey(obj.key)
        entries.set(obj.key, newStoredEntry(key, undefined, now(), obj.checksum, obj.owner))
        owners.recovered(key.namespace, obj.owner)
      }
      // A namespace whose records named different owners is the agent's (namespace-owners.ts).
      for (const entry of entries.values()) {
        const owner = owners.ownerOf(entry.key.namespace)
        entry.owner = typeof owner === 'number' ? owner : undefined
      }
      logger.info({ hostPoolBytes: options.hostPoolBytes, nvmeDir: options.nvmeDir, ...recovered }, 'state manager ready')
    },
    async stop () {
      // A long background spill ends at its next group boundary instead of running to the low watermark.
      await storage?.mover.stop()
      await Promise.allSettled([...background])
      await storage?.nvme.close()
      for (const entry of entries.values()) releaseShm(entry)
      mappings.close()
      storage?.pool.close()
    },
    offload,
    onload,
    prefetch,
    async drop (selector) {
      const victims = select(selector)
      await removeAll(victims)
      return victims.length
    },
    setHints (list) {
      const at = now()
      spillQueue.setHints(list.map(h => ({ prefix: h.prefix, atMs: at + h.inMs })))
      for (const h of list) if (h.inMs <= options.prefetchHorizonMs) prefetch({ prefix: h.prefix })
    },
    residency,
    ownedNamespaces,
    residencySummary,
    residencyPage,
    availability,
    recovery: () => storage?.recovered,
    storedKeys: (prefix = '') => [...entries.values()].filter(e => e.key.text.startsWith(prefix)).map(e => e.key),
    readHost,
    poolReclaimer (reclaim) {
      reclaimers.add(reclaim)
      return () => { reclaimers.delete(reclaim) }
    },
    async readRange (text, offset, length) {
      const entry = entries.get(parseKey(text).text)
      if (entry === undefined) throw new AgentError('ERR_KEY_NOT_FOUND', `${text} is not stored on this node`)
      if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 || offset + length > entry.key.bytes) {
        throw new AgentError('ERR_OUT_OF_RANGE', `bytes ${offset}..${offset + length} are not within the ${entry.key.bytes} bytes of ${text}`)
      }
      if (hasHostCopy(entry) || !entry.onNvme) {
        const whole = await readHost(text)
        const range = { ...whole.range, offset: whole.range.offset + offset, length }
        return { ...whole, range, copied: false }
      }
      const unpin = pin(entry) // until the read is done: a drop waits for it, not for the copy's holder
      let copy: ScratchBytes | undefined
      try {
        copy = await scratch(length)
        await started().nvme.readRange(entry.key.text, offset, copy.range)
        counters.rangeReadBytes += length
      } catch (err) {
        copy?.release()
        throw err
      } finally {
        unpin()
      }
      return { range: copy.range, copied: true, release: copy.release }
    },
    scratch,
    async adopt (text, handle) {
      const k = parseKey(text)
      const extent = scratchExtents.get(handle)
      if (extent === undefined) throw new AgentError('ERR_BAD_REQUEST', 'adopt needs a live scratch range from this StateManager')
      if (handle.range.length !== k.bytes) throw new AgentError('ERR_SIZE_MISMATCH', `${text} has ${k.bytes} bytes, the scratch range ${handle.range.length}`)
      for (let pending = inflight.get(k.text); pending !== undefined; pending = inflight.get(k.text)) await pending
      const existing = entries.get(k.text)
      if (existing !== undefined) {
        handle.release()
        existing.replicas++
        counters.deduplicated++
        return false
      }
      scratchExtents.delete(handle)
      addEntry(k, extent)
      maybeSpill()
      return true
    },
    async persist (texts) {
      // The keys before the first one that is invalid or not stored are written (together), then that one fails.
      const found: StoredEntry[] = []
      let stop: { err: unknown } | undefined
      for (const text of texts) {
        let entry: StoredEntry | undefined
        try {
          entry = entries.get(parseKey(text).text)
        } catch (err) {
          stop = { err }
          break
        }
        if (entry === undefined) {
          stop = { err: new AgentError('ERR_KEY_NOT_FOUND', `${text} is not stored on this node`) }
          break
        }
        found.push(entry)
      }
      await started().mover.persistAll(found)
      if (stop !== undefined) throw stop.err
    },
    namespaceOwner: namespace => owners.ownerOf(namespace),
    nestedNamespaceOwners: namespace => owners.nested(namespace),
    claimNamespaces: (namespaces, owner) => owners.claim(namespaces, owner),
    checkQuota (keys, pendingBytes = 0) {
      const parsed = parseItems(keys.map(key => ({ key })), 'checkQuota')
      checkQuotas(parsed.filter(k => !entries.has(k.text)), pendingBytes)
    },
    adoptShm (source, items) {
      const keys = parseItems(items, 'adoptShm')
      const { fresh, existing } = planShmAdoption(keys, items.map(item => item.offset), text => entries.get(text), text => inflight.has(text))
      checkQuotas(fresh.map(f => f.key))
      const countReplicas = (): void => { for (const e of existing) { e.replicas++; counters.deduplicated++ } }
      if (fresh.length === 0) {
        countReplicas()
        if (typeof source !== 'string') source.close()
        return { adopted: [], deduplicated: existing.map(e => e.key.text) }
      }
      const object = mapForAdoption(source, fresh)
      // Nothing below throws: the keys appear together, in this tick.
      const region = adoptedRegions.add(object, fresh)
      for (const { key, offset } of fresh) addEntry(key, undefined).shm = { region, offset }
      countReplicas()
      counters.shmAdopted += fresh.length
      return { adopted: fresh.map(f => f.key.text), deduplicated: existing.map(e => e.key.text) }
    },
  }
}
