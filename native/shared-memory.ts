/**
 * POSIX shared-memory objects named by clients (/dev/shm/<name>, as made by
 * Python's multiprocessing.shared_memory or shm_open). Mapped whole,
 * read-write; every range is checked against the object's real size.
 */
import { AgentError } from '../core/errors.ts'
import type { HostMemory, HostRange } from './host-memory.ts'
import type { NativeBinding, NativeRegion } from './native-binding.ts'
import { callNative, checkBytes, checkRange } from './native-error.ts'

export interface SharedMemoryObject extends HostMemory {
  /** The name without a leading slash. */
  readonly name: string
  /** [offset, offset + length) of the object; ERR_OUT_OF_RANGE past its end. */
  range (offset: number, length: number): HostRange
  /** A Buffer over a range of the object (no copy). */
  view (offset: number, length: number): Buffer
  /** Unmaps once in-flight operations and views are done. Idempotent. */
  close (): void
}

/** Accepts "psm_1f2e" or "/psm_1f2e"; rejects names shm_open would not. */
export function normalizeShmName (name: unknown): string {
  const bare = typeof name === 'string' && name.startsWith('/') ? name.slice(1) : name
  if (typeof bare !== 'string' || bare.length === 0 || bare.length > 255 || /[/\0]/.test(bare) ||
    bare === '.' || bare === '..') {
    throw new AgentError('ERR_ARG_INVALID', `invalid shared-memory name ${JSON.stringify(name)}`)
  }
  return bare
}

class MappedSharedMemory implements SharedMemoryObject {
  readonly region: NativeRegion
  readonly name: string
  readonly sizeBytes: number
  readonly label: string

  constructor (region: NativeRegion, name: string, sizeBytes: number) {
    this.region = region
    this.name = name
    this.sizeBytes = sizeBytes
    this.label = `shm ${name}`
  }

  range (offset: number, length: number): HostRange {
    checkBytes(offset, 'offset')
    checkBytes(length, 'length')
    checkRange(offset, length, this.sizeBytes, this.label)
    return { memory: this, offset, length }
  }

  view (offset: number, length: number): Buffer {
    const range = this.range(offset, length)
    return this.viewBytes(range.offset, range.length)
  }

  viewBytes (offset: number, length: number): Buffer {
    // Not cached: a mapping that is closed should not outlive its last view by much.
    return callNative(() => this.region.view(offset, length))
  }

  close (): void {
    this.region.close()
  }
}

/**
 * Maps /dev/shm/<name>. ERR_SHM_NOT_FOUND when it does not exist,
 * ERR_SHM_TOO_SMALL when it has fewer than `minBytes` bytes (or none).
 */
export function openSharedMemory (binding: NativeBinding, name: string,
  options: { minBytes?: number } = {}): SharedMemoryObject {
  const bare = normalizeShmName(name)
  const minBytes = checkBytes(options.minBytes ?? 1, 'minBytes')
  const region = callNative(() => binding.openSharedMemory(bare, minBytes))
  const info = callNative(() => region.info())
  return new MappedSharedMemory(region, bare, info.bytes)
}
