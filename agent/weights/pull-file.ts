/**
 * A pull's file destination (`agentctl weights pull --out`): the whole
 * version, or one rank's shard, as one safetensors file written straight from
 * the verified pieces as they land: no StateManager keys, no NVMe pass, and a
 * slice never has to be in the host pool whole (pieces pass through a few
 * pool buffers, see the puller).
 *
 * - The header is planned before a byte moves: tensor names, dtypes and
 *   sliced shapes from the slice plan, so every piece knows its file offset.
 *   The header is padded so the data starts at 4 KiB, and tensors whose size
 *   is a multiple of 4 KiB come first (in plan order, then the others): their
 *   pieces are written with O_DIRECT (the page cache halves a large file's
 *   write rate), the rest through the page cache. safetensors readers find
 *   tensors by the header's offsets, so the order is free. __metadata__: `format: pt`, the caller's entries, then
 *   agentd.model, agentd.version, and for a sliced pull agentd.tp,
 *   agentd.rank and agentd.padded_shapes (tensor name → the engine's padded
 *   parameter shape) where vocab padding applies.
 * - Bytes go to `<path>.pull-partial` by positioned writes; pieces never
 *   share a byte, and a piece written with O_DIRECT covers whole blocks no
 *   buffered piece touches, so concurrent writes are safe. Both side files
 *   are opened with O_NOFOLLOW (the O_DIRECT handle reopens the same inode
 *   through /proc/self/fd): the agent never writes through a link planted
 *   beside the confined path. Each piece written is
 *   then journaled in `<path>.pull-journal`: a first line naming the plan
 *   (a hash of the header and the piece size of every slice), then one line
 *   per piece (slice, offset, length, crc32c).
 * - Resume: a pull that stopped (killed, source lost, caller gone) leaves
 *   both files. A repeat of the same plan reads each journaled piece back and
 *   keeps those whose crc32c still matches (a write lost in a power cut is
 *   refetched); another plan (a new version, another layout) starts over.
 * - Done: fdatasync, then the partial file takes the final name (renamed over
 *   it with `overwrite`, else linked, refusing a name that exists) and the
 *   journal is removed. `close(true)` removes both (the version is gone, or
 *   its source sent corrupt bytes).
 * - Before a byte moves: the path must not exist unless `overwrite`, no other
 *   pull of this agent may be writing it (ERR_BAD_REQUEST), and the file
 *   system must have room for what the partial file does not hold yet
 *   (ERR_TIER_FULL, saying how much is missing where).
 */
import { createHash } from 'node:crypto'
import { constants } from 'node:fs'
import { open, stat, statfs, unlink, type FileHandle } from 'node:fs/promises'
import { dirname } from 'node:path'
import { AgentError } from '../../core/errors.ts'
import { checksum, openDirectFile, viewHostRange, type DirectFile, type HostRange } from '../../native/index.ts'
import type { Dtype } from '../state/keys.ts'
import { putInPlace, safetensorsHeader } from '../state/materialize.ts'
import type { ScratchBytes, StateManager } from '../state/state-manager.ts'
import type { TensorSlice } from './reshard.ts'

export interface PullFileTarget {
  /** Absolute path of the safetensors file to write (the API confines it to api.pathRoots). */
  path: string
  /** Replace a file that exists. Default false: ERR_BAD_REQUEST before a byte moves. */
  overwrite?: boolean
  /** More __metadata__ entries (e.g. the layout's and the engine's names). */
  metadata?: Record<string, string>
}

export interface PullFilePlan {
  model: string
  version: number
  /** The slices in file order, with each one's dtype. */
  slices: ReadonlyArray<{ slice: TensorSlice, dtype: Dtype }>
  /** Bytes per piece of each slice (the puller's step): part of the plan a journal must match. */
  pieceBytes: readonly number[]
  /** Set for a sliced pull: tp and rank go into the metadata. */
  layout?: { tp: number, rank: number }
}

export interface PullFile {
  readonly path: string
  /** Whether the piece at `offset` of slice `slice` is in the file already (journaled by an earlier pull of this plan, read back and verified). */
  has(slice: number, offset: number): boolean
  /** Bytes of the pieces already in the file. */
  readonly resumedBytes: number
  /** Writes a verified piece (`src`, whose crc32c is `crc`) at its place, then journals it. */
  write(slice: number, offset: number, src: HostRange, crc: number): Promise<void>
  /** Every piece written: makes the file durable and gives it its final name. Returns the path. */
  finish(): Promise<string>
  /** Stops writing: `discard` removes the partial file and its journal, else both stay for a repeat. Idempotent. */
  close(discard: boolean): Promise<void>
}

/** The data's alignment in the file: the usual O_DIRECT block. */
const blockBytes = 4096

/** Paths some pull of this process is writing. */
const writing = new Set<string>()

interface JournalLine { s: number, o: number, l: number, c: number }

