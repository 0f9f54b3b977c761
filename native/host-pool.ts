/**
 * The pinned host pool (DESIGN: StateManager host tier): one native
 * reservation made at start (mmap, huge pages when available, pre-faulted,
 * mlock, cudaHostRegister in chunks when CUDA is usable), sub-allocated into
 * aligned extents by an ExtentAllocator that lives here in TypeScript.
 */
import { AgentError } from '../core/errors.ts'
import { ExtentAllocator, type Extent, type FragmentationReport } from './extent-allocator.ts'
import type { HostMemory, HostRange } from './host-memory.ts'
import type { NativeBinding, NativeRegion, NativeRegionInfo } from './native-binding.ts'
import { awaitNative, callNative, checkBytes, checkPowerOfTwo, checkRange } from './native-error.ts'

export interface HostPoolOptions {
  /** Bytes to reserve; rounded down to 4 KiB for allocation. */
  sizeBytes: number
  /** Try MAP_HUGETLB first, then transparent huge pages. Default true. */
  hugePages?: boolean
  /** mlock the pool (checked against RLIMIT_MEMLOCK first). Default true. */
  lock?: boolean
  /** cudaHostRegister the pool when a CUDA device is usable. Default true. */
  registerCuda?: boolean
  /** Bytes per cudaHostRegister call, a power of two. Default 4 GiB. */
  cudaRegistrationChunkBytes?: number
}

export type HostPoolInfo = Extract<NativeRegionInfo, { kind: 'hostPool' }>

export interface HostPool extends HostMemory {
  /** Reserves an extent of `bytes` (see ExtentAllocator.allocate). */
  allocate (bytes: number, options?: { alignment?: number }): Extent
  /** Returns an extent; ERR_EXTENT_INVALID for a double free or foreign extent. */
  free (extent: Extent): void
  /** The range of an allocated extent, optionally a sub-range of it. */
  range (extent: Extent, offset?: number, length?: number): HostRange
  /** A Buffer over an allocated extent's bytes (no copy), for the few places JS must read them. */
  view (extent: Extent): Buffer
  fragmentation (): FragmentationReport
  info (): HostPoolInfo
  /** Releases the pool once in-flight operations and views are done. Idempotent. */
  close (): void
}

class PinnedHostPool implements HostPool {
  readonly region: NativeRegion
  readonly sizeBytes: number
  readonly label = 'host pool'
  readonly #allocator: ExtentAllocator
  #whole: Buffer | undefined

  constructor (region: NativeRegion, sizeBytes: number) {
    this.region = region
    this.sizeBytes = sizeBytes
    this.#allocator = new ExtentAllocator(sizeBytes)
  }

  allocate (bytes: number, options: { alignment?: number } = {}): Extent {
    return this.#allocator.allocate(bytes, options.alignment)
  }

  free (extent: Extent): void {
    this.#allocator.free(extent)
  }

  range (extent: Extent, offset = 0, length = extent.length - offset): HostRange {
    this.#checkAllocated(extent)
    checkBytes(offset, 'offset')
    checkBytes(length, 'length')
    checkRange(offset, length, extent.length, 'extent')
    return { memory: this, offset: extent.offset + offset, length }
  }

  view (extent: Extent): Buffer {
    this.#checkAllocated(extent)
    return this.viewBytes(extent.offset, extent.length)
  }

  viewBytes (offset: number, length: number): Buffer {
    // One view over the pool for its lifetime (it lives as long as the agent).
    this.#whole ??= callNative(() => this.region.view(0, this.sizeBytes))
    return this.#whole.subarray(offset, offset + length)
  }

  fragmentation (): FragmentationReport {
    return this.#allocator.report()
  }

  info (): HostPoolInfo {
    return callNative(() => this.region.info()) as HostPoolInfo
  }

  close (): void {
    this.#whole = undefined // views handed out keep the mapping; new ones fail with the region
    this.region.close()
  }

  #checkAllocated (extent: Extent): void {
    if (!this.#allocator.isAllocated(extent)) {
      throw new AgentError('ERR_EXTENT_INVALID', `no allocated extent at offset ${extent.offset} of length ${extent.length}`)
    }
  }
}

/** Reserves the pool off the event loop (pre-faulting large pools takes a while). */
export async function createHostPool (binding: NativeBinding, options: HostPoolOptions): Promise<HostPool> {
  const sizeBytes = checkBytes(options.sizeBytes, 'sizeBytes', 4096)
  const chunk = checkPowerOfTwo(checkBytes(options.cudaRegistrationChunkBytes ?? 2 ** 32,
    'cudaRegistrationChunkBytes', 2 ** 20), 'cudaRegistrationChunkBytes')
  const region = await awaitNative(() => binding.createHostPool(sizeBytes, options.hugePages ?? true,
    options.lock ?? true, options.registerCuda ?? true, chunk))
  return new PinnedHostPool(region, sizeBytes)
}
