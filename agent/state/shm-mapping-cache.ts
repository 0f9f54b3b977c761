/**
 * Keeps clients' shared-memory objects mapped between requests. Workers
 * offload from and onload into the same buffers step after step; mapping a
 * 1 GiB object anew costs ~262k page faults per request. An entry is reused
 * only while /dev/shm/<name> is still the same object (inode and size checked
 * on every use), so an object that was unlinked and recreated is mapped
 * afresh. Unused mappings are closed after `idleMs`, and the least recently
 * used beyond `maxEntries`.
 */
import { statSync } from 'node:fs'
import { openSharedMemory, type SharedMemoryObject } from '../../native/index.ts'

export interface ShmMappingCacheOptions {
  /** Most mappings kept. Default 256. */
  maxEntries?: number
  /** Close a mapping unused this long, ms. Default 60000. */
  idleMs?: number
}

export interface ShmLease {
  object: SharedMemoryObject
  release(): void
}

export interface ShmMappingCache {
  /** Maps (or reuses) /dev/shm/<name>; throws like openSharedMemory. */
  acquire(name: string): ShmLease
  /** Closes idle mappings; called on each acquire, callable from a timer. */
  sweep(nowMs?: number): void
  close(): void
}

interface Cached {
  object: SharedMemoryObject
  ino: number
  size: number
  users: number
  lastUseMs: number
}

export function createShmMappingCache (options: ShmMappingCacheOptions = {}): ShmMappingCache {
  const maxEntries = options.maxEntries ?? 256
  const idleMs = options.idleMs ?? 60_000
  const cache = new Map<string, Cached>()

  const drop = (name: string, entry: Cached): void => {
    if (cache.get(name) === entry) cache.delete(name)
    if (entry.users === 0) entry.object.close()
  }

  return {
    acquire (name) {
      const bare = name.startsWith('/') ? name.slice(1) : name
      const st = (() => { try { return statSync(`/dev/shm/${bare}`) } catch { return undefined } })()
      let entry = cache.get(bare)
      if (entry !== undefined && (st === undefined || st.ino !== entry.ino || st.size !== entry.size)) {
        drop(bare, entry)
        entry = undefined
      }
      if (entry === undefined) {
        const object = openSharedMemory(bare)
        entry = { object, ino: st?.ino ?? -1, size: object.sizeBytes, users: 0, lastUseMs: Date.now() }
        cache.set(bare, entry)
        this.sweep()
      }
      const held = entry
      held.users++
      held.lastUseMs = Date.now()
      let released = false
      return {
        object: held.object,
        release: () => {
          if (released) return
          released = true
          held.users--
          held.lastUseMs = Date.now()
          if (held.users === 0 && cache.get(bare) !== held) held.object.close()
        },
      }
    },
    sweep (nowMs = Date.now()) {
      for (const [name, entry] of cache) if (entry.users === 0 && nowMs - entry.lastUseMs > idleMs) drop(name, entry)
      const idle = [...cache].filter(([, e]) => e.users === 0).sort(([, a], [, b]) => a.lastUseMs - b.lastUseMs)
      for (const [name, entry] of idle.slice(0, Math.max(0, cache.size - maxEntries))) drop(name, entry)
    },
    close () {
      for (const [name, entry] of cache) { cache.delete(name); if (entry.users === 0) entry.object.close() }
    },
  }
}
