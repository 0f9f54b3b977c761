/**
 * Sub-allocation of the pinned host pool: best fit with coalescing over byte
 * offsets. Pure bookkeeping: the bytes stay in native memory, this only
 * decides which [offset, offset + length) a tensor gets.
 *
 * Extents are multiples of `granuleBytes` (4 KiB) and aligned to at least
 * that; large extents get a larger default alignment (see defaultAlignment)
 * so big tensors start on huge-page / DMA-friendly boundaries. Alignment
 * padding stays free.
 *
 * Free spans are indexed twice: by size in a balanced tree (AVL, ordered by
 * length then offset) for the fit, and by start and end offset in two maps
 * for coalescing. Cost, n = free spans: allocate O(log n) (with an alignment
 * above 4 KiB it probes at most `alignedFitProbes` spans too short to be sure
 * of a fit, then takes the smallest span that surely fits), free O(log n),
 * report O(log n). Nothing scans the free list, however shattered it is.
 */
import { AgentError } from '../core/errors.ts'
import { checkBytes, checkPowerOfTwo } from './native-error.ts'

export const granuleBytes = 4096

/** A reserved range of the pool. `length` is the reserved size (a multiple of 4 KiB). */
export interface Extent {
  readonly offset: number
  readonly length: number
}

export interface FragmentationReport {
  totalBytes: number
  usedBytes: number
  freeBytes: number
  /** The largest allocation that can succeed (before alignment), bytes. */
  largestFreeBytes: number
  freeExtents: number
  usedExtents: number
  /** 1 - largestFree / free: 0 when all free space is one extent, near 1 when shattered (what the largest possible request would pay). */
  fragmentation: number
  /** The largest request (rounded up to 4 KiB) among the last `recentRequests` allocate calls, failed ones included; 0 before the first. */
  recentRequestBytes: number
  /**
   * What allocation pays: the share of free bytes in spans shorter than
   * `recentRequestBytes`, which such a request cannot use (the pool spills
   * instead). 0 when every free byte is in a span that fits it, or nothing is
   * free, or nothing was requested yet; alignment is not counted. Freeing
   * every other 4 KiB key of a pool of 4 KiB keys leaves `fragmentation`
   * near 1 and this at 0: the next 4 KiB keys fit in the holes.
   */
  allocationFragmentation: number
}

/** Alignment used when the caller gives none: 4 KiB, 64 KiB from 1 MiB, 2 MiB from 64 MiB. */
export function defaultAlignment (bytes: number): number {
  if (bytes >= 64 * 2 ** 20) return 2 * 2 ** 20
  if (bytes >= 2 ** 20) return 64 * 2 ** 10
  return granuleBytes
}

/** Allocate calls whose sizes `recentRequestBytes` looks back over. */
export const recentRequests = 64

/**
 * Spans probed, smallest first, among those long enough for a request but
 * perhaps not for its alignment, before taking the smallest span long enough
 * whatever its alignment (a span of length + alignment - 4 KiB always fits).
 */
export const alignedFitProbes = 16

function alignUp (value: number, alignment: number): number {
  return Math.ceil(value / alignment) * alignment
}

/** A free span and its node in the size tree. */
interface FreeSpan {
  offset: number
  length: number
  left: FreeSpan | undefined
  right: FreeSpan | undefined
  height: number
  /** Sum of `length` over this subtree, bytes. */
  subtreeBytes: number
}

/** Order of the size tree: length, then offset (unique: spans never overlap). */
const before = (length: number, offset: number, s: FreeSpan): boolean =>
  length < s.length || (length === s.length && offset < s.offset)

const heightOf = (s: FreeSpan | undefined): number => s === undefined ? 0 : s.height
const bytesOf = (s: FreeSpan | undefined): number => s === undefined ? 0 : s.subtreeBytes

function refresh (s: FreeSpan): FreeSpan {
  s.height = 1 + Math.max(heightOf(s.left), heightOf(s.right))
  s.subtreeBytes = s.length + bytesOf(s.left) + bytesOf(s.right)
  return s
}

function rotateRight (s: FreeSpan): FreeSpan {
  const l = s.left!
  s.left = l.right
  l.right = refresh(s)
  return refresh(l)
}

function rotateLeft (s: FreeSpan): FreeSpan {
  const r = s.right!
  s.right = r.left
  r.left = refresh(s)
  return refresh(r)
}

