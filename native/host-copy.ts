/**
 * Bulk host-to-host copies and checksums, on native threads. The promise
 * settles when the bytes are in place (PlexRL §5.3: synchronous semantics
 * for the client).
 */
import { AgentError } from '../agent/errors.ts'
import { checkHostRange, type HostRange } from './host-memory.ts'
import type { NativeBinding } from './native-binding.ts'
import { awaitNative, checkInteger } from './native-error.ts'

export interface ThreadOptions {
  /** Native threads to split the work across; 0 (default) = one per core. */
  threads?: number
}

/** Copies src into dst (equal lengths, no overlap). */
export async function copyHostRange (binding: NativeBinding, dst: HostRange, src: HostRange,
  options: ThreadOptions = {}): Promise<void> {
  checkHostRange(dst, 'dst')
  checkHostRange(src, 'src')
  if (dst.length !== src.length) {
    throw new AgentError('ERR_ARG_INVALID', `dst.length ${dst.length} differs from src.length ${src.length}`)
  }
  const threads = checkInteger(options.threads ?? 0, 'threads', 0, 1024)
  await awaitNative(() => binding.copyHost(dst.memory.region, dst.offset, src.memory.region, src.offset,
    src.length, threads))
}

/** One plain single-threaded memcpy of the same bytes: the copy benchmark's baseline. */
export async function memcpyBaseline (binding: NativeBinding, dst: HostRange, src: HostRange): Promise<void> {
  await copyHostRange(binding, dst, src, { threads: 1 })
}

/** CRC-32C of a range, as an unsigned 32-bit integer. */
export async function checksumHostRange (binding: NativeBinding, range: HostRange,
  options: ThreadOptions = {}): Promise<number> {
  checkHostRange(range, 'range')
  const threads = checkInteger(options.threads ?? 0, 'threads', 0, 1024)
  return await awaitNative(() => binding.checksumRegion(range.memory.region, range.offset, range.length, threads))
}

/** CRC-32C of bytes held by JavaScript (computed off the event loop). */
export async function checksumBytes (binding: NativeBinding, bytes: Uint8Array): Promise<number> {
  if (!(bytes instanceof Uint8Array)) throw new AgentError('ERR_ARG_INVALID', 'bytes must be a Uint8Array')
  return await awaitNative(() => binding.checksumBuffer(bytes))
}
