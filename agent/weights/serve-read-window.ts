/**
 * The server side of a pull's bounded window: what a READ of a stored
 * tensor reads, so that a version larger than the host pool is served from
 * NVMe without bringing whole tensors into the pool, and pullers of the same
 * bytes share the reads.
 *
 * Contracts:
 * - `read(key, keyBytes, from, to, chunkBytes)` hands out bytes [from, to)
 *   of a key, and more: the whole chunks (the manifest's) that cover them,
 *   starting at byte `at` of the key. A key with a host copy is pinned and
 *   read in place (nothing copied, nothing kept after release); a key only on
 *   NVMe has the covering chunks read into the pool (StateManager.readRange,
 *   O_DIRECT), never the whole key.
 * - Shared reads: a read of NVMe chunks is kept in the window, keyed by key
 *   and chunk range; a READ of the same range while it is in flight or kept
 *   uses it (one disk read for every puller of the same bytes: the same
 *   version pulled whole, or the same rank's slices; different layouts cover
 *   different ranges and read apart).
 * - Read-ahead: a READ of one whole chunk that missed also reads the next
 *   `readAheadChunks` chunks of the key into the window, when they fit
 *   without dropping chunks in use, so the disk reads while the network sends.
 * - Bound: kept chunks take at most `windowBytes` of the pool; they are
 *   dropped least recently used first when a new read needs room, all of
 *   them once no READ used them for `idleMs`, and as many as an allocation
 *   of the StateManager needs when the pool is full (poolReclaimer: before
 *   it spills keys). Chunks in use (a reply being
 *   sent) are never dropped: a READ that finds the window full of them still
 *   reads, so what is in use is bounded by the connections (the server
 *   handles one request per connection at a time) times the largest READ;
 *   the window is back within its bytes once they are released.
 * - Keys never change bytes while stored (weights keys name model and
 *   version, and a version number is never reused), so kept chunks are valid
 *   as long as they are kept. They pin nothing: a retire or drop of the key
 *   does not wait for the window (its chunks leave by LRU or idleness).
 * All on the event loop.
 */
import type { HostRange } from '../../native/index.ts'
import type { PinnedBytes, StateManager } from '../state/state-manager.ts'

export interface ServeReadWindowOptions {
  /** Bytes of the pool kept chunks may take (chunks in use may exceed it). */
  windowBytes: number
  /** Chunks read ahead after a one-chunk READ that missed. Default 2. */
  readAheadChunks?: number
  /** Kept chunks no READ used for this long are dropped, ms. Default 2000. */
  idleMs?: number
}

/** Bytes handed to one READ: `range` holds bytes [at, at + range.length) of the key. */
export interface WindowBytes {
  at: number
  range: HostRange
  /** As PinnedBytes.sharedRegion: bytes in an adopted shared-memory object. */
  sharedRegion?: string
  release(): void
}

export interface ServeReadWindowStats {
  /** Bytes of kept and in-flight NVMe chunks. */
  heldBytes: number
  /** READs answered by a read already in flight or kept. */
  shared: number
  /** Chunks read ahead (the bytes read from NVMe are the StateManager's rangeReadBytes). */
  readAheads: number
}

export interface ServeReadWindow {
  /** Bytes [from, to) of `key` (of `keyBytes` bytes), within the covering `chunkBytes` chunks; call release() once the reply is sent. */
  read(key: string, keyBytes: number, from: number, to: number, chunkBytes: number): Promise<WindowBytes>
  stats(): ServeReadWindowStats
  /** Drops every kept chunk and leaves the StateManager's reclaimers (at stop); chunks in use are freed when released. */
  clear(): void
}

interface Slot {
  id: string
  bytes: number
  /** Settles with the read; `pinned` is set once it resolved. */
  ready: Promise<void>
  pinned: (PinnedBytes & { copied: boolean }) | undefined
  users: number
  lastUseMs: number
  /** In `slots` (findable): false once dropped, or for a host copy read in place (not kept). */
  kept: boolean
}