function rebalance (s: FreeSpan): FreeSpan {
  refresh(s)
  const balance = heightOf(s.left) - heightOf(s.right)
  if (balance > 1) {
    if (heightOf(s.left!.left) < heightOf(s.left!.right)) s.left = rotateLeft(s.left!)
    return rotateRight(s)
  }
  if (balance < -1) {
    if (heightOf(s.right!.right) < heightOf(s.right!.left)) s.right = rotateRight(s.right!)
    return rotateLeft(s)
  }
  return s
}

function insertSpan (root: FreeSpan | undefined, span: FreeSpan): FreeSpan {
  if (root === undefined) return refresh(span)
  if (before(span.length, span.offset, root)) root.left = insertSpan(root.left, span)
  else root.right = insertSpan(root.right, span)
  return rebalance(root)
}

/** Removes the leftmost span of a subtree; returns [new subtree, the span]. */
function removeMin (root: FreeSpan): [FreeSpan | undefined, FreeSpan] {
  if (root.left === undefined) return [root.right, root]
  const [left, min] = removeMin(root.left)
  root.left = left
  return [rebalance(root), min]
}

function removeSpan (root: FreeSpan | undefined, span: FreeSpan): FreeSpan | undefined {
  if (root === undefined) return undefined
  if (root === span) {
    if (root.left === undefined) return root.right
    if (root.right === undefined) return root.left
    const [right, min] = removeMin(root.right)
    min.left = root.left
    min.right = right
    return rebalance(min)
  }
  if (before(span.length, span.offset, root)) root.left = removeSpan(root.left, span)
  else root.right = removeSpan(root.right, span)
  return rebalance(root)
}

/** The first span at or after (length, offset) in size order. */
function ceiling (root: FreeSpan | undefined, length: number, offset: number): FreeSpan | undefined {
  let found: FreeSpan | undefined
  for (let s = root; s !== undefined;) {
    if (s.length < length || (s.length === length && s.offset < offset)) {
      s = s.right
    } else {
      found = s
      s = s.left
    }
  }
  return found
}

/** Sum of the lengths of spans at least `length` long. */
function bytesAtLeast (root: FreeSpan | undefined, length: number): number {
  let sum = 0
  for (let s = root; s !== undefined;) {
    if (s.length >= length) {
      sum += s.length + bytesOf(s.right)
      s = s.left
    } else {
      s = s.right
    }
  }
  return sum
}

export class ExtentAllocator {
  readonly totalBytes: number
  /** Root of the size tree of free spans; spans never overlap and never touch (always coalesced). */
  #bySize: FreeSpan | undefined
  /** Free spans by start offset and by end offset (offset + length), for coalescing. */
  readonly #byStart = new Map<number, FreeSpan>()
  readonly #byEnd = new Map<number, FreeSpan>()
  /** Allocated extents by offset. */
  readonly #used = new Map<number, number>()
  #usedBytes = 0
  /** Lengths of the last `recentRequests` requests, a ring. */
  readonly #requests = new Float64Array(recentRequests)
  #requestCount = 0

  /** `totalBytes` is rounded down to the granule. */
  constructor (totalBytes: number) {
    checkBytes(totalBytes, 'totalBytes', granuleBytes)
    this.totalBytes = Math.floor(totalBytes / granuleBytes) * granuleBytes
    this.#addFree(0, this.totalBytes)
  }

  /**
   * Reserves `bytes` (rounded up to 4 KiB) at an offset that is a multiple of
   * `alignment` (a power of two; default from defaultAlignment, never below
   * 4 KiB), in the smallest free span that fits. Throws ERR_POOL_FULL when no
   * free span fits.
   */
  allocate (bytes: number, alignment?: number): Extent {
    checkBytes(bytes, 'bytes', 1)
    const length = alignUp(bytes, granuleBytes)
    const align = Math.max(granuleBytes, checkPowerOfTwo(alignment ?? defaultAlignment(length), 'alignment'))
    this.#requests[this.#requestCount++ % recentRequests] = length
    const span = this.#fit(length, align)
    if (span === undefined) {
      const report = this.report()
      throw new AgentError('ERR_POOL_FULL',
        `host pool cannot fit ${length} bytes aligned to ${align}: ${report.freeBytes} bytes free, ` +
        `largest free extent ${report.largestFreeBytes} bytes`, { details: report })
    }
    const { offset, length: spanLength } = span
    this.#removeFree(span)
    const start = alignUp(offset, align)
    if (start > offset) this.#addFree(offset, start - offset)
    const end = offset + spanLength
    if (start + length < end) this.#addFree(start + length, end - start - length, span)
    this.#used.set(start, length)
    this.#usedBytes += length
    return { offset: start, length }
  }

