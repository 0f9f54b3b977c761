/**
 * The NVMe tier (DESIGN "Tiers"): keys' bytes in segment files under
 * `<dir>/objects/`, and a journal (nvme-journal.ts) that makes the tier
 * durable.
 *
 * Group commit: the puts waiting when a commit starts (those issued in the
 * same tick, or while earlier commits were in flight) are committed
 * together, up to `segmentBytes`. Their keys are appended to the active
 * segment file, each at an offset aligned to 4 KiB (a key written with
 * O_DIRECT to the directory's direct-I/O alignment, when larger); then one
 * fdatasync of that file and one
 * journal write (O_DSYNC) holding all their records. A put resolves once its
 * record is on disk; the key exists only then. N puts in one group cost two
 * syncs, not 2N, plus an fsync of objects/ for each new segment file.
 * Keys under `directIoMinBytes` are written together by one gathering write
 * through the page cache (an O_DIRECT write per small key costs a block
 * allocation and a device round trip each); larger keys go straight from host
 * memory with O_DIRECT where the filesystem allows it, all but an unaligned
 * tail, which joins the gathering write (`directBody`: a segment is shared
 * by the groups in flight, so no write may pad and trim its file).
 *
 * Commit order of a group: its bytes are written and the file fdatasynced,
 * and the file's directory entry made durable (objects/ fsynced once, after
 * the file was created), before its records are appended, so a committed
 * record never names bytes or a file a power cut took. A crash before the
 * records leaves bytes no record names: an orphan file (removed by `open()`)
 * or dead bytes at the end of a segment. A torn journal tail is ignored.
 * `open()` also drops records whose file is missing or too short, then
 * compacts the journal; segments recovered are never appended to again.
 * A segment file is unlinked only once no durable record names it: after
 * the del records of all its removed keys, or the records re-pointing the
 * keys compaction moved, are on disk. `commitPoint` names each step between
 * these writes (nvme-tier-crash.test.ts kills a process at every one).
 *
 * Removals: `removeAll` takes its keys out of the books at once and appends
 * their del records in one journal write (shared with every other record
 * queued meanwhile, so concurrent drops share syncs), then removes the
 * segments that emptied; a crash leaves each key either recovered whole or
 * gone. Durability: a put with `durable: false` (a spill of a key stored
 * with durability "memory") is recorded with that flag; `open()` discards
 * such keys (their bytes become dead, a segment of nothing else an orphan)
 * and their removal writes no record. A durable put of such a key, or
 * `makeDurable`, re-records it without the flag (no copy).
 *
 * Format 1, before segments (one file per key, named by the SHA-256 of the
 * key and exactly its bytes long; records without `offset`), is read as
 * segments of one key at offset 0: `open()` rewrites their records with an
 * offset, and each such file goes with its key. There is no way back: an
 * agent from before segments reading this directory takes every segment
 * file longer than the key at its start for an orphan and deletes it.
 *
 * Space: a segment file stays until every key in it is removed; the bytes of
 * removed keys in a file still on disk are dead and count in `usedBytes()`.
 * A full (sealed) segment with more dead bytes than live ones is compacted
 * in the background once no key of it was removed for `compactionQuietMs`
 * (a drop of many keys usually empties segments whole, which costs no
 * copy): its live keys are copied into a new segment (written, fdatasynced,
 * named durably), each re-pointed by a new record, then its file is removed. So dead bytes stay below live bytes, plus the segments
 * still taking groups. Alignment padding is not counted (as a file system's
 * block rounding never was).
 */
import { randomBytes } from 'node:crypto'
import { open as openFile, readFile, readdir, stat, unlink, type FileHandle } from 'node:fs/promises'
import { join } from 'node:path'
import { AgentError } from '../../core/errors.ts'
import { openDirectFile, probeDirectIo, type DirectFile, type HostRange } from '../../native/index.ts'
import { mkdirDurably, syncDirectory } from '../../core/durable-file.ts'
import { mapConcurrently } from './map-concurrently.ts'
import { createSlicer } from './event-loop-slices.ts'
import { openJournalWriter, replayJournalYielding, rewriteJournal, type JournalRecord, type JournalWriter } from './nvme-journal.ts'

export interface NvmeObject {
  key: string
  bytes: number
  /** crc32c of the bytes, computed when they were offloaded. */
  checksum: number
  /** Segment file name under objects/. */
  object: string
  /** Byte offset of the key in its segment file. */
  offset: number
  /** The uid owning the key's namespace (namespace-owners.ts); absent: the agent. */
  owner?: number
  /**
   * Whether the key survives a restart: false for a key put with `durable:
   * false` (a spill of a key stored with durability "memory") until a
   * durable put of it re-records it.
   */
  durable: boolean
}

