/**
 * Bulk host-to-host copies and checksums, on native threads. The promise
 * settles when the bytes are in place (PlexRL §5.3: synchronous semantics
 * for the client).
 */
import { AgentError } from '../core/errors.ts'
import { checkHostRange, type HostRange } from './host-memory.ts'
import type { NativeBinding } from './native-binding.ts'
import { awaitNative, checkInteger } from './native-error.ts'

export interface ThreadOptions {
  /** Native threads to split the work across; 0 (default) = one per core. */
  threads?: number
}

/**
 * Copies at most this many bytes on the calling thread: a memcpy this small
 * takes less than handing it to a native thread and back (~50-150 µs), and
 * a worker's state is mostly small tensors (biases, norms, counters).
 */
export const inlineCopyBytes = 256 * 1024

/** Copies src into dst (equal lengths, no overlap). */
export async function copyHostRange (binding: NativeBinding, dst: HostRange, src: HostRange,
  options: ThreadOptions = {}): Promise<void> {
  checkHostRange(dst, 'dst')
  checkHostRange(src, 'src')
  if (dst.length !== src.length) {
    throw new AgentError('ERR_ARG_INVALID', `dst.length ${dst.length} differs from src.length ${src.length}`)
  }
  if (src.length <= inlineCopyBytes) {
    const overlap = dst.memory.region === src.memory.region && dst.offset < src.offset + src.length && src.offset < dst.offset + dst.length
    if (overlap && src.length > 0) throw new AgentError('ERR_ARG_INVALID', 'source and destination ranges overlap')
    src.memory.viewBytes(src.offset, src.length).copy(dst.memory.viewBytes(dst.offset, dst.length))
    return
  }
  const threads = checkInteger(options.threads ?? 0, 'threads', 0, 1024)
  await awaitNative(() => binding.copyHost(dst.memory.region, dst.offset, src.memory.region, src.offset,
    src.length, threads))
}

/** A strided gather: `runs` runs of `runBytes` bytes, `srcStride` bytes apart from src.offset, into dst (runs × runBytes long). */
export interface GatherShape { runBytes: number, runs: number, srcStride: number }

export async function gatherHostRuns (binding: NativeBinding, dst: HostRange, src: HostRange, shape: GatherShape,
  options: ThreadOptions = {}): Promise<void> {
  checkHostRange(dst, 'dst')
  checkHostRange(src, 'src')
  const runBytes = checkInteger(shape.runBytes, 'runBytes', 1, Number.MAX_SAFE_INTEGER)
  const runs = checkInteger(shape.runs, 'runs', 1, Number.MAX_SAFE_INTEGER)
  const srcStride = checkInteger(shape.srcStride, 'srcStride', runBytes, Number.MAX_SAFE_INTEGER)
  if (dst.length !== runBytes * runs) throw new AgentError('ERR_ARG_INVALID', `dst.length ${dst.length} differs from runs × runBytes ${runBytes * runs}`)
  if (src.length < srcStride * (runs - 1) + runBytes) throw new AgentError('ERR_ARG_INVALID', `src.length ${src.length} is shorter than the gather's span`)
  const threads = checkInteger(options.threads ?? 0, 'threads', 0, 1024)
  await awaitNative(() => binding.gatherHost(dst.memory.region, dst.offset, src.memory.region, src.offset,
    runBytes, runs, srcStride, threads))
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