  /**
   * Returns an extent to the free list, merging it with free neighbours.
   * Throws ERR_EXTENT_INVALID for an offset this allocator did not hand out,
   * one already freed, or a length that does not match.
   */
  free (extent: Extent): void {
    const length = this.#used.get(extent.offset)
    if (length === undefined) {
      throw new AgentError('ERR_EXTENT_INVALID', this.#isFree(extent.offset)
        ? `extent at offset ${extent.offset} is already free (double free)`
        : `offset ${extent.offset} is not the start of an extent of this pool`)
    }
    if (extent.length !== length) {
      throw new AgentError('ERR_EXTENT_INVALID',
        `extent at offset ${extent.offset} has length ${length}, not ${extent.length}`)
    }
    this.#used.delete(extent.offset)
    this.#usedBytes -= length
    let offset = extent.offset
    let merged = length
    const previous = this.#byEnd.get(offset)
    if (previous !== undefined) {
      this.#removeFree(previous)
      offset = previous.offset
      merged += previous.length
    }
    const next = this.#byStart.get(extent.offset + length)
    if (next !== undefined) {
      this.#removeFree(next)
      merged += next.length
    }
    this.#addFree(offset, merged, previous ?? next)
  }

  isAllocated (extent: Extent): boolean {
    return this.#used.get(extent.offset) === extent.length
  }

  report (): FragmentationReport {
    let largest = 0
    for (let s = this.#bySize; s !== undefined; s = s.right) largest = s.length
    let recent = 0
    for (let i = 0; i < Math.min(this.#requestCount, recentRequests); i++) recent = Math.max(recent, this.#requests[i]!)
    const freeBytes = this.totalBytes - this.#usedBytes
    return {
      totalBytes: this.totalBytes,
      usedBytes: this.#usedBytes,
      freeBytes,
      largestFreeBytes: largest,
      freeExtents: this.#byStart.size,
      usedExtents: this.#used.size,
      fragmentation: freeBytes === 0 ? 0 : 1 - largest / freeBytes,
      recentRequestBytes: recent,
      allocationFragmentation: freeBytes === 0 || recent === 0 ? 0 : 1 - bytesAtLeast(this.#bySize, recent) / freeBytes,
    }
  }

  /** The smallest free span that holds `length` bytes at an `align`ed offset (see alignedFitProbes). */
  #fit (length: number, align: number): FreeSpan | undefined {
    let span = ceiling(this.#bySize, length, 0)
    if (align === granuleBytes) return span // every span starts on a granule
    for (let probes = 0; span !== undefined && probes < alignedFitProbes; probes++) {
      if (alignUp(span.offset, align) + length <= span.offset + span.length) return span
      span = ceiling(this.#bySize, span.length, span.offset + 1)
    }
    return span === undefined ? undefined : ceiling(this.#bySize, length + align - granuleBytes, 0)
  }

  /** Adds a free span, reusing `reuse` (a span just removed) for it when given. */
  #addFree (offset: number, length: number, reuse?: FreeSpan): void {
    let span: FreeSpan
    if (reuse === undefined) {
      span = { offset, length, left: undefined, right: undefined, height: 1, subtreeBytes: length }
    } else {
      span = reuse
      span.offset = offset
      span.length = length
      span.height = 1
      span.subtreeBytes = length
    }
    this.#bySize = insertSpan(this.#bySize, span)
    this.#byStart.set(offset, span)
    this.#byEnd.set(offset + length, span)
  }

  #removeFree (span: FreeSpan): void {
    this.#bySize = removeSpan(this.#bySize, span)
    span.left = span.right = undefined
    this.#byStart.delete(span.offset)
    this.#byEnd.delete(span.offset + span.length)
  }

  /** Whether `offset` lies in a free span (error messages only: walks the free spans). */
  #isFree (offset: number): boolean {
    for (const s of this.#byStart.values()) if (offset >= s.offset && offset < s.offset + s.length) return true
    return false
  }
}