export interface NvmeRecovery {
  recovered: number
  /** Records whose segment file was missing or too short. */
  dropped: number
  /** Keys put with `durable: false` (never promised to survive a restart): not recovered, their bytes reclaimed. */
  discarded: number
  /** Files without a committed record (a crash mid-write or mid-removal), removed. */
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
  /** Bytes of keys per segment file; a group that would take one past this starts a new one (a larger key gets one to itself). Default 16 MiB. */
  segmentBytes?: number
  /** Keys of at least this many bytes are written with O_DIRECT (when `directIo`), smaller ones through the page cache. Default 1 MiB. */
  directIoMinBytes?: number
}

export interface NvmeTier {
  readonly dir: string
  readonly capacityBytes: number
  /** Bytes of committed keys, plus bytes reserved by puts in flight, plus dead bytes not yet reclaimed. */
  usedBytes(): number
  get(key: string): NvmeObject | undefined
  objects(): IterableIterator<NvmeObject>
  /** Replays the journal; call once before anything else. */
  open(): Promise<NvmeRecovery>
  /**
   * Writes `src` as the bytes of `key` (its namespace owned by `owner`,
   * default the agent) and commits it (group-committed with the puts around
   * it), durable (recovered by a restart) unless `durable` is false.
   * ERR_TIER_FULL when it does not fit. A put of a key already committed or
   * being put returns that object, made durable first (a record of its own,
   * no copy) when this put is durable and that one was not. The caller keeps
   * `src` unchanged until the promise settles.
   */
  put(key: string, src: HostRange, checksum: number, owner?: number, durable?: boolean): Promise<NvmeObject>
  /**
   * put for many keys at once, with one promise: resolves once every key is
   * committed or failed, with each key's object or error (ERR_TIER_FULL for
   * a key that did not fit), in order. Keys issued together share groups.
   */
  putAll(items: readonly NvmePutItem[]): Promise<Array<NvmeObject | Error>>
  /** Reads the bytes of `key` into `dst` (dst.length must equal its size). */
  read(key: string, dst: HostRange): Promise<void>
  /** Reads bytes [offset, offset + dst.length) of a key into `dst` (ERR_OUT_OF_RANGE past its end); unaligned edges go through a bounce buffer. */
  readRange(key: string, offset: number, dst: HostRange): Promise<void>
  /** Deletes the key: its journal record first, then (with its segment's last key) the file. */
  remove(key: string): Promise<void>
  /**
   * remove for many keys at once: their del records go in one journal write
   * (one sync, shared with whatever else is appended meanwhile: concurrent
   * calls share commits), then the segments emptied go. A key never made
   * durable needs no record (a restart discards it anyway). Keys not on the
   * tier are ignored. A crash leaves each key either recovered whole or gone.
   */
  removeAll(keys: Iterable<string>): Promise<void>
  /**
   * Makes committed keys durable without copying them: one journal write of
   * their records without the `durable: false` flag. Keys not on the tier,
   * or durable already, are skipped.
   */
  makeDurable(keys: Iterable<string>): Promise<void>
  /** Waits for commits and compactions in flight, then closes the files. */
  close(): Promise<void>
}

export interface NvmeTierComponents {
  /** fsync of a directory (durable-file.ts syncDirectory by default); tests trace it. */
  syncDirectory?: (dir: string) => Promise<void>
  /** Awaited at each step of NvmeCommitPoint; crash tests stop a process there and kill it. Default: none. */
  commitPoint?: (at: NvmeCommitPoint) => void | Promise<void>
  /** Opens the journal for appending (nvme-journal.ts openJournalWriter by default); tests count its writes. */
  openJournal?: (path: string) => Promise<JournalWriter>
}

/** The steps between the writes that make a group commit, a compaction or a segment's removal durable. */
export type NvmeCommitPoint =
  /** The group's bytes (from `start` in `segment`) and the segment's name are durable; no record of it is written. */
  | { point: 'group-synced', segment: string, start: number, keys: string[] }
  /** The group's records are durable too; its puts have not resolved yet. */
  | { point: 'group-recorded', segment: string, start: number, keys: string[] }
  /** The keys of a removeAll are out of the books; their del records are not written yet. */
  | { point: 'removal-issued', keys: string[] }
  /** Their del records are durable; the call has not resolved and no emptied segment is unlinked yet. */
  | { point: 'removal-recorded', keys: string[] }
  /** Compaction copied the live keys of `from` into `to`, durably; no key is re-pointed yet. */
  | { point: 'compaction-copied', from: string, to: string }
  /** The records re-pointing them are durable; `from` is still on disk. */
  | { point: 'compaction-recorded', from: string, to: string }
  /** Every key of `segment` is durably removed or moved; its file is not unlinked yet. */
  | { point: 'segment-removing', segment: string }