export async function openPullFile (target: PullFileTarget, plan: PullFilePlan, sm: StateManager): Promise<PullFile> {
  const { path } = target
  if (!path.startsWith('/') || !path.endsWith('.safetensors')) throw new AgentError('ERR_BAD_REQUEST', `out.path must be an absolute path ending in .safetensors, got ${JSON.stringify(path)}`)
  if (writing.has(path)) throw new AgentError('ERR_BAD_REQUEST', `another pull of this agent is writing ${path}`)
  if (target.overwrite !== true && await stat(path).then(() => true, () => false)) throw new AgentError('ERR_BAD_REQUEST', `${path} exists; pass overwrite to replace it`)
  const partialPath = `${path}.pull-partial`
  const journalPath = `${path}.pull-journal`

  const order = [...plan.slices.keys()].sort((a, b) => Number(plan.slices[a]!.slice.bytes % blockBytes !== 0) - Number(plan.slices[b]!.slice.bytes % blockBytes !== 0) || a - b)
  const header = safetensorsHeader(order.map(i => plan.slices[i]!).map(({ slice, dtype }) => ({ name: slice.name, dtype, shape: slice.shape, bytes: slice.bytes, chunks: [] })), metadataOf(target, plan), blockBytes)
  /** File offset of each slice (by its index in the plan). */
  const starts: number[] = []
  let size = header.length
  for (const i of order) { starts[i] = size; size += plan.slices[i]!.slice.bytes }
  const planId = createHash('sha256').update(header).update(JSON.stringify(plan.pieceBytes)).digest('hex')

  writing.add(path)
  let data: FileHandle | undefined
  let direct: DirectFile | undefined
  let journal: FileHandle | undefined
  try {
    const journaled = await readJournal(journalPath, planId)
    const partialBytes = journaled.length > 0 ? await stat(partialPath).then(s => s.blocks * 512, () => 0) : 0
    const fs = await statfs(dirname(path)).catch((err: NodeJS.ErrnoException) => {
      throw new AgentError(err.code === 'ENOENT' || err.code === 'ENOTDIR' ? 'ERR_NOT_FOUND' : 'ERR_IO', `the directory of ${path}: ${err.message}`)
    })
    const free = fs.bavail * fs.bsize
    if (size - partialBytes > free) {
      throw new AgentError('ERR_TIER_FULL', `writing ${path} needs ${size - partialBytes} more bytes (a ${size}-byte file); ${dirname(path)} has ${free} bytes free: ${size - partialBytes - free} bytes missing`)
    }
    if (journaled.length === 0) await unlink(partialPath).catch(() => {})
    data = await openNoFollow(partialPath, constants.O_RDWR | constants.O_CREAT)
    const verified = await verifyPieces(data, journaled, starts, sm)
    await data.truncate(size)
    await data.write(header, 0, header.length, 0)
    direct = openDirectFile(`/proc/self/fd/${data.fd}`, { write: true })
    // The journal is rewritten with what was verified, so a torn or stale line never outlives one resume.
    journal = await openNoFollow(journalPath, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC)
    await journal.write(`${JSON.stringify({ plan: planId })}\n${verified.map(l => `${JSON.stringify(l)}\n`).join('')}`)
    return pullFile(target, { data, direct, journal, partialPath, journalPath, starts, verified })
  } catch (err) {
    direct?.close()
    await data?.close()
    await journal?.close()
    writing.delete(path)
    throw err
  }
}

/** Opens `path` with `flags`, refusing a symbolic link (ERR_PATH_FORBIDDEN). */
async function openNoFollow (path: string, flags: number): Promise<FileHandle> {
  return await open(path, flags | constants.O_NOFOLLOW, 0o644).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ELOOP') throw new AgentError('ERR_PATH_FORBIDDEN', `${path} is a symbolic link; the agent does not write through links`)
    throw err
  })
}

function metadataOf (target: PullFileTarget, plan: PullFilePlan): Record<string, string> {
  const padded = Object.fromEntries(plan.slices.flatMap(({ slice }) => slice.paddedShape !== undefined ? [[slice.name, slice.paddedShape]] : []))
  return {
    format: 'pt',
    ...target.metadata,
    'agentd.model': plan.model,
    'agentd.version': String(plan.version),
    ...(plan.layout !== undefined ? { 'agentd.tp': String(plan.layout.tp), 'agentd.rank': String(plan.layout.rank) } : {}),
    ...(Object.keys(padded).length > 0 ? { 'agentd.padded_shapes': JSON.stringify(padded) } : {}),
  }
}

/** The pieces a journal of this plan lists; none when it is missing or of another plan. A line that does not parse (torn by a crash) is skipped. */
async function readJournal (journalPath: string, planId: string): Promise<JournalLine[]> {
  const handle = await openNoFollow(journalPath, constants.O_RDONLY).catch(() => undefined)
  const text = handle !== undefined ? await handle.readFile('utf8').finally(() => handle.close()) : ''
  const [first, ...rest] = text.split('\n')
  if ((parseLine(first ?? '') as { plan?: string } | undefined)?.plan !== planId) return []
  const pieces: JournalLine[] = []
  for (const line of rest) {
    const p = parseLine(line) as Partial<JournalLine> | undefined
    if (p !== undefined && [p.s, p.o, p.l, p.c].every(v => Number.isSafeInteger(v) && v! >= 0)) pieces.push(p as JournalLine)
  }
  return pieces
}

