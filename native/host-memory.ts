/**
 * Host memory the agent copies between: the pinned pool and mapped
 * shared-memory objects. A HostRange names bytes of one of them; the bytes
 * themselves never leave native memory unless a caller asks for a view.
 */
import type { NativeRegion } from './native-binding.ts'
import { checkBytes, checkRange } from './native-error.ts'

export interface HostMemory {
  /** The addon's handle; only native/ modules pass it on. */
  readonly region: NativeRegion
  readonly sizeBytes: number
  /** For messages: "host pool", "shm psm_1234". */
  readonly label: string
  /**
   * A Buffer over [offset, offset + length) (no copy), already checked to lie
   * inside. The host pool hands out subarrays of one Buffer over the whole
   * pool: every fresh external Buffer counts as new external memory to V8, and
   * a view per 4 MiB reply made the weight server spend most of its CPU in
   * full garbage collections.
   */
  viewBytes (offset: number, length: number): Buffer
}

/** [offset, offset + length) of `memory`, in bytes. */
export interface HostRange {
  readonly memory: HostMemory
  readonly offset: number
  readonly length: number
}

/** Validates the numbers of a range and that it lies inside its memory. */
export function checkHostRange (range: HostRange, what: string): void {
  checkBytes(range.offset, `${what}.offset`)
  checkBytes(range.length, `${what}.length`)
  checkRange(range.offset, range.length, range.memory.sizeBytes, `${what} (${range.memory.label})`)
}