/** One segment file: what is live in it and what is dead. */
interface Segment {
  name: string
  /** Committed keys whose bytes are in this file. */
  liveKeys: number
  liveBytes: number
  /** Bytes of keys removed (or moved by compaction, or of a failed commit) still in the file. */
  deadBytes: number
  compacting: boolean
  /** Removals of its keys whose records are not durable yet: the file stays meanwhile. */
  removing: number
  /** Armed (re-armed by each removal) while the segment is mostly dead: compacts it when it fires. */
  compactTimer: NodeJS.Timeout | undefined
  /** Set while the segment takes groups: it is neither compacted nor removed meanwhile. */
  active: ActiveSegment | undefined
}

/** The segment new groups are appended to. */
interface ActiveSegment {
  path: string
  handle: Promise<FileHandle>
  /** Resolves once the file's directory entry is durable. */
  named: Promise<void>
  /** Where the last key placed ends (unaligned). */
  end: number
  /** Commits writing into it; its handle closes when the last ends after it is sealed. */
  writers: number
  sealed: boolean
}

interface PendingPut extends NvmePutItem {
  /** Told the key's object, or the error that failed its group. */
  settled: Array<(result: NvmeObject | Error) => void>
}

/** What putAll takes for each key. */
export interface NvmePutItem {
  key: string
  src: HostRange
  checksum: number
  /** Recovered by a restart (default true); false for a spill of a key that was not promised to survive one. */
  durable?: boolean
  /** The uid owning the key's namespace (namespace-owners.ts); undefined: the agent. */
  owner?: number | undefined
}

/** Group commits in flight at once: a group's bytes are written and synced while earlier groups' records commit (and large keys, a group each, move in parallel). */
const concurrentCommits = 4
/** O_DIRECT transfers in flight while a group's large keys are written (each is a native job). */
const directWriteConcurrency = 4
/** Alignment of keys in a segment: the smallest direct-I/O alignment (the directory's, when larger, is probed at open for keys written with O_DIRECT). */
const keyAlignment = 4096
/** Segment files held open for reads at once (readObject). */
const openReadHandles = 16
/** Zeros for the padding between small keys in a gathering write. */
const padding = Buffer.alloc(keyAlignment)
/** A mostly dead segment is compacted once none of its keys was removed for this long, ms. */
export const compactionQuietMs = 200
/** Bytes per read/write while compaction copies a key. */
const compactionChunkBytes = 4 * 2 ** 20

/** The journal record that commits `obj` (its owner with it). */
const putRecord = (obj: NvmeObject): JournalRecord => ({
  op: 'put', key: obj.key, bytes: obj.bytes, checksum: obj.checksum, object: obj.object, offset: obj.offset,
  ...(obj.owner !== undefined ? { owner: obj.owner } : {}),
  ...(obj.durable ? {} : { durable: false as const }),
})
/** Segment files stat'ed at once by open(). */
const statConcurrency = 32

const alignUp = (value: number, alignment: number): number => Math.ceil(value / alignment) * alignment

/** Writes `buffers` (`bytes` in all) at `position`, resuming after short writes. */
async function writeAll (handle: FileHandle, buffers: Buffer[], position: number, bytes: number): Promise<void> {
  let written = 0
  while (written < bytes) {
    const { bytesWritten } = await handle.writev(written === 0 ? buffers : remainderOf(buffers, written), position + written)
    if (bytesWritten === 0) throw new AgentError('ERR_IO', 'a segment write wrote nothing')
    written += bytesWritten
  }
}

/** The bytes of `buffers` after the first `skip`. */
function remainderOf (buffers: Buffer[], skip: number): Buffer[] {
  const rest: Buffer[] = []
  for (const b of buffers) {
    if (skip >= b.length) { skip -= b.length; continue }
    rest.push(skip > 0 ? b.subarray(skip) : b)
    skip = 0
  }
  return rest
}

