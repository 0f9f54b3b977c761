/**
 * Files of the NVMe tier. Opened with O_DIRECT where the filesystem supports
 * it (alignment from statx STATX_DIOALIGN, else the block size, never below
 * 4096); on a filesystem without O_DIRECT (tmpfs) the file uses buffered I/O,
 * and `info().directIo` / `directIoReason` say so. Transfers move bytes
 * straight between a host range and the file, `queueDepth` chunks in flight on
 * native I/O threads; an unaligned head or tail goes through a bounce buffer
 * (read-modify-write for writes), so any offset and length work.
 */
import { AgentError } from '../core/errors.ts'
import { checkHostRange, type HostRange } from './host-memory.ts'
import type { NativeBinding, NativeFile, NativeFileInfo, NativeTransferResult } from './native-binding.ts'
import { awaitNative, callNative, checkBytes, checkInteger } from './native-error.ts'

export interface TransferOptions {
  /** Chunks in flight at once, 1..64. Default 8. */
  queueDepth?: number
  /** Bytes per chunk; rounded up to a multiple of the file's alignment. Default 1 MiB. */
  blockBytes?: number
  /** fdatasync before the promise settles (writes). Default false. */
  sync?: boolean
}

export interface DirectFile {
  readonly path: string
  info (): NativeFileInfo
  /** Writes `src` at byte `fileOffset` of the file. */
  write (src: HostRange, fileOffset: number, options?: TransferOptions): Promise<NativeTransferResult>
  /** Reads `dst.length` bytes at `fileOffset` into `dst`; ERR_OUT_OF_RANGE past the end of the file. */
  read (dst: HostRange, fileOffset: number, options?: TransferOptions): Promise<NativeTransferResult>
  /** fdatasync. */
  sync (): Promise<void>
  /** Closes once in-flight transfers are done. Idempotent. */
  close (): void
}

export interface OpenFileOptions {
  /** Open read-write. Default false. */
  write?: boolean
  /** Create when missing (implies write). Default false. */
  create?: boolean
  /** Try O_DIRECT; false forces buffered I/O (configuration beats detection). Default true. */
  directIo?: boolean
}

const defaultQueueDepth = 8
const defaultBlockBytes = 2 ** 20

class NativeDirectFile implements DirectFile {
  readonly path: string
  readonly #file: NativeFile
  readonly #alignment: number

  constructor (path: string, file: NativeFile) {
    this.path = path
    this.#file = file
    this.#alignment = file.info().alignment
  }

  info (): NativeFileInfo {
    return callNative(() => this.#file.info())
  }

  async write (src: HostRange, fileOffset: number, options: TransferOptions = {}): Promise<NativeTransferResult> {
    return await this.#transfer('write', src, fileOffset, options)
  }

  async read (dst: HostRange, fileOffset: number, options: TransferOptions = {}): Promise<NativeTransferResult> {
    return await this.#transfer('read', dst, fileOffset, options)
  }

  async sync (): Promise<void> {
    await awaitNative(() => this.#file.sync())
  }

  close (): void {
    this.#file.close()
  }

  async #transfer (op: 'read' | 'write', range: HostRange, fileOffset: number,
    options: TransferOptions): Promise<NativeTransferResult> {
    checkHostRange(range, op === 'read' ? 'dst' : 'src')
    checkBytes(fileOffset, 'fileOffset')
    const queueDepth = checkInteger(options.queueDepth ?? defaultQueueDepth, 'queueDepth', 1, 64)
    const requested = checkBytes(options.blockBytes ?? defaultBlockBytes, 'blockBytes', 1)
    const blockBytes = Math.ceil(requested / this.#alignment) * this.#alignment
    const sync = options.sync ?? false
    return await awaitNative(() => this.#file[op](range.memory.region, range.offset, fileOffset, range.length,
      queueDepth, blockBytes, sync))
  }
}

export function openDirectFile (binding: NativeBinding, path: string, options: OpenFileOptions = {}): DirectFile {
  if (typeof path !== 'string' || path.length === 0 || path.includes('\0')) {
    throw new AgentError('ERR_ARG_INVALID', `invalid file path ${JSON.stringify(path)}`)
  }
  const create = options.create ?? false
  const file = callNative(() => binding.openFile(path, (options.write ?? false) || create, create,
    options.directIo ?? true))
  return new NativeDirectFile(path, file)
}
