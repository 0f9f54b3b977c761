/**
 * What the StateManager's index holds for one stored key, and the pin
 * protocol that keeps its host copy in place while something reads it.
 *
 * Contracts:
 * - Ownership: the index (a Map from key text to entry) owns entries. An
 *   entry removed from it is dead even while a reader still pins it, so code
 *   that awaited checks `index.get(key.text) === entry` before changing it.
 * - Host copy: a pool extent (`host`) or a range of an adopted shared-memory
 *   mapping (`shm`), never both; neither when the key is only on NVMe.
 * - Pins count operations reading the host copy (copy out, NVMe write,
 *   checksum); spill and drop free the copy only at 0 pins. Unpinning to 0
 *   wakes the waiters of `whenUnpinned` first, then `onIdle` (the host-space
 *   waiters: a key unpinned may now be spilled).
 * - Observed: an index that keeps totals over its entries (residency-index.ts)
 *   sets `observer`; every assignment of `host`, `shm` or `replicas` (what
 *   decides the tier residency reports and the logical bytes) is then
 *   reported to it, so no code that moves or counts a key has to.
 * All on the event loop.
 */
import type { Extent, HostPool, HostRange } from '../../native/index.ts'
import type { StateKey } from './keys.ts'
import type { AdoptedShm } from './adopted-shm-regions.ts'

export interface StoredEntry {
  key: StateKey
  /** Creation order, unique in the process: entries enter the index as they are created, so this is index order (spill-queue.ts breaks ties with it). */
  readonly seq: number
  host: Extent | undefined
  /** Has an NVMe copy (spilled, persisted or recovered). */
  onNvme: boolean
  /**
   * Promised to survive a restart: stored with durability "nvme", persisted,
   * or recovered. A key stored with durability "memory" that spilled is on
   * NVMe but not durable (its record says so, and a restart discards it).
   */
  durable: boolean
  replicas: number
  /** When the key was last offloaded or onloaded, ms since the epoch. */
  lastUseMs: number
  /** crc32c of the bytes; computed lazily (first spill, persist or verify), off the offload path. */
  checksum: number | undefined
  /** The host copy when it lives in an adopted shared-memory mapping instead of a pool extent (`host` is then undefined). */
  shm: { region: AdoptedShm, offset: number } | undefined
  /**
   * The uid owning the key's namespace when it was stored (namespace-owners.ts);
   * undefined: the agent itself. Written with the key's NVMe journal record.
   */
  owner: number | undefined
  /** Operations reading the entry's host copy; spill/drop wait for 0. */
  pins: number
  unpinned: Array<() => void>
  /** Told about changes of `host`, `shm` and `replicas` while set (by the index holding the entry). */
  observer: EntryObserver | undefined
}

/** Follows the fields of an entry that residency reports; `retract` runs before a change (the entry as it was), `account` after it. */
export interface EntryObserver {
  retract(entry: StoredEntry): void
  account(entry: StoredEntry): void
}

let entriesCreated = 0

/** A stored key with one replica: in host memory (`host`) and/or durably on NVMe (`nvmeChecksum` given: recovered), its namespace owned by `owner` (default: the agent). */
export function newStoredEntry (key: StateKey, host: Extent | undefined, lastUseMs: number, nvmeChecksum?: number, owner?: number): StoredEntry {
  return new ObservedEntry(key, host, lastUseMs, nvmeChecksum, owner)
}

class ObservedEntry implements StoredEntry {
  readonly key: StateKey
  readonly seq = entriesCreated++
  lastUseMs: number
  owner: number | undefined
  onNvme: boolean
  durable: boolean
  checksum: number | undefined
  pins = 0
  unpinned: Array<() => void> = []
  observer: EntryObserver | undefined = undefined
  #host: Extent | undefined
  #shm: StoredEntry['shm'] = undefined
  #replicas = 1

  constructor (key: StateKey, host: Extent | undefined, lastUseMs: number, nvmeChecksum: number | undefined, owner: number | undefined) {
    this.key = key
    this.#host = host
    this.lastUseMs = lastUseMs
    this.owner = owner
    this.onNvme = nvmeChecksum !== undefined
    this.durable = nvmeChecksum !== undefined
    this.checksum = nvmeChecksum
  }

  get host (): Extent | undefined { return this.#host }
  set host (host) { this.#observed(() => { this.#host = host }) }
  get shm (): StoredEntry['shm'] { return this.#shm }
  set shm (shm) { this.#observed(() => { this.#shm = shm }) }
  get replicas (): number { return this.#replicas }
  set replicas (replicas) { this.#observed(() => { this.#replicas = replicas }) }

  #observed (change: () => void): void {
    const observer = this.observer
    observer?.retract(this)
    change()
    observer?.account(this)
  }
}

/** Whether the key has a host copy (pool extent or adopted mapping). */
export const hasHostCopy = (e: StoredEntry): boolean => e.host !== undefined || e.shm !== undefined

/** The key's bytes in a pool extent (extents are rounded up to the pool alignment). */
export const keyRange = (pool: HostPool, extent: Extent, k: StateKey): HostRange => pool.range(extent, 0, k.bytes)

/** The key's host bytes, wherever they are; for an entry with `hasHostCopy` (a TypeError otherwise). */
export function hostBytesOf (pool: HostPool, e: StoredEntry): HostRange {
  if (e.shm !== undefined) return { memory: e.shm.region.memory, offset: e.shm.offset, length: e.key.bytes }
  if (e.host === undefined) throw new TypeError(`${e.key.text} has no host copy`)
  return keyRange(pool, e.host, e.key)
}

/** Pins the entry's host copy; the returned function unpins (call it once). */
export function pinEntry (entry: StoredEntry, onIdle: () => void): () => void {
  entry.pins++
  return () => {
    if (--entry.pins === 0) {
      for (const wake of entry.unpinned.splice(0)) wake()
      onIdle()
    }
  }
}

/** Resolves when nothing pins the entry (at once if nothing does). */
export const whenUnpinned = (entry: StoredEntry): Promise<void> =>
  entry.pins === 0 ? Promise.resolve() : new Promise(resolve => entry.unpinned.push(resolve))