export function createNvmeTier (options: NvmeTierOptions, components: NvmeTierComponents = {}): NvmeTier {
  const syncDir = components.syncDirectory ?? syncDirectory
  const at = components.commitPoint
  const objectsDir = join(options.dir, 'objects')
  const journalPath = join(options.dir, 'journal.log')
  const directIo = options.directIo ?? true
  const io = { queueDepth: options.queueDepth ?? 8, blockBytes: options.blockBytes ?? 4 * 2 ** 20 }
  const segmentBytes = options.segmentBytes ?? 16 * 2 ** 20
  const directIoMinBytes = options.directIoMinBytes ?? 2 ** 20
  /** Alignment of the offset and length of an O_DIRECT transfer (the directory's direct-I/O alignment, probed at open); a key written with O_DIRECT starts at a multiple of it. */
  let directAlignment = keyAlignment
  /** Alignment of the memory of an O_DIRECT transfer (probed at open). */
  let directMemoryAlignment = keyAlignment
  const isDirect = (bytes: number): boolean => directIo && bytes >= directIoMinBytes
  const alignmentOf = (bytes: number): number => isDirect(bytes) ? directAlignment : keyAlignment
  /**
   * The bytes at the start of a key that are written with O_DIRECT: none for
   * a small key; for a large one, its whole direct-I/O blocks, when its
   * memory is aligned for O_DIRECT (host memory regions are mmap'd, so
   * page-aligned). The rest (an unaligned tail, or a key in unaligned memory,
   * whole) goes through the page cache with the small keys: the native writer
   * would move it by a read-modify-write that pads the file to the block's
   * end and then truncates the file to the size its own handle knows, cutting
   * away the keys other groups appended to the segment meanwhile, records
   * and all.
   */
  const directBody = (src: HostRange): number =>
    isDirect(src.length) && directMemoryAlignment <= keyAlignment && src.offset % directMemoryAlignment === 0 ? src.length - src.length % directAlignment : 0
  const committed = new Map<string, NvmeObject>()
  const segments = new Map<string, Segment>()
  let committedBytes = 0
  let reservedBytes = 0
  let deadBytes = 0
  let journal: JournalWriter | undefined
  /** Puts waiting for the next group commit, and the puts in flight by key. */
  let waiting: PendingPut[] = []
  const putting = new Map<string, PendingPut>()
  const commits = new Set<Promise<void>>()
  let startQueued = false
  let active: Segment | undefined
  const background = new Set<Promise<void>>()

  const newSegmentName = (): string => randomBytes(16).toString('hex')
  const writer = (): JournalWriter => {
    if (journal === undefined) throw new AgentError('ERR_UNAVAILABLE', 'NVMe tier is not open')
    return journal
  }
  /** Runs closing, removal and compaction of segments in the background, until close(); a failure leaves the segment as it was (compaction is tried again on its next removal). */
  const inBackground = (work: Promise<void>): void => {
    const tracked = work.catch(() => {})
    background.add(tracked)
    void tracked.finally(() => background.delete(tracked))
  }

  function committedObject (key: string): NvmeObject {
    const obj = committed.get(key)
    if (obj === undefined) throw new AgentError('ERR_KEY_NOT_FOUND', `${key} is not on the NVMe tier`)
    return obj
  }

  /**
   * Read handles of segment files, least recently used first, at most
   * openReadHandles. A committed key's bytes never change in place (a
   * segment is written once under a name never used again; compaction copies
   * keys to a new segment), so a handle serves any read of its segment: an
   * onload of thousands of small spilled keys opens each file once, not once
   * per key. A segment's handle is closed when the segment is removed (an
   * unlinked file's space is freed only once no handle holds it), or when it
   * is the least recently used beyond the bound; after its reads in flight.
   */
  const readHandles = new Map<string, { file: DirectFile, reads: number, closing: boolean }>()
  const releaseReadHandle = (name: string): void => {
    const h = readHandles.get(name)
    if (h === undefined) return
    readHandles.delete(name)
    h.closing = true
    if (h.reads === 0) h.file.close()
  }

  /** Reads bytes [at, at + dst.length) of a committed object, through its segment's read handle (the key's placement is read anew per call: compaction may move it between calls). */
  async function readObject (obj: NvmeObject, at: number, dst: HostRange): Promise<void> {
    let h = readHandles.get(obj.object)
    if (h === undefined) h = { file: openDirectFile(join(objectsDir, obj.object), { directIo }), reads: 0, closing: false }
    readHandles.delete(obj.object)
    readHandles.set(obj.object, h)
    while (readHandles.size > openReadHandles) releaseReadHandle(readHandles.keys().next().value!)
    h.reads++
    try {
      await h.file.read(dst, obj.offset + at, io)
    } finally {
      h.reads--
      if (h.closing && h.reads === 0) h.file.close()
    }
  }

  function segmentOf (name: string): Segment {
    let seg = segments.get(name)
    if (seg === undefined) {
      seg = { name, liveKeys: 0, liveBytes: 0, deadBytes: 0, compacting: false, removing: 0, compactTimer: undefined, active: undefined }
      segments.set(name, seg)
    }
    return seg
  }

  function addCommitted (obj: NvmeObject): void {
    committed.set(obj.key, obj)
    committedBytes += obj.bytes
    const seg = segmentOf(obj.object)
    seg.liveKeys++
    seg.liveBytes += obj.bytes
  }

  function addDead (seg: Segment, bytes: number): void {
    seg.deadBytes += bytes
    deadBytes += bytes
  }

  /** Takes `obj` out of the live books; its bytes stay in its file as dead bytes. */
  function retire (obj: NvmeObject): Segment {
    committed.delete(obj.key)
    committedBytes -= obj.bytes
    const seg = segments.get(obj.object)!
    seg.liveKeys--
    seg.liveBytes -= obj.bytes
    addDead(seg, obj.bytes)
    return seg
  }

  /**
   * After a retirement is durable (or a segment sealed): removes a sealed
   * segment with nothing live, or (re)arms the compaction of a mostly dead one.
   */
  async function reclaim (seg: Segment): Promise<void> {
    if (seg.compacting || seg.active !== undefined || seg.removing > 0 || segments.get(seg.name) !== seg) return
    clearTimeout(seg.compactTimer)
    seg.compactTimer = undefined
    if (seg.liveKeys === 0) {
      segments.delete(seg.name)
      deadBytes -= seg.deadBytes
      if (at !== undefined) await at({ point: 'segment-removing', segment: seg.name })
      releaseReadHandle(seg.name)
      await unlink(join(objectsDir, seg.name)).catch(() => {})
    } else if (seg.deadBytes > seg.liveBytes) {
      seg.compactTimer = setTimeout(() => {
        seg.compactTimer = undefined
        if (seg.compacting || seg.active !== undefined || segments.get(seg.name) !== seg || journal === undefined) return
        seg.compacting = true
        inBackground(compact(seg).finally(() => { seg.compacting = false }).then(() => reclaim(seg)))
      }, compactionQuietMs)
      seg.compactTimer.unref()
    }
  }

  /** Stops appending to the active segment; its file closes once the commits writing it end. */
  function seal (seg: Segment): void {
    const file = seg.active!
    if (file.sealed) return
    file.sealed = true
    if (active === seg) active = undefined
    if (file.writers === 0) release(seg)
  }

  function release (seg: Segment): void {
    const file = seg.active!
    seg.active = undefined
    inBackground(file.handle.then(h => h.close(), () => {}).then(() => reclaim(seg)))
  }

  /**
   * The segment a group of at most `bytes` (padding included) is appended to,
   * and the offset it may start at: the active one, or a new one when it would
   * take that past `segmentBytes`.
   */
  function placeGroup (bytes: number): { seg: Segment, start: number } {
    if (active !== undefined) {
      const start = alignUp(active.active!.end, keyAlignment)
      if (start + bytes <= segmentBytes) return { seg: active, start }
      seal(active)
    }
    const seg = segmentOf(newSegmentName())
    const path = join(objectsDir, seg.name)
    const handle = openFile(path, 'wx', 0o640)
    seg.active = { path, handle, named: handle.then(() => syncDir(objectsDir)), end: 0, writers: 0, sealed: false }
    void seg.active.named.catch(() => {}) // awaited by each commit into it
    active = seg
    return { seg, start: 0 }
  }

  /** Appends one group to a segment and commits its records; returns the objects (not yet in the books). */
  async function commitGroup (group: PendingPut[]): Promise<NvmeObject[]> {
    const w = writer()
    const { seg, start } = placeGroup(group.reduce((sum, p) => sum + alignmentOf(p.src.length) + p.src.length, 0))
    const file = seg.active!
    file.writers++
    const objects: NvmeObject[] = []
    let offset = start
    for (const p of group) {
      offset = alignUp(offset, alignmentOf(p.src.length))
      objects.push({ key: p.key, bytes: p.src.length, checksum: p.checksum, object: seg.name, offset, ...(p.owner !== undefined ? { owner: p.owner } : {}), durable: p.durable !== false })
      offset += p.src.length
    }
    file.end = offset
    try {
      const handle = await file.handle
      // Through the page cache: the small keys, and what O_DIRECT cannot take of the large ones (directBody).
      const pieces: Array<{ at: number, bytes: Buffer }> = []
      const bodies: Array<{ at: number, src: HostRange }> = []
      for (const [i, p] of group.entries()) {
        const { offset } = objects[i]!
        const body = directBody(p.src)
        if (body > 0) bodies.push({ at: offset, src: { memory: p.src.memory, offset: p.src.offset, length: body } })
        if (body < p.src.length) pieces.push({ at: offset + body, bytes: p.src.memory.viewBytes(p.src.offset + body, p.src.length - body) })
      }
      // One gathering write per run of pieces less than 4 KiB apart (zeros between them), in file order.
      for (let i = 0; i < pieces.length;) {
        const runStart = pieces[i]!.at
        const run: Buffer[] = []
        let end = runStart
        do {
          const piece = pieces[i++]!
          if (piece.at > end) run.push(padding.subarray(0, piece.at - end))
          run.push(piece.bytes)
          end = piece.at + piece.bytes.length
        } while (i < pieces.length && pieces[i]!.at - end < keyAlignment)
        await writeAll(handle, run, runStart, end - runStart)
      }
      if (bodies.length > 0) {
        const directFile = openDirectFile(file.path, { write: true, directIo })
        try {
          await mapConcurrently(bodies, directWriteConcurrency, b => directFile.write(b.src, b.at, io))
        } finally {
          directFile.close()
        }
      }
      await handle.datasync()
      await file.named
      if (at !== undefined) await at({ point: 'group-synced', segment: seg.name, start, keys: group.map(p => p.key) })
      await w.appendAll(objects.map(putRecord))
      if (at !== undefined) await at({ point: 'group-recorded', segment: seg.name, start, keys: group.map(p => p.key) })
    } catch (err) {
      // Whatever was written is named by no record: dead bytes. A segment that failed a write takes no more.
      addDead(seg, group.reduce((sum, p) => sum + p.src.length, 0))
      seal(seg)
      throw err
    } finally {
      if (--file.writers === 0 && file.sealed) release(seg)
    }
    return objects
  }

  /**
   * Re-records a committed key without `durable: false` (a no-op for one
   * durable already, or no longer committed: removed meanwhile). The books
   * change in the call's tick, so a removal or compaction after it records after it.
   */
  async function markDurable (objs: NvmeObject[]): Promise<void> {
    const records: JournalRecord[] = []
    for (const obj of objs) {
      if (obj.durable || committed.get(obj.key) !== obj) continue
      obj.durable = true
      records.push(putRecord(obj))
    }
    if (records.length > 0) await writer().appendAll(records)
  }

  /** Queues a put (or joins the one in flight for the key); `settled` is told its outcome, perhaps at once. */
  function enqueue ({ key, src, checksum, owner, durable }: NvmePutItem, settled: (result: NvmeObject | Error) => void): void {
    if (journal === undefined) { settled(new AgentError('ERR_UNAVAILABLE', 'NVMe tier is not open')); return }
    /** A durable put answered by a put that was not: made durable first. */
    const upgrade = (result: NvmeObject | Error): void => {
      if (result instanceof Error || durable === false || result.durable) settled(result)
      else markDurable([result]).then(() => settled(result), (err: Error) => settled(err))
    }
    const existing = committed.get(key)
    if (existing !== undefined) { upgrade(existing); return }
    const inFlight = putting.get(key)
    if (inFlight !== undefined) { inFlight.settled.push(upgrade); return }
    const used = committedBytes + reservedBytes + deadBytes
    if (used + src.length > options.capacityBytes) {
      settled(new AgentError('ERR_TIER_FULL', `NVMe tier is full: ${src.length} bytes do not fit (${used} of ${options.capacityBytes} used)`))
      return
    }
    reservedBytes += src.length
    const p: PendingPut = { key, src, checksum, owner, durable, settled: [settled] }
    waiting.push(p)
    putting.set(key, p)
    // Started after this tick, so every put issued in it joins the same group.
    if (!startQueued) {
      startQueued = true
      queueMicrotask(() => { startQueued = false; startCommits() })
    }
  }

  /** Starts group commits for the puts waiting, up to `concurrentCommits` at once. */
  function startCommits (): void {
    while (waiting.length > 0 && commits.size < concurrentCommits) {
      let bytes = 0
      let n = 0
      while (n < waiting.length && (n === 0 || bytes + waiting[n]!.src.length <= segmentBytes)) bytes += waiting[n++]!.src.length
      const group = waiting.slice(0, n)
      waiting = waiting.slice(n)
      const settle = (objects: NvmeObject[] | undefined, err?: unknown): void => {
        reservedBytes -= bytes
        const failure = objects === undefined ? (err instanceof Error ? err : new AgentError('ERR_IO', String(err))) : undefined
        for (const [i, p] of group.entries()) {
          putting.delete(p.key)
          if (objects !== undefined) addCommitted(objects[i]!)
          for (const tell of p.settled) tell(objects?.[i] ?? failure!)
        }
      }
      const work: Promise<void> = commitGroup(group).then(settle, err => settle(undefined, err)).finally(() => {
        commits.delete(work)
        startCommits()
      })
      commits.add(work)
    }
  }

  /**
   * Copies the live keys of a sealed segment into a new one (buffered I/O,
   * fdatasync, objects/ fsynced), then re-points each key still live and
   * unchanged with a new record. The old file goes with its last key (reclaim).
   */
  async function compact (seg: Segment): Promise<void> {
    const moving = [...committed.values()].filter(o => o.object === seg.name) // O(keys), once per compaction
    const name = newSegmentName()
    const path = join(objectsDir, name)
    const placed: NvmeObject[] = []
    const src = await openFile(join(objectsDir, seg.name), 'r')
    try {
      const dst = await openFile(path, 'wx', 0o640)
      try {
        const buffer = Buffer.allocUnsafe(Math.min(compactionChunkBytes, Math.max(...moving.map(o => o.bytes))))
        let offset = 0
        for (const obj of moving) {
          for (let done = 0; done < obj.bytes;) {
            const n = Math.min(buffer.length, obj.bytes - done)
            const { bytesRead } = await src.read(buffer, 0, n, obj.offset + done)
            if (bytesRead !== n) throw new AgentError('ERR_IO', `segment ${seg.name} ends inside ${obj.key}`)
            await writeAll(dst, [buffer.subarray(0, n)], offset + done, n)
            done += n
          }
          placed.push({ ...obj, object: name, offset })
          offset = alignUp(offset + obj.bytes, keyAlignment)
        }
        await dst.datasync()
      } finally {
        await dst.close()
      }
      await syncDir(objectsDir)
    } catch (err) {
      await unlink(path).catch(() => {})
      throw err
    } finally {
      await src.close()
    }
    if (at !== undefined) await at({ point: 'compaction-copied', from: seg.name, to: name })
    const w = writer()
    const target = segmentOf(name)
    const records: JournalRecord[] = []
    // In one tick: a key removed meanwhile is not re-pointed (its copy is dead), and a later removal's record follows this one.
    for (const [i, old] of moving.entries()) {
      const moved = placed[i]!
      if (committed.get(old.key) !== old) {
        addDead(target, moved.bytes)
        continue
      }
      retire(old)
      moved.durable = old.durable // made durable since the copy began
      addCommitted(moved)
      records.push(putRecord(moved))
    }
    if (records.length > 0) await w.appendAll(records)
    if (at !== undefined) await at({ point: 'compaction-recorded', from: seg.name, to: name })
    if (target.liveKeys === 0) await reclaim(target)
  }

  async function removeAll (keys: Iterable<string>): Promise<void> {
    const objs: NvmeObject[] = []
    for (const key of new Set(keys)) {
      const obj = committed.get(key)
      if (obj !== undefined) objs.push(obj)
    }
    if (objs.length === 0) return
    const w = writer()
    const removed = objs.map(o => o.key)
    const records: JournalRecord[] = objs.flatMap(o => o.durable ? [{ op: 'del' as const, key: o.key }] : [])
    // The files go only once every removal from them is durable: a record naming one must not outlive it.
    const segs = objs.map(retire)
    for (const seg of segs) seg.removing++
    try {
      if (at !== undefined) await at({ point: 'removal-issued', keys: removed })
      if (records.length > 0) await w.appendAll(records)
      if (at !== undefined) await at({ point: 'removal-recorded', keys: removed })
    } finally {
      for (const seg of segs) seg.removing--
    }
    await Promise.all(Array.from(new Set(segs), reclaim))
  }

  return {
    dir: options.dir,
    capacityBytes: options.capacityBytes,
    usedBytes: () => committedBytes + reservedBytes + deadBytes,
    get: key => committed.get(key),
    objects: () => committed.values(),

    async open () {
      await mkdirDurably(objectsDir, 0o750)
      if (directIo) {
        const probe = probeDirectIo(options.dir)
        directAlignment = Math.max(keyAlignment, probe.alignment)
        directMemoryAlignment = probe.memoryAlignment
      }
      let text = ''
      try { text = await readFile(journalPath, 'utf8') } catch (err) { if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err }
      // In slices: the API answers (status, ERR_STARTING) while a journal of many keys is replayed.
      const { records, tornLines } = await replayJournalYielding(text)
      const replayed = new Map<string, NvmeObject>()
      let slice = createSlicer()
      for (const r of records) {
        await slice()
        if (r.op === 'put') replayed.set(r.key, { key: r.key, bytes: r.bytes, checksum: r.checksum, object: r.object, offset: r.offset ?? 0, ...(r.owner !== undefined ? { owner: r.owner } : {}), durable: r.durable !== false })
        else replayed.delete(r.key)
      }
      let discarded = 0
      const names = new Set<string>()
      for (const [key, obj] of replayed) {
        if (!obj.durable) { replayed.delete(key); discarded++ } else names.add(obj.object)
      }
      // Each segment file named by a record is stat'ed once, several at a time (a record names bytes, the
      // size says whether a crash or a power cut left them there; checksums are verified when a key is read).
      const found = await mapConcurrently([...names], statConcurrency, name => stat(join(objectsDir, name)).then(s => [name, s.size] as const, () => [name, -1] as const))
      const sizes = new Map(found)
      let dropped = 0
      /** Bytes of each file's live keys, each padded to 4 KiB: what is beyond them is dead. */
      const padded = new Map<string, number>()
      slice = createSlicer()
      for (const obj of replayed.values()) {
        await slice()
        if (sizes.get(obj.object)! < obj.offset + obj.bytes) { dropped++; continue }
        addCommitted(obj)
        padded.set(obj.object, (padded.get(obj.object) ?? 0) + alignUp(obj.bytes, keyAlignment))
      }
      let orphansRemoved = 0
      for (const name of await readdir(objectsDir)) {
        if (!segments.has(name)) { await unlink(join(objectsDir, name)); orphansRemoved++ }
      }
      // Dead bytes a crash or a restart left in a file: its size beyond its live keys.
      for (const seg of segments.values()) addDead(seg, Math.max(0, alignUp(sizes.get(seg.name)!, keyAlignment) - padded.get(seg.name)!))
      await rewriteJournal(journalPath, [...committed.values()].map(putRecord))
      journal = await (components.openJournal ?? openJournalWriter)(journalPath)
      for (const seg of segments.values()) inBackground(reclaim(seg))
      return { recovered: committed.size, dropped, discarded, orphansRemoved, tornLines }
    },

    put (key, src, checksum, owner, durable) {
      return new Promise((resolve, reject) => {
        enqueue({ key, src, checksum, owner, durable }, result => result instanceof Error ? reject(result) : resolve(result))
      })
    },

    putAll (items) {
      return new Promise(resolve => {
        const results = new Array<NvmeObject | Error>(items.length)
        let pending = items.length
        if (pending === 0) resolve(results)
        for (const [i, item] of items.entries()) {
          enqueue(item, result => {
            results[i] = result
            if (--pending === 0) resolve(results)
          })
        }
      })
    },

    async read (key, dst) {
      const obj = committedObject(key)
      if (dst.length !== obj.bytes) throw new AgentError('ERR_SIZE_MISMATCH', `${key} has ${obj.bytes} bytes, target has ${dst.length}`)
      await readObject(obj, 0, dst)
    },

    async readRange (key, offset, dst) {
      const obj = committedObject(key)
      if (!Number.isSafeInteger(offset) || offset < 0 || offset + dst.length > obj.bytes) {
        throw new AgentError('ERR_OUT_OF_RANGE', `bytes ${offset}..${offset + dst.length} are past the ${obj.bytes} bytes of ${key}`)
      }
      await readObject(obj, offset, dst)
    },

    remove: key => removeAll([key]),
    removeAll,
    async makeDurable (keys) {
      const objs: NvmeObject[] = []
      for (const key of keys) {
        const obj = committed.get(key)
        if (obj !== undefined) objs.push(obj)
      }
      await markDurable(objs)
    },

    async close () {
      while (commits.size > 0 || waiting.length > 0) {
        startCommits()
        await Promise.allSettled([...commits])
      }
      if (active !== undefined) seal(active)
      while (background.size > 0) await Promise.allSettled([...background])
      for (const seg of segments.values()) clearTimeout(seg.compactTimer) // a restart's open() finds them again
      for (const name of [...readHandles.keys()]) releaseReadHandle(name)
      await journal?.close()
      journal = undefined
    },
  }
}
