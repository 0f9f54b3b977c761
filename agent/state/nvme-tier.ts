/**
 * The NVMe tier (DESIGN "Tiers"): one object file per key under
 * `<dir>/objects/`, written with O_DIRECT where the filesystem allows it, and
 * a journal that makes the tier durable. Commit order for a put: write the
 * object, fdatasync it, then append the journal record and fdatasync the
 * journal; the key exists only once its record is on disk. Between the two
 * the objects directory is fsynced, so a committed record never names an
 * object file whose directory entry a power cut took. A crash before the
 * record leaves an orphan object that `open()` removes; a torn journal tail is
 * ignored. `open()` also drops records whose object is missing or has the
 * wrong size, then compacts the journal.
 */
import { createHash } from 'node:crypto'
import { readFile, readdir, stat, unlink } from 'node:fs/promises'
import { join } from 'node:path'
import { AgentError } from '../../core/errors.ts'
import { openDirectFile, type HostRange } from '../../native/index.ts'
import { mkdirDurably, syncDirectory } from '../../core/durable-file.ts'
import { openJournalWriter, replayJournal, rewriteJournal, type JournalRecord, type JournalWriter } from './nvme-journal.ts'

export interface NvmeObject {
  key: string
  bytes: number
  /** crc32c of the bytes, computed when they were offloaded. */
  checksum: number
  /** File name under objects/. */
  object: string
  /** The uid owning the key's namespace (namespace-owners.ts); absent: the agent. */
  owner?: number
}

export interface NvmeRecovery {
  recovered: number
  /** Records whose object file was missing or had the wrong size. */
  dropped: number
  /** Object files without a committed record (a crash mid-write), removed. */
  orphansRemoved: number
  tornLines: number
}

export interface NvmeTierOptions {
  /** Directory of the tier (created if missing). */
  dir: string
  /** Bytes the tier may hold. */
  capacityBytes: number
  /** Try O_DIRECT (false forces buffered I/O). Default true. */
  directIo?: boolean
  /** Chunks in flight per transfer. Default 8. */
  queueDepth?: number
  /** Bytes per I/O chunk. Default 4 MiB. */
  blockBytes?: number
}

export interface NvmeTier {
  readonly dir: string
  readonly capacityBytes: number
  /** Bytes committed plus bytes reserved by puts in flight. */
  usedBytes(): number
  get(key: string): NvmeObject | undefined
  objects(): IterableIterator<NvmeObject>
  /** Replays the journal; call once before anything else. */
  open(): Promise<NvmeRecovery>
  /** Writes `src` as the object of `key` (its namespace owned by `owner`, default the agent) and commits it. ERR_TIER_FULL when it does not fit. */
  put(key: string, src: HostRange, checksum: number, owner?: number): Promise<NvmeObject>
  /** Reads the object of `key` into `dst` (dst.length must equal its size). */
  read(key: string, dst: HostRange): Promise<void>
  /** Deletes the key: journal record first, then the file. */
  remove(key: string): Promise<void>
  close(): Promise<void>
}

export interface NvmeTierComponents {
  /** fsync of a directory (durable-file.ts syncDirectory by default); tests trace it. */
  syncDirectory?: (dir: string) => Promise<void>
}

export function createNvmeTier (options: NvmeTierOptions, components: NvmeTierComponents = {}): NvmeTier {
  const syncDir = components.syncDirectory ?? syncDirectory
  const objectsDir = join(options.dir, 'objects')
  const journalPath = join(options.dir, 'journal.log')
  const io = { queueDepth: options.queueDepth ?? 8, blockBytes: options.blockBytes ?? 4 * 2 ** 20 }
  const committed = new Map<string, NvmeObject>()
  let committedBytes = 0
  let reservedBytes = 0
  let journal: JournalWriter | undefined

  const objectName = (key: string): string => createHash('sha256').update(key).digest('hex')
  const writer = (): JournalWriter => {
    if (journal === undefined) throw new AgentError('ERR_UNAVAILABLE', 'NVMe tier is not open')
    return journal
  }

  return {
    dir: options.dir,
    capacityBytes: options.capacityBytes,
    usedBytes: () => committedBytes + reservedBytes,
    get: key => committed.get(key),
    objects: () => committed.values(),

    async open () {
      await mkdirDurably(objectsDir, 0o750)
      let text = ''
      try { text = await readFile(journalPath, 'utf8') } catch (err) { if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err }
      const { records, tornLines } = replayJournal(text)
      const replayed = new Map<string, NvmeObject>()
      for (const r of records) {
        if (r.op === 'put') replayed.set(r.key, { key: r.key, bytes: r.bytes, checksum: r.checksum, object: r.object, ...(r.owner !== undefined ? { owner: r.owner } : {}) })
        else replayed.delete(r.key)
      }
      let dropped = 0
      for (const obj of replayed.values()) {
        const size = await stat(join(objectsDir, obj.object)).then(s => s.size, () => -1)
        if (size === obj.bytes) {
          committed.set(obj.key, obj)
          committedBytes += obj.bytes
        } else {
          dropped++
        }
      }
      const referenced = new Set([...committed.values()].map(o => o.object))
      let orphansRemoved = 0
      for (const name of await readdir(objectsDir)) {
        if (!referenced.has(name)) { await unlink(join(objectsDir, name)); orphansRemoved++ }
      }
      await rewriteJournal(journalPath, [...committed.values()].map(o => ({ op: 'put', ...o }) satisfies JournalRecord))
      journal = await openJournalWriter(journalPath)
      return { recovered: committed.size, dropped, orphansRemoved, tornLines }
    },

    async put (key, src, checksum, owner) {
      const w = writer()
      if (committed.has(key)) return committed.get(key)!
      if (committedBytes + reservedBytes + src.length > options.capacityBytes) {
        throw new AgentError('ERR_TIER_FULL', `NVMe tier is full: ${src.length} bytes do not fit (${committedBytes + reservedBytes} of ${options.capacityBytes} used)`)
      }
      reservedBytes += src.length
      const obj: NvmeObject = { key, bytes: src.length, checksum, object: objectName(key), ...(owner !== undefined ? { owner } : {}) }
      const path = join(objectsDir, obj.object)
      try {
        await unlink(path).catch(() => {})
        const file = openDirectFile(path, { create: true, directIo: options.directIo ?? true })
        try {
          await file.write(src, 0, { ...io, sync: true })
        } finally {
          file.close()
        }
        await syncDir(objectsDir)
        await w.append({ op: 'put', ...obj })
      } catch (err) {
        await unlink(path).catch(() => {})
        throw err
      } finally {
        reservedBytes -= src.length
      }
      committed.set(key, obj)
      committedBytes += obj.bytes
      return obj
    },

    async read (key, dst) {
      const obj = committed.get(key)
      if (obj === undefined) throw new AgentError('ERR_KEY_NOT_FOUND', `${key} is not on the NVMe tier`)
      if (dst.length !== obj.bytes) throw new AgentError('ERR_SIZE_MISMATCH', `${key} has ${obj.bytes} bytes, target has ${dst.length}`)
      const file = openDirectFile(join(objectsDir, obj.object), { directIo: options.directIo ?? true })
      try {
        await file.read(dst, 0, io)
      } finally {
        file.close()
      }
    },

    async remove (key) {
      const obj = committed.get(key)
      if (obj === undefined) return
      await writer().append({ op: 'del', key })
      committed.delete(key)
      committedBytes -= obj.bytes
      await unlink(join(objectsDir, obj.object)).catch(() => {})
    },

    async close () {
      await journal?.close()
      journal = undefined
    },
  }
}