export function createServeReadWindow (options: ServeReadWindowOptions, components: { stateManager: StateManager }): ServeReadWindow {
  const sm = components.stateManager
  const { windowBytes } = options
  const readAheadChunks = options.readAheadChunks ?? 2
  const idleMs = options.idleMs ?? 2000
  /** Kept and in-flight slots in least recently used order (Map order: re-inserted on use). */
  const slots = new Map<string, Slot>()
  const stats: ServeReadWindowStats = { heldBytes: 0, shared: 0, readAheads: 0 }
  let idleTimer: NodeJS.Timeout | undefined
  const unregister = sm.poolReclaimer(wantBytes => {
    const before = stats.heldBytes
    dropUnused(() => before - stats.heldBytes >= wantBytes)
    return before - stats.heldBytes
  })

  const slotId = (key: string, at: number, end: number): string => `${at}-${end}:${key}`

  /** Takes the slot out of the window (no longer findable or counted); its bytes go when its last user releases them. */
  function forget (slot: Slot): void {
    if (!slot.kept) return
    slot.kept = false
    slots.delete(slot.id)
    stats.heldBytes -= slot.bytes
  }

  function drop (slot: Slot): void {
    forget(slot)
    if (slot.users === 0) slot.pinned?.release()
  }

  /** Drops kept slots nobody uses (read, not in use), least recently used first, until `enough()`; the Map allows deleting while iterating. */
  function dropUnused (enough: () => boolean, unusedSince = Infinity): void {
    for (const slot of slots.values()) {
      if (enough()) return
      if (slot.users === 0 && slot.pinned !== undefined && slot.lastUseMs <= unusedSince) drop(slot)
    }
  }

  /** Drops unused kept slots until `bytes` more fit; whether they do. */
  function makeRoom (bytes: number): boolean {
    const fits = (): boolean => stats.heldBytes + bytes <= windowBytes
    dropUnused(fits)
    return fits()
  }

  function armIdleTimer (): void {
    clearTimeout(idleTimer)
    idleTimer = setTimeout(() => {
      dropUnused(() => false, Date.now() - idleMs)
      if (slots.size > 0) armIdleTimer()
    }, idleMs).unref()
  }

  function start (key: string, at: number, end: number, users: number): Slot {
    const slot: Slot = { id: slotId(key, at, end), bytes: end - at, ready: Promise.resolve(), pinned: undefined, users, lastUseMs: Date.now(), kept: true }
    slots.set(slot.id, slot)
    stats.heldBytes += slot.bytes
    slot.ready = sm.readRange(key, at, end - at).then(pinned => {
      slot.pinned = pinned
      if (!pinned.copied) forget(slot) // a host copy: read in place, not kept
      if (!slot.kept && slot.users === 0) pinned.release()
    }, err => {
      forget(slot)
      throw err
    })
    return slot
  }

  function release (slot: Slot): void {
    slot.lastUseMs = Date.now()
    if (--slot.users > 0) return
    if (!slot.kept) slot.pinned?.release()
    else {
      makeRoom(0) // back within the window once chunks read while it was full of chunks in use are released
      armIdleTimer()
    }
  }

  function readAhead (key: string, keyBytes: number, from: number, chunkBytes: number): void {
    for (let i = 0, at = from; i < readAheadChunks && at < keyBytes; i++, at += chunkBytes) {
      const end = Math.min(keyBytes, at + chunkBytes)
      if (slots.has(slotId(key, at, end))) continue
      if (!makeRoom(end - at)) return
      stats.readAheads++
      start(key, at, end, 0).ready.catch(() => {}) // a failed read-ahead is only a miss for the READ that wanted it
    }
  }

  return {
    async read (key, keyBytes, from, to, chunkBytes) {
      const at = Math.floor(from / chunkBytes) * chunkBytes
      const end = Math.min(keyBytes, Math.max(at + chunkBytes, Math.ceil(to / chunkBytes) * chunkBytes))
      let slot = slots.get(slotId(key, at, end))
      const missed = slot === undefined
      if (slot !== undefined) {
        stats.shared++
        slot.users++
        slots.delete(slot.id) // most recently used: to the end of the order
        slots.set(slot.id, slot)
      } else {
        makeRoom(end - at)
        slot = start(key, at, end, 1)
      }
      const used = slot
      try {
        await used.ready
      } catch (err) {
        used.users--
        throw err
      }
      const pinned = used.pinned!
      // Only a key read from NVMe is read ahead (a host copy is read in place: nothing to gain).
      if (missed && pinned.copied && end - at === chunkBytes) readAhead(key, keyBytes, end, chunkBytes)
      const bytes: WindowBytes = { at, range: pinned.range, release: () => release(used) }
      if (pinned.sharedRegion !== undefined) bytes.sharedRegion = pinned.sharedRegion
      return bytes
    },
    stats: () => ({ ...stats }),
    clear () {
      clearTimeout(idleTimer)
      unregister()
      for (const slot of slots.values()) drop(slot)
    },
  }
}
