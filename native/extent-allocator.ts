/**
 * Sub-allocation of the pinned host pool: a best-fit free list with
 * coalescing over byte offsets. Pure bookkeeping: the bytes stay in native
 * memory, this only decides which [offset, offset + length) a tensor gets.
 *
 * Extents are multiples of `granuleBytes` (4 KiB) and aligned to at least
 * that; large extents get a larger default alignment (see defaultAlignment)
 * so big tensors start on huge-page / DMA-friendly boundaries. Alignment
 * padding stays in the free list.
 *
 * Cost: allocate scans the free list (O(free extents)); free is a binary
 * search plus an array splice. Free lists stay short (hundreds to thousands
 * of extents) because neighbours always coalesce.
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
  /** 1 - largestFree / free: 0 when all free space is one extent, near 1 when shattered. */
  fragmentation: number
}

/** Alignment used when the caller gives none: 4 KiB, 64 KiB from 1 MiB, 2 MiB from 64 MiB. */
export function defaultAlignment (bytes: number): number {
  if (bytes >= 64 * 2 ** 20) return 2 * 2 ** 20
  if (bytes >= 2 ** 20) return 64 * 2 ** 10
  return granuleBytes
}

function alignUp (value: number, alignment: number): number {
  return Math.ceil(value / alignment) * alignment
}

interface Span {
  offset: number
  length: number
}

export class ExtentAllocator {
  readonly totalBytes: number
  /** Free spans sorted by offset, never adjacent (always coalesced). */
  readonly #free: Span[]
  /** Allocated extents by offset. */
  readonly #used = new Map<number, number>()
  #usedBytes = 0

  /** `totalBytes` is rounded down to the granule. */
  constructor (totalBytes: number) {
    checkBytes(totalBytes, 'totalBytes', granuleBytes)
    this.totalBytes = Math.floor(totalBytes / granuleBytes) * granuleBytes
    this.#free = [{ offset: 0, length: this.totalBytes }]
  }

  /**
   * Reserves `bytes` (rounded up to 4 KiB) at an offset that is a multiple of
   * `alignment` (a power of two; default from defaultAlignment, never below
   * 4 KiB). Throws ERR_POOL_FULL when no free span fits.
   */
  allocate (bytes: number, alignment?: number): Extent {
    checkBytes(bytes, 'bytes', 1)
    const length = alignUp(bytes, granuleBytes)
    const align = Math.max(granuleBytes, checkPowerOfTwo(alignment ?? defaultAlignment(length), 'alignment'))
    let best = -1
    for (let i = 0; i < this.#free.length; i++) {
      const span = this.#free[i]!
      const start = alignUp(span.offset, align)
      if (start + length > span.offset + span.length) continue
      if (best < 0 || span.length < this.#free[best]!.length) best = i
    }
    if (best < 0) {
      const report = this.report()
      throw new AgentError('ERR_POOL_FULL',
        `host pool cannot fit ${length} bytes aligned to ${align}: ${report.freeBytes} bytes free, ` +
        `largest free extent ${report.largestFreeBytes} bytes`, { details: report })
    }
    const span = this.#free[best]!
    const start = alignUp(span.offset, align)
    const pieces: Span[] = []
    if (start > span.offset) pieces.push({ offset: span.offset, length: start - span.offset })
    const end = span.offset + span.length
    if (start + length < end) pieces.push({ offset: start + length, length: end - start - length })
    this.#free.splice(best, 1, ...pieces)
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
      const freed = this.#free.some((s) => extent.offset >= s.offset && extent.offset < s.offset + s.length)
      throw new AgentError('ERR_EXTENT_INVALID', freed
        ? `extent at offset ${extent.offset} is already free (double free)`
        : `offset ${extent.offset} is not the start of an extent of this pool`)
    }
    if (extent.length !== length) {
      throw new AgentError('ERR_EXTENT_INVALID',
        `extent at offset ${extent.offset} has length ${length}, not ${extent.length}`)
    }
    this.#used.delete(extent.offset)
    this.#usedBytes -= length
    this.#insertFree(extent.offset, length)
  }

  isAllocated (extent: Extent): boolean {
    return this.#used.get(extent.offset) === extent.length
  }

  report (): FragmentationReport {
    let largest = 0
    for (const span of this.#free) largest = Math.max(largest, span.length)
    const freeBytes = this.totalBytes - this.#usedBytes
    return {
      totalBytes: this.totalBytes,
      usedBytes: this.#usedBytes,
      freeBytes,
      largestFreeBytes: largest,
      freeExtents: this.#free.length,
      usedExtents: this.#used.size,
      fragmentation: freeBytes === 0 ? 0 : 1 - largest / freeBytes,
    }
  }

  #insertFree (offset: number, length: number): void {
    const free = this.#free
    let lo = 0
    let hi = free.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (free[mid]!.offset < offset) lo = mid + 1
      else hi = mid
    }
    const before = free[lo - 1]
    const after = free[lo]
    const joinsBefore = before !== undefined && before.offset + before.length === offset
    const joinsAfter = after !== undefined && offset + length === after.offset
    if (joinsBefore && joinsAfter) {
      before.length += length + after.length
      free.splice(lo, 1)
    } else if (joinsBefore) {
      before.length += length
    } else if (joinsAfter) {
      after.offset = offset
      after.length += length
    } else {
      free.splice(lo, 0, { offset, length })
    }
  }
}