function parseLine (line: string): unknown {
  try { return JSON.parse(line) } catch { return undefined }
}

/** Reads each journaled piece back from the partial file: those whose crc32c still matches. */
async function verifyPieces (data: FileHandle, pieces: readonly JournalLine[], starts: readonly number[], sm: StateManager): Promise<JournalLine[]> {
  const valid = pieces.filter(p => p.s < starts.length && p.l > 0)
  if (valid.length === 0) return []
  const largest = Math.max(...valid.map(p => p.l))
  const buffer = await sm.scratch(largest)
  const kept: JournalLine[] = []
  try {
    for (const p of valid) {
      const range = { ...buffer.range, length: p.l }
      const { bytesRead } = await data.read(buffer.view, 0, p.l, starts[p.s]! + p.o)
      if (bytesRead === p.l && await checksum(range) === p.c) kept.push(p)
    }
  } finally {
    buffer.release()
  }
  return kept
}

function pullFile (target: PullFileTarget, o: { data: FileHandle, direct: DirectFile, journal: FileHandle, partialPath: string, journalPath: string, starts: number[], verified: JournalLine[] }): PullFile {
  const { data, direct, journal, starts } = o
  const { alignment } = direct.info()
  const present = new Set(o.verified.map(p => `${p.s}:${p.o}`))
  let closed = false
  /** Closes both files (once: false after that); the path stays taken until `release`. */
  const close = async (): Promise<boolean> => {
    if (closed) return false
    closed = true
    direct.close()
    await data.close().catch(() => {})
    await journal.close().catch(() => {})
    return true
  }
  return {
    path: target.path,
    has: (slice, offset) => present.has(`${slice}:${offset}`),
    resumedBytes: o.verified.reduce((a, p) => a + p.l, 0),
    async write (slice, offset, src, crc) {
      if (closed) throw new AgentError('ERR_RESOURCE_CLOSED', `the pull writing ${target.path} has stopped`)
      const at = starts[slice]! + offset
      // Whole blocks go straight from the pool to the disk; a piece with an unaligned end through the page cache.
      if (at % alignment === 0 && src.length % alignment === 0) await direct.write(src, at)
      else await writeAll(data, viewHostRange(src), at)
      await journal.write(`${JSON.stringify({ s: slice, o: offset, l: src.length, c: crc })}\n`)
    },
    async finish () {
      if (closed) throw new AgentError('ERR_RESOURCE_CLOSED', `the pull writing ${target.path} has stopped`)
      try {
        await data.datasync()
        await close()
        await putInPlace(o.partialPath, target.path, target.overwrite === true)
        await unlink(o.journalPath).catch(() => {})
        return target.path
      } finally {
        writing.delete(target.path)
      }
    },
    async close (discard) {
      if (!await close()) return
      try {
        if (discard) {
          await unlink(o.partialPath).catch(() => {})
          await unlink(o.journalPath).catch(() => {})
        }
      } finally {
        writing.delete(target.path)
      }
    },
  }
}

export interface PieceBuffers {
  /** A buffer of `bytes` (waits while all `count` are taken). */
  acquire(): Promise<ScratchBytes>
  release(buffer: ScratchBytes): void
  /** Gives the buffers back to the pool; call once nothing holds one. */
  dispose(): void
}

/** Up to `count` pool buffers of `bytes` each, allocated as first needed and reused: what a pull into a file holds in the pool. */
export function createPieceBuffers (sm: StateManager, bytes: number, count: number): PieceBuffers {
  const all: ScratchBytes[] = []
  const free: ScratchBytes[] = []
  const waiting: Array<(b: ScratchBytes) => void> = []
  let allocating = 0
  return {
    async acquire () {
      const ready = free.pop()
      if (ready !== undefined) return ready
      if (all.length + allocating < count) {
        allocating++
        try {
          const b = await sm.scratch(bytes)
          all.push(b)
          return b
        } finally {
          allocating--
        }
      }
      return await new Promise<ScratchBytes>(resolve => waiting.push(resolve))
    },
    release (b) {
      const next = waiting.shift()
      if (next !== undefined) next(b)
      else free.push(b)
    },
    dispose () {
      for (const b of all) b.release()
      all.length = 0
      free.length = 0
    },
  }
}

/** Writes all of `bytes` at `position` (a positioned write may be short). */
async function writeAll (file: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  for (let done = 0; done < bytes.length;) {
    const { bytesWritten } = await file.write(bytes, done, bytes.length - done, position + done)
    done += bytesWritten
  }
}
